/*
 * rt_sha256.h - SHA-256 (FIPS 180-4), used for program cache keys and for
 * recognising identical weight sets. Internal. On Apple platforms it is
 * CommonCrypto's (the platform library, accelerated on Apple silicon);
 * elsewhere the hand-written code of rt_sha256.c (SHA-NI on x86 when the CPU
 * has it).
 */
#ifndef ANEC_RT_SHA256_H
#define ANEC_RT_SHA256_H

#include <stddef.h>
#include <stdint.h>

#ifdef __APPLE__
#include <CommonCrypto/CommonDigest.h>
typedef struct rt_sha256 {
    CC_SHA256_CTX cc;
} rt_sha256_ctx;
#else
typedef struct rt_sha256 {
    uint32_t h[8];
    uint64_t len;          /* bytes hashed so far */
    uint8_t buf[64];
    size_t nbuf;
} rt_sha256_ctx;
#endif

void rt_sha256_init(rt_sha256_ctx *s);
void rt_sha256_update(rt_sha256_ctx *s, const void *data, size_t n);
void rt_sha256_final(rt_sha256_ctx *s, uint8_t out[32]);
/* One-shot helper. */
void rt_sha256(const void *data, size_t n, uint8_t out[32]);
/* 64 lowercase hex digits + NUL. */
void rt_sha256_hex(const uint8_t digest[32], char out[65]);

#endif
