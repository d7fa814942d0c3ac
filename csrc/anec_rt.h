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
 *   anec_compile -> anec_load -> (anec_call | anec_run | anec_evaluate)*
 *                -> [anec_reload_weights -> (anec_call | ...)*]*
 *                -> anec_program_free
 *
 * Every function returning int returns ANEC_OK (0) or one of the ANEC_E*
 * codes below; the detailed message (MIL line numbers, constraint ids, file
 * names) is in anec_last_error(): the calling thread's last failed call.
 *
 * Threads. Every function may be called from any thread. Calls on one
 * program are serialized (an evaluation, a reload and a close of the same
 * program never overlap: concurrent anec_call()s return what a sequential
 * run would, and no evaluation sees a mix of old and new weights); calls on
 * different programs run in parallel. The raw surface pointers
 * (anec_program_input_surface, anec_run) are for single-threaded use: from
 * several threads, use anec_call(), which copies in, evaluates and copies out
 * under the program's lock.
 *
 * Lifetimes. A program holds a reference on its runtime: runtimes and
 * programs may be closed and freed in any order. anec_runtime_close() closes
 * every program still open (their handles stay valid: later calls fail with
 * ANEC_ESTATE until anec_program_free()); the runtime's memory goes with the
 * last handle. A runtime is bound to the process that opened it: after
 * fork() the child gets ANEC_ESTATE from it (open a new runtime there) and
 * freeing it in the child touches neither the device nor the directories.
 *
 * Weights are baked at compile time (as on the device): a reload replaces
 * them with one of the reload strategies below, chosen per program among
 * those verified on this machine (anec_program_reload_info says which).
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

/* Device-side limits the compiler enforces: the manifest's "limits" (its
   target profile; anec/targets.py is the one place their values live). The
   runtime has no defaults of its own: anec_compile requires them. */
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

/* One host tensor for anec_call / anec_reload_inputs: packed elements of
   `dtype`. It may differ from the program's dtype only as fp32 on the host
   for fp16 on the device (converted, round to nearest even); bytes must be
   exactly numel * element size. */
typedef struct anec_io {
    int dtype;                    /* ANEC_DTYPE_* of data */
    void *data;                   /* inputs: NULL keeps the surface's content */
    size_t bytes;
} anec_io;

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

/* Reload strategies (weights are baked at compile time; the device behaviour
   each relies on is named by its evidence id, see `anec constraints`):
     DATA_PATCH  unload the program's SAME model object, rewrite its compiled
                 `data` (a program whose weights are one BLOBFILE that the
                 compiled data was observed to equal), load it again; no
                 compile (ANE-SAME-OBJECT-PATCH: a hypothesis the selftest
                 settles per machine).
     NEW_OBJECT  build a NEW model object from the same MIL and the new
                 weights, never compiled, whose directory holds the compiled
                 network and the new `data`; load it and switch the program to
                 it; no compile (ANE-NEW-OBJECT-LOAD, the path Orion tests).
     RECOMPILE   compile the program again with the new weights; spends one
                 compile of the process budget.
     INPUTS      the weights are program inputs (compiled that way): a reload
                 writes the input surfaces (anec_reload_inputs); nothing else. */
#define ANEC_RELOAD_AUTO        0
#define ANEC_RELOAD_DATA_PATCH  1
#define ANEC_RELOAD_RECOMPILE   2
#define ANEC_RELOAD_INPUTS      4
#define ANEC_RELOAD_NEW_OBJECT  8
/* anec_options.reload_verified: set this bit to give the verified mask
   explicitly (0 alone means the driver's default). */
#define ANEC_RELOAD_VERIFIED    0x100

