/*
 * sim_constexpr.c - compressed weights: the MIL constexpr_* ops, checked when the
 * program is compiled and decompressed when it is loaded, exactly as the MIL says.
 *
 *   ios16  constexpr_affine_dequantize(quantized_data, zero_point, scale, axis)
 *          out = scale[c] * (q - zero_point[c]); scale/zero_point scalars or vectors along axis
 *          constexpr_lut_to_dense(indices, lut, shape)
 *          indices: uint8 bytes packing log2(K)-bit indices LSB first; lut [K]; shape uint32
 *   ios18  constexpr_blockwise_shift_scale(data, scale, offset?)
 *          out = scale[blk] * (data - offset[blk]); scale (and offset) of data's rank,
 *          each dim dividing data's (the block size)
 *          constexpr_lut_to_dense(indices, lut)
 *          indices uint1..uint8 in the output shape; lut [g0..g(r-1), 2^bits, 1], each
 *          dim dividing the indices' (the channel groups sharing a table)
 *   sparse constexpr_sparse_to_dense(nonzero_data, mask)            (ios18)
 *          constexpr_sparse_to_dense(nonzero_data, mask, shape)     (ios16)
 *          mask: uint1 in the output shape (ios18) or uint8 bytes, ceil(numel/8), with
 *          the uint32 shape (ios16), bit i (LSB first) set where element i is read from
 *          nonzero_data [D], in order; the set bits must number D, padding bits be 0
 *          constexpr_sparse_blockwise_shift_scale(data_mask, nonzero_data, scale, offset?)
 *          constexpr_lut_to_sparse(indices_mask, indices_nonzero_data, lut)    (ios18)
 *          two results: the mask, and the D values dequantized (value j with the scale or
 *          table of the j-th set bit's element); only constexpr_sparse_to_dense reads them
 *
 * The argument rules follow coremltools' op definitions (iOS16 constexpr_ops.py, iOS18
 * compression.py); what they reject the sim rejects, naming the MIL line. The operands
 * must be consts (BLOBFILE or literal). A constexpr result counts as one weight tensor
 * for the BLOBFILE budget, its payload consts do not (sim_plan.c). At load every
 * payload is read with its declared dtype and packed size (blobfile.c refuses a wrong
 * dtype code, a truncated payload, padding bits that do not match the element count);
 * a sparse mask whose set bits do not number the values is refused then too.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp16.h"
#include "sim_build.h"

/* bits of a sub-byte or byte integer dtype, 0 otherwise */
static int int_bits(mil_dtype dt)
{
    switch (dt) {
    case MIL_DT_UINT1: return 1;
    case MIL_DT_UINT2: return 2;
    case MIL_DT_UINT3: return 3;
    case MIL_DT_UINT4: case MIL_DT_INT4: return 4;
    case MIL_DT_UINT6: return 6;
    case MIL_DT_UINT8: case MIL_DT_INT8: return 8;
    default: return 0;
    }
}

int sim_dtype_subbyte(mil_dtype dt)
{
    int b = int_bits(dt);
    return b > 0 && b < 8;
}

/* An operand that must be a const (BLOBFILE, literal or constexpr result): its index, or -1. */
static int const_operand(builder *B, const mil_stmt *st, const char *name, int required)
{
    int idx = sb_data(B, st, name, required);
    if (idx == -1 && !required)
        return -1;
    if (idx < 0)
        return -2;
    const sim_value *v = &B->p->vals[idx];
    if (v->kind != SV_CONST && v->kind != SV_BLOB) {
        sb_err(B, st->line, NULL, "%s: '%s' must be a const (a BLOBFILE or a literal), but '%s' is computed at run time",
               st->op, name, v->name);
        return -2;
    }
    int sparse_pair = v->dec && v->dec->form >= DEC_MASK_COPY && strcmp(st->op, "constexpr_sparse_to_dense") == 0;
    if (v->dec && !sparse_pair) {
        sb_err(B, st->line, NULL, "%s: '%s' is itself a constexpr result; only constexpr_sparse_to_dense reads one "
               "(of constexpr_sparse_blockwise_shift_scale or constexpr_lut_to_sparse)", st->op, name);
        return -2;
    }
    return idx;
}

static int need_dtype(builder *B, const mil_stmt *st, const char *arg, const sim_value *v, const mil_dtype *ok,
                      const char *list)
{
    for (const mil_dtype *d = ok; *d; d++)
        if (v->dt == *d)
            return 0;
    sb_err(B, st->line, NULL, "%s: '%s' has element type %s, expected one of %s", st->op, arg, mil_dtype_name(v->dt),
           list);
    return -1;
}

