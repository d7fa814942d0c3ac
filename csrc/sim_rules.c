/*
 * sim_rules.c - each MIL op's rule in the sim's compiler: the arguments it
 * takes, what it checks, the type it infers and the parameters it resolves
 * for the executor. Which rule a MIL op gets (and which ops and arguments
 * the ANE compiler rejects) is the generated table in sim_ops.h; the
 * machinery the rules use is in sim_plan.c (see sim_build.h).
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

/* The spatial limits (ANE-SPATIAL-LIMITS, generated into sim_ops.h from the op table): kernel,
   stride and dilation per dimension, and each padding smaller than the kernel extent it pads. */
static int spatial_limits(builder *B, const mil_stmt *st, const int64_t *k, const int64_t *s, const int64_t *d,
                          const int64_t *pads)
{
    for (int a = 0; a < 2; a++) {
        const char *what = NULL;
        long long v = 0, lim = 0;
        int64_t extent = d[a] * (k[a] - 1) + 1;
        if (k[a] > SIM_SPATIAL_MAX_KERNEL)
            what = "kernel size", v = k[a], lim = SIM_SPATIAL_MAX_KERNEL;
        else if (s[a] > SIM_SPATIAL_MAX_STRIDE)
            what = "stride", v = s[a], lim = SIM_SPATIAL_MAX_STRIDE;
        else if (d[a] > SIM_SPATIAL_MAX_DILATION)
            what = "dilation", v = d[a], lim = SIM_SPATIAL_MAX_DILATION;
        if (what) {
            sb_err(B, st->line, "ANE-SPATIAL-LIMITS", "%s '%s': %s %lld in dimension %d exceeds %lld",
                   st->op, st->results[0].name, what, v, a, lim);
            return -1;
        }
        if (pads[2 * a] >= extent || pads[2 * a + 1] >= extent) {
            sb_err(B, st->line, "ANE-SPATIAL-LIMITS", "%s '%s': padding %lld, %lld in dimension %d is not smaller than "
                   "the kernel extent %lld", st->op, st->results[0].name, (long long)pads[2 * a],
                   (long long)pads[2 * a + 1], a, (long long)extent);
            return -1;
        }
    }
    return 0;
}

/* The x of a 2-D spatial statement (pooling, upsampling): its arguments known, x float and of
   rank 4 (what the sim runs, named by ``what`` in the error). x's index, or -1 after an error. */
static int spatial_x(builder *B, const mil_stmt *st, const char *const *args, const char *what, sim_value *xv)
{
    int x = sb_op_start(B, st, args);
    if (x < 0)
        return -1;
    *xv = B->p->vals[x];
    if (sb_need_float(B, st, xv, "x"))
        return -1;
    if (xv->rank != 4) {
        sb_err(B, st->line, NULL, "%s: the sim supports %s, got rank %d", st->op, what, xv->rank);
        return -1;
    }
    return x;
}

/* The operands of a conv or conv_transpose statement: x and a constant weight, both float and
   of rank 4 (the sim runs 2-D convolutions). x's index (the weight's in *w), or -1 after an error. */
static int conv_operands(builder *B, const mil_stmt *st, sim_value *xv, sim_value *wv, int *w)
{
    static const char *const args[] = {"x", "weight", "strides", "pad_type", "pad", "dilations", "groups", NULL};
    int x = sb_op_start(B, st, args);
    *w = x < 0 ? -1 : sb_data(B, st, "weight", 1);
    if (x < 0 || *w < 0)
        return -1;
    *xv = B->p->vals[x];
    *wv = B->p->vals[*w];
    if (sb_need_float(B, st, xv, "x") || sb_need_float(B, st, wv, "weight"))
        return -1;
    if (xv->rank != 4 || wv->rank != 4) {
        sb_err(B, st->line, NULL, "%s: the sim supports 2-D convolution (x and weight of rank 4), got ranks %d and %d",
               st->op, xv->rank, wv->rank);
        return -1;
    }
    return x;
}