/* Runtime options; a zeroed struct (or NULL) means all defaults. */
typedef struct anec_options {
    int compile_budget;           /* cap on this runtime's compiles; 0: none besides the
                                     process budget (process_budget) */
    const char *temp_root;        /* parent of program directories; NULL: a fresh
                                     directory under $TMPDIR (removed at close) */
    int sim_threads;              /* sim kernel threads; 0: $ANEC_SIM_THREADS or 2 */
    unsigned reload_verified;     /* 0: the driver's default (the sim guarantees what its
                                     device model does; on the ane nothing is verified until
                                     `python -m anec.selftest` says so); else
                                     ANEC_RELOAD_VERIFIED | mask of ANEC_RELOAD_* */
    const char *sim_device;       /* the sim's device model, e.g. "data=tensor,load=data"
                                     (NULL: $ANEC_SIM_DEVICE, else the defaults; see
                                     docs/runtime.md) */
    int process_budget;           /* compiles the device accepts per process: the target's
                                     (anec/targets.py; 119 on every known chip). The first
                                     runtime of a driver that gives it sets it for the
                                     process (a smaller value later lowers it); 0: unknown,
                                     so only the compile_budget cap applies */
} anec_options;

/* Counters and cumulative wall time per phase (nanoseconds). The struct tag
   shares its name with the function anec_stats(). */
struct anec_stats {
    uint64_t compiles;            /* driver compiles performed */
    int64_t compile_budget;       /* the budget (the smaller of the process budget and the runtime cap) */
    int64_t compile_budget_left;  /* compiles still allowed */
    uint64_t cache_hits;          /* anec_compile calls served without a compile */
    uint64_t loads, unloads, reloads, evaluations;
    uint64_t blobs_patched;       /* blob files replaced by delta reloads */
    uint64_t programs_live;       /* programs not yet closed */
    uint64_t dirs_live;           /* program directories on disk */
    uint64_t ns_compile, ns_load, ns_unload, ns_reload, ns_evaluate;
    uint64_t reloads_data_patch, reloads_recompile, reloads_inputs;  /* reloads per strategy */
    uint64_t reloads_new_object;
    uint64_t process_compiles;    /* compiles made by every runtime of this process on this driver */
    /* Bytes the CPU moves, as they land: written into input surfaces from host
       memory (calls, set/reload inputs, slice writes; fp16 bytes for an fp16
       input fed fp32), read from output surfaces into host memory, and copied
       between surfaces (a pipeline input fed to several stages, a stage edge
       between surfaces of two sizes). */
    uint64_t host_in_bytes, host_out_bytes, surface_copy_bytes;
};

/* Why a program reloads the way it does. */
typedef struct anec_reload_info {
    int strategy;                 /* what anec_reload_weights uses now (ANEC_RELOAD_*) */
    int data_patchable;           /* 1: one BLOBFILE, and the compiled data was observed to equal it */
    unsigned verified;            /* strategies verified on this machine (mask) */
    char why[256];
} anec_reload_info;

typedef struct anec_runtime anec_runtime;
typedef struct anec_program anec_program;
typedef struct anec_pipeline anec_pipeline;   /* a pipeline of programs (below) */

/* ---- runtime ----------------------------------------------------------- */

/* Open a runtime on driver "sim", "ane" or "auto". opts may be NULL. */
int anec_runtime_open(const char *driver, const anec_options *opts, anec_runtime **out);
/* Close every program still open (their handles stay valid until
   anec_program_free; calls on them fail with ANEC_ESTATE), remove the program
   directories and close the driver. The handle stays valid; idempotent. */
void anec_runtime_shutdown(anec_runtime *rt);
/* anec_runtime_shutdown, then release the caller's handle. NULL is ignored. */
void anec_runtime_close(anec_runtime *rt);
/* "sim" or "ane" (the driver actually used). */
const char *anec_driver_name(const anec_runtime *rt);
/* 1 if driver `name` can be used on this machine, else 0 and why (may be NULL). */
int anec_driver_available(const char *name, char *why, size_t whylen);
/* Message of the calling thread's last failed call ("" if none); rt is unused
   (kept for source compatibility) and may be NULL. */
