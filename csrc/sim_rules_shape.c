/*
 * sim_rules_shape.c - the sim compiler's rules for the ops that move data
 * without arithmetic: reshape, transpose, slice_by_index, slice_by_size,
 * split, pad and concat; each checks its arguments, infers the output types
 * and resolves the strides, offsets and sizes the executor copies with.
 * Dispatched through the op table in sim_rules.c.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_files.h"
#include "sim_build.h"

int rule_reshape(builder *B, const mil_stmt *st, int kind)
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

int rule_transpose(builder *B, const mil_stmt *st, int kind)
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

int rule_slice_by_index(builder *B, const mil_stmt *st, int kind) { return slice_rule(B, st, kind, 0); }

int rule_slice_by_size(builder *B, const mil_stmt *st, int kind) { return slice_rule(B, st, kind, 1); }

int rule_split(builder *B, const mil_stmt *st, int kind)
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

int rule_pad(builder *B, const mil_stmt *st, int kind)
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
int rule_concat(builder *B, const mil_stmt *st, int kind)
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

