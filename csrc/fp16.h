/*
 * fp16.h - IEEE binary16 <-> binary32 conversion (internal, header-only).
 *
 * The sim stores fp16 tensors as uint16 bit patterns and computes in fp32, so
 * these conversions run on every op: scalar versions are exact and portable
 * (round to nearest even, subnormals, inf, NaN), the buffer versions convert 8
 * values at a time with the x86 F16C instructions when the CPU has them
 * (checked once at run time, so the build needs no -mf16c) or with NEON on
 * arm64 (always there), and fall back to the scalar code otherwise. Every path
 * gives the scalar code's bits: the hardware rounds as it does (the default
 * floating-point mode: nearest even, no flush to zero), and a block of 8 that
 * holds a NaN goes through the scalar code, so a NaN's bits never depend on
 * the FPU (F16C and NEON quiet a signalling fp16 NaN; the scalar code keeps it,
 * as numpy does).
 */
#ifndef ANEC_FP16_H
#define ANEC_FP16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define ANEC_HAVE_F16C_PATH 1
#include <cpuid.h>
#include <immintrin.h>
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define ANEC_HAVE_NEON_PATH 1
#include <arm_neon.h>
#endif

static inline uint32_t anec_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float anec_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* fp32 -> fp16 bits, round to nearest even; overflow gives +-inf, NaN stays NaN. */
static inline uint16_t anec_h_from_f(float f)
{
    uint32_t x = anec_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or NaN */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? (0x200u | ((ax >> 13) & 0x3ffu)) : 0u));
    if (ax >= 0x477ff000u) /* >= 65520: rounds to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below the smallest normal fp16 (2^-14): subnormal or zero */
        if (ax < 0x33000000u) /* < 2^-25: rounds to zero */
            return (uint16_t)sign;
        uint32_t e = ax >> 23;                 /* 102..112 */
        uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e;             /* 14..24 */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
    /* normal: rebias exponent, round mantissa from 23 to 10 bits */
    uint32_t r = ((ax - 0x38000000u) >> 13);
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
        r++;
    return (uint16_t)(sign | r);
}

/* fp16 bits -> fp32 (exact). */
static inline float anec_f_from_h(uint16_t h)
{
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0x1fu)
        return anec_bits_f32(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        if (m == 0)
            return anec_bits_f32(sign);
        /* subnormal: value = m * 2^-24 */
        float v = (float)m * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return anec_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* Round an fp32 value to the nearest fp16 value (kept as fp32). */
static inline float anec_round_f16(float f) { return anec_f_from_h(anec_h_from_f(f)); }

#ifdef ANEC_HAVE_F16C_PATH
__attribute__((target("f16c,avx")))
static inline void anec__f32_to_f16_f16c(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0, nv = n & ~(size_t)7;
    for (; i < nv; i += 8) {
        __m256 v = _mm256_loadu_ps(src + i);
        __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(void *)(dst + i), h);
    }
    for (; i < n; i++)
        dst[i] = anec_h_from_f(src[i]);
}

__attribute__((target("f16c,avx")))
static inline void anec__f16_to_f32_f16c(const uint16_t *src, float *dst, size_t n)
{
    const __m128i mag = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(0x7c00);
    size_t i = 0, nv = n & ~(size_t)7;
    for (; i < nv; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
        if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(h, mag), inf))) { /* a NaN: scalar */
            for (size_t j = i; j < i + 8; j++)
                dst[j] = anec_f_from_h(src[j]);
            continue;
        }
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++)
        dst[i] = anec_f_from_h(src[i]);
}

/* CPUID: F16C and AVX present and the OS saves the AVX state (XGETBV). */
static inline int anec__have_f16c(void)
{
    static int have = -1;
    if (have < 0) {
        unsigned a, b, c, d;
        int ok = 0;
        if (__get_cpuid(1, &a, &b, &c, &d) && ((c >> 27) & 1) && ((c >> 28) & 1) && ((c >> 29) & 1)) {
            unsigned lo, hi;
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            ok = (lo & 6u) == 6u;
        }
        have = ok;
    }
    return have;
}
#endif

