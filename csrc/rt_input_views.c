/*
 * rt_input_views.c - host arrays into fp16 inputs: the public conversions
 * (anec_f32_to_f16, anec_f16_to_f32) and range check (anec_max_magnitude_bits,
 * SSE2 where the host has it), and anec_reload_input_views, which checks every
 * strided (possibly transposed) view of a caller's array for NaN, Inf and the
 * fp16 range before it writes any input surface, then packs each into its
 * surface (fp16 transposes through registers in 8x8 blocks).
 */
#include <stdint.h>
#include <string.h>

#include "fp16.h"
#include "rt_internal.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

void anec_f32_to_f16(const float *src, uint16_t *dst, size_t n) { anec_cvt_f32_to_f16(src, dst, n); }
void anec_f16_to_f32(const uint16_t *src, float *dst, size_t n) { anec_cvt_f16_to_f32(src, dst, n); }

uint32_t anec_max_magnitude_bits(const void *src, size_t width, size_t n)
{
    const uint8_t *s = src;
    size_t i = 0;
    uint32_t top = 0;
    if (width != 2 && width != 4)
        return 0;
#if defined(__SSE2__)
    /* with the sign cleared every lane is non-negative: signed compares order them */
    size_t per = 16 / width;
    if (width == 2) {
        const __m128i mask = _mm_set1_epi16(0x7fff);
        __m128i m = _mm_setzero_si128();
        for (; i + per <= n; i += per)
            m = _mm_max_epi16(m, _mm_and_si128(_mm_loadu_si128((const __m128i *)(s + 2 * i)), mask));
        uint16_t lanes[8];
        _mm_storeu_si128((__m128i *)lanes, m);
        for (int k = 0; k < 8; k++)
            top = lanes[k] > top ? lanes[k] : top;
    } else {
        /* SSE2 has no 32-bit max: a compare and a select, on four independent
           accumulators so that the loop is bound by memory, not by that chain */
        const __m128i mask = _mm_set1_epi32(0x7fffffff);
        __m128i m[4] = {_mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128()};
        for (; i + 4 * per <= n; i += 4 * per)
            for (int k = 0; k < 4; k++) {
                __m128i v = _mm_and_si128(_mm_loadu_si128((const __m128i *)(s + 4 * (i + (size_t)k * per))), mask);
                __m128i gt = _mm_cmpgt_epi32(v, m[k]);
                m[k] = _mm_or_si128(_mm_and_si128(gt, v), _mm_andnot_si128(gt, m[k]));
            }
        uint32_t lanes[16];
        for (int k = 0; k < 4; k++)
            _mm_storeu_si128((__m128i *)(lanes + 4 * k), m[k]);
        for (int k = 0; k < 16; k++)
            top = lanes[k] > top ? lanes[k] : top;
    }
#endif
    for (; i < n; i++) {
        uint32_t v;
        if (width == 2) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            v = h & 0x7fffu;
        } else {
            memcpy(&v, s + 4 * i, 4);
            v &= 0x7fffffffu;
        }
        top = v > top ? v : top;
    }
    return top;
}

/* The largest |x| (sign-less bits) over the elements of a view, read with the
   unit-stride axis innermost (one SIMD pass per contiguous run). */
static uint32_t view_magnitude(const anec_input_view *v)
{
    size_t w = v->dtype == ANEC_DTYPE_FP16 ? 2 : 4;
    const uint8_t *s = v->data;
    uint64_t outer = v->rows, inner = v->cols;
    int64_t os = v->row_stride, is = v->col_stride;
    if (is != 1 && (os == 1 || inner == 1)) { /* the row axis is the contiguous one */
        outer = v->cols, inner = v->rows;
        os = v->col_stride, is = v->row_stride;
    }
    uint32_t top = 0, m;
    for (uint64_t o = 0; o < outer; o++) {
        const uint8_t *row = s + (int64_t)o * os * (int64_t)w;
        if (is == 1 || inner == 1) {
            m = anec_max_magnitude_bits(row, w, inner);
        } else {
            m = 0;
            for (uint64_t i = 0; i < inner; i++) {
                uint32_t b;
                if (w == 2) {
                    uint16_t h;
                    memcpy(&h, row + (int64_t)i * is * 2, 2);
                    b = h & 0x7fffu;
                } else {
                    memcpy(&b, row + (int64_t)i * is * 4, 4);
                    b &= 0x7fffffffu;
                }
                m = b > m ? b : m;
            }
        }
        top = m > top ? m : top;
    }
    return top;
}

