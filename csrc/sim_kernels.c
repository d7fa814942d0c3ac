/* sim_kernels.c - GEMM and strided copies for the sim executor (see sim_kernels.h; the thread
   pool that splits them is sim_pool.c).
   Micro-kernels: portable C, AVX2+FMA (x86, chosen at run time) and NEON (arm64); every one
   gives the portable kernel's bits. ANEC_SIM_SCALAR builds the portable kernels only (a test
   builds the file so to check them against the same reference as the vector ones). */
#define _POSIX_C_SOURCE 200809L
#include "sim_kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp16.h"

#if defined(ANEC_HAVE_F16C_PATH) && !defined(ANEC_SIM_SCALAR)
#define SK_AVX2 1
#elif defined(ANEC_HAVE_NEON_PATH) && !defined(ANEC_SIM_SCALAR)
#define SK_NEON 1
#endif

#define MR 6
#define NR 16
#define KC 256
#define MC 120
#define NC 2048
/* below this many multiply-adds one thread is faster than starting another */
#define PAR_MIN_MACS (1ll << 21)

/* ---- micro-kernels: c[MR x NR] (+)= a[MR x kc] * b-sliver[kc x NR] ------------------------

   a's element (r, k) is at a[r * ars + k * aks]: a packed sliver (ars 1, aks MR) or rows as
   stored (ars the row stride, aks 1); b's (k, j) at b[k * NR + j]. */

/* The product's arithmetic, which every kernel follows: each element of the tile is a fused
   multiply-add per k (one rounding), in k order, from +0; the tile is then added to C (K
   blocks after the first) or stored. fmaf says so on every compiler: `t += a * b` rounds once
   or twice as the compiler's contraction setting decides (GCC in ISO C mode does not fuse,
   clang does), and on x86 without FMA fmaf is a library call, slow but exact. */
static void ukr_c(int kc, const float *restrict a, ptrdiff_t ars, ptrdiff_t aks, const float *restrict b,
                  float *restrict c, ptrdiff_t ldc, int acc)
{
    float t[MR][NR];
    memset(t, 0, sizeof t);
    for (int k = 0; k < kc; k++) {
        const float *bk = b + (size_t)k * NR;
        for (int r = 0; r < MR; r++) {
            float ar = a[r * ars + k * aks];
            for (int j = 0; j < NR; j++)
                t[r][j] = fmaf(ar, bk[j], t[r][j]);
        }
    }
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++)
            c[r * ldc + j] = acc ? c[r * ldc + j] + t[r][j] : t[r][j];
}

#ifdef SK_AVX2
__attribute__((target("avx2,fma")))
static void ukr_avx2(int kc, const float *restrict a, ptrdiff_t ars, ptrdiff_t aks, const float *restrict b,
                     float *restrict c, ptrdiff_t ldc, int acc)
{
    const float *a0 = a, *a1 = a + ars, *a2 = a + 2 * ars, *a3 = a + 3 * ars, *a4 = a + 4 * ars, *a5 = a + 5 * ars;
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
    __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    for (int k = 0; k < kc; k++) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        __m256 av;
        av = _mm256_broadcast_ss(a0); c00 = _mm256_fmadd_ps(av, b0, c00); c01 = _mm256_fmadd_ps(av, b1, c01);
        av = _mm256_broadcast_ss(a1); c10 = _mm256_fmadd_ps(av, b0, c10); c11 = _mm256_fmadd_ps(av, b1, c11);
        av = _mm256_broadcast_ss(a2); c20 = _mm256_fmadd_ps(av, b0, c20); c21 = _mm256_fmadd_ps(av, b1, c21);
        av = _mm256_broadcast_ss(a3); c30 = _mm256_fmadd_ps(av, b0, c30); c31 = _mm256_fmadd_ps(av, b1, c31);
        av = _mm256_broadcast_ss(a4); c40 = _mm256_fmadd_ps(av, b0, c40); c41 = _mm256_fmadd_ps(av, b1, c41);
        av = _mm256_broadcast_ss(a5); c50 = _mm256_fmadd_ps(av, b0, c50); c51 = _mm256_fmadd_ps(av, b1, c51);
        a0 += aks; a1 += aks; a2 += aks; a3 += aks; a4 += aks; a5 += aks;
        b += NR;
    }
#define ST(r, v0, v1)                                                                              \
    do {                                                                                           \
        float *cr = c + (r) * ldc;                                                                 \
        if (acc) {                                                                                 \
            v0 = _mm256_add_ps(_mm256_loadu_ps(cr), v0);                                           \
            v1 = _mm256_add_ps(_mm256_loadu_ps(cr + 8), v1);                                       \
        }                                                                                          \
        _mm256_storeu_ps(cr, v0);                                                                  \
        _mm256_storeu_ps(cr + 8, v1);                                                              \
    } while (0)
    ST(0, c00, c01); ST(1, c10, c11); ST(2, c20, c21); ST(3, c30, c31); ST(4, c40, c41); ST(5, c50, c51);
