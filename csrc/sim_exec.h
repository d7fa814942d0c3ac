/*
 * sim_exec.h - what the sim executor's files share (internal): a value's
 * elements as fp32 and back (sim_state.c; fp16 storage rounds every result
 * like the device), the scratch buffers of a state, the weight packing of
 * narrow pointwise products (sim_state.c), the reductions (sim_reduce.c) and
 * quantize/dequantize (sim_quant.c).
 * The kernels and their dispatch are sim_exec.c.
 */
#ifndef ANEC_SIM_EXEC_H
#define ANEC_SIM_EXEC_H

#include <stddef.h>

#include "sim_plan.h"

/* Products at most PACK_MAX_COLS output columns wide never convert their whole weight per
   call (see sim_pack_weights): an fp16 weight is read where it is (as slivers by
   sk_gemm_narrow, or as rows by sk_gemm_rows), an fp32 weight is packed once as fp32 panels. */
#define PACK_MAX_COLS 64

/* Scratch buffer `slot` (0..2) of s with room for n floats, or NULL. */
float *sim_scratch(sim_state *s, int slot, size_t n);
/* n elements of type dt -> fp32, and fp32 -> dt (rounded and clamped like the device). */
void sim_to_float(const void *src, mil_dtype dt, size_t n, float *dst);
void sim_from_float(const float *src, mil_dtype dt, size_t n, void *dst);
/* Value v as fp32 (its storage when fp32, else converted into scratch `slot`). */
const float *sim_fview(sim_state *s, int slot, int v);
/* Where to compute value v in fp32 (its storage or scratch); sim_commit stores it. */
float *sim_fout(sim_state *s, int v);
void sim_commit(sim_state *s, int v, const float *buf);
/* The GEMM element type (SK_F32 / SK_F16) of a MIL dtype. */
int sim_sk_dt(mil_dtype dt);

/* A conv whose product is one GEMM over its input as laid out (1x1, stride 1, no padding). */
int sim_pointwise_conv(const sim_op *o, const sim_value *wv);
/* Such a conv, ungrouped, at most PACK_MAX_COLS output columns wide. */
int sim_narrow_conv(const sim_plan *p, const sim_op *o);
/* Pack the constant weights of the narrow products (on a program's second run since its load). */
void sim_pack_weights(sim_state *s);

/* quantize / dequantize of op o (sim_quant.c). */
int sim_run_quantize(sim_state *s, const sim_op *o);
int sim_run_dequantize(sim_state *s, const sim_op *o);

enum { REDUCE_SUM, REDUCE_MEAN, REDUCE_MAX };
/* reduce_sum / reduce_mean / reduce_max (how) of op o. */
int sim_run_reduce(sim_state *s, const sim_op *o, int how);

#endif /* ANEC_SIM_EXEC_H */
