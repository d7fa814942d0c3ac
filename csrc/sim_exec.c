/*
 * sim_exec.c - the sim executor: every op's kernel (kernel_<id>, dispatched
 * through the table generated from the op rows, SIM_KERNELS in sim_ops.h)
 * and sim_state_run, which runs a plan's steps on a loaded state.
 *
 * Storage follows the device: fp16 tensors hold fp16 bit patterns (every op
 * result is rounded to fp16), fp32 tensors stay fp32, arithmetic is done in
 * fp32 (GEMMs accumulate in fp32). The state, its weights and the fp32 views
 * of its values are sim_state.c; reductions are sim_reduce.c; the GEMM and
 * strided copies are sim_kernels.c.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blobfile.h"
#include "fp16.h"
#include "rt_util.h"
#include "sim_exec.h"
#include "sim_kernels.h"
#include "sim_plan.h"



/* ---- ops --------------------------------------------------------------------------- */

static float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

/* A unary kernel: its element loop, and the table of its fp16 -> fp16 results. An fp16 ->
   fp16 unary op has 65536 possible inputs: its results, computed once by the loop and rounded
   as sim_commit() rounds them, make a table that gives the same bits as computing each element
   (tanh and exp cost a libm call each, the lookup a load). Built on first use, for the
   process. */
typedef struct unary_kernel {
    void (*f32)(const float *a, float *r, size_t n);
    uint16_t *tab;               /* 65536 entries */
    int built;                   /* guarded by unary_lock */
} unary_kernel;

static pthread_mutex_t unary_lock = PTHREAD_MUTEX_INITIALIZER;

static const uint16_t *unary_table(unary_kernel *u)
{
    pthread_mutex_lock(&unary_lock);
    if (!u->built) {
        float *a = malloc(2 * 65536 * sizeof(float));
        if (!a) {
            pthread_mutex_unlock(&unary_lock);
            return NULL;
        }
        uint16_t *h = u->tab;
        for (uint32_t i = 0; i < 65536; i++)
            h[i] = (uint16_t)i;
        anec_cvt_f16_to_f32(h, a, 65536);
        u->f32(a, a + 65536, 65536);
        anec_cvt_f32_to_f16(a + 65536, h, 65536);
        free(a);
        u->built = 1;
    }
    pthread_mutex_unlock(&unary_lock);
    return u->tab;
}

static int run_unary(sim_state *s, const sim_op *o, unary_kernel *u)
{
    const sim_value *xv = &s->plan->vals[o->x];
    size_t n = xv->numel;
    const uint16_t *tab = NULL;
    if (xv->dt == MIL_DT_FP16 && s->plan->vals[o->outs[0]].dt == MIL_DT_FP16 && (tab = unary_table(u))) {
        const uint16_t *a = s->store[o->x];
        uint16_t *r = s->store[o->outs[0]];
        for (size_t i = 0; i < n; i++)
            r[i] = tab[a[i]];
        return ANEC_OK;
    }
    const float *a = sim_fview(s, 0, o->x);
    float *r = sim_fout(s, o->outs[0]);
    if (!a || !r)
        return ANEC_ENOMEM;
    u->f32(a, r, n);
    sim_commit(s, o->outs[0], r);
    return ANEC_OK;
}

/* kernel_NAME: the unary op whose element loop is LOOP (over a[i] -> r[i], i < n). */
#define UNARY_KERNEL(NAME, LOOP)                                                                   \
    static void NAME##_f32(const float *a, float *r, size_t n) { LOOP }                            \
    static uint16_t NAME##_tab[65536];                                                             \
    static unary_kernel NAME##_unary = {NAME##_f32, NAME##_tab, 0};                                \
    static int kernel_##NAME(sim_state *s, const sim_op *o) { return run_unary(s, o, &NAME##_unary); }

UNARY_KERNEL(exp, for (size_t i = 0; i < n; i++) r[i] = expf(a[i]);)
UNARY_KERNEL(sqrt, for (size_t i = 0; i < n; i++) r[i] = sqrtf(a[i]);)
UNARY_KERNEL(tanh, for (size_t i = 0; i < n; i++) r[i] = tanhf(a[i]);)
UNARY_KERNEL(sigmoid, for (size_t i = 0; i < n; i++) r[i] = sigmoidf_(a[i]);)
UNARY_KERNEL(relu, for (size_t i = 0; i < n; i++) r[i] = a[i] > 0.0f ? a[i] : (a[i] != a[i] ? a[i] : 0.0f);)
UNARY_KERNEL(silu, for (size_t i = 0; i < n; i++) r[i] = a[i] * sigmoidf_(a[i]);)

/* Broadcast strides of value v against an output shape of rank r. */
static void bstrides(const sim_value *v, int r, const int64_t *oshape, int64_t *st)
{
    int64_t vs[ANEC_MAX_RANK];
    sk_strides(v->rank, v->shape, vs);
    for (int i = 0; i < r; i++) {
        int iv = i - (r - v->rank);
        st[i] = (iv >= 0 && v->shape[iv] == oshape[i]) ? vs[iv] : 0;
    }
}

static int same_shape(const sim_value *a, const sim_value *b)
{
    if (a->rank != b->rank)
        return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i])
            return 0;
    return 1;
}