/* Same source, dtype and element set (in any order, e.g. a weight and its transpose). */
static int same_elements(const anec_input_view *a, const anec_input_view *b)
{
    if (a->data != b->data || a->dtype != b->dtype)
        return 0;
    if (a->rows == b->rows && a->cols == b->cols && a->row_stride == b->row_stride && a->col_stride == b->col_stride)
        return 1;
    return a->rows == b->cols && a->cols == b->rows && a->row_stride == b->col_stride && a->col_stride == b->row_stride;
}

#if defined(__SSE2__)
/* dst[r][c] = src[c * col_stride + r] for fp16: 8 source rows of 8 halves are loaded,
   transposed in registers (three rounds of interleaves) and stored as 8 destination
   rows; the edges go element by element. */
static void transpose_f16(const anec_input_view *v, uint16_t *dst)
{
    const uint16_t *s = v->data;
    uint64_t R = v->rows, C = v->cols, R8 = R & ~(uint64_t)7, C8 = C & ~(uint64_t)7;
    int64_t cs = v->col_stride;
    /* 64 source rows at a time (they stay in L1): each destination row gets 128 bytes, whole
       cache lines, per block */
    for (uint64_t cb = 0; cb < C8; cb += 64)
    for (uint64_t r0 = 0; r0 < R8; r0 += 8)
        for (uint64_t c0 = cb; c0 < C8 && c0 < cb + 64; c0 += 8) {
            __m128i a[8], b[8];
            for (int k = 0; k < 8; k++)
                a[k] = _mm_loadu_si128((const __m128i *)(const void *)(s + (int64_t)(c0 + k) * cs + (int64_t)r0));
            for (int k = 0; k < 4; k++) {
                b[2 * k] = _mm_unpacklo_epi16(a[2 * k], a[2 * k + 1]);
                b[2 * k + 1] = _mm_unpackhi_epi16(a[2 * k], a[2 * k + 1]);
            }
            for (int k = 0; k < 2; k++) {
                a[4 * k] = _mm_unpacklo_epi32(b[4 * k], b[4 * k + 2]);
                a[4 * k + 1] = _mm_unpackhi_epi32(b[4 * k], b[4 * k + 2]);
                a[4 * k + 2] = _mm_unpacklo_epi32(b[4 * k + 1], b[4 * k + 3]);
                a[4 * k + 3] = _mm_unpackhi_epi32(b[4 * k + 1], b[4 * k + 3]);
            }
            for (int k = 0; k < 4; k++) {
                b[2 * k] = _mm_unpacklo_epi64(a[k], a[k + 4]);
                b[2 * k + 1] = _mm_unpackhi_epi64(a[k], a[k + 4]);
            }
            for (int k = 0; k < 8; k++)
                _mm_storeu_si128((__m128i *)(void *)(dst + (r0 + (uint64_t)k) * C + c0), b[k]);
        }
    for (uint64_t r = 0; r < R; r++)
        for (uint64_t c = r < R8 ? C8 : 0; c < C; c++)
            dst[r * C + c] = s[(int64_t)c * cs + (int64_t)r];
}
#endif

/* View -> packed fp16 rows of the surface; transposes go by 32x32 tiles so that
   both sides stay in cache lines. */
