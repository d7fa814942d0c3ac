/*
 * sim_rules_spatial.c - the sim compiler's rules for the spatial ops: conv
 * and conv_transpose (operands, groups, strides, dilations, padding modes),
 * max_pool and avg_pool, upsample_nearest_neighbor and upsample_bilinear;
 * each checks its arguments and the device's spatial limits
 * (ANE-SPATIAL-LIMITS), infers the output type and resolves the window the
 * executor runs. Dispatched through the op table in sim_rules.c.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_files.h"
#include "sim_build.h"

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

int rule_conv(builder *B, const mil_stmt *st, int kind)
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
int rule_conv_transpose(builder *B, const mil_stmt *st, int kind)
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
int rule_pool(builder *B, const mil_stmt *st, int kind)
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

int rule_upsample_nearest(builder *B, const mil_stmt *st, int kind)
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

int rule_upsample_bilinear(builder *B, const mil_stmt *st, int kind)
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