#undef ST
}
#endif

#ifdef SK_NEON
/* a row of the tile: four vectors of 4 */
static inline void st_neon(float *cr, int acc, float32x4_t v0, float32x4_t v1, float32x4_t v2, float32x4_t v3)
{
    if (acc) {
        v0 = vaddq_f32(vld1q_f32(cr), v0);
        v1 = vaddq_f32(vld1q_f32(cr + 4), v1);
        v2 = vaddq_f32(vld1q_f32(cr + 8), v2);
        v3 = vaddq_f32(vld1q_f32(cr + 12), v3);
    }
    vst1q_f32(cr, v0);
    vst1q_f32(cr + 4, v1);
    vst1q_f32(cr + 8, v2);
    vst1q_f32(cr + 12, v3);
}

/* 24 accumulators, a fused multiply-add (FMLA by lane) per element and k, as ukr_avx2; a
   packed sliver's four and two rows are loaded as vectors, rows as stored one by one */
static void ukr_neon(int kc, const float *restrict a, ptrdiff_t ars, ptrdiff_t aks, const float *restrict b,
                     float *restrict c, ptrdiff_t ldc, int acc)
{
    const float32x4_t z = vdupq_n_f32(0.0f);
    float32x4_t c00 = z, c01 = z, c02 = z, c03 = z, c10 = z, c11 = z, c12 = z, c13 = z;
    float32x4_t c20 = z, c21 = z, c22 = z, c23 = z, c30 = z, c31 = z, c32 = z, c33 = z;
    float32x4_t c40 = z, c41 = z, c42 = z, c43 = z, c50 = z, c51 = z, c52 = z, c53 = z;
    for (int k = 0; k < kc; k++, a += aks, b += NR) {
        float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8), b3 = vld1q_f32(b + 12);
        float32x4_t a03;
        float32x2_t a45;
        if (ars == 1) {
            a03 = vld1q_f32(a);
            a45 = vld1_f32(a + 4);
        } else {
            a03 = vsetq_lane_f32(a[3 * ars], vsetq_lane_f32(a[2 * ars], vsetq_lane_f32(a[ars], vdupq_n_f32(a[0]), 1), 2), 3);
            a45 = vset_lane_f32(a[5 * ars], vdup_n_f32(a[4 * ars]), 1);
        }
#define ROW(r, op, av, lane)                                                                       \
    do {                                                                                           \
        c##r##0 = op(c##r##0, b0, av, lane);                                                       \
        c##r##1 = op(c##r##1, b1, av, lane);                                                       \
        c##r##2 = op(c##r##2, b2, av, lane);                                                       \
        c##r##3 = op(c##r##3, b3, av, lane);                                                       \
    } while (0)
        ROW(0, vfmaq_laneq_f32, a03, 0); ROW(1, vfmaq_laneq_f32, a03, 1); ROW(2, vfmaq_laneq_f32, a03, 2);
        ROW(3, vfmaq_laneq_f32, a03, 3); ROW(4, vfmaq_lane_f32, a45, 0); ROW(5, vfmaq_lane_f32, a45, 1);
#undef ROW
    }
    st_neon(c, acc, c00, c01, c02, c03);
    st_neon(c + ldc, acc, c10, c11, c12, c13);
    st_neon(c + 2 * ldc, acc, c20, c21, c22, c23);
    st_neon(c + 3 * ldc, acc, c30, c31, c32, c33);
    st_neon(c + 4 * ldc, acc, c40, c41, c42, c43);
    st_neon(c + 5 * ldc, acc, c50, c51, c52, c53);
}
#endif

int sk_have_avx2(void)
{
#ifdef SK_AVX2
    static int have = -1;
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    return have;
#else
    return 0;
#endif
}

typedef void (*ukr_fn)(int, const float *, ptrdiff_t, ptrdiff_t, const float *, float *, ptrdiff_t, int);

static ukr_fn pick_ukr(void)
{
#if defined(SK_AVX2)
    if (sk_have_avx2())
        return ukr_avx2;
#elif defined(SK_NEON)
    return ukr_neon;
#endif
    return ukr_c;
}

/* ---- packing ------------------------------------------------------------ */

/* n elements starting at p with the given stride (elements), as fp32 */
static void load_vec(const void *p, int dt, ptrdiff_t stride, int n, float *dst)
{
    if (dt == SK_F32) {
        const float *s = p;
        if (stride == 1)
            memcpy(dst, s, (size_t)n * sizeof(float));
        else
            for (int i = 0; i < n; i++)
                dst[i] = s[i * stride];
    } else {
        const uint16_t *s = p;
        if (stride == 1)
            anec_cvt_f16_to_f32(s, dst, (size_t)n);
        else
            for (int i = 0; i < n; i++)
                dst[i] = anec_f_from_h(s[i * stride]);
    }
}

