/*
 * anec_driver.h - the internal interface between the runtime core and a driver.
 *
 * Not public: users include anec_rt.h only. A driver is a table of function
 * pointers (anec_driver). The core (rt_*.c; rt_internal.h) owns program
 * caching, refcounted program directories, compile-budget accounting, I/O
 * binding in alphabetical order, surface sizing, locking and the choice of a
 * reload strategy; a driver only turns those decisions into device calls:
 *
 *   sim  (driver_sim.c)  parses and executes MIL on the CPU, like the device.
 *   ane  (driver_ane.c)  calls AppleNeuralEngine.framework through symbols
 *                        resolved at run time (dlopen/dlsym).
 *
 * The device model both follow. Every device behaviour is named by its
 * evidence id in the constraint catalog (`anec constraints`), which says what
 * each public source shows and what only `python -m anec.selftest` on a Mac
 * can settle. Compile BAKES the weights (ANE-BAKED-WEIGHTS: rewriting
 * weights/ and loading the same model object again changes nothing). The
 * compiler leaves its output, `net.plist` and `data`, in the program's
 * compiled directory; for a program whose weights are one BLOBFILE holding
 * one tensor, `data` is byte-identical to that BLOBFILE
 * (ANE-DATA-IS-BLOBFILE); otherwise it is opaque. What a later load reads is
 * contested: a new, never-compiled model object loads the `data` in its
 * directory (ANE-NEW-OBJECT-LOAD, the path Orion tests); whether a rewrite of
 * `data` reaches the SAME object again (ANE-SAME-OBJECT-PATCH) or whether a
 * load re-reads weights/ (ANE-LOAD-REREADS-WEIGHTS) no public test shows. So
 * the ways to change weights are: patch `data` and load the same object, or
 * load a new object with the new `data` (each only where verified), pass
 * weights as program inputs, or compile again.
 *
 * Surfaces (ANE-SURFACE-LOCK): the CPU locks a surface only while it reads
 * or writes its bytes (surface_lock/surface_unlock, read-only for reads);
 * evaluate gets unlocked surfaces.
 *
 * Calling sequence used by the core, per program (the core serializes every
 * call on one program; calls on different programs may run concurrently):
 *   compile -> load -> evaluate* -> [unload -> patch_data -> load]* -> unload -> release
 * and for a new model object (a cache hit, or the new-object reload):
 *   clone -> [patch_data] -> load -> evaluate* -> ... -> release
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
    void *handle;                 /* driver object (IOSurfaceRef on ane, the memory on sim) */
    uint8_t *base;                /* CPU-visible bytes: valid only while CPU-locked */
    size_t bytes;                 /* allocation size */
    int cpu_locks;                /* the core's nested CPU locks (rt_surface_lock) */
    int lock_read_only;           /* the outermost of them is read-only */
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
    /* Load the program into the device (what a load reads: see above). */
    int (*load)(void *ctx, void *prog, char *err, size_t errlen);
    int (*unload)(void *ctx, void *prog, char *err, size_t errlen);

    /* A NEW model object sharing `donor`'s compiled network, never compiled,
       for the program directory `dir` (same MIL and weight paths; dir holds
       model.mil and weights/, whose bytes its descriptor carries). Its
       compiled form starts as a copy of the donor's, net.plist AND data:
       until patch_data it computes with the donor's weights, like the device.
       A clone patched before its first load is the new-object path
       (ANE-NEW-OBJECT-LOAD). */
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

    /* Surfaces: created zeroed and unlocked; freed unlocked. */
    int (*surface_create)(void *ctx, size_t bytes, anec_surface *out, char *err, size_t errlen);
    void (*surface_free)(void *ctx, anec_surface *s);
    /* Lock a surface for CPU access (read_only: the CPU only reads it; a
       write under a read-only lock is an error), setting s->base; unlock
       with the same read_only. */
    int (*surface_lock)(void *ctx, anec_surface *s, int read_only, char *err, size_t errlen);
    void (*surface_unlock)(void *ctx, anec_surface *s, int read_only);

    /* Evaluate once, on unlocked surfaces. inputs[i] is bound to the i-th func
       input in alphabetical order of MIL names, outputs[j] to the j-th returned
       value in alphabetical order, exactly like the device. */
    int (*evaluate)(void *ctx, void *prog,
                    anec_surface *const *inputs, size_t n_in,
                    anec_surface *const *outputs, size_t n_out,
                    char *err, size_t errlen);

    /* Free a program (unloads it first if needed). */
    void (*release)(void *ctx, void *prog);
} anec_driver;

/* The drivers, listed in the driver table (rt_drivers.c). */
extern const anec_driver anec_driver_sim;
extern const anec_driver anec_driver_ane;

/* The sim's per-process state (its compile count and the weights it shares
   between programs) forgotten, as in a new process: anec_process_reset_budget. */
void anec_sim_reset_process(void);

#endif /* ANEC_DRIVER_H */
