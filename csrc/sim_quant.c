/*
 * sim_quant.c - int8 activations: the MIL quantize and dequantize ops (iOS17), their
 * build rules and their kernels.
 *
 *   quantize(input, scale, output_dtype, zero_point?)   fp16/fp32 -> int8/uint8
 *          q = clip(round(input / scale) + zero_point), the quotient in the input's dtype,
 *          rounded half to even (coremltools' np.around), clipped to the output's range;
 *          a NaN quotient gives the zero point
 *   dequantize(input, scale, zero_point?)                int8/uint8 -> the scale's dtype
 *          out = (input - zero_point) * scale, in fp32, rounded to the result's dtype
 *
 * What coremltools' op definitions (iOS17 quantization_ops.py, optimize/_utils.py) accept
 * the sim accepts, strictly and per tensor: the scale a const scalar of the float dtype
 * (the input's for quantize), positive and finite (coremltools refuses 0; a negative, NaN
 * or infinite scale computes nothing meaningful); output_dtype the string "int8" or
 * "uint8"; the zero point, when given, a const scalar of the integer dtype; no axis
 * (coremltools refuses one with scalar parameters; per-channel vectors are not run here).
 * The ops exist from iOS17 on: a func of an older opset (main<ios16>) that uses them is
 * refused. The Python reference is anec/ir/act_quant.py; they agree bit for bit.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp16.h"
#include "sim_build.h"
#include "sim_exec.h"

/* The opset has the iOS17 quantization ops (an unnamed opset is taken as current). */
static int opset_has_quant(builder *B, const mil_stmt *st)
{
    const char *o = B->f ? B->f->opset : NULL;
    if (o && strncmp(o, "ios", 3) == 0 && atoi(o + 3) < 17) {
        sb_err(B, st->line, NULL, "%s is an iOS17 op; func main<%s> does not have it (write <ios17> or later, "
               "e.g. <ios18>)", st->op, o);
        return -1;
    }
    return 0;
}

/* A const scalar argument `name` (a named const or a literal): its value index, or -1 after an error. */
static int const_scalar(builder *B, const mil_stmt *st, const char *name)
{
    int v = sb_data(B, st, name, 1);
    if (v < 0)
        return -1;
    const sim_value *sv = &B->p->vals[v];
    if (sv->kind != SV_CONST) {
        sb_err(B, st->line, NULL, "%s: '%s' must be a const, but '%s' is %s", st->op, name, sv->name,
               sv->kind == SV_BLOB ? "a BLOBFILE tensor" : "computed at run time");
        return -1;
    }
    if (sv->rank != 0) {
        char b[96];
        sb_err(B, st->line, NULL, "%s: '%s' must be a scalar (a per-tensor scale), '%s' is %s; per-channel "
               "vectors are not run by the sim", st->op, name, sv->name, sb_shape_str(sv->rank, sv->shape, b, sizeof b));
        return -1;
    }
    return v;
}

/* The scale: a positive finite scalar of dtype dt, as stored (an fp16 const holds fp16 bits). */
static int read_scale(builder *B, const mil_stmt *st, mil_dtype dt, float *out)
{
    int v = const_scalar(B, st, "scale");
    if (v < 0)
        return -1;
    const sim_value *sv = &B->p->vals[v];
    if (sv->dt != dt) {
        sb_err(B, st->line, NULL, "%s: 'scale' is %s, it must be %s (%s)", st->op, mil_dtype_name(sv->dt),
               mil_dtype_name(dt), strcmp(st->op, "quantize") == 0 ? "the input's dtype" : "fp16 or fp32");
        return -1;
    }
    float s = sv->dt == MIL_DT_FP16 ? anec_f_from_h(((const uint16_t *)sv->cdata)[0]) : ((const float *)sv->cdata)[0];
    if (!(s > 0.0f) || isinf(s)) {
        sb_err(B, st->line, NULL, "%s: scale %g must be positive and finite", st->op, (double)s);
        return -1;
    }
    *out = s;
    return 0;
}

/* The optional zero point: a scalar of the integer dtype dt (0 when absent). */
static int read_zero_point(builder *B, const mil_stmt *st, mil_dtype dt, int *out)
{
    *out = 0;
    if (!mil_find_arg(st, "zero_point"))
        return 0;
    int v = const_scalar(B, st, "zero_point");
    if (v < 0)
        return -1;
    const sim_value *sv = &B->p->vals[v];
    if (sv->dt != dt) {
        sb_err(B, st->line, NULL, "%s: zero_point is %s, it must be %s", st->op, mil_dtype_name(sv->dt),
               mil_dtype_name(dt));
        return -1;
    }
    *out = dt == MIL_DT_INT8 ? ((const int8_t *)sv->cdata)[0] : ((const uint8_t *)sv->cdata)[0];
    return 0;
}

/* What both ops check first: the opset, the arguments, one result, no axis; the input's index. */
static int quant_start(builder *B, const mil_stmt *st, const char *const *args)
{
    if (opset_has_quant(B, st) || sb_check_args(B, st, args) || sb_need_results(B, st, 1))
        return -1;
    if (mil_find_arg(st, "axis")) {
        sb_err(B, st->line, NULL, "%s: axis is only for per-channel scale vectors (coremltools refuses it with "
               "scalar ones), which the sim does not run", st->op);
        return -1;
    }
    int x = sb_data(B, st, "input", 1);
    return x < 0 ? -1 : x;
}