/* The inner run of a broadcast binary op: L elements, each operand read with stride 0
   (broadcast), 1 or any. The unit-stride loops go eight elements at a time (the compiler
   turns the fixed inner loop into vector instructions: the same IEEE operation per element). */
#define BIN_RUN_FN(NAME, EXPR)                                                                     \
    static void NAME(const float *restrict pa, const float *restrict pb, float *restrict pr,      \
                     int64_t L, int64_t ia, int64_t ib)                                            \
    {                                                                                              \
        int64_t i = 0;                                                                             \
        if (ia == 1 && ib == 1) {                                                                  \
            for (; i + 8 <= L; i += 8)                                                             \
                for (int j = 0; j < 8; j++) { float x = pa[i + j], y = pb[i + j]; pr[i + j] = (EXPR); } \
        } else if (ia == 1 && ib == 0) {                                                           \
            const float y = pb[0];                                                                 \
            for (; i + 8 <= L; i += 8)                                                             \
                for (int j = 0; j < 8; j++) { float x = pa[i + j]; pr[i + j] = (EXPR); }           \
        } else if (ia == 0 && ib == 1) {                                                           \
            const float x = pa[0];                                                                 \
            for (; i + 8 <= L; i += 8)                                                             \
                for (int j = 0; j < 8; j++) { float y = pb[i + j]; pr[i + j] = (EXPR); }          \
        }                                                                                          \
        for (; i < L; i++) { float x = pa[i * ia], y = pb[i * ib]; pr[i] = (EXPR); }               \
    }

BIN_RUN_FN(bin_add, x + y)
BIN_RUN_FN(bin_sub, x - y)
BIN_RUN_FN(bin_mul, x * y)
BIN_RUN_FN(bin_div, x / y)
BIN_RUN_FN(bin_pow, powf(x, y))

/* An operand's strides against the output: in order if it has the output's element count
   (same shape, or a scalar output), else 0 along the dims it is broadcast over. */
static void operand_strides(const sim_value *v, const sim_value *ov, int64_t *st)
{
    if (same_shape(v, ov) || v->numel == ov->numel)
        sk_strides(ov->rank, ov->shape, st);
    else
        bstrides(v, ov->rank, ov->shape, st);
}

typedef void (*binary_run)(const float *, const float *, float *, int64_t, int64_t, int64_t);

static int run_binary(sim_state *s, const sim_op *o, binary_run run)
{
    const sim_value *xv = &s->plan->vals[o->x], *yv = &s->plan->vals[o->y], *ov = &s->plan->vals[o->outs[0]];
    const float *a = sim_fview(s, 0, o->x);
    const float *b = sim_fview(s, 1, o->y);
    float *r = sim_fout(s, o->outs[0]);
    if (!a || !b || !r)
        return ANEC_ENOMEM;
    int64_t sa[ANEC_MAX_RANK], sb[ANEC_MAX_RANK];
    operand_strides(xv, ov, sa);
    operand_strides(yv, ov, sb);
    /* merge dims from the innermost out while both operands stay regular: the output is
       walked in order as runs of L elements over `no` outer dims */
    int64_t L = 1, ia = 0, ib = 0, oshape[ANEC_MAX_RANK], osa[ANEC_MAX_RANK], osb[ANEC_MAX_RANK];
    int d = ov->rank - 1, no = 0;
    if (d >= 0) {
        L = ov->shape[d];
        ia = sa[d];
        ib = sb[d];
        for (d--; d >= 0 && sa[d] == ia * L && sb[d] == ib * L; d--)
            L *= ov->shape[d];
    }
    for (int k = 0; k <= d; k++) {
        oshape[no] = ov->shape[k];
        osa[no] = sa[k];
        osb[no] = sb[k];
        no++;
    }
    if (ov->numel == 0)
        return ANEC_OK;
    int64_t idx[ANEC_MAX_RANK] = {0}, offa = 0, offb = 0;
    for (float *pr = r;; pr += L) {
        const float *pa = a + offa, *pb = b + offb;
        run(pa, pb, pr, L, ia, ib);
        int k = no - 1;
        for (; k >= 0; k--) {
            offa += osa[k];
            offb += osb[k];
            if (++idx[k] < oshape[k])
                break;
            offa -= osa[k] * oshape[k];
            offb -= osb[k] * oshape[k];
            idx[k] = 0;
        }
        if (k < 0)
            break;
    }
    sim_commit(s, o->outs[0], r);
    return ANEC_OK;
}

static int kernel_add(sim_state *s, const sim_op *o) { return run_binary(s, o, bin_add); }
static int kernel_sub(sim_state *s, const sim_op *o) { return run_binary(s, o, bin_sub); }
static int kernel_mul(sim_state *s, const sim_op *o) { return run_binary(s, o, bin_mul); }
static int kernel_div(sim_state *s, const sim_op *o) { return run_binary(s, o, bin_div); }
static int kernel_pow(sim_state *s, const sim_op *o) { return run_binary(s, o, bin_pow); }