const char *anec_last_error(const anec_runtime *rt);
/* Runtime-wide counters. */
int anec_stats(const anec_runtime *rt, struct anec_stats *out);
/* The reload strategies verified for this runtime (ANEC_RELOAD_* mask). */
unsigned anec_reload_verified(const anec_runtime *rt);
/* "data-patch", "new-object", "recompile", "inputs" (or "auto"). */
const char *anec_reload_strategy_name(int strategy);

/* ---- programs ---------------------------------------------------------- */

/* Compile MIL text (mil_len bytes, no NUL needed) with its weight BLOBFILEs.
   A program with the same MIL and weight paths as one compiled before in this
   runtime is a cache hit (no compile, no budget spent) when the compiled form
   can be shared: identical weight bytes, or other weights that a verified data
   patch can install; otherwise it is compiled. limits is required (ANEC_EINVAL if NULL). */
int anec_compile(anec_runtime *rt, const char *mil, size_t mil_len,
                 const anec_blob *blobs, size_t n_blobs,
                 const anec_limits *limits, anec_program **out);
/* Load the compiled program into the device. Loading a loaded program does nothing. */
int anec_load(anec_program *p);
int anec_unload(anec_program *p);
/* Unload, release the device program and the surfaces; the handle stays
   valid (later calls fail with ANEC_ESTATE). Idempotent. */
void anec_program_close(anec_program *p);
/* anec_program_close, then release the handle; the program directory is
   removed when no other program shares it. NULL is ignored. */
void anec_program_free(anec_program *p);

/* Binding tables. */
size_t anec_program_num_inputs(const anec_program *p);
size_t anec_program_num_outputs(const anec_program *p);
int anec_program_input(const anec_program *p, size_t i, anec_tensor_info *out);
int anec_program_output(const anec_program *p, size_t i, anec_tensor_info *out);
/* The program directory (<root>/<hexid>) holding model.mil, weights/ and,
   on the sim, the compiled net.plist + data; "" once closed (and in a forked
   child). A reload may move the program to another directory; the string
   stays valid until anec_program_free, whatever other threads do. */
const char *anec_program_dir(const anec_program *p);

/* Evaluate with host tensors in binding order: copy the inputs into the
   program's surfaces (converting fp32 -> fp16 where the program is fp16),
   evaluate, copy the outputs out (fp16 -> fp32 where asked), all under the
   program's lock. An input with data == NULL keeps the surface's current
   content (weights passed as inputs stay in their surfaces). */
int anec_call(anec_program *p, const anec_io *inputs, size_t n_in,
              const anec_io *outputs, size_t n_out);
/* Write the non-NULL inputs into their surfaces (binding order, as anec_call)
   without evaluating: the initial values of weights compiled as inputs. */
int anec_set_inputs(anec_program *p, const anec_io *inputs, size_t n_in);
/* The same, counted as a reload with strategy ANEC_RELOAD_INPUTS: new values
   of weights compiled as program inputs (no unload, no compile). */
int anec_reload_inputs(anec_program *p, const anec_io *inputs, size_t n_in);

/* A 2-D view of a host fp16 or fp32 array for anec_reload_input_views:
   element (r, c), r < rows, c < cols, is at element r * row_stride +
   c * col_stride of data (strides in elements, e.g. a weight's transpose or a
   slice of it); it is written row-major into fp16 input `input` (binding
   index), whose element count is rows * cols. */
typedef struct anec_input_view {
    size_t input;
    const void *data;
    int dtype;                    /* ANEC_DTYPE_FP16 or ANEC_DTYPE_FP32 */
    uint64_t rows, cols;
    int64_t row_stride, col_stride;
} anec_input_view;
/* anec_reload_inputs from views, without packed host copies: every view is
   checked first (finite; |x| <= 65504, compared on the array's own bits; an
   element set already checked under another view is not read again), then each
   surface is locked, written (transposed and converted in the copy loop) and
   unlocked. A refused value gives ANEC_EWEIGHTS with *bad = its view's index
   (else *bad = -1); on any error no surface is written. */
