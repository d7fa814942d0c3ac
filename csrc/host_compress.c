/*
 * host_compress.c - per-channel 8-bit linear quantization of an fp16 weight, in two passes.
 *
 * anec/compress/linear.py quantizes a weight with coremltools' arithmetic (linear_quantize_weights,
 * per channel): numpy's fp16 operations, each computed in fp32 and rounded to fp16. Written
 * with numpy that is a dozen passes over the tensor, most of them fp16 <-> fp32 conversions;
 * anec_quantize_linear8 does the same operations on each value, in the same order and at the
 * same precision, in two passes (the channels' ranges, then the values), and measures the
 * accuracy gate's errors on the way:
 *
 *   range     lo, hi = the channel's min and max (fp16, exact); symmetric: m = max(|lo|, |hi|),
 *             lo = -m, hi = m; affine: lo = min(0, lo), hi = max(0, hi);
 *   scale     span = fp16(hi - lo), scale = fp16(span / (qmax - qmin)), 1 where span is 0;
 *   zero pt   (affine) z = fp16(fp16(fp16(qmin * hi) - fp16(qmax * lo)) / span), 0 where span
 *             is 0, rounded half to even and clipped to [qmin, qmax];
 *   values    q = rint(fp16(w / scale)) (+ z), clipped to [qmin, qmax];
 *   errors    d = fp16((q - z) * scale), the dequantized value the device computes;
 *             per channel the sums of (d - w)^2 and w^2 (in float64), and over the tensor
 *             max |d - w| and max |w|.
 *
 * The tensor is [outer][channels][inner] (the channel axis in the middle), so a conv weight
 * (channels first) and a matmul weight (channels last) are read in place. Values are
 * bit-for-bit numpy's (tests/compress/test_compress_native.py); the error sums are
 * float64 where numpy sums float32, so the reported errors agree to rounding. Each row of a
 * channel (``inner`` values) is summed in 8 lanes (value i in lane i % 8, the lanes added in
 * order at the end of the row), by the AVX path and the plain loop alike, so both give the
 * same sums bit for bit (ANEC_HOST_SCALAR builds the plain loop only, as for rt_host.c).
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "anec_rt.h"
#include "fp16.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#if defined(ANEC_HAVE_F16C_PATH) && !defined(ANEC_HOST_SCALAR)
#define QUANT_AVX 1
#endif

#define H_ONE 0x3c00u
#define LANES 8

static int h_is_zero(uint16_t h) { return (h & 0x7fffu) == 0; }

#ifdef QUANT_AVX
/* A row's error sums over eight lanes, kept in registers by the AVX loops: the sums of e^2
   and w^2 per lane (in double, as the plain loop keeps them) and the largest |e| and |w|. */
typedef struct {
    __m256d e0, e1, n0, n1;
    __m256 emax, wmax;
} err_acc;

#define AVX_INLINE static inline __attribute__((target("avx,f16c"), always_inline))

AVX_INLINE void acc_load(err_acc *a, const double *e, const double *n, float emax, float wmax)
{
    a->e0 = _mm256_loadu_pd(e), a->e1 = _mm256_loadu_pd(e + 4);
    a->n0 = _mm256_loadu_pd(n), a->n1 = _mm256_loadu_pd(n + 4);
    a->emax = _mm256_set1_ps(emax), a->wmax = _mm256_set1_ps(wmax);
}

/* Eight values v and their errors e. */
AVX_INLINE void acc_add(err_acc *a, __m256 v, __m256 e)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256d el = _mm256_cvtps_pd(_mm256_castps256_ps128(e)), eh = _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1));
    __m256d vl = _mm256_cvtps_pd(_mm256_castps256_ps128(v)), vh = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    a->e0 = _mm256_add_pd(a->e0, _mm256_mul_pd(el, el));
    a->e1 = _mm256_add_pd(a->e1, _mm256_mul_pd(eh, eh));
    a->n0 = _mm256_add_pd(a->n0, _mm256_mul_pd(vl, vl));
    a->n1 = _mm256_add_pd(a->n1, _mm256_mul_pd(vh, vh));
    a->emax = _mm256_max_ps(a->emax, _mm256_and_ps(e, absmask));
    a->wmax = _mm256_max_ps(a->wmax, _mm256_and_ps(v, absmask));
}

