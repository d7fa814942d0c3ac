/*
 * sim_build.h - the sim's MIL compiler machinery, shared by its op rules (internal).
 *
 * sim_plan.c holds the machinery: the builder (values, the name table,
 * errors naming the MIL line and the constraint id), the parameter and
 * operand readers, and sim_plan_build, which walks the statements. Each op's
 * rule (checks, type inference, resolved parameters) is in sim_rules.c
 * (elementwise, matmul, softmax, reductions, const and the op table),
 * sim_rules_spatial.c (conv, pooling, upsampling), sim_rules_shape.c or sim_quant.c,
 * dispatched through the op table generated from the Python op table
 * (sim_ops.h).
 */
#ifndef ANEC_SIM_BUILD_H
#define ANEC_SIM_BUILD_H

#include <stddef.h>
#include <stdint.h>

#include "sim_plan.h"

typedef struct builder {
    sim_plan *p;
    size_t cap_vals, cap_ops;
    anec_limits lim;
    const mil_func *f;
    char *err;
    size_t errlen;
    int status;
    int failed;
    /* name -> value index, open addressing */
    int *htab;
    size_t hcap;
    int scalar_operand_line;     /* first elementwise op taking a rank-0 const, 0 if none */
    const char *const *accept;   /* contested MIL ops this device accepts (NULL-terminated), or NULL */
} builder;

/* One non-tensor parameter (strides, axes, ...), resolved from a named const or a literal. */
typedef struct sb_param_t {
    int present;
    int inline_lit;              /* written inline rather than as a named const */
    const double *num;
    size_t n;
    const char *str;
    mil_dtype dt;
    int rank;
    int line;
} sb_param_t;

/* ---- errors (the first one wins; later calls are ignored) ---- */
void sb_err(builder *B, int line, const char *constraint, const char *fmt, ...);
void sb_oom(builder *B);

/* ---- values and plan steps ---- */
sim_op *sb_add_op(builder *B, int kind, int line);
int sb_literal_value(builder *B, const char *name, const mil_type *decl, const mil_value *lit, int line, int named);
int sb_result_value(builder *B, const mil_stmt *st, size_t k, mil_dtype dt, int rank, const int64_t *shape);
sim_op *sb_op_out(builder *B, const mil_stmt *st, int kind, int x, mil_dtype dt, int rank, const int64_t *shape);
const char *sb_shape_str(int rank, const int64_t *shape, char *buf, size_t len);
int sb_is_float(mil_dtype dt);

/* ---- statement arguments ---- */
int sb_param(builder *B, const mil_stmt *st, const char *name, sb_param_t *pv);
int sb_required_param(builder *B, const mil_stmt *st, const char *name, sb_param_t *pv);
int sb_param_ints(builder *B, const mil_stmt *st, const char *name, const sb_param_t *pv, int64_t *out, size_t maxn, size_t *n);
int sb_required_ints(builder *B, const mil_stmt *st, const char *name, sb_param_t *pv, int64_t *out, size_t maxn, size_t *n);
int sb_param_int(builder *B, const mil_stmt *st, const char *name, const sb_param_t *pv, int64_t *out);
int sb_param_bool(builder *B, const mil_stmt *st, const char *name, const sb_param_t *pv, int *out);
int sb_param_bools(builder *B, const mil_stmt *st, const char *name, const sb_param_t *pv, int rank, int *mask);
const char *sb_param_str(builder *B, const mil_stmt *st, const char *name, const sb_param_t *pv);
int sb_data(builder *B, const mil_stmt *st, const char *name, int required);
/* A tuple item that names a tensor value (concat's values): its index, or -1 after an error. */
int sb_tuple_ref(builder *B, const mil_stmt *st, const mil_arg *a, const mil_value *item);
int sb_check_args(builder *B, const mil_stmt *st, const char *const *allowed);
int sb_need_results(builder *B, const mil_stmt *st, size_t n);
int sb_norm_axis(builder *B, const mil_stmt *st, int64_t axis, int rank, int line, int *out);
int sb_broadcast(builder *B, const mil_stmt *st, const sim_value *x, const sim_value *y, int *rank, int64_t *shape);
int sb_need_float(builder *B, const mil_stmt *st, const sim_value *v, const char *arg);
int sb_op_start(builder *B, const mil_stmt *st, const char *const *args);

/* ---- sim_rules_spatial.c, sim_rules_shape.c: rules the op table (sim_rules.c) dispatches to ---- */
int rule_conv(builder *B, const mil_stmt *st, int kind);
int rule_conv_transpose(builder *B, const mil_stmt *st, int kind);
int rule_pool(builder *B, const mil_stmt *st, int kind);
int rule_upsample_nearest(builder *B, const mil_stmt *st, int kind);
int rule_upsample_bilinear(builder *B, const mil_stmt *st, int kind);
int rule_reshape(builder *B, const mil_stmt *st, int kind);
int rule_transpose(builder *B, const mil_stmt *st, int kind);
int rule_slice_by_index(builder *B, const mil_stmt *st, int kind);
int rule_slice_by_size(builder *B, const mil_stmt *st, int kind);
int rule_split(builder *B, const mil_stmt *st, int kind);
int rule_pad(builder *B, const mil_stmt *st, int kind);
int rule_concat(builder *B, const mil_stmt *st, int kind);

/* ---- sim_rules.c ---- */
/* Compile one statement through the op table: its rule, or the rejection the ANE compiler gives. */
int sb_statement(builder *B, const mil_stmt *st);

/* ---- sim_quant.c: quantize and dequantize (int8 activations) ---- */
int rule_quantize(builder *B, const mil_stmt *st, int kind);
int rule_dequantize(builder *B, const mil_stmt *st, int kind);

/* ---- sim_constexpr.c ---- */
/* A constexpr_* statement: a compressed weight, checked now, decompressed at load. */
int sb_constexpr(builder *B, const mil_stmt *st);

#endif