static const void *mat_at(const sk_mat *m, ptrdiff_t i, ptrdiff_t j)
{
    size_t es = m->dt == SK_F32 ? 4 : 2;
    return (const char *)m->p + (i * m->rs + j * m->cs) * (ptrdiff_t)es;
}

/* A[i0 .. i0+mc, k0 .. k0+kc] into slivers of MR rows: Ap[s][k][r] */
static void pack_A(int mc, int kc, const sk_mat *A, int i0, int k0, float *restrict Ap, float *restrict tmp)
{
    for (int ib = 0; ib < mc; ib += MR) {
        float *sl = Ap + (size_t)ib * kc;
        int rows = mc - ib < MR ? mc - ib : MR;
        for (int r = 0; r < MR; r++) {
            if (r < rows) {
                load_vec(mat_at(A, i0 + ib + r, k0), A->dt, A->cs, kc, tmp);
                for (int k = 0; k < kc; k++)
                    sl[(size_t)k * MR + r] = tmp[k];
            } else {
                for (int k = 0; k < kc; k++)
                    sl[(size_t)k * MR + r] = 0.0f;
            }
        }
    }
}

/* B[k0 .. k0+kc, j0 .. j0+nc] into slivers of NR columns: Bp[s][k][j] */
static void pack_B(int kc, int nc, const sk_mat *B, int k0, int j0, float *restrict Bp, float *restrict tmp)
{
    if (B->cs == 1) {
        for (int k = 0; k < kc; k++) {
            load_vec(mat_at(B, k0 + k, j0), B->dt, 1, nc, tmp);
            for (int jb = 0; jb < nc; jb += NR) {
                float *dst = Bp + (size_t)jb * kc + (size_t)k * NR;
                int cols = nc - jb < NR ? nc - jb : NR;
                memcpy(dst, tmp + jb, (size_t)cols * sizeof(float));
                for (int j = cols; j < NR; j++)
                    dst[j] = 0.0f;
            }
        }
        return;
    }
    /* column-major-ish B (transposed operand): read columns contiguously */
    for (int jb = 0; jb < nc; jb += NR) {
        float *sl = Bp + (size_t)jb * kc;
        int cols = nc - jb < NR ? nc - jb : NR;
        for (int j = 0; j < NR; j++) {
            if (j < cols) {
                load_vec(mat_at(B, k0, j0 + jb + j), B->dt, B->rs, kc, tmp);
                for (int k = 0; k < kc; k++)
                    sl[(size_t)k * NR + j] = tmp[k];
            } else {
                for (int k = 0; k < kc; k++)
                    sl[(size_t)k * NR + j] = 0.0f;
            }
        }
    }
}

/* ---- blocked GEMM over a sub-range of C ------------------------------------ */

/* rows of A rounded up to whole slivers of MR */
static size_t padded_rows(int M)
{
    return ((size_t)M + MR - 1) / MR * MR;
}

typedef struct gemm_job {
    int M, N, K;
    sk_mat A, B;
    const float *Apk;   /* A packed once (sk_pack_a), or NULL: packed here, per call */
    float *C;
    ptrdiff_t ldc;
    int i0, i1, j0, j1;
    int rc;
} gemm_job;

