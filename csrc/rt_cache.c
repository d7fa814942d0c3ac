/*
 * rt_cache.c - the program cache's identities and entries: the cache key
 * (sha256(sha256(MIL) || sorted weight paths)), the weight content hash
 * (sha256 over sorted path and sha256(bytes) pairs), lookup, the content of a
 * donor whose weights changed since (read back from its directory), and the
 * observation that a compiled form's data equals its one BLOBFILE (what makes
 * a data patch applicable).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rt_files.h"
#include "rt_internal.h"
#include "rt_sha256.h"

static const anec_blob *sorted_blobs(const anec_blob *blobs, size_t n, const anec_blob **tmp)
{
    for (size_t i = 0; i < n; i++)
        tmp[i] = &blobs[i];
    for (size_t i = 1; i < n; i++) /* insertion sort by path: n is small */
        for (size_t j = i; j > 0 && strcmp(tmp[j - 1]->path, tmp[j]->path) > 0; j--) {
            const anec_blob *t = tmp[j];
            tmp[j] = tmp[j - 1];
            tmp[j - 1] = t;
        }
    return n ? tmp[0] : NULL;
}

void rt_content_hash(const anec_blob *blobs, size_t n, uint8_t out[32])
{
    const anec_blob *stack[64];
    const anec_blob **s = n <= 64 ? stack : malloc(n * sizeof *s);
    rt_sha256_ctx c;
    rt_sha256_init(&c);
    if (s) {
        sorted_blobs(blobs, n, s);
        for (size_t i = 0; i < n; i++) {
            uint8_t h[32];
            rt_sha256(s[i]->data, s[i]->len, h);
            rt_sha256_update(&c, s[i]->path, strlen(s[i]->path) + 1);
            rt_sha256_update(&c, h, 32);
        }
    }
    rt_sha256_final(&c, out);
    if (s != stack)
        free(s);
}

void rt_cache_key(const char *mil, size_t mil_len, const anec_blob *blobs, size_t n, uint8_t key[32])
{
    const anec_blob *stack[64];
    const anec_blob **s = n <= 64 ? stack : malloc(n * sizeof *s);
    uint8_t h[32];
    rt_sha256(mil, mil_len, h);
    rt_sha256_ctx c;
    rt_sha256_init(&c);
    rt_sha256_update(&c, h, 32);
    if (s) {
        sorted_blobs(blobs, n, s);
        for (size_t i = 0; i < n; i++)
            rt_sha256_update(&c, s[i]->path, strlen(s[i]->path) + 1);
    }
    rt_sha256_final(&c, key);
    if (s != stack)
        free(s);
}

cache_entry *rt_cache_find(anec_runtime *rt, const uint8_t key[32])
{
    for (cache_entry *e = rt->cache; e; e = e->next)
        if (memcmp(e->key, key, 32) == 0)
            return e;
    return NULL;
}

int rt_cache_content(anec_runtime *rt, cache_entry *e)
{
    (void)rt;
    if (!e->stale)
        return 0;
    anec_program *d = e->donor;
    int rc = d ? 0 : -1;
    if (d && d->content_known < 0) {
        rc = -1;
    } else if (d && d->content_known == 0) {
        anec_blob *blobs = calloc(d->n_files + 1, sizeof *blobs);
        rc = blobs ? 0 : -1;
        for (size_t k = 0; rc == 0 && k < d->n_files; k++) {
            char why[512];
            uint8_t *buf = NULL;
            blobs[k].path = d->files[k];
            rc = rt_read_beneath(d->dir->path, rt_rel_path(d->files[k]), RT_MAX_FILE_BYTES, &buf, &blobs[k].len, why,
                                 sizeof why);
            blobs[k].data = buf;
        }
        if (rc == 0) {
            rt_content_hash(blobs, d->n_files, d->content);
            d->content_known = 1;
        }
        for (size_t k = 0; blobs && k < d->n_files; k++)
            free((void *)blobs[k].data);
        free(blobs);
    }
    if (rc == 0) {
        memcpy(e->content, d->content, 32);
        e->stale = 0;
    } else {
        e->donor = NULL; /* its identity is unknown: it serves no cache hit */
    }
    return rc;
}

int rt_observe_patchable(anec_runtime *rt, void *dprog, const anec_blob *blobs, size_t n_blobs, size_t n_files)
{
    if (n_files != 1 || n_blobs == 0 || !rt->drv->data_equals)
        return 0;
    char err[256];
    /* the one referenced file: the blob whose path the MIL reads (n_blobs may include unused files) */
    for (size_t i = 0; i < n_blobs; i++) {
        int eq = rt->drv->data_equals(rt->ctx, dprog, blobs[i].data, blobs[i].len, err, sizeof err);
        if (eq == 1)
            return 1;
    }
    return 0;
}