static int kernel_softmax(sim_state *s, const sim_op *o)
{
    const sim_value *xv = &s->plan->vals[o->x];
    const float *a = sim_fview(s, 0, o->x);
    float *r = sim_fout(s, o->outs[0]);
    if (!a || !r)
        return ANEC_ENOMEM;
    size_t outer = 1, inner = 1, n = (size_t)xv->shape[o->axis];
    for (int d = 0; d < o->axis; d++)
        outer *= (size_t)xv->shape[d];
    for (int d = o->axis + 1; d < xv->rank; d++)
        inner *= (size_t)xv->shape[d];
    for (size_t p = 0; p < outer; p++)
        for (size_t q = 0; q < inner; q++) {
            const float *x = a + p * n * inner + q;
            float *y = r + p * n * inner + q;
            float m = -INFINITY;
            for (size_t i = 0; i < n; i++)
                if (x[i * inner] > m)
                    m = x[i * inner];
            float sum = 0.0f;
            for (size_t i = 0; i < n; i++) {
                float e = expf(x[i * inner] - m);
                y[i * inner] = e;
                sum += e;
            }
            float inv = 1.0f / sum;
            for (size_t i = 0; i < n; i++)
                y[i * inner] *= inv;
        }
    sim_commit(s, o->outs[0], r);
    return ANEC_OK;
}


static int kernel_reduce_sum(sim_state *s, const sim_op *o) { return sim_run_reduce(s, o, REDUCE_SUM); }
static int kernel_reduce_mean(sim_state *s, const sim_op *o) { return sim_run_reduce(s, o, REDUCE_MEAN); }
static int kernel_reduce_max(sim_state *s, const sim_op *o) { return sim_run_reduce(s, o, REDUCE_MAX); }
static int kernel_quantize(sim_state *s, const sim_op *o) { return sim_run_quantize(s, o); }
static int kernel_dequantize(sim_state *s, const sim_op *o) { return sim_run_dequantize(s, o); }

static int kernel_cast(sim_state *s, const sim_op *o)
{
    const sim_value *xv = &s->plan->vals[o->x], *ov = &s->plan->vals[o->outs[0]];
    if (xv->dt == ov->dt) {
        memcpy(s->store[o->outs[0]], s->store[o->x], ov->bytes);
        return ANEC_OK;
    }
    float *buf = sim_scratch(s, 0, xv->numel);
    if (!buf)
        return ANEC_ENOMEM;
    sim_to_float(s->store[o->x], xv->dt, xv->numel, buf);
    sim_from_float(buf, ov->dt, ov->numel, s->store[o->outs[0]]);
    return ANEC_OK;
}

/* Element (k, j) of B as bits, for comparing columns. */
static uint32_t elem_bits(const sk_mat *B, int64_t k, int64_t j)
{
    ptrdiff_t at = (ptrdiff_t)k * B->rs + (ptrdiff_t)j * B->cs;
    if (B->dt == SK_F32) {
        uint32_t u;
        memcpy(&u, (const float *)B->p + at, sizeof u);
        return u;
    }
    return ((const uint16_t *)B->p)[at];
}

/* h[j] (FNV-1a) folded over rows [k0, k1) of column j of B. */
static void hash_rows(const sk_mat *B, int k0, int k1, int N, uint64_t *h)
{
    for (int k = k0; k < k1; k++)
        for (int j = 0; j < N; j++)
            h[j] = (h[j] ^ elem_bits(B, k, j)) * 1099511628211ull;
}

static int all_differ(const uint64_t *h, int N)
{
    for (int j = 1; j < N; j++)
        for (int q = 0; q < j; q++)
            if (h[q] == h[j])
                return 0;
    return 1;
}

/* The distinct columns of B [K x N] (bit for bit, N <= PACK_MAX_COLS): first[q] is the q-th
   distinct column, rep[j] the q of column j. Returns their count. */
static int distinct_columns(const sk_mat *B, int K, int N, int *rep, int *first)
{
    uint64_t h[PACK_MAX_COLS];
    for (int j = 0; j < N; j++)
        h[j] = 1469598103934665603ull; /* FNV-1a over each column's elements */
    /* equal columns hash alike: columns whose first rows already hash apart are distinct (as
       a prefill's or a decode layer's are, after a few rows) */
    int k8 = K < 8 ? K : 8;
    hash_rows(B, 0, k8, N, h);
    if (all_differ(h, N)) {
        for (int j = 0; j < N; j++)
            rep[j] = first[j] = j;
        return N;
    }
    hash_rows(B, k8, K, N, h);
    int u = 0;
    for (int j = 0; j < N; j++) {
        int q = 0;
        for (; q < u; q++) {
            if (h[first[q]] != h[j])
                continue;
            int k = 0;
            while (k < K && elem_bits(B, k, first[q]) == elem_bits(B, k, j))
                k++;
            if (k == K)
                break;
        }
        if (q == u)
            first[u++] = j;
        rep[j] = q;
    }
    return u;
}

/* C[M x N] (row stride N) = A x B for a pointwise, ungrouped conv at most PACK_MAX_COLS
   columns wide. Each column of the product depends on its own column of B alone, so columns
   of B that repeat (a decode block's padding columns: all of them but the token's) are
   computed once and copied, with the same bits. The GEMM is the narrow kernel's over a weight
   held as slivers, else the op's packed panel's, if it has one, else one over the weight's
   rows where they are. */
