/* blobfile.c - BLOBFILE (MILBlob v2) validation; see blobfile.h. */
#include "blobfile.h"

#include <stdio.h>
#include <string.h>

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

size_t blob_dtype_size(uint32_t dtype)
{
    switch (dtype) {
    case BLOB_DT_FP16: return 2;
    case BLOB_DT_FP32: return 4;
    case BLOB_DT_UINT8: return 1;
    case BLOB_DT_INT8: return 1;
    default: return 0;
    }
}

unsigned blob_dtype_bits(uint32_t dtype)
{
    switch (dtype) {
    case BLOB_DT_UINT1: return 1;
    case BLOB_DT_UINT2: return 2;
    case BLOB_DT_UINT3: return 3;
    case BLOB_DT_UINT4: case BLOB_DT_INT4: return 4;
    case BLOB_DT_UINT6: return 6;
    default: return (unsigned)blob_dtype_size(dtype) * 8;
    }
}

uint64_t blob_payload_bytes(uint32_t dtype, uint64_t numel)
{
    unsigned bits = blob_dtype_bits(dtype);
    if (!bits || numel > UINT64_MAX / 64)
        return UINT64_MAX;
    return (numel * bits + 7) / 8;
}

const char *blob_dtype_name(uint32_t dtype, char *buf, size_t buflen)
{
    switch (dtype) {
    case BLOB_DT_FP16: return "fp16";
    case BLOB_DT_FP32: return "fp32";
    case BLOB_DT_UINT8: return "uint8";
    case BLOB_DT_INT8: return "int8";
    case BLOB_DT_INT4: return "int4";
    case BLOB_DT_UINT1: return "uint1";
    case BLOB_DT_UINT2: return "uint2";
    case BLOB_DT_UINT3: return "uint3";
    case BLOB_DT_UINT4: return "uint4";
    case BLOB_DT_UINT6: return "uint6";
    default:
        snprintf(buf, buflen, "dtype code %u", (unsigned)dtype);
        return buf;
    }
}

int blob_check_header(const uint8_t *file, size_t len, char *err, size_t errlen)
{
    if (len < BLOB_HEADER_BYTES) {
        snprintf(err, errlen, "file is %zu bytes, shorter than the 64-byte BLOBFILE header", len);
        return -1;
    }
    uint32_t version = rd32(file + 4);
    if (version != BLOB_VERSION) {
        snprintf(err, errlen, "BLOBFILE header version is %u, expected 2", (unsigned)version);
        return -1;
    }
    return 0;
}

int blob_read_record(const uint8_t *m, uint64_t meta_offset, uint64_t len, uint32_t want_dtype,
                     uint64_t want_bytes, blob_tensor *out, char *err, size_t errlen)
{
    char b1[32], b2[32];
    uint32_t sentinel = rd32(m);
    if (sentinel != BLOB_SENTINEL) {
        snprintf(err, errlen, "bad metadata sentinel 0x%08X at offset %llu (expected 0xDEADBEEF; "
                 "the MIL offset must point at the 64-byte metadata record, not the data)",
                 (unsigned)sentinel, (unsigned long long)meta_offset);
        return -1;
    }
    uint32_t dtype = rd32(m + 4);
    uint64_t size = rd64(m + 8);
    uint64_t doff = rd64(m + 16);
    uint64_t padding = rd64(m + 24);
    unsigned bits = blob_dtype_bits(dtype);
    if (bits == 0) {
        snprintf(err, errlen, "unsupported blob dtype code %u at offset %llu (expected fp16=1, fp32=2, uint8=3, int8=4, "
                 "or for compressed weights int4=8, uint1=9, uint2=10, uint4=11, uint3=12, uint6=13)",
                 (unsigned)dtype, (unsigned long long)meta_offset);
        return -1;
    }
    if (doff < meta_offset + BLOB_META_BYTES || doff > len || size > len - doff) {
        snprintf(err, errlen, "blob payload [%llu, +%llu) at metadata offset %llu is outside the file (%llu bytes)",
                 (unsigned long long)doff, (unsigned long long)size, (unsigned long long)meta_offset,
                 (unsigned long long)len);
        return -1;
    }
    if (bits < 8) {
        /* the element count a packed payload holds is size * 8 - padding, whole elements */
        if (padding > 7 || (size == 0 && padding) || (size * 8 - padding) % bits) {
            snprintf(err, errlen, "%s payload of %llu bytes has %llu padding bits, which leave no whole number of "
                     "%u-bit elements", blob_dtype_name(dtype, b1, sizeof b1), (unsigned long long)size,
                     (unsigned long long)padding, bits);
            return -1;
        }
    } else if (size % blob_dtype_size(dtype)) {
        snprintf(err, errlen, "blob payload size %llu is not a multiple of the %s element size",
                 (unsigned long long)size, blob_dtype_name(dtype, b1, sizeof b1));
        return -1;
    }
    if (want_dtype && dtype != want_dtype) {
        snprintf(err, errlen, "blob dtype is %s but the const is declared %s",
                 blob_dtype_name(dtype, b1, sizeof b1), blob_dtype_name(want_dtype, b2, sizeof b2));
        return -1;
    }
    if (want_bytes && size != want_bytes) {
        snprintf(err, errlen, "blob payload is %llu bytes but the declared const type needs %llu bytes",
                 (unsigned long long)size, (unsigned long long)want_bytes);
        return -1;
    }
    out->padding_bits = padding;
    out->dtype = dtype;
    out->size = size;
    out->data_offset = doff;
    out->data = NULL;
    return 0;
}

