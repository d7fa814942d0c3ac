/*
 * driver_sim.c - the "sim" driver: a strict ANE simulator behind the driver
 * interface (anec_driver.h).
 *
 *   compile   parse the MIL and build a plan (sim_plan.c), rejecting what the
 *             ANE compiler rejects; at most 119 compiles per process, like
 *             the device. Bakes the weights: writes the compiled form,
 *             `net.plist` and `data`, into the program directory.
 *   load      per the device reading chosen below; never sees a rewrite of
 *             weights/ alone except under load=weights.
 *   evaluate  check the surfaces like the device (same count, uniform
 *             allocation size per direction, not below the minimum, large
 *             enough for the packed tensor, not CPU-locked) and run the plan;
 *             failures carry the device's status=0x1d and a constraint id.
 *   surfaces  plain memory; `base` is set only while the core holds a CPU
 *             lock (ANE-SURFACE-LOCK), so a CPU access outside one faults.
 *             Read-only locks are not checked here (the ane fake does).
 *
 * The device model is a set of switches (option "device", from
 * anec_options.sim_device or $ANEC_SIM_DEVICE), one per reading of the public
 * evidence, so that the runtime can be tested against each (the evidence
 * ids are in the constraint catalog, `anec constraints`):
 *
 *   data=tensor  (default) `data` is byte-identical to the BLOBFILE only for a
 *                program with ONE BLOBFILE tensor (the only case measured,
 *                ANE-DATA-IS-BLOBFILE); otherwise it is opaque.
 *   data=file    `data` equals the BLOBFILE for any program whose weights are
 *                one BLOBFILE file (packed), whatever its tensor count.
 *   load=data    (default) every load reads `net.plist` + `data`: a rewrite
 *                of `data` reaches the device, one of weights/ alone does not.
 *                One reading of ANE-BAKED-WEIGHTS; it makes both the
 *                same-object patch (ANE-SAME-OBJECT-PATCH) and the new object
 *                (ANE-NEW-OBJECT-LOAD) work.
 *   load=weights load re-reads the weight files (ANE-LOAD-REREADS-WEIGHTS, a
 *                contested claim): a rewrite of weights/ reaches the device.
 *   load=memory  a model object keeps in memory the weights of its first
 *                compile (or, never compiled, of its first load) and later
 *                loads read no file; an object never compiled loads its
 *                directory's `data` (ANE-NEW-OBJECT-LOAD). The other reading
 *                of ANE-BAKED-WEIGHTS: the same-object patch does nothing,
 *                a new object works.
 *   load=memory-shared  as load=memory, and the framework also keeps the
 *                weights of the last compile per identifier process-wide (the
 *                sim's identifier: the MIL text, which names the weight paths
 *                but not their values); an object never compiled whose
 *                identifier has such weights loads those, not its `data`:
 *                neither the same-object patch nor a new object reaches the
 *                device, only a compile does (the most pessimistic case).
 *
 * (`anec constraints ID` says what each source shows.)
 *
 * self_verified declares the reload strategies each reading guarantees:
 * data-patch and new-object under load=data and load=weights, new-object
 * under load=memory, none under load=memory-shared.
 *
 * Contested constraints (the catalog carries both readings) get a switch each,
 * so that both are testable:
 *
 *   concat=reject  (default) the compiler rejects concat (ANE-CONCAT, Orion's
 *                  catalog).
 *   concat=accept  the compiler accepts a concat and it runs (maderix's
 *                  training kernels).
 *
 * One more switch injects a fault, to test the runtime's error paths:
 *
 *   fail=compile@N  the Nth compile of this runtime fails as a compile the
 *                device's compiler refuses (ANEC_ECOMPILE), the ones before
 *                and after it succeed.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anec_driver.h"
#include "rt_files.h"
#include "rt_sha256.h"
#include "rt_util.h"
#include "sim_plan.h"

#define NET_MAX_BYTES 65536u
#define DATA_MAX_BYTES (1ull << 36)
static const char CONTAINER_MAGIC[8] = {'A', 'N', 'E', 'S', 'I', 'M', 'C', 'T'};

enum { DATA_TENSOR = 0, DATA_FILE = 1 };
enum { LOAD_DATA = 0, LOAD_WEIGHTS = 1, LOAD_MEMORY = 2, LOAD_MEMORY_SHARED = 3 };

/* Compiles in this process: the device's count, shared by every context. */
static atomic_llong g_compiles;
/* The device's compiles per process, as the runtime gives it (the target's); 0: no limit known. */
static atomic_int g_budget;