static int narrow_product(sim_state *s, sim_panel *pn, int slivers, int M, int N, int K, sk_mat A, sk_mat B, float *C)
{
    int rep[PACK_MAX_COLS], first[PACK_MAX_COLS];
    int u = distinct_columns(&B, K, N, rep, first);
    float *Bu = NULL, *Cu = C;
    sk_mat Bv = B;
    if (u < N) {
        Bu = malloc((size_t)K * (size_t)u * sizeof(float));
        Cu = malloc((size_t)M * (size_t)u * sizeof(float));
        if (!Bu || !Cu) {
            free(Bu);
            free(Cu);
            return ANEC_ENOMEM;
        }
        for (int k = 0; k < K; k++)
            for (int q = 0; q < u; q++) {
                uint32_t bits = elem_bits(&B, k, first[q]);
                float f;
                memcpy(&f, &bits, sizeof f);
                Bu[(size_t)k * (size_t)u + (size_t)q] = B.dt == SK_F32 ? f : anec_f_from_h((uint16_t)bits);
            }
        Bv = (sk_mat){Bu, SK_F32, u, 1};
    }
    int rc = slivers ? sk_gemm_narrow(M, u, K, A.p, Bv, Cu, u, s->threads)
             : pn->f32 ? sk_gemm_packed(M, u, K, pn->f32, Bv, Cu, u, s->threads)
                       : sk_gemm_rows(M, u, K, A, Bv, Cu, u, s->threads);
    if (u < N) {
        if (rc == 0)
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++)
                    C[(size_t)i * (size_t)N + (size_t)j] = Cu[(size_t)i * (size_t)u + (size_t)rep[j]];
        free(Bu);
        free(Cu);
    }
    return rc ? ANEC_ENOMEM : ANEC_OK;
}

static int kernel_conv(sim_state *s, const sim_op *o)
{
    const sim_value *xv = &s->plan->vals[o->x], *wv = &s->plan->vals[o->y], *ov = &s->plan->vals[o->outs[0]];
    float *r = sim_fout(s, o->outs[0]);
    if (!r)
        return ANEC_ENOMEM;
    int64_t N = xv->shape[0], Cin = xv->shape[1], H = xv->shape[2], W = xv->shape[3];
    int64_t Cout = wv->shape[0], kh = wv->shape[2], kw = wv->shape[3];
    int64_t Ho = ov->shape[2], Wo = ov->shape[3];
    int g = o->groups;
    int64_t cin_g = Cin / g, cout_g = Cout / g, K = cin_g * kh * kw;
    int pointwise = sim_pointwise_conv(o, wv);
    const float *xf = NULL;
    float *col = NULL;
    if (!pointwise) {
        xf = sim_fview(s, 0, o->x);
        col = malloc((size_t)(K * Ho * Wo) * sizeof(float));
        if (!xf || !col) {
            free(col);
            return ANEC_ENOMEM;
        }
    }
    size_t xes = mil_dtype_size(xv->dt), wes = mil_dtype_size(wv->dt);
    int rc = ANEC_OK;
    for (int64_t n = 0; n < N && rc == ANEC_OK; n++)
        for (int gi = 0; gi < g && rc == ANEC_OK; gi++) {
            sk_mat A = {(const char *)s->store[o->y] + (size_t)(gi * cout_g * K) * wes, sim_sk_dt(wv->dt), K, 1};
            sk_mat Bm;
            if (pointwise) {
                Bm.p = (const char *)s->store[o->x] + (size_t)((n * Cin + gi * cin_g) * H * W) * xes;
                Bm.dt = sim_sk_dt(xv->dt);
                Bm.rs = H * W;
                Bm.cs = 1;
            } else {
                for (int64_t c = 0; c < cin_g; c++)
                    for (int64_t i = 0; i < kh; i++)
                        for (int64_t j = 0; j < kw; j++) {
                            float *row = col + ((c * kh + i) * kw + j) * Ho * Wo;
                            const float *xc = xf + (n * Cin + gi * cin_g + c) * H * W;
                            for (int64_t oy = 0; oy < Ho; oy++) {
                                int64_t iy = oy * o->strides[0] - o->pads[0] + i * o->dil[0];
                                for (int64_t ox = 0; ox < Wo; ox++) {
                                    int64_t ix = ox * o->strides[1] - o->pads[2] + j * o->dil[1];
                                    row[oy * Wo + ox] = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? xc[iy * W + ix] : 0.0f;
                                }
                            }
                        }
                Bm.p = col;
                Bm.dt = SK_F32;
                Bm.rs = Ho * Wo;
                Bm.cs = 1;
            }
            float *C = r + (n * Cout + gi * cout_g) * Ho * Wo;
            if (sim_narrow_conv(s->plan, o))
                rc = narrow_product(s, &s->panels[o - s->plan->ops], wv->slivers, (int)cout_g, (int)(Ho * Wo), (int)K,
                                    A, Bm, C);
            else if (wv->slivers ? sk_gemm_slivers((int)cout_g, (int)(Ho * Wo), (int)K, A.p, Bm, C, Ho * Wo, s->threads)
                                 : sk_gemm((int)cout_g, (int)(Ho * Wo), (int)K, A, Bm, C, Ho * Wo, s->threads))
                rc = ANEC_ENOMEM;
        }
    free(col);
    if (rc == ANEC_OK)
        sim_commit(s, o->outs[0], r);
    return rc;
}

/* Transposed conv: each input element scatters x * w[ci, co, i, j] to output row
   iy * s - pad_top + i * d (and the same on W); pads crop the full output. */