AVX_INLINE void acc_store(const err_acc *a, double *e, double *n, float *emax, float *wmax)
{
    _mm256_storeu_pd(e, a->e0);
    _mm256_storeu_pd(e + 4, a->e1);
    _mm256_storeu_pd(n, a->n0);
    _mm256_storeu_pd(n + 4, a->n1);
    float em[LANES], wm[LANES];
    _mm256_storeu_ps(em, a->emax);
    _mm256_storeu_ps(wm, a->wmax);
    for (int j = 0; j < LANES; j++) {
        *emax = em[j] > *emax ? em[j] : *emax;
        *wmax = wm[j] > *wmax ? wm[j] : *wmax;
    }
}
#endif

/* One channel's constants and the running results of pass 2. */
typedef struct {
    float s, z, qmin, qmax;
    int mode;
    double e[LANES], n[LANES];
    float emax, wmax;
    int dense_finite;
} qrow;

/* Values [i0, n) of one row: the plain loop (and the AVX path's tail). */
static void row_scalar(qrow *r, const uint16_t *w, void *q, size_t i0, size_t n)
{
    for (size_t i = i0; i < n; i++) {
        float v = anec_f_from_h(w[i]);
        float x = rintf(anec_round_f16(v / r->s)) + r->z;
        x = x < r->qmin ? r->qmin : x > r->qmax ? r->qmax : x;
        if (r->mode == ANEC_QUANT_AFFINE_UINT8)
            ((uint8_t *)q)[i] = (uint8_t)x;
        else
            ((int8_t *)q)[i] = (int8_t)x;
        uint16_t dh = anec_h_from_f((x - r->z) * r->s);
        if ((dh & 0x7c00u) == 0x7c00u)
            r->dense_finite = 0;
        float e = anec_f_from_h(dh) - v;
        r->e[i % LANES] += (double)e * (double)e;
        r->n[i % LANES] += (double)v * (double)v;
        float ae = fabsf(e), av = fabsf(v);
        r->emax = ae > r->emax ? ae : r->emax;
        r->wmax = av > r->wmax ? av : r->wmax;
    }
}

/* A row's range (pass 1): the plain loop. Returns 0 on a NaN or an infinity. */
static int range_scalar(const uint16_t *w, size_t i0, size_t n, float *lo, float *hi)
{
    int ok = 1;
    for (size_t i = i0; i < n; i++) {
        if ((w[i] & 0x7c00u) == 0x7c00u)
            ok = 0;
        float v = anec_f_from_h(w[i]);
        *lo = v < *lo ? v : *lo;
        *hi = v > *hi ? v : *hi;
    }
    return ok;
}

#ifdef QUANT_AVX
__attribute__((target("avx,f16c")))
static int range_avx(const uint16_t *w, size_t n, float *lo, float *hi)
{
    size_t i = 0, nv = n & ~(size_t)(LANES - 1);
    __m256 l = _mm256_set1_ps(*lo), h = _mm256_set1_ps(*hi);
    __m128i expo = _mm_set1_epi16(0x7c00), bad = _mm_setzero_si128();
    for (; i < nv; i += LANES) {
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(w + i));
        bad = _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(b, expo), expo));
        __m256 v = _mm256_cvtph_ps(b);
        l = _mm256_min_ps(l, v);
        h = _mm256_max_ps(h, v);
    }
    float lv[LANES], hv[LANES];
    _mm256_storeu_ps(lv, l);
    _mm256_storeu_ps(hv, h);
    for (int j = 0; j < LANES; j++) {
        *lo = lv[j] < *lo ? lv[j] : *lo;
        *hi = hv[j] > *hi ? hv[j] : *hi;
    }
    int ok = _mm_movemask_epi8(bad) == 0;
    return range_scalar(w, i, n, lo, hi) && ok;
}

