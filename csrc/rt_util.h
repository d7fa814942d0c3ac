/*
 * rt_util.h - small helpers shared by the runtime's C files (internal).
 *
 * Header-only (static inline) so every translation unit, the fuzzers and the
 * macOS syntax check get them without another object file.
 */
#ifndef ANEC_RT_UTIL_H
#define ANEC_RT_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "blobfile.h"
#include "mil_parse.h"

/* A malloc'd copy of s (strdup is POSIX, not C11); NULL when out of memory. */
static inline char *rt_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *r = malloc(n);
    if (r)
        memcpy(r, s, n);
    return r;
}

/* The BLOBFILE dtype code (BLOB_DT_*) that stores a MIL dtype; 0 when a BLOBFILE cannot hold it. */
static inline uint32_t rt_blob_dtype(mil_dtype dt)
{
    switch (dt) {
    case MIL_DT_FP16: return BLOB_DT_FP16;
    case MIL_DT_FP32: return BLOB_DT_FP32;
    case MIL_DT_UINT8: return BLOB_DT_UINT8;
    case MIL_DT_INT8: return BLOB_DT_INT8;
    case MIL_DT_INT4: return BLOB_DT_INT4;
    case MIL_DT_UINT1: return BLOB_DT_UINT1;
    case MIL_DT_UINT2: return BLOB_DT_UINT2;
    case MIL_DT_UINT3: return BLOB_DT_UINT3;
    case MIL_DT_UINT4: return BLOB_DT_UINT4;
    case MIL_DT_UINT6: return BLOB_DT_UINT6;
    default: return 0;
    }
}

#endif