/* load=memory-shared: the weights of the last compile per identifier (the
   MIL's sha256), process-wide, like a framework cache would keep them. */
typedef struct shared_weights {
    struct shared_weights *next;
    char id[65];
    uint8_t *data;
    size_t len;
} shared_weights;
static shared_weights *g_shared;
static pthread_mutex_t g_shared_lock = PTHREAD_MUTEX_INITIALIZER;

static void shared_clear(void)
{
    pthread_mutex_lock(&g_shared_lock);
    while (g_shared) {
        shared_weights *w = g_shared;
        g_shared = w->next;
        free(w->data);
        free(w);
    }
    pthread_mutex_unlock(&g_shared_lock);
}

/* Remember data as the weights of identifier id; 0, or -1 out of memory. */
static int shared_put(const char *id, const uint8_t *data, size_t len)
{
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        return -1;
    memcpy(copy, data, len);
    pthread_mutex_lock(&g_shared_lock);
    shared_weights *w = g_shared;
    while (w && strcmp(w->id, id) != 0)
        w = w->next;
    if (!w && (w = calloc(1, sizeof *w))) {
        memcpy(w->id, id, sizeof w->id);
        w->next = g_shared;
        g_shared = w;
    }
    if (w) {
        free(w->data);
        w->data = copy;
        w->len = len;
    }
    pthread_mutex_unlock(&g_shared_lock);
    if (!w)
        free(copy);
    return w ? 0 : -1;
}

/* A malloc'd copy of the weights remembered for id (*len set), or NULL. */
static uint8_t *shared_get(const char *id, size_t *len)
{
    uint8_t *copy = NULL;
    pthread_mutex_lock(&g_shared_lock);
    for (shared_weights *w = g_shared; w; w = w->next)
        if (strcmp(w->id, id) == 0 && (copy = malloc(w->len ? w->len : 1))) {
            memcpy(copy, w->data, w->len);
            *len = w->len;
            break;
        }
    pthread_mutex_unlock(&g_shared_lock);
    return copy;
}

void anec_sim_reset_process(void)
{
    atomic_store(&g_compiles, 0);
    shared_clear();
}

typedef struct sim_ctx {
    int threads;
    int data_mode, load_mode;
    int accept_concat;           /* concat=accept */
    long fail_compile_at;        /* fail=compile@N: N, else 0 */
    atomic_long compiles_tried;  /* compiles this runtime asked for */
} sim_ctx;

typedef struct sim_prog {
    sim_state *st;
    char *dir;                   /* the program directory: compiled form + weights/ */
    size_t min_surface;
    int load_mode;
    char mil_hex[65];            /* sha256 of the MIL the plan came from */
    char **paths;                /* distinct BLOBFILE paths the plan reads, sorted */
    size_t n_paths;
    uint8_t *baked;              /* load=memory*: the data bytes this object keeps (its first compile or load) */
    size_t baked_len;
} sim_prog;

static int sim_available(char *why, size_t whylen)
{
    if (why && whylen)
        snprintf(why, whylen, "the sim runs everywhere");
    return ANEC_OK;
}

static int sim_open(void **ctx, char *err, size_t errlen)
{
    sim_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return ANEC_ENOMEM;
    }
    c->threads = 2;
    *ctx = c;
    return ANEC_OK;
}

static void sim_close(void *ctx) { free(ctx); }

static int parse_device(sim_ctx *c, const char *spec, char *err, size_t errlen)
{
    int data = DATA_TENSOR, load = LOAD_DATA, concat = 0;
    long fail_at = 0;
    const char *s = spec;
    while (*s) {
        const char *e = strchr(s, ',');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        char item[64];
        if (n >= sizeof item)
            n = sizeof item - 1;
        memcpy(item, s, n);
        item[n] = 0;
        if (strcmp(item, "data=tensor") == 0)
            data = DATA_TENSOR;
        else if (strcmp(item, "data=file") == 0)
            data = DATA_FILE;
        else if (strcmp(item, "load=data") == 0)
            load = LOAD_DATA;
        else if (strcmp(item, "load=weights") == 0)
            load = LOAD_WEIGHTS;
        else if (strcmp(item, "load=memory") == 0)
            load = LOAD_MEMORY;
        else if (strcmp(item, "concat=reject") == 0)
            concat = 0;
        else if (strcmp(item, "concat=accept") == 0)
            concat = 1;
        else if (strcmp(item, "load=memory-shared") == 0)
            load = LOAD_MEMORY_SHARED;
        else if (strncmp(item, "fail=compile@", 13) == 0) {
            char *end;
            fail_at = strtol(item + 13, &end, 10);
            if (*end || fail_at < 1) {
                snprintf(err, errlen, "sim: device switch '%s': expected fail=compile@N with N >= 1", item);
                return ANEC_EINVAL;
            }
        } else if (n) {
            snprintf(err, errlen, "sim: unknown device switch '%s' (data=tensor|file, "
                     "load=data|weights|memory|memory-shared, concat=reject|accept, fail=compile@N)", item);
            return ANEC_EINVAL;
        }
        s = e ? e + 1 : s + n;
    }
    c->data_mode = data;
    c->load_mode = load;
    c->accept_concat = concat;
    c->fail_compile_at = fail_at;
    return ANEC_OK;
}