__attribute__((target("avx,f16c")))
static void row_avx(qrow *r, const uint16_t *w, void *q, size_t n)
{
    size_t i = 0, nv = n & ~(size_t)(LANES - 1);
    const __m256 s = _mm256_set1_ps(r->s), z = _mm256_set1_ps(r->z);
    const __m256 qmin = _mm256_set1_ps(r->qmin), qmax = _mm256_set1_ps(r->qmax);
    const __m128i expo = _mm_set1_epi16(0x7c00);
    err_acc acc;
    acc_load(&acc, r->e, r->n, r->emax, r->wmax);
    __m128i bad = _mm_setzero_si128();
    int32_t qi[LANES];
    for (; i < nv; i += LANES) {
        __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(w + i)));
        __m256 x = _mm256_div_ps(v, s);
        x = _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        x = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        x = _mm256_add_ps(x, z);
        x = _mm256_min_ps(_mm256_max_ps(x, qmin), qmax);
        _mm256_storeu_si256((__m256i *)(void *)qi, _mm256_cvtps_epi32(x));
        if (r->mode == ANEC_QUANT_AFFINE_UINT8)
            for (int j = 0; j < LANES; j++)
                ((uint8_t *)q)[i + j] = (uint8_t)qi[j];
        else
            for (int j = 0; j < LANES; j++)
                ((int8_t *)q)[i + j] = (int8_t)qi[j];
        __m128i dh = _mm256_cvtps_ph(_mm256_mul_ps(_mm256_sub_ps(x, z), s),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        bad = _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(dh, expo), expo));
        __m256 e = _mm256_sub_ps(_mm256_cvtph_ps(dh), v);
        acc_add(&acc, v, e);
    }
    acc_store(&acc, r->e, r->n, &r->emax, &r->wmax);
    if (_mm_movemask_epi8(bad))
        r->dense_finite = 0;
    row_scalar(r, w, q, i, n);
}
#endif