static void gemm_range(gemm_job *J)
{
    ukr_fn ukr = pick_ukr();
    int K = J->K;
    size_t tmpn = KC > NC ? KC : NC;
    float *Ap = J->Apk ? NULL : aligned_alloc(64, sizeof(float) * MC * KC);
    size_t ncols = (size_t)(J->j1 - J->j0 < NC ? J->j1 - J->j0 : NC);
    float *Bp = aligned_alloc(64, sizeof(float) * KC * ((ncols + NR - 1) / NR * NR));
    float *tmp = malloc(sizeof(float) * tmpn);
    if ((!Ap && !J->Apk) || !Bp || !tmp) {
        free(Ap);
        free(Bp);
        free(tmp);
        J->rc = -1;
        return;
    }
    float edge[MR * NR];
    for (int jc = J->j0; jc < J->j1; jc += NC) {
        int nc = J->j1 - jc < NC ? J->j1 - jc : NC;
        for (int pc = 0; pc < K; pc += KC) {
            int kc = K - pc < KC ? K - pc : KC;
            pack_B(kc, nc, &J->B, pc, jc, Bp, tmp);
            for (int ic = J->i0; ic < J->i1; ic += MC) {
                int mc = J->i1 - ic < MC ? J->i1 - ic : MC;
                const float *As = Ap;
                if (J->Apk) /* the K block at pc holds every row's slivers; ic is a multiple of MR */
                    As = J->Apk + (size_t)pc * padded_rows(J->M) + (size_t)ic * kc;
                else
                    pack_A(mc, kc, &J->A, ic, pc, Ap, tmp);
                for (int jr = 0; jr < nc; jr += NR) {
                    int n = nc - jr < NR ? nc - jr : NR;
                    for (int ir = 0; ir < mc; ir += MR) {
                        int m = mc - ir < MR ? mc - ir : MR;
                        float *c = J->C + (ptrdiff_t)(ic + ir) * J->ldc + jc + jr;
                        const float *a = As + (size_t)ir * kc;
                        const float *b = Bp + (size_t)jr * kc;
                        if (m == MR && n == NR) {
                            ukr(kc, a, 1, MR, b, c, J->ldc, pc > 0);
                        } else {
                            ukr(kc, a, 1, MR, b, edge, NR, 0);
                            for (int r = 0; r < m; r++)
                                for (int j = 0; j < n; j++)
                                    c[r * J->ldc + j] = pc > 0 ? c[r * J->ldc + j] + edge[r * NR + j] : edge[r * NR + j];
                        }
                    }
                }
            }
        }
    }
    free(Ap);
    free(Bp);
    free(tmp);
    J->rc = 0;
}

static int gemm_run(gemm_job base, int threads);

static void gemm_part(void *jobs, int part, int parts)
{
    (void)parts;
    gemm_range((gemm_job *)jobs + part);
}

int sk_gemm(int M, int N, int K, sk_mat A, sk_mat B, float *C, ptrdiff_t ldc, int threads)
{
    return gemm_run((gemm_job){M, N, K, A, B, NULL, C, ldc, 0, M, 0, N, 0}, threads);
}

size_t sk_packed_a_floats(int M, int K)
{
    return M > 0 && K > 0 ? padded_rows(M) * (size_t)K : 0;
}

int sk_pack_a(int M, int K, sk_mat A, float *dst)
{
    float *tmp = malloc(sizeof(float) * KC);
    if (!tmp)
        return -1;
    /* the K block at pc: every sliver of MR rows (the last one zero-padded), as pack_A lays
       out the rows [0, M) of one block, so that rows [ic, ic + mc) start at ic * kc */
    for (int pc = 0; pc < K; pc += KC) {
        int kc = K - pc < KC ? K - pc : KC;
        pack_A(M, kc, &A, 0, pc, dst + (size_t)pc * padded_rows(M), tmp);
    }
    free(tmp);
    return 0;
}

int sk_gemm_packed(int M, int N, int K, const float *Ap, sk_mat B, float *C, ptrdiff_t ldc, int threads)
{
    sk_mat none = {NULL, SK_F32, 0, 0};
    return gemm_run((gemm_job){M, N, K, none, B, Ap, C, ldc, 0, M, 0, N, 0}, threads);
}

static int gemm_run(gemm_job base, int threads)
{
    int M = base.M, N = base.N, K = base.K;
    float *C = base.C;
    ptrdiff_t ldc = base.ldc;
    if (M <= 0 || N <= 0)
        return 0;
    if (K <= 0) {
        for (int i = 0; i < M; i++)
            memset(C + (ptrdiff_t)i * ldc, 0, (size_t)N * sizeof(float));
        return 0;
    }
    long long macs = (long long)M * N * K;
    if (threads > 8)
        threads = 8;
    if (threads <= 1 || macs < PAR_MIN_MACS) {
        gemm_range(&base);
        return base.rc;
    }
    int mb = (M + MR - 1) / MR, nb = (N + NR - 1) / NR;
    int split_m = mb >= nb;
    int blocks = split_m ? mb : nb;
    int parts = threads < blocks ? threads : blocks;
    gemm_job jobs[8];
    for (int t = 0; t < parts; t++) {
        jobs[t] = base;
        int b0 = blocks * t / parts, b1 = blocks * (t + 1) / parts;
        if (split_m) {
            jobs[t].i0 = b0 * MR;
            jobs[t].i1 = b1 * MR < M ? b1 * MR : M;
        } else {
            jobs[t].j0 = b0 * NR;
            jobs[t].j1 = b1 * NR < N ? b1 * NR : N;
        }
    }
    sk_parallel(threads, parts, gemm_part, jobs);
    int rc = 0;
    for (int t = 0; t < parts; t++)
        if (jobs[t].rc)
            rc = jobs[t].rc;
    return rc;
}

/* How many parts a product bound by reading its weight is cut into for `threads` threads (at
   most `units`, the blocks of rows it has): PARTS_PER_THREAD each, handed out as threads come
   free, so that a thread the OS runs late (another process on its core) leaves its share to the
   others instead of holding up the whole product. */