int blob_read_tensor(const uint8_t *file, size_t len, uint64_t meta_offset,
                     uint32_t want_dtype, uint64_t want_bytes,
                     blob_tensor *out, char *err, size_t errlen)
{
    if (blob_check_header(file, len, err, errlen))
        return -1;
    if (meta_offset < BLOB_HEADER_BYTES || meta_offset > len || len - meta_offset < BLOB_META_BYTES) {
        snprintf(err, errlen, "metadata offset %llu is outside the file (%zu bytes; the first record is at 64)",
                 (unsigned long long)meta_offset, len);
        return -1;
    }
    if (blob_read_record(file + meta_offset, meta_offset, len, want_dtype, want_bytes, out, err, errlen))
        return -1;
    out->data = file + out->data_offset;
    return 0;
}

/* Whole blocks are tested as 64-bit words of four halves / two floats, with no
   early exit; only a block holding a NaN/Inf (exponent all ones) is scanned for
   the first one. The lanes are read as little-endian, like rd32. */
#define NONFINITE_WORDS 64

static uint64_t rd64le(const uint8_t *p) { return rd64(p); }

static int block_has_nonfinite(const uint8_t *d, size_t width)
{
    /* lanes of (x & E) ^ E are zero exactly where the exponent is all ones; a lane
       holds at most E, so "lane - 1" borrows into its top bit only from zero */
    const uint64_t E = width == 2 ? 0x7c007c007c007c00ull : 0x7f8000007f800000ull;
    const uint64_t ONE = width == 2 ? 0x0001000100010001ull : 0x0000000100000001ull;
    const uint64_t TOP = width == 2 ? 0x8000800080008000ull : 0x8000000080000000ull;
    uint64_t hit = 0;
    for (size_t i = 0; i < NONFINITE_WORDS; i++) {
        uint64_t y = (rd64le(d + 8 * i) & E) ^ E;
        hit |= (y - ONE) & ~y & TOP;
    }
    return hit != 0;
}

static int elem_nonfinite(const uint8_t *d, size_t width, size_t i)
{
    return width == 2 ? ((d[2 * i] | (d[2 * i + 1] << 8)) & 0x7c00u) == 0x7c00u
                      : (rd32(d + 4 * i) & 0x7f800000u) == 0x7f800000u;
}

long long blob_first_nonfinite(const blob_tensor *t)
{
    size_t width = t->dtype == BLOB_DT_FP16 ? 2 : t->dtype == BLOB_DT_FP32 ? 4 : 0;
    if (!width)
        return -1;
    size_t n = (size_t)(t->size / width), per = NONFINITE_WORDS * 8 / width, i = 0;
    for (; i + per <= n; i += per)
        if (block_has_nonfinite(t->data + i * width, width))
            break; /* scanned element by element below */
    for (; i < n; i++)
        if (elem_nonfinite(t->data, width, i))
            return (long long)i;
    return -1;
}
