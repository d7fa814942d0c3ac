/*
 * rt_host.c - the host work of a training step, one pass over memory each.
 *
 * A training step keeps fp32 master weights and moments on the host (see
 * anec/training/optim.py). Written with numpy, every step of the arithmetic
 * is its own pass over every tensor; these kernels do the same arithmetic,
 * in the same order and at the same precision, in one pass:
 *
 *   anec_adamw_f32     AdamW on one tensor: the gradient's clipping factor,
 *                      both moments, bias correction, decoupled decay, the
 *                      update, the finite/range check of the new values, and
 *                      optionally the new values rounded to fp16;
 *   anec_sum_squares   the float64 sum of squares of an fp32 tensor, summed
 *                      in numpy's pairwise order (so the global gradient norm
 *                      equals numpy's np.square(g, dtype=float64).sum());
 *   anec_add_scaled    dst += src * scale for fp16 or fp32 sources (a weight
 *                      gradient out of a backward program, divided by the
 *                      loss scale, into an fp32 accumulator);
 *   anec_xent_shift,   the fp64 softmax cross-entropy of logits in the
 *   anec_xent_grad     programs' [V, S] layout, around numpy's exp (whose
 *                      SIMD rounding C cannot promise to match): the shift by
 *                      each position's maximum, then the sums, the loss's
 *                      picked probabilities and the scaled fp32 gradient.
 *
 * Every result is bit-for-bit the numpy one: each value goes through the
 * same IEEE single (or double) operations, one rounding each, no fused
 * multiply-add (a contraction would round once where numpy rounds twice).
 * Addition and multiplication are commutative in IEEE arithmetic, so only
 * the grouping matters, and it is numpy's. The x86 path runs 8 lanes at a
 * time with AVX (checked at run time, as fp16.h does); elsewhere the plain
 * loop is the code (compilers may vectorize it: that changes no rounding).
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "anec_rt.h"
#include "fp16.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* ANEC_HOST_SCALAR leaves the AVX paths out: a test builds the file so to check the
   portable code (what non-x86 machines run) against the same references. */
#if defined(ANEC_HAVE_F16C_PATH) && !defined(ANEC_HOST_SCALAR)
#define HOST_AVX 1
#endif

/* ---- AdamW --------------------------------------------------------------- */

/* One element: the same operations, in the same order, as the numpy optimizer. */
static inline int adamw_one(const anec_adamw_coef *c, float p, float g, const float *m, const float *v,
                            size_t i, float *pn, float *mn, float *vn)
{
    if (c->scale_grad)
        g = g * c->grad_scale;
    float m1 = g * c->one_minus_beta1;
    if (m) {
        float t = m[i] * c->beta1;
        m1 = m1 + t;
    }
    float g2 = g * g;
    float v1 = g2 * c->one_minus_beta2;
    if (v) {
        float t = v[i] * c->beta2;
        v1 = v1 + t;
    }
    float d = v1 * c->inv_bias2;
    d = sqrtf(d);
    d = d + c->eps;
    d = m1 / d;
    d = d * c->step_size;
    float q = c->decay ? p * c->decay_factor : p;
    q = q - d;
    *pn = q;
    *mn = m1;
    *vn = v1;
    return !c->check || fabsf(q) <= c->limit; /* false for NaN and Inf (limit is finite) */
}

static int adamw_scalar(const float *p, const float *g, const float *m, const float *v, float *p_out,
                        float *m_out, float *v_out, uint16_t *half_out, size_t i, size_t n,
                        const anec_adamw_coef *c)
{
    for (; i < n; i++) {
        if (!adamw_one(c, p[i], g[i], m, v, i, p_out + i, m_out + i, v_out + i))
            return 1;
        if (half_out)
            half_out[i] = anec_h_from_f(p_out[i]);
    }
    return 0;
}