int anec_quantize_linear8(const uint16_t *w, size_t outer, size_t channels, size_t inner, int mode, void *q,
                          uint16_t *scale, void *zero_point, double *err_sq, double *norm_sq, float *max_err,
                          float *max_w)
{
    if (!w || !q || !scale || !err_sq || !norm_sq || !max_err || !max_w || channels == 0 || outer == 0 ||
        inner == 0 || mode < ANEC_QUANT_SYMMETRIC_INT8 || mode > ANEC_QUANT_AFFINE_UINT8 ||
        (mode != ANEC_QUANT_SYMMETRIC_INT8 && !zero_point))
        return ANEC_EINVAL;
    if (channels > SIZE_MAX / outer / inner)
        return ANEC_EINVAL;
    const int qmin = mode == ANEC_QUANT_SYMMETRIC_INT8 ? -127 : mode == ANEC_QUANT_AFFINE_INT8 ? -128 : 0;
    const int qmax = mode == ANEC_QUANT_AFFINE_UINT8 ? 255 : 127;
#ifdef QUANT_AVX
    const int avx = anec__have_f16c();
#endif
    float *lo = malloc(channels * sizeof(float));
    float *hi = malloc(channels * sizeof(float));
    float *zf = malloc(channels * sizeof(float));
    int rc = 0;
    if (!lo || !hi || !zf) {
        rc = ANEC_ENOMEM;
        goto out;
    }
    for (size_t c = 0; c < channels; c++) {
        lo[c] = INFINITY;
        hi[c] = -INFINITY;
    }
    /* pass 1: each channel's range; a NaN or an infinity is left to the numpy path */
    int finite = 1;
    for (size_t o = 0; o < outer; o++)
        for (size_t c = 0; c < channels; c++) {
            const uint16_t *row = w + (o * channels + c) * inner;
#ifdef QUANT_AVX
            if (avx && inner >= LANES) {
                finite &= range_avx(row, inner, &lo[c], &hi[c]);
                continue;
            }
#endif
            finite &= range_scalar(row, 0, inner, &lo[c], &hi[c]);
        }
    if (!finite) {
        rc = 2;
        goto out;
    }
    float *sf = lo; /* the scales as fp32, over the minima (no longer needed once a scale is known) */
    for (size_t c = 0; c < channels; c++) {
        float l = lo[c], h = hi[c];
        if (mode == ANEC_QUANT_SYMMETRIC_INT8) {
            float m = fmaxf(fabsf(l), fabsf(h));
            l = -m;
            h = m;
        } else {
            l = l < 0.0f ? l : 0.0f;
            h = h > 0.0f ? h : 0.0f;
        }
        uint16_t span = anec_h_from_f(h - l);
        uint16_t s = anec_h_from_f(anec_f_from_h(span) / (float)(qmax - qmin));
        if (h_is_zero(span))
            s = H_ONE;
        scale[c] = s;
        float z = 0.0f;
        if (mode != ANEC_QUANT_SYMMETRIC_INT8) {
            if (!h_is_zero(span)) {
                float a = anec_round_f16((float)qmin * h);
                float b = anec_round_f16((float)qmax * l);
                float d = anec_round_f16(a - b);
                z = rintf(anec_round_f16(d / anec_f_from_h(span)));
                z = z < (float)qmin ? (float)qmin : z > (float)qmax ? (float)qmax : z;
            }
            if (mode == ANEC_QUANT_AFFINE_INT8)
                ((int8_t *)zero_point)[c] = (int8_t)z;
            else
                ((uint8_t *)zero_point)[c] = (uint8_t)z;
        }
        zf[c] = z;
        sf[c] = anec_f_from_h(s);
        if (sf[c] == 0.0f) /* a scale below fp16's range: 0 / 0 has no defined int8, numpy decides */
            finite = 0;
        err_sq[c] = 0.0;
        norm_sq[c] = 0.0;
    }
    if (!finite) {
        rc = 2;
        goto out;
    }
    /* pass 2: the values, the dequantized values and the errors */
    qrow r = {.qmin = (float)qmin, .qmax = (float)qmax, .mode = mode, .emax = 0.0f, .wmax = 0.0f,
              .dense_finite = 1};
    for (size_t o = 0; o < outer; o++)
        for (size_t c = 0; c < channels; c++) {
            size_t base = (o * channels + c) * inner;
            r.s = sf[c];
            r.z = zf[c];
            memset(r.e, 0, sizeof r.e);
            memset(r.n, 0, sizeof r.n);
            void *qrow_out = (uint8_t *)q + base;
#ifdef QUANT_AVX
            if (avx)
                row_avx(&r, w + base, qrow_out, inner);
            else
#endif
                row_scalar(&r, w + base, qrow_out, 0, inner);
            double e = 0.0, n = 0.0;
            for (int j = 0; j < LANES; j++) {
                e += r.e[j];
                n += r.n[j];
            }
            err_sq[c] += e;
            norm_sq[c] += n;
        }
    *max_err = r.emax;
    *max_w = r.wmax;
    rc = r.dense_finite ? 0 : 1;
out:
    free(lo);
    free(hi);
    free(zf);
    return rc;
}

/* ---- the gate's errors of any decompressed tensor ------------------------------------------ */

typedef struct {
    double e[LANES], n[LANES];
    float emax, wmax;
    int bad_w, bad_d;
} erow;

