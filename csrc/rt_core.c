/*
 * rt_core.c - the driver-independent runtime core (public API in anec_rt.h).
 *
 * The core owns every decision that must not differ between the sim and the
 * device, and hands drivers only device calls (anec_driver.h):
 *
 *  - program cache: key = sha256(sha256(MIL) || sorted weight paths). A hit
 *    costs no compile when the compiled form can be shared: the driver
 *    clones it (net.plist + data, so the clone computes with the donor's
 *    weights), which is right for identical weights, and for other weights
 *    only where a new model object loading new data is verified (the clone
 *    is one: its data is patched before its first load, the new-object
 *    strategy of rt_reload.c); otherwise the program is compiled. The
 *    program runs the driver program that was compiled (or cloned) for it;
 *    when it closes, its compiled form stays in the cache for later hits.
 *  - program directories (rt_dir.c) and reload strategies (rt_reload.c).
 *  - compile budget (ANE-COMPILE-BUDGET): counted per process and driver, as
 *    on the device, plus an optional cap per runtime.
 *  - I/O binding tables in alphabetical order of MIL names (from a light
 *    parse of the func signature and return tuple) and core-owned surfaces
 *    of uniform size per direction (>= min_surface_bytes).
 *  - locking, reference counts and fork detection (see rt_internal.h).
 */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700
#define _DEFAULT_SOURCE
#define _DARWIN_C_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "blobfile.h"
#include "fp16.h"
#include "rt_files.h"
#include "rt_internal.h"
#include "rt_sha256.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include "rt_util.h"
#include "sim_mil.h"

/* The device's compiles per process (the target's; 0: not known yet), per driver. */
static int g_budget[2];

/* ---- errors ------------------------------------------------------------------------ */

static _Thread_local char tl_err[RT_ERR_LEN];

int rt_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_err, sizeof tl_err, fmt, ap);
    va_end(ap);
    return code;
}

const char *anec_last_error(const anec_runtime *rt)
{
    (void)rt;
    return tl_err;
}

uint64_t rt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

const char *anec_strerror(int code)
{
    switch (code) {
    case ANEC_OK: return "ok";
    case ANEC_EINVAL: return "invalid argument";
    case ANEC_ENOMEM: return "out of memory";
    case ANEC_EIO: return "file system error";
    case ANEC_EPARSE: return "MIL parse error";
    case ANEC_ECOMPILE: return "MIL rejected by the compiler";
    case ANEC_EBUDGET: return "compile budget exhausted";
    case ANEC_ELOAD: return "load failed";
    case ANEC_EEVAL: return "evaluation failed";
    case ANEC_EWEIGHTS: return "weights rejected";
    case ANEC_ESTATE: return "invalid program state";
    case ANEC_EUNAVAIL: return "driver not available";
    case ANEC_EDRIVER: return "driver error";
    default: return "unknown error";
    }
}

const char *anec_reload_strategy_name(int strategy)
{
    switch (strategy) {
    case ANEC_RELOAD_DATA_PATCH: return "data-patch";
    case ANEC_RELOAD_RECOMPILE: return "recompile";
    case ANEC_RELOAD_INPUTS: return "inputs";
    case ANEC_RELOAD_NEW_OBJECT: return "new-object";
    default: return "auto";
    }
}

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

/* A runtime used in a process other than the one that opened it (fork). */
static int forked(const anec_runtime *rt) { return rt->pid != getpid(); }

static int forked_error(const anec_runtime *rt)
{
    return rt_fail(ANEC_ESTATE, "this runtime was opened by process %ld and cannot be used after fork() "
                   "(the device state belongs to the parent); open a new runtime in this process",
                   (long)rt->pid);
}

/* ---- process-wide compile budget ------------------------------------------------------ */

static pthread_mutex_t g_proc = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_compiles[2]; /* [0] sim, [1] ane */

static int driver_index(const char *name) { return strcmp(name, "sim") == 0 ? 0 : 1; }

uint64_t anec_process_compiles(const char *driver)
{
    if (!driver)
        return 0;
    pthread_mutex_lock(&g_proc);
    uint64_t n = g_compiles[driver_index(driver)];
    pthread_mutex_unlock(&g_proc);
    return n;
}

void anec_sim_reset_process(void);

int anec_process_reset_budget(const char *driver)
{
#ifdef ANEC_ANE_TESTING
    /* the protocol tests' ane is a fake: its count may be reset too */
    if (driver && strcmp(driver, "ane") == 0) {
        pthread_mutex_lock(&g_proc);
        g_compiles[1] = 0;
        pthread_mutex_unlock(&g_proc);
        return ANEC_OK;
    }
#endif
    if (!driver || strcmp(driver, "sim") != 0)
        return rt_fail(ANEC_EINVAL, "only the sim's compile count can be reset (the device counts per process)");
    pthread_mutex_lock(&g_proc);
    g_compiles[0] = 0;
    pthread_mutex_unlock(&g_proc);
    anec_sim_reset_process();
    return ANEC_OK;
}

/* The caller holds rt->lock, so this runtime's compiles are serialized and
   rt->st.compiles is exact for its cap. */