static int sim_set_option(void *ctx, const char *key, const char *value, char *err, size_t errlen)
{
    sim_ctx *c = ctx;
    if (strcmp(key, "threads") == 0) {
        int t = atoi(value);
        if (t >= 1 && t <= 64) {
            c->threads = t;
            return ANEC_OK;
        }
    } else if (strcmp(key, "device") == 0) {
        return parse_device(c, value, err, errlen);
    } else if (strcmp(key, "compile_budget") == 0) {
        int b = atoi(value);
        if (b >= 1) {
            atomic_store(&g_budget, b); /* a property of the (one) device of this process */
            return ANEC_OK;
        }
    }
    snprintf(err, errlen, "sim: invalid option %s = %s", key, value);
    return ANEC_EINVAL;
}

static unsigned sim_self_verified(void *ctx)
{
    const sim_ctx *c = ctx;
    switch (c->load_mode) {
    case LOAD_DATA:
    case LOAD_WEIGHTS:
        return ANEC_RELOAD_DATA_PATCH | ANEC_RELOAD_NEW_OBJECT;
    case LOAD_MEMORY:
        return ANEC_RELOAD_NEW_OBJECT;
    default:
        return 0;
    }
}

static void prog_free(sim_prog *p)
{
    if (!p)
        return;
    sim_state_free(p->st);
    for (size_t i = 0; i < p->n_paths; i++)
        free(p->paths[i]);
    free(p->paths);
    free(p->dir);
    free(p->baked);
    free(p);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static sim_prog *prog_new(sim_plan *plan, const char *dir, size_t min_surface, int threads, int load_mode)
{
    sim_prog *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->st = sim_state_new(plan, threads);
    p->dir = rt_strdup(dir);
    p->paths = calloc(plan->n_vals + 1, sizeof *p->paths);
    if (!p->st || !p->dir || !p->paths) {
        prog_free(p);
        return NULL;
    }
    for (size_t i = 0; i < plan->n_vals; i++) {
        const sim_value *v = &plan->vals[i];
        if (v->kind != SV_BLOB || v->dec)
            continue;
        int seen = 0;
        for (size_t k = 0; k < p->n_paths && !seen; k++)
            seen = strcmp(p->paths[k], v->blob_path) == 0;
        if (!seen && !(p->paths[p->n_paths++] = rt_strdup(v->blob_path))) {
            prog_free(p);
            return NULL;
        }
    }
    qsort(p->paths, p->n_paths, sizeof *p->paths, cmp_str);
    p->min_surface = min_surface;
    p->load_mode = load_mode;
    return p;
}

/* ---- the compiled form ------------------------------------------------------------ */

/* Is `data` one BLOBFILE's bytes (1) or the sim's opaque container (0)? */
static int single_layout(const sim_ctx *c, const sim_plan *plan, size_t n_paths)
{
    return c->data_mode == DATA_TENSOR ? plan->n_blobs == 1 : n_paths == 1;
}

static void put_u32(uint8_t *b, uint32_t v) { memcpy(b, &v, 4); }
static void put_u64(uint8_t *b, uint64_t v) { memcpy(b, &v, 8); }

/* The opaque container: magic, u32 version 1, u32 count, per file
   {u32 path length, path, u64 length, bytes}, as 1 + 2n parts (the file bytes
   are f[i].data itself, written from where they are); *head holds the other
   parts' bytes (free it). NULL when out of memory. */
static rt_part *container(const sim_file *f, size_t n, uint8_t **head, size_t *len)
{
    size_t total = 16, heads = 16;
    for (size_t i = 0; i < n; i++)
        if (rt_add_size(heads, 12 + strlen(f[i].path), &heads) || rt_add_size(total, 12 + strlen(f[i].path), &total) ||
            rt_add_size(total, f[i].len, &total))
            return NULL;
    uint8_t *b = malloc(heads);
    rt_part *parts = malloc((1 + 2 * n) * sizeof *parts);
    if (!b || !parts) {
        free(b);
        free(parts);
        return NULL;
    }
    memcpy(b, CONTAINER_MAGIC, 8);
    put_u32(b + 8, 1);
    put_u32(b + 12, (uint32_t)n);
    parts[0] = (rt_part){b, 16};
    size_t o = 16;
    for (size_t i = 0; i < n; i++) {
        size_t pl = strlen(f[i].path);
        put_u32(b + o, (uint32_t)pl);
        memcpy(b + o + 4, f[i].path, pl);
        put_u64(b + o + 4 + pl, f[i].len);
        parts[1 + 2 * i] = (rt_part){b + o, 12 + pl};
        parts[2 + 2 * i] = (rt_part){f[i].data, f[i].len};
        o += 12 + pl;
    }
    *head = b;
    *len = total;
    return parts;
}

/* Split `data` into files (pointers into data); *n set. -1 if malformed. */
static int decode(const sim_prog *p, int single, const uint8_t *data, size_t len, sim_file *out, size_t *n,
                  char *err, size_t errlen)
{
    if (single) {
        if (p->n_paths != 1) {
            snprintf(err, errlen, "load: the compiled network reads %zu weight files from a single-file data", p->n_paths);
            return -1;
        }
        out[0] = (sim_file){p->paths[0], data, len};
        *n = 1;
        return 0;
    }
    if (len < 16 || memcmp(data, CONTAINER_MAGIC, 8) != 0) {
        snprintf(err, errlen, "load: the compiled data is not the sim's weight container");
        return -1;
    }
    uint32_t count;
    memcpy(&count, data + 12, 4);
    if (count != p->n_paths) {
        snprintf(err, errlen, "load: the compiled data holds %u weight files, the network reads %zu", count, p->n_paths);
        return -1;
    }
    size_t o = 16;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t pl;
        uint64_t fl;
        if (len - o < 4)
            goto bad;
        memcpy(&pl, data + o, 4);
        if (len - o - 4 < (size_t)pl + 8)
            goto bad;
        memcpy(&fl, data + o + 4 + pl, 8);
        if (fl > len - o - 12 - pl)
            goto bad;
        const char *path = NULL;
        for (size_t k = 0; k < p->n_paths && !path; k++)
            if (strlen(p->paths[k]) == pl && memcmp(p->paths[k], data + o + 4, pl) == 0)
                path = p->paths[k];
        if (!path)
            goto bad;
        out[i] = (sim_file){path, data + o + 12 + pl, (size_t)fl};
        o += 12 + pl + (size_t)fl;
    }
    *n = count;
    return 0;
bad:
    snprintf(err, errlen, "load: the compiled data is truncated or corrupt");
    return -1;
}