static void erow_scalar(erow *r, const uint16_t *w, const uint16_t *d, size_t i0, size_t n)
{
    for (size_t i = i0; i < n; i++) {
        if ((w[i] & 0x7c00u) == 0x7c00u)
            r->bad_w = 1;
        if ((d[i] & 0x7c00u) == 0x7c00u)
            r->bad_d = 1;
        float v = anec_f_from_h(w[i]);
        float e = anec_f_from_h(d[i]) - v;
        r->e[i % LANES] += (double)e * (double)e;
        r->n[i % LANES] += (double)v * (double)v;
        float ae = fabsf(e), av = fabsf(v);
        r->emax = ae > r->emax ? ae : r->emax;
        r->wmax = av > r->wmax ? av : r->wmax;
    }
}

#ifdef QUANT_AVX
__attribute__((target("avx,f16c")))
static void erow_avx(erow *r, const uint16_t *w, const uint16_t *d, size_t n)
{
    size_t i = 0, nv = n & ~(size_t)(LANES - 1);
    const __m128i expo = _mm_set1_epi16(0x7c00);
    err_acc acc;
    acc_load(&acc, r->e, r->n, r->emax, r->wmax);
    __m128i bw = _mm_setzero_si128(), bd = _mm_setzero_si128();
    for (; i < nv; i += LANES) {
        __m128i wh = _mm_loadu_si128((const __m128i *)(const void *)(w + i));
        __m128i dh = _mm_loadu_si128((const __m128i *)(const void *)(d + i));
        bw = _mm_or_si128(bw, _mm_cmpeq_epi16(_mm_and_si128(wh, expo), expo));
        bd = _mm_or_si128(bd, _mm_cmpeq_epi16(_mm_and_si128(dh, expo), expo));
        __m256 v = _mm256_cvtph_ps(wh);
        __m256 e = _mm256_sub_ps(_mm256_cvtph_ps(dh), v);
        acc_add(&acc, v, e);
    }
    acc_store(&acc, r->e, r->n, &r->emax, &r->wmax);
    r->bad_w |= _mm_movemask_epi8(bw) != 0;
    r->bad_d |= _mm_movemask_epi8(bd) != 0;
    erow_scalar(r, w, d, i, n);
}
#endif

int anec_dense_errors(const uint16_t *w, const uint16_t *d, size_t outer, size_t channels, size_t inner,
                      double *err_sq, double *norm_sq, float *max_err, float *max_w)
{
    if (!w || !d || !err_sq || !norm_sq || !max_err || !max_w || channels == 0 || outer == 0 || inner == 0 ||
        channels > SIZE_MAX / outer / inner)
        return ANEC_EINVAL;
#ifdef QUANT_AVX
    const int avx = anec__have_f16c();
#endif
    erow r = {.emax = 0.0f, .wmax = 0.0f, .bad_w = 0, .bad_d = 0};
    for (size_t c = 0; c < channels; c++)
        err_sq[c] = norm_sq[c] = 0.0;
    for (size_t o = 0; o < outer; o++)
        for (size_t c = 0; c < channels; c++) {
            size_t base = (o * channels + c) * inner;
            memset(r.e, 0, sizeof r.e);
            memset(r.n, 0, sizeof r.n);
#ifdef QUANT_AVX
            if (avx)
                erow_avx(&r, w + base, d + base, inner);
            else
#endif
                erow_scalar(&r, w + base, d + base, 0, inner);
            double e = 0.0, n = 0.0;
            for (int j = 0; j < LANES; j++) {
                e += r.e[j];
                n += r.n[j];
            }
            err_sq[c] += e;
            norm_sq[c] += n;
        }
    *max_err = r.emax;
    *max_w = r.wmax;
    return r.bad_w ? 2 : r.bad_d ? 1 : 0;
}

/* ---- exact 1-D k-means ------------------------------------------------------------------- */