int rt_budget_reserve(anec_runtime *rt)
{
    int di = driver_index(rt->drv->name);
    pthread_mutex_lock(&g_proc);
    uint64_t proc = g_compiles[di];
    pthread_mutex_lock(&rt->st_lock);
    uint64_t mine = rt->st.compiles;
    pthread_mutex_unlock(&rt->st_lock);
    int rc = ANEC_OK;
    int budget = g_budget[di];
    if (budget > 0 && proc >= (uint64_t)budget)
        rc = rt_fail(ANEC_EBUDGET, "[ANE-COMPILE-BUDGET] this process already made %llu "
                     "compiles on the %s driver (the ANE fails after about %d compiles per process). Programs with "
                     "the same MIL, weight paths and weights are served from the cache without a compile; change "
                     "weights with a delta reload (data patch, or weights compiled as program inputs) instead of "
                     "compiling again", (unsigned long long)proc, rt->drv->name, budget);
    else if (rt->cap > 0 && mine >= (uint64_t)rt->cap)
        rc = rt_fail(ANEC_EBUDGET, "[ANE-COMPILE-BUDGET] %llu of %d compiles allowed for "
                     "this runtime are used. Programs with the same MIL, weight paths and weights are served from the cache "
                     "without a compile; change weights with a delta reload instead of compiling again",
                     (unsigned long long)mine, rt->cap);
    else
        g_compiles[di]++;
    pthread_mutex_unlock(&g_proc);
    return rc;
}

void rt_budget_release(anec_runtime *rt)
{
    int di = driver_index(rt->drv->name);
    pthread_mutex_lock(&g_proc);
    if (g_compiles[di])
        g_compiles[di]--;
    pthread_mutex_unlock(&g_proc);
}

/* ---- counters -------------------------------------------------------------------------- */

void rt_count(anec_runtime *rt, const struct anec_stats *d)
{
    pthread_mutex_lock(&rt->st_lock);
    struct anec_stats *s = &rt->st;
    s->compiles += d->compiles;
    s->cache_hits += d->cache_hits;
    s->loads += d->loads;
    s->unloads += d->unloads;
    s->reloads += d->reloads;
    s->evaluations += d->evaluations;
    s->blobs_patched += d->blobs_patched;
    s->ns_compile += d->ns_compile;
    s->ns_load += d->ns_load;
    s->ns_unload += d->ns_unload;
    s->ns_reload += d->ns_reload;
    s->ns_evaluate += d->ns_evaluate;
    s->reloads_data_patch += d->reloads_data_patch;
    s->reloads_recompile += d->reloads_recompile;
    s->reloads_inputs += d->reloads_inputs;
    s->reloads_new_object += d->reloads_new_object;
    pthread_mutex_unlock(&rt->st_lock);
}

/* Count one load of p that took since t0, in the runtime's and the program's stats. */
void rt_count_load(anec_program *p, uint64_t t0)
{
    struct anec_stats d = {0};
    d.loads = 1;
    d.ns_load = rt_now_ns() - t0;
    rt_count(p->rt, &d);
    p->st.loads++;
    p->st.ns_load += d.ns_load;
}

/* Count one reload of p by input-surface writes that took since t0. */
static void count_inputs_reload(anec_program *p, uint64_t t0)
{
    struct anec_stats d = {0};
    d.reloads = 1;
    d.reloads_inputs = 1;
    d.ns_reload = rt_now_ns() - t0;
    rt_count(p->rt, &d);
    p->st.reloads++;
    p->st.reloads_inputs++;
    p->st.ns_reload += d.ns_reload;
}

static void budget_view(const anec_runtime *rt, struct anec_stats *out, uint64_t mine)
{
    uint64_t proc = anec_process_compiles(rt->drv->name);
    pthread_mutex_lock(&g_proc);
    int64_t budget = g_budget[driver_index(rt->drv->name)];
    pthread_mutex_unlock(&g_proc);
    if (budget <= 0)
        budget = INT64_MAX; /* unknown: only the runtime cap (if any) */
    int64_t left = budget - (int64_t)proc;
    if (rt->cap > 0) {
        int64_t cl = (int64_t)rt->cap - (int64_t)mine;
        left = cl < left ? cl : left;
        budget = rt->cap < budget ? rt->cap : budget;
    }
    out->compile_budget = budget;
    out->compile_budget_left = left < 0 ? 0 : left;
    out->process_compiles = proc;
}

int anec_stats(const anec_runtime *rt, struct anec_stats *out)
{
    if (!rt || !out)
        return ANEC_EINVAL;
    if (forked(rt))
        return forked_error(rt);
    pthread_mutex_lock((pthread_mutex_t *)&rt->st_lock);
    *out = rt->st;
    pthread_mutex_unlock((pthread_mutex_t *)&rt->st_lock);
    budget_view(rt, out, out->compiles);
    return ANEC_OK;
}

unsigned anec_reload_verified(const anec_runtime *rt) { return rt ? rt->verified : 0; }

/* ---- drivers and runtimes ----------------------------------------------------------- */

static const anec_driver *find_driver(const char *name)
{
    if (strcmp(name, "sim") == 0)
        return &anec_driver_sim;
#ifndef ANEC_NO_ANE_DRIVER
    if (strcmp(name, "ane") == 0)
        return &anec_driver_ane;
#endif
    return NULL;
}

int anec_driver_available(const char *name, char *why, size_t whylen)
{
    if (!name) {
        if (why && whylen)
            snprintf(why, whylen, "no driver name");
        return 0;
    }
    if (strcmp(name, "auto") == 0)
        return 1;
    const anec_driver *d = find_driver(name);
    if (!d) {
        if (why && whylen) {
            if (strcmp(name, "ane") == 0)
                snprintf(why, whylen, "this build has no ane driver");
            else
                snprintf(why, whylen, "unknown driver '%s' (sim, ane, auto)", name);
        }
        return 0;
    }
    char tmp[512];
    tmp[0] = 0;
    int ok = d->available(tmp, sizeof tmp) == ANEC_OK;
    if (why && whylen)
        snprintf(why, whylen, "%s", tmp);
    return ok ? 1 : 0;
}

static int set_opt(anec_runtime *rt, const char *key, const char *value)
{
    char err[512] = "";
    int rc = rt->drv->set_option(rt->ctx, key, value, err, sizeof err);
    if (rc != ANEC_OK)
        rt_fail(rc, "%s", err);
    return rc;
}