#define PARTS_PER_THREAD 4
static int share_parts(int threads, int units)
{
    return threads * PARTS_PER_THREAD < units ? threads * PARTS_PER_THREAD : units;
}

/* ---- products over A's rows as stored ---------------------------------------- */

/* the row stride of a group's converted rows: K rounded up to whole cache lines, and 16 floats
   more, so that the rows do not start at the same offset in a 4 KiB page */
#define ALD(K) (((size_t)(K) + 15) / 16 * 16 + 16)

typedef struct rows_job {
    int M, N, K;
    sk_mat A;
    const float *Bp;    /* B packed as pack_B lays out one block, for each K block: at pc * npad */
    size_t npad;        /* N rounded up to whole slivers of NR */
    float *C;
    ptrdiff_t ldc;
    int groups;         /* of MR rows */
    float *abuf;        /* per part: MR rows of ald floats */
    size_t ald;
} rows_job;

/* n elements of an fp16 row as fp32 (load_vec without its scalar path for NaNs: a NaN's
   payload, which F16C may change, is the CPU's in a product anyway) */
#ifdef SK_AVX2
__attribute__((target("avx2,f16c")))
static void load_row_f16c(const uint16_t *src, int n, float *dst)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + i))));
    for (; i < n; i++)
        dst[i] = anec_f_from_h(src[i]);
}
#endif

static void load_row(const sk_mat *A, int i, int k0, int n, float *dst)
{
#ifdef SK_AVX2
    if (A->dt == SK_F16 && sk_have_narrow()) {
        load_row_f16c(mat_at(A, i, k0), n, dst);
        return;
    }
#endif
    load_vec(mat_at(A, i, k0), A->dt, 1, n, dst);
}

/* part of parts: its share of the groups of MR rows. A group's rows, one block of memory, are
   read in order and converted to fp32 whole (into the part's buffer, abuf), then multiplied
   with every sliver of B a K block at a time. */
static void rows_part(void *arg, int part, int parts)
{
    const rows_job *J = arg;
    ukr_fn ukr = pick_ukr();
    float edge[MR * NR];
    int g0 = (int)((long long)J->groups * part / parts), g1 = (int)((long long)J->groups * (part + 1) / parts);
    float *abuf = J->abuf + (size_t)part * MR * J->ald;
    size_t es = J->A.dt == SK_F32 ? 4 : 2;
    for (int g = g0; g < g1; g++) {
        int i = g * MR, m = J->M - i < MR ? J->M - i : MR;
        for (int r = 0; r < MR; r++) {
            if (r < m)
                load_row(&J->A, i + r, 0, J->K, abuf + r * J->ald);
            else
                memset(abuf + r * J->ald, 0, (size_t)J->K * sizeof(float));
        }
        for (int pc = 0; pc < J->K; pc += KC) {
            int kc = J->K - pc < KC ? J->K - pc : KC;
            /* the next group's rows on their way from memory while this one multiplies: the
               columns of this K block, row by row, into the second-level cache (the first
               would lose them to this group's converted rows and B before they are read) */
            for (int r = 0; g + 1 < g1 && r < MR && i + MR + r < J->M; r++) {
                const char *next = mat_at(&J->A, i + MR + r, pc);
                for (size_t off = 0; off < (size_t)kc * es; off += 64)
                    __builtin_prefetch(next + off, 0, 2);
            }
            for (int jr = 0; jr < J->N; jr += NR) {
                int n = J->N - jr < NR ? J->N - jr : NR;
                float *c = J->C + (ptrdiff_t)i * J->ldc + jr;
                const float *b = J->Bp + (size_t)pc * J->npad + (size_t)jr * kc;
                if (m == MR && n == NR) {
                    ukr(kc, abuf + pc, J->ald, 1, b, c, J->ldc, pc > 0);
                } else {
                    ukr(kc, abuf + pc, J->ald, 1, b, edge, NR, 0);
                    for (int r = 0; r < m; r++)
                        for (int j = 0; j < n; j++)
                            c[r * J->ldc + j] = pc > 0 ? c[r * J->ldc + j] + edge[r * NR + j] : edge[r * NR + j];
                }
            }
        }
    }
}