/* A result of a constexpr op: a constant made at load (SV_BLOB with its decompression). */
static int constexpr_value(builder *B, const mil_stmt *st, size_t k, const sim_decomp *d, mil_dtype dt, int rank,
                           const int64_t *shape)
{
    int idx = sb_result_value(B, st, k, dt, rank, shape);
    if (idx < 0)
        return -1;
    sim_decomp *copy = malloc(sizeof *copy);
    if (!copy) {
        sb_oom(B);
        return -1;
    }
    *copy = *d;
    B->p->vals[idx].kind = SV_BLOB;
    B->p->vals[idx].dec = copy;
    B->p->n_decomp++;
    return 0;
}

/* The payload consts of a constexpr op: not weight tensors of their own (the budget). */
static void mark_parts(builder *B, const int *parts, int n)
{
    for (int i = 0; i < n; i++)
        if (parts[i] >= 0 && B->p->vals[parts[i]].kind == SV_BLOB && !B->p->vals[parts[i]].part) {
            B->p->vals[parts[i]].part = 1;
            B->p->n_parts++;
        }
}

/* The result: declared type must be what the op produces; a constant weight (SV_BLOB kind). */
static int result(builder *B, const mil_stmt *st, sim_decomp *d, mil_dtype dt, int rank, const int64_t *shape)
{
    if (sb_need_results(B, st, 1))
        return -1;
    if (dt != MIL_DT_FP16 && dt != MIL_DT_FP32) {
        sb_err(B, st->line, NULL, "%s: decompresses to %s; the ANE takes fp16/fp32 weights", st->op, mil_dtype_name(dt));
        return -1;
    }
    /* a constant weight for the ops that read it (conv, matmul) */
    if (constexpr_value(B, st, 0, d, dt, rank, shape))
        return -1;
    int parts[5] = {d->data, d->scale, d->offset, d->lut, d->mask};
    mark_parts(B, parts, 5);
    return 0;
}

static const mil_dtype FLOATS[] = {MIL_DT_FP16, MIL_DT_FP32, 0};

static int rule_affine(builder *B, const mil_stmt *st)
{
    static const char *const args[] = {"quantized_data", "zero_point", "scale", "axis", NULL};
    static const mil_dtype SRC[] = {MIL_DT_UINT8, MIL_DT_INT8, 0};
    static const mil_dtype ZP[] = {MIL_DT_UINT8, MIL_DT_INT8, MIL_DT_FP32, 0};
    if (sb_check_args(B, st, args))
        return -1;
    sim_decomp d = {DEC_AFFINE, -1, -1, -1, -1, 0, 0, -1};
    d.data = const_operand(B, st, "quantized_data", 1);
    d.offset = d.data < 0 ? -2 : const_operand(B, st, "zero_point", 1);
    d.scale = d.offset < 0 ? -2 : const_operand(B, st, "scale", 1);
    if (d.data < 0 || d.offset < 0 || d.scale < 0)
        return -1;
    sb_param_t pa;
    int64_t axis;
    if (sb_required_param(B, st, "axis", &pa) || sb_param_int(B, st, "axis", &pa, &axis))
        return -1;
    const sim_value *q = &B->p->vals[d.data], *zp = &B->p->vals[d.offset], *sc = &B->p->vals[d.scale];
    if (need_dtype(B, st, "quantized_data", q, SRC, "uint8, int8") || need_dtype(B, st, "zero_point", zp, ZP, "uint8, int8, fp32") ||
        need_dtype(B, st, "scale", sc, FLOATS, "fp16, fp32"))
        return -1;
    if (q->rank < 1) {
        sb_err(B, st->line, NULL, "%s: quantized_data must be a tensor", st->op);
        return -1;
    }
    if (sb_norm_axis(B, st, axis, q->rank, pa.line, &d.axis))
        return -1;
    const sim_value *vec[2] = {sc, zp};
    const char *names[2] = {"scale", "zero_point"};
    for (int i = 0; i < 2; i++) {
        if (vec[i]->rank > 1 || (vec[i]->rank == 1 && vec[i]->shape[0] != q->shape[d.axis])) {
            sb_err(B, st->line, NULL, "%s: '%s' must be a scalar or a vector of %lld (the size of axis %d of quantized_data)",
                   st->op, names[i], (long long)q->shape[d.axis], d.axis);
            return -1;
        }
    }
    return result(B, st, &d, sc->dt, q->rank, q->shape);
}