int anec_runtime_open(const char *driver, const anec_options *opts, anec_runtime **out)
{
    if (!out)
        return rt_fail(ANEC_EINVAL, "anec_runtime_open: NULL out");
    *out = NULL;
    if (!driver)
        driver = "auto";
    const anec_driver *d = NULL;
    if (strcmp(driver, "auto") == 0) {
        d = anec_driver_available("ane", NULL, 0) ? find_driver("ane") : &anec_driver_sim;
    } else {
        d = find_driver(driver);
        if (!d) {
            if (strcmp(driver, "ane") == 0)
                return rt_fail(ANEC_EUNAVAIL, "this build has no ane driver");
            return rt_fail(ANEC_EINVAL, "unknown driver '%s' (sim, ane, auto)", driver);
        }
        char why[256];
        if (d->available(why, sizeof why) != ANEC_OK)
            return rt_fail(ANEC_EUNAVAIL, "%s", why);
    }
    anec_runtime *rt = calloc(1, sizeof *rt);
    if (!rt)
        return rt_fail(ANEC_ENOMEM, "out of memory");
    pthread_mutex_init(&rt->lock, NULL);
    pthread_mutex_init(&rt->st_lock, NULL);
    rt->refs = 1;
    rt->pid = getpid();
    rt->drv = d;
    rt->cap = opts && opts->compile_budget > 0 ? opts->compile_budget : 0;
    int rc = ANEC_OK;
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
            rc = rt_fail(ANEC_EIO, "cannot create the program directory root %s: %s", opts->temp_root, strerror(errno));
    } else {
        const char *t = getenv("TMPDIR");
        if (!t || !*t)
            t = "/tmp";
        size_t n = strlen(t) + 32;
        rt->root = malloc(n);
        if (!rt->root) {
            rc = rt_fail(ANEC_ENOMEM, "out of memory");
        } else {
            snprintf(rt->root, n, "%s/anec-rt-XXXXXX", t);
            if (!mkdtemp(rt->root))
                rc = rt_fail(ANEC_EIO, "cannot create a program directory root under %s: %s", t, strerror(errno));
            else
                rt->own_root = 1;
        }
    }
    char err[1024] = "";
    if (rc == ANEC_OK) {
        rc = d->open(&rt->ctx, err, sizeof err);
        if (rc != ANEC_OK)
            rt_fail(rc, "%s", err);
    }
    int opened = rc == ANEC_OK;
    if (rc == ANEC_OK) {
        const char *env = getenv("ANEC_SIM_THREADS");
        int threads = opts && opts->sim_threads > 0 ? opts->sim_threads : (env && atoi(env) > 0 ? atoi(env) : 2);
        char buf[32];
        snprintf(buf, sizeof buf, "%d", threads);
        rc = set_opt(rt, "threads", buf);
        /* the sim's device model: explicit for the sim only, $ANEC_SIM_DEVICE when not given */
        const char *dev = opts && opts->sim_device ? opts->sim_device : getenv("ANEC_SIM_DEVICE");
        if (rc == ANEC_OK && dev && *dev && (d == &anec_driver_sim || (opts && opts->sim_device)))
            rc = set_opt(rt, "device", dev);
        /* the device's compiles per process: one value for the process, the smallest given */
        if (rc == ANEC_OK && opts && opts->process_budget < 0)
            rc = rt_fail(ANEC_EINVAL, "process_budget must be >= 0, got %d", opts->process_budget);
        if (rc == ANEC_OK && opts && opts->process_budget > 0) {
            int di = driver_index(d->name);
            pthread_mutex_lock(&g_proc);
            if (g_budget[di] == 0 || opts->process_budget < g_budget[di])
                g_budget[di] = opts->process_budget;
            int budget = g_budget[di];
            pthread_mutex_unlock(&g_proc);
            snprintf(buf, sizeof buf, "%d", budget);
            rc = set_opt(rt, "compile_budget", buf);
        }
    }
    if (rc == ANEC_OK) {
        unsigned self = rt->drv->self_verified(rt->ctx) | ANEC_RELOAD_RECOMPILE;
        if (opts && (opts->reload_verified & ANEC_RELOAD_VERIFIED))
            rt->verified = (opts->reload_verified &
                            (ANEC_RELOAD_DATA_PATCH | ANEC_RELOAD_NEW_OBJECT | ANEC_RELOAD_INPUTS)) |
                           ANEC_RELOAD_RECOMPILE;
        else
            rt->verified = self;
        rt->verified |= ANEC_RELOAD_INPUTS; /* writing inputs needs no device claim */
    }
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

static void runtime_destroy(anec_runtime *rt)
{
    pthread_mutex_destroy(&rt->lock);
    pthread_mutex_destroy(&rt->st_lock);
    free(rt->root);
    free(rt);
}

static void program_free_tables(anec_program *p)
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
static int program_unref_locked(anec_program *p)
{
    anec_runtime *rt = p->rt;
    if (--p->refs > 0)
        return 0;
    program_free_tables(p);
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
    int last = program_unref_locked(p);
    pthread_mutex_unlock(&rt->lock);
    if (last)
        runtime_destroy(rt);
}

void anec_runtime_shutdown(anec_runtime *rt)
{
    if (!rt || forked(rt))
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
            program_unref_locked(p);
            pthread_mutex_unlock(&rt->lock);
        }
    }
    for (size_t i = 0; i < k; i++) {
        anec_program_close(pinned[i]);
        pthread_mutex_lock(&rt->lock);
        program_unref_locked(pinned[i]); /* the caller's handle keeps rt alive */
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
    if (!rt || forked(rt))
        return; /* after fork(): the parent owns the device state and the directories */
    anec_runtime_shutdown(rt);
    pthread_mutex_lock(&rt->lock);
    int last = --rt->refs == 0;
    pthread_mutex_unlock(&rt->lock);
    if (last)
        runtime_destroy(rt);
}

