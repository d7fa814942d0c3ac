/*
 * rt_runtime.c - runtimes and the life of program structs: anec_runtime_open
 * (the driver from the driver table, its program directory root, the driver
 * options every runtime sets, the reload strategies verified for it),
 * shutdown and close (every open program closed, the cache's kept compiled
 * forms released, the directories removed), the references that keep a
 * program struct and its runtime alive, and fork detection.
 */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700
#define _DEFAULT_SOURCE
#define _DARWIN_C_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt_files.h"
#include "rt_internal.h"
#include "rt_util.h"

/* A runtime used in a process other than the one that opened it (fork). */
int rt_forked(const anec_runtime *rt) { return rt->pid != getpid(); }

int rt_forked_error(const anec_runtime *rt)
{
    return rt_fail(ANEC_ESTATE, "this runtime was opened by process %ld and cannot be used after fork() "
                   "(the device state belongs to the parent); open a new runtime in this process",
                   (long)rt->pid);
}

unsigned anec_reload_verified(const anec_runtime *rt) { return rt ? rt->verified : 0; }

static int set_opt(anec_runtime *rt, const char *key, const char *value)
{
    char err[512] = "";
    int rc = rt->drv->set_option(rt->ctx, key, value, err, sizeof err);
    if (rc != ANEC_OK)
        rt_fail(rc, "%s", err);
    return rc;
}

/* The driver a runtime opens: "auto" (NULL) takes the first available one. */
static int choose_driver(const char *driver, const anec_driver **out)
{
    if (!driver || strcmp(driver, "auto") == 0) {
        *out = rt_driver_auto();
        return ANEC_OK;
    }
    int code;
    char why[256];
    const anec_driver *d = rt_driver_find(driver, &code, why, sizeof why);
    if (!d)
        return rt_fail(code, "%s", why);
    if (d->available(why, sizeof why) != ANEC_OK)
        return rt_fail(ANEC_EUNAVAIL, "%s", why);
    *out = d;
    return ANEC_OK;
}

/* rt->root: opts->temp_root (created with its parents), else a new directory under $TMPDIR. */
static int make_root(anec_runtime *rt, const anec_options *opts)
{
    if (opts && opts->temp_root) {
        rt->root = rt_strdup(opts->temp_root);
        /* mkdir -p */
        for (char *c = rt->root ? rt->root + 1 : NULL; c && *c; c++)
            if (*c == '/') {
                *c = 0;
                mkdir(rt->root, 0755);
                *c = '/';
            }
        if (!rt->root || (mkdir(rt->root, 0755) && errno != EEXIST))
            return rt_fail(ANEC_EIO, "cannot create the program directory root %s: %s", opts->temp_root,
                           strerror(errno));
        return ANEC_OK;
    }
    const char *t = getenv("TMPDIR");
    if (!t || !*t)
        t = "/tmp";
    size_t n = strlen(t) + 32;
    rt->root = malloc(n);
    if (!rt->root)
        return rt_fail(ANEC_ENOMEM, "out of memory");
    snprintf(rt->root, n, "%s/anec-rt-XXXXXX", t);
    if (!mkdtemp(rt->root))
        return rt_fail(ANEC_EIO, "cannot create a program directory root under %s: %s", t, strerror(errno));
    rt->own_root = 1;
    return ANEC_OK;
}

/* The driver options every runtime sets right after the driver opened. */
static int set_driver_options(anec_runtime *rt, const anec_options *opts)
{
    const char *env = getenv("ANEC_SIM_THREADS");
    int threads = opts && opts->sim_threads > 0 ? opts->sim_threads : (env && atoi(env) > 0 ? atoi(env) : 2);
    char buf[32];
    snprintf(buf, sizeof buf, "%d", threads);
    int rc = set_opt(rt, "threads", buf);
    /* the device model (sim_device): as given, else $ANEC_SIM_DEVICE for the driver that takes it */
    const char *dev = opts && opts->sim_device ? opts->sim_device : getenv("ANEC_SIM_DEVICE");
    if (rc == ANEC_OK && dev && *dev && (rt_driver_env_device(rt->drv) || (opts && opts->sim_device)))
        rc = set_opt(rt, "device", dev);
    /* the device's compiles per process: one value for the process, the smallest given */
    if (rc == ANEC_OK && opts && opts->process_budget < 0)
        rc = rt_fail(ANEC_EINVAL, "process_budget must be >= 0, got %d", opts->process_budget);
    if (rc == ANEC_OK && opts && opts->process_budget > 0) {
        snprintf(buf, sizeof buf, "%d", rt_budget_set_process(rt->drv, opts->process_budget));
        rc = set_opt(rt, "compile_budget", buf);
    }
    return rc;
}

/* The reload strategies verified for this runtime: the caller's claim, else the driver's own. */
static unsigned verified_strategies(const anec_runtime *rt, const anec_options *opts)
{
    unsigned v = rt->drv->self_verified(rt->ctx) | ANEC_RELOAD_RECOMPILE;
    if (opts && (opts->reload_verified & ANEC_RELOAD_VERIFIED))
        v = (opts->reload_verified & (ANEC_RELOAD_DATA_PATCH | ANEC_RELOAD_NEW_OBJECT | ANEC_RELOAD_INPUTS)) |
            ANEC_RELOAD_RECOMPILE;
    return v | ANEC_RELOAD_INPUTS; /* writing inputs needs no device claim */
}