/* The scale (and offset) of a blockwise op over data of dtype dt and shape [rank]: the same
 * rank, each dim dividing the data's (the block size); the offset of the scale's shape. */
static int block_params(builder *B, const mil_stmt *st, mil_dtype dt, int rank, const int64_t *shape,
                        const sim_value *sc, int offset)
{
    static const mil_dtype OFF[] = {MIL_DT_INT4, MIL_DT_UINT4, MIL_DT_INT8, MIL_DT_UINT8, MIL_DT_FP16, MIL_DT_FP32, 0};
    if (rank < 1 || sc->rank != rank) {
        sb_err(B, st->line, NULL, "%s: 'data' and 'scale' need the same rank (at least 1), got %d and %d", st->op, rank,
               sc->rank);
        return -1;
    }
    for (int i = 0; i < rank; i++)
        if (sc->shape[i] <= 0 || shape[i] % sc->shape[i]) {
            sb_err(B, st->line, NULL, "%s: at dim %d 'data' has %lld, which %lld scales do not divide into blocks", st->op,
                   i, (long long)shape[i], (long long)sc->shape[i]);
            return -1;
        }
    if (offset >= 0) {
        const sim_value *off = &B->p->vals[offset];
        if (need_dtype(B, st, "offset", off, OFF, "int4, uint4, int8, uint8, fp16, fp32"))
            return -1;
        int same = off->rank == sc->rank;
        for (int i = 0; same && i < sc->rank; i++)
            same = off->shape[i] == sc->shape[i];
        if (!same) {
            sb_err(B, st->line, NULL, "%s: 'offset' must have the shape of 'scale'", st->op);
            return -1;
        }
        if (!sb_is_float(off->dt) && off->dt != dt) {
            sb_err(B, st->line, NULL, "%s: 'offset' is %s, but an integer offset must have the dtype of 'data' (%s)",
                   st->op, mil_dtype_name(off->dt), mil_dtype_name(dt));
            return -1;
        }
    }
    return 0;
}

static int rule_shift_scale(builder *B, const mil_stmt *st)
{
    static const char *const args[] = {"data", "scale", "offset", NULL};
    static const mil_dtype SRC[] = {MIL_DT_INT4, MIL_DT_UINT4, MIL_DT_INT8, MIL_DT_UINT8, 0};
    if (sb_check_args(B, st, args))
        return -1;
    sim_decomp d = {DEC_SHIFT_SCALE, -1, -1, -1, -1, 0, 0, -1};
    d.data = const_operand(B, st, "data", 1);
    d.scale = d.data < 0 ? -2 : const_operand(B, st, "scale", 1);
    if (d.data < 0 || d.scale < 0)
        return -1;
    d.offset = const_operand(B, st, "offset", 0);
    if (d.offset == -2)
        return -1;
    const sim_value *q = &B->p->vals[d.data], *sc = &B->p->vals[d.scale];
    if (need_dtype(B, st, "data", q, SRC, "int4, uint4, int8, uint8") || need_dtype(B, st, "scale", sc, FLOATS, "fp16, fp32"))
        return -1;
    if (block_params(B, st, q->dt, q->rank, q->shape, sc, d.offset))
        return -1;
    return result(B, st, &d, sc->dt, q->rank, q->shape);
}

/* ios16: the uint32 'shape' param of a packed constexpr op, its rank and element count. */
static int ios16_shape(builder *B, const mil_stmt *st, int64_t *shape, int *rank, uint64_t *numel)
{
    sb_param_t ps;
    size_t r;
    if (sb_required_param(B, st, "shape", &ps))
        return -1;
    if (ps.dt != MIL_DT_UINT32) {
        sb_err(B, st->line, NULL, "%s: 'shape' must be uint32, got %s", st->op, mil_dtype_name(ps.dt));
        return -1;
    }
    if (sb_param_ints(B, st, "shape", &ps, shape, ANEC_MAX_RANK, &r))
        return -1;
    *rank = (int)r;
    *numel = 1;
    for (size_t i = 0; i < r; i++) {
        if (shape[i] <= 0 || (uint64_t)shape[i] > MIL_MAX_NUMEL || *numel > MIL_MAX_NUMEL / (uint64_t)shape[i]) {
            sb_err(B, st->line, NULL, "%s: 'shape' has a dimension out of range", st->op);
            return -1;
        }
        *numel *= (uint64_t)shape[i];
    }
    return 0;
}

