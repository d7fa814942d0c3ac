/* test_simd.c - the vector paths (x86 AVX2/F16C, arm64 NEON) give the portable code's bits.
 *
 * fp16 <-> fp32: the buffer converters (8 values at a time) against the scalar functions, on
 * every fp16 bit pattern, every fp16 value's rounding boundaries in fp32 (ties, one ulp either
 * side), NaNs and random fp32 bit patterns, at every offset and tail length. GEMM: sk_gemm,
 * sk_gemm_packed, sk_gemm_rows and sk_gemm_narrow against the product's definition written out
 * here (a fused multiply-add per k from +0 within each K block of 256, the blocks added in
 * order), on shapes with remainders of the 6x16 tile and of the K block, fp16 and fp32
 * operands, transposed views, one and two threads, and inputs with +-0, subnormals, +-inf, NaN and overflowing products.
 * Results are compared bit for bit (a NaN result with any NaN: which of several NaN operands a
 * multiply-add passes on is the CPU's and the compiler's choice of operand order).
 *
 * Built three ways: natively (AVX2/F16C where the CPU has them), with -DANEC_SIM_SCALAR
 * (csrc/sim_kernels.c's portable kernels only) and for aarch64 under qemu (NEON): each build
 * checks its kernels against the same definition (make check-simd, make check-arm64).
 */
#include <math.h>

#include "fp16.h"
#include "sim_kernels.h"
#include "tharness.h"

#define SPEC_KC 256 /* the K block of csrc/sim_kernels.c */

static uint32_t rng = 2463534242u;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

static float frand(void) { return (float)(int32_t)rnd() * (1.0f / 2147483648.0f); }

/* ---- fp16 <-> fp32 ---------------------------------------------------------------------------- */

/* the buffer converter on src[0..n) at every start offset 0..8 and on the tail lengths
   n - 0..8, against the scalar function: the number of differing bit patterns */
static int f32_to_f16_diffs(const float *src, size_t n)
{
    uint16_t *got = malloc(n * 2);
    int bad = 0;
    for (size_t off = 0; off <= 8 && off < n; off++) {
        size_t len = n - off - (off % 3);
        anec_cvt_f32_to_f16(src + off, got, len);
        for (size_t i = 0; i < len; i++)
            bad += got[i] != anec_h_from_f(src[off + i]);
    }
    free(got);
    return bad;
}

static int f16_to_f32_diffs(const uint16_t *src, size_t n)
{
    float *got = malloc(n * 4);
    int bad = 0;
    for (size_t off = 0; off <= 8 && off < n; off++) {
        size_t len = n - off - (off % 3);
        anec_cvt_f16_to_f32(src + off, got, len);
        for (size_t i = 0; i < len; i++)
            bad += anec_f32_bits(got[i]) != anec_f32_bits(anec_f_from_h(src[off + i]));
    }
    free(got);
    return bad;
}

#if defined(__aarch64__)
/* FPCR.DN: the FPU gives one default NaN for every NaN (what conversions do with a NaN's bits
   depends on it; the buffer converters, which leave NaNs to the scalar code, must not) */
static void set_default_nan(int on)
{
    uint64_t r;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(r));
    r = on ? r | (1ull << 25) : r & ~(1ull << 25);
    __asm__ __volatile__("msr fpcr, %0" : : "r"(r));
}
#endif

