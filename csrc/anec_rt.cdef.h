/* anec_rt.cdef.h - the declarations of anec_rt.h in the subset of C that
   cffi's cdef() parses (no includes, no preprocessor logic). Keep in sync with
   anec_rt.h: the cffi build (API mode) compiles generated code that uses these
   declarations against the real header with -Werror, so a mismatch in a
   signature or a struct field fails the build. */

#define ANEC_OK        0
#define ANEC_EINVAL    1
#define ANEC_ENOMEM    2
#define ANEC_EIO       3
#define ANEC_EPARSE    4
#define ANEC_ECOMPILE  5
#define ANEC_EBUDGET   6
#define ANEC_ELOAD     7
#define ANEC_EEVAL     8
#define ANEC_EWEIGHTS  9
#define ANEC_ESTATE   10
#define ANEC_EUNAVAIL 11
#define ANEC_EDRIVER  12

#define ANEC_DTYPE_FP16  1
#define ANEC_DTYPE_FP32  2
#define ANEC_DTYPE_UINT8 3
#define ANEC_DTYPE_INT8  4
#define ANEC_DTYPE_INT32 5
#define ANEC_DTYPE_BOOL  6
#define ANEC_MAX_RANK 8

const char *anec_strerror(int code);

typedef struct anec_limits {
    int max_blob_tensors;
    int scalar_penalty;
    int max_conv_out_channels;
    size_t min_surface_bytes;
    int allow_fp32_io;
    size_t surface_alignment;
} anec_limits;

typedef struct anec_blob {
    const char *path;
    const uint8_t *data;
    size_t len;
} anec_blob;

typedef struct anec_buffer {
    void *data;
    size_t bytes;
} anec_buffer;

typedef struct anec_io {
    int dtype;
    void *data;
    size_t bytes;
} anec_io;

typedef struct anec_tensor_info {
    const char *name;
    int dtype;
    int rank;
    int64_t shape[8];
    size_t bytes;
    size_t binding;
    size_t decl_index;
} anec_tensor_info;

#define ANEC_RELOAD_AUTO        0
#define ANEC_RELOAD_DATA_PATCH  1
#define ANEC_RELOAD_RECOMPILE   2
#define ANEC_RELOAD_INPUTS      4
#define ANEC_RELOAD_NEW_OBJECT  8
#define ANEC_RELOAD_VERIFIED    256

typedef struct anec_options {
    int compile_budget;
    const char *temp_root;
    int sim_threads;
    unsigned reload_verified;
    const char *sim_device;
    int process_budget;
} anec_options;

struct anec_stats {
    uint64_t compiles;
    int64_t compile_budget;
    int64_t compile_budget_left;
    uint64_t cache_hits;
    uint64_t loads, unloads, reloads, evaluations;
    uint64_t blobs_patched;
    uint64_t programs_live;
    uint64_t dirs_live;
    uint64_t ns_compile, ns_load, ns_unload, ns_reload, ns_evaluate;
    uint64_t reloads_data_patch, reloads_recompile, reloads_inputs;
    uint64_t reloads_new_object;
    uint64_t process_compiles;
    uint64_t host_in_bytes, host_out_bytes, surface_copy_bytes;
};

typedef struct anec_reload_info {
    int strategy;
    int data_patchable;
    unsigned verified;
    char why[256];
} anec_reload_info;

typedef struct anec_runtime anec_runtime;
typedef struct anec_program anec_program;
typedef struct anec_pipeline anec_pipeline;

int anec_runtime_open(const char *driver, const anec_options *opts, anec_runtime **out);
void anec_runtime_shutdown(anec_runtime *rt);
void anec_runtime_close(anec_runtime *rt);
const char *anec_driver_name(const anec_runtime *rt);
int anec_driver_available(const char *name, char *why, size_t whylen);
const char *anec_last_error(const anec_runtime *rt);
int anec_stats(const anec_runtime *rt, struct anec_stats *out);
unsigned anec_reload_verified(const anec_runtime *rt);
const char *anec_reload_strategy_name(int strategy);

int anec_compile(anec_runtime *rt, const char *mil, size_t mil_len,
                 const anec_blob *blobs, size_t n_blobs,
                 const anec_limits *limits, anec_program **out);
int anec_load(anec_program *p);
int anec_unload(anec_program *p);
void anec_program_close(anec_program *p);
void anec_program_free(anec_program *p);

size_t anec_program_num_inputs(const anec_program *p);
size_t anec_program_num_outputs(const anec_program *p);
int anec_program_input(const anec_program *p, size_t i, anec_tensor_info *out);
int anec_program_output(const anec_program *p, size_t i, anec_tensor_info *out);
const char *anec_program_dir(const anec_program *p);

int anec_call(anec_program *p, const anec_io *inputs, size_t n_in,
              const anec_io *outputs, size_t n_out);
int anec_set_inputs(anec_program *p, const anec_io *inputs, size_t n_in);
int anec_reload_inputs(anec_program *p, const anec_io *inputs, size_t n_in);
typedef struct anec_input_view {
    size_t input;
    const void *data;
    int dtype;
    uint64_t rows, cols;
    int64_t row_stride, col_stride;
} anec_input_view;
int anec_reload_input_views(anec_program *p, const anec_input_view *views, size_t n, long long *bad);