/* The lut of an ios18 LUT op over indices of dtype dt in a tensor of shape [rank]: 2 more dims,
 * 2^bits entries, a scalar palette, table dims dividing the tensor's; *bits the index width. */
static int lut_tables(builder *B, const mil_stmt *st, mil_dtype dt, int rank, const int64_t *shape, const sim_value *lut,
                      int *bits)
{
    *bits = int_bits(dt);
    if (!*bits || dt == MIL_DT_INT4 || dt == MIL_DT_INT8) {
        sb_err(B, st->line, NULL, "%s: 'indices' has element type %s, expected one of uint1, uint2, uint3, uint4, uint6, uint8",
               st->op, mil_dtype_name(dt));
        return -1;
    }
    if (rank < 1 || lut->rank != rank + 2) {
        sb_err(B, st->line, NULL, "%s: 'lut' needs 2 more dims than 'indices' (rank %d), got rank %d", st->op, rank,
               lut->rank);
        return -1;
    }
    if (lut->shape[rank] != (int64_t)1 << *bits) {
        sb_err(B, st->line, NULL, "%s: 'indices' are %s (values up to %d), but the lut has %lld entries; indices and lut "
               "must agree (2^bits entries)", st->op, mil_dtype_name(dt), (1 << *bits) - 1, (long long)lut->shape[rank]);
        return -1;
    }
    if (lut->shape[rank + 1] != 1) {
        sb_err(B, st->line, NULL, "%s: the lut's last dim is %lld; vector palettization is not implemented", st->op,
               (long long)lut->shape[rank + 1]);
        return -1;
    }
    for (int i = 0; i < rank; i++)
        if (lut->shape[i] <= 0 || shape[i] % lut->shape[i]) {
            sb_err(B, st->line, NULL, "%s: at dim %d 'indices' has %lld, which %lld tables do not divide", st->op, i,
                   (long long)shape[i], (long long)lut->shape[i]);
            return -1;
        }
    return 0;
}

static int rule_lut(builder *B, const mil_stmt *st)
{
    static const char *const a16[] = {"indices", "lut", "shape", NULL};
    static const char *const a18[] = {"indices", "lut", "vector_axis", NULL};
    int ios16 = mil_find_arg(st, "shape") != NULL;
    if (sb_check_args(B, st, ios16 ? a16 : a18))
        return -1;
    sim_decomp d = {ios16 ? DEC_LUT_PACKED : DEC_LUT, -1, -1, -1, -1, 0, 0, -1};
    d.data = const_operand(B, st, "indices", 1);
    d.lut = d.data < 0 ? -2 : const_operand(B, st, "lut", 1);
    if (d.data < 0 || d.lut < 0)
        return -1;
    const sim_value *ix = &B->p->vals[d.data], *lut = &B->p->vals[d.lut];
    if (need_dtype(B, st, "lut", lut, FLOATS, "fp16, fp32"))
        return -1;
    if (ios16) {
        static const mil_dtype U8[] = {MIL_DT_UINT8, 0};
        int64_t shape[ANEC_MAX_RANK];
        int rank;
        uint64_t numel;
        if (need_dtype(B, st, "indices", ix, U8, "uint8 (packed indices)") || ios16_shape(B, st, shape, &rank, &numel))
            return -1;
        if (ix->rank != 1 || lut->rank != 1) {
            sb_err(B, st->line, NULL, "%s: 'indices' and 'lut' must be vectors", st->op);
            return -1;
        }
        int64_t k = lut->shape[0];
        int bits = k == 2 ? 1 : k == 4 ? 2 : k == 16 ? 4 : k == 64 ? 6 : k == 256 ? 8 : 0;
        if (!bits) {
            sb_err(B, st->line, NULL, "%s: the lut has %lld entries; it must have 2, 4, 16, 64 or 256", st->op, (long long)k);
            return -1;
        }
        uint64_t need = (numel * (uint64_t)bits + 7) / 8;
        if ((uint64_t)ix->shape[0] != need) {
            sb_err(B, st->line, NULL, "%s: %llu %d-bit indices pack into %llu bytes, but 'indices' has %lld", st->op,
                   (unsigned long long)numel, bits, (unsigned long long)need, (long long)ix->shape[0]);
            return -1;
        }
        d.bits = bits;
        d.axis = 0;
        return result(B, st, &d, lut->dt, rank, shape);
    }
    if (mil_find_arg(st, "vector_axis")) {
        sb_err(B, st->line, NULL, "%s: vector palettization (vector_axis) is valid MIL but the anec sim does not implement it",
               st->op);
        return -1;
    }
    int bits;
    if (lut_tables(B, st, ix->dt, ix->rank, ix->shape, lut, &bits))
        return -1;
    d.bits = bits;
    return result(B, st, &d, lut->dt, ix->rank, ix->shape);
}