static int rule_conv(builder *B, const mil_stmt *st, int kind)
{
    sim_value xv_, wv_, *xv = &xv_, *wv = &wv_;
    int w;
    int x = conv_operands(B, st, xv, wv, &w);
    if (x < 0)
        return -1;
    sb_param_t p;
    int64_t v[4];
    size_t n;
    int64_t strides[2] = {1, 1}, dil[2] = {1, 1}, pads[4] = {0, 0, 0, 0}, groups = 1;
    if (sb_param(B, st, "strides", &p))
        return -1;
    if (p.present && (sb_param_ints(B, st, "strides", &p, v, 2, &n) || n != 2 || v[0] < 1 || v[1] < 1))
        return sb_err(B, p.line, NULL, "conv: strides must be two positive integers"), -1;
    if (p.present)
        strides[0] = v[0], strides[1] = v[1];
    if (sb_param(B, st, "dilations", &p))
        return -1;
    if (p.present && (sb_param_ints(B, st, "dilations", &p, v, 2, &n) || n != 2 || v[0] < 1 || v[1] < 1))
        return sb_err(B, p.line, NULL, "conv: dilations must be two positive integers"), -1;
    if (p.present)
        dil[0] = v[0], dil[1] = v[1];
    if (sb_param(B, st, "groups", &p))
        return -1;
    if (p.present && (sb_param_int(B, st, "groups", &p, &groups) || groups < 1))
        return sb_err(B, p.line, NULL, "conv: groups must be a positive integer"), -1;
    const char *pad_type = "valid";
    if (sb_param(B, st, "pad_type", &p))
        return -1;
    if (p.present && !(pad_type = sb_param_str(B, st, "pad_type", &p)))
        return -1;
    sb_param_t pp;
    if (sb_param(B, st, "pad", &pp))
        return -1;
    if (pp.present && (sb_param_ints(B, st, "pad", &pp, v, 4, &n) || n != 4 || v[0] < 0 || v[1] < 0 || v[2] < 0 || v[3] < 0))
        return sb_err(B, pp.line, NULL, "conv: pad must be four non-negative integers"), -1;
    int64_t N = xv->shape[0], Cin = xv->shape[1], H = xv->shape[2], W = xv->shape[3];
    int64_t Cout = wv->shape[0], kh = wv->shape[2], kw = wv->shape[3];
    if (Cin % groups || Cout % groups || wv->shape[1] != Cin / groups) {
        sb_err(B, st->line, NULL, "conv: x has %lld input channels, groups = %lld, but weight expects %lld per group (weight [%lld, %lld, %lld, %lld])",
             (long long)Cin, (long long)groups, (long long)wv->shape[1], (long long)Cout, (long long)wv->shape[1], (long long)kh, (long long)kw);
        return -1;
    }
    if (Cout > B->lim.max_conv_out_channels) {
        sb_err(B, st->line, "ANE-CONV-CHANNELS", "conv '%s' has %lld output channels, above the limit of %d; split it into chunks",
             st->results[0].name, (long long)Cout, B->lim.max_conv_out_channels);
        return -1;
    }
    int64_t in_sz[2] = {H, W}, k_sz[2] = {kh, kw}, out_sz[2];
    for (int d = 0; d < 2; d++) {
        int64_t ek = dil[d] * (k_sz[d] - 1) + 1;
        int64_t before, after;
        if (strcmp(pad_type, "valid") == 0) {
            before = after = 0;
        } else if (strcmp(pad_type, "custom") == 0) {
            before = pp.present ? v[2 * d] : 0;
            after = pp.present ? v[2 * d + 1] : 0;
        } else if (strcmp(pad_type, "same") == 0 || strcmp(pad_type, "same_lower") == 0) {
            int64_t o = (in_sz[d] + strides[d] - 1) / strides[d];
            int64_t total = (o - 1) * strides[d] + ek - in_sz[d];
            if (total < 0)
                total = 0;
            before = strcmp(pad_type, "same") == 0 ? total / 2 : (total + 1) / 2;
            after = total - before;
        } else {
            sb_err(B, st->line, NULL, "conv: unknown pad_type \"%s\" (valid, same, same_lower, custom)", pad_type);
            return -1;
        }
        int64_t span = in_sz[d] + before + after - ek;
        if (span < 0) {
            sb_err(B, st->line, NULL, "conv: kernel larger than the padded input");
            return -1;
        }
        out_sz[d] = span / strides[d] + 1;
        pads[2 * d] = before;
        pads[2 * d + 1] = after;
    }
    if (spatial_limits(B, st, k_sz, strides, dil, pads))
        return -1;
    int64_t shape[4] = {N, Cout, out_sz[0], out_sz[1]};
    /* the sim computes a non-pointwise conv through a (Cin/groups * kh * kw) x (Ho * Wo) buffer */
    size_t col = 0;
    if (rt_mul_size((size_t)(Cin / groups), (size_t)kh, &col) || rt_mul_size(col, (size_t)kw, &col) ||
        rt_mul_size(col, (size_t)out_sz[0], &col) || rt_mul_size(col, (size_t)out_sz[1], &col) || col > MIL_MAX_NUMEL) {
        sb_err(B, st->line, NULL, "conv: the sim's im2col buffer would have more than 2^34 elements");
        return -1;
    }
    sim_op *o = sb_op_out(B, st, kind, x, xv->dt, 4, shape);
    if (!o)
        return -1;
    o->y = w;
    o->strides[0] = (int)strides[0];
    o->strides[1] = (int)strides[1];
    o->dil[0] = (int)dil[0];
    o->dil[1] = (int)dil[1];
    for (int i = 0; i < 4; i++)
        o->pads[i] = (int)pads[i];
    o->groups = (int)groups;
    return 0;
}

/* strides / dilations (two positive ints, default 1, 1) of the window ops. */
static int window_pair(builder *B, const mil_stmt *st, const char *name, int64_t *out)
{
    sb_param_t p;
    int64_t v[4];
    size_t n;
    out[0] = out[1] = 1;
    if (sb_param(B, st, name, &p))
        return -1;
    if (!p.present)
        return 0;
    if (sb_param_ints(B, st, name, &p, v, 2, &n) || n != 2 || v[0] < 1 || v[1] < 1)
        return sb_err(B, p.line, NULL, "%s: %s must be two positive integers", st->op, name), -1;
    out[0] = v[0];
    out[1] = v[1];
    return 0;
}