/* The dynamic program of anec/compress/palettize.py kmeans_1d_many for one group, with its arithmetic
   (float64 prefix sums added in order; the cost of a run [a, b) is
   (S2[b] - S2[a]) - (s * s) / w, s = S1[b] - S1[a], w = W[b] - W[a], at least 0) and its
   search: each layer's row minima by divide and conquer over the same midpoints, the
   leftmost minimum on ties. So the centroids are numpy's bit for bit. */
typedef struct {
    const double *W, *S1, *S2, *prev;
    double *cur;
    uint32_t *arg;
} kmdp;

static double km_cost(const kmdp *p, size_t a, size_t b)
{
    double ww = p->W[b] - p->W[a];
    double s = p->S1[b] - p->S1[a];
    double c = (p->S2[b] - p->S2[a]) - s * s / ww;
    return c > 0.0 ? c : 0.0;
}

static void km_solve(const kmdp *p, size_t lo, size_t hi, size_t olo, size_t ohi)
{
    while (lo <= hi) {
        size_t mid = (lo + hi) / 2;
        size_t top = ohi < mid - 1 ? ohi : mid - 1;
        double best = p->prev[olo] + km_cost(p, olo, mid);
        size_t bm = olo;
        for (size_t m = olo + 1; m <= top; m++) {
            double v = p->prev[m] + km_cost(p, m, mid);
            if (v < best) {
                best = v;
                bm = m;
            }
        }
        p->cur[mid] = best;
        p->arg[mid] = (uint32_t)bm;
        if (mid > lo)
            km_solve(p, lo, mid - 1, olo, bm); /* the left half recursively, the right half in the loop */
        lo = mid + 1;
        olo = bm;
    }
}

int anec_kmeans_1d(const double *values, const double *weights, size_t n, size_t k, double *centroids)
{
    if (!values || !weights || !centroids || k < 1 || n <= k || n >= UINT32_MAX || k > SIZE_MAX / (n + 1) / 4)
        return ANEC_EINVAL;
    double *W = malloc((n + 1) * sizeof(double));
    double *S1 = malloc((n + 1) * sizeof(double));
    double *S2 = malloc((n + 1) * sizeof(double));
    double *prev = malloc((n + 1) * sizeof(double));
    double *cur = malloc((n + 1) * sizeof(double));
    uint32_t *splits = k > 1 ? malloc((k - 1) * (n + 1) * sizeof(uint32_t)) : NULL;
    int rc = 0;
    if (!W || !S1 || !S2 || !prev || !cur || (k > 1 && !splits)) {
        rc = ANEC_ENOMEM;
        goto out;
    }
    W[0] = S1[0] = S2[0] = 0.0;
    for (size_t i = 0; i < n; i++) {
        double wv = weights[i] * values[i];
        W[i + 1] = W[i] + weights[i];
        S1[i + 1] = S1[i] + wv;
        S2[i + 1] = S2[i] + wv * values[i];
    }
    kmdp p = {W, S1, S2, prev, cur, NULL};
    prev[0] = INFINITY;
    for (size_t t = 1; t <= n; t++)
        prev[t] = km_cost(&p, 0, t);
    for (size_t j = 1; j < k; j++) {
        uint32_t *arg = splits + (j - 1) * (n + 1);
        for (size_t t = 0; t <= n; t++) {
            cur[t] = INFINITY;
            arg[t] = 0;
        }
        p.prev = prev;
        p.cur = cur;
        p.arg = arg;
        km_solve(&p, j + 1, n, j, n - 1);
        double *t = prev;
        prev = cur;
        cur = t;
    }
    size_t b = n;
    for (size_t j = k; j-- > 0;) { /* centroid j is the run [splits_j[b], b) */
        size_t a = j ? splits[(j - 1) * (n + 1) + b] : 0;
        centroids[j] = (S1[b] - S1[a]) / (W[b] - W[a]);
        b = a;
    }
out:
    free(W);
    free(S1);
    free(S2);
    free(prev);
    free(cur);
    free(splits);
    return rc;
}