int sk_gemm_rows(int M, int N, int K, sk_mat A, sk_mat B, float *C, ptrdiff_t ldc, int threads)
{
    if (M <= 0 || N <= 0 || K <= 0 || A.cs != 1) /* the empty sum, or rows not contiguous */
        return sk_gemm(M, N, K, A, B, C, ldc, threads);
    size_t npad = ((size_t)N + NR - 1) / NR * NR;
    float *Bp = aligned_alloc(64, sizeof(float) * npad * (((size_t)K + KC - 1) / KC * KC));
    float *tmp = malloc(sizeof(float) * (size_t)(N > KC ? N : KC));
    if (!Bp || !tmp) {
        free(Bp);
        free(tmp);
        return -1;
    }
    for (int pc = 0; pc < K; pc += KC)
        pack_B(K - pc < KC ? K - pc : KC, N, &B, pc, 0, Bp + (size_t)pc * npad, tmp);
    free(tmp);
    rows_job job = {M, N, K, A, Bp, npad, C, ldc, (M + MR - 1) / MR, NULL, ALD(K)};
    if (threads > 8)
        threads = 8;
    if (threads > job.groups)
        threads = job.groups;
    if ((long long)M * N * K < PAR_MIN_MACS)
        threads = 1;
    int parts = threads > 1 ? share_parts(threads, job.groups) : 1;
    job.abuf = aligned_alloc(64, sizeof(float) * (size_t)parts * MR * job.ald);
    if (!job.abuf) {
        free(Bp);
        return -1;
    }
    sk_parallel(threads, parts, rows_part, &job);
    free(job.abuf);
    free(Bp);
    return 0;
}

/* ---- narrow products over fp16 slivers -------------------------------------- */

#define NW SK_SLIVER_ROWS /* rows per narrow sliver (sim_kernels.h) */

#if defined(SK_AVX2) || defined(SK_NEON)
#define SK_NARROW 1
#endif

int sk_have_narrow(void)
{
#if defined(SK_AVX2)
    return sk_have_avx2() && anec__have_f16c();
#elif defined(SK_NEON)
    return 1;
#else
    return 0;
#endif
}

static size_t narrow_slivers(int M)
{
    return ((size_t)M + NW - 1) / NW;
}

size_t sk_packed_narrow_halves(int M, int K)
{
    return M > 0 && K > 0 ? narrow_slivers(M) * NW * (size_t)K : 0;
}

int sk_pack_narrow(int M, int K, sk_mat A, uint16_t *dst)
{
    if (A.dt != SK_F16 || !sk_have_narrow())
        return -1;
    /* sliver s holds rows [s * NW, s * NW + NW) (zero past M): element (r, k) at k * NW + r */
    for (size_t sl = 0; sl < narrow_slivers(M); sl++) {
        uint16_t *d = dst + sl * NW * (size_t)K;
        for (int r = 0; r < NW; r++) {
            int i = (int)sl * NW + r;
            const uint16_t *row = (const uint16_t *)A.p + (ptrdiff_t)i * A.rs;
            for (int k = 0; k < K; k++)
                d[(size_t)k * NW + r] = i < M ? row[(ptrdiff_t)k * A.cs] : 0;
        }
    }
    return 0;
}

typedef struct narrow_job {
    int M, N, K;
    const uint16_t *Ah;
    const float *Bp;    /* column pairs: pair q, row k at Bp + (q * K + k) * 2 */
    float *C;
    ptrdiff_t ldc;
    size_t slivers;
} narrow_job;

#ifdef SK_AVX2
/* one sliver x one column pair: out[j][r] = sum over k of A[r][k] * B[k][j], summed as the
   micro-kernel sums (a fused multiply-add per k from zero within each K block of KC, the
   blocks added in order) */
__attribute__((target("avx2,fma,f16c")))
static void narrow_sliver(int K, const uint16_t *as, const float *bp, float out[2][NW])
{
    float t[2][NW];
    for (int pc = 0; pc < K; pc += KC) {
        int kc = K - pc < KC ? K - pc : KC;
        __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c02 = _mm256_setzero_ps(), c03 = _mm256_setzero_ps();
        __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps(), c12 = _mm256_setzero_ps(), c13 = _mm256_setzero_ps();
        const uint16_t *a = as + (size_t)pc * NW;
        const float *b = bp + (size_t)pc * 2;
        for (int k = 0; k < kc; k++) {
            const __m128i *ak = (const __m128i *)(const void *)(a + (size_t)k * NW);
            __m256 a0 = _mm256_cvtph_ps(_mm_loadu_si128(ak)), a1 = _mm256_cvtph_ps(_mm_loadu_si128(ak + 1));
            __m256 a2 = _mm256_cvtph_ps(_mm_loadu_si128(ak + 2)), a3 = _mm256_cvtph_ps(_mm_loadu_si128(ak + 3));
            __m256 b0 = _mm256_broadcast_ss(b + 2 * k), b1 = _mm256_broadcast_ss(b + 2 * k + 1);
            c00 = _mm256_fmadd_ps(a0, b0, c00); c01 = _mm256_fmadd_ps(a1, b0, c01);
            c02 = _mm256_fmadd_ps(a2, b0, c02); c03 = _mm256_fmadd_ps(a3, b0, c03);
            c10 = _mm256_fmadd_ps(a0, b1, c10); c11 = _mm256_fmadd_ps(a1, b1, c11);
            c12 = _mm256_fmadd_ps(a2, b1, c12); c13 = _mm256_fmadd_ps(a3, b1, c13);
        }
        _mm256_storeu_ps(t[0], c00); _mm256_storeu_ps(t[0] + 8, c01);
        _mm256_storeu_ps(t[0] + 16, c02); _mm256_storeu_ps(t[0] + 24, c03);
        _mm256_storeu_ps(t[1], c10); _mm256_storeu_ps(t[1] + 8, c11);
        _mm256_storeu_ps(t[1] + 16, c12); _mm256_storeu_ps(t[1] + 24, c13);
        for (int j = 0; j < 2; j++)
            for (int r = 0; r < NW; r++)
                out[j][r] = pc > 0 ? out[j][r] + t[j][r] : t[j][r];
    }
}
#endif

