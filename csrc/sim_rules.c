/*
 * sim_rules.c - the sim compiler's op table and the rules of the ops that
 * compute: each MIL op's rule takes its arguments, checks them, infers the
 * type and resolves the parameters for the executor. Here: unary, binary and
 * cast, matmul, softmax and the reductions, const, and sb_statement, which
 * dispatches a statement through the generated table in sim_ops.h (which
 * rule a MIL op gets, and which ops and arguments the ANE compiler rejects).
 * The spatial ops' rules are sim_rules_spatial.c, the data movers'
 * sim_rules_shape.c, quantize and dequantize sim_quant.c; the machinery the rules
 * use is sim_plan.c (sim_build.h).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_files.h"
#include "sim_build.h"

static const char *const A_X[] = {"x", NULL};

static int rule_unary(builder *B, const mil_stmt *st, int kind)
{
    int x = sb_op_start(B, st, A_X);
    if (x < 0)
        return -1;
    sim_value xv_ = B->p->vals[x], *xv = &xv_;
    if (kind != SOP_IDENTITY && sb_need_float(B, st, xv, "x"))
        return -1;
    return sb_op_out(B, st, kind, x, xv->dt, xv->rank, xv->shape) ? 0 : -1;
}

static int is_scalar_const(const sim_value *v) { return v->kind == SV_CONST && v->rank == 0; }

static int rule_binary(builder *B, const mil_stmt *st, int kind)
{
    static const char *const args[] = {"x", "y", NULL};
    int x = sb_op_start(B, st, args);
    int y = x < 0 ? -1 : sb_data(B, st, "y", 1);
    if (x < 0 || y < 0)
        return -1;
    sim_value xv_ = B->p->vals[x], yv_ = B->p->vals[y], *xv = &xv_, *yv = &yv_;
    if (sb_need_float(B, st, xv, "x") || sb_need_float(B, st, yv, "y"))
        return -1;
    if (xv->dt != yv->dt) {
        sb_err(B, st->line, NULL, "%s: x and y must have the same element type, got %s and %s", st->op,
             mil_dtype_name(xv->dt), mil_dtype_name(yv->dt));
        return -1;
    }
    if ((is_scalar_const(xv) || is_scalar_const(yv)) && !B->scalar_operand_line)
        B->scalar_operand_line = st->line;
    int rank;
    int64_t shape[ANEC_MAX_RANK];
    if (sb_broadcast(B, st, xv, yv, &rank, shape))
        return -1;
    mil_dtype dt = xv->dt;
    sim_op *o = sb_op_out(B, st, kind, x, dt, rank, shape);
    if (!o)
        return -1;
    o->y = y;
    return 0;
}

static int rule_cast(builder *B, const mil_stmt *st, int kind)
{
    static const char *const args[] = {"x", "dtype", NULL};
    int x = sb_op_start(B, st, args);
    if (x < 0)
        return -1;
    sb_param_t pd;
    if (sb_required_param(B, st, "dtype", &pd))
        return -1;
    const char *s = sb_param_str(B, st, "dtype", &pd);
    if (!s)
        return -1;
    mil_dtype dt = MIL_DT_INVALID;
    static const struct { const char *n; mil_dtype d; } T[] = {
        {"fp16", MIL_DT_FP16}, {"fp32", MIL_DT_FP32}, {"int32", MIL_DT_INT32}, {"bool", MIL_DT_BOOL},
        {"int8", MIL_DT_INT8}, {"uint8", MIL_DT_UINT8}};
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (strcmp(T[i].n, s) == 0)
            dt = T[i].d;
    if (dt == MIL_DT_INVALID) {
        sb_err(B, pd.line, NULL, "cast: unsupported dtype \"%s\" (fp16, fp32, int32, bool, int8, uint8)", s);
        return -1;
    }
    sim_value xv_ = B->p->vals[x], *xv = &xv_;
    return sb_op_out(B, st, kind, x, dt, xv->rank, xv->shape) ? 0 : -1;
}


static int rule_matmul(builder *B, const mil_stmt *st, int kind)
{
    static const char *const args[] = {"x", "y", "transpose_x", "transpose_y", NULL};
    if (sb_check_args(B, st, args) || sb_need_results(B, st, 1))
        return -1;
    int flags[2] = {0, 0};
    static const char *const fl[2] = {"transpose_x", "transpose_y"};
    for (int i = 0; i < 2; i++) {
        sb_param_t p;
        if (sb_param(B, st, fl[i], &p))
            return -1;
        if (!p.present)
            continue;
        if (p.inline_lit) {
            sb_err(B, p.line, "ANE-MATMUL-FLAGS",
                 "matmul %s is written inline; the ANE compiler only accepts the transpose flags as named bool consts", fl[i]);
            return -1;
        }
        if (sb_param_bool(B, st, fl[i], &p, &flags[i]))
            return -1;
    }
    int x = sb_data(B, st, "x", 1);
    int y = x < 0 ? -1 : sb_data(B, st, "y", 1);
    if (x < 0 || y < 0)
        return -1;
    sim_value xv_ = B->p->vals[x], yv_ = B->p->vals[y], *xv = &xv_, *yv = &yv_;
    if (sb_need_float(B, st, xv, "x") || sb_need_float(B, st, yv, "y"))
        return -1;
    int xc = xv->kind == SV_CONST || xv->kind == SV_BLOB, yc = yv->kind == SV_CONST || yv->kind == SV_BLOB;
    mil_dtype dt;
    if (xc == yc) {
        if (xv->dt != yv->dt) {
            sb_err(B, st->line, NULL, "matmul: x and y must have the same element type, got %s and %s",
                 mil_dtype_name(xv->dt), mil_dtype_name(yv->dt));
            return -1;
        }
        dt = xv->dt;
    } else {
        dt = xc ? yv->dt : xv->dt;
    }
    if (xv->rank < 1 || yv->rank < 1) {
        sb_err(B, st->line, NULL, "matmul: operands must have rank >= 1");
        return -1;
    }
    int64_t xs[ANEC_MAX_RANK + 1], ys[ANEC_MAX_RANK + 1];
    int xr = xv->rank, yr = yv->rank;
    memcpy(xs, xv->shape, sizeof(int64_t) * (size_t)xr);
    memcpy(ys, yv->shape, sizeof(int64_t) * (size_t)yr);
    int x1 = xr == 1, y1 = yr == 1;
    if (x1) { xs[1] = xs[0]; xs[0] = 1; xr = 2; flags[0] = 0; }
    if (y1) { ys[1] = 1; yr = 2; flags[1] = 0; }
    int64_t M = flags[0] ? xs[xr - 1] : xs[xr - 2], K1 = flags[0] ? xs[xr - 2] : xs[xr - 1];
    int64_t K2 = flags[1] ? ys[yr - 1] : ys[yr - 2], N = flags[1] ? ys[yr - 2] : ys[yr - 1];
    if (K1 != K2) {
        char b1[96], b2[96];
        sb_err(B, st->line, NULL, "matmul: inner dimensions differ (%lld vs %lld) for x %s, y %s, transpose_x=%d, transpose_y=%d",
             (long long)K1, (long long)K2, sb_shape_str(xv->rank, xv->shape, b1, sizeof b1),
             sb_shape_str(yv->rank, yv->shape, b2, sizeof b2), flags[0], flags[1]);
        return -1;
    }
    int br = (xr > yr ? xr : yr) - 2;
    int64_t shape[ANEC_MAX_RANK + 2];
    for (int i = 0; i < br; i++) {
        int ix = i - (br - (xr - 2)), iy = i - (br - (yr - 2));
        int64_t a = ix >= 0 ? xs[ix] : 1, b = iy >= 0 ? ys[iy] : 1;
        if (a != b && a != 1 && b != 1) {
            sb_err(B, st->line, NULL, "matmul: batch dimensions %lld and %lld do not broadcast", (long long)a, (long long)b);
            return -1;
        }
        shape[i] = a > b ? a : b;
    }
    int rank = br;
    if (!x1)
        shape[rank++] = M;
    if (!y1)
        shape[rank++] = N;
    if (rank > ANEC_MAX_RANK) {
        sb_err(B, st->line, NULL, "matmul: result rank too large");
        return -1;
    }
    sim_op *o = sb_op_out(B, st, kind, x, dt, rank, shape);
    if (!o)
        return -1;
    o->y = y;
    o->tx = flags[0];
    o->ty = flags[1];
    return 0;
}

static int rule_softmax(builder *B, const mil_stmt *st, int kind)
{
    static const char *const args[] = {"x", "axis", NULL};
    int x = sb_op_start(B, st, args);
    if (x < 0)
        return -1;
    sim_value xv_ = B->p->vals[x], *xv = &xv_;
    if (sb_need_float(B, st, xv, "x"))
        return -1;
    int64_t axis = -1;
    sb_param_t p;
    if (sb_param(B, st, "axis", &p) || (p.present && sb_param_int(B, st, "axis", &p, &axis)))
        return -1;
    int ax;
    if (sb_norm_axis(B, st, axis, xv->rank, p.present ? p.line : st->line, &ax))
        return -1;
    sim_op *o = sb_op_out(B, st, kind, x, xv->dt, xv->rank, xv->shape);
    if (!o)
        return -1;
    o->axis = ax;
    return 0;
}

static int rule_reduce(builder *B, const mil_stmt *st, int kind)
{
    static const char *const args[] = {"x", "axes", "keep_dims", NULL};
    int x = sb_op_start(B, st, args);
    if (x < 0)
        return -1;
    sim_value xv_ = B->p->vals[x], *xv = &xv_;
    if (sb_need_float(B, st, xv, "x"))
        return -1;
    sb_param_t p;
    int mask = 0, keep = 0;
    if (sb_param(B, st, "axes", &p))
        return -1;
    if (p.present) {
        int64_t axes[ANEC_MAX_RANK];
        size_t n;
        if (sb_param_ints(B, st, "axes", &p, axes, ANEC_MAX_RANK, &n))
            return -1;
        for (size_t i = 0; i < n; i++) {
            int a;
            if (sb_norm_axis(B, st, axes[i], xv->rank, p.line, &a))
                return -1;
            if (mask & (1 << a)) {
                sb_err(B, p.line, NULL, "%s: axis %d given twice", st->op, a);
                return -1;
            }
            mask |= 1 << a;
        }
    } else {
        mask = (1 << xv->rank) - 1;
    }
    sb_param_t pk;
    if (sb_param(B, st, "keep_dims", &pk) || (pk.present && sb_param_bool(B, st, "keep_dims", &pk, &keep)))
        return -1;
    int64_t shape[ANEC_MAX_RANK];
    int rank = 0;
    for (int d = 0; d < xv->rank; d++) {
        if (mask & (1 << d)) {
            if (keep)
                shape[rank++] = 1;
        } else {
            shape[rank++] = xv->shape[d];
        }
    }
    sim_op *o = sb_op_out(B, st, kind, x, xv->dt, rank, shape);
    if (!o)
        return -1;
    o->axes_mask = mask;
    return 0;
}

/* A const makes a value (a literal or a BLOBFILE reference), not a plan step. */
static int rule_const(builder *B, const mil_stmt *st, int kind)
{
    (void)kind;
    if (st->n_args) {
        sb_err(B, st->line, NULL, "const takes no arguments; its value goes in [val = ...]");
        return -1;
    }
    if (sb_need_results(B, st, 1))
        return -1;
    const mil_arg *val = mil_find_attr(st, "val");
    if (!val) {
        sb_err(B, st->line, NULL, "const '%s' has no val attribute", st->results[0].name);
        return -1;
    }
    return sb_literal_value(B, st->results[0].name, &st->results[0].type, &val->val, st->results[0].line, 1) < 0 ? -1 : 0;
}