int anec_runtime_open(const char *driver, const anec_options *opts, anec_runtime **out)
{
    if (!out)
        return rt_fail(ANEC_EINVAL, "anec_runtime_open: NULL out");
    *out = NULL;
    const anec_driver *d = NULL;
    int rc = choose_driver(driver, &d);
    if (rc != ANEC_OK)
        return rc;
    anec_runtime *rt = calloc(1, sizeof *rt);
    if (!rt)
        return rt_fail(ANEC_ENOMEM, "out of memory");
    pthread_mutex_init(&rt->lock, NULL);
    pthread_mutex_init(&rt->st_lock, NULL);
    rt->refs = 1;
    rt->pid = getpid();
    rt->drv = d;
    rt->cap = opts && opts->compile_budget > 0 ? opts->compile_budget : 0;
    rc = make_root(rt, opts);
    char err[1024] = "";
    if (rc == ANEC_OK) {
        rc = d->open(&rt->ctx, err, sizeof err);
        if (rc != ANEC_OK)
            rt_fail(rc, "%s", err);
    }
    int opened = rc == ANEC_OK;
    if (rc == ANEC_OK)
        rc = set_driver_options(rt, opts);
    if (rc == ANEC_OK)
        rt->verified = verified_strategies(rt, opts);
    if (rc != ANEC_OK) {
        if (opened)
            d->close(rt->ctx);
        if (rt->own_root)
            rt_rm_tree(rt->root);
        free(rt->root);
        pthread_mutex_destroy(&rt->lock);
        pthread_mutex_destroy(&rt->st_lock);
        free(rt);
        return rc;
    }
    *out = rt;
    return ANEC_OK;
}

void rt_runtime_destroy(anec_runtime *rt)
{
    pthread_mutex_destroy(&rt->lock);
    pthread_mutex_destroy(&rt->st_lock);
    free(rt->root);
    free(rt);
}

void rt_program_free_tables(anec_program *p)
{
    for (size_t i = 0; p->in && i < p->n_in; i++)
        free(p->in[i].name);
    for (size_t i = 0; p->out && i < p->n_out; i++)
        free(p->out[i].name);
    for (size_t i = 0; p->refs_tab && i < p->n_refs; i++) {
        free(p->refs_tab[i].path);
        free(p->refs_tab[i].const_name);
    }
    for (size_t i = 0; p->files && i < p->n_files; i++)
        free(p->files[i]);
    for (size_t i = 0; i < p->n_dir_paths; i++)
        free(p->dir_paths[i]);
    free(p->dir_paths);
    free(p->in);
    free(p->out);
    free(p->refs_tab);
    free(p->files);
    free(p->mil);
}

/* Drop a reference on a program struct (rt->lock held); 1 if the runtime's
   last reference went with it (the caller destroys the runtime after
   unlocking). */
int rt_program_unref_locked(anec_program *p)
{
    anec_runtime *rt = p->rt;
    if (--p->refs > 0)
        return 0;
    rt_program_free_tables(p);
    pthread_mutex_destroy(&p->lock);
    free(p);
    return --rt->refs == 0;
}

void rt_program_pin(anec_program *p)
{
    pthread_mutex_lock(&p->rt->lock);
    p->refs++;
    pthread_mutex_unlock(&p->rt->lock);
}

void rt_program_unpin(anec_program *p)
{
    anec_runtime *rt = p->rt;
    pthread_mutex_lock(&rt->lock);
    int last = rt_program_unref_locked(p);
    pthread_mutex_unlock(&rt->lock);
    if (last)
        rt_runtime_destroy(rt);
}

void anec_runtime_shutdown(anec_runtime *rt)
{
    if (!rt || rt_forked(rt))
        return;
    pthread_mutex_lock(&rt->lock);
    if (rt->closed) {
        pthread_mutex_unlock(&rt->lock);
        return;
    }
    rt->closed = 1;
    size_t n = 0;
    for (anec_program *p = rt->progs; p; p = p->next)
        n++;
    anec_program **pinned = calloc(n + 1, sizeof *pinned);
    size_t k = 0;
    for (anec_program *p = rt->progs; p && pinned; p = p->next) {
        p->refs++;
        pinned[k++] = p;
    }
    pthread_mutex_unlock(&rt->lock);
    if (!pinned) {
        /* out of memory: close them one at a time from the list */
        for (;;) {
            pthread_mutex_lock(&rt->lock);
            anec_program *p = rt->progs;
            if (p)
                p->refs++;
            pthread_mutex_unlock(&rt->lock);
            if (!p)
                break;
            anec_program_close(p);
            pthread_mutex_lock(&rt->lock);
            rt_program_unref_locked(p);
            pthread_mutex_unlock(&rt->lock);
        }
    }
    for (size_t i = 0; i < k; i++) {
        anec_program_close(pinned[i]);
        pthread_mutex_lock(&rt->lock);
        rt_program_unref_locked(pinned[i]); /* the caller's handle keeps rt alive */
        pthread_mutex_unlock(&rt->lock);
    }
    free(pinned);
    pthread_mutex_lock(&rt->lock);
    while (rt->cache) {
        cache_entry *e = rt->cache;
        rt->cache = e->next;
        if (e->tmpl)
            rt->drv->release(rt->ctx, e->tmpl);
        rt_dir_release(rt, e->tmpl_dir);
        free(e);
    }
    rt_dir_free_all(rt);
    rt->drv->close(rt->ctx);
    rt->ctx = NULL;
    if (rt->own_root)
        rt_rm_tree(rt->root);
    pthread_mutex_unlock(&rt->lock);
}

void anec_runtime_close(anec_runtime *rt)
{
    if (!rt || rt_forked(rt))
        return; /* after fork(): the parent owns the device state and the directories */
    anec_runtime_shutdown(rt);
    pthread_mutex_lock(&rt->lock);
    int last = --rt->refs == 0;
    pthread_mutex_unlock(&rt->lock);
    if (last)
        rt_runtime_destroy(rt);
}

const char *anec_driver_name(const anec_runtime *rt) { return rt ? rt->drv->name : ""; }