static int kernel_conv_transpose(sim_state *s, const sim_op *o)
{
    const sim_value *xv = &s->plan->vals[o->x], *wv = &s->plan->vals[o->y], *ov = &s->plan->vals[o->outs[0]];
    const float *xf = sim_fview(s, 0, o->x), *wf = sim_fview(s, 1, o->y);
    float *r = sim_fout(s, o->outs[0]);
    if (!xf || !wf || !r)
        return ANEC_ENOMEM;
    int64_t N = xv->shape[0], Cin = xv->shape[1], H = xv->shape[2], W = xv->shape[3];
    int64_t cout_g = wv->shape[1], kh = wv->shape[2], kw = wv->shape[3];
    int64_t Cout = ov->shape[1], Ho = ov->shape[2], Wo = ov->shape[3], cin_g = Cin / o->groups;
    memset(r, 0, ov->numel * sizeof(float));
    for (int64_t n = 0; n < N; n++)
        for (int64_t ci = 0; ci < Cin; ci++) {
            int64_t g = ci / cin_g;
            const float *xc = xf + (n * Cin + ci) * H * W;
            for (int64_t c = 0; c < cout_g; c++) {
                float *rc = r + (n * Cout + g * cout_g + c) * Ho * Wo;
                const float *wk = wf + (ci * cout_g + c) * kh * kw;
                for (int64_t i = 0; i < kh; i++)
                    for (int64_t iy = 0; iy < H; iy++) {
                        int64_t oy = iy * o->strides[0] + o->dil[0] * i - o->pads[0];
                        if (oy < 0 || oy >= Ho)
                            continue;
                        for (int64_t j = 0; j < kw; j++) {
                            float wv_ = wk[i * kw + j];
                            for (int64_t ix = 0; ix < W; ix++) {
                                int64_t ox = ix * o->strides[1] + o->dil[1] * j - o->pads[2];
                                if (ox >= 0 && ox < Wo)
                                    rc[oy * Wo + ox] += xc[iy * W + ix] * wv_;
                            }
                        }
                    }
            }
        }
    sim_commit(s, o->outs[0], r);
    return ANEC_OK;
}

/* Pooling over the input elements of each window (padding is never read: it is -inf for
   max, 0 for avg); avg divides by KH*KW, or by the elements read (o->flag: exclude padding). */
static int run_pool(sim_state *s, const sim_op *o, int is_max)
{
    const sim_value *xv = &s->plan->vals[o->x], *ov = &s->plan->vals[o->outs[0]];
    const float *xf = sim_fview(s, 0, o->x);
    float *r = sim_fout(s, o->outs[0]);
    if (!xf || !r)
        return ANEC_ENOMEM;
    int64_t planes = xv->shape[0] * xv->shape[1], H = xv->shape[2], W = xv->shape[3];
    int64_t Ho = ov->shape[2], Wo = ov->shape[3], kh = o->ksize[0], kw = o->ksize[1];
    for (int64_t pl = 0; pl < planes; pl++) {
        const float *xc = xf + pl * H * W;
        float *rc = r + pl * Ho * Wo;
        for (int64_t oy = 0; oy < Ho; oy++)
            for (int64_t ox = 0; ox < Wo; ox++) {
                float acc = is_max ? -INFINITY : 0.0f;
                int64_t count = 0;
                for (int64_t i = 0; i < kh; i++) {
                    int64_t iy = oy * o->strides[0] - o->pads[0] + i;
                    if (iy < 0 || iy >= H)
                        continue;
                    for (int64_t j = 0; j < kw; j++) {
                        int64_t ix = ox * o->strides[1] - o->pads[2] + j;
                        if (ix < 0 || ix >= W)
                            continue;
                        float v = xc[iy * W + ix];
                        acc = is_max ? (v > acc || v != v ? v : acc) : acc + v;
                        count++;
                    }
                }
                if (!is_max)
                    acc /= (float)(o->flag ? count : kh * kw);
                rc[oy * Wo + ox] = acc;
            }
    }
    sim_commit(s, o->outs[0], r);
    return ANEC_OK;
}

static int kernel_max_pool(sim_state *s, const sim_op *o) { return run_pool(s, o, 1); }
static int kernel_avg_pool(sim_state *s, const sim_op *o) { return run_pool(s, o, 0); }

/* Nearest upsampling by integer scales (o->strides): element moves, no arithmetic. */
static int kernel_upsample_nearest(sim_state *s, const sim_op *o)
{
    const sim_value *xv = &s->plan->vals[o->x], *ov = &s->plan->vals[o->outs[0]];
    size_t es = mil_dtype_size(xv->dt);
    int64_t planes = xv->shape[0] * xv->shape[1], H = xv->shape[2], W = xv->shape[3];
    int64_t Ho = ov->shape[2], Wo = ov->shape[3], sh = o->strides[0], sw = o->strides[1];
    const char *x = s->store[o->x];
    char *y = s->store[o->outs[0]];
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t oy = 0; oy < Ho; oy++)
            for (int64_t ox = 0; ox < Wo; ox++)
                memcpy(y + (size_t)((pl * Ho + oy) * Wo + ox) * es, x + (size_t)((pl * H + oy / sh) * W + ox / sw) * es, es);
    return ANEC_OK;
}

/* The source coordinate of output i (MIL upsample_bilinear: spacing (in-1)/(out-1) with
   align_corners, else in/out with half-pixel centres, clamped to [0, in-1]). */