#ifdef HOST_AVX
__attribute__((target("avx,f16c")))
static int adamw_avx(const float *p, const float *g, const float *m, const float *v, float *p_out,
                     float *m_out, float *v_out, uint16_t *half_out, size_t n, const anec_adamw_coef *c)
{
    const __m256 scale = _mm256_set1_ps(c->grad_scale), b1 = _mm256_set1_ps(c->beta1);
    const __m256 c1 = _mm256_set1_ps(c->one_minus_beta1), b2 = _mm256_set1_ps(c->beta2);
    const __m256 c2 = _mm256_set1_ps(c->one_minus_beta2), ib2 = _mm256_set1_ps(c->inv_bias2);
    const __m256 eps = _mm256_set1_ps(c->eps), step = _mm256_set1_ps(c->step_size);
    const __m256 decay = _mm256_set1_ps(c->decay_factor), limit = _mm256_set1_ps(c->limit);
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    size_t i = 0, nv = n & ~(size_t)7;
    for (; i < nv; i += 8) {
        __m256 gg = _mm256_loadu_ps(g + i);
        if (c->scale_grad)
            gg = _mm256_mul_ps(gg, scale);
        __m256 m1 = _mm256_mul_ps(gg, c1);
        if (m)
            m1 = _mm256_add_ps(m1, _mm256_mul_ps(_mm256_loadu_ps(m + i), b1));
        __m256 v1 = _mm256_mul_ps(_mm256_mul_ps(gg, gg), c2);
        if (v)
            v1 = _mm256_add_ps(v1, _mm256_mul_ps(_mm256_loadu_ps(v + i), b2));
        __m256 d = _mm256_sqrt_ps(_mm256_mul_ps(v1, ib2));
        d = _mm256_mul_ps(_mm256_div_ps(m1, _mm256_add_ps(d, eps)), step);
        __m256 q = _mm256_loadu_ps(p + i);
        if (c->decay)
            q = _mm256_mul_ps(q, decay);
        q = _mm256_sub_ps(q, d);
        if (c->check) {
            /* ordered compare: NaN fails, and so does Inf (limit is finite) */
            __m256 ok = _mm256_cmp_ps(_mm256_and_ps(q, abs_mask), limit, _CMP_LE_OQ);
            if (_mm256_movemask_ps(ok) != 0xff)
                return 1;
        }
        _mm256_storeu_ps(p_out + i, q);
        _mm256_storeu_ps(m_out + i, m1);
        _mm256_storeu_ps(v_out + i, v1);
        if (half_out)
            _mm_storeu_si128((__m128i *)(void *)(half_out + i),
                             _mm256_cvtps_ph(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    return adamw_scalar(p, g, m, v, p_out, m_out, v_out, half_out, i, n, c);
}
#endif

int anec_adamw_f32(const float *p, const float *g, const float *m, const float *v, float *p_out, float *m_out,
                   float *v_out, uint16_t *half_out, size_t n, const anec_adamw_coef *coef)
{
    if (!coef || (n && (!p || !g || !p_out || !m_out || !v_out)))
        return ANEC_EINVAL;
    if (coef->check && !(coef->limit >= 0.0f && coef->limit < INFINITY))
        return ANEC_EINVAL;
#ifdef HOST_AVX
    if (anec__have_f16c())
        return adamw_avx(p, g, m, v, p_out, m_out, v_out, half_out, n, coef);
#endif
    return adamw_scalar(p, g, m, v, p_out, m_out, v_out, half_out, 0, n, coef);
}

/* ---- sum of squares --------------------------------------------------------- */

/* The pairwise order: fewer than 8 values are summed one by one (from -0.0);
   up to 128 go to 8 running sums (element i into sum i mod 8) combined as
   ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)), then the < 8 left over one by one;
   longer runs split at half the length rounded down to a multiple of 8. */
static double sq_block_scalar(const float *x, size_t n)
{
    if (n < 8) {
        double r = -0.0;
        for (size_t i = 0; i < n; i++)
            r += (double)x[i] * (double)x[i];
        return r;
    }
    double s[8];
    for (int j = 0; j < 8; j++)
        s[j] = (double)x[j] * (double)x[j];
    size_t i = 8, full = n - n % 8;
    for (; i < full; i += 8)
        for (int j = 0; j < 8; j++)
            s[j] += (double)x[i + j] * (double)x[i + j];
    double r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; i < n; i++)
        r += (double)x[i] * (double)x[i];
    return r;
}

#ifdef HOST_AVX
/* the same block, the 8 running sums as two 4-lane registers (lane j = sum j) */
__attribute__((target("avx")))
static double sq_block_avx(const float *x, size_t n)
{
    if (n < 8)
        return sq_block_scalar(x, n);
    __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(x)), hi = _mm256_cvtps_pd(_mm_loadu_ps(x + 4));
    __m256d s0 = _mm256_mul_pd(lo, lo), s1 = _mm256_mul_pd(hi, hi);
    size_t i = 8, full = n - n % 8;
    for (; i < full; i += 8) {
        lo = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
        hi = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
        s0 = _mm256_add_pd(s0, _mm256_mul_pd(lo, lo));
        s1 = _mm256_add_pd(s1, _mm256_mul_pd(hi, hi));
    }
    double s[8];
    _mm256_storeu_pd(s, s0);
    _mm256_storeu_pd(s + 4, s1);
    double r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; i < n; i++)
        r += (double)x[i] * (double)x[i];
    return r;
}
#endif