static int write_compiled(const sim_prog *p, int single, const rt_part *parts, size_t n_parts, char *err,
                          size_t errlen)
{
    char net[512];
    int n = snprintf(net, sizeof net, "anec-sim-net 1\nmil %s\nlayout %s\n", p->mil_hex, single ? "file" : "container");
    char why[512];
    char *np = rt_join(p->dir, "net.plist"), *dp = rt_join(p->dir, "data");
    int rc = ANEC_OK;
    if (!np || !dp)
        rc = ANEC_ENOMEM;
    else if (rt_write_atomic_parts(dp, parts, n_parts, why, sizeof why) ||
             rt_write_atomic(np, net, (size_t)n, why, sizeof why))
        rc = ANEC_EIO;
    if (rc != ANEC_OK)
        snprintf(err, errlen, "sim compile: cannot write the compiled form: %s", rc == ANEC_EIO ? why : "out of memory");
    free(np);
    free(dp);
    return rc;
}

/* Which layout the compiled form in p->dir has: 1 file, 0 container, -1 bad. */
static int read_net(const sim_prog *p, char *err, size_t errlen)
{
    uint8_t *net = NULL;
    size_t len = 0;
    char why[512];
    if (rt_read_beneath(p->dir, "net.plist", NET_MAX_BYTES, &net, &len, why, sizeof why)) {
        snprintf(err, errlen, "load: no compiled network (%s)", why);
        return -1;
    }
    char want[160];
    snprintf(want, sizeof want, "anec-sim-net 1\nmil %s\nlayout ", p->mil_hex);
    size_t wl = strlen(want);
    int layout = -1;
    if (len >= wl && memcmp(net, want, wl) == 0) {
        if (len - wl == 5 && memcmp(net + wl, "file\n", 5) == 0)
            layout = 1;
        else if (len - wl == 10 && memcmp(net + wl, "container\n", 10) == 0)
            layout = 0;
    }
    free(net);
    if (layout < 0)
        snprintf(err, errlen, "load: the compiled network in %s is not this program's", p->dir);
    return layout;
}