#ifdef SK_NEON
/* narrow_sliver with NEON: eight vectors of 4 rows per column (named, so that they stay in
   registers), the fp16 rows widened exactly (FCVTL), a fused multiply-add per k as above */
static inline void add_neon(float *o, int acc, float32x4_t v)
{
    vst1q_f32(o, acc ? vaddq_f32(vld1q_f32(o), v) : v);
}

static void narrow_sliver(int K, const uint16_t *as, const float *bp, float out[2][NW])
{
    for (int pc = 0; pc < K; pc += KC) {
        int kc = K - pc < KC ? K - pc : KC;
        const float32x4_t z = vdupq_n_f32(0.0f);
        float32x4_t s00 = z, s01 = z, s02 = z, s03 = z, s04 = z, s05 = z, s06 = z, s07 = z;
        float32x4_t s10 = z, s11 = z, s12 = z, s13 = z, s14 = z, s15 = z, s16 = z, s17 = z;
        const uint16_t *a = as + (size_t)pc * NW;
        const float *b = bp + (size_t)pc * 2;
        for (int k = 0; k < kc; k++) {
            const uint16_t *ak = a + (size_t)k * NW;
            float32x2_t bk = vld1_f32(b + 2 * k);
#define ROWS8(i, x, y)                                                                             \
    do {                                                                                           \
        float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(ak + 8 * (i)));                            \
        float32x4_t lo = vcvt_f32_f16(vget_low_f16(h)), hi = vcvt_high_f32_f16(h);                 \
        s0##x = vfmaq_lane_f32(s0##x, lo, bk, 0);                                                  \
        s0##y = vfmaq_lane_f32(s0##y, hi, bk, 0);                                                  \
        s1##x = vfmaq_lane_f32(s1##x, lo, bk, 1);                                                  \
        s1##y = vfmaq_lane_f32(s1##y, hi, bk, 1);                                                  \
    } while (0)
            ROWS8(0, 0, 1); ROWS8(1, 2, 3); ROWS8(2, 4, 5); ROWS8(3, 6, 7);
#undef ROWS8
        }
        int acc = pc > 0;
        add_neon(out[0], acc, s00); add_neon(out[0] + 4, acc, s01); add_neon(out[0] + 8, acc, s02);
        add_neon(out[0] + 12, acc, s03); add_neon(out[0] + 16, acc, s04); add_neon(out[0] + 20, acc, s05);
        add_neon(out[0] + 24, acc, s06); add_neon(out[0] + 28, acc, s07);
        add_neon(out[1], acc, s10); add_neon(out[1] + 4, acc, s11); add_neon(out[1] + 8, acc, s12);
        add_neon(out[1] + 12, acc, s13); add_neon(out[1] + 16, acc, s14); add_neon(out[1] + 20, acc, s15);
        add_neon(out[1] + 24, acc, s16); add_neon(out[1] + 28, acc, s17);
    }
}
#endif

/* part of parts: its share of the slivers */
static void narrow_part(void *arg, int part, int parts)
{
#ifdef SK_NARROW
    const narrow_job *J = arg;
    float out[2][NW];
    size_t s0 = J->slivers * (size_t)part / (size_t)parts, s1 = J->slivers * (size_t)(part + 1) / (size_t)parts;
    for (size_t sl = s0; sl < s1; sl++) {
        const uint16_t *as = J->Ah + sl * NW * (size_t)J->K;
        for (int j0 = 0; j0 < J->N; j0 += 2) {
            narrow_sliver(J->K, as, J->Bp + (size_t)j0 * (size_t)J->K, out);
            int cols = J->N - j0 < 2 ? 1 : 2;
            for (int r = 0; r < NW; r++) {
                int i = (int)sl * NW + r;
                if (i >= J->M)
                    break;
                for (int j = 0; j < cols; j++)
                    J->C[(ptrdiff_t)i * J->ldc + j0 + j] = out[j][r];
            }
        }
    }
#else
    (void)arg;
    (void)part;
    (void)parts;
#endif
}