/* pad_type "valid" or "custom" (with pad: four non-negative ints) -> top, bottom, left, right. */
static int window_pads(builder *B, const mil_stmt *st, int required, int64_t *pads)
{
    sb_param_t p;
    const char *pad_type = "valid";
    pads[0] = pads[1] = pads[2] = pads[3] = 0;
    if (required ? sb_required_param(B, st, "pad_type", &p) : sb_param(B, st, "pad_type", &p))
        return -1;
    if (p.present && !(pad_type = sb_param_str(B, st, "pad_type", &p)))
        return -1;
    if (strcmp(pad_type, "valid") == 0)
        return 0;
    if (strcmp(pad_type, "custom") != 0) {
        sb_err(B, p.line, NULL, "%s: the sim supports pad_type \"valid\" and \"custom\", got \"%s\"", st->op, pad_type);
        return -1;
    }
    sb_param_t pp;
    size_t n;
    if (sb_param(B, st, "pad", &pp))
        return -1;
    if (pp.present && (sb_param_ints(B, st, "pad", &pp, pads, 4, &n) || n != 4 || pads[0] < 0 || pads[1] < 0 ||
                       pads[2] < 0 || pads[3] < 0))
        return sb_err(B, pp.line, NULL, "%s: pad must be four non-negative integers", st->op), -1;
    return 0;
}

static void set_window(sim_op *o, const int64_t *strides, const int64_t *dil, const int64_t *pads)
{
    for (int a = 0; a < 2; a++) {
        o->strides[a] = (int)strides[a];
        o->dil[a] = (int)dil[a];
    }
    for (int i = 0; i < 4; i++)
        o->pads[i] = (int)pads[i];
}

/* conv_transpose: weight [Cin, Cout/groups, KH, KW]; pad crops the full output. */
static int rule_conv_transpose(builder *B, const mil_stmt *st, int kind)
{
    sim_value xv_, wv_, *xv = &xv_, *wv = &wv_;
    int w;
    int x = conv_operands(B, st, xv, wv, &w);
    if (x < 0)
        return -1;
    int64_t strides[2], dil[2], pads[4], groups = 1;
    sb_param_t p;
    if (window_pair(B, st, "strides", strides) || window_pair(B, st, "dilations", dil) || window_pads(B, st, 0, pads))
        return -1;
    if (sb_param(B, st, "groups", &p))
        return -1;
    if (p.present && (sb_param_int(B, st, "groups", &p, &groups) || groups < 1))
        return sb_err(B, p.line, NULL, "conv_transpose: groups must be a positive integer"), -1;
    int64_t N = xv->shape[0], Cin = xv->shape[1], k[2] = {wv->shape[2], wv->shape[3]};
    if (wv->shape[0] != Cin || Cin % groups) {
        sb_err(B, st->line, NULL, "conv_transpose: x has %lld input channels, groups = %lld, but weight is [%lld, %lld, %lld, %lld] "
               "([Cin, Cout/groups, KH, KW])", (long long)Cin, (long long)groups, (long long)wv->shape[0],
               (long long)wv->shape[1], (long long)k[0], (long long)k[1]);
        return -1;
    }
    int64_t Cout = wv->shape[1] * groups;
    if (Cout > B->lim.max_conv_out_channels || Cin > B->lim.max_conv_out_channels) {
        sb_err(B, st->line, "ANE-CONV-CHANNELS", "conv_transpose '%s' has %lld input and %lld output channels, above the "
               "limit of %d", st->results[0].name, (long long)Cin, (long long)Cout, B->lim.max_conv_out_channels);
        return -1;
    }
    if (spatial_limits(B, st, k, strides, dil, pads))
        return -1;
    int64_t shape[4] = {N, Cout, 0, 0};
    for (int a = 0; a < 2; a++) {
        shape[2 + a] = (xv->shape[2 + a] - 1) * strides[a] + dil[a] * (k[a] - 1) + 1 - pads[2 * a] - pads[2 * a + 1];
        if (shape[2 + a] < 1) {
            sb_err(B, st->line, NULL, "conv_transpose: pad crops the whole output");
            return -1;
        }
    }
    sim_op *o = sb_op_out(B, st, kind, x, xv->dt, 4, shape);
    if (!o)
        return -1;
    o->y = w;
    set_window(o, strides, dil, pads);
    o->groups = (int)groups;
    return 0;
}