static int sim_compile(void *ctx, const anec_compile_args *args, void **prog, char *err, size_t errlen)
{
    sim_ctx *c = ctx;
    int budget = atomic_load(&g_budget);
    if (budget > 0 && atomic_load(&g_compiles) >= budget) {
        snprintf(err, errlen, "[ANE-COMPILE-BUDGET] compile refused: this process already compiled %lld programs, "
                 "the device's limit is %d per process", (long long)atomic_load(&g_compiles), budget);
        return ANEC_EBUDGET;
    }
    long nth = atomic_fetch_add(&c->compiles_tried, 1) + 1;
    if (nth == c->fail_compile_at) {
        snprintf(err, errlen, "sim compile: injected fault (device switch fail=compile@%ld): the device's compiler "
                 "refused compile %ld of this runtime", nth, nth);
        return ANEC_ECOMPILE;
    }
    int status;
    static const char *const ACCEPT_CONCAT[] = {"concat", NULL};
    sim_plan *plan = sim_plan_build_accepting(args->mil, args->mil_len, &args->limits,
                                              c->accept_concat ? ACCEPT_CONCAT : NULL, &status, err, errlen);
    if (!plan)
        return status;
    sim_prog *p = prog_new(plan, args->dir, args->limits.min_surface_bytes, c->threads, c->load_mode);
    sim_plan_release(plan);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return ANEC_ENOMEM;
    }
    uint8_t h[32];
    rt_sha256(args->mil, args->mil_len, h);
    rt_sha256_hex(h, p->mil_hex);
    /* the files the plan reads, from the compile arguments */
    sim_file *files = calloc(p->n_paths + 1, sizeof *files);
    int rc = files ? ANEC_OK : ANEC_ENOMEM;
    for (size_t k = 0; rc == ANEC_OK && k < p->n_paths; k++) {
        for (size_t i = 0; i < args->n_blobs && !files[k].path; i++)
            if (strcmp(args->blobs[i].path, p->paths[k]) == 0)
                files[k] = (sim_file){p->paths[k], args->blobs[i].data, args->blobs[i].len};
        if (!files[k].path) {
            snprintf(err, errlen, "sim compile: weight file %s was not given", p->paths[k]);
            rc = ANEC_EINVAL;
        }
    }
    int single = single_layout(c, p->st->plan, p->n_paths);
    uint8_t *head = NULL;
    size_t len = 0;
    rt_part one = {files ? files[0].data : NULL, files ? files[0].len : 0}, *parts = single ? &one : NULL;
    if (rc == ANEC_OK && !single && !(parts = container(files, p->n_paths, &head, &len)))
        rc = ANEC_ENOMEM;
    size_t n_parts = single ? 1 : 1 + 2 * p->n_paths;
    if (rc == ANEC_OK) {
        /* the compiled data is written from the weights where they are: no copy of them is made */
        rc = write_compiled(p, single, parts, n_parts, err, errlen);
        if (rc == ANEC_OK && (c->load_mode == LOAD_MEMORY || c->load_mode == LOAD_MEMORY_SHARED)) {
            size_t blen = single ? files[0].len : len;
            p->baked = malloc(blen ? blen : 1);
            if (!p->baked)
                rc = ANEC_ENOMEM;
            for (size_t i = 0, o = 0; rc == ANEC_OK && i < n_parts; o += parts[i].len, i++)
                if (parts[i].len)
                    memcpy(p->baked + o, parts[i].data, parts[i].len);
            p->baked_len = blen;
            if (rc == ANEC_OK && c->load_mode == LOAD_MEMORY_SHARED && shared_put(p->mil_hex, p->baked, blen))
                rc = ANEC_ENOMEM;
        }
    }
    if (rc == ANEC_ENOMEM)
        snprintf(err, errlen, "out of memory");
    free(head);
    if (!single)
        free(parts);
    free(files);
    if (rc != ANEC_OK) {
        prog_free(p);
        return rc;
    }
    atomic_fetch_add(&g_compiles, 1);
    *prog = p;
    return ANEC_OK;
}

