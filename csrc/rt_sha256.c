/*
 * rt_sha256.c - SHA-256 (see rt_sha256.h): on Apple platforms through
 * CommonCrypto (CC_SHA256_*, fed in pieces of at most 1 GiB since it takes
 * 32-bit lengths); elsewhere a small portable implementation with an x86
 * SHA-NI path chosen at run time. rt_sha256 and rt_sha256_hex are the same
 * on both.
 */
#include "rt_sha256.h"

#include <string.h>

#ifdef __APPLE__

void rt_sha256_init(rt_sha256_ctx *s) { CC_SHA256_Init(&s->cc); }

void rt_sha256_update(rt_sha256_ctx *s, const void *data, size_t n)
{
    const unsigned char *p = data;
    while (n) {
        CC_LONG take = n > ((size_t)1 << 30) ? (CC_LONG)1 << 30 : (CC_LONG)n;
        CC_SHA256_Update(&s->cc, p, take);
        p += take;
        n -= take;
    }
}

void rt_sha256_final(rt_sha256_ctx *s, uint8_t out[32]) { CC_SHA256_Final(out, &s->cc); }

#else /* the hand-written SHA-256 */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
#define RT_SHA_NI 1
#endif

static const uint32_t K[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
    0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
    0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
    0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
    0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u,
};

static uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void block(uint32_t h[8], const uint8_t *p)
{
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = ((uint32_t)p[4 * i] << 24) | ((uint32_t)p[4 * i + 1] << 16) |
               ((uint32_t)p[4 * i + 2] << 8) | (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t S1 = ror(e, 6) ^ ror(e, 11) ^ ror(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = hh + S1 + ch + K[i] + w[i];
        uint32_t S0 = ror(a, 2) ^ ror(a, 13) ^ ror(a, 22);
        uint32_t mj = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = S0 + mj;
        hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

#ifdef RT_SHA_NI
/* The same compression with the x86 SHA extensions: the state lives as ABEF/CDGH
   (the layout sha256rnds2 wants), four message words per step. */
__attribute__((target("sha,sse4.1,ssse3"))) static void blocks_shani(uint32_t h[8], const uint8_t *p, size_t n)
{
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i t = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[0]), 0xB1);  /* CDAB */
    __m128i s1 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[4]), 0x1B); /* EFGH */
    __m128i s0 = _mm_alignr_epi8(t, s1, 8);                                        /* ABEF */
    s1 = _mm_blend_epi16(s1, t, 0xF0);                                             /* CDGH */
    for (; n; n--, p += 64) {
        __m128i abef = s0, cdgh = s1, w[4];
#pragma GCC unroll 16 /* w[] in registers */
        for (int i = 0; i < 16; i++) {
            __m128i m;
            if (i < 4) {
                m = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)), bswap);
            } else { /* W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16], four at a time */
                m = _mm_sha256msg1_epu32(w[i & 3], w[(i + 1) & 3]);
                m = _mm_add_epi32(m, _mm_alignr_epi8(w[(i + 3) & 3], w[(i + 2) & 3], 4));
                m = _mm_sha256msg2_epu32(m, w[(i + 3) & 3]);
            }
            w[i & 3] = m;
            m = _mm_add_epi32(m, _mm_loadu_si128((const __m128i *)&K[4 * i]));
            s1 = _mm_sha256rnds2_epu32(s1, s0, m);
            s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(m, 0x0E));
        }
        s0 = _mm_add_epi32(s0, abef);
        s1 = _mm_add_epi32(s1, cdgh);
    }
    t = _mm_shuffle_epi32(s0, 0x1B);  /* FEBA */
    s1 = _mm_shuffle_epi32(s1, 0xB1); /* DCHG */
    _mm_storeu_si128((__m128i *)&h[0], _mm_blend_epi16(t, s1, 0xF0)); /* DCBA */
    _mm_storeu_si128((__m128i *)&h[4], _mm_alignr_epi8(s1, t, 8));    /* HGFE */
}

static int have_shani(void)
{
    static atomic_int cached = -1; /* every thread computes the same answer */
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        unsigned a, b, c, d;
        v = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSE4_1) && (c & bit_SSSE3);
        v = v && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_SHA);
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v;
}
#endif

/* n whole 64-byte blocks. */
static void blocks(uint32_t h[8], const uint8_t *p, size_t n)
{
#ifdef RT_SHA_NI
    if (have_shani()) {
        blocks_shani(h, p, n);
        return;
    }
#endif
    for (; n; n--, p += 64)
        block(h, p);
}

void rt_sha256_init(rt_sha256_ctx *s)
{
    static const uint32_t iv[8] = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                                   0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
    memcpy(s->h, iv, sizeof iv);
    s->len = 0;
    s->nbuf = 0;
}

void rt_sha256_update(rt_sha256_ctx *s, const void *data, size_t n)
{
    const uint8_t *p = data;
    s->len += n;
    if (s->nbuf) {
        size_t take = 64 - s->nbuf < n ? 64 - s->nbuf : n;
        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += take; p += take; n -= take;
        if (s->nbuf == 64) { blocks(s->h, s->buf, 1); s->nbuf = 0; }
    }
    blocks(s->h, p, n / 64);
    p += n / 64 * 64;
    n %= 64;
    if (n) { memcpy(s->buf, p, n); s->nbuf = n; }
}

void rt_sha256_final(rt_sha256_ctx *s, uint8_t out[32])
{
    uint64_t bits = s->len * 8u;
    uint8_t pad = 0x80;
    rt_sha256_update(s, &pad, 1);
    uint8_t z = 0;
    while (s->nbuf != 56)
        rt_sha256_update(s, &z, 1);
    uint8_t L[8];
    for (int i = 0; i < 8; i++)
        L[i] = (uint8_t)(bits >> (56 - 8 * i));
    rt_sha256_update(s, L, 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(s->h[i] >> 24); out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(s->h[i] >> 8); out[4 * i + 3] = (uint8_t)s->h[i];
    }
}

#endif /* __APPLE__ */

void rt_sha256(const void *data, size_t n, uint8_t out[32])
{
    rt_sha256_ctx s;
    rt_sha256_init(&s);
    rt_sha256_update(&s, data, n);
    rt_sha256_final(&s, out);
}

void rt_sha256_hex(const uint8_t d[32], char out[65])
{
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) { out[2 * i] = hx[d[i] >> 4]; out[2 * i + 1] = hx[d[i] & 15]; }
    out[64] = 0;
}