int anec_reload_input_views(anec_program *p, const anec_input_view *views, size_t n, long long *bad);

/* Core-owned surfaces: one per input and per output, uniform allocation size
   per direction, >= limits.min_surface_bytes, zero-initialised. Write input i
   packed at byte 0 of anec_program_input_surface(p, i), call anec_run, read
   output j packed at byte 0 of anec_program_output_surface(p, j). Pointers stay
   valid until the program is closed. NULL if i is out of range. */
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

/* Delta reload: replace some weight files of a compiled program. Every blob
   is validated against the compiled const declarations (known path, BLOBFILE
   version, sentinel, dtype, size, no NaN/Inf) before anything is touched;
   then the program's strategy applies them: DATA_PATCH (unload, rewrite the
   compiled data and the file, load; no compile) or RECOMPILE (one compile
   with the new files, then the program switches to it). Files whose bytes do
   not change are skipped; nothing changes at all when none does. On any
   error the old weights stay in use. */
int anec_reload_weights(anec_program *p, const anec_blob *blobs, size_t n_blobs);
/* The same with a forced strategy (ANEC_RELOAD_DATA_PATCH,
   ANEC_RELOAD_NEW_OBJECT or ANEC_RELOAD_RECOMPILE), verified or not: for
   probes that verify strategies (python -m anec.selftest). DATA_PATCH and
   NEW_OBJECT still need a data-patchable program. */
int anec_reload_weights_using(anec_program *p, const anec_blob *blobs, size_t n_blobs, int strategy);
/* One array of anec_reload_arrays: `count` packed elements of `dtype`
   (ANEC_DTYPE_FP16 or ANEC_DTYPE_FP32) for the blob whose metadata record is
   at offset `record` of the program's weight file. */
typedef struct anec_weight_array {
    uint64_t record;
    const void *data;
    uint64_t count;
    int dtype;
} anec_weight_array;
/* Delta reload of a DATA_PATCH or NEW_OBJECT program (anec_program_reload_info) from arrays
   instead of a whole file: the new weight file `path` (its MIL path) is the
   current one with these payloads, each checked (finite; |x| <= 65504 for an
   fp16 blob, compared on the array's own bits), converted to the blob's dtype
   (an fp32 blob takes fp32 arrays only) and written in one pass, never held
   in memory whole. Nothing is written when every payload equals the present
   one. A refused value gives ANEC_EWEIGHTS with *bad = its array's index
   (else *bad = -1); a program that reloads another way, ANEC_EINVAL. On any
   error the old weights stay in use. */
int anec_reload_arrays(anec_program *p, const char *path, const anec_weight_array *arrays, size_t n, long long *bad);
/* Which strategy anec_reload_weights uses for this program, and why. */
int anec_program_reload_info(const anec_program *p, anec_reload_info *out);

/* Per-program counters (compiles is 1 if this program was compiled, 0 if it
   came from the cache; reloads by recompile add theirs). */
int anec_program_stats(const anec_program *p, struct anec_stats *out);

/* ---- state inputs: writes of part of an input ---------------------------- */

/* An input's packed elements viewed row-major as [outer][extent][inner]
   (outer * extent * inner must be its element count), and the rows
   start .. start + count of the middle axis: e.g. positions pos .. pos + n of
   a [1, KV, T, D] input are outer KV, extent T, inner D; column c of a
   [1, 1, W, T] input is outer W, extent T, inner 1, start c, count 1. */
typedef struct anec_slice {
    uint64_t outer, extent, inner;
    uint64_t start, count;
} anec_slice;

