/*
 * sim_weights.c - the sim's constant weights, one copy per process: a loading
 * program takes each BLOBFILE payload through sim_weight_acquire, which hands
 * back a 64-byte aligned buffer holding those bytes, shared with every other
 * loaded program whose payload is byte for byte the same (the layers a model's
 * prefill and decode programs both read are held once), and counted by
 * reference; sim_weight_release gives one back at unload. Lookups go by a
 * hash of the bytes, and a match is confirmed with memcmp, so two payloads
 * share a buffer only when every byte agrees. An fp16 matrix read only by
 * pointwise convs is held as the narrow kernel's slivers instead of rows
 * (sim_weight_acquire_slivers; its payload compared as given, the layout part
 * of the key). The buffers are read-only: a reload loads new payloads into
 * buffers of their own.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rt_files.h"
#include "sim_kernels.h"
#include "sim_plan.h"

#define BUCKETS 4096u

typedef struct weight {
    struct weight *by_hash;   /* the next entry in its content bucket */
    struct weight *by_ptr;    /* the next entry in its buffer bucket */
    uint64_t hash;
    size_t len;
    int rows;                 /* held as slivers of this many rows (sk_pack_narrow), else 0 */
    size_t refs;
    void *data;
} weight;

static weight *g_hash[BUCKETS], *g_ptr[BUCKETS];
static size_t g_bytes;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* A 64-bit hash of data[0..len): four multiply-rotate lanes over 8-byte words, the tail
   and the length folded in. Only a filter: a match is checked byte for byte. */
static uint64_t content_hash(const uint8_t *data, size_t len)
{
    const uint64_t k = 0x9E3779B97F4A7C15ull;
    uint64_t h[4] = {len, k, ~(uint64_t)len, k ^ len};
    size_t i = 0;
    for (; i + 32 <= len; i += 32)
        for (int l = 0; l < 4; l++) {
            uint64_t w;
            memcpy(&w, data + i + 8 * l, 8);
            h[l] = ((h[l] ^ w) * k);
            h[l] = (h[l] << 29) | (h[l] >> 35);
        }
    uint64_t t = 0;
    for (; i < len; i++)
        t = t * 131 + data[i];
    uint64_t r = (h[0] ^ (h[1] * 3) ^ (h[2] * 5) ^ (h[3] * 7) ^ t) * k;
    return r ^ (r >> 31);
}

static size_t ptr_bucket(const void *p) { return (size_t)(((uintptr_t)p >> 6) % BUCKETS); }

static void *hold(const void *data, size_t len, int rows)
{
    size_t cap, n = len;
    int K = rows ? (int)(len / 2 / (size_t)rows) : 0; /* the matrix's columns, held as slivers */
    if (rows) /* slivers: rows rounded up to whole slivers, zero past them */
        n = sk_packed_narrow_halves(rows, K) * 2;
    void *buf = rt_round_up(n ? n : 1, 64, &cap) ? NULL : aligned_alloc(64, cap);
    if (!buf)
        return NULL;
    if (!rows)
        memcpy(buf, data, len);
    else if (sk_pack_narrow(rows, K, (sk_mat){data, SK_F16, K, 1}, buf) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* Whether entry w holds data[0..len) in layout `rows`, whose payload hash is h. A sliver
   entry is compared through its slivers (the layout of sk_pack_narrow, sim_kernels.h). */
static int same(const weight *w, uint64_t h, const void *data, size_t len, int rows)
{
    if (w->hash != h || w->len != len || w->rows != rows)
        return 0;
    if (!rows)
        return memcmp(w->data, data, len) == 0;
    const size_t K = len / 2 / (size_t)rows, S = SK_SLIVER_ROWS;
    const uint16_t *src = data, *sl = w->data;
    for (size_t r = 0; r < (size_t)rows; r++)
        for (size_t k = 0; k < K; k++)
            if (src[r * K + k] != sl[(r / S) * S * K + k * S + r % S])
                return 0;
    return 1;
}

static void *acquire(const void *data, size_t len, int rows)
{
    uint64_t h = content_hash(data, len) ^ (uint64_t)rows;
    pthread_mutex_lock(&g_lock);
    weight *w = g_hash[h % BUCKETS];
    while (w && !same(w, h, data, len, rows))
        w = w->by_hash;
    if (w) {
        w->refs++;
        pthread_mutex_unlock(&g_lock);
        return w->data;
    }
    w = calloc(1, sizeof *w);
    void *buf = w ? hold(data, len, rows) : NULL;
    if (!w || !buf) {
        pthread_mutex_unlock(&g_lock);
        free(w);
        return NULL;
    }
    *w = (weight){g_hash[h % BUCKETS], g_ptr[ptr_bucket(buf)], h, len, rows, 1, buf};
    g_hash[h % BUCKETS] = g_ptr[ptr_bucket(buf)] = w;
    g_bytes += len;
    pthread_mutex_unlock(&g_lock);
    return buf;
}

void *sim_weight_acquire(const void *data, size_t len) { return acquire(data, len, 0); }

void *sim_weight_acquire_slivers(const void *data, int rows, int cols)
{
    if (rows <= 0 || cols <= 0)
        return NULL;
    size_t len = (size_t)rows * (size_t)cols * 2;
    if ((uintptr_t)data % 2 == 0)
        return acquire(data, len, rows);
    void *aligned = malloc(len); /* a payload at an odd offset of its file: its halves read aligned */
    if (!aligned)
        return NULL;
    memcpy(aligned, data, len);
    void *held = acquire(aligned, len, rows);
    free(aligned);
    return held;
}

/* Unlink w from the list at *head, linked by_hash or by_ptr. */
static void unlink_from(weight **head, weight *w, int by_hash)
{
    while (*head != w)
        head = by_hash ? &(*head)->by_hash : &(*head)->by_ptr;
    *head = by_hash ? w->by_hash : w->by_ptr;
}

int sim_weight_release(void *ptr)
{
    if (!ptr)
        return 1;
    pthread_mutex_lock(&g_lock);
    weight *w = g_ptr[ptr_bucket(ptr)];
    while (w && w->data != ptr)
        w = w->by_ptr;
    int found = w != NULL;
    if (w && --w->refs == 0) {
        unlink_from(&g_hash[w->hash % BUCKETS], w, 1);
        unlink_from(&g_ptr[ptr_bucket(ptr)], w, 0);
        g_bytes -= w->len;
        free(w->data);
        free(w);
    }
    pthread_mutex_unlock(&g_lock);
    return found;
}

size_t sim_weight_bytes(void)
{
    pthread_mutex_lock(&g_lock);
    size_t n = g_bytes;
    pthread_mutex_unlock(&g_lock);
    return n;
}