/* max_pool / avg_pool: kernel_sizes, strides, pad_type (valid or custom), pad, ceil_mode (false). */
static int rule_pool(builder *B, const mil_stmt *st, int kind)
{
    static const char *const args[] = {"x", "kernel_sizes", "strides", "pad_type", "pad", "ceil_mode",
                                       "exclude_padding_from_average", NULL};
    sim_value xv_, *xv = &xv_;
    int x = spatial_x(B, st, args, "2-D pooling (x of rank 4)", xv);
    if (x < 0)
        return -1;
    sb_param_t p;
    int64_t k[2], strides[2], one[2] = {1, 1}, pads[4];
    size_t n;
    if (sb_required_ints(B, st, "kernel_sizes", &p, k, 2, &n))
        return -1;
    if (n != 2 || k[0] < 1 || k[1] < 1)
        return sb_err(B, p.line, NULL, "%s: kernel_sizes must be two positive integers", st->op), -1;
    if (window_pair(B, st, "strides", strides) || window_pads(B, st, 1, pads))
        return -1;
    int flag = 0;
    if (sb_param(B, st, "ceil_mode", &p) || (p.present && sb_param_bool(B, st, "ceil_mode", &p, &flag)))
        return -1;
    if (flag) {
        sb_err(B, p.line, NULL, "%s: the sim runs ceil_mode = false only (write the extra end padding instead)", st->op);
        return -1;
    }
    if (sb_param(B, st, "exclude_padding_from_average", &p))
        return -1;
    if (p.present && kind != SOP_AVG_POOL) {
        sb_err(B, p.line, NULL, "%s takes no exclude_padding_from_average", st->op);
        return -1;
    }
    if (p.present && sb_param_bool(B, st, "exclude_padding_from_average", &p, &flag))
        return -1;
    if (spatial_limits(B, st, k, strides, one, pads))
        return -1;
    int64_t shape[4] = {xv->shape[0], xv->shape[1], 0, 0};
    for (int a = 0; a < 2; a++) {
        int64_t span = xv->shape[2 + a] + pads[2 * a] + pads[2 * a + 1] - k[a];
        if (0 > span) {
            sb_err(B, st->line, NULL, "%s: kernel larger than the padded input", st->op);
            return -1;
        }
        shape[2 + a] = span / strides[a] + 1;
    }
    sim_op *o = sb_op_out(B, st, kind, x, xv->dt, 4, shape);
    if (!o)
        return -1;
    set_window(o, strides, one, pads);
    o->ksize[0] = (int)k[0];
    o->ksize[1] = (int)k[1];
    o->flag = flag;
    return 0;
}

/* An upsample scale factor: a scalar (int32 or fp32), default 1; *out is its value. */
static int upsample_scale(builder *B, const mil_stmt *st, const char *name, double *out)
{
    sb_param_t p;
    *out = 1.0;
    if (sb_param(B, st, name, &p))
        return -1;
    if (!p.present)
        return 0;
    if (p.n != 1 || p.rank != 0 || !p.num || (p.dt != MIL_DT_INT32 && p.dt != MIL_DT_FP32)) {
        sb_err(B, p.line, NULL, "%s: %s must be an int32 or fp32 scalar", st->op, name);
        return -1;
    }
    *out = p.num[0];
    if (!(*out >= 1.0) || *out > SIM_SPATIAL_MAX_SCALE) {
        sb_err(B, p.line, *out >= 1.0 ? "ANE-SPATIAL-LIMITS" : NULL, "%s: %s %g is outside 1..%d", st->op, name, *out,
               SIM_SPATIAL_MAX_SCALE);
        return -1;
    }
    return 0;
}

static int rule_upsample_nearest(builder *B, const mil_stmt *st, int kind)
{
    static const char *const args[] = {"x", "scale_factor_height", "scale_factor_width", NULL};
    sim_value xv_, *xv = &xv_;
    int x = spatial_x(B, st, args, "x of rank 4", xv);
    if (x < 0)
        return -1;
    double sc[2];
    if (upsample_scale(B, st, "scale_factor_height", &sc[0]) || upsample_scale(B, st, "scale_factor_width", &sc[1]))
        return -1;
    if (sc[0] != floor(sc[0]) || sc[1] != floor(sc[1])) {
        sb_err(B, st->line, NULL, "%s: scale factors must be integers, got %g and %g", st->op, sc[0], sc[1]);
        return -1;
    }
    int64_t shape[4] = {xv->shape[0], xv->shape[1], xv->shape[2] * (int64_t)sc[0], xv->shape[3] * (int64_t)sc[1]};
    sim_op *o = sb_op_out(B, st, kind, x, xv->dt, 4, shape);
    if (!o)
        return -1;
    o->strides[0] = (int)sc[0];
    o->strides[1] = (int)sc[1];
    return 0;
}