static void write_view(const anec_input_view *v, uint16_t *dst)
{
    enum { T = 32 };
    size_t w = v->dtype == ANEC_DTYPE_FP16 ? 2 : 4;
    const uint8_t *s = v->data;
    if (v->col_stride == 1 || v->cols == 1) {
        for (uint64_t r = 0; r < v->rows; r++) {
            const uint8_t *row = s + (int64_t)r * v->row_stride * (int64_t)w;
            if (w == 2)
                memcpy(dst + r * v->cols, row, v->cols * 2);
            else
                anec_cvt_f32_to_f16((const float *)(const void *)row, dst + r * v->cols, v->cols);
        }
        return;
    }
#if defined(__SSE2__)
    if (w == 2 && v->row_stride == 1) { /* fp16 transpose: 8x8 blocks through registers */
        transpose_f16(v, dst);
        return;
    }
#endif
    float tmp[T];
    for (uint64_t r0 = 0; r0 < v->rows; r0 += T)
        for (uint64_t c0 = 0; c0 < v->cols; c0 += T) {
            uint64_t r1 = r0 + T < v->rows ? r0 + T : v->rows, c1 = c0 + T < v->cols ? c0 + T : v->cols;
            for (uint64_t r = r0; r < r1; r++) {
                const uint8_t *row = s + (int64_t)r * v->row_stride * (int64_t)w;
                uint16_t *d = dst + r * v->cols;
                if (w == 2) {
                    for (uint64_t c = c0; c < c1; c++)
                        memcpy(d + c, row + (int64_t)c * v->col_stride * 2, 2);
                } else {
                    for (uint64_t c = c0; c < c1; c++)
                        memcpy(&tmp[c - c0], row + (int64_t)c * v->col_stride * 4, 4);
                    anec_cvt_f32_to_f16(tmp, d + c0, c1 - c0);
                }
            }
        }
}

int anec_reload_input_views(anec_program *p, const anec_input_view *views, size_t n, long long *bad)
{
    if (bad)
        *bad = -1;
    int rc = rt_enter(p);
    if (rc != ANEC_OK)
        return rc;
    uint64_t t0 = rt_now_ns();
    if (n && !views)
        rc = rt_fail(ANEC_EINVAL, "anec_reload_input_views: NULL view array");
    /* every view is checked before any surface is written: on an error the old weights stay */
    for (size_t k = 0; rc == ANEC_OK && k < n; k++) {
        const anec_input_view *v = &views[k];
        if (v->input >= p->n_in) {
            rc = rt_fail(ANEC_EINVAL, "view %zu: the program has %zu inputs; got input %zu", k, p->n_in, v->input);
            break;
        }
        const io_desc *d = &p->in[v->input];
        if (d->dtype != ANEC_DTYPE_FP16 || (v->dtype != ANEC_DTYPE_FP16 && v->dtype != ANEC_DTYPE_FP32))
            rc = rt_fail(ANEC_EINVAL, "input '%s' is %s; views write fp16 inputs from fp16 or fp32 arrays, got %s",
                         d->name, rt_dtype_name(d->dtype), rt_dtype_name(v->dtype));
        else if (v->rows * v->cols != d->numel || (d->numel && !v->data))
            rc = rt_fail(ANEC_EINVAL, "input '%s' has %zu elements; got a %llu x %llu view", d->name, d->numel,
                         (unsigned long long)v->rows, (unsigned long long)v->cols);
        for (size_t j = 0; rc == ANEC_OK && j < k; j++)
            if (views[j].input == v->input)
                rc = rt_fail(ANEC_EINVAL, "input '%s' is given twice (views %zu and %zu)", d->name, j, k);
        if (rc != ANEC_OK)
            break;
        int seen = 0; /* a region already checked (a key read under several views) */
        for (size_t j = 0; j < k && !seen; j++)
            seen = same_elements(&views[j], v);
        /* finite and within +-65504, compared on the array's own bits (NaN/Inf sort above) */
        uint32_t limit = v->dtype == ANEC_DTYPE_FP16 ? 0x7bffu : 0x477fe000u;
        if (!seen && d->numel && view_magnitude(v) > limit) {
            if (bad)
                *bad = (long long)k;
            rc = rt_fail(ANEC_EWEIGHTS, "input '%s': a value is NaN, Inf or beyond the fp16 range (+-65504)",
                         d->name);
        }
    }
    for (size_t k = 0; rc == ANEC_OK && k < n; k++) {
        anec_surface *s = &p->in_s[views[k].input];
        if ((rc = rt_surface_lock(p->rt, s, 0)) != ANEC_OK)
            break;
        write_view(&views[k], (uint16_t *)(void *)s->base);
        rt_surface_unlock(p->rt, s);
        rt_count_bytes(p, p->in[views[k].input].bytes, 0, 0);
    }
    if (rc == ANEC_OK)
        rt_count_inputs_reload(p, t0);
    pthread_mutex_unlock(&p->lock);
    return rc;
}