/* every fp16 bit pattern, and fp32 NaNs and infinities, through the buffer converters */
static void test_fp16_nans(void)
{
    /* every fp16 bit pattern, NaNs (quiet, signalling, both signs) included */
    uint16_t *h = malloc(65536 * 2);
    for (int i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    CHECK(f16_to_f32_diffs(h, 65536) == 0);
    /* a block of 8 with one signalling NaN among ordinary values */
    uint16_t mixed[24];
    for (int i = 0; i < 24; i++)
        mixed[i] = (uint16_t)(0x3c00 + i);
    mixed[11] = 0x7c01;
    mixed[13] = 0xfd55;
    CHECK(f16_to_f32_diffs(mixed, 24) == 0);
    float sn = anec_f_from_h(0x7c01);
    CHECK(anec_f32_bits(sn) == 0x7f802000u); /* the scalar code keeps a signalling NaN, as numpy */
    free(h);
    /* NaNs and infinities alone: quiet, signalling, both signs, payloads below fp16's bits */
    uint32_t nans[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u,
                       0x7fa00000u, 0x7fbfffffu, 0x7fffffffu, 0xffffe000u, 0x7f802000u, 0x7f801fffu};
    float nf[8 * 12];
    for (int i = 0; i < 8 * 12; i++)
        nf[i] = i % 8 == 5 ? 1.5f : anec_bits_f32(nans[i / 8]);
    CHECK(f32_to_f16_diffs(nf, 8 * 12) == 0);
}

static void test_fp16(void)
{
    test_fp16_nans();
#if defined(__aarch64__)
    set_default_nan(1);
    test_fp16_nans();
    set_default_nan(0);
#endif

    /* fp32 -> fp16 around every finite fp16 value v (both signs): v, the midpoint to the next
       one up (a tie: to even), and one fp32 ulp either side of it; 65520 (midpoint of 65504
       and 2^16) is the first value that rounds to inf */
    size_t n = 0, cap = 0x7c00u * 8u;
    float *f = malloc(cap * 4);
    for (uint32_t b = 0; b < 0x7c00u; b++) {
        float v = anec_f_from_h((uint16_t)b);
        float up = b == 0x7bffu ? 65536.0f : anec_f_from_h((uint16_t)(b + 1));
        float mid = (v + up) * 0.5f; /* exact: 12 significant bits at most */
        uint32_t mb = anec_f32_bits(mid);
        float around[4] = {v, mid, anec_bits_f32(mb - 1), anec_bits_f32(mb + 1)};
        for (int k = 0; k < 4; k++) {
            f[n++] = around[k];
            f[n++] = -around[k];
        }
    }
    CHECK(f32_to_f16_diffs(f, n) == 0);
    /* random bit patterns: every exponent (fp32 subnormals, overflow, inf, NaN payloads) */
    for (size_t i = 0; i < cap; i++)
        f[i] = anec_bits_f32(rnd());
    CHECK(f32_to_f16_diffs(f, cap) == 0);
    free(f);

    /* the scalar reference itself: IEEE round to nearest even at the edges */
    CHECK(anec_h_from_f(65504.0f) == 0x7bff && anec_h_from_f(65519.996f) == 0x7bff);
    CHECK(anec_h_from_f(65520.0f) == 0x7c00 && anec_h_from_f(-65520.0f) == 0xfc00);
    CHECK(anec_h_from_f(1.0f + 1.0f / 2048.0f) == 0x3c00);       /* tie, down to even */
    CHECK(anec_h_from_f(1.0f + 3.0f / 2048.0f) == 0x3c02);       /* tie, up to even */
    CHECK(anec_h_from_f(0x1p-25f) == 0x0000);                    /* half the least subnormal: to 0 */
    CHECK(anec_h_from_f(0x1.8p-25f) == 0x0001 && anec_h_from_f(0x1.8p-24f) == 0x0002);
    CHECK(anec_h_from_f(-0.0f) == 0x8000 && anec_h_from_f(1e-40f) == 0x0000);
    CHECK(anec_h_from_f(0x1p-14f - 0x1p-25f) == 0x0400);          /* tie at the normal boundary: up */
    CHECK(anec_h_from_f(anec_bits_f32(0x7f800001u)) == 0x7e00);   /* NaN stays NaN, quiet */
    CHECK(anec_f32_bits(anec_f_from_h(0x0001)) == 0x33800000u && anec_f32_bits(anec_f_from_h(0x8000)) == 0x80000000u);
}

/* ---- GEMM -------------------------------------------------------------------------------------- */

static const float SPECIALS[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -3e-44f, 0x1p-24f,
                                 65504.0f, -65504.0f, 3e38f, -3e38f, 1e-30f};

/* n operand values of kind dt (fp16 values rounded from fp32); with specials, one in 40 is one
   of SPECIALS. vals gets the values as fp32, store the operand's storage. */
static void fill(size_t n, int dt, int specials, float scale, float *vals, void *store)
{
    for (size_t i = 0; i < n; i++) {
        float v = frand() * scale;
        if (specials && rnd() % 40 == 0)
            v = SPECIALS[rnd() % (sizeof SPECIALS / sizeof SPECIALS[0])];
        if (dt == SK_F16) {
            uint16_t hb = anec_h_from_f(v);
            ((uint16_t *)store)[i] = hb;
            vals[i] = anec_f_from_h(hb);
        } else {
            ((float *)store)[i] = v;
            vals[i] = v;
        }
    }
}

/* the product as the kernels define it: A [M x K], B [K x N] row-major fp32 values */
static void spec_gemm(int M, int N, int K, const float *A, const float *B, float *C, ptrdiff_t ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float c = 0.0f;
            for (int pc = 0; pc < K; pc += SPEC_KC) {
                float t = 0.0f;
                for (int k = pc; k < K && k < pc + SPEC_KC; k++)
                    t = fmaf(A[(size_t)i * K + k], B[(size_t)k * N + j], t);
                c = pc > 0 ? c + t : t;
            }
            C[i * ldc + j] = K > 0 ? c : 0.0f;
        }
}

