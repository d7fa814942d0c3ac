/*
 * rt_dir.c - program directories <root>/<hexid>[-n]/{model.mil, weights/...}.
 *
 * Laid out like the device's temp directory and reference-counted: programs
 * with the same key (MIL + weight paths) and identical weight bytes share one;
 * a program whose weights differ gets its own; a reload of a shared directory
 * first makes a private copy (hard links; files are only ever replaced by
 * rename, so a link never sees a later patch). On the sim the compiled form
 * (net.plist, data) lives here too. The caller holds rt->lock.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rt_files.h"
#include "rt_internal.h"
#include "rt_sha256.h"
#include "rt_util.h"

static void dir_free(rt_dir *d)
{
    for (size_t i = 0; i < d->n_files; i++)
        free(d->files[i]);
    free(d->files);
    free(d->path);
    free(d);
}

static void count_dirs(anec_runtime *rt, int delta)
{
    pthread_mutex_lock(&rt->st_lock);
    rt->st.dirs_live += (uint64_t)(int64_t)delta;
    pthread_mutex_unlock(&rt->st_lock);
}

void rt_dir_release(anec_runtime *rt, rt_dir *d)
{
    if (!d || --d->refs > 0)
        return;
    for (rt_dir **pp = &rt->dirs; *pp; pp = &(*pp)->next)
        if (*pp == d) {
            *pp = d->next;
            break;
        }
    rt_rm_tree(d->path);
    count_dirs(rt, -1);
    dir_free(d);
}

void rt_dir_free_all(anec_runtime *rt)
{
    while (rt->dirs) {
        rt_dir *d = rt->dirs;
        rt->dirs = d->next;
        rt_rm_tree(d->path);
        dir_free(d);
    }
    pthread_mutex_lock(&rt->st_lock);
    rt->st.dirs_live = 0;
    pthread_mutex_unlock(&rt->st_lock);
}

/* An empty, uniquely named directory <root>/<hex>[-n]. */
static rt_dir *dir_create(anec_runtime *rt, const uint8_t key[32])
{
    char hex[65];
    rt_sha256_hex(key, hex);
    hex[32] = 0;
    rt_dir *d = calloc(1, sizeof *d);
    if (!d) {
        rt_fail(ANEC_ENOMEM, "out of memory");
        return NULL;
    }
    size_t n = strlen(rt->root) + 64;
    d->path = malloc(n);
    if (!d->path) {
        free(d);
        rt_fail(ANEC_ENOMEM, "out of memory");
        return NULL;
    }
    for (unsigned i = 0;; i++) {
        if (i == 0)
            snprintf(d->path, n, "%s/%s", rt->root, hex);
        else
            snprintf(d->path, n, "%s/%s-%u", rt->root, hex, i);
        if (mkdir(d->path, 0755) == 0)
            break;
        if (errno != EEXIST || i > 100000) {
            rt_fail(ANEC_EIO, "cannot create program directory %s: %s", d->path, strerror(errno));
            free(d->path);
            free(d);
            return NULL;
        }
    }
    memcpy(d->key, key, 32);
    d->refs = 1;
    d->next = rt->dirs;
    rt->dirs = d;
    count_dirs(rt, +1);
    return d;
}

static int dir_add_file(rt_dir *d, const char *rel)
{
    char **nf = realloc(d->files, (d->n_files + 1) * sizeof *nf);
    if (!nf)
        return -1;
    d->files = nf;
    d->files[d->n_files] = rt_strdup(rel);
    if (!d->files[d->n_files])
        return -1;
    d->n_files++;
    return 0;
}

rt_dir *rt_dir_find_shared(anec_runtime *rt, const uint8_t key[32], const uint8_t content[32])
{
    for (rt_dir *d = rt->dirs; d; d = d->next)
        if (d->shareable && memcmp(d->key, key, 32) == 0 && memcmp(d->content, content, 32) == 0) {
            d->refs++;
            return d;
        }
    return NULL;
}

rt_dir *rt_dir_populate(anec_runtime *rt, const uint8_t key[32], const uint8_t content[32], const char *mil,
                        size_t mil_len, const anec_blob *blobs, size_t n_blobs)
{
    rt_dir *d = dir_create(rt, key);
    if (!d)
        return NULL;
    char why[1024];
    char *p = rt_join(d->path, "model.mil");
    int ok = p && rt_write_atomic(p, mil, mil_len, why, sizeof why) == 0 && dir_add_file(d, "model.mil") == 0;
    free(p);
    for (size_t i = 0; ok && i < n_blobs; i++) {
        const char *rel = rt_rel_path(blobs[i].path);
        if (!rel || rt_make_parents(d->path, rel)) {
            snprintf(why, sizeof why, "cannot create the directories of %s: %s", blobs[i].path, strerror(errno));
            ok = 0;
            break;
        }
        p = rt_join(d->path, rel);
        ok = p && rt_write_atomic(p, blobs[i].data, blobs[i].len, why, sizeof why) == 0 && dir_add_file(d, rel) == 0;
        free(p);
    }
    if (!ok) {
        rt_fail(ANEC_EIO, "cannot write program directory %s: %s", d->path, why);
        rt_dir_release(rt, d);
        return NULL;
    }
    if (content)
        memcpy(d->content, content, 32);
    d->shareable = content != NULL;
    return d;
}

rt_dir *rt_dir_copy(anec_runtime *rt, rt_dir *src)
{
    rt_dir *d = dir_create(rt, src->key);
    if (!d)
        return NULL;
    static const char *const compiled[] = {"net.plist", "data"};
    for (size_t i = 0; i < src->n_files + 2; i++) {
        const char *rel = i < src->n_files ? src->files[i] : compiled[i - src->n_files];
        char *from = rt_join(src->path, rel), *to = rt_join(d->path, rel);
        char why[512] = "out of memory";
        struct stat sb;
        int ok = from && to;
        if (ok && i >= src->n_files && lstat(from, &sb) != 0) {
            /* no compiled form in this directory (the ane keeps it elsewhere) */
            free(from);
            free(to);
            continue;
        }
        ok = ok && rt_make_parents(d->path, rel) == 0 && rt_link_or_copy(from, to, why, sizeof why) == 0;
        ok = ok && (i >= src->n_files || dir_add_file(d, rel) == 0);
        free(from);
        free(to);
        if (!ok) {
            rt_fail(ANEC_EIO, "cannot copy program directory %s to %s: %s", src->path, d->path, why);
            rt_dir_release(rt, d);
            return NULL;
        }
    }
    memcpy(d->content, src->content, 32);
    d->shareable = 0;
    return d;
}
