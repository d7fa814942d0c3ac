/*
 * rt_program.c - an open program's life after compile: load and unload
 * (counted), rt_enter (the lock every call takes, refusing closed programs and
 * forked processes), close (its compiled form kept in the cache for later
 * hits when it still computes with the cached weights) and free, and the
 * introspection of its I/O tables, surfaces and directory.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"
#include "rt_util.h"

/* ---- load / unload / close / free ------------------------------------------------------------- */

int rt_load_locked(anec_program *p)
{
    anec_runtime *rt = p->rt;
    if (p->loaded)
        return ANEC_OK;
    uint64_t t0 = rt_now_ns();
    char err[RT_ERR_LEN];
    err[0] = 0;
    int rc = rt->drv->load(rt->ctx, p->dprog, err, sizeof err);
    if (rc != ANEC_OK)
        return rt_fail(rc, "%s", err);
    p->loaded = 1;
    rt_count_load(p, t0);
    return ANEC_OK;
}

int rt_unload_locked(anec_program *p)
{
    anec_runtime *rt = p->rt;
    if (!p->loaded)
        return ANEC_OK;
    uint64_t t0 = rt_now_ns();
    char err[RT_ERR_LEN];
    err[0] = 0;
    int rc = rt->drv->unload(rt->ctx, p->dprog, err, sizeof err);
    p->loaded = 0;
    if (rc != ANEC_OK)
        return rt_fail(rc, "%s", err);
    struct anec_stats d = {0};
    d.unloads = 1;
    d.ns_unload = rt_now_ns() - t0;
    rt_count(rt, &d);
    p->st.unloads++;
    p->st.ns_unload += d.ns_unload;
    return ANEC_OK;
}

/* Lock p for a call; ANEC_OK with the lock held, else an error (unlocked). */
int rt_enter(anec_program *p)
{
    if (!p)
        return rt_fail(ANEC_EINVAL, "NULL program");
    if (rt_forked(p->rt))
        return rt_forked_error(p->rt);
    pthread_mutex_lock(&p->lock);
    if (p->closed) {
        pthread_mutex_unlock(&p->lock);
        return rt_fail(ANEC_ESTATE, "the program is closed%s", p->rt->closed ? " (its runtime was closed)" : "");
    }
    return ANEC_OK;
}