uint8_t *anec_program_input_surface(anec_program *p, size_t i);
uint8_t *anec_program_output_surface(anec_program *p, size_t i);
size_t anec_program_input_surface_bytes(const anec_program *p);
size_t anec_program_output_surface_bytes(const anec_program *p);
int anec_run(anec_program *p);

int anec_evaluate(anec_program *p, const anec_buffer *inputs, size_t n_in,
                  anec_buffer *outputs, size_t n_out);

int anec_reload_weights(anec_program *p, const anec_blob *blobs, size_t n_blobs);
int anec_reload_weights_using(anec_program *p, const anec_blob *blobs, size_t n_blobs, int strategy);
typedef struct anec_weight_array {
    uint64_t record;
    const void *data;
    uint64_t count;
    int dtype;
} anec_weight_array;
int anec_reload_arrays(anec_program *p, const char *path, const anec_weight_array *arrays, size_t n, long long *bad);
int anec_program_reload_info(const anec_program *p, anec_reload_info *out);
int anec_program_stats(const anec_program *p, struct anec_stats *out);

typedef struct anec_slice {
    uint64_t outer, extent, inner;
    uint64_t start, count;
} anec_slice;
int anec_write_input_slice(anec_program *p, anec_pipeline *pl, size_t input, const anec_slice *slice,
                           const anec_io *data);
typedef struct anec_pipe_src {
    int stage;
    size_t index;
} anec_pipe_src;
typedef struct anec_pipe_stage {
    anec_program *program;
    const anec_pipe_src *inputs;
} anec_pipe_stage;
struct anec_pipeline_stats {
    uint64_t calls;
    uint64_t stages;
    uint64_t zero_copy_edges;
    uint64_t copied_edges;
    uint64_t host_inputs;
    uint64_t resident_inputs;
    uint64_t ns_call;
    uint64_t surface_bytes;
    uint64_t host_in_bytes, host_out_bytes, surface_copy_bytes;
};
int anec_pipeline_create(anec_runtime *rt, const anec_pipe_stage *stages, size_t n_stages,
                         size_t n_inputs, const anec_pipe_src *outputs, size_t n_outputs,
                         anec_pipeline **out);
int anec_pipeline_call(anec_pipeline *pl, const anec_io *inputs, size_t n_in,
                       const anec_io *outputs, size_t n_out);
int anec_pipeline_set_inputs(anec_pipeline *pl, const anec_io *inputs, size_t n_in, int as_reload);
int anec_pipeline_set_stage_inputs(anec_pipeline *pl, const anec_io *const *inputs, const size_t *n_in,
                                   int as_reload);
int anec_pipeline_reload(anec_pipeline *pl, const anec_blob *const *blobs, const size_t *n_blobs);
int anec_pipeline_stats(const anec_pipeline *pl, struct anec_pipeline_stats *out);
void anec_pipeline_free(anec_pipeline *pl);

uint64_t anec_process_compiles(const char *driver);
int anec_process_reset_budget(const char *driver);

void anec_f32_to_f16(const float *src, uint16_t *dst, size_t n);
void anec_f16_to_f32(const uint16_t *src, float *dst, size_t n);
uint32_t anec_max_magnitude_bits(const void *src, size_t width, size_t n);

/* ---- compression (host_compress.c) ---- */
#define ANEC_QUANT_SYMMETRIC_INT8 0
#define ANEC_QUANT_AFFINE_INT8    1
#define ANEC_QUANT_AFFINE_UINT8   2
int anec_quantize_linear8(const uint16_t *w, size_t outer, size_t channels, size_t inner, int mode, void *q,
                          uint16_t *scale, void *zero_point, double *err_sq, double *norm_sq, float *max_err,
                          float *max_w);
int anec_dense_errors(const uint16_t *w, const uint16_t *d, size_t outer, size_t channels, size_t inner,
                      double *err_sq, double *norm_sq, float *max_err, float *max_w);
int anec_kmeans_1d(const double *values, const double *weights, size_t n, size_t k, double *centroids);
/* ---- host work of a training step (rt_host.c) ---- */
typedef struct anec_adamw_coef {
    float grad_scale;
    float beta1, one_minus_beta1, beta2, one_minus_beta2;
    float inv_bias2;
    float eps;
    float step_size;
    float decay_factor;
    float limit;
    int scale_grad, decay, check;
} anec_adamw_coef;
int anec_adamw_f32(const float *p, const float *g, const float *m, const float *v, float *p_out, float *m_out,
                   float *v_out, uint16_t *half_out, size_t n, const anec_adamw_coef *coef);
double anec_sum_squares(const float *x, size_t n);
int anec_add_scaled(float *dst, const void *src, size_t width, float scale, size_t n, int accumulate);
int anec_xent_shift(const float *logits, size_t n_class, size_t n_pos, double *z, double *col_max);
int anec_xent_grad(const double *e, size_t n_class, size_t n_pos, const int64_t *target, const uint8_t *valid,
                   double grad_scale, float *grad, double *picked, double *sums);