static double sq_pairwise(const float *x, size_t n, int avx)
{
    if (n > 128) {
        size_t h = n / 2;
        h -= h % 8;
        return sq_pairwise(x, h, avx) + sq_pairwise(x + h, n - h, avx);
    }
#ifdef HOST_AVX
    if (avx)
        return sq_block_avx(x, n);
#endif
    (void)avx;
    return sq_block_scalar(x, n);
}

double anec_sum_squares(const float *x, size_t n)
{
    if (!x || !n)
        return 0.0;
    int avx = 0;
#ifdef HOST_AVX
    avx = anec__have_f16c();
#endif
    return sq_pairwise(x, n, avx);
}

/* ---- scaled accumulation ---------------------------------------------------- */

#ifdef HOST_AVX
__attribute__((target("avx,f16c")))
static size_t add_scaled_avx(float *dst, const void *src, size_t width, float scale, size_t n, int accumulate)
{
    const __m256 s = _mm256_set1_ps(scale), zero = _mm256_setzero_ps();
    size_t i = 0, nv = n & ~(size_t)7;
    for (; i < nv; i += 8) {
        __m256 x = width == 2 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)src + i)))
                              : _mm256_loadu_ps((const float *)src + i);
        x = _mm256_mul_ps(x, s);
        _mm256_storeu_ps(dst + i, _mm256_add_ps(accumulate ? _mm256_loadu_ps(dst + i) : zero, x));
    }
    return i;
}
#endif

int anec_add_scaled(float *dst, const void *src, size_t width, float scale, size_t n, int accumulate)
{
    if ((width != 2 && width != 4) || (n && (!dst || !src)))
        return ANEC_EINVAL;
    size_t i = 0;
#ifdef HOST_AVX
    if (anec__have_f16c())
        i = add_scaled_avx(dst, src, width, scale, n, accumulate);
#endif
    for (; i < n; i++) {
        float x = width == 2 ? anec_f_from_h(((const uint16_t *)src)[i]) : ((const float *)src)[i];
        x = x * scale;
        dst[i] = (accumulate ? dst[i] : 0.0f) + x;
    }
    return ANEC_OK;
}

/* ---- cross-entropy ------------------------------------------------------------ */

/* Every pass walks the [n_class][n_pos] arrays row by row (class by class)
   with each position's running value in a small array, so memory streams.
   The AVX paths take 8 (fp32) or 4 (fp64) positions of a row at a time. */

#ifdef HOST_AVX
/* columns [b, b + w) (w <= 64, a multiple of 8): the maxima in fp32 (exact);
   MAXPS drops a NaN, so NaNs are tracked apart and set at the end */