/* Ops that exist in MIL but that the sim does not execute. */
static const char *const KNOWN_MIL_OPS[] = {
    "linear", "layer_norm", "batch_norm", "instance_norm", "l2_norm", "local_response_norm",
    "scaled_dot_product_attention", "log", "abs", "floor", "ceil", "round", "sign", "sin", "cos", "tan",
    "asin", "acos", "atan", "sinh", "cosh", "atanh", "erf", "square", "inverse", "exp2", "threshold", "clip",
    "maximum", "minimum", "floor_div", "mod", "greater", "greater_equal", "less", "less_equal", "equal",
    "not_equal", "logical_and", "logical_or", "logical_xor", "logical_not", "select", "gather", "gather_nd",
    "gather_along_axis", "scatter", "scatter_nd", "expand_dims", "squeeze", "tile", "reverse", "stack",
    "reduce_min", "reduce_prod", "reduce_l1_norm", "reduce_l2_norm", "reduce_log_sum", "reduce_log_sum_exp",
    "reduce_sum_square", "reduce_argmax", "reduce_argmin", "leaky_relu", "elu", "softplus", "softsign",
    "relu6", "prelu", "hard_sigmoid", "hard_swish", "scaled_tanh", "sigmoid_hard", "linear_activation",
    "thresholded_relu", "softmax_nd", "log_softmax", "l2_pool", "resize_bilinear", "crop", "crop_resize",
    "constexpr_affine_dequantize", "constexpr_blockwise_shift_scale", "constexpr_lut_to_dense",
    "constexpr_sparse_to_dense", "constexpr_cast", "band_part", "cumsum", "topk",
    "argsort", "einsum", "fill", "fill_like", "range_1d", "sliding_windows", "pixel_shuffle",
    "pixel_unshuffle", "space_to_depth", "depth_to_space", "space_to_batch", "batch_to_space", "one_hot",
    "non_zero", "non_maximum_suppression", "shape", "while_loop", "cond", "list_read", "list_write",
    "make_list", "lstm", "gru", "rnn", "read_state", "coreml_update_state", "reshape_like", "slice_update",
    "random_normal", "random_uniform", "random_bernoulli", "random_categorical", "flatten2d", "complex",
    NULL};

