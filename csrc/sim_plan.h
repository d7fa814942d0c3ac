/*
 * sim_plan.h - the sim's compiled form of a MIL function (internal).
 *
 * sim_plan_build is the sim's "ANE compiler": it walks the parsed MIL,
 * rejects what the ANE compiler rejects (naming the MIL line and the
 * constraint id), infers every result type and compares it with the declared
 * one, resolves every parameter (strides, axes, perm, ...) at compile time
 * and produces a flat list of values and ops. Which MIL ops it knows comes
 * from sim_ops.h, generated from the Python op table. The plan is immutable and
 * shared (refcounted) by every program compiled from, or cloned from, it;
 * per-program state (weights, activations) lives in sim_state.
 */
#ifndef ANEC_SIM_PLAN_H
#define ANEC_SIM_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "anec_rt.h"
#include "mil_parse.h"
#include "sim_ops.h"

enum { SV_INPUT = 1, SV_CONST, SV_BLOB, SV_OP };

/* A compressed weight (sim_constexpr.c): the constexpr_* op that makes it at load. */
enum { DEC_AFFINE = 1, DEC_SHIFT_SCALE, DEC_LUT, DEC_LUT_PACKED, DEC_SPARSE,
       DEC_MASK_COPY, DEC_SPARSE_SHIFT_SCALE, DEC_LUT_SPARSE }; /* the last 3: sparse-to-sparse ops */
typedef struct sim_decomp {
    int form;                    /* DEC_* */
    int data;                    /* quantized data / indices (value index) */
    int scale;                   /* -1 if none */
    int offset;                  /* zero point / offset, -1 if none */
    int lut;                     /* -1 if none */
    int axis;                    /* DEC_AFFINE: the channel axis */
    int bits;                    /* DEC_LUT*: bits per index */
    int mask;                    /* DEC_SPARSE*, DEC_MASK_COPY, DEC_LUT_SPARSE: the mask (uint1, or ios16
                                    packed uint8), -1 if none */
} sim_decomp;

typedef struct sim_value {
    char *name;
    int kind;                    /* SV_* */
    mil_dtype dt;
    int rank;
    int64_t shape[ANEC_MAX_RANK];
    size_t numel;
    size_t bytes;                /* numel * element size (0 for strings) */
    int line;
    /* SV_CONST: the value, already in storage format (fp16 bits, fp32, int32, bool bytes) */
    void *cdata;
    char *cstr;                  /* string consts */
    double *cnum;                /* numeric consts as written (for parameters) */
    size_t cn;
    /* SV_BLOB */
    char *blob_path;             /* as in the MIL ("@model_path/weights/w.bin") */
    uint64_t blob_offset;
    sim_decomp *dec;             /* SV_BLOB made at load by a constexpr_* op (no blob_path), or NULL */
    int part;                    /* SV_BLOB read by a constexpr_* op: part of that weight */
    int slivers;                 /* SV_BLOB fp16 [M, K, 1, 1] read only as the weight of pointwise,
                                    ungrouped convs: held as sk_pack_narrow's slivers, not as rows */
    int view;                    /* SV_OP made by a reshape or identity: its operand's bytes, no storage
                                    of its own (set for the length of a run, sim_state_run) */
} sim_value;

typedef struct sim_op {
    int kind;                    /* SOP_* (sim_ops.h) */
    const char *op;              /* the MIL op (a string of the op table) */
    int line;
    int x, y;                    /* data operand value indices (y: second operand / conv weight), -1 if none */
    int *outs;                   /* result value indices */
    int n_outs;
    /* resolved parameters */
    int tx, ty;                  /* matmul transposes */
    int strides[2], dil[2], pads[4], groups;   /* conv: pads = top, bottom, left, right */
    int ksize[2];                /* pools: kernel sizes */
    int flag;                    /* avg_pool: exclude_padding_from_average; upsample_bilinear: align_corners */
    int axis;                    /* softmax, split (normalised) */
    int axes_mask;               /* reductions: bit d set = reduce dim d */
    int perm[ANEC_MAX_RANK];     /* transpose */
    int64_t begin[ANEC_MAX_RANK], stride[ANEC_MAX_RANK]; /* slice: normalised begin and step per input dim */
    int squeeze_mask;            /* slice: dims dropped from the output */
    int64_t *sizes;              /* split sizes (n_outs); concat: each input's size along axis (n_ins) */
    int *ins;                    /* concat: the input value indices (x is ins[0]) */
    int n_ins;
    int64_t pad_before[ANEC_MAX_RANK]; /* pad */
    double pad_value;
    float qscale;                /* quantize, dequantize (sim_quant.c): the scale as stored */
    int qzero;                   /* and the zero point */
} sim_op;