static void bilinear_src(int64_t i, int64_t in, int64_t out, int align, int64_t *i0, int64_t *i1, float *lam)
{
    double src = align ? (out > 1 ? (double)i * (double)(in - 1) / (double)(out - 1) : 0.0)
                       : ((double)i + 0.5) * (double)in / (double)out - 0.5;
    if (src < 0)
        src = 0;
    if (src > (double)(in - 1))
        src = (double)(in - 1);
    *i0 = (int64_t)floor(src);
    *i1 = *i0 + 1 < in ? *i0 + 1 : in - 1;
    *lam = (float)(src - (double)*i0);
}

static int kernel_upsample_bilinear(sim_state *s, const sim_op *o)
{
    const sim_value *xv = &s->plan->vals[o->x], *ov = &s->plan->vals[o->outs[0]];
    const float *xf = sim_fview(s, 0, o->x);
    float *r = sim_fout(s, o->outs[0]);
    if (!xf || !r)
        return ANEC_ENOMEM;
    int64_t planes = xv->shape[0] * xv->shape[1], H = xv->shape[2], W = xv->shape[3];
    int64_t Ho = ov->shape[2], Wo = ov->shape[3];
    for (int64_t oy = 0; oy < Ho; oy++) {
        int64_t y0, y1;
        float ly;
        bilinear_src(oy, H, Ho, o->flag, &y0, &y1, &ly);
        for (int64_t ox = 0; ox < Wo; ox++) {
            int64_t x0, x1;
            float lx;
            bilinear_src(ox, W, Wo, o->flag, &x0, &x1, &lx);
            for (int64_t pl = 0; pl < planes; pl++) {
                const float *xc = xf + pl * H * W;
                float top = (1.0f - lx) * xc[y0 * W + x0] + lx * xc[y0 * W + x1];
                float bot = (1.0f - lx) * xc[y1 * W + x0] + lx * xc[y1 * W + x1];
                r[(pl * Ho + oy) * Wo + ox] = (1.0f - ly) * top + ly * bot;
            }
        }
    }
    sim_commit(s, o->outs[0], r);
    return ANEC_OK;
}

/* One batched matmul: every batch is a [M x K] x [K x N] GEMM; batch strides
   are 0 where an operand is broadcast. */
typedef struct mm_batches {
    const char *x, *y;          /* operand bases */
    size_t xes, yes;            /* element sizes */
    int xdt, ydt;               /* SK_F16 / SK_F32 */
    int64_t M, N, K;
    int tx, ty;
    int br;                     /* batch rank */
    int64_t bshape[ANEC_MAX_RANK], xbs[ANEC_MAX_RANK], ybs[ANEC_MAX_RANK];
    float *r;                   /* result, batches of M x N */
} mm_batches;

typedef struct mm_job {
    const mm_batches *mb;
    size_t b0, b1;              /* batches [b0, b1) */
    int threads;                /* for each GEMM */
    int rc;
} mm_job;

static void mm_range(mm_job *J)
{
    const mm_batches *m = J->mb;
    J->rc = ANEC_OK;
    for (size_t b = J->b0; b < J->b1; b++) {
        int64_t xo = 0, yo = 0;
        size_t rest = b;
        for (int i = m->br - 1; i >= 0; i--) {
            int64_t idx = (int64_t)(rest % (size_t)m->bshape[i]);
            rest /= (size_t)m->bshape[i];
            xo += idx * m->xbs[i];
            yo += idx * m->ybs[i];
        }
        sk_mat A = {m->x + (size_t)xo * m->xes, m->xdt, m->tx ? 1 : m->K, m->tx ? m->M : 1};
        sk_mat Bm = {m->y + (size_t)yo * m->yes, m->ydt, m->ty ? 1 : m->N, m->ty ? m->K : 1};
        if (sk_gemm((int)m->M, (int)m->N, (int)m->K, A, Bm, m->r + b * (size_t)(m->M * m->N), m->N, J->threads)) {
            J->rc = ANEC_ENOMEM;
            break;
        }
    }
}

static void mm_part(void *jobs, int part, int parts)
{
    (void)parts;
    mm_range((mm_job *)jobs + part);
}

/* Batches split across threads once there are enough of them (each GEMM then
   runs on one thread: no per-batch thread start); a single large GEMM is
   split inside sk_gemm instead. Every GEMM sums over K in the same order
   either way, so results do not depend on the thread count. */
#define MM_MAX_THREADS 8
#define MM_PAR_MIN_MACS (1ll << 21)