typedef int (*sim_rule)(builder *B, const mil_stmt *st, int kind);

/* MIL op -> kernel and rule: the op table (sim_ops.h, generated from anec/ir/ops.py). */
static const struct { const char *op; int kind; sim_rule rule; } RULES[] = {
#define ROW(OP, KIND, RULE) {OP, KIND, rule_##RULE},
    SIM_MIL_OPS(ROW)
#undef ROW
};

static const struct { const char *op, *constraint, *message, *accept; } REJECTED_OPS[] = {
#define ROW(OP, CONSTRAINT, MESSAGE, ACCEPT) {OP, CONSTRAINT, MESSAGE, ACCEPT},
    SIM_REJECTED_OPS(ROW)
#undef ROW
};

static const struct { const char *op, *arg, *constraint, *message; } REJECTED_ARGS[] = {
#define ROW(OP, ARG, CONSTRAINT, MESSAGE) {OP, ARG, CONSTRAINT, MESSAGE},
    SIM_REJECTED_ARGS(ROW)
#undef ROW
};

/* Whether this device accepts a contested op (its switch name, NULL: never). */
static int accepted(const builder *B, const char *name)
{
    if (!name || !B->accept)
        return 0;
    for (const char *const *a = B->accept; *a; a++)
        if (strcmp(*a, name) == 0)
            return 1;
    return 0;
}