static int rule_sparse(builder *B, const mil_stmt *st)
{
    static const char *const a16[] = {"nonzero_data", "mask", "shape", NULL};
    static const char *const a18[] = {"nonzero_data", "mask", NULL};
    static const mil_dtype T[] = {MIL_DT_INT4, MIL_DT_UINT4, MIL_DT_INT8, MIL_DT_UINT8, MIL_DT_FP16, MIL_DT_FP32, 0};
    int ios16 = mil_find_arg(st, "shape") != NULL;
    if (sb_check_args(B, st, ios16 ? a16 : a18))
        return -1;
    sim_decomp d = {DEC_SPARSE, -1, -1, -1, -1, 0, 0, -1};
    d.data = const_operand(B, st, "nonzero_data", 1);
    d.mask = d.data < 0 ? -2 : const_operand(B, st, "mask", 1);
    if (d.data < 0 || d.mask < 0)
        return -1;
    const sim_value *nz = &B->p->vals[d.data], *mk = &B->p->vals[d.mask];
    if (need_dtype(B, st, "nonzero_data", nz, T, "int4, uint4, int8, uint8, fp16, fp32"))
        return -1;
    if (nz->rank != 1) {
        sb_err(B, st->line, NULL, "%s: 'nonzero_data' must be a vector (rank 1), got rank %d", st->op, nz->rank);
        return -1;
    }
    int64_t shape[ANEC_MAX_RANK];
    int rank = mk->rank;
    uint64_t numel = 1;
    if (ios16) {
        static const mil_dtype U8[] = {MIL_DT_UINT8, 0};
        if (need_dtype(B, st, "mask", mk, U8, "uint8 (the packed bit mask)") || ios16_shape(B, st, shape, &rank, &numel))
            return -1;
        if (mk->rank != 1) {
            sb_err(B, st->line, NULL, "%s: 'mask' must be a vector of bytes", st->op);
            return -1;
        }
    } else {
        if (mk->dt != MIL_DT_UINT1) {
            sb_err(B, st->line, NULL, "%s: 'mask' has element type %s, expected uint1 (one bit per element)", st->op,
                   mil_dtype_name(mk->dt));
            return -1;
        }
        for (int i = 0; i < rank; i++)
            shape[i] = mk->shape[i];
        numel = mk->numel; /* a declared const type: its dims are checked already */
    }
    if (rank < 1) {
        sb_err(B, st->line, NULL, "%s: the dense tensor must have rank 1 or more", st->op);
        return -1;
    }
    if (ios16 && (uint64_t)mk->shape[0] != (numel + 7) / 8) {
        sb_err(B, st->line, NULL, "%s: %llu elements need a mask of %llu bytes, but 'mask' has %lld", st->op,
               (unsigned long long)numel, (unsigned long long)((numel + 7) / 8), (long long)mk->shape[0]);
        return -1;
    }
    if ((uint64_t)nz->shape[0] > numel) {
        sb_err(B, st->line, NULL, "%s: %lld values for a tensor of %llu elements", st->op, (long long)nz->shape[0],
               (unsigned long long)numel);
        return -1;
    }
    d.bits = 1;
    return result(B, st, &d, nz->dt, rank, shape);
}

/* constexpr_sparse_blockwise_shift_scale(data_mask, nonzero_data, scale, offset?) and
 * constexpr_lut_to_sparse(indices_mask, indices_nonzero_data, lut): the mask and the
 * dequantized values, for a constexpr_sparse_to_dense to make dense. */