const char *anec_driver_name(const anec_runtime *rt) { return rt ? rt->drv->name : ""; }

/* ---- compile ---------------------------------------------------------------------------- */

static int cmp_io(const void *a, const void *b) { return strcmp(((const io_desc *)a)->name, ((const io_desc *)b)->name); }
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int fill_io(io_desc *d, const char *name, const mil_type *t, size_t decl)
{
    d->name = rt_strdup(name);
    if (!d->name)
        return rt_fail(ANEC_ENOMEM, "out of memory");
    d->dtype = mil_dtype_to_anec(t->dt);
    d->rank = t->rank;
    memcpy(d->shape, t->shape, sizeof d->shape);
    d->decl = decl;
    uint64_t numel = mil_type_numel(t);
    size_t bytes;
    if (numel > (uint64_t)SIZE_MAX || rt_mul_size((size_t)numel, mil_dtype_size(t->dt), &bytes))
        return rt_fail(ANEC_ECOMPILE, "I/O tensor '%s' is too large for this machine", name);
    d->numel = (size_t)numel;
    d->bytes = bytes;
    return ANEC_OK;
}

/* Light parse shared by every driver: signature, return tuple, BLOBFILE consts.
   Only syntax errors fail here; semantic errors are the driver's to report. */
static int describe(anec_program *p, const char *mil, size_t mil_len)
{
    char err[1024];
    mil_program *prog = mil_parse(mil, mil_len, err, sizeof err);
    if (!prog)
        return rt_fail(ANEC_EPARSE, "%s", err);
    const mil_func *f = mil_main_func(prog, err, sizeof err);
    if (!f) {
        mil_free(prog);
        return rt_fail(ANEC_ECOMPILE, "%s", err);
    }
    int rc = ANEC_OK;
    p->in = calloc(f->n_inputs + 1, sizeof *p->in);
    p->out = calloc(f->n_returns + 1, sizeof *p->out);
    size_t nconst = 0;
    for (size_t i = 0; i < f->n_stmts; i++)
        nconst += strcmp(f->stmts[i].op, "const") == 0;
    p->refs_tab = calloc(nconst + 1, sizeof *p->refs_tab);
    p->files = calloc(nconst + 1, sizeof *p->files);
    if (!p->in || !p->out || !p->refs_tab || !p->files) {
        mil_free(prog);
        return rt_fail(ANEC_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < f->n_inputs && rc == ANEC_OK; i++) {
        rc = fill_io(&p->in[i], f->inputs[i].name, &f->inputs[i].type, i);
        p->n_in++;
    }
    for (size_t r = 0; r < f->n_returns && rc == ANEC_OK; r++) {
        const mil_type *t = NULL;
        for (size_t i = 0; i < f->n_inputs && !t; i++)
            if (strcmp(f->inputs[i].name, f->returns[r]) == 0)
                t = &f->inputs[i].type;
        for (size_t i = 0; i < f->n_stmts && !t; i++)
            for (size_t k = 0; k < f->stmts[i].n_results; k++)
                if (strcmp(f->stmts[i].results[k].name, f->returns[r]) == 0)
                    t = &f->stmts[i].results[k].type;
        mil_type unknown;
        memset(&unknown, 0, sizeof unknown);
        rc = fill_io(&p->out[r], f->returns[r], t ? t : &unknown, r);
        p->n_out++;
    }
    for (size_t i = 0; i < f->n_stmts && rc == ANEC_OK; i++) {
        const mil_stmt *s = &f->stmts[i];
        if (strcmp(s->op, "const") || s->n_results != 1)
            continue;
        const mil_arg *val = mil_find_attr(s, "val");
        if (!val || val->val.kind != MIL_V_BLOB)
            continue;
        blob_ref *b = &p->refs_tab[p->n_refs++];
        b->path = rt_strdup(val->val.blob_path);
        b->const_name = rt_strdup(s->results[0].name);
        b->offset = val->val.blob_offset;
        b->dtype = rt_blob_dtype(s->results[0].type.dt);
        b->bytes = blob_payload_bytes(b->dtype, mil_type_numel(&s->results[0].type));
        b->line = s->results[0].line;
        if (!b->path || !b->const_name) {
            rc = rt_fail(ANEC_ENOMEM, "out of memory");
            break;
        }
        if (!rt_weight_path(b->path)) {
            rc = rt_fail(ANEC_ECOMPILE, "model.mil:%d: BLOBFILE path \"%s\" of const '%s' must be "
                         "@model_path/weights/<relative path> without '..'", b->line, b->path, b->const_name);
            break;
        }
        int seen = 0;
        for (size_t k = 0; k < p->n_files; k++)
            seen |= strcmp(p->files[k], b->path) == 0;
        if (!seen) {
            p->files[p->n_files] = rt_strdup(b->path);
            if (!p->files[p->n_files]) {
                rc = rt_fail(ANEC_ENOMEM, "out of memory");
                break;
            }
            p->n_files++;
        }
    }
    mil_free(prog);
    if (rc == ANEC_OK) {
        qsort(p->in, p->n_in, sizeof *p->in, cmp_io);
        qsort(p->out, p->n_out, sizeof *p->out, cmp_io);
        qsort(p->files, p->n_files, sizeof *p->files, cmp_str);
    }
    return rc;
}

/* After the driver accepted the program (its own messages are more precise). */
static int check_outputs(const anec_program *p)
{
    for (size_t i = 0; i < p->n_out; i++)
        if (!p->out[i].dtype || !p->out[i].rank)
            return rt_fail(ANEC_ECOMPILE, "[ANE-LIVE-OUTPUTS] returned name '%s' is not a tensor defined in the "
                           "function", p->out[i].name);
    return ANEC_OK;
}

int rt_check_blob(const anec_program *p, const anec_blob *b, int check_finite, const char *what)
{
    for (size_t k = 0; k < p->n_refs; k++) {
        const blob_ref *r = &p->refs_tab[k];
        if (strcmp(r->path, b->path))
            continue;
        blob_tensor t;
        char why[512];
        if (blob_read_tensor(b->data, b->len, r->offset, r->dtype, r->bytes, &t, why, sizeof why))
            return rt_fail(ANEC_EWEIGHTS, "%s: weight file %s for const '%s' (model.mil:%d, offset %llu): %s",
                           what, b->path, r->const_name, r->line, (unsigned long long)r->offset, why);
        if (check_finite) {
            long long bad = blob_first_nonfinite(&t);
            if (bad >= 0)
                return rt_fail(ANEC_EWEIGHTS, "%s: weight file %s for const '%s' has a non-finite value (NaN or Inf) "
                               "at element %lld%s", what, b->path, r->const_name, bad,
                               strcmp(what, "reload") == 0 ? "; the old weights stay in use" : "");
        }
    }
    return ANEC_OK;
}

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

static void cache_key(const char *mil, size_t mil_len, const anec_blob *blobs, size_t n, uint8_t key[32])
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

/* ---- surfaces: CPU-locked only while the CPU touches them (ANE-SURFACE-LOCK) ------------------------ */

int rt_surface_lock(anec_runtime *rt, anec_surface *s, int read_only)
{
    if (s->cpu_locks > 0) {
        if (s->lock_read_only && !read_only)
            return rt_fail(ANEC_ESTATE, "internal error: a write to a surface locked read-only");
        s->cpu_locks++;
        return ANEC_OK;
    }
    char err[512] = "";
    int rc = rt->drv->surface_lock(rt->ctx, s, read_only, err, sizeof err);
    if (rc != ANEC_OK)
        return rt_fail(rc, "%s", err);
    s->cpu_locks = 1;
    s->lock_read_only = read_only != 0;
    return ANEC_OK;
}

void rt_surface_unlock(anec_runtime *rt, anec_surface *s)
{
    if (s->cpu_locks > 0 && --s->cpu_locks == 0)
        rt->drv->surface_unlock(rt->ctx, s, s->lock_read_only);
}

int rt_transfer_surface(anec_runtime *rt, const io_desc *d, const anec_io *io, anec_surface *s, int to_host,
                        const char *side)
{
    int rc = rt_surface_lock(rt, s, to_host);
    if (rc != ANEC_OK)
        return rc;
    rc = rt_transfer(d, io, s->base, to_host, side);
    rt_surface_unlock(rt, s);
    return rc;
}

int rt_surface_copy(anec_runtime *rt, anec_surface *to, anec_surface *from, size_t bytes)
{
    int rc = rt_surface_lock(rt, from, 1);
    if (rc != ANEC_OK)
        return rc;
    if ((rc = rt_surface_lock(rt, to, 0)) == ANEC_OK) {
        memcpy(to->base, from->base, bytes);
        rt_surface_unlock(rt, to);
    }
    rt_surface_unlock(rt, from);
    return rc;
}

/* The caller takes the raw pointers (anec_program_input_surface): every
   surface of p stays locked for writing, except around evaluations. */
static int expose(anec_program *p)
{
    int rc = ANEC_OK;
    for (size_t k = 0; rc == ANEC_OK && k < p->n_in + p->n_out; k++)
        rc = rt_surface_lock(p->rt, k < p->n_in ? &p->in_s[k] : &p->out_s[k - p->n_in], 0);
    p->exposed = 1;
    return rc;
}

static void unexpose(anec_program *p)
{
    for (size_t k = 0; k < p->n_in + p->n_out; k++)
        rt_surface_unlock(p->rt, k < p->n_in ? &p->in_s[k] : &p->out_s[k - p->n_in]);
}

static void free_surfaces(anec_program *p)
{
    anec_runtime *rt = p->rt;
    for (size_t k = 0; p->in_s && p->out_s && k < p->n_in + p->n_out; k++) {
        anec_surface *s = k < p->n_in ? &p->in_s[k] : &p->out_s[k - p->n_in];
        while (s->cpu_locks)
            rt_surface_unlock(rt, s);
    }
    for (size_t i = 0; p->in_s && i < p->n_in; i++)
        if (p->in_s[i].base || p->in_s[i].handle)
            rt->drv->surface_free(rt->ctx, &p->in_s[i]);
    for (size_t i = 0; p->out_s && i < p->n_out; i++)
        if (p->out_s[i].base || p->out_s[i].handle)
            rt->drv->surface_free(rt->ctx, &p->out_s[i]);
    free(p->in_s);
    free(p->out_s);
    p->in_s = p->out_s = NULL;
}

static int make_surfaces(anec_program *p)
{
    anec_runtime *rt = p->rt;
    size_t mi = 0, mo = 0;
    for (size_t i = 0; i < p->n_in; i++)
        mi = p->in[i].bytes > mi ? p->in[i].bytes : mi;
    for (size_t i = 0; i < p->n_out; i++)
        mo = p->out[i].bytes > mo ? p->out[i].bytes : mo;
    size_t min = p->limits.min_surface_bytes;
    mi = mi < min ? min : mi;
    mo = mo < min ? min : mo;
    if (rt_round_up(mi, p->limits.surface_alignment, &mi) || rt_round_up(mo, p->limits.surface_alignment, &mo) ||
        mi == 0 || mo == 0)
        return rt_fail(ANEC_EINVAL, "surface size overflows (min_surface_bytes %zu, surface_alignment %zu)",
                       p->limits.min_surface_bytes, p->limits.surface_alignment);
    p->in_bytes = mi;
    p->out_bytes = mo;
    p->in_s = calloc(p->n_in + 1, sizeof *p->in_s);
    p->out_s = calloc(p->n_out + 1, sizeof *p->out_s);
    if (!p->in_s || !p->out_s)
        return rt_fail(ANEC_ENOMEM, "out of memory");
    char err[512];
    for (size_t i = 0; i < p->n_in; i++)
        if (rt->drv->surface_create(rt->ctx, mi, &p->in_s[i], err, sizeof err))
            return rt_fail(ANEC_ENOMEM, "cannot allocate input surface: %s", err);
    for (size_t i = 0; i < p->n_out; i++)
        if (rt->drv->surface_create(rt->ctx, mo, &p->out_s[i], err, sizeof err))
            return rt_fail(ANEC_ENOMEM, "cannot allocate output surface: %s", err);
    return ANEC_OK;
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

static const anec_blob *find_blob(const anec_blob *blobs, size_t n, const char *path)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(blobs[i].path, path) == 0)
            return &blobs[i];
    return NULL;
}

