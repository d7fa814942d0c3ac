/*
 * anec_rt.h - the public C API of the anec runtime.
 *
 * The runtime compiles Apple MIL text (+ weight BLOBFILEs) into programs,
 * loads them onto a driver, evaluates them and swaps weights by delta reload.
 *
 *   driver "sim"  a strict ANE simulator that runs everywhere: it parses the
 *                 MIL, rejects what the ANE compiler rejects, executes in fp16
 *                 storage with fp32 accumulation and fails at evaluate like
 *                 the device does.
 *   driver "ane"  the Apple Neural Engine (macOS, private framework).
 *   "auto"        ane when available, else sim.
 *
 * Lifecycle of a program:
 *
 *   anec_compile -> anec_load -> (anec_run | anec_evaluate)*
 *                -> [anec_reload_weights -> (anec_run | anec_evaluate)*]*
 *                -> anec_program_free
 *
 * Every function returning int returns ANEC_OK (0) or one of the ANEC_E*
 * codes below; the detailed message (MIL line numbers, constraint ids, file
 * names) is in anec_last_error(rt) of the runtime the call belongs to. A
 * runtime and its programs must be used from one thread at a time.
 *
 * I/O binding follows the device: the i-th input buffer is bound to the i-th
 * func input in ALPHABETICAL order (byte order) of the MIL names, the j-th
 * output buffer to the j-th returned name in alphabetical order. Use
 * anec_program_input/anec_program_output to learn the binding tables.
 */
#ifndef ANEC_RT_H
#define ANEC_RT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status codes ------------------------------------------------------ */

#define ANEC_OK        0
#define ANEC_EINVAL    1   /* bad argument (NULL, index out of range, bad path) */
#define ANEC_ENOMEM    2   /* out of memory */
#define ANEC_EIO       3   /* file system error (program directory, blob files) */
#define ANEC_EPARSE    4   /* MIL text is not well-formed */
#define ANEC_ECOMPILE  5   /* MIL rejected by the compiler (type error, constraint) */
#define ANEC_EBUDGET   6   /* compile budget exhausted (ANE-COMPILE-BUDGET) */
#define ANEC_ELOAD     7   /* load failed (weight BLOBFILE invalid or missing) */
#define ANEC_EEVAL     8   /* evaluation failed (device status, surface sizes) */
#define ANEC_EWEIGHTS  9   /* delta reload rejected (shape, dtype, NaN/Inf) */
#define ANEC_ESTATE   10   /* call not valid in the program's state */
#define ANEC_EUNAVAIL 11   /* driver not available on this machine */
#define ANEC_EDRIVER  12   /* other driver failure */

/* Short static description of a status code ("invalid argument", ...). */
const char *anec_strerror(int code);

/* ---- data types -------------------------------------------------------- */

/* Tensor element types; 1..4 equal the BLOBFILE dtype codes. */
#define ANEC_DTYPE_FP16  1
#define ANEC_DTYPE_FP32  2
#define ANEC_DTYPE_UINT8 3
#define ANEC_DTYPE_INT8  4
#define ANEC_DTYPE_INT32 5
#define ANEC_DTYPE_BOOL  6

#define ANEC_MAX_RANK 8

/* Device-side limits the compiler enforces (from the manifest's target profile).
   Passing NULL to anec_compile uses the M4 defaults
   {16, 1, 16384, 49152, 1, 0}. */
typedef struct anec_limits {
    int max_blob_tensors;         /* BLOBFILE-backed consts per program (16 on M4) */
    int scalar_penalty;           /* subtracted once if any elementwise op takes a scalar const (1) */
    int max_conv_out_channels;    /* conv output channels above this are rejected */
    size_t min_surface_bytes;     /* IOSurfaces smaller than this fail at evaluate (49152) */
    int allow_fp32_io;            /* 0 on M1: fp32 func inputs/outputs rejected */
    size_t surface_alignment;     /* core-allocated surfaces are rounded up to this (0 or 1: none) */
} anec_limits;

/* One weight BLOBFILE, keyed by its MIL path ("@model_path/weights/w.bin"). */
typedef struct anec_blob {
    const char *path;             /* exactly as referenced in the MIL text */
    const uint8_t *data;          /* whole BLOBFILE, header included */
    size_t len;
} anec_blob;

/* A caller-owned buffer for anec_evaluate (plays the role of an IOSurface:
   tensors are packed at byte 0, bytes is the allocation size). */
typedef struct anec_buffer {
    void *data;
    size_t bytes;
} anec_buffer;

/* One func input or returned output, in binding (alphabetical) order. */
typedef struct anec_tensor_info {
    const char *name;             /* MIL name; valid while the program lives */
    int dtype;                    /* ANEC_DTYPE_* */
    int rank;
    int64_t shape[ANEC_MAX_RANK];
    size_t bytes;                 /* packed size: prod(shape) * element size */
    size_t binding;               /* == the index it was asked with */
    size_t decl_index;            /* position in the func signature / return tuple */
} anec_tensor_info;