/* C's elements that differ from the definition (NaN matches NaN), and its padding columns
   (ldc > N) written at all */
static int gemm_diffs(int M, int N, const float *got, const float *want, ptrdiff_t ldc)
{
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < ldc; j++) {
            float g = got[i * ldc + j], w = want[i * ldc + j];
            if (j >= N)
                bad += anec_f32_bits(g) != 0xdeadbeefu;
            else if (!(isnan(g) && isnan(w)) && anec_f32_bits(g) != anec_f32_bits(w))
                bad++;
        }
    return bad;
}

typedef struct {
    int M, N, K, dta, dtb, ta, tb, threads, specials;
} gcase;

/* one product through sk_gemm, sk_gemm_packed, sk_gemm_rows and (fp16 A, when the build has
   it) sk_gemm_narrow; the number of results that differ from the definition */
static int run_case(gcase g)
{
    int M = g.M, N = g.N, K = g.K;
    ptrdiff_t ldc = N + 3;
    size_t na = (size_t)M * K + 1, nb = (size_t)K * N + 1, nc = (size_t)M * ldc;
    float *av = malloc(na * 4), *bv = malloc(nb * 4), *as = malloc(na * 4), *bs = malloc(nb * 4);
    float *at = malloc(na * 4), *bt = malloc(nb * 4);
    float *want = malloc(nc * 4), *got = malloc(nc * 4);
    fill((size_t)M * K, g.dta, g.specials, 1.0f, av, as);
    fill((size_t)K * N, g.dtb, g.specials, 4.0f, bv, bs);
    size_t ea = g.dta == SK_F16 ? 2 : 4, eb = g.dtb == SK_F16 ? 2 : 4;
    /* the transposed views store A as [K x M], B as [N x K] */
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++)
            memcpy((char *)at + ((size_t)k * M + i) * ea, (char *)as + ((size_t)i * K + k) * ea, ea);
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++)
            memcpy((char *)bt + ((size_t)j * K + k) * eb, (char *)bs + ((size_t)k * N + j) * eb, eb);
    sk_mat A = {g.ta ? at : as, g.dta, g.ta ? 1 : K, g.ta ? M : 1};
    sk_mat B = {g.tb ? bt : bs, g.dtb, g.tb ? 1 : N, g.tb ? K : 1};
    uint32_t pad = 0xdeadbeefu;
    for (size_t i = 0; i < nc; i++)
        memcpy(&want[i], &pad, 4);
    spec_gemm(M, N, K, av, bv, want, ldc);

    int bad = 0;
    for (size_t i = 0; i < nc; i++)
        memcpy(&got[i], &pad, 4);
    bad += sk_gemm(M, N, K, A, B, got, ldc, g.threads) != 0;
    bad += gemm_diffs(M, N, got, want, ldc);

    float *ap = malloc((sk_packed_a_floats(M, K) + 1) * 4);
    for (size_t i = 0; i < nc; i++)
        memcpy(&got[i], &pad, 4);
    bad += sk_pack_a(M, K, A, ap) != 0;
    bad += sk_gemm_packed(M, N, K, ap, B, got, ldc, g.threads) != 0;
    bad += gemm_diffs(M, N, got, want, ldc);
    free(ap);

    for (size_t i = 0; i < nc; i++)
        memcpy(&got[i], &pad, 4);
    bad += sk_gemm_rows(M, N, K, A, B, got, ldc, g.threads) != 0;
    bad += gemm_diffs(M, N, got, want, ldc);

    if (g.dta == SK_F16 && sk_have_narrow()) {
        uint16_t *ah = malloc((sk_packed_narrow_halves(M, K) + 1) * 2);
        for (size_t i = 0; i < nc; i++)
            memcpy(&got[i], &pad, 4);
        bad += sk_pack_narrow(M, K, A, ah) != 0;
        bad += sk_gemm_narrow(M, N, K, ah, B, got, ldc, g.threads) != 0;
        bad += gemm_diffs(M, N, got, want, ldc);
        free(ah);
    }
    if (bad)
        fprintf(stderr, "  gemm M=%d N=%d K=%d dta=%d dtb=%d ta=%d tb=%d threads=%d specials=%d: %d differ\n",
                M, N, K, g.dta, g.dtb, g.ta, g.tb, g.threads, g.specials, bad);
    free(av); free(bv); free(as); free(bs); free(at); free(bt); free(want); free(got);
    return bad;
}