int anec_compile(anec_runtime *rt, const char *mil, size_t mil_len, const anec_blob *blobs, size_t n_blobs,
                 const anec_limits *limits, anec_program **out)
{
    if (!rt)
        return rt_fail(ANEC_EINVAL, "anec_compile: NULL runtime");
    if (forked(rt))
        return forked_error(rt);
    if (!out || (!mil && mil_len) || (!blobs && n_blobs))
        return rt_fail(ANEC_EINVAL, "anec_compile: NULL argument");
    if (!limits) {
        *out = NULL;
        return rt_fail(ANEC_EINVAL, "anec_compile: limits are required (the manifest's \"limits\"; "
                       "the runtime has no defaults of its own)");
    }
    *out = NULL;
    uint64_t t0 = rt_now_ns();
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
    anec_program *p = calloc(1, sizeof *p);
    if (!p)
        return rt_fail(ANEC_ENOMEM, "out of memory");
    pthread_mutex_init(&p->lock, NULL);
    p->rt = rt;
    p->refs = 1;
    p->limits = *limits;
    int rc = describe(p, mil, mil_len);
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
        program_free_tables(p);
        pthread_mutex_destroy(&p->lock);
        free(p);
        return rc;
    }
    cache_key(mil, mil_len, blobs, n_blobs, p->key);
    rt_content_hash(blobs, n_blobs, p->content);
    p->content_known = 1;

    pthread_mutex_lock(&rt->lock);
    if (rt->closed) {
        pthread_mutex_unlock(&rt->lock);
        program_free_tables(p);
        pthread_mutex_destroy(&p->lock);
        free(p);
        return rt_fail(ANEC_ESTATE, "the runtime is closed");
    }
    char err[RT_ERR_LEN];
    err[0] = 0;
    rt_dir *dir = rt_dir_find_shared(rt, p->key, p->content);
    if (!dir)
        dir = rt_dir_populate(rt, p->key, p->content, mil, mil_len, blobs, n_blobs);
    if (!dir) {
        pthread_mutex_unlock(&rt->lock);
        program_free_tables(p);
        pthread_mutex_destroy(&p->lock);
        free(p);
        return ANEC_EIO;
    }
    if (rt_set_dir(p, dir) != ANEC_OK) {
        rt_dir_release(rt, dir);
        pthread_mutex_unlock(&rt->lock);
        program_free_tables(p);
        pthread_mutex_destroy(&p->lock);
        free(p);
        return ANEC_ENOMEM;
    }
    cache_entry *e = rt_cache_find(rt, p->key);
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
    int compiled = 0;
    if (same && !e->donor && e->tmpl && e->tmpl_dir == dir) {
        /* the template computes with these very weights in this directory: take it over */
        p->dprog = e->tmpl;
        e->tmpl = NULL;
        rt_dir_release(rt, e->tmpl_dir);
        e->tmpl_dir = NULL;
        e->donor = p; /* and gives it back when it closes */
        p->patchable = e->patchable;
    } else if (same || patch) {
        rc = rt->drv->clone(rt->ctx, src, dir->path, &p->dprog, err, sizeof err);
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
            rc = ANEC_OK;
        } else {
            p->patchable = e->patchable;
        }
    }
    if (!p->dprog && rc == ANEC_OK) {
        rc = rt_budget_reserve(rt);
        if (rc == ANEC_OK) {
            anec_compile_args args = {mil, mil_len, blobs, n_blobs, dir->path, p->limits};
            rc = rt->drv->compile(rt->ctx, &args, &p->dprog, err, sizeof err);
            if (rc != ANEC_OK) {
                rt_budget_release(rt);
                rt_fail(rc, "%s", err);
            } else {
                compiled = 1;
                p->patchable = rt_observe_patchable(rt, p->dprog, blobs, n_blobs, p->n_files);
            }
        }
    }
    if (rc == ANEC_OK && compiled) {
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
    }
    if (rc == ANEC_OK)
        rc = check_outputs(p);
    if (rc == ANEC_OK)
        rc = make_surfaces(p);
    if (rc != ANEC_OK) {
        if (e && e->donor == p)
            e->donor = NULL;
        if (p->dprog)
            rt->drv->release(rt->ctx, p->dprog);
        free_surfaces(p);
        rt_dir_release(rt, p->dir);
        pthread_mutex_unlock(&rt->lock);
        program_free_tables(p);
        pthread_mutex_destroy(&p->lock);
        free(p);
        return rc;
    }
    p->next = rt->progs;
    if (rt->progs)
        rt->progs->prev = p;
    rt->progs = p;
    rt->refs++;
    pthread_mutex_unlock(&rt->lock);

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
    *out = p;
    return ANEC_OK;
}

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
static int enter(anec_program *p)
{
    if (!p)
        return rt_fail(ANEC_EINVAL, "NULL program");
    if (forked(p->rt))
        return forked_error(p->rt);
    pthread_mutex_lock(&p->lock);
    if (p->closed) {
        pthread_mutex_unlock(&p->lock);
        return rt_fail(ANEC_ESTATE, "the program is closed%s", p->rt->closed ? " (its runtime was closed)" : "");
    }
    return ANEC_OK;
}

