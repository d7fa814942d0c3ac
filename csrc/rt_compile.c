/*
 * rt_compile.c - anec_compile, step by step: check the arguments, describe
 * the program (I/O tables, weight consts, cache key and content), give it a
 * program directory (shared with an identical program, else new), serve it
 * from the cache where its compiled form can be shared (the driver clones it:
 * right for identical weights, and for other weights only where a new model
 * object loading new data is verified, the clone's data patched before its
 * first load), else compile it within the compile budget and offer its
 * compiled form to later cache hits; then its surfaces, and it joins the
 * runtime. The program runs the driver program compiled (or cloned) for it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rt_files.h"
#include "rt_internal.h"

static const anec_blob *find_blob(const anec_blob *blobs, size_t n, const char *path)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(blobs[i].path, path) == 0)
            return &blobs[i];
    return NULL;
}

/* The arguments themselves: a runtime of this process, limits, and weight
   files with a path under weights/, each given once. */
static int check_args(const anec_runtime *rt, const char *mil, size_t mil_len, const anec_blob *blobs,
                      size_t n_blobs, const anec_limits *limits, anec_program **out)
{
    if (!rt)
        return rt_fail(ANEC_EINVAL, "anec_compile: NULL runtime");
    if (rt_forked(rt))
        return rt_forked_error(rt);
    if (!out || (!mil && mil_len) || (!blobs && n_blobs))
        return rt_fail(ANEC_EINVAL, "anec_compile: NULL argument");
    *out = NULL;
    if (!limits)
        return rt_fail(ANEC_EINVAL, "anec_compile: limits are required (the manifest's \"limits\"; "
                       "the runtime has no defaults of its own)");
    for (size_t i = 0; i < n_blobs; i++) {
        if (!blobs[i].path || (!blobs[i].data && blobs[i].len))
            return rt_fail(ANEC_EINVAL, "anec_compile: blob %zu has no path or data", i);
        if (!rt_weight_path(blobs[i].path))
            return rt_fail(ANEC_EINVAL, "weight path \"%s\" must be @model_path/weights/<relative path> without '..'",
                           blobs[i].path);
        for (size_t j = 0; j < i; j++)
            if (strcmp(blobs[i].path, blobs[j].path) == 0)
                return rt_fail(ANEC_EINVAL, "weight file %s is given twice", blobs[i].path);
    }
    return ANEC_OK;
}