/* Write rows of one input without evaluating: data holds outer * count * inner
   packed elements (the input's dtype, or fp32 for an fp16 input: converted),
   written into rows slice->start .. + count of the surfaces that hold input
   `input`; every other byte keeps what the surface holds (surfaces start
   zeroed; anec_call with that input's data NULL leaves it as written). Give
   exactly one of p (its input `input`, binding order) and pl (pipeline input
   `input`: written into every stage surface it feeds). Under the program's or
   the pipeline's lock; each surface locked for writing around its copy. The
   view, range and byte count are checked (overflow included) before anything
   is written: ANEC_EINVAL with the reason otherwise. Counted in
   host_in_bytes. Inputs that live in their surfaces across calls this way are
   state (a KV cache: each step writes its new rows, not the whole cache). */
int anec_write_input_slice(anec_program *p, anec_pipeline *pl, size_t input, const anec_slice *slice,
                           const anec_io *data);

/* ---- pipelines ---------------------------------------------------------- */

/* A func too large for one ANE program is compiled into a pipeline of stage
   programs (anec/passes/partition.py); the runtime runs it as one program.
   Each stage input comes from a pipeline input or an earlier stage's output.
   A stage output feeds a later stage with no copy when the two surfaces have
   the same allocation size (each stage's size is its program's own, set by
   its min_surface_bytes); otherwise its packed bytes are copied. Calls are
   serialized per pipeline (a reload never lands between two stages of one
   call); stages run in order, each under its program's lock. */

/* Where a stage input comes from: stage -1 is pipeline input `index`;
   stage -2 is a resident input of the stage's own program (a weight compiled
   as an input: the host fills it with anec_set_inputs on that program, the
   pipeline never writes it; `index` is ignored); otherwise output `index`
   (binding order) of an earlier stage. */
typedef struct anec_pipe_src {
    int stage;
    size_t index;
} anec_pipe_src;

typedef struct anec_pipe_stage {
    anec_program *program;        /* loaded; the pipeline keeps a reference */
    const anec_pipe_src *inputs;  /* one per program input, binding order */
} anec_pipe_stage;

struct anec_pipeline_stats {
    uint64_t calls;
    uint64_t stages;
    uint64_t zero_copy_edges;     /* stage inputs bound to their producer's output surface */
    uint64_t copied_edges;        /* stage inputs copied from another surface */
    uint64_t host_inputs;         /* stage inputs written from host tensors */
    uint64_t resident_inputs;     /* stage inputs filled once by the host (weights as inputs) */
    uint64_t ns_call;
    uint64_t surface_bytes;       /* bytes of the stages' own I/O surfaces, allocated per stage */
    uint64_t host_in_bytes, host_out_bytes, surface_copy_bytes; /* as in anec_stats, for this pipeline */
};

/* Wire stages into a pipeline with n_inputs pipeline inputs (every one must
   feed some stage input, all of the same dtype and size) and n_outputs
   outputs (each a stage output). */
int anec_pipeline_create(anec_runtime *rt, const anec_pipe_stage *stages, size_t n_stages,
                         size_t n_inputs, const anec_pipe_src *outputs, size_t n_outputs,
                         anec_pipeline **out);
/* Run every stage once: pipeline inputs as host tensors (anec_io, as
   anec_call; data NULL keeps what the consumers' surfaces hold), outputs
   copied out (fp16 -> fp32 where asked). */
int anec_pipeline_call(anec_pipeline *pl, const anec_io *inputs, size_t n_in,
                       const anec_io *outputs, size_t n_out);
/* Write pipeline inputs into their consumers' surfaces without running
   (weights compiled as inputs); as_reload counts it as an inputs reload. */
int anec_pipeline_set_inputs(anec_pipeline *pl, const anec_io *inputs, size_t n_in, int as_reload);
/* Write resident inputs (stage -2: weights a stage's program takes as inputs)
   of several stages under the pipeline's lock, so no call runs between two of
   them: inputs[s] holds stage s's program inputs in binding order (n_in[s]
   of them, or 0 to leave the stage alone; data NULL keeps an input). Every
   non-NULL input must be resident; all are checked before any is written.
   as_reload counts it as an inputs reload. */