int anec_load(anec_program *p)
{
    int rc = enter(p);
    if (rc != ANEC_OK)
        return rc;
    rc = rt_load_locked(p);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

int anec_unload(anec_program *p)
{
    int rc = enter(p);
    if (rc != ANEC_OK)
        return rc;
    rc = rt_unload_locked(p);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

void anec_program_close(anec_program *p)
{
    if (!p || forked(p->rt))
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
    free_surfaces(p);
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
    if (forked(rt))
        return; /* after fork(): released by the parent, never here */
    anec_program_close(p);
    pthread_mutex_lock(&rt->lock);
    int last = program_unref_locked(p);
    pthread_mutex_unlock(&rt->lock);
    if (last)
        runtime_destroy(rt);
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
    if (!p || forked(p->rt))
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
    if (!p || p->closed || !p->in_s || i >= p->n_in || (!p->exposed && expose(p) != ANEC_OK))
        return NULL;
    return p->in_s[i].base;
}

uint8_t *anec_program_output_surface(anec_program *p, size_t i)
{
    if (!p || p->closed || !p->out_s || i >= p->n_out || (!p->exposed && expose(p) != ANEC_OK))
        return NULL;
    return p->out_s[i].base;
}

int anec_program_stats(const anec_program *p, struct anec_stats *out)
{
    if (!p || !out)
        return rt_fail(ANEC_EINVAL, "NULL argument");
    if (forked(p->rt))
        return forked_error(p->rt);
    pthread_mutex_lock((pthread_mutex_t *)&p->lock);
    *out = p->st;
    pthread_mutex_unlock((pthread_mutex_t *)&p->lock);
    pthread_mutex_lock((pthread_mutex_t *)&p->rt->st_lock);
    uint64_t mine = p->rt->st.compiles;
    pthread_mutex_unlock((pthread_mutex_t *)&p->rt->st_lock);
    budget_view(p->rt, out, mine);
    out->programs_live = p->closed ? 0 : 1;
    out->dirs_live = p->closed ? 0 : 1;
    return ANEC_OK;
}

/* ---- evaluate ----------------------------------------------------------------------------------- */

int rt_eval_locked(anec_program *p, anec_surface *const *in, size_t n_in, anec_surface *const *out, size_t n_out)
{
    anec_runtime *rt = p->rt;
    if (!p->loaded)
        return rt_fail(ANEC_ESTATE, "evaluate: the program is not loaded (call anec_load)");
    uint64_t t0 = rt_now_ns();
    char err[RT_ERR_LEN];
    err[0] = 0;
    int rc = rt->drv->evaluate(rt->ctx, p->dprog, in, n_in, out, n_out, err, sizeof err);
    if (rc != ANEC_OK)
        return rt_fail(rc, "%s", err);
    struct anec_stats d = {0};
    d.evaluations = 1;
    d.ns_evaluate = rt_now_ns() - t0;
    rt_count(rt, &d);
    p->st.evaluations++;
    p->st.ns_evaluate += d.ns_evaluate;
    return ANEC_OK;
}

static int run_locked(anec_program *p)
{
    anec_surface *in[64], *out[64];
    anec_surface **ip = p->n_in <= 64 ? in : malloc(p->n_in * sizeof *ip);
    anec_surface **op = p->n_out <= 64 ? out : malloc(p->n_out * sizeof *op);
    int rc;
    if (!ip || !op) {
        rc = rt_fail(ANEC_ENOMEM, "out of memory");
    } else {
        for (size_t i = 0; i < p->n_in; i++)
            ip[i] = &p->in_s[i];
        for (size_t i = 0; i < p->n_out; i++)
            op[i] = &p->out_s[i];
        if (p->exposed) /* the device gets them unlocked; the caller's pointers are locked again after */
            unexpose(p);
        rc = rt_eval_locked(p, ip, p->n_in, op, p->n_out);
        if (p->exposed) {
            int lrc = expose(p);
            rc = rc == ANEC_OK ? lrc : rc;
        }
    }
    if (ip && ip != in)
        free(ip);
    if (op && op != out)
        free(op);
    return rc;
}

int anec_run(anec_program *p)
{
    int rc = enter(p);
    if (rc != ANEC_OK)
        return rc;
    rc = run_locked(p);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

static const char *dtype_name(int dt)
{
    switch (dt) {
    case ANEC_DTYPE_FP16: return "fp16";
    case ANEC_DTYPE_FP32: return "fp32";
    case ANEC_DTYPE_UINT8: return "uint8";
    case ANEC_DTYPE_INT8: return "int8";
    case ANEC_DTYPE_INT32: return "int32";
    case ANEC_DTYPE_BOOL: return "bool";
    default: return "unknown";
    }
}

int rt_transfer(const io_desc *d, const anec_io *io, uint8_t *surface, int to_host, const char *side)
{
    if (io->dtype == d->dtype) {
        if (io->bytes != d->bytes)
            return rt_fail(ANEC_EINVAL, "%s '%s' is %s%s of %zu bytes; got %zu bytes", side, d->name,
                           dtype_name(d->dtype), "", d->bytes, io->bytes);
        if (to_host)
            memcpy(io->data, surface, d->bytes);
        else
            memcpy(surface, io->data, d->bytes);
        return ANEC_OK;
    }
    if (d->dtype == ANEC_DTYPE_FP16 && io->dtype == ANEC_DTYPE_FP32) {
        if (io->bytes / 4 != d->numel || io->bytes % 4)
            return rt_fail(ANEC_EINVAL, "%s '%s' has %zu elements; got %zu bytes of fp32", side, d->name, d->numel,
                           io->bytes);
        if (to_host)
            anec_cvt_f16_to_f32((const uint16_t *)(const void *)surface, io->data, d->numel);
        else
            anec_cvt_f32_to_f16(io->data, (uint16_t *)(void *)surface, d->numel);
        return ANEC_OK;
    }
    return rt_fail(ANEC_EINVAL, "%s '%s' is %s; got %s (only fp32 <-> fp16 is converted)", side, d->name,
                   dtype_name(d->dtype), dtype_name(io->dtype));
}

static int write_inputs(anec_program *p, const anec_io *inputs, size_t n_in)
{
    if (n_in != p->n_in)
        return rt_fail(ANEC_EINVAL, "the program has %zu inputs; got %zu", p->n_in, n_in);
    if (n_in && !inputs)
        return rt_fail(ANEC_EINVAL, "NULL input array");
    for (size_t i = 0; i < n_in; i++)
        if (inputs[i].data) {
            int rc = rt_transfer_surface(p->rt, &p->in[i], &inputs[i], &p->in_s[i], 0, "input");
            if (rc != ANEC_OK)
                return rc;
        }
    return ANEC_OK;
}

int anec_call(anec_program *p, const anec_io *inputs, size_t n_in, const anec_io *outputs, size_t n_out)
{
    int rc = enter(p);
    if (rc != ANEC_OK)
        return rc;
    if (n_out != p->n_out || (n_out && !outputs))
        rc = rt_fail(ANEC_EINVAL, "the program has %zu outputs; got %zu", p->n_out, n_out);
    if (rc == ANEC_OK)
        rc = write_inputs(p, inputs, n_in);
    if (rc == ANEC_OK)
        rc = run_locked(p);
    for (size_t j = 0; rc == ANEC_OK && j < n_out; j++)
        if (outputs[j].data)
            rc = rt_transfer_surface(p->rt, &p->out[j], &outputs[j], &p->out_s[j], 1, "output");
    pthread_mutex_unlock(&p->lock);
    return rc;
}

int anec_set_inputs(anec_program *p, const anec_io *inputs, size_t n_in)
{
    int rc = enter(p);
    if (rc != ANEC_OK)
        return rc;
    rc = write_inputs(p, inputs, n_in);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

int anec_reload_inputs(anec_program *p, const anec_io *inputs, size_t n_in)
{
    int rc = enter(p);
    if (rc != ANEC_OK)
        return rc;
    uint64_t t0 = rt_now_ns();
    rc = write_inputs(p, inputs, n_in);
    if (rc == ANEC_OK)
        count_inputs_reload(p, t0);
    pthread_mutex_unlock(&p->lock);
    return rc;
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
    int rc = enter(p);
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
                         d->name, dtype_name(d->dtype), dtype_name(v->dtype));
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
    }
    if (rc == ANEC_OK)
        count_inputs_reload(p, t0);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

int anec_evaluate(anec_program *p, const anec_buffer *inputs, size_t n_in, anec_buffer *outputs, size_t n_out)
{
    int rc = enter(p);
    if (rc != ANEC_OK)
        return rc;
    anec_runtime *rt = p->rt;
    if ((!inputs && n_in) || (!outputs && n_out)) {
        pthread_mutex_unlock(&p->lock);
        return rt_fail(ANEC_EINVAL, "anec_evaluate: NULL buffer array");
    }
    for (size_t i = 0; i < n_in + n_out; i++) {
        const anec_buffer *b = i < n_in ? &inputs[i] : &outputs[i - n_in];
        if (!b->data && b->bytes) {
            pthread_mutex_unlock(&p->lock);
            return rt_fail(ANEC_EINVAL, "anec_evaluate: %s buffer %zu has no memory", i < n_in ? "input" : "output",
                           i < n_in ? i : i - n_in);
        }
    }
    /* device surfaces of exactly the caller's sizes (so the device sees what the caller allocated) */
    anec_surface *s = calloc(n_in + n_out + 1, sizeof *s);
    anec_surface **ptrs = calloc(n_in + n_out + 1, sizeof *ptrs);
    size_t made = 0;
    char err[512];
    if (!s || !ptrs)
        rc = rt_fail(ANEC_ENOMEM, "out of memory");
    for (size_t i = 0; rc == ANEC_OK && i < n_in + n_out; i++) {
        size_t bytes = i < n_in ? inputs[i].bytes : outputs[i - n_in].bytes;
        if (rt->drv->surface_create(rt->ctx, bytes, &s[i], err, sizeof err)) {
            rc = rt_fail(ANEC_ENOMEM, "cannot allocate a surface: %s", err);
            break;
        }
        made++;
        ptrs[i] = &s[i];
        if (i < n_in && bytes && (rc = rt_surface_lock(rt, &s[i], 0)) == ANEC_OK) {
            memcpy(s[i].base, inputs[i].data, bytes);
            rt_surface_unlock(rt, &s[i]);
        }
    }
    if (rc == ANEC_OK)
        rc = rt_eval_locked(p, ptrs, n_in, ptrs + n_in, n_out);
    for (size_t j = 0; rc == ANEC_OK && j < n_out; j++)
        if (outputs[j].bytes && (rc = rt_surface_lock(rt, &s[n_in + j], 1)) == ANEC_OK) {
            memcpy(outputs[j].data, s[n_in + j].base, outputs[j].bytes);
            rt_surface_unlock(rt, &s[n_in + j]);
        }
    for (size_t i = 0; i < made; i++)
        rt->drv->surface_free(rt->ctx, &s[i]);
    free(s);
    free(ptrs);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

int rt_enter(anec_program *p) { return enter(p); }