/* Free a program that was never published (its tables only). */
static void discard(anec_program *p)
{
    rt_program_free_tables(p);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

/* A new program for this MIL and these weights, not yet in the runtime: its I/O
   and weight tables (every referenced weight file given and matching its
   consts), a copy of the MIL, its cache key and weight content. */
static int new_program(anec_runtime *rt, const char *mil, size_t mil_len, const anec_blob *blobs, size_t n_blobs,
                       const anec_limits *limits, anec_program **out)
{
    anec_program *p = calloc(1, sizeof *p);
    if (!p)
        return rt_fail(ANEC_ENOMEM, "out of memory");
    pthread_mutex_init(&p->lock, NULL);
    p->rt = rt;
    p->refs = 1;
    p->limits = *limits;
    int rc = rt_describe(p, mil, mil_len);
    /* every referenced weight file must be given, and must match its consts */
    for (size_t k = 0; rc == ANEC_OK && k < p->n_refs; k++)
        if (!find_blob(blobs, n_blobs, p->refs_tab[k].path))
            rc = rt_fail(ANEC_EINVAL, "model.mil:%d: const '%s' reads weight file %s, which was not given",
                         p->refs_tab[k].line, p->refs_tab[k].const_name, p->refs_tab[k].path);
    for (size_t i = 0; rc == ANEC_OK && i < n_blobs; i++)
        rc = rt_check_blob(p, &blobs[i], 1, "compile");
    if (rc == ANEC_OK) {
        p->mil = malloc(mil_len ? mil_len : 1);
        if (!p->mil)
            rc = rt_fail(ANEC_ENOMEM, "out of memory");
        else if (mil_len)
            memcpy(p->mil, mil, mil_len);
        p->mil_len = mil_len;
    }
    if (rc != ANEC_OK) {
        discard(p);
        return rc;
    }
    rt_cache_key(mil, mil_len, blobs, n_blobs, p->key);
    rt_content_hash(blobs, n_blobs, p->content);
    p->content_known = 1;
    *out = p;
    return ANEC_OK;
}

/* rt->lock held: p's program directory, a shared one with the same key and
   content, else a new one holding the MIL and the weights. */
static int attach_dir(anec_runtime *rt, anec_program *p, const char *mil, size_t mil_len, const anec_blob *blobs,
                      size_t n_blobs)
{
    rt_dir *dir = rt_dir_find_shared(rt, p->key, p->content);
    if (!dir)
        dir = rt_dir_populate(rt, p->key, p->content, mil, mil_len, blobs, n_blobs);
    if (!dir)
        return ANEC_EIO;
    if (rt_set_dir(p, dir) != ANEC_OK) {
        rt_dir_release(rt, dir);
        return ANEC_ENOMEM;
    }
    return ANEC_OK;
}

/* rt->lock held: serve p from the cache entry e without a compile where its
   compiled form can be shared (sets p->dprog), else leave p->dprog NULL. */
static void reuse_cached(anec_runtime *rt, anec_program *p, cache_entry *e, const anec_blob *blobs, size_t n_blobs)
{
    rt_dir *dir = p->dir;
    char err[RT_ERR_LEN];
    err[0] = 0;
    void *src = NULL;
    if (e && e->donor && !e->donor->closed && rt_cache_content(rt, e) == 0)
        src = e->donor->dprog;
    else if (e && e->tmpl && !e->stale)
        src = e->tmpl;
    int same = e && src && memcmp(e->content, p->content, 32) == 0;
    /* every clone is a new model object: with the same weights it is safe unless this key was also
       compiled with other weights (a framework cache per identifier could hand it those) */
    if (same && e->mixed && !(rt->verified & ANEC_RELOAD_NEW_OBJECT) && !(!e->donor && e->tmpl && e->tmpl_dir == dir))
        same = 0;
    /* other weights: a new model object, never compiled, with the donor's network and its own data (the
       new-object strategy, ANE-NEW-OBJECT-LOAD), only where the machine verified it */
    int patch = e && src && !same && e->patchable && (rt->verified & ANEC_RELOAD_NEW_OBJECT) && p->n_files == 1;
    if (same && !e->donor && e->tmpl && e->tmpl_dir == dir) {
        /* the template computes with these very weights in this directory: take it over */
        p->dprog = e->tmpl;
        e->tmpl = NULL;
        rt_dir_release(rt, e->tmpl_dir);
        e->tmpl_dir = NULL;
        e->donor = p; /* and gives it back when it closes */
        p->patchable = e->patchable;
    } else if (same || patch) {
        int rc = rt->drv->clone(rt->ctx, src, dir->path, &p->dprog, err, sizeof err);
        if (rc == ANEC_OK && patch) {
            /* the clone computes with the donor's weights until its data is patched */
            const anec_blob *b = find_blob(blobs, n_blobs, p->files[0]);
            int eq = rt->drv->data_equals(rt->ctx, p->dprog, b->data, b->len, err, sizeof err);
            if (eq != 1)
                rc = rt->drv->patch_data(rt->ctx, p->dprog, rt_rel_path(b->path), b->data, b->len, 1, err, sizeof err);
        }
        if (rc != ANEC_OK) {
            /* a clone the driver cannot make (or patch) is compiled instead */
            if (p->dprog)
                rt->drv->release(rt->ctx, p->dprog);
            p->dprog = NULL;
        } else {
            p->patchable = e->patchable;
        }
    }
}

/* rt->lock held: compile p on the driver, within the compile budget. */
static int compile_on_driver(anec_runtime *rt, anec_program *p, const char *mil, size_t mil_len,
                             const anec_blob *blobs, size_t n_blobs)
{
    int rc = rt_budget_reserve(rt);
    if (rc != ANEC_OK)
        return rc;
    char err[RT_ERR_LEN];
    err[0] = 0;
    anec_compile_args args = {mil, mil_len, blobs, n_blobs, p->dir->path, p->limits};
    rc = rt->drv->compile(rt->ctx, &args, &p->dprog, err, sizeof err);
    if (rc != ANEC_OK) {
        rt_budget_release(rt);
        return rt_fail(rc, "%s", err);
    }
    p->patchable = rt_observe_patchable(rt, p->dprog, blobs, n_blobs, p->n_files);
    return ANEC_OK;
}

/* rt->lock held: after a compile, the cache entry of p's key (a new one, or
   e marked as compiled with other weights too) offers p's compiled form
   when it has no live donor or kept template. Returns the entry (or NULL). */
static cache_entry *remember_compiled(anec_runtime *rt, anec_program *p, cache_entry *e)
{
    if (!e && (e = calloc(1, sizeof *e))) {
        memcpy(e->key, p->key, 32);
        e->next = rt->cache;
        rt->cache = e;
    } else if (e && (e->stale || memcmp(e->content, p->content, 32) != 0)) {
        e->mixed = 1;
    }
    if (e && !(e->donor && !e->donor->closed) && !e->tmpl) {
        e->donor = p;
        memcpy(e->content, p->content, 32);
        e->stale = 0;
        e->patchable = p->patchable;
    }
    return e;
}

/* rt->lock held: p joins the runtime's open programs. */
static void publish(anec_runtime *rt, anec_program *p)
{
    p->next = rt->progs;
    if (rt->progs)
        rt->progs->prev = p;
    rt->progs = p;
    rt->refs++;
}

/* Count one compile of p (or cache hit) that took since t0. */
static void count_compile(anec_runtime *rt, anec_program *p, int compiled, uint64_t t0)
{
    uint64_t dt = rt_now_ns() - t0;
    struct anec_stats d = {0};
    d.compiles = (uint64_t)compiled;
    d.cache_hits = (uint64_t)!compiled;
    d.ns_compile = dt;
    rt_count(rt, &d);
    pthread_mutex_lock(&rt->st_lock);
    rt->st.programs_live++;
    pthread_mutex_unlock(&rt->st_lock);
    p->st.compiles = (uint64_t)compiled;
    p->st.cache_hits = (uint64_t)!compiled;
    p->st.ns_compile = dt;
}

int anec_compile(anec_runtime *rt, const char *mil, size_t mil_len, const anec_blob *blobs, size_t n_blobs,
                 const anec_limits *limits, anec_program **out)
{
    int rc = check_args(rt, mil, mil_len, blobs, n_blobs, limits, out);
    if (rc != ANEC_OK)
        return rc;
    uint64_t t0 = rt_now_ns();
    anec_program *p = NULL;
    rc = new_program(rt, mil, mil_len, blobs, n_blobs, limits, &p);
    if (rc != ANEC_OK)
        return rc;

    pthread_mutex_lock(&rt->lock);
    if (rt->closed) {
        pthread_mutex_unlock(&rt->lock);
        discard(p);
        return rt_fail(ANEC_ESTATE, "the runtime is closed");
    }
    rc = attach_dir(rt, p, mil, mil_len, blobs, n_blobs);
    if (rc != ANEC_OK) {
        pthread_mutex_unlock(&rt->lock);
        discard(p);
        return rc;
    }
    cache_entry *e = rt_cache_find(rt, p->key);
    reuse_cached(rt, p, e, blobs, n_blobs);
    int compiled = 0;
    if (!p->dprog) {
        rc = compile_on_driver(rt, p, mil, mil_len, blobs, n_blobs);
        compiled = rc == ANEC_OK;
    }
    if (compiled)
        e = remember_compiled(rt, p, e);
    if (rc == ANEC_OK)
        rc = rt_check_outputs(p);
    if (rc == ANEC_OK)
        rc = rt_make_surfaces(p);
    if (rc != ANEC_OK) {
        if (e && e->donor == p)
            e->donor = NULL;
        if (p->dprog)
            rt->drv->release(rt->ctx, p->dprog);
        rt_free_surfaces(p);
        rt_dir_release(rt, p->dir);
        pthread_mutex_unlock(&rt->lock);
        discard(p);
        return rc;
    }
    publish(rt, p);
    pthread_mutex_unlock(&rt->lock);
    count_compile(rt, p, compiled, t0);
    *out = p;
    return ANEC_OK;
}