int sb_statement(builder *B, const mil_stmt *st)
{
    const char *op = st->op;
    if (strncmp(op, "constexpr_", 10) == 0) /* compressed weights (sim_constexpr.c) */
        return sb_constexpr(B, st);
    for (size_t i = 0; i < sizeof REJECTED_OPS / sizeof REJECTED_OPS[0]; i++)
        if (strcmp(op, REJECTED_OPS[i].op) == 0 && !accepted(B, REJECTED_OPS[i].accept)) {
            sb_err(B, st->line, REJECTED_OPS[i].constraint, "%s", REJECTED_OPS[i].message);
            return -1;
        }
    for (size_t i = 0; i < sizeof RULES / sizeof RULES[0]; i++) {
        if (strcmp(op, RULES[i].op) != 0)
            continue;
        for (size_t j = 0; j < sizeof REJECTED_ARGS / sizeof REJECTED_ARGS[0]; j++) {
            const mil_arg *a = strcmp(op, REJECTED_ARGS[j].op) == 0 ? mil_find_arg(st, REJECTED_ARGS[j].arg) : NULL;
            if (a) {
                sb_err(B, a->line, REJECTED_ARGS[j].constraint, "%s", REJECTED_ARGS[j].message);
                return -1;
            }
        }
        size_t first = B->p->n_ops;
        int rc = RULES[i].rule(B, st, RULES[i].kind);
        for (size_t k = first; k < B->p->n_ops; k++)
            B->p->ops[k].op = RULES[i].op;
        return rc;
    }
    for (const char *const *k = KNOWN_MIL_OPS; *k; k++)
        if (strcmp(*k, op) == 0) {
            sb_err(B, st->line, NULL, "op '%s' is valid MIL but the anec sim does not implement it", op);
            return -1;
        }
    sb_err(B, st->line, NULL, "unknown op '%s'", op);
    return -1;
}