int anec_pipeline_set_stage_inputs(anec_pipeline *pl, const anec_io *const *inputs, const size_t *n_in,
                                   int as_reload);
/* Delta reload of several stages at once, atomic with respect to calls:
   blobs[s] / n_blobs[s] are stage s's new files (n_blobs[s] may be 0). Every
   stage's files are validated, and the compiles the stages' strategies need
   checked against the budget, before any stage changes. */
int anec_pipeline_reload(anec_pipeline *pl, const anec_blob *const *blobs, const size_t *n_blobs);
int anec_pipeline_stats(const anec_pipeline *pl, struct anec_pipeline_stats *out);
/* Release the pipeline's references (the stage programs stay the caller's). */
void anec_pipeline_free(anec_pipeline *pl);

/* ---- process ----------------------------------------------------------- */

/* Compiles made in this process on driver `name` (every runtime counts). */
uint64_t anec_process_compiles(const char *driver);
/* Sim only, for test harnesses that model many processes in one: forget the
   sim compiles made so far, as a new process would. ANEC_EINVAL for other
   drivers (the device's count cannot be reset). */
int anec_process_reset_budget(const char *driver);

/* ---- helpers ----------------------------------------------------------- */

/* IEEE fp32 <-> fp16 (round to nearest even; F16C when the CPU has it). */
void anec_f32_to_f16(const float *src, uint16_t *dst, size_t n);
void anec_f16_to_f32(const uint16_t *src, float *dst, size_t n);
/* The largest |x| of n fp16 (width 2) or fp32 (width 4) values, as their bits
   with the sign cleared (so NaN and Inf sort above every finite value; any
   other width: 0). One pass, 16 bytes at a time. */
uint32_t anec_max_magnitude_bits(const void *src, size_t width, size_t n);

/* ---- compression (host_compress.c) -------------------------------------------- */

#define ANEC_QUANT_SYMMETRIC_INT8 0 /* int8 in [-127, 127], no zero point */
#define ANEC_QUANT_AFFINE_INT8    1 /* int8 in [-128, 127] and a zero point */
#define ANEC_QUANT_AFFINE_UINT8   2 /* uint8 in [0, 255] and a zero point */

/* Per-channel linear 8-bit quantization of the fp16 tensor w, viewed as
   [outer][channels][inner] (the channel axis in the middle), with coremltools'
   arithmetic as numpy computes it on fp16 (anec/compress/linear.py quantize_linear):
   q (int8 or uint8, w's layout), scale[channels] (fp16 bits), zero_point[channels]
   (int8 or uint8; not written, and may be NULL, for ANEC_QUANT_SYMMETRIC_INT8).
   Also the gate's errors of the dequantized tensor d = fp16((q - z) * scale):
   per channel err_sq = sum (d - w)^2 and norm_sq = sum w^2 (float64), and
   max_err = max |d - w|, max_w = max |w|. Returns 0; 1 when a dequantized value
   is not finite in fp16 (everything still written); 2, writing nothing useful,
   when w holds a NaN or an infinity or a scale rounds to 0 (the caller's numpy
   path decides those); ANEC_EINVAL for a bad argument or an empty tensor,
   ANEC_ENOMEM. */
int anec_quantize_linear8(const uint16_t *w, size_t outer, size_t channels, size_t inner, int mode, void *q,
                          uint16_t *scale, void *zero_point, double *err_sq, double *norm_sq, float *max_err,
                          float *max_w);
/* The gate's errors of a decompressed fp16 tensor d against the fp16 original w,
   both [outer][channels][inner], summed as anec_quantize_linear8 sums them. Returns 0;
   1 when d holds a value that is not finite; 2 when w does (the sums are then not
   meaningful: the caller's numpy path decides); ANEC_EINVAL for a bad argument. */
