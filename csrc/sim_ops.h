/*
 * sim_ops.h - the sim's op table (internal): which MIL ops it builds and runs,
 * and which it rejects as the ANE compiler does.
 *
 * GENERATED from the op table (anec/ir/ops.py) by `python -m anec.ir.gen_c`;
 * do not edit by hand (a test fails when this file is stale).
 */
#ifndef ANEC_SIM_OPS_H
#define ANEC_SIM_OPS_H

/* Kernel ids: what a plan step runs (SOP_NONE: a statement that makes a value, not a step). */
enum {
    SOP_NONE = 0,
    SOP_IDENTITY,
    SOP_EXP,
    SOP_SQRT,
    SOP_RELU,
    SOP_TANH,
    SOP_SIGMOID,
    SOP_CAST,
    SOP_CONV,
    SOP_MATMUL,
    SOP_ADD,
    SOP_SUB,
    SOP_MUL,
    SOP_POW,
    SOP_SOFTMAX,
    SOP_REDUCE_SUM,
    SOP_REDUCE_MEAN,
    SOP_REDUCE_MAX,
    SOP_RESHAPE,
    SOP_TRANSPOSE,
    SOP_SLICE,
    SOP_PAD,
    SOP_CONCAT,
    SOP_CONV_TRANSPOSE,
    SOP_MAX_POOL,
    SOP_AVG_POOL,
    SOP_UPSAMPLE_NEAREST,
    SOP_UPSAMPLE_BILINEAR,
    SOP_SILU,
    SOP_DIV,
    SOP_SPLIT,
    SOP_QUANTIZE,
    SOP_DEQUANTIZE,
    SOP_COUNT
};

/* Limits of the spatial ops (kernel, stride, dilation per dim; upsample scale): ANE-SPATIAL-LIMITS,
 * anec.ir.ops.SPATIAL_LIMITS. A padding must be smaller than the kernel extent it pads. */
#define SIM_SPATIAL_MAX_KERNEL 16
#define SIM_SPATIAL_MAX_STRIDE 8
#define SIM_SPATIAL_MAX_DILATION 8
#define SIM_SPATIAL_MAX_SCALE 16

/* MIL op, kernel id, build rule (rule_<rule> in sim_rules.c). */
#define SIM_MIL_OPS(X) \
    X("const", SOP_NONE, const) \
    X("identity", SOP_IDENTITY, unary) \
    X("exp", SOP_EXP, unary) \
    X("sqrt", SOP_SQRT, unary) \
    X("relu", SOP_RELU, unary) \
    X("tanh", SOP_TANH, unary) \
    X("sigmoid", SOP_SIGMOID, unary) \
    X("cast", SOP_CAST, cast) \
    X("conv", SOP_CONV, conv) \
    X("matmul", SOP_MATMUL, matmul) \
    X("add", SOP_ADD, binary) \
    X("sub", SOP_SUB, binary) \
    X("mul", SOP_MUL, binary) \
    X("pow", SOP_POW, binary) \
    X("softmax", SOP_SOFTMAX, softmax) \
    X("reduce_sum", SOP_REDUCE_SUM, reduce) \
    X("reduce_mean", SOP_REDUCE_MEAN, reduce) \
    X("reduce_max", SOP_REDUCE_MAX, reduce) \
    X("reshape", SOP_RESHAPE, reshape) \
    X("transpose", SOP_TRANSPOSE, transpose) \
    X("slice_by_index", SOP_SLICE, slice_by_index) \
    X("pad", SOP_PAD, pad) \
    X("concat", SOP_CONCAT, concat) \
    X("conv", SOP_CONV, conv) \
    X("conv_transpose", SOP_CONV_TRANSPOSE, conv_transpose) \
    X("max_pool", SOP_MAX_POOL, pool) \
    X("avg_pool", SOP_AVG_POOL, pool) \
    X("upsample_nearest_neighbor", SOP_UPSAMPLE_NEAREST, upsample_nearest) \
    X("upsample_bilinear", SOP_UPSAMPLE_BILINEAR, upsample_bilinear) \
    X("silu", SOP_SILU, unary) \
    X("real_div", SOP_DIV, binary) \
    X("slice_by_size", SOP_SLICE, slice_by_size) \
    X("split", SOP_SPLIT, split) \
    X("quantize", SOP_QUANTIZE, quantize) \
    X("dequantize", SOP_DEQUANTIZE, dequantize)

/* Kernel id, kernel (kernel_<kernel> in sim_exec.c: without it, it does not compile). */
#define SIM_KERNELS(X) \
    X(SOP_IDENTITY, identity) \
    X(SOP_EXP, exp) \
    X(SOP_SQRT, sqrt) \
    X(SOP_RELU, relu) \
    X(SOP_TANH, tanh) \
    X(SOP_SIGMOID, sigmoid) \
    X(SOP_CAST, cast) \
    X(SOP_CONV, conv) \
    X(SOP_MATMUL, matmul) \
    X(SOP_ADD, add) \
    X(SOP_SUB, sub) \
    X(SOP_MUL, mul) \
    X(SOP_POW, pow) \
    X(SOP_SOFTMAX, softmax) \
    X(SOP_REDUCE_SUM, reduce_sum) \
    X(SOP_REDUCE_MEAN, reduce_mean) \
    X(SOP_REDUCE_MAX, reduce_max) \
    X(SOP_RESHAPE, reshape) \
    X(SOP_TRANSPOSE, transpose) \
    X(SOP_SLICE, slice) \
    X(SOP_PAD, pad) \
    X(SOP_CONCAT, concat) \
    X(SOP_CONV_TRANSPOSE, conv_transpose) \
    X(SOP_MAX_POOL, max_pool) \
    X(SOP_AVG_POOL, avg_pool) \
    X(SOP_UPSAMPLE_NEAREST, upsample_nearest) \
    X(SOP_UPSAMPLE_BILINEAR, upsample_bilinear) \
    X(SOP_SILU, silu) \
    X(SOP_DIV, div) \
    X(SOP_SPLIT, split) \
    X(SOP_QUANTIZE, quantize) \
    X(SOP_DEQUANTIZE, dequantize)

/* MIL op the ANE compiler rejects, constraint id, message, and the device switch <switch>=accept under which the sim accepts it (contested: NULL if none). */
#define SIM_REJECTED_OPS(X) \
    X("neg", "ANE-NEG", "the ANE has no neg op; multiply by -1 instead", NULL) \
    X("rsqrt", "ANE-RSQRT", "rsqrt is rejected by the ANE compiler; use pow(x, -0.5)", NULL) \
    X("gelu", "ANE-GELU", "gelu is not a MIL op the ANE accepts; use the tanh approximation 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3)))", NULL) \
    X("concat", "ANE-CONCAT", "concat is rejected by the ANE compiler; return the pieces as separate outputs or assemble them on the host", "concat")

/* MIL op, argument the ANE compiler rejects, constraint id, message. */
#define SIM_REJECTED_ARGS(X) \
    X("conv", "bias", "ANE-CONV-BIAS", "the ANE rejects conv with bias=; add the bias with a separate add op")

#endif