static int rule_upsample_bilinear(builder *B, const mil_stmt *st, int kind)
{
    static const char *const args[] = {"x", "scale_factor_height", "scale_factor_width", "align_corners",
                                       "half_pixel_centers", NULL};
    sim_value xv_, *xv = &xv_;
    int x = spatial_x(B, st, args, "x of rank 4", xv);
    if (x < 0)
        return -1;
    double sc[2];
    if (upsample_scale(B, st, "scale_factor_height", &sc[0]) || upsample_scale(B, st, "scale_factor_width", &sc[1]))
        return -1;
    int align = 1, half = -1;
    sb_param_t p;
    if (sb_param(B, st, "align_corners", &p) || (p.present && sb_param_bool(B, st, "align_corners", &p, &align)))
        return -1;
    if (sb_param(B, st, "half_pixel_centers", &p) || (p.present && sb_param_bool(B, st, "half_pixel_centers", &p, &half)))
        return -1;
    if (half >= 0 && half == align) {
        sb_err(B, p.line, NULL, "%s: the sim runs half_pixel_centers = !align_corners only", st->op);
        return -1;
    }
    int64_t shape[4] = {xv->shape[0], xv->shape[1], (int64_t)floor((double)xv->shape[2] * sc[0]),
                        (int64_t)floor((double)xv->shape[3] * sc[1])};
    sim_op *o = sb_op_out(B, st, kind, x, xv->dt, 4, shape);
    if (!o)
        return -1;
    o->flag = align;
    return 0;
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

static int rule_reshape(builder *B, const mil_stmt *st, int kind)
{
    static const char *const args[] = {"x", "shape", NULL};
    int x = sb_op_start(B, st, args);
    if (x < 0)
        return -1;
    sim_value xv_ = B->p->vals[x], *xv = &xv_;
    sb_param_t p;
    int64_t shape[ANEC_MAX_RANK];
    size_t n;
    if (sb_required_ints(B, st, "shape", &p, shape, ANEC_MAX_RANK, &n))
        return -1;
    int neg = -1;
    uint64_t known = 1;
    for (size_t i = 0; i < n; i++) {
        if (shape[i] == -1) {
            if (neg >= 0) {
                sb_err(B, p.line, NULL, "reshape: at most one -1 is allowed in shape");
                return -1;
            }
            neg = (int)i;
            continue;
        }
        if (shape[i] == 0) {
            int src = (int)i - ((int)n - xv->rank);
            if (src < 0 || src >= xv->rank) {
                sb_err(B, p.line, NULL, "reshape: shape[%zu] = 0 has no matching input dimension", i);
                return -1;
            }
            shape[i] = xv->shape[src];
        }
        if (shape[i] < 1) {
            sb_err(B, p.line, NULL, "reshape: invalid dimension %lld", (long long)shape[i]);
            return -1;
        }
        if (known > MIL_MAX_NUMEL / (uint64_t)shape[i]) {
            sb_err(B, p.line, NULL, "reshape: the shape has more than 2^34 elements");
            return -1;
        }
        known *= (uint64_t)shape[i];
    }
    if (neg >= 0) {
        if (known == 0 || xv->numel % known) {
            sb_err(B, p.line, NULL, "reshape: cannot infer -1 for %zu elements", xv->numel);
            return -1;
        }
        shape[neg] = (int64_t)(xv->numel / known);
        known *= (uint64_t)shape[neg];
    }
    if (known != xv->numel) {
        char b1[96], b2[96];
        sb_err(B, p.line, NULL, "reshape: cannot reshape %s (%zu elements) to %s", sb_shape_str(xv->rank, xv->shape, b1, sizeof b1),
             xv->numel, sb_shape_str((int)n, shape, b2, sizeof b2));
        return -1;
    }
    return sb_op_out(B, st, kind, x, xv->dt, (int)n, shape) ? 0 : -1;
}

static int rule_transpose(builder *B, const mil_stmt *st, int kind)
{
    static const char *const args[] = {"x", "perm", NULL};
    int x = sb_op_start(B, st, args);
    if (x < 0)
        return -1;
    sim_value xv_ = B->p->vals[x], *xv = &xv_;
    sb_param_t p;
    int64_t perm[ANEC_MAX_RANK];
    size_t n;
    if (sb_required_ints(B, st, "perm", &p, perm, ANEC_MAX_RANK, &n))
        return -1;
    if ((int)n != xv->rank) {
        sb_err(B, p.line, NULL, "transpose: perm has %zu entries for a rank-%d input", n, xv->rank);
        return -1;
    }
    int seen = 0;
    int64_t shape[ANEC_MAX_RANK];
    int iperm[ANEC_MAX_RANK];
    for (size_t i = 0; i < n; i++) {
        int a;
        if (sb_norm_axis(B, st, perm[i], xv->rank, p.line, &a))
            return -1;
        if (seen & (1 << a)) {
            sb_err(B, p.line, NULL, "transpose: perm is not a permutation");
            return -1;
        }
        seen |= 1 << a;
        iperm[i] = a;
        shape[i] = xv->shape[a];
    }
    sim_op *o = sb_op_out(B, st, kind, x, xv->dt, xv->rank, shape);
    if (!o)
        return -1;
    memcpy(o->perm, iperm, sizeof iperm);
    return 0;
}

/* Python slice semantics per dim; writes start/step and returns the length. */
static int64_t slice_dim(int64_t dim, int64_t b, int64_t e, int64_t s, int bmask, int emask, int64_t *start)
{
    if (s > 0) {
        if (bmask) b = 0;
        else { if (b < 0) b += dim; if (b < 0) b = 0; if (b > dim) b = dim; }
        if (emask) e = dim;
        else { if (e < 0) e += dim; if (e < 0) e = 0; if (e > dim) e = dim; }
        *start = b;
        return e > b ? (e - b + s - 1) / s : 0;
    }
    if (bmask) b = dim - 1;
    else { if (b < 0) b += dim; if (b < -1) b = -1; if (b > dim - 1) b = dim - 1; }
    if (emask) e = -1;
    else { if (e < 0) e += dim; if (e < -1) e = -1; if (e > dim - 1) e = dim - 1; }
    *start = b;
    return b > e ? (b - e + (-s) - 1) / (-s) : 0;
}

static int slice_rule(builder *B, const mil_stmt *st, int kind, int by_size)
{
    static const char *const a1[] = {"x", "begin", "end", "stride", "begin_mask", "end_mask", "squeeze_mask", NULL};
    static const char *const a2[] = {"x", "begin", "size", NULL};
    int x = sb_op_start(B, st, by_size ? a2 : a1);
    if (x < 0)
        return -1;
    sim_value xv_ = B->p->vals[x], *xv = &xv_;
    int rank = xv->rank;
    int64_t begin[ANEC_MAX_RANK], end[ANEC_MAX_RANK], stride[ANEC_MAX_RANK];
    int bmask = 0, emask = 0, smask = 0;
    size_t n;
    sb_param_t p;
    static const char *const req2[2] = {"begin", "end"};
    for (int k = 0; k < 2; k++) {
        const char *nm = k == 0 ? "begin" : (by_size ? "size" : req2[1]);
        if (sb_required_ints(B, st, nm, &p, k == 0 ? begin : end, ANEC_MAX_RANK, &n))
            return -1;
        if ((int)n != rank) {
            sb_err(B, p.line, NULL, "%s: '%s' has %zu entries for a rank-%d input", st->op, nm, n, rank);
            return -1;
        }
    }
    for (int d = 0; d < rank; d++)
        stride[d] = 1;
    if (by_size) {
        for (int d = 0; d < rank; d++) {
            if (begin[d] < 0)
                begin[d] += xv->shape[d];
            if (end[d] == -1) {
                end[d] = xv->shape[d];
            } else {
                if (end[d] < 1) {
                    sb_err(B, st->line, NULL, "slice_by_size: size[%d] = %lld is invalid", d, (long long)end[d]);
                    return -1;
                }
                end[d] += begin[d];
            }
            if (begin[d] < 0 || end[d] > xv->shape[d]) {
                sb_err(B, st->line, NULL, "slice_by_size: window [%lld, %lld) is outside dimension %d of size %lld",
                     (long long)begin[d], (long long)end[d], d, (long long)xv->shape[d]);
                return -1;
            }
        }
    } else {
        if (sb_param(B, st, "stride", &p))
            return -1;
        if (p.present) {
            if (sb_param_ints(B, st, "stride", &p, stride, ANEC_MAX_RANK, &n))
                return -1;
            if ((int)n != rank) {
                sb_err(B, p.line, NULL, "slice_by_index: 'stride' has %zu entries for a rank-%d input", n, rank);
                return -1;
            }
            for (int d = 0; d < rank; d++)
                if (stride[d] == 0) {
                    sb_err(B, p.line, NULL, "slice_by_index: stride must not be 0");
                    return -1;
                }
        }
        static const char *const masks[3] = {"begin_mask", "end_mask", "squeeze_mask"};
        int *mv[3] = {&bmask, &emask, &smask};
        for (int k = 0; k < 3; k++) {
            if (sb_param(B, st, masks[k], &p))
                return -1;
            if (p.present && sb_param_bools(B, st, masks[k], &p, rank, mv[k]))
                return -1;
        }
    }
    int64_t shape[ANEC_MAX_RANK];
    int orank = 0;
    sim_op tmp;
    memset(&tmp, 0, sizeof tmp);
    for (int d = 0; d < rank; d++) {
        int64_t start;
        int64_t len;
        if (smask & (1 << d)) {
            int64_t b = begin[d] < 0 ? begin[d] + xv->shape[d] : begin[d];
            if (b < 0 || b >= xv->shape[d]) {
                sb_err(B, st->line, NULL, "slice_by_index: squeezed index %lld is outside dimension %d", (long long)begin[d], d);
                return -1;
            }
            start = b;
            len = 1;
        } else {
            len = slice_dim(xv->shape[d], begin[d], end[d], stride[d], bmask & (1 << d), emask & (1 << d), &start);
        }
        if (len <= 0) {
            sb_err(B, st->line, NULL, "%s: empty slice along dimension %d", st->op, d);
            return -1;
        }
        tmp.begin[d] = start;
        tmp.stride[d] = stride[d];
        if (!(smask & (1 << d)))
            shape[orank++] = len;
    }
    sim_op *o = sb_op_out(B, st, kind, x, xv->dt, orank, shape);
    if (!o)
        return -1;
    memcpy(o->begin, tmp.begin, sizeof o->begin);
    memcpy(o->stride, tmp.stride, sizeof o->stride);
    o->squeeze_mask = smask;
    return 0;
}

static int rule_slice_by_index(builder *B, const mil_stmt *st, int kind) { return slice_rule(B, st, kind, 0); }

static int rule_slice_by_size(builder *B, const mil_stmt *st, int kind) { return slice_rule(B, st, kind, 1); }

static int rule_split(builder *B, const mil_stmt *st, int kind)
{
    static const char *const args[] = {"x", "axis", "split_sizes", "num_splits", NULL};
    if (sb_check_args(B, st, args))
        return -1;
    int x = sb_data(B, st, "x", 1);
    if (x < 0)
        return -1;
    sim_value xv_ = B->p->vals[x], *xv = &xv_;
    sb_param_t p;
    int64_t axis;
    if (sb_required_param(B, st, "axis", &p))
        return -1;
    int ax;
    if (sb_param_int(B, st, "axis", &p, &axis) || sb_norm_axis(B, st, axis, xv->rank, p.line, &ax))
        return -1;
    int64_t dim = xv->shape[ax];
    sb_param_t ps, pn;
    if (sb_param(B, st, "split_sizes", &ps) || sb_param(B, st, "num_splits", &pn))
        return -1;
    size_t n = 0;
    int64_t *sizes = calloc(st->n_results ? st->n_results : 1, sizeof(int64_t));
    if (!sizes)
        return sb_oom(B), -1;
    if (ps.present) {
        int64_t *tmp = calloc(ps.n ? ps.n : 1, sizeof(int64_t));
        if (!tmp) {
            free(sizes);
            return sb_oom(B), -1;
        }
        if (sb_param_ints(B, st, "split_sizes", &ps, tmp, ps.n, &n)) {
            free(tmp);
            free(sizes);
            return -1;
        }
        int64_t sum = 0;
        for (size_t i = 0; i < n; i++) {
            if (tmp[i] < 1) {
                sb_err(B, ps.line, NULL, "split: split_sizes must be positive");
                free(tmp);
                free(sizes);
                return -1;
            }
            sum += tmp[i];
        }
        if (sum != dim) {
            sb_err(B, ps.line, NULL, "split: split_sizes sum to %lld but dimension %d has size %lld", (long long)sum, ax, (long long)dim);
            free(tmp);
            free(sizes);
            return -1;
        }
        if (n != st->n_results) {
            sb_err(B, st->line, NULL, "split produces %zu results, but %zu are declared", n, st->n_results);
            free(tmp);
            free(sizes);
            return -1;
        }
        memcpy(sizes, tmp, n * sizeof(int64_t));
        free(tmp);
    } else if (pn.present) {
        int64_t k;
        if (sb_param_int(B, st, "num_splits", &pn, &k)) {
            free(sizes);
            return -1;
        }
        if (k < 1 || dim % k) {
            sb_err(B, pn.line, NULL, "split: num_splits = %lld does not divide dimension %d of size %lld", (long long)k, ax, (long long)dim);
            free(sizes);
            return -1;
        }
        if ((size_t)k != st->n_results) {
            sb_err(B, st->line, NULL, "split produces %lld results, but %zu are declared", (long long)k, st->n_results);
            free(sizes);
            return -1;
        }
        n = (size_t)k;
        for (size_t i = 0; i < n; i++)
            sizes[i] = dim / k;
    } else {
        sb_err(B, st->line, NULL, "split needs split_sizes or num_splits");
        free(sizes);
        return -1;
    }
    int *outs = malloc(n * sizeof(int));
    if (!outs) {
        free(sizes);
        return sb_oom(B), -1;
    }
    for (size_t i = 0; i < n; i++) {
        int64_t shape[ANEC_MAX_RANK];
        memcpy(shape, xv->shape, sizeof shape);
        shape[ax] = sizes[i];
        outs[i] = sb_result_value(B, st, i, xv->dt, xv->rank, shape);
        if (outs[i] < 0) {
            free(outs);
            free(sizes);
            return -1;
        }
    }
    sim_op *o = sb_add_op(B, kind, st->line);
    if (!o) {
        free(outs);
        free(sizes);
        return -1;
    }
    o->x = x;
    o->outs = outs;
    o->n_outs = (int)n;
    o->sizes = sizes;
    o->axis = ax;
    return 0;
}

static int rule_pad(builder *B, const mil_stmt *st, int kind)
{
    static const char *const args[] = {"x", "pad", "mode", "constant_val", NULL};
    int x = sb_op_start(B, st, args);
    if (x < 0)
        return -1;
    sim_value xv_ = B->p->vals[x], *xv = &xv_;
    if (sb_need_float(B, st, xv, "x"))
        return -1;
    sb_param_t p;
    int64_t pads[2 * ANEC_MAX_RANK];
    size_t n;
    if (sb_required_ints(B, st, "pad", &p, pads, 2 * ANEC_MAX_RANK, &n))
        return -1;
    if (n % 2 || (int)n > 2 * xv->rank) {
        sb_err(B, p.line, NULL, "pad: 'pad' must have an even number of entries, at most 2 * rank (%d)", 2 * xv->rank);
        return -1;
    }
    sb_param_t pm;
    if (sb_param(B, st, "mode", &pm))
        return -1;
    if (pm.present) {
        const char *m = sb_param_str(B, st, "mode", &pm);
        if (!m)
            return -1;
        if (strcmp(m, "constant") != 0) {
            sb_err(B, pm.line, NULL, "pad: mode \"%s\" is not supported by the sim (constant only)", m);
            return -1;
        }
    }
    double cval = 0;
    sb_param_t pc;
    if (sb_param(B, st, "constant_val", &pc))
        return -1;
    if (pc.present) {
        if (pc.str || pc.n != 1 || !sb_is_float(pc.dt)) {
            sb_err(B, pc.line, NULL, "pad: constant_val must be a float scalar");
            return -1;
        }
        cval = pc.num[0];
    }
    int64_t shape[ANEC_MAX_RANK];
    sim_op tmp;
    memset(&tmp, 0, sizeof tmp);
    memcpy(shape, xv->shape, sizeof shape);
    int first = xv->rank - (int)n / 2;
    for (int d = first; d < xv->rank; d++) {
        int64_t bf = pads[2 * (d - first)], af = pads[2 * (d - first) + 1];
        if (bf < 0 || af < 0) {
            sb_err(B, p.line, NULL, "pad: negative padding is not supported");
            return -1;
        }
        tmp.pad_before[d] = bf;
        shape[d] += bf + af;
    }
    sim_op *o = sb_op_out(B, st, kind, x, xv->dt, xv->rank, shape);
    if (!o)
        return -1;
    memcpy(o->pad_before, tmp.pad_before, sizeof o->pad_before);
    o->pad_value = cval;
    return 0;
}

/* concat(axis, interleave = false, values = (a, b, ...)): a contested op the
   device compiler may reject (ANE-CONCAT); built only for a device that accepts it. */
static int rule_concat(builder *B, const mil_stmt *st, int kind)
{
    static const char *const args[] = {"values", "axis", "interleave", NULL};
    if (sb_check_args(B, st, args) || sb_need_results(B, st, 1))
        return -1;
    const mil_arg *va = mil_find_arg(st, "values");
    if (!va) {
        sb_err(B, st->line, NULL, "concat: missing required argument 'values'");
        return -1;
    }
    if (va->val.kind != MIL_V_TUPLE || va->val.n < 1) {
        sb_err(B, va->line, NULL, "concat: 'values' must be a tuple of tensors, e.g. values = (a, b)");
        return -1;
    }
    size_t n = va->val.n;
    sb_param_t p;
    int64_t axis;
    if (sb_required_param(B, st, "axis", &p) || sb_param_int(B, st, "axis", &p, &axis))
        return -1;
    sb_param_t pi;
    int interleave = 0;
    if (sb_param(B, st, "interleave", &pi) || (pi.present && sb_param_bool(B, st, "interleave", &pi, &interleave)))
        return -1;
    if (interleave) {
        sb_err(B, pi.line, NULL, "concat: interleave = true is not supported by the sim");
        return -1;
    }
    int *ins = malloc(n * sizeof(int));
    int64_t *sizes = malloc(n * sizeof(int64_t));
    if (!ins || !sizes) {
        free(ins);
        free(sizes);
        return sb_oom(B), -1;
    }
    int ax = 0;
    int64_t shape[ANEC_MAX_RANK];
    const sim_value *first = NULL;
    for (size_t i = 0; i < n; i++) {
        int v = sb_tuple_ref(B, st, va, &va->val.items[i]);
        if (v < 0)
            goto fail;
        const sim_value *xv = &B->p->vals[v];
        if (!first) {
            first = xv;
            if (sb_norm_axis(B, st, axis, xv->rank, p.line, &ax))
                goto fail;
            memcpy(shape, xv->shape, sizeof shape);
            shape[ax] = 0;
        } else if (xv->rank != first->rank || xv->dt != first->dt) {
            sb_err(B, va->line, NULL, "concat: values have different types (%s and %s, rank %d and %d)",
                   mil_dtype_name(first->dt), mil_dtype_name(xv->dt), first->rank, xv->rank);
            goto fail;
        } else {
            for (int d = 0; d < xv->rank; d++)
                if (d != ax && xv->shape[d] != first->shape[d]) {
                    char a[96], b[96];
                    sb_err(B, va->line, NULL, "concat: values differ outside axis %d: %s and %s", ax,
                           sb_shape_str(first->rank, first->shape, a, sizeof a),
                           sb_shape_str(xv->rank, xv->shape, b, sizeof b));
                    goto fail;
                }
        }
        ins[i] = v;
        sizes[i] = xv->shape[ax];
        shape[ax] += xv->shape[ax];
    }
    sim_op *o = sb_op_out(B, st, kind, ins[0], first->dt, first->rank, shape);
    if (!o)
        goto fail;
    o->ins = ins;
    o->n_ins = (int)n;
    o->sizes = sizes;
    o->axis = ax;
    return 0;
fail:
    free(ins);
    free(sizes);
    return -1;
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
    "constexpr_sparse_to_dense", "constexpr_cast", "quantize", "dequantize", "band_part", "cumsum", "topk",
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