int anec_dense_errors(const uint16_t *w, const uint16_t *d, size_t outer, size_t channels, size_t inner,
                      double *err_sq, double *norm_sq, float *max_err, float *max_w);
/* The k centroids (ascending) of the optimal 1-D k-means of n distinct ascending
   values with weights (their counts): the dynamic program of anec/compress/palettize.py
   kmeans_1d_many, its result bit for bit. ANEC_EINVAL unless k < n < 2^32,
   ANEC_ENOMEM (it keeps (k - 1) * (n + 1) split points). */
int anec_kmeans_1d(const double *values, const double *weights, size_t n, size_t k, double *centroids);

/* ---- host work of a training step (rt_host.c) ------------------------------ */

/* One AdamW step's constants (fp32, as the numpy optimizer rounds them). */
typedef struct anec_adamw_coef {
    float grad_scale;      /* the clipping factor: g * grad_scale, when scale_grad */
    float beta1, one_minus_beta1, beta2, one_minus_beta2;
    float inv_bias2;       /* 1 / (1 - beta2^t) */
    float eps;
    float step_size;       /* lr / (1 - beta1^t) */
    float decay_factor;    /* p * decay_factor before the update, when decay */
    float limit;           /* when check: every new value finite with |x| <= limit */
    int scale_grad, decay, check;
} anec_adamw_coef;

/* AdamW over n fp32 values (decoupled weight decay, as torch.optim.AdamW):
   m' = g*(1-b1) + m*b1, v' = (g*g)*(1-b2) + v*b2 (m, v NULL on the first step:
   the terms are left out), p' = p*decay_factor - m' / (sqrt(v'*inv_bias2) + eps)
   * step_size, each operation rounded to fp32 in this order (no fused
   multiply-add). p', m', v' go to the _out buffers (which must not overlap the
   inputs) and, when half_out is not NULL, p' rounded to fp16 (nearest even) to
   half_out. Returns 0, or 1 as soon as a new value fails the check (the
   outputs are then partly written), ANEC_EINVAL for a bad argument. */
int anec_adamw_f32(const float *p, const float *g, const float *m, const float *v, float *p_out, float *m_out,
                   float *v_out, uint16_t *half_out, size_t n, const anec_adamw_coef *coef);
/* The sum of x[i]*x[i] in float64 (each square exact), in numpy's pairwise
   order: equal to numpy's np.square(x, dtype=np.float64).sum(). */
double anec_sum_squares(const float *x, size_t n);
/* dst[i] = (accumulate ? dst[i] : 0) + src[i] * scale in fp32, src fp16 (width
   2) or fp32 (width 4). ANEC_EINVAL for another width. */
int anec_add_scaled(float *dst, const void *src, size_t width, float scale, size_t n, int accumulate);
/* Softmax cross-entropy in fp64 over n_class classes at n_pos positions, logits
   fp32 [n_class][n_pos] (a position's classes a column). anec_xent_shift:
   z = logits - each column's maximum (NaN when the column holds one). The
   caller then takes exp(z) in place. anec_xent_grad: with sums[s] = the
   column's sum of e = exp(z) (in order of class; a single position: numpy's
   pairwise order), p = e / sums[s], picked[s] = p at target[s], and grad =
   (p - [class == target]) * grad_scale rounded to fp32, (0 * grad_scale) where
   valid[s] is 0. Equal to numpy's softmax on the [n_pos, n_class] transposed
   view. ANEC_EINVAL for a valid target outside [0, n_class). */
int anec_xent_shift(const float *logits, size_t n_class, size_t n_pos, double *z, double *col_max);
int anec_xent_grad(const double *e, size_t n_class, size_t n_pos, const int64_t *target, const uint8_t *valid,
                   double grad_scale, float *grad, double *picked, double *sums);

#ifdef __cplusplus
}
#endif

#endif /* ANEC_RT_H */