int anec_load(anec_program *p)
{
    int rc = rt_enter(p);
    if (rc != ANEC_OK)
        return rc;
    rc = rt_load_locked(p);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

int anec_unload(anec_program *p)
{
    int rc = rt_enter(p);
    if (rc != ANEC_OK)
        return rc;
    rc = rt_unload_locked(p);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

void anec_program_close(anec_program *p)
{
    if (!p || rt_forked(p->rt))
        return;
    anec_runtime *rt = p->rt;
    pthread_mutex_lock(&p->lock);
    if (p->closed) {
        pthread_mutex_unlock(&p->lock);
        return;
    }
    rt_unload_locked(p);
    pthread_mutex_lock(&rt->lock);
    cache_entry *e = rt_cache_find(rt, p->key);
    int handed = 0;
    if (e && e->donor == p) {
        int known = rt_cache_content(rt, e) == 0; /* before it loses its donor */
        e->donor = NULL;
        if (!e->tmpl && known && memcmp(e->content, p->content, 32) == 0) {
            /* keep the compiled form for later cache hits */
            e->tmpl = p->dprog;
            e->tmpl_dir = p->dir;
            p->dir->refs++;
            handed = 1;
        }
    }
    if (!handed)
        rt->drv->release(rt->ctx, p->dprog);
    p->dprog = NULL;
    rt_free_surfaces(p);
    rt_dir_release(rt, p->dir);
    p->dir = NULL;
    if (p->prev)
        p->prev->next = p->next;
    else if (rt->progs == p)
        rt->progs = p->next;
    if (p->next)
        p->next->prev = p->prev;
    p->next = p->prev = NULL;
    p->closed = 1;
    pthread_mutex_unlock(&rt->lock);
    pthread_mutex_lock(&rt->st_lock);
    rt->st.programs_live--;
    pthread_mutex_unlock(&rt->st_lock);
    pthread_mutex_unlock(&p->lock);
}

void anec_program_free(anec_program *p)
{
    if (!p)
        return;
    anec_runtime *rt = p->rt;
    if (rt_forked(rt))
        return; /* after fork(): released by the parent, never here */
    anec_program_close(p);
    pthread_mutex_lock(&rt->lock);
    int last = rt_program_unref_locked(p);
    pthread_mutex_unlock(&rt->lock);
    if (last)
        rt_runtime_destroy(rt);
}

/* ---- introspection ---------------------------------------------------------------------------- */

size_t anec_program_num_inputs(const anec_program *p) { return p ? p->n_in : 0; }
size_t anec_program_num_outputs(const anec_program *p) { return p ? p->n_out : 0; }

/* A reload may move p to another directory while another thread reads the
   path, so anec_program_dir returns strings that p keeps until it is freed
   (one per distinct path, reused when a path comes back). */
int rt_set_dir(anec_program *p, rt_dir *d)
{
    for (size_t i = 0; i < p->n_dir_paths; i++)
        if (strcmp(p->dir_paths[i], d->path) == 0) {
            p->dir = d;
            p->dir_path = p->dir_paths[i];
            return ANEC_OK;
        }
    char **np = realloc(p->dir_paths, (p->n_dir_paths + 1) * sizeof *np);
    if (!np)
        return rt_fail(ANEC_ENOMEM, "out of memory");
    p->dir_paths = np;
    if (!(np[p->n_dir_paths] = rt_strdup(d->path)))
        return rt_fail(ANEC_ENOMEM, "out of memory");
    p->dir = d;
    p->dir_path = np[p->n_dir_paths++];
    return ANEC_OK;
}

const char *anec_program_dir(const anec_program *p)
{
    if (!p || rt_forked(p->rt))
        return "";
    pthread_mutex_lock(&p->rt->lock);
    const char *path = p->dir ? p->dir_path : "";
    pthread_mutex_unlock(&p->rt->lock);
    return path;
}

size_t anec_program_input_surface_bytes(const anec_program *p) { return p ? p->in_bytes : 0; }
size_t anec_program_output_surface_bytes(const anec_program *p) { return p ? p->out_bytes : 0; }

static int info(const io_desc *d, size_t i, anec_tensor_info *out)
{
    out->name = d->name;
    out->dtype = d->dtype;
    out->rank = d->rank;
    memcpy(out->shape, d->shape, sizeof out->shape);
    out->bytes = d->bytes;
    out->binding = i;
    out->decl_index = d->decl;
    return ANEC_OK;
}

int anec_program_input(const anec_program *p, size_t i, anec_tensor_info *out)
{
    if (!p || !out || i >= p->n_in)
        return rt_fail(ANEC_EINVAL, "no input %zu", i);
    return info(&p->in[i], i, out);
}

int anec_program_output(const anec_program *p, size_t i, anec_tensor_info *out)
{
    if (!p || !out || i >= p->n_out)
        return rt_fail(ANEC_EINVAL, "no output %zu", i);
    return info(&p->out[i], i, out);
}

uint8_t *anec_program_input_surface(anec_program *p, size_t i)
{
    if (!p || p->closed || !p->in_s || i >= p->n_in || (!p->exposed && rt_expose(p) != ANEC_OK))
        return NULL;
    return p->in_s[i].base;
}

uint8_t *anec_program_output_surface(anec_program *p, size_t i)
{
    if (!p || p->closed || !p->out_s || i >= p->n_out || (!p->exposed && rt_expose(p) != ANEC_OK))
        return NULL;
    return p->out_s[i].base;
}