static int rule_sparse_pair(builder *B, const mil_stmt *st, int linear)
{
    static const char *const als[] = {"data_mask", "nonzero_data", "scale", "offset", NULL};
    static const char *const alut[] = {"indices_mask", "indices_nonzero_data", "lut", "vector_axis", NULL};
    static const mil_dtype SRC[] = {MIL_DT_INT4, MIL_DT_UINT4, MIL_DT_INT8, MIL_DT_UINT8, 0};
    const char *const *args = linear ? als : alut;
    if (sb_check_args(B, st, args) || sb_need_results(B, st, 2))
        return -1;
    if (!linear && mil_find_arg(st, "vector_axis")) {
        sb_err(B, st->line, NULL, "%s: vector palettization (vector_axis) is valid MIL but the anec sim does not implement it",
               st->op);
        return -1;
    }
    sim_decomp d = {linear ? DEC_SPARSE_SHIFT_SCALE : DEC_LUT_SPARSE, -1, -1, -1, -1, 0, 0, -1};
    d.mask = const_operand(B, st, args[0], 1);
    d.data = d.mask < 0 ? -2 : const_operand(B, st, args[1], 1);
    int third = d.data < 0 ? -2 : const_operand(B, st, args[2], 1);
    if (d.mask < 0 || d.data < 0 || third < 0)
        return -1;
    if (linear) {
        d.scale = third;
        if ((d.offset = const_operand(B, st, "offset", 0)) == -2)
            return -1;
    } else {
        d.lut = third;
    }
    const sim_value *mk = &B->p->vals[d.mask], *nz = &B->p->vals[d.data], *tb = &B->p->vals[third];
    if (mk->dt != MIL_DT_UINT1) {
        sb_err(B, st->line, NULL, "%s: '%s' has element type %s, expected uint1 (one bit per element)", st->op, args[0],
               mil_dtype_name(mk->dt));
        return -1;
    }
    if (nz->rank != 1 || (uint64_t)nz->shape[0] > mk->numel) {
        sb_err(B, st->line, NULL, "%s: '%s' must be a vector of at most %llu values (the mask's elements)", st->op,
               args[1], (unsigned long long)mk->numel);
        return -1;
    }
    if (linear ? need_dtype(B, st, "nonzero_data", nz, SRC, "int4, uint4, int8, uint8") ||
                     need_dtype(B, st, "scale", tb, FLOATS, "fp16, fp32") ||
                     block_params(B, st, nz->dt, mk->rank, mk->shape, tb, d.offset)
               : need_dtype(B, st, "lut", tb, FLOATS, "fp16, fp32") ||
                     lut_tables(B, st, nz->dt, mk->rank, mk->shape, tb, &d.bits))
        return -1;
    sim_decomp mcopy = {DEC_MASK_COPY, -1, -1, -1, -1, 0, 0, d.mask};
    if (constexpr_value(B, st, 0, &mcopy, MIL_DT_UINT1, mk->rank, mk->shape) ||
        constexpr_value(B, st, 1, &d, tb->dt, 1, nz->shape))
        return -1;
    int parts[4] = {d.mask, d.data, third, d.offset};
    mark_parts(B, parts, 4);
    return 0;
}

int sb_constexpr(builder *B, const mil_stmt *st)
{
    if (strcmp(st->op, "constexpr_affine_dequantize") == 0)
        return rule_affine(B, st);
    if (strcmp(st->op, "constexpr_blockwise_shift_scale") == 0)
        return rule_shift_scale(B, st);
    if (strcmp(st->op, "constexpr_lut_to_dense") == 0)
        return rule_lut(B, st);
    if (strcmp(st->op, "constexpr_sparse_to_dense") == 0)
        return rule_sparse(B, st);
    if (strcmp(st->op, "constexpr_sparse_blockwise_shift_scale") == 0 || strcmp(st->op, "constexpr_lut_to_sparse") == 0)
        return rule_sparse_pair(B, st, st->op[10] == 's');
    sb_err(B, st->line, NULL, "op '%s' is valid MIL but the anec sim does not implement it", st->op);
    return -1;
}

/* ---- load --------------------------------------------------------------------------- */

/* Element i of a const operand as a double (sub-byte payloads packed LSB first). */
static double elem(const sim_value *v, const void *data, uint64_t i)
{
    const uint8_t *b = data;
    int bits = int_bits(v->dt);
    if (bits && bits < 8) {
        uint64_t bit = i * (uint64_t)bits;
        unsigned x = 0;
        for (int k = 0; k < bits; k++, bit++)
            x |= (unsigned)((b[bit >> 3] >> (bit & 7)) & 1u) << k;
        if (v->dt == MIL_DT_INT4 && x >= 8)
            return (double)x - 16.0;
        return (double)x;
    }
    switch (v->dt) {
    case MIL_DT_INT8: return ((const int8_t *)data)[i];
    case MIL_DT_UINT8: return b[i];
    case MIL_DT_FP16: return anec_f_from_h(((const uint16_t *)data)[i]);
    case MIL_DT_FP32: return ((const float *)data)[i];
    default: return 0;
    }
}