__attribute__((target("avx")))
static void col_max_avx(const float *logits, size_t n_class, size_t n_pos, double *col_max, size_t b, size_t w)
{
    float mx[64], nan[64];
    for (size_t k = 0; k < w; k += 8) {
        __m256 m = _mm256_loadu_ps(logits + b + k);
        _mm256_storeu_ps(mx + k, m);
        _mm256_storeu_ps(nan + k, _mm256_cmp_ps(m, m, _CMP_UNORD_Q));
    }
    for (size_t c = 1; c < n_class; c++) {
        const float *row = logits + c * n_pos + b;
        for (size_t k = 0; k < w; k += 8) {
            __m256 x = _mm256_loadu_ps(row + k);
            _mm256_storeu_ps(nan + k, _mm256_or_ps(_mm256_loadu_ps(nan + k), _mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
            _mm256_storeu_ps(mx + k, _mm256_max_ps(x, _mm256_loadu_ps(mx + k)));
        }
    }
    for (size_t k = 0; k < w; k += 8) {
        __m256 m = _mm256_or_ps(_mm256_loadu_ps(mx + k), _mm256_loadu_ps(nan + k)); /* all bits set: a NaN */
        _mm256_storeu_pd(col_max + b + k, _mm256_cvtps_pd(_mm256_castps256_ps128(m)));
        _mm256_storeu_pd(col_max + b + k + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(m, 1)));
    }
}

__attribute__((target("avx")))
static size_t shift_rows_avx(const float *row, const double *col_max, double *out, size_t n_pos)
{
    size_t s = 0;
    for (; s + 4 <= n_pos; s += 4)
        _mm256_storeu_pd(out + s, _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(row + s)), _mm256_loadu_pd(col_max + s)));
    return s;
}
#endif

int anec_xent_shift(const float *logits, size_t n_class, size_t n_pos, double *z, double *col_max)
{
    if (!n_class || !n_pos || !logits || !z || !col_max)
        return ANEC_EINVAL;
    int avx = 0;
    size_t s0 = 0;
    (void)avx;
#ifdef HOST_AVX
    avx = anec__have_f16c();
    if (avx)
        for (; s0 + 8 <= n_pos; s0 += 64 < n_pos - s0 ? 64 : (n_pos - s0) & ~(size_t)7)
            col_max_avx(logits, n_class, n_pos, col_max, s0, 64 < n_pos - s0 ? 64 : (n_pos - s0) & ~(size_t)7);
#endif
    for (size_t s = s0; s < n_pos; s++) /* a NaN propagates, as in numpy's max */
        col_max[s] = (double)logits[s];
    for (size_t c = 1; c < n_class; c++)
        for (size_t s = s0; s < n_pos; s++) {
            double x = (double)logits[c * n_pos + s];
            if (!isnan(col_max[s]) && (x > col_max[s] || isnan(x)))
                col_max[s] = x;
        }
    for (size_t c = 0; c < n_class; c++) {
        const float *row = logits + c * n_pos;
        double *out = z + c * n_pos;
        size_t s = 0;
#ifdef HOST_AVX
        if (avx)
            s = shift_rows_avx(row, col_max, out, n_pos);
#endif
        for (; s < n_pos; s++)
            out[s] = (double)row[s] - col_max[s];
    }
    return ANEC_OK;
}

/* numpy's pairwise order over n contiguous doubles (see sq_pairwise) */
static double pairwise(const double *x, size_t n)
{
    if (n > 128) {
        size_t h = n / 2;
        h -= h % 8;
        return pairwise(x, h) + pairwise(x + h, n - h);
    }
    if (n < 8) {
        double r = -0.0;
        for (size_t i = 0; i < n; i++)
            r += x[i];
        return r;
    }
    double s[8];
    for (int j = 0; j < 8; j++)
        s[j] = x[j];
    size_t i = 8, full = n - n % 8;
    for (; i < full; i += 8)
        for (int j = 0; j < 8; j++)
            s[j] += x[i + (size_t)j];
    double r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; i < n; i++)
        r += x[i];
    return r;
}