typedef struct sim_plan {
    _Atomic int refs;            /* shared by programs on several threads */
    sim_value *vals;
    size_t n_vals;
    sim_op *ops;
    size_t n_ops;
    int *inputs;                 /* value index per func input, signature order */
    size_t n_inputs;
    int *outputs;                /* value index per returned name, return order */
    size_t n_outputs;
    int *in_bind, *out_bind;     /* alphabetical binding order -> value index */
    int n_blobs;                 /* BLOBFILE-backed consts */
    int n_parts, n_decomp;       /* of them payloads of compressed weights; constexpr results */
    size_t max_scratch;          /* floats of scratch the largest op needs */
} sim_plan;

/* Compile MIL text into a plan, enforcing `limits` (required: they come from
   the manifest or the runtime's open options). Returns NULL with a message
   naming the MIL line and the constraint id; *status is set to ANEC_EPARSE
   or ANEC_ECOMPILE (or ANEC_ENOMEM, ANEC_EINVAL without limits). */
sim_plan *sim_plan_build(const char *mil, size_t len, const anec_limits *limits,
                         int *status, char *err, size_t errlen);
/* The same for a device that also accepts the contested ops named in `accept`
   (NULL-terminated MIL op names, e.g. {"concat", NULL}; NULL: none), which the
   catalog's reading rejects (sim_ops.h, SIM_REJECTED_OPS: the device switch
   <op>=accept of driver_sim.c). */
sim_plan *sim_plan_build_accepting(const char *mil, size_t len, const anec_limits *limits,
                                   const char *const *accept, int *status, char *err, size_t errlen);
void sim_plan_retain(sim_plan *p);
void sim_plan_release(sim_plan *p);

/* A conv's constant weight packed once for its GEMM (sim_exec.c, pack_weights). */
typedef struct sim_panel {
    float *f32;                  /* fp32 panels for sk_gemm_packed, or NULL */
} sim_panel;

/* Per-program executor state. */
typedef struct sim_state {
    sim_plan *plan;
    void **store;                /* per value: storage (NULL for params); BLOBFILE consts in sim_weights */
    int loaded;
    float *scratch[3];
    size_t scratch_cap[3];
    int threads;
    sim_panel *panels;           /* per op (from load to unload) */
    unsigned runs;               /* runs since load, counted up to 2 (the weights are packed at the second) */
} sim_state;

sim_state *sim_state_new(sim_plan *plan, int threads);
void sim_state_free(sim_state *s);
/* One weight file's bytes, keyed by its MIL path ("@model_path/weights/w.bin"). */
typedef struct sim_file {
    const char *path;
    const uint8_t *data;
    size_t len;
} sim_file;

/* Take every BLOBFILE const out of files[] (validated: header, record,
   dtype, size) into the process's shared weights (sim_weight_acquire: one
   copy of identical payloads across programs) and allocate activation
   storage; files[] is not used after the call. drop_pages: files[].data lie
   in a private read-only mapping of a file, whose pages each payload taken
   gives back to the kernel (the mapping's resident size stays near one
   payload). */
int sim_state_load(sim_state *s, const sim_file *files, size_t n_files, int drop_pages, char *err, size_t errlen);
void sim_state_unload(sim_state *s);

/* The process's constant weights (sim_weights.c): a 64-byte aligned buffer equal to
   data[0..len), shared with every identical payload already held (one more reference),
   or NULL out of memory; release gives one reference back (1), or returns 0 for a
   pointer that is not one of them. sim_weight_bytes: the bytes held. */
void *sim_weight_acquire(const void *data, size_t len);
/* The same for the payload of an fp16 [rows x cols] matrix, held as sk_pack_narrow's slivers
   (shared only with payloads taken as slivers; NULL for an empty matrix). */
void *sim_weight_acquire_slivers(const void *data, int rows, int cols);
int sim_weight_release(void *ptr);
size_t sim_weight_bytes(void);
/* Decompress constexpr value v from its (loaded) operands into s->store[v] (sim_constexpr.c). */
int sim_decompress(sim_state *s, int v, char *err, size_t errlen);
/* 1 for the packed sub-byte integer dtypes (uint1..uint6, int4). */
int sim_dtype_subbyte(mil_dtype dt);
/* Run the function. in[i]/out[j] are surfaces in binding order, checked by the caller. */
int sim_state_run(sim_state *s, uint8_t *const *in, uint8_t *const *out, char *err, size_t errlen);

#endif