int sk_gemm_narrow(int M, int N, int K, const uint16_t *Ah, sk_mat B, float *C, ptrdiff_t ldc, int threads)
{
    if (!sk_have_narrow())
        return -1;
    if (M <= 0 || N <= 0 || K <= 0) /* nothing to read: the empty sum, as sk_gemm gives it */
        return sk_gemm(M, N, K, (sk_mat){NULL, SK_F16, 0, 0}, B, C, ldc, 1);
    /* B as fp32 column pairs (an odd last column is paired with itself) */
    size_t pairs = ((size_t)N + 1) / 2;
    float *Bp = malloc(pairs * 2 * (size_t)K * sizeof(float));
    float *col = malloc((size_t)K * sizeof(float));
    if (!Bp || !col) {
        free(Bp);
        free(col);
        return -1;
    }
    for (int j = 0; j < N; j++) {
        load_vec(mat_at(&B, 0, j), B.dt, B.rs, K, col);
        float *d = Bp + (size_t)(j / 2) * 2 * (size_t)K;
        for (int k = 0; k < K; k++) {
            d[2 * k + j % 2] = col[k];
            if (j == N - 1 && j % 2 == 0)
                d[2 * k + 1] = col[k];
        }
    }
    free(col);
    narrow_job job = {M, N, K, Ah, Bp, C, ldc, narrow_slivers(M)};
    /* the threads split the slivers (one thread's loads do not take all the memory
       bandwidth there is, even when the product is bound by reading the weight) */
    if (threads > 8)
        threads = 8;
    if ((size_t)threads > job.slivers)
        threads = (int)job.slivers;
    if ((long long)M * N * K < PAR_MIN_MACS)
        threads = 1;
    sk_parallel(threads, threads > 1 ? share_parts(threads, (int)job.slivers) : 1, narrow_part, &job);
    free(Bp);
    return 0;
}

int sk_gemm_slivers(int M, int N, int K, const uint16_t *Ah, sk_mat B, float *C, ptrdiff_t ldc, int threads)
{
    for (size_t sl = 0; sl < narrow_slivers(M); sl++) {
        int i0 = (int)sl * NW, m = M - i0 < NW ? M - i0 : NW;
        sk_mat A = {Ah + sl * NW * (size_t)K, SK_F16, 1, NW};
        if (sk_gemm(m, N, K, A, B, C + (ptrdiff_t)i0 * ldc, ldc, threads))
            return -1;
    }
    return 0;
}

void sk_gemm_naive(int M, int N, int K, sk_mat A, sk_mat B, float *C, ptrdiff_t ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int k = 0; k < K; k++) {
                float a, b;
                load_vec(mat_at(&A, i, k), A.dt, 1, 1, &a);
                load_vec(mat_at(&B, k, j), B.dt, 1, 1, &b);
                acc += (double)a * (double)b;
            }
            C[(ptrdiff_t)i * ldc + j] = (float)acc;
        }
}

/* ---- strided copies ------------------------------------------------------------ */

void sk_strides(int rank, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i];
    }
}

#define ND_INNER(T)                                                                                \
    do {                                                                                           \
        T *d = (T *)dst + doff;                                                                    \
        const T *s = (const T *)src + soff;                                                        \
        if (ds == 1 && ss == 1)                                                                    \
            memcpy(d, s, (size_t)n * sizeof(T));                                                   \
        else                                                                                       \
            for (int64_t i = 0; i < n; i++)                                                        \
                d[i * ds] = s[i * ss];                                                             \
    } while (0)

void sk_nd_copy(size_t esize, int rank, const int64_t *shape,
                void *dst, const int64_t *dst_strides,
                const void *src, const int64_t *src_strides)
{
    if (rank == 0) {
        memcpy(dst, src, esize);
        return;
    }
    for (int i = 0; i < rank; i++)
        if (shape[i] <= 0)
            return;
    int64_t idx[16] = {0};
    int64_t n = shape[rank - 1], ds = dst_strides[rank - 1], ss = src_strides[rank - 1];
    for (;;) {
        int64_t doff = 0, soff = 0;
        for (int i = 0; i < rank - 1; i++) {
            doff += idx[i] * dst_strides[i];
            soff += idx[i] * src_strides[i];
        }
        switch (esize) {
        case 1: ND_INNER(uint8_t); break;
        case 2: ND_INNER(uint16_t); break;
        case 4: ND_INNER(uint32_t); break;
        default: ND_INNER(uint64_t); break;
        }
        int d = rank - 2;
        while (d >= 0) {
            if (++idx[d] < shape[d])
                break;
            idx[d] = 0;
            d--;
        }
        if (d < 0)
            break;
    }
}
