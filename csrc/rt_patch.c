/*
 * rt_patch.c - a program's weight file with new payloads streamed in from the
 * caller's arrays (the data-patch reload from arrays, anec_reload_arrays).
 *
 * The new file is the current one with some payloads replaced. It is never
 * held in memory whole: the bytes around the payloads are copied from the
 * current file and each payload is checked, converted to the stored dtype and
 * written chunk by chunk while the chunk is in cache, so the arrays are read
 * once and the file is written once. Before that, a compare pass decides
 * whether anything changes at all (a probe of each payload's head first: a
 * changed tensor almost always differs there, and then its old bytes are never
 * read further).
 *
 * Value checks are those of the Python reload (anec/runtime/weights.py): an
 * fp16 payload takes values with |x| <= 65504 (the bits of the source array's
 * magnitude compared, so 65505 in an fp32 array is refused although it rounds
 * to 65504), an fp32 payload finite values; NaN and Inf are refused in both.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "anec_rt.h"
#include "blobfile.h"
#include "fp16.h"
#include "rt_files.h"
#include "rt_internal.h"

/* elements per chunk: 256 KiB of fp32 source, in cache while it is checked and converted */
#define CHUNK 65536u
/* elements of a payload's head compared before the rest is read */
#define PROBE 2048u

static const uint32_t FP16_MAX_BITS_OF[2] = {0x7BFFu, 0x477FE000u}; /* 65504 as fp16 / fp32 bits */

static int src_width(int dtype) { return dtype == ANEC_DTYPE_FP16 ? 2 : dtype == ANEC_DTYPE_FP32 ? 4 : 0; }

/* 1 when the n source elements at s are acceptable for the region's stored dtype */
static int values_ok(const rt_patch_region *r, const void *s, size_t n)
{
    int w = src_width(r->src_dtype);
    uint32_t top = anec_max_magnitude_bits(s, (size_t)w, n);
    if (r->stored == BLOB_DT_FP16)
        return top <= FP16_MAX_BITS_OF[w == 4];
    return top < 0x7F800000u; /* fp32 payload: finite */
}

/* The stored bytes of elements [i, i + n) of a region: the source itself, or
   converted into buf. */
static const uint8_t *stored_bytes(const rt_patch_region *r, size_t i, size_t n, uint16_t *buf)
{
    const uint8_t *s = (const uint8_t *)r->data + i * (size_t)src_width(r->src_dtype);
    if (r->stored == BLOB_DT_FP16 && r->src_dtype == ANEC_DTYPE_FP32) {
        anec_cvt_f32_to_f16((const float *)(const void *)s, buf, n);
        return (const uint8_t *)buf;
    }
    return s;
}

static int by_offset(const void *a, const void *b)
{
    uint64_t x = ((const rt_patch_region *)a)->data_offset, y = ((const rt_patch_region *)b)->data_offset;
    return x < y ? -1 : x > y;
}

int rt_patch_open(const char *dir, const char *rel, rt_patch_region *r, size_t n, int *fd_out, uint64_t *len_out,
                  char *why, size_t whylen)
{
    int fd = rt_open_beneath(dir, rel);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        snprintf(why, whylen, "cannot read the program's weight file %s: %s", rel,
                 fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0)
            close(fd);
        return ANEC_EIO;
    }
    uint64_t len = (uint64_t)st.st_size;
    for (size_t i = 0; i < n; i++) {
        uint8_t meta[BLOB_META_BYTES];
        if (r[i].record > len || len - r[i].record < BLOB_META_BYTES ||
            rt_pread_all(fd, meta, sizeof meta, r[i].record)) {
            snprintf(why, whylen, "%s: the metadata record at offset %llu is outside the file", rel,
                     (unsigned long long)r[i].record);
            close(fd);
            return ANEC_EWEIGHTS;
        }
        blob_tensor t;
        char bad[512];
        if (blob_read_record(meta, r[i].record, len, 0, 0, &t, bad, sizeof bad)) {
            snprintf(why, whylen, "%s: %s", rel, bad);
            close(fd);
            return ANEC_EWEIGHTS;
        }
        size_t want;
        int pair_ok = (t.dtype == BLOB_DT_FP16 && src_width(r[i].src_dtype)) ||
                      (t.dtype == BLOB_DT_FP32 && r[i].src_dtype == ANEC_DTYPE_FP32);
        if (!pair_ok || rt_mul_size((size_t)r[i].count, blob_dtype_size(t.dtype), &want) || t.size != want) {
            snprintf(why, whylen, "%s: the blob at offset %llu does not match the array given for it", rel,
                     (unsigned long long)r[i].record);
            close(fd);
            return ANEC_EWEIGHTS;
        }
        r[i].stored = t.dtype;
        r[i].data_offset = t.data_offset;
        r[i].size = t.size;
    }
    qsort(r, n, sizeof *r, by_offset);
    for (size_t i = 0; i < n; i++) {
        int overlap = i && r[i - 1].data_offset + r[i - 1].size > r[i].data_offset;
        for (size_t j = 0; j < n && !overlap; j++) /* a payload must not cover a metadata record */
            overlap = r[j].record < r[i].data_offset + r[i].size && r[i].data_offset < r[j].record + BLOB_META_BYTES;
        if (overlap) {
            snprintf(why, whylen, "%s: the payload at offset %llu overlaps another blob", rel,
                     (unsigned long long)r[i].data_offset);
            close(fd);
            return ANEC_EWEIGHTS;
        }
    }
    *fd_out = fd;
    *len_out = len;
    return ANEC_OK;
}