static void test_gemm(void)
{
    /* remainders of the 6x16 tile, of the 32-row narrow sliver and of the 256 K block */
    static const int small[][3] = {{1, 1, 1}, {5, 3, 7}, {6, 16, 256}, {7, 17, 257}, {13, 33, 100},
                                   {33, 2, 300}, {40, 5, 513}, {12, 1, 600}, {3, 20, 0}};
    for (size_t s = 0; s < sizeof small / sizeof small[0]; s++)
        for (int combo = 0; combo < 16; combo++)
            for (int specials = 0; specials <= 1; specials++) {
                gcase g = {small[s][0], small[s][1], small[s][2], combo & 1 ? SK_F32 : SK_F16,
                           combo & 2 ? SK_F32 : SK_F16, (combo >> 2) & 1, (combo >> 3) & 1, 1, specials};
                CHECK(run_case(g) == 0);
            }
    /* large enough to be split over two threads (rows, then columns) */
    CHECK(run_case((gcase){130, 70, 300, SK_F16, SK_F16, 0, 0, 2, 1}) == 0);
    /* a decode block's width: 16 columns, rows not a multiple of 6, K blocks of 256 and a tail */
    CHECK(run_case((gcase){301, 16, 700, SK_F16, SK_F32, 0, 0, 2, 1}) == 0);
    CHECK(run_case((gcase){97, 16, 512, SK_F32, SK_F16, 0, 0, 2, 0}) == 0);
    CHECK(run_case((gcase){14, 400, 400, SK_F32, SK_F16, 1, 1, 2, 0}) == 0);
    CHECK(run_case((gcase){200, 8, 1400, SK_F16, SK_F32, 0, 1, 2, 0}) == 0);
}

int main(void)
{
#if defined(ANEC_SIM_SCALAR)
    const char *gemm = "portable";
    CHECK(!sk_have_narrow() && !sk_have_avx2());
#elif defined(__aarch64__)
    const char *gemm = "neon";
    CHECK(sk_have_narrow()); /* the NEON narrow kernel is built and is tested below */
#else
    const char *gemm = sk_have_avx2() ? "avx2" : "portable";
#endif
#if defined(ANEC_HAVE_NEON_PATH)
    const char *cvt = "neon";
#elif defined(ANEC_HAVE_F16C_PATH)
    const char *cvt = anec__have_f16c() ? "f16c" : "scalar";
#else
    const char *cvt = "scalar";
#endif
    printf("test_simd: fp16 conversion %s, gemm %s%s\n", cvt, gemm, sk_have_narrow() ? " (+narrow)" : "");
    test_fp16();
    test_gemm();
    T_DONE("test_simd");
}