/* Runtime options; a zeroed struct (or NULL) means all defaults. */
typedef struct anec_options {
    int compile_budget;           /* compiles allowed in this runtime; 0: 119 */
    const char *temp_root;        /* parent of program directories; NULL: a fresh
                                     directory under $TMPDIR (removed at close) */
    int sim_threads;              /* sim kernel threads; 0: $ANEC_SIM_THREADS or 2 */
} anec_options;

/* Counters and cumulative wall time per phase (nanoseconds). The struct tag
   shares its name with the function anec_stats(). */
struct anec_stats {
    uint64_t compiles;            /* driver compiles performed */
    int64_t compile_budget;       /* the budget */
    int64_t compile_budget_left;  /* budget - compiles */
    uint64_t cache_hits;          /* anec_compile calls served without a compile */
    uint64_t loads, unloads, reloads, evaluations;
    uint64_t blobs_patched;       /* blob files rewritten by delta reloads */
    uint64_t programs_live;       /* programs not yet freed */
    uint64_t dirs_live;           /* program directories on disk */
    uint64_t ns_compile, ns_load, ns_unload, ns_reload, ns_evaluate;
};

typedef struct anec_runtime anec_runtime;
typedef struct anec_program anec_program;

/* ---- runtime ----------------------------------------------------------- */

/* Open a runtime on driver "sim", "ane" or "auto". opts may be NULL. */
int anec_runtime_open(const char *driver, const anec_options *opts, anec_runtime **out);
/* Free every program still open, remove the program directories. */
void anec_runtime_close(anec_runtime *rt);
/* "sim" or "ane" (the driver actually used). */
const char *anec_driver_name(const anec_runtime *rt);
/* 1 if driver `name` can be used on this machine, else 0 and why (may be NULL). */
int anec_driver_available(const char *name, char *why, size_t whylen);
/* Message of the last failed call on rt or one of its programs ("" if none). */
const char *anec_last_error(const anec_runtime *rt);
/* Runtime-wide counters. */
int anec_stats(const anec_runtime *rt, struct anec_stats *out);

/* ---- programs ---------------------------------------------------------- */

/* Compile MIL text (mil_len bytes, no NUL needed) with its weight BLOBFILEs.
   A program with the same MIL and the same weight paths as one compiled before
   in this runtime is a cache hit: no compile, no budget spent (it gets its own
   directory copy if its weight bytes differ). limits may be NULL. */
int anec_compile(anec_runtime *rt, const char *mil, size_t mil_len,
                 const anec_blob *blobs, size_t n_blobs,
                 const anec_limits *limits, anec_program **out);
/* Load (read the weight files of the program directory into the device).
   Weights are baked from here until the next load. Loading a loaded program
   does nothing. */
int anec_load(anec_program *p);
int anec_unload(anec_program *p);
/* Unload if needed and free; the program directory is removed when no other
   program shares it. NULL is ignored. */
void anec_program_free(anec_program *p);

/* Binding tables. */
size_t anec_program_num_inputs(const anec_program *p);
size_t anec_program_num_outputs(const anec_program *p);
int anec_program_input(const anec_program *p, size_t i, anec_tensor_info *out);
int anec_program_output(const anec_program *p, size_t i, anec_tensor_info *out);
/* The program directory (<root>/<hexid>) holding model.mil and weights/. */
const char *anec_program_dir(const anec_program *p);

/* Core-owned surfaces: one per input and per output, uniform allocation size
   per direction, >= limits.min_surface_bytes, zero-initialised. Write input i
   packed at byte 0 of anec_program_input_surface(p, i), call anec_run, read
   output j packed at byte 0 of anec_program_output_surface(p, j). Pointers stay
   valid until anec_program_free. NULL if i is out of range. */
uint8_t *anec_program_input_surface(anec_program *p, size_t i);
uint8_t *anec_program_output_surface(anec_program *p, size_t i);
size_t anec_program_input_surface_bytes(const anec_program *p);
size_t anec_program_output_surface_bytes(const anec_program *p);
int anec_run(anec_program *p);

/* Evaluate with caller buffers in binding order. Buffer sizes are passed to
   the device as they are: non-uniform or too small buffers fail like the
   device (ANEC_EEVAL, status=0x1d). */
int anec_evaluate(anec_program *p, const anec_buffer *inputs, size_t n_in,
                  anec_buffer *outputs, size_t n_out);

/* Delta reload: replace some weight files of a compiled program without
   compiling. Every blob is validated against the compiled const declarations
   (known path, BLOBFILE version, sentinel, dtype, size, no NaN/Inf) before
   anything is touched; then the program is unloaded, only the files whose
   bytes changed are rewritten atomically, and the program is loaded again
   (if it was loaded). On a validation error the old weights stay in use. */
int anec_reload_weights(anec_program *p, const anec_blob *blobs, size_t n_blobs);

/* Per-program counters (compiles is 1 if this program was compiled, 0 if it
   came from the cache). */
int anec_program_stats(const anec_program *p, struct anec_stats *out);

/* ---- helpers ----------------------------------------------------------- */

/* IEEE fp32 <-> fp16 (round to nearest even; F16C when the CPU has it). */
void anec_f32_to_f16(const float *src, uint16_t *dst, size_t n);
void anec_f16_to_f32(const uint16_t *src, float *dst, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* ANEC_RT_H */