/* Compare elements [from, to) of region r with the file: 1 equal, 0 differ,
   -1 read error, -2 a value is refused. */
static int range_equals(int fd, const rt_patch_region *r, size_t from, size_t to, uint16_t *cvt, uint8_t *old)
{
    size_t w = blob_dtype_size(r->stored);
    for (size_t i = from; i < to; i += CHUNK) {
        size_t k = to - i < CHUNK ? to - i : CHUNK;
        if (!values_ok(r, (const uint8_t *)r->data + i * (size_t)src_width(r->src_dtype), k))
            return -2;
        if (rt_pread_all(fd, old, k * w, r->data_offset + i * w))
            return -1;
        if (memcmp(stored_bytes(r, i, k, cvt), old, k * w))
            return 0;
    }
    return 1;
}

int rt_patch_changes(int fd, const rt_patch_region *r, size_t n, int *changed, size_t *bad, char *why,
                     size_t whylen)
{
    uint16_t *cvt = malloc(CHUNK * sizeof *cvt);
    uint8_t *old = malloc(CHUNK * 4);
    int rc = cvt && old ? ANEC_OK : ANEC_ENOMEM;
    *changed = 0;
    /* heads first, then (only when every head is equal) the rest */
    for (int pass = 0; pass < 2 && rc == ANEC_OK && !*changed; pass++)
        for (size_t i = 0; i < n && rc == ANEC_OK && !*changed; i++) {
            size_t head = r[i].count < PROBE ? (size_t)r[i].count : PROBE;
            int eq = pass ? range_equals(fd, &r[i], head, (size_t)r[i].count, cvt, old)
                          : range_equals(fd, &r[i], 0, head, cvt, old);
            if (eq == -2) {
                *bad = r[i].index;
                rc = ANEC_EWEIGHTS;
            } else if (eq < 0) {
                rc = ANEC_EIO;
            } else {
                *changed = !eq;
            }
        }
    int saved = errno;
    free(cvt);
    free(old);
    if (rc == ANEC_ENOMEM)
        snprintf(why, whylen, "out of memory");
    else if (rc == ANEC_EIO)
        snprintf(why, whylen, "read error on the program's weight file: %s", strerror(saved));
    else if (rc == ANEC_EWEIGHTS)
        snprintf(why, whylen, "array %zu has a value its blob cannot take (NaN, Inf or beyond the fp16 range)", *bad);
    return rc;
}

/* Copy bytes [from, to) of the old file to the new one. */
static int copy_range(int in, int out, uint64_t from, uint64_t to, uint8_t *buf, size_t cap)
{
    while (from < to) {
        size_t k = to - from < cap ? (size_t)(to - from) : cap;
        if (rt_pread_all(in, buf, k, from) || rt_write_all(out, buf, k))
            return -1;
        from += k;
    }
    return 0;
}

int rt_patch_write(int fd, uint64_t len, const rt_patch_region *r, size_t n, const char *tmp, size_t *bad,
                   char *why, size_t whylen)
{
    int out = rt_open_for_write(tmp, len, 1);
    if (out < 0) {
        snprintf(why, whylen, "cannot create %s: %s", tmp, strerror(errno));
        return ANEC_EIO;
    }
    size_t cap = CHUNK * 4;
    uint8_t *buf = malloc(cap);
    uint16_t *cvt = malloc(CHUNK * sizeof *cvt);
    int rc = buf && cvt ? ANEC_OK : ANEC_ENOMEM;
    uint64_t pos = 0;
    for (size_t i = 0; i < n && rc == ANEC_OK; i++) {
        if (copy_range(fd, out, pos, r[i].data_offset, buf, cap)) {
            rc = ANEC_EIO;
            break;
        }
        size_t w = blob_dtype_size(r[i].stored), count = (size_t)r[i].count;
        for (size_t e = 0; e < count && rc == ANEC_OK; e += CHUNK) {
            size_t k = count - e < CHUNK ? count - e : CHUNK;
            if (!values_ok(&r[i], (const uint8_t *)r[i].data + e * (size_t)src_width(r[i].src_dtype), k)) {
                *bad = r[i].index;
                rc = ANEC_EWEIGHTS;
            } else if (rt_write_all(out, stored_bytes(&r[i], e, k, cvt), k * w)) {
                rc = ANEC_EIO;
            }
        }
        pos = r[i].data_offset + r[i].size;
    }
    if (rc == ANEC_OK && copy_range(fd, out, pos, len, buf, cap))
        rc = ANEC_EIO;
    int saved = errno;
    if (rc == ANEC_OK && fsync(out))
        rc = ANEC_EIO, saved = errno;
    if (close(out) && rc == ANEC_OK)
        rc = ANEC_EIO, saved = errno;
    free(buf);
    free(cvt);
    if (rc != ANEC_OK) {
        unlink(tmp);
        if (rc == ANEC_EIO)
            snprintf(why, whylen, "write to %s failed: %s", tmp, strerror(saved));
        else if (rc == ANEC_EWEIGHTS)
            snprintf(why, whylen, "array %zu has a value its blob cannot take (NaN, Inf or beyond the fp16 range)",
                     *bad);
        else
            snprintf(why, whylen, "out of memory");
    }
    return rc;
}