static int sim_clone(void *ctx, void *donor, const char *dir, void **out, char *err, size_t errlen)
{
    sim_ctx *c = ctx;
    sim_prog *d = donor;
    sim_prog *p = prog_new(d->st->plan, dir, d->min_surface, c->threads, d->load_mode);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return ANEC_ENOMEM;
    }
    memcpy(p->mil_hex, d->mil_hex, sizeof p->mil_hex);
    int rc = ANEC_OK;
    if (strcmp(dir, d->dir) != 0 && read_net(p, err, errlen) < 0) {
        /* dir holds no compiled form yet: copy the donor's (its weights included) */
        static const char *const names[] = {"net.plist", "data"};
        for (int i = 0; i < 2 && rc == ANEC_OK; i++) {
            char *from = rt_join(d->dir, names[i]), *to = rt_join(dir, names[i]);
            char why[512] = "out of memory";
            if (!from || !to || rt_link_or_copy(from, to, why, sizeof why)) {
                snprintf(err, errlen, "sim clone: %s", why);
                rc = ANEC_EIO;
            }
            free(from);
            free(to);
        }
    }
    /* a new object, never compiled: under load=memory* it keeps nothing in
       memory yet, its first load decides what it computes with */
    if (rc != ANEC_OK) {
        prog_free(p);
        return rc;
    }
    *out = p;
    return ANEC_OK;
}

static int sim_data_equals(void *ctx, void *prog, const uint8_t *bytes, size_t len, char *err, size_t errlen)
{
    (void)ctx;
    (void)err;
    (void)errlen;
    const sim_prog *p = prog;
    return rt_file_equals(p->dir, "data", bytes, len);
}

static int sim_patch_data(void *ctx, void *prog, const char *rel, const uint8_t *bytes, size_t len, int written,
                          char *err, size_t errlen)
{
    (void)ctx;
    sim_prog *p = prog;
    if (p->st->loaded) {
        snprintf(err, errlen, "patch_data: the program is loaded");
        return ANEC_ESTATE;
    }
    int layout = read_net(p, err, errlen);
    if (layout < 0)
        return ANEC_ELOAD;
    if (layout != 1) {
        snprintf(err, errlen, "patch_data: the compiled data of this program is opaque (several tensors)");
        return ANEC_EINVAL;
    }
    /* the compiled directory is the program directory: when its weight file
       holds the new bytes already (the core wrote them) link it, else write */
    char why[512] = "out of memory";
    char *dp = rt_join(p->dir, "data"), *fp = rt_join(p->dir, rel);
    int rc = ANEC_OK;
    if (!dp || !fp)
        rc = ANEC_ENOMEM;
    else if (written || rt_file_equals(p->dir, rel, bytes, len) ? rt_link_or_copy(fp, dp, why, sizeof why)
                                                     : rt_write_atomic(dp, bytes, len, why, sizeof why))
        rc = ANEC_EIO;
    if (rc != ANEC_OK)
        snprintf(err, errlen, "patch_data: %s", why);
    free(dp);
    free(fp);
    return rc;
}

static int sim_load(void *ctx, void *prog, char *err, size_t errlen)
{
    (void)ctx;
    sim_prog *p = prog;
    if (p->st->loaded)
        return ANEC_OK;
    sim_file *files = calloc(p->n_paths + 1, sizeof *files);
    uint8_t **owned = calloc(p->n_paths + 1, sizeof *owned);
    if (!files || !owned) {
        free(files);
        free(owned);
        snprintf(err, errlen, "out of memory");
        return ANEC_ENOMEM;
    }
    size_t n = 0;
    const uint8_t *mapped = NULL; /* load=data: the compiled data, mapped while the state takes its weights */
    size_t mapped_len = 0;
    int rc = ANEC_OK;
    char why[512];
    if (p->load_mode == LOAD_WEIGHTS) {
        for (size_t k = 0; k < p->n_paths && rc == ANEC_OK; k++) {
            size_t len = 0;
            if (rt_read_beneath(p->dir, rt_rel_path(p->paths[k]), DATA_MAX_BYTES, &owned[k], &len, why, sizeof why)) {
                snprintf(err, errlen, "load: weight file %s: %s", p->paths[k], why);
                rc = ANEC_ELOAD;
            }
            files[n++] = (sim_file){p->paths[k], owned[k], len};
        }
    } else {
        int layout = read_net(p, err, errlen);
        int memory = p->load_mode == LOAD_MEMORY || p->load_mode == LOAD_MEMORY_SHARED;
        const uint8_t *data = p->baked;
        size_t len = p->baked_len;
        if (layout < 0) {
            rc = ANEC_ELOAD;
        } else if (!data && !memory) {
            if (rt_map_beneath(p->dir, "data", DATA_MAX_BYTES, &mapped, &mapped_len, why, sizeof why)) {
                snprintf(err, errlen, "load: compiled data: %s", why);
                rc = ANEC_ELOAD;
            }
            data = mapped;
            len = mapped_len;
        } else if (!data) {
            /* an object that keeps nothing yet: the identifier's shared weights
               (load=memory-shared), else the directory's data; it keeps what it loaded first */
            if (p->load_mode == LOAD_MEMORY_SHARED)
                p->baked = shared_get(p->mil_hex, &len);
            if (!p->baked && rt_read_beneath(p->dir, "data", DATA_MAX_BYTES, &p->baked, &len, why, sizeof why)) {
                snprintf(err, errlen, "load: compiled data: %s", why);
                rc = ANEC_ELOAD;
            }
            data = p->baked;
            p->baked_len = len;
        }
        if (rc == ANEC_OK && decode(p, layout, data, len, files, &n, err, errlen))
            rc = ANEC_ELOAD;
    }
    /* the state takes its own (shared) copy of every weight: nothing read here is kept */
    if (rc == ANEC_OK)
        rc = sim_state_load(p->st, files, n, mapped != NULL, err, errlen);
    rt_unmap(mapped, mapped_len);
    for (size_t k = 0; k <= p->n_paths; k++)
        free(owned[k]);
    free(owned);
    free(files);
    return rc;
}

