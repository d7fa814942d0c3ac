/*
 * blobfile.h - reader/validator for weight BLOBFILEs (MILBlob storage v2).
 *
 * Layout (little-endian): a 64-byte file header {u32 count, u32 version = 2,
 * reserved}, then per tensor a 64-byte metadata record {u32 0xDEADBEEF,
 * u32 dtype, u64 size, u64 data offset (absolute), u64 padding bits, reserved}
 * followed by the payload. MIL references a tensor by the offset of its
 * metadata record (64 for the first tensor of a file).
 *
 * Used by the runtime core (compile and delta-reload validation) and by the
 * sim driver (load). Never reads outside [data, data + len).
 */
#ifndef ANEC_BLOBFILE_H
#define ANEC_BLOBFILE_H

#include <stddef.h>
#include <stdint.h>

#define BLOB_HEADER_BYTES 64u
#define BLOB_META_BYTES 64u
#define BLOB_VERSION 2u
#define BLOB_SENTINEL 0xDEADBEEFu

/* dtype codes of the metadata record */
#define BLOB_DT_FP16 1
#define BLOB_DT_FP32 2
#define BLOB_DT_UINT8 3
#define BLOB_DT_INT8 4
/* packed sub-byte payloads (compressed weights): LSB first, element 0 in the low bits of
   byte 0; the record's padding field counts the unused bits of the last byte */
#define BLOB_DT_INT4 8
#define BLOB_DT_UINT1 9
#define BLOB_DT_UINT2 10
#define BLOB_DT_UINT4 11
#define BLOB_DT_UINT3 12
#define BLOB_DT_UINT6 13

typedef struct blob_tensor {
    uint32_t dtype;           /* BLOB_DT_* */
    uint64_t size;            /* payload bytes */
    uint64_t data_offset;     /* absolute payload offset in the file */
    const uint8_t *data;      /* == file + data_offset */
    uint64_t padding_bits;    /* unused bits of the last byte (sub-byte dtypes) */
} blob_tensor;

/* Element size of a dtype code, 0 if unsupported (also for the sub-byte codes). */
size_t blob_dtype_size(uint32_t dtype);
/* Bits per element of a dtype code (1..32), 0 if unsupported. */
unsigned blob_dtype_bits(uint32_t dtype);
/* Payload bytes of numel elements (sub-byte: packed), UINT64_MAX if unsupported or too large. */
uint64_t blob_payload_bytes(uint32_t dtype, uint64_t numel);
/* "fp16", "fp32", "uint8", "int8" or "dtype <n>". Returns a static string for
   known codes; unknown codes are written into buf. */
const char *blob_dtype_name(uint32_t dtype, char *buf, size_t buflen);

/* Check the 64-byte file header (size, version 2). Returns 0 or -1 with err. */
int blob_check_header(const uint8_t *file, size_t len, char *err, size_t errlen);

/* Read the tensor whose metadata record is at meta_offset: header valid,
   record within the file, sentinel, known dtype, payload within the file.
   If want_dtype > 0 the dtype must equal it; if want_bytes > 0 the payload
   size must equal it. Returns 0 or -1 with err (never reads out of bounds). */
int blob_read_tensor(const uint8_t *file, size_t len, uint64_t meta_offset,
                     uint32_t want_dtype, uint64_t want_bytes,
                     blob_tensor *out, char *err, size_t errlen);

/* The checks of blob_read_tensor on one 64-byte metadata record `m` read from
   offset meta_offset of a file of len bytes (for a caller that does not hold
   the file in memory): out->data is NULL. Returns 0 or -1 with err. */
int blob_read_record(const uint8_t *m, uint64_t meta_offset, uint64_t len, uint32_t want_dtype,
                     uint64_t want_bytes, blob_tensor *out, char *err, size_t errlen);

/* Index of the first non-finite element of an fp16/fp32 payload, or -1. */
long long blob_first_nonfinite(const blob_tensor *t);

#endif
