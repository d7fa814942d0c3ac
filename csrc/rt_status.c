/*
 * rt_status.c - the runtime's error reporting and names: rt_fail records the
 * message anec_last_error returns (per thread), the status and reload
 * strategy names of the public API, and the monotonic clock every counter of
 * the core reads.
 */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700
#define _DEFAULT_SOURCE
#define _DARWIN_C_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "rt_internal.h"

/* ---- errors ------------------------------------------------------------------------ */

static _Thread_local char tl_err[RT_ERR_LEN];

int rt_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_err, sizeof tl_err, fmt, ap);
    va_end(ap);
    return code;
}

const char *anec_last_error(const anec_runtime *rt)
{
    (void)rt;
    return tl_err;
}

uint64_t rt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

const char *anec_strerror(int code)
{
    switch (code) {
    case ANEC_OK: return "ok";
    case ANEC_EINVAL: return "invalid argument";
    case ANEC_ENOMEM: return "out of memory";
    case ANEC_EIO: return "file system error";
    case ANEC_EPARSE: return "MIL parse error";
    case ANEC_ECOMPILE: return "MIL rejected by the compiler";
    case ANEC_EBUDGET: return "compile budget exhausted";
    case ANEC_ELOAD: return "load failed";
    case ANEC_EEVAL: return "evaluation failed";
    case ANEC_EWEIGHTS: return "weights rejected";
    case ANEC_ESTATE: return "invalid program state";
    case ANEC_EUNAVAIL: return "driver not available";
    case ANEC_EDRIVER: return "driver error";
    default: return "unknown error";
    }
}

const char *anec_reload_strategy_name(int strategy)
{
    switch (strategy) {
    case ANEC_RELOAD_DATA_PATCH: return "data-patch";
    case ANEC_RELOAD_RECOMPILE: return "recompile";
    case ANEC_RELOAD_INPUTS: return "inputs";
    case ANEC_RELOAD_NEW_OBJECT: return "new-object";
    default: return "auto";
    }
}