static int sim_unload(void *ctx, void *prog, char *err, size_t errlen)
{
    (void)ctx;
    (void)err;
    (void)errlen;
    sim_state_unload(((sim_prog *)prog)->st);
    return ANEC_OK;
}

/* Surfaces of SURFACE_MAP_MIN bytes or more are anonymous mappings: zero pages that become
   resident as they are first written, so a surface allocated at its program's uniform size
   (ANE-UNIFORM-SURFACES: every surface as large as the largest tensor, a weight given as an
   input, say) holds in memory only what its own tensor uses. Smaller ones are zeroed heap
   memory. Either way a new surface reads as zeros. */
#define SURFACE_MAP_MIN ((size_t)1 << 18)

/* The bytes a surface of `bytes` takes (64-byte aligned, at least one line); -1 on overflow. */
static int surface_size(size_t bytes, size_t *n) { return rt_round_up(bytes ? bytes : 1, 64, n); }

static uint8_t *surface_memory(size_t n)
{
    if (n < SURFACE_MAP_MIN) {
        uint8_t *b = aligned_alloc(64, n);
        if (b)
            memset(b, 0, n);
        return b;
    }
    void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return m == MAP_FAILED ? NULL : m;
}

static int sim_surface_create(void *ctx, size_t bytes, anec_surface *out, char *err, size_t errlen)
{
    (void)ctx;
    size_t n;
    if (surface_size(bytes, &n)) {
        snprintf(err, errlen, "surface of %zu bytes is too large", bytes);
        return ANEC_ENOMEM;
    }
    uint8_t *b = surface_memory(n);
    if (!b) {
        snprintf(err, errlen, "out of memory allocating a %zu-byte surface", bytes);
        return ANEC_ENOMEM;
    }
    memset(out, 0, sizeof *out);
    out->handle = b; /* the memory; base only while CPU-locked, so an access outside a lock faults */
    out->bytes = bytes;
    return ANEC_OK;
}

static void sim_surface_free(void *ctx, anec_surface *s)
{
    (void)ctx;
    size_t n;
    if (s->handle && !surface_size(s->bytes, &n) && n >= SURFACE_MAP_MIN)
        munmap(s->handle, n);
    else
        free(s->handle);
    memset(s, 0, sizeof *s);
}

static int sim_surface_lock(void *ctx, anec_surface *s, int read_only, char *err, size_t errlen)
{
    (void)ctx;
    (void)read_only;
    if (!s->handle) {
        snprintf(err, errlen, "surface_lock: the surface has no memory");
        return ANEC_EINVAL;
    }
    s->base = s->handle;
    return ANEC_OK;
}

static void sim_surface_unlock(void *ctx, anec_surface *s, int read_only)
{
    (void)ctx;
    (void)read_only;
    s->base = NULL;
}

#define STATUS_1D "ANEProgramProcessRequestDirect() failed with status=0x1d: Program Inference error "

