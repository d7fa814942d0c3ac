/* test_kernels.c - the blocked GEMM against a naive triple loop, fp16 conversion, strided copies. */
#include <math.h>

#include "fp16.h"
#include "sim_kernels.h"
#include "tharness.h"

static uint32_t rng = 12345;
static float frand(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void one(int M, int N, int K, int dta, int dtb, int ta, int tb, int threads)
{
    size_t na = (size_t)M * K, nb = (size_t)K * N;
    float *af = malloc(na * 4), *bf = malloc(nb * 4);
    uint16_t *ah = malloc(na * 2), *bh = malloc(nb * 2);
    float *c = malloc((size_t)M * N * 4), *r = malloc((size_t)M * N * 4);
    for (size_t i = 0; i < na; i++) { af[i] = frand(); ah[i] = anec_h_from_f(af[i]); af[i] = anec_f_from_h(ah[i]); }
    for (size_t i = 0; i < nb; i++) { bf[i] = frand(); bh[i] = anec_h_from_f(bf[i]); bf[i] = anec_f_from_h(bh[i]); }
    /* A stored [M,K] (ta=0) or [K,M] (ta=1); B stored [K,N] or [N,K] */
    sk_mat A = {dta == SK_F16 ? (const void *)ah : (const void *)af, dta, ta ? 1 : K, ta ? M : 1};
    sk_mat B = {dtb == SK_F16 ? (const void *)bh : (const void *)bf, dtb, tb ? 1 : N, tb ? K : 1};
    CHECK(sk_gemm(M, N, K, A, B, c, N, threads) == 0);
    sk_gemm_naive(M, N, K, A, B, r, N);
    double worst = 0;
    for (size_t i = 0; i < (size_t)M * N; i++) {
        double d = fabs((double)c[i] - (double)r[i]) / (1.0 + fabs((double)r[i]));
        worst = d > worst ? d : worst;
    }
    CHECK(worst < 1e-5 * (1 + K / 64.0));
    if (worst >= 1e-5 * (1 + K / 64.0))
        fprintf(stderr, "  gemm M=%d N=%d K=%d ta=%d tb=%d threads=%d: rel err %g\n", M, N, K, ta, tb, threads, worst);
    free(af); free(bf); free(ah); free(bh); free(c); free(r);
}

int main(void)
{
    /* shapes around the block sizes (MR=6, NR=16, KC=256, MC=120) */
    int shapes[][3] = {{1, 1, 1}, {6, 16, 8}, {7, 17, 9}, {5, 3, 300}, {121, 33, 257}, {64, 64, 64}, {250, 70, 513}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                one(shapes[s][0], shapes[s][1], shapes[s][2], ta ? SK_F32 : SK_F16, tb ? SK_F16 : SK_F32, ta, tb, 1);
    one(300, 200, 300, SK_F16, SK_F16, 0, 0, 2);
    one(40, 900, 128, SK_F16, SK_F32, 0, 1, 2);

    /* general strided views (both strides > 1: every other row and column of a larger
       buffer), with a leading dimension of C wider than N; K > KC so B is packed twice */
    {
        int M = 9, N = 19, K = 300, lda = 2 * K + 3, ldb = 2 * N + 5, ldc = N + 7;
        float *a = malloc((size_t)2 * M * lda * 4), *b = malloc((size_t)2 * K * ldb * 4);
        float *c = malloc((size_t)M * ldc * 4), *r = malloc((size_t)M * ldc * 4);
        for (int i = 0; i < 2 * M * lda; i++) a[i] = frand();
        for (int i = 0; i < 2 * K * ldb; i++) b[i] = frand();
        for (int tb = 0; tb < 2; tb++) {
            /* tb = 0: B[k][j] at b[2k*ldb + 2j]; tb = 1: B[k][j] at b[2j*ldb + 2k] (a transposed view) */
            sk_mat A = {a, SK_F32, 2 * lda, 2}, B = {b, SK_F32, tb ? 2 : 2 * ldb, tb ? 2 * ldb : 2};
            for (int i = 0; i < M * ldc; i++) c[i] = r[i] = -7.0f;
            CHECK(sk_gemm(M, N, K, A, B, c, ldc, 1) == 0);
            sk_gemm_naive(M, N, K, A, B, r, ldc);
            int bad = 0;
            for (int i = 0; i < M; i++)
                for (int j = 0; j < ldc; j++) {
                    float d = fabsf(c[i * ldc + j] - r[i * ldc + j]);
                    bad += j < N ? d > 1e-4f * (1.0f + fabsf(r[i * ldc + j])) : c[i * ldc + j] != -7.0f;
                }
            CHECK(bad == 0);
        }
        /* K = 0: an empty sum is 0 (C is written, not left as it was) */
        for (int i = 0; i < M * ldc; i++) c[i] = -7.0f;
        sk_mat A0 = {a, SK_F32, 1, 1}, B0 = {b, SK_F32, N, 1};
        CHECK(sk_gemm(M, N, 0, A0, B0, c, ldc, 1) == 0);
        int bad = 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < ldc; j++)
                bad += c[i * ldc + j] != (j < N ? 0.0f : -7.0f);
        CHECK(bad == 0);
        free(a); free(b); free(c); free(r);
    }

    /* threads do not change a single bit */
    {
        int M = 240, N = 96, K = 700;
        uint16_t *a = malloc((size_t)M * K * 2), *b = malloc((size_t)K * N * 2);
        float *c1 = malloc((size_t)M * N * 4), *c2 = malloc((size_t)M * N * 4);
        for (int i = 0; i < M * K; i++) a[i] = anec_h_from_f(frand());
        for (int i = 0; i < K * N; i++) b[i] = anec_h_from_f(frand());
        sk_mat A = {a, SK_F16, K, 1}, B = {b, SK_F16, N, 1};
        sk_gemm(M, N, K, A, B, c1, N, 1);
        sk_gemm(M, N, K, A, B, c2, N, 2);
        CHECK(memcmp(c1, c2, (size_t)M * N * 4) == 0);
        free(a); free(b); free(c1); free(c2);
    }

    /* A packed once (sk_pack_a), and A read where it is (sk_gemm_rows), give sk_gemm's result
       bit for bit: rows not a multiple of MR, K over several KC blocks, skinny and wide N, A in
       fp16 and fp32, one and two threads */
    {
        int shapes[][3] = {{1, 1, 1}, {7, 16, 9}, {768, 16, 768}, {121, 17, 513}, {250, 70, 300}, {64, 1, 1030}};
        for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
            for (int dta = SK_F16; dta <= SK_F32; dta++)
                for (int threads = 1; threads <= 2; threads++) {
                    int M = shapes[sh][0], N = shapes[sh][1], K = shapes[sh][2];
                    uint16_t *ah = malloc((size_t)M * K * 2);
                    float *af = malloc((size_t)M * K * 4), *b = malloc((size_t)K * N * 4);
                    float *c1 = malloc((size_t)M * N * 4), *c2 = malloc((size_t)M * N * 4);
                    for (int i = 0; i < M * K; i++) { ah[i] = anec_h_from_f(frand()); af[i] = frand(); }
                    for (int i = 0; i < K * N; i++) b[i] = frand();
                    sk_mat A = {dta == SK_F16 ? (const void *)ah : (const void *)af, dta, K, 1}, B = {b, SK_F32, N, 1};
                    size_t n = sk_packed_a_floats(M, K);
                    CHECK(n >= (size_t)M * K && n < (size_t)(M + 6) * K);
                    float *ap = malloc(n * sizeof(float));
                    for (size_t i = 0; i < n; i++) ap[i] = -7.0f; /* every float is written */
                    CHECK(sk_pack_a(M, K, A, ap) == 0);
                    int unwritten = 0;
                    for (size_t i = 0; i < n; i++) unwritten += ap[i] == -7.0f;
                    CHECK(unwritten == 0);
                    CHECK(sk_gemm(M, N, K, A, B, c1, N, threads) == 0);
                    CHECK(sk_gemm_packed(M, N, K, ap, B, c2, N, threads) == 0);
                    CHECK(memcmp(c1, c2, (size_t)M * N * 4) == 0);
                    memset(c2, 0xff, (size_t)M * N * 4);
                    CHECK(sk_gemm_rows(M, N, K, A, B, c2, N, threads) == 0); /* A's rows where they are */
                    CHECK(memcmp(c1, c2, (size_t)M * N * 4) == 0);
                    free(ah); free(af); free(b); free(c1); free(c2); free(ap);
                }
        CHECK(sk_packed_a_floats(0, 5) == 0 && sk_packed_a_floats(5, 0) == 0);
    }

    /* fp16 slivers (sk_pack_narrow) give sk_gemm's result bit for bit, by sk_gemm_narrow and by
       sk_gemm_slivers: rows not a multiple of
       the sliver, K over several blocks, odd and even N (an odd last column is paired with
       itself), B in fp16 and fp32 and transposed, C with a row stride wider than N, one and
       two threads; an fp32 A is refused */
    if (sk_have_narrow()) {
        int shapes[][3] = {{1, 1, 1}, {7, 2, 9}, {33, 3, 256}, {768, 16, 768}, {121, 5, 513}, {250, 64, 300}, {64, 1, 1030}};
        for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
            for (int dtb = SK_F16; dtb <= SK_F32; dtb++)
                for (int tb = 0; tb <= 1; tb++)
                    for (int threads = 1; threads <= 2; threads++) {
                        int M = shapes[sh][0], N = shapes[sh][1], K = shapes[sh][2], ldc = N + 3;
                        uint16_t *ah = malloc((size_t)M * K * 2), *bh = malloc((size_t)K * N * 2);
                        float *bf = malloc((size_t)K * N * 4);
                        float *c1 = malloc((size_t)M * ldc * 4), *c2 = malloc((size_t)M * ldc * 4);
                        for (int i = 0; i < M * K; i++) ah[i] = anec_h_from_f(frand());
                        for (int i = 0; i < K * N; i++) { bh[i] = anec_h_from_f(frand()); bf[i] = frand() * 3.0f; }
                        for (int i = 0; i < M * ldc; i++) c1[i] = c2[i] = -5.0f; /* the padding stays */
                        sk_mat A = {ah, SK_F16, K, 1};
                        sk_mat B = {dtb == SK_F16 ? (const void *)bh : (const void *)bf, dtb, tb ? 1 : N, tb ? K : 1};
                        size_t n = sk_packed_narrow_halves(M, K);
                        CHECK(n >= (size_t)M * K && n < (size_t)(M + 32) * K);
                        uint16_t *ap = malloc(n * 2);
                        for (size_t i = 0; i < n; i++) ap[i] = 0x7e00; /* every half is written */
                        CHECK(sk_pack_narrow(M, K, A, ap) == 0);
                        int unwritten = 0;
                        for (size_t i = 0; i < n; i++) unwritten += ap[i] == 0x7e00;
                        CHECK(unwritten == 0);
                        CHECK(sk_gemm(M, N, K, A, B, c1, ldc, threads) == 0);
                        CHECK(sk_gemm_narrow(M, N, K, ap, B, c2, ldc, threads) == 0);
                        CHECK(memcmp(c1, c2, (size_t)M * ldc * 4) == 0);
                        for (int i = 0; i < M * ldc; i++) c2[i] = -5.0f; /* any width, over the slivers */
                        CHECK(sk_gemm_slivers(M, N, K, ap, B, c2, ldc, threads) == 0);
                        CHECK(memcmp(c1, c2, (size_t)M * ldc * 4) == 0);
                        free(ah); free(bh); free(bf); free(c1); free(c2); free(ap);
                    }
        float af[4] = {1, 2, 3, 4};
        uint16_t out[64];
        CHECK(sk_pack_narrow(2, 2, (sk_mat){af, SK_F32, 2, 1}, out) == -1);
        CHECK(sk_packed_narrow_halves(0, 5) == 0 && sk_packed_narrow_halves(5, 0) == 0);
        float c0[6] = {1, 1, 1, 1, 1, 1}; /* K = 0: the empty sum */
        CHECK(sk_gemm_narrow(3, 2, 0, out, (sk_mat){af, SK_F32, 2, 1}, c0, 2, 1) == 0);
        CHECK(c0[0] == 0 && c0[5] == 0);
    }

    /* fp16: every bit pattern round-trips; the F16C buffer path equals the scalar path */
    {
        static uint16_t h[65536], h2[65536];
        static float f[65536];
        for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
        anec_cvt_f16_to_f32(h, f, 65536);
        int bad = 0;
        for (int i = 0; i < 65536; i++) {
            float s = anec_f_from_h(h[i]);
            if (memcmp(&s, &f[i], 4) != 0 && !(s != s && f[i] != f[i]))
                bad++;
        }
        CHECK(bad == 0);
        anec_cvt_f32_to_f16(f, h2, 65536);
        bad = 0;
        for (int i = 0; i < 65536; i++)
            if (h2[i] != h[i] && !((h[i] & 0x7c00) == 0x7c00 && (h[i] & 0x3ff)))
                bad++;
        CHECK(bad == 0);
        /* rounding: scalar vs buffer path on values between fp16 neighbours */
        bad = 0;
        for (int i = 0; i < 200000; i++) {
            float v = frand() * (i % 7 == 0 ? 70000.0f : i % 3 ? 1.0f : 1e-5f);
            uint16_t a1 = anec_h_from_f(v), a2;
            anec_cvt_f32_to_f16(&v, &a2, 1);
            float vv[8] = {v, v, v, v, v, v, v, v};
            uint16_t hv[8];
            anec_cvt_f32_to_f16(vv, hv, 8);
            if (a1 != a2 || hv[3] != a1)
                bad++;
        }
        CHECK(bad == 0);
        CHECK(anec_h_from_f(65504.0f) == 0x7bff && anec_h_from_f(65520.0f) == 0x7c00);
        CHECK(anec_h_from_f(1.0f + 1.0f / 2048.0f) == 0x3c00); /* ties to even */
        CHECK(anec_h_from_f(5.960464477539063e-08f) == 0x0001);
    }

    /* strided copy: transpose a 3x4 matrix */
    {
        uint32_t src[12], dst[12];
        for (int i = 0; i < 12; i++) src[i] = (uint32_t)i;
        int64_t shape[2] = {4, 3}, ds[2] = {3, 1}, ss[2] = {1, 4};
        sk_nd_copy(4, 2, shape, dst, ds, src, ss);
        CHECK(dst[1] == 4 && dst[3] == 1 && dst[11] == 11);
    }
    /* rank 0: one element */
    {
        uint16_t src = 0xbeef, dst = 0;
        sk_nd_copy(2, 0, NULL, &dst, NULL, &src, NULL);
        CHECK(dst == 0xbeef);
    }
    printf("avx2 micro-kernel: %s\n", sk_have_avx2() ? "yes" : "no");
    T_DONE("test_kernels");
}