/* What both ops end with: the scale (of dtype scale_dt) and zero point (zero_dt) read and
   checked, then the op with input x's shape and result dtype out_dt. */
static int quant_op(builder *B, const mil_stmt *st, int kind, int x, mil_dtype scale_dt, mil_dtype zero_dt,
                    mil_dtype out_dt)
{
    float scale;
    int zero;
    if (read_scale(B, st, scale_dt, &scale) || read_zero_point(B, st, zero_dt, &zero))
        return -1;
    sim_value xv = B->p->vals[x];
    sim_op *o = sb_op_out(B, st, kind, x, out_dt, xv.rank, xv.shape);
    if (!o)
        return -1;
    o->qscale = scale;
    o->qzero = zero;
    return 0;
}

int rule_quantize(builder *B, const mil_stmt *st, int kind)
{
    static const char *const args[] = {"input", "scale", "output_dtype", "zero_point", "axis", NULL};
    int x = quant_start(B, st, args);
    if (x < 0)
        return -1;
    sim_value xv = B->p->vals[x];
    if (xv.dt != MIL_DT_FP16 && xv.dt != MIL_DT_FP32) {
        sb_err(B, st->line, NULL, "quantize: 'input' must be fp16 or fp32, '%s' is %s", xv.name, mil_dtype_name(xv.dt));
        return -1;
    }
    sb_param_t pd;
    if (sb_required_param(B, st, "output_dtype", &pd))
        return -1;
    const char *s = sb_param_str(B, st, "output_dtype", &pd);
    if (!s)
        return -1;
    mil_dtype dt = strcmp(s, "int8") == 0 ? MIL_DT_INT8 : strcmp(s, "uint8") == 0 ? MIL_DT_UINT8 : MIL_DT_INVALID;
    if (dt == MIL_DT_INVALID) {
        sb_err(B, pd.line, NULL, "quantize: output_dtype \"%s\" is not \"int8\" or \"uint8\"", s);
        return -1;
    }
    return quant_op(B, st, kind, x, xv.dt, dt, dt);
}

int rule_dequantize(builder *B, const mil_stmt *st, int kind)
{
    static const char *const args[] = {"input", "scale", "zero_point", "axis", NULL};
    int x = quant_start(B, st, args);
    if (x < 0)
        return -1;
    sim_value xv = B->p->vals[x];
    if (xv.dt != MIL_DT_INT8 && xv.dt != MIL_DT_UINT8) {
        sb_err(B, st->line, NULL, "dequantize: 'input' must be int8 or uint8, '%s' is %s", xv.name,
               mil_dtype_name(xv.dt));
        return -1;
    }
    int v = const_scalar(B, st, "scale");
    if (v < 0)
        return -1;
    mil_dtype dt = B->p->vals[v].dt;
    if (dt != MIL_DT_FP16 && dt != MIL_DT_FP32) {
        sb_err(B, st->line, NULL, "dequantize: 'scale' must be fp16 or fp32 (the result's dtype), it is %s",
               mil_dtype_name(dt));
        return -1;
    }
    return quant_op(B, st, kind, x, dt, xv.dt, dt);
}

int sim_run_quantize(sim_state *s, const sim_op *o)
{
    const sim_value *xv = &s->plan->vals[o->x], *ov = &s->plan->vals[o->outs[0]];
    const float *x = sim_fview(s, 0, o->x);
    if (!x)
        return ANEC_ENOMEM;
    int half = xv->dt == MIL_DT_FP16, lo = ov->dt == MIL_DT_INT8 ? -128 : 0, hi = ov->dt == MIL_DT_INT8 ? 127 : 255;
    for (size_t i = 0; i < xv->numel; i++) {
        float t = x[i] / o->qscale;
        if (half) /* the quotient in the input's dtype, as coremltools divides */
            t = anec_round_f16(t);
        t = t != t ? 0.0f : nearbyintf(t); /* half to even in the default rounding mode */
        float q = t + (float)o->qzero;
        int v = q < (float)lo ? lo : q > (float)hi ? hi : (int)q;
        if (ov->dt == MIL_DT_INT8)
            ((int8_t *)s->store[o->outs[0]])[i] = (int8_t)v;
        else
            ((uint8_t *)s->store[o->outs[0]])[i] = (uint8_t)v;
    }
    return ANEC_OK;
}

int sim_run_dequantize(sim_state *s, const sim_op *o)
{
    const sim_value *xv = &s->plan->vals[o->x];
    float *r = sim_fout(s, o->outs[0]);
    if (!r)
        return ANEC_ENOMEM;
    const void *q = s->store[o->x];
    for (size_t i = 0; i < xv->numel; i++) {
        int v = xv->dt == MIL_DT_INT8 ? ((const int8_t *)q)[i] : ((const uint8_t *)q)[i];
        r[i] = (float)(v - o->qzero) * o->qscale; /* exact in fp32: 9 bits times 11 */
    }
    sim_commit(s, o->outs[0], r);
    return ANEC_OK;
}