static int kernel_matmul(sim_state *s, const sim_op *o)
{
    const sim_value *xv = &s->plan->vals[o->x], *yv = &s->plan->vals[o->y];
    float *r = sim_fout(s, o->outs[0]);
    if (!r)
        return ANEC_ENOMEM;
    int64_t xs[ANEC_MAX_RANK + 1], ys[ANEC_MAX_RANK + 1];
    int xr = xv->rank, yr = yv->rank;
    memcpy(xs, xv->shape, sizeof(int64_t) * (size_t)xr);
    memcpy(ys, yv->shape, sizeof(int64_t) * (size_t)yr);
    mm_batches m;
    m.tx = o->tx;
    m.ty = o->ty;
    if (xr == 1) { xs[1] = xs[0]; xs[0] = 1; xr = 2; m.tx = 0; }
    if (yr == 1) { ys[1] = 1; yr = 2; m.ty = 0; }
    m.M = m.tx ? xs[xr - 1] : xs[xr - 2];
    m.K = m.tx ? xs[xr - 2] : xs[xr - 1];
    m.N = m.ty ? ys[yr - 2] : ys[yr - 1];
    m.br = (xr > yr ? xr : yr) - 2;
    int64_t xmat = xs[xr - 1] * xs[xr - 2], ymat = ys[yr - 1] * ys[yr - 2];
    {
        int64_t sx = xmat, sy = ymat;
        for (int i = m.br - 1; i >= 0; i--) {
            int ix = i - (m.br - (xr - 2)), iy = i - (m.br - (yr - 2));
            int64_t a = ix >= 0 ? xs[ix] : 1, b = iy >= 0 ? ys[iy] : 1;
            m.bshape[i] = a > b ? a : b;
            m.xbs[i] = a == 1 ? 0 : sx;
            m.ybs[i] = b == 1 ? 0 : sy;
            sx *= a;
            sy *= b;
        }
    }
    size_t nb = 1;
    for (int i = 0; i < m.br; i++)
        nb *= (size_t)m.bshape[i];
    m.x = (const char *)s->store[o->x];
    m.y = (const char *)s->store[o->y];
    m.xes = mil_dtype_size(xv->dt);
    m.yes = mil_dtype_size(yv->dt);
    m.xdt = sim_sk_dt(xv->dt);
    m.ydt = sim_sk_dt(yv->dt);
    m.r = r;

    int threads = s->threads < MM_MAX_THREADS ? s->threads : MM_MAX_THREADS;
    long long macs = (long long)m.M * m.N * m.K * (long long)nb;
    if (threads > (int)nb)
        threads = (int)nb;
    if (threads <= 1 || macs < MM_PAR_MIN_MACS) {
        mm_job one = {&m, 0, nb, s->threads, ANEC_OK};
        mm_range(&one);
        if (one.rc == ANEC_OK)
            sim_commit(s, o->outs[0], r);
        return one.rc;
    }
    mm_job jobs[MM_MAX_THREADS];
    for (int t = 0; t < threads; t++)
        jobs[t] = (mm_job){&m, nb * (size_t)t / (size_t)threads, nb * (size_t)(t + 1) / (size_t)threads, 1, ANEC_OK};
    sk_parallel(threads, threads, mm_part, jobs);
    int rc = ANEC_OK;
    for (int t = 0; t < threads; t++)
        if (jobs[t].rc)
            rc = jobs[t].rc;
    if (rc == ANEC_OK)
        sim_commit(s, o->outs[0], r);
    return rc;
}

/* The layout kernels: element moves, no arithmetic. */
static int kernel_reshape(sim_state *s, const sim_op *o)
{
    if (s->plan->vals[o->outs[0]].view) /* the same bytes, read where they are (a weight input's too) */
        s->store[o->outs[0]] = s->store[o->x];
    else
        memcpy(s->store[o->outs[0]], s->store[o->x], s->plan->vals[o->x].bytes);
    return ANEC_OK;
}

static int kernel_identity(sim_state *s, const sim_op *o) { return kernel_reshape(s, o); }

static int kernel_transpose(sim_state *s, const sim_op *o)
{
    const sim_value *xv = &s->plan->vals[o->x], *ov = &s->plan->vals[o->outs[0]];
    int64_t xst[ANEC_MAX_RANK], dst[ANEC_MAX_RANK], sst[ANEC_MAX_RANK];
    sk_strides(xv->rank, xv->shape, xst);
    sk_strides(ov->rank, ov->shape, dst);
    for (int i = 0; i < ov->rank; i++)
        sst[i] = xst[o->perm[i]];
    sk_nd_copy(mil_dtype_size(xv->dt), ov->rank, ov->shape, s->store[o->outs[0]], dst, s->store[o->x], sst);
    return ANEC_OK;
}

static int kernel_slice(sim_state *s, const sim_op *o)
{
    const sim_value *xv = &s->plan->vals[o->x], *ov = &s->plan->vals[o->outs[0]];
    size_t es = mil_dtype_size(xv->dt);
    int64_t xst[ANEC_MAX_RANK], shape[ANEC_MAX_RANK], sst[ANEC_MAX_RANK], dst[ANEC_MAX_RANK];
    sk_strides(xv->rank, xv->shape, xst);
    int64_t off = 0;
    for (int d = 0, k = 0; d < xv->rank; d++) {
        shape[d] = (o->squeeze_mask & (1 << d)) ? 1 : ov->shape[k++];
        sst[d] = xst[d] * o->stride[d];
        off += o->begin[d] * xst[d];
    }
    sk_strides(xv->rank, shape, dst);
    sk_nd_copy(es, xv->rank, shape, s->store[o->outs[0]], dst, (const char *)s->store[o->x] + off * (int64_t)es, sst);
    return ANEC_OK;
}

