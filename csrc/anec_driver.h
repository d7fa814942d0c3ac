/*
 * anec_driver.h - the internal interface between the runtime core and a driver.
 *
 * Not public: users include anec_rt.h only. A driver is a table of function
 * pointers (anec_driver). The core (rt_core.c, rt_reload.c) owns program
 * caching, refcounted program directories, compile-budget accounting, I/O
 * binding in alphabetical order, surface sizing, locking and the choice of a
 * reload strategy; a driver only turns those decisions into device calls:
 *
 *   sim  (driver_sim.c)  parses and executes MIL on the CPU, like the device.
 *   ane  (driver_ane.c)  calls AppleNeuralEngine.framework through symbols
 *                        resolved at run time (dlopen/dlsym).
 *
 * The device model both follow (the public evidence, see docs/macos.md):
 * compile BAKES the weights. The compiler leaves its output, `net.plist` and
 * `data`, in the program's compiled directory, and load reads only those:
 * rewriting weights/ after a compile changes nothing. For a program whose
 * weights are one BLOBFILE holding one tensor, `data` is byte-identical to
 * that BLOBFILE; otherwise it is opaque. So the only ways to change weights
 * are: patch `data` (when it is observed to equal the program's one
 * BLOBFILE), pass weights as program inputs, or compile again.
 *
 * Calling sequence used by the core, per program (the core serializes every
 * call on one program; calls on different programs may run concurrently):
 *   compile -> load -> evaluate* -> [unload -> patch_data -> load]* -> unload -> release
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

    /* Driver options set by the core right after open (string values):
       "threads" (sim kernel threads), "compile_budget" (compiles the device
       accepts per process), "device" (the sim's device model, see
       driver_sim.c). Unknown keys are an error. */
    int (*set_option)(void *ctx, const char *key, const char *value, char *err, size_t errlen);

    /* Reload strategies (ANEC_RELOAD_*) this driver guarantees by itself:
       the sim for its own device model; 0 for the ane driver, whose
       strategies are verified on each Mac by `python -m anec.selftest`. */
    unsigned (*self_verified)(void *ctx);

    /* Compile MIL (+ weights) into a driver program; bakes the weights into
       the compiled form (net.plist + data); does not load. */
    int (*compile)(void *ctx, const anec_compile_args *args, void **prog,
                   char *err, size_t errlen);
    /* Load the compiled form (never the weight files) into the device. */
    int (*load)(void *ctx, void *prog, char *err, size_t errlen);
    int (*unload)(void *ctx, void *prog, char *err, size_t errlen);

    /* A new program sharing `donor`'s compiled network, without a compile,
       for the program directory `dir` (same MIL and weight paths; dir holds
       model.mil and weights/). Its compiled form starts as a copy of the
       donor's, net.plist AND data: until patch_data it computes with the
       donor's weights, like the device. */
    int (*clone)(void *ctx, void *donor, const char *dir, void **out,
                 char *err, size_t errlen);

    /* 1 if the program's compiled `data` is byte-identical to bytes[0..len),
       0 if it differs, a negative value if it cannot be read (err set). */
    int (*data_equals)(void *ctx, void *prog, const uint8_t *bytes, size_t len,
                       char *err, size_t errlen);
    /* Replace the compiled `data` of an unloaded program (atomically), and
       the weight file `rel` ("weights/w.bin") of its compiled directory with
       the same bytes. The next load computes with them. `written` nonzero:
       that weight file already holds exactly these bytes (the core wrote it
       with fsync), so a driver may take it as the new data without reading
       it back. */
    int (*patch_data)(void *ctx, void *prog, const char *rel, const uint8_t *bytes,
                      size_t len, int written, char *err, size_t errlen);

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

    /* Free a program (unloads it first if needed). */
    void (*release)(void *ctx, void *prog);
} anec_driver;

extern const anec_driver anec_driver_sim;
extern const anec_driver anec_driver_ane;

#endif /* ANEC_DRIVER_H */