#ifdef ANEC_HAVE_NEON_PATH
static inline void anec__f32_to_f16_neon(const float *src, uint16_t *dst, size_t n)
{
    const uint32x4_t mag = vdupq_n_u32(0x7fffffffu), inf = vdupq_n_u32(0x7f800000u);
    size_t i = 0, nv = n & ~(size_t)7;
    for (; i < nv; i += 8) {
        float32x4_t lo = vld1q_f32(src + i), hi = vld1q_f32(src + i + 4);
        uint32x4_t nan = vorrq_u32(vcgtq_u32(vandq_u32(vreinterpretq_u32_f32(lo), mag), inf),
                                   vcgtq_u32(vandq_u32(vreinterpretq_u32_f32(hi), mag), inf));
        if (vmaxvq_u32(nan)) { /* a NaN: scalar */
            for (size_t j = i; j < i + 8; j++)
                dst[j] = anec_h_from_f(src[j]);
            continue;
        }
        vst1q_u16(dst + i, vreinterpretq_u16_f16(vcvt_high_f16_f32(vcvt_f16_f32(lo), hi)));
    }
    for (; i < n; i++)
        dst[i] = anec_h_from_f(src[i]);
}

static inline void anec__f16_to_f32_neon(const uint16_t *src, float *dst, size_t n)
{
    const uint16x8_t mag = vdupq_n_u16(0x7fffu), inf = vdupq_n_u16(0x7c00u);
    size_t i = 0, nv = n & ~(size_t)7;
    for (; i < nv; i += 8) {
        uint16x8_t h = vld1q_u16(src + i);
        if (vmaxvq_u16(vcgtq_u16(vandq_u16(h, mag), inf))) { /* a NaN: scalar */
            for (size_t j = i; j < i + 8; j++)
                dst[j] = anec_f_from_h(src[j]);
            continue;
        }
        float16x8_t hf = vreinterpretq_f16_u16(h);
        vst1q_f32(dst + i, vcvt_f32_f16(vget_low_f16(hf)));
        vst1q_f32(dst + i + 4, vcvt_high_f32_f16(hf));
    }
    for (; i < n; i++)
        dst[i] = anec_f_from_h(src[i]);
}
#endif

static inline void anec_cvt_f32_to_f16(const float *src, uint16_t *dst, size_t n)
{
#ifdef ANEC_HAVE_F16C_PATH
    if (anec__have_f16c()) {
        anec__f32_to_f16_f16c(src, dst, n);
        return;
    }
#elif defined(ANEC_HAVE_NEON_PATH)
    anec__f32_to_f16_neon(src, dst, n);
    return;
#endif
    for (size_t i = 0; i < n; i++)
        dst[i] = anec_h_from_f(src[i]);
}

static inline void anec_cvt_f16_to_f32(const uint16_t *src, float *dst, size_t n)
{
#ifdef ANEC_HAVE_F16C_PATH
    if (anec__have_f16c()) {
        anec__f16_to_f32_f16c(src, dst, n);
        return;
    }
#elif defined(ANEC_HAVE_NEON_PATH)
    anec__f16_to_f32_neon(src, dst, n);
    return;
#endif
    for (size_t i = 0; i < n; i++)
        dst[i] = anec_f_from_h(src[i]);
}

/* Round every element of an fp32 buffer to fp16 precision in place. */
static inline void anec_round_f16_inplace(float *x, size_t n)
{
    uint16_t tmp[256];
    for (size_t i = 0; i < n; i += 256) {
        size_t k = n - i < 256 ? n - i : 256;
        anec_cvt_f32_to_f16(x + i, tmp, k);
        anec_cvt_f16_to_f32(tmp, x + i, k);
    }
}

#endif /* ANEC_FP16_H */