#ifdef HOST_AVX
__attribute__((target("avx")))
static size_t sum_rows_avx(const double *row, double *sums, size_t n_pos)
{
    size_t s = 0;
    for (; s + 4 <= n_pos; s += 4)
        _mm256_storeu_pd(sums + s, _mm256_add_pd(_mm256_loadu_pd(sums + s), _mm256_loadu_pd(row + s)));
    return s;
}

/* positions [0, returned) of one row's gradient */
__attribute__((target("avx")))
static size_t grad_row_avx(const double *row, const double *sums, const double *ok, double scale, float *out,
                           size_t n_pos)
{
    const __m256d sc = _mm256_set1_pd(scale), zero = _mm256_set1_pd(0.0 * scale);
    size_t s = 0;
    for (; s + 4 <= n_pos; s += 4) {
        __m256d p = _mm256_div_pd(_mm256_loadu_pd(row + s), _mm256_loadu_pd(sums + s));
        __m256d d = _mm256_blendv_pd(zero, _mm256_mul_pd(p, sc), _mm256_loadu_pd(ok + s));
        _mm_storeu_ps(out + s, _mm256_cvtpd_ps(d));
    }
    return s;
}
#endif

int anec_xent_grad(const double *e, size_t n_class, size_t n_pos, const int64_t *target, const uint8_t *valid,
                   double grad_scale, float *grad, double *picked, double *sums)
{
    if (!n_class || !n_pos || !e || !target || !valid || !grad || !picked || !sums)
        return ANEC_EINVAL;
    for (size_t s = 0; s < n_pos; s++)
        if (valid[s] && (target[s] < 0 || (uint64_t)target[s] >= n_class))
            return ANEC_EINVAL;
    int avx = 0;
    (void)avx;
#ifdef HOST_AVX
    avx = anec__have_f16c();
#endif
    /* each column's sum, class by class (numpy's order for a strided row); a
       single position is one contiguous row, which numpy sums pairwise */
    if (n_pos == 1) {
        sums[0] = pairwise(e, n_class);
    } else {
        for (size_t s = 0; s < n_pos; s++)
            sums[s] = e[s];
        for (size_t c = 1; c < n_class; c++) {
            const double *row = e + c * n_pos;
            size_t s = 0;
#ifdef HOST_AVX
            if (avx)
                s = sum_rows_avx(row, sums, n_pos);
#endif
            for (; s < n_pos; s++)
                sums[s] += row[s];
        }
    }
    /* p = e / sum, times the scale, rounded to fp32; (0 * scale) where not valid */
    const double zero = 0.0 * grad_scale;
    double ok[64]; /* a lane mask per position, 64 at a time */
    for (size_t b = 0; b < n_pos; b += 64) {
        size_t w = n_pos - b < 64 ? n_pos - b : 64;
        for (size_t k = 0; k < w; k++) {
            uint64_t bits = valid[b + k] ? ~(uint64_t)0 : 0;
            memcpy(&ok[k], &bits, sizeof bits);
        }
        for (size_t c = 0; c < n_class; c++) {
            const double *row = e + c * n_pos + b;
            float *out = grad + c * n_pos + b;
            size_t s = 0;
#ifdef HOST_AVX
            if (avx)
                s = grad_row_avx(row, sums + b, ok, grad_scale, out, w);
#endif
            for (; s < w; s++) {
                double p = row[s] / sums[b + s];
                out[s] = (float)(valid[b + s] ? p * grad_scale : zero);
            }
        }
    }
    /* the target classes: p - 1 */
    for (size_t s = 0; s < n_pos; s++) {
        if (!valid[s])
            continue;
        size_t at = (size_t)target[s] * n_pos + s;
        double p = e[at] / sums[s];
        picked[s] = p;
        grad[at] = (float)((p - 1.0) * grad_scale);
    }
    return ANEC_OK;
}