static int check_side(const sim_plan *plan, const int *bind, size_t n, anec_surface *const *surf, size_t min,
                      const char *side, char *err, size_t errlen)
{
    for (size_t i = 1; i < n; i++)
        if (surf[i]->bytes != surf[0]->bytes) {
            snprintf(err, errlen, STATUS_1D "[ANE-UNIFORM-SURFACES] %s surfaces have different allocation sizes "
                     "(%s: %zu bytes, %s: %zu bytes); allocate every %s surface at the same size",
                     side, plan->vals[bind[0]].name, surf[0]->bytes, plan->vals[bind[i]].name, surf[i]->bytes, side);
            return ANEC_EEVAL;
        }
    for (size_t i = 0; i < n; i++) {
        if (surf[i]->bytes < min) {
            snprintf(err, errlen, STATUS_1D "[ANE-MIN-SURFACE] %s surface for '%s' is %zu bytes, below the minimum of %zu",
                     side, plan->vals[bind[i]].name, surf[i]->bytes, min);
            return ANEC_EEVAL;
        }
        if (surf[i]->bytes < plan->vals[bind[i]].bytes) {
            snprintf(err, errlen, STATUS_1D "%s surface for '%s' is %zu bytes but the packed tensor needs %zu",
                     side, plan->vals[bind[i]].name, surf[i]->bytes, plan->vals[bind[i]].bytes);
            return ANEC_EEVAL;
        }
        if (!surf[i]->handle) {
            snprintf(err, errlen, STATUS_1D "%s surface for '%s' has no memory", side, plan->vals[bind[i]].name);
            return ANEC_EEVAL;
        }
        if (surf[i]->cpu_locks) { /* like the device: the CPU must not hold it (ANE-SURFACE-LOCK) */
            snprintf(err, errlen, "evaluate: %s surface for '%s' is still CPU-locked", side, plan->vals[bind[i]].name);
            return ANEC_ESTATE;
        }
    }
    return ANEC_OK;
}

static int sim_evaluate(void *ctx, void *prog, anec_surface *const *inputs, size_t n_in,
                        anec_surface *const *outputs, size_t n_out, char *err, size_t errlen)
{
    sim_ctx *c = ctx;
    sim_prog *p = prog;
    const sim_plan *plan = p->st->plan;
    if (!p->st->loaded) {
        snprintf(err, errlen, "evaluate: the program is not loaded");
        return ANEC_ESTATE;
    }
    if (n_in != plan->n_inputs || n_out != plan->n_outputs) {
        snprintf(err, errlen, STATUS_1D "the program has %zu inputs and %zu outputs, the request binds %zu and %zu",
                 plan->n_inputs, plan->n_outputs, n_in, n_out);
        return ANEC_EEVAL;
    }
    int rc = check_side(plan, plan->in_bind, n_in, inputs, p->min_surface, "input", err, errlen);
    if (rc == ANEC_OK)
        rc = check_side(plan, plan->out_bind, n_out, outputs, p->min_surface, "output", err, errlen);
    if (rc != ANEC_OK)
        return rc;
    uint8_t *in[256], *out[256];
    uint8_t **inp = n_in <= 256 ? in : malloc(n_in * sizeof *inp);
    uint8_t **outp = n_out <= 256 ? out : malloc(n_out * sizeof *outp);
    if (!inp || !outp) {
        if (inp != in) free(inp);
        if (outp != out) free(outp);
        snprintf(err, errlen, "out of memory");
        return ANEC_ENOMEM;
    }
    for (size_t i = 0; i < n_in; i++)
        inp[i] = inputs[i]->handle;
    for (size_t i = 0; i < n_out; i++)
        outp[i] = outputs[i]->handle;
    p->st->threads = c->threads;
    rc = sim_state_run(p->st, inp, outp, err, errlen);
    if (inp != in) free(inp);
    if (outp != out) free(outp);
    return rc;
}

static void sim_release(void *ctx, void *prog)
{
    (void)ctx;
    prog_free(prog);
}

const anec_driver anec_driver_sim = {
    .name = "sim",
    .available = sim_available,
    .open = sim_open,
    .close = sim_close,
    .set_option = sim_set_option,
    .self_verified = sim_self_verified,
    .compile = sim_compile,
    .load = sim_load,
    .unload = sim_unload,
    .clone = sim_clone,
    .data_equals = sim_data_equals,
    .patch_data = sim_patch_data,
    .surface_create = sim_surface_create,
    .surface_free = sim_surface_free,
    .surface_lock = sim_surface_lock,
    .surface_unlock = sim_surface_unlock,
    .evaluate = sim_evaluate,
    .release = sim_release,
};
