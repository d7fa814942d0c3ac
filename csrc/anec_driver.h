/*
 * anec_driver.h - the internal interface between the runtime core and a driver.
 *
 * Not public: users include anec_rt.h only. A driver is a table of function
 * pointers (anec_driver). The core (rt_core.c) owns program caching,
 * refcounted program directories, compile-budget accounting, I/O binding in
 * alphabetical order, surface sizing and delta-reload orchestration; a driver
 * only turns those decisions into device calls:
 *
 *   sim  (driver_sim.c)  parses and executes MIL on the CPU, like the device.
 *   ane  (driver_ane.c)  calls AppleNeuralEngine.framework through symbols
 *                        resolved at run time (dlopen/dlsym).
 *
 * Calling sequence used by the core, per program:
 *   compile -> load -> evaluate* -> [unload -> (core patches blobs) -> load]* -> unload -> release
 *
 * Every function returns ANEC_OK (0) or an anec status code from anec_rt.h,
 * and on failure writes a human-readable, NUL-terminated message to err
 * (capacity errlen).
 */
#ifndef ANEC_DRIVER_H
#define ANEC_DRIVER_H

#include <stddef.h>
#include <stdint.h>

/* anec_limits and anec_blob are public types, defined in anec_rt.h. */
#include "anec_rt.h"

typedef struct anec_compile_args {
    const char *mil;              /* MIL text (UTF-8 bytes, not NUL-terminated) */
    size_t mil_len;
    const anec_blob *blobs;       /* n_blobs weight files (may be 0) */
    size_t n_blobs;
    const char *dir;              /* program directory the core prepared:
                                     dir/model.mil and dir/weights/... exist */
    anec_limits limits;
} anec_compile_args;

/* A flat byte buffer used for one program input or output (an IOSurface on the
   device). The core sizes every surface of a program uniformly (>= the minimum)
   and writes tensors packed at byte 0. */
typedef struct anec_surface {
    void *handle;                 /* driver object (IOSurfaceRef on ane, NULL on sim) */
    uint8_t *base;                /* CPU-visible bytes while the surface exists */
    size_t bytes;                 /* allocation size */
} anec_surface;

typedef struct anec_driver {
    const char *name;             /* "sim" or "ane" */

    /* Is this driver usable on this machine? ANEC_OK if so, else a status
       (ANEC_EUNAVAIL) and why (e.g. "framework not found"). */
    int (*available)(char *why, size_t whylen);

    int (*open)(void **ctx, char *err, size_t errlen);
    void (*close)(void *ctx);

    /* Compile MIL (+ weights) into a driver program; does not load it. */
    int (*compile)(void *ctx, const anec_compile_args *args, void **prog,
                   char *err, size_t errlen);
    /* Load: read weights (from the program directory) into the device. Weights
       are baked from this point until the next load. */
    int (*load)(void *ctx, void *prog, char *err, size_t errlen);
    int (*unload)(void *ctx, void *prog, char *err, size_t errlen);

    /* Surfaces. */
    int (*surface_create)(void *ctx, size_t bytes, anec_surface *out, char *err, size_t errlen);
    void (*surface_free)(void *ctx, anec_surface *s);

    /* Evaluate once. inputs[i] is bound to the i-th func input in alphabetical
       order of MIL names, outputs[j] to the j-th returned value in alphabetical
       order, exactly like the device. */
    int (*evaluate)(void *ctx, void *prog,
                    anec_surface *const *inputs, size_t n_in,
                    anec_surface *const *outputs, size_t n_out,
                    char *err, size_t errlen);

    /* Free a program (must be unloaded). */
    void (*release)(void *ctx, void *prog);

    /* ---- optional (NULL when a driver does not provide them) ---- */

    /* New program that shares prog's compiled form but reads its weights
       from another program directory `dir` (same MIL, same weight paths,
       possibly different weight bytes). Costs no compile. Without it the
       core compiles again (and spends budget) for a cache hit whose weights
       live in a different directory. */
    int (*clone)(void *ctx, void *prog, const char *dir, void **out,
                 char *err, size_t errlen);
    /* Driver tuning set by the core right after open: "threads" (sim kernel
       threads), "compile_budget" (compiles the driver accepts per context). */
    int (*set_option)(void *ctx, const char *key, long long value,
                      char *err, size_t errlen);
} anec_driver;

extern const anec_driver anec_driver_sim;
extern const anec_driver anec_driver_ane;

#endif /* ANEC_DRIVER_H */