/* Flat index into a tensor of `small` shape of the block holding flat index i of `big`. */
static uint64_t block_index(const sim_value *big, const sim_value *small, uint64_t i)
{
    uint64_t out = 0, mul = 1;
    for (int d = big->rank - 1; d >= 0; d--) {
        uint64_t dim = (uint64_t)big->shape[d];
        uint64_t c = i % dim;
        i /= dim;
        uint64_t sd = small->rank == big->rank ? (uint64_t)small->shape[d] : 1;
        out += c / (dim / sd) * mul;
        mul *= sd;
    }
    return out;
}

static void put(void *dst, mil_dtype dt, uint64_t i, double v)
{
    if (dt == MIL_DT_FP16)
        ((uint16_t *)dst)[i] = anec_h_from_f((float)v);
    else
        ((float *)dst)[i] = (float)v;
}

/* A sparse mask m over n elements against the values it must number: its set bits must be
 * `want` and its padding bits 0 (coremltools' rules; the mask's contents are known only now). */
static int mask_check(const sim_value *v, const sim_value *mk, const uint8_t *m, uint64_t n, uint64_t want, char *err,
                      size_t errlen)
{
    uint64_t set = 0;
    for (uint64_t i = 0; i < n; i++)
        set += (m[i >> 3] >> (i & 7)) & 1u;
    unsigned pad = n % 8 ? (unsigned)m[n >> 3] >> (n % 8) : 0;
    if (pad) {
        snprintf(err, errlen, "load: '%s' (model.mil:%d): the mask '%s' has padding bits set after element %llu "
                 "(they must be 0)", v->name, v->line, mk->name, (unsigned long long)n);
        return ANEC_ELOAD;
    }
    if (set != want) {
        snprintf(err, errlen, "load: '%s' (model.mil:%d): the mask '%s' sets %llu elements, but 'nonzero_data' "
                 "has %llu values (they must be equal)", v->name, v->line, mk->name, (unsigned long long)set,
                 (unsigned long long)want);
        return ANEC_ELOAD;
    }
    return ANEC_OK;
}

/* constexpr_sparse_to_dense: element i is the next value where bit i of the mask is set, else 0. */
static int sparse_to_dense(const sim_state *s, const sim_value *v, const sim_decomp *d, void *out, char *err,
                           size_t errlen)
{
    const sim_plan *p = s->plan;
    const sim_value *nz = &p->vals[d->data];
    const uint8_t *m = s->store[d->mask];
    uint64_t n = v->numel;
    int rc = mask_check(v, &p->vals[d->mask], m, n, (uint64_t)nz->shape[0], err, errlen);
    if (rc != ANEC_OK)
        return rc;
    const void *vd = s->store[d->data];
    uint64_t j = 0;
    for (uint64_t i = 0; i < n; i++)
        put(out, v->dt, i, (m[i >> 3] >> (i & 7)) & 1u ? elem(nz, vd, j++) : 0.0);
    return ANEC_OK;
}

/* constexpr_sparse_blockwise_shift_scale / constexpr_lut_to_sparse: value j (the j-th set bit
 * of the mask, element i) dequantized with the scale (offset) or table of element i's block. */
static int sparse_pair_values(const sim_state *s, const sim_value *v, const sim_decomp *d, void *out, char *err,
                              size_t errlen)
{
    const sim_plan *p = s->plan;
    const sim_value *mk = &p->vals[d->mask], *nz = &p->vals[d->data];
    const uint8_t *m = s->store[d->mask];
    const void *nd = s->store[d->data];
    int rc = mask_check(v, mk, m, mk->numel, v->numel, err, errlen);
    if (rc != ANEC_OK)
        return rc;
    uint64_t j = 0;
    for (uint64_t i = 0; i < mk->numel; i++) {
        if (!((m[i >> 3] >> (i & 7)) & 1u))
            continue;
        if (d->form == DEC_SPARSE_SHIFT_SCALE) {
            const sim_value *sc = &p->vals[d->scale];
            uint64_t b = block_index(mk, sc, i);
            float x = (float)elem(nz, nd, j);
            if (d->offset >= 0)
                x -= (float)elem(&p->vals[d->offset], s->store[d->offset], b);
            put(out, v->dt, j, (double)(x * (float)elem(sc, s->store[d->scale], b)));
        } else {
            const sim_value *lut = &p->vals[d->lut];
            sim_value tables = *lut; /* the table dims only: [g0..g(r-1)] */
            tables.rank = mk->rank;
            uint64_t k = (uint64_t)1 << d->bits, ix = (uint64_t)elem(nz, nd, j);
            put(out, v->dt, j, elem(lut, s->store[d->lut], block_index(mk, &tables, i) * k + ix));
        }
        j++;
    }
    return ANEC_OK;
}