static int kernel_split(sim_state *s, const sim_op *o)
{
    const sim_value *xv = &s->plan->vals[o->x];
    size_t es = mil_dtype_size(xv->dt);
    int64_t xst[ANEC_MAX_RANK];
    sk_strides(xv->rank, xv->shape, xst);
    const char *src = s->store[o->x];
    int64_t start = 0;
    for (int i = 0; i < o->n_outs; i++) {
        const sim_value *ov = &s->plan->vals[o->outs[i]];
        int64_t dst[ANEC_MAX_RANK];
        sk_strides(ov->rank, ov->shape, dst);
        sk_nd_copy(es, ov->rank, ov->shape, s->store[o->outs[i]], dst, src + start * xst[o->axis] * (int64_t)es, xst);
        start += o->sizes[i];
    }
    return ANEC_OK;
}

/* The mirror of split: each input is copied into its slab of the output along axis. */
static int kernel_concat(sim_state *s, const sim_op *o)
{
    const sim_value *ov = &s->plan->vals[o->outs[0]];
    size_t es = mil_dtype_size(ov->dt);
    int64_t dst[ANEC_MAX_RANK];
    sk_strides(ov->rank, ov->shape, dst);
    int64_t start = 0;
    for (int i = 0; i < o->n_ins; i++) {
        const sim_value *iv = &s->plan->vals[o->ins[i]];
        int64_t ist[ANEC_MAX_RANK];
        sk_strides(iv->rank, iv->shape, ist);
        sk_nd_copy(es, iv->rank, iv->shape, (char *)s->store[o->outs[0]] + start * dst[o->axis] * (int64_t)es, dst,
                   s->store[o->ins[i]], ist);
        start += o->sizes[i];
    }
    return ANEC_OK;
}

static int kernel_pad(sim_state *s, const sim_op *o)
{
    const sim_value *xv = &s->plan->vals[o->x], *ov = &s->plan->vals[o->outs[0]];
    size_t es = mil_dtype_size(xv->dt);
    int64_t xst[ANEC_MAX_RANK];
    sk_strides(xv->rank, xv->shape, xst);
    void *out = s->store[o->outs[0]];
    if (ov->dt == MIL_DT_FP16) {
        uint16_t h = anec_h_from_f((float)o->pad_value);
        for (size_t i = 0; i < ov->numel; i++)
            ((uint16_t *)out)[i] = h;
    } else {
        float f = (float)o->pad_value;
        for (size_t i = 0; i < ov->numel; i++)
            ((float *)out)[i] = f;
    }
    int64_t dst[ANEC_MAX_RANK];
    sk_strides(ov->rank, ov->shape, dst);
    int64_t off = 0;
    for (int d = 0; d < ov->rank; d++)
        off += o->pad_before[d] * dst[d];
    sk_nd_copy(es, xv->rank, xv->shape, (char *)out + off * (int64_t)es, dst, s->store[o->x], xst);
    return ANEC_OK;
}

/* ---- dispatch ------------------------------------------------------------------------ */

/* Kernel id -> kernel, generated from the op table (SIM_KERNELS in sim_ops.h): every kernel
   id names its kernel_<name> above, so an op row whose kernel is not written does not
   compile ("'kernel_<name>' undeclared"), and a kernel no row names is an unused function
   (an error under -Werror). */
typedef int (*sim_kernel)(sim_state *s, const sim_op *o);

static const struct {
    const char *name;
    sim_kernel run;
} KERNELS[SOP_COUNT] = {
#define KERNEL(KIND, NAME) [KIND] = {#NAME, kernel_##NAME},
    SIM_KERNELS(KERNEL)
#undef KERNEL
};

int sim_state_run(sim_state *s, uint8_t *const *in, uint8_t *const *out, char *err, size_t errlen)
{
    sim_plan *p = s->plan;
    if (!s->loaded) {
        snprintf(err, errlen, "program is not loaded");
        return ANEC_ESTATE;
    }
    if (s->runs < 2 && ++s->runs == 2) /* the second run since load (runs: under the program lock) */
        sim_pack_weights(s);
    /* the inputs are read in their surfaces, as the device reads them: nothing copied (an op
       never writes to a value it reads, and the surfaces stay put for the call) */
    for (size_t i = 0; i < p->n_inputs; i++)
        s->store[p->in_bind[i]] = in[i];
    int rc = ANEC_OK;
    for (size_t k = 0; k < p->n_ops && rc == ANEC_OK; k++) {
        const sim_op *o = &p->ops[k];
        if (o->kind <= SOP_NONE || o->kind >= SOP_COUNT || !KERNELS[o->kind].run) {
            snprintf(err, errlen, "model.mil:%d: the sim has no kernel for op '%s' (kernel id %d): "
                     "regenerate csrc/sim_ops.h from the op table and rebuild", o->line, o->op ? o->op : "?", o->kind);
            rc = ANEC_EDRIVER;
        } else if ((rc = KERNELS[o->kind].run(s, o)) != ANEC_OK) {
            snprintf(err, errlen, "model.mil:%d: %s: evaluation failed (%s)", o->line, o->op ? o->op : KERNELS[o->kind].name,
                     rc == ANEC_ENOMEM ? "out of memory" : "internal error");
        }
    }
    for (size_t j = 0; j < p->n_outputs && rc == ANEC_OK; j++) {
        int v = p->out_bind[j];
        memcpy(out[j], s->store[v], p->vals[v].bytes);
    }
    for (size_t i = 0; i < p->n_inputs; i++) /* the surfaces are the caller's again */
        s->store[p->in_bind[i]] = NULL;
    for (size_t i = 0; i < p->n_vals; i++)
        if (p->vals[i].view)
            s->store[i] = NULL;
    return rc;
}