int sim_decompress(sim_state *s, int vi, char *err, size_t errlen)
{
    const sim_plan *p = s->plan;
    const sim_value *v = &p->vals[vi];
    const sim_decomp *d = v->dec;
    /* a sparse-to-sparse op's mask result: the mask operand's packed bits */
    size_t nbytes = d->form == DEC_MASK_COPY ? (size_t)((v->numel + 7) / 8) : v->bytes;
    void *out = malloc(nbytes ? nbytes : 1);
    if (!out) {
        snprintf(err, errlen, "out of memory decompressing '%s'", v->name);
        return ANEC_ENOMEM;
    }
    const sim_value *q = &p->vals[d->data];
    const void *qd = s->store[d->data];
    uint64_t n = v->numel;
    if (d->form == DEC_MASK_COPY) {
        memcpy(out, s->store[d->mask], nbytes);
    } else if (d->form == DEC_SPARSE || d->form == DEC_SPARSE_SHIFT_SCALE || d->form == DEC_LUT_SPARSE) {
        int rc = d->form == DEC_SPARSE ? sparse_to_dense(s, v, d, out, err, errlen)
                                       : sparse_pair_values(s, v, d, out, err, errlen);
        if (rc != ANEC_OK) {
            free(out);
            return rc;
        }
    } else if (d->form == DEC_AFFINE) {
        const sim_value *sc = &p->vals[d->scale], *zp = &p->vals[d->offset];
        const void *sd = s->store[d->scale], *zd = s->store[d->offset];
        uint64_t inner = 1;
        for (int k = d->axis + 1; k < v->rank; k++)
            inner *= (uint64_t)v->shape[k];
        uint64_t dim = (uint64_t)v->shape[d->axis];
        for (uint64_t i = 0; i < n; i++) {
            uint64_t c = i / inner % dim;
            /* as coremltools: (q - zero_point) in fp32, times the scale, rounded to the output */
            float diff = (float)elem(q, qd, i) - (float)elem(zp, zd, zp->rank ? c : 0);
            put(out, v->dt, i, (double)(diff * (float)elem(sc, sd, sc->rank ? c : 0)));
        }
    } else if (d->form == DEC_SHIFT_SCALE) {
        const sim_value *sc = &p->vals[d->scale];
        const void *sd = s->store[d->scale];
        const sim_value *off = d->offset >= 0 ? &p->vals[d->offset] : NULL;
        const void *od = off ? s->store[d->offset] : NULL;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t b = block_index(v, sc, i);
            float x = (float)elem(q, qd, i);
            if (off)
                x -= (float)elem(off, od, b);
            put(out, v->dt, i, (double)(x * (float)elem(sc, sd, b)));
        }
    } else {
        const sim_value *lut = &p->vals[d->lut];
        const void *ld = s->store[d->lut];
        uint64_t k = (uint64_t)1 << d->bits;
        sim_value packed = *q;
        if (d->form == DEC_LUT_PACKED)
            packed.dt = d->bits == 1 ? MIL_DT_UINT1 : d->bits == 2 ? MIL_DT_UINT2 : d->bits == 4 ? MIL_DT_UINT4
                      : d->bits == 6 ? MIL_DT_UINT6 : MIL_DT_UINT8;
        sim_value tables = *lut; /* the table dims only: [g0..g(r-1)] */
        tables.rank = d->form == DEC_LUT_PACKED ? 0 : v->rank;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t ix = (uint64_t)elem(&packed, qd, i);
            if (ix >= k) { /* cannot happen with a checked plan: every index has bits bits */
                free(out);
                snprintf(err, errlen, "load: '%s' (model.mil:%d): LUT index %llu at element %llu is out of range "
                         "(the lut has %llu entries)", v->name, v->line, (unsigned long long)ix, (unsigned long long)i,
                         (unsigned long long)k);
                return ANEC_ELOAD;
            }
            uint64_t g = tables.rank ? block_index(v, &tables, i) : 0;
            put(out, v->dt, i, elem(lut, ld, g * k + ix));
        }
    }
    s->store[vi] = out;
    return ANEC_OK;
}
