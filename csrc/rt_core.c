/*
 * rt_core.c - the driver-independent runtime core (public API in anec_rt.h).
 *
 * The core owns every decision that must not differ between the sim and the
 * device, and hands drivers only device calls (anec_driver.h):
 *
 *  - program cache: key = sha256(sha256(MIL) || sorted weight paths). A hit
 *    costs no compile: the driver clones the compiled template onto the
 *    program's directory. The cache keeps the template after its programs
 *    are freed, so loading the same artifact again is free.
 *  - program directories <root>/<hexid>[-n]/{model.mil, weights/...}, laid
 *    out like the device's temp directory and reference-counted: programs
 *    with the same key and identical weight bytes share one; a program whose
 *    weights differ gets its own copy; a delta reload of a shared directory
 *    first makes a private copy (hard links, then atomic replacement), so
 *    releasing or patching one program never breaks another.
 *  - compile budget (ANE-COMPILE-BUDGET): compiles are counted per runtime.
 *  - I/O binding tables in alphabetical order of MIL names (from a light
 *    parse of the func signature and return tuple) and core-owned surfaces
 *    of uniform size per direction (>= min_surface_bytes).
 *  - delta reload: validate everything first, then unload -> atomically
 *    rewrite only the blob files whose bytes changed -> load. No compile.
 */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700
#define _DEFAULT_SOURCE
#define _DARWIN_C_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "anec_driver.h"
#include "anec_rt.h"
#include "blobfile.h"
#include "fp16.h"
#include "rt_sha256.h"
#include "rt_util.h"
#include "sim_mil.h"

#define DEFAULT_BUDGET 119
#define ERR_LEN 4096

/* ---- data structures ---------------------------------------------------------- */

typedef struct rt_dir {
    struct rt_dir *next;
    char *path;
    uint8_t key[32];
    uint8_t content[32];         /* hash of the weight bytes written at creation */
    int shareable;               /* 0 once a delta reload changed the files */
    int refs;
    char **files;                /* relative paths of the files we wrote */
    size_t n_files;
} rt_dir;

typedef struct cache_entry {
    struct cache_entry *next;
    uint8_t key[32];
    void *tmpl;                  /* compiled driver program (never loaded), or NULL */
    rt_dir *tmpl_dir;            /* directory the template was compiled on (a reference) */
} cache_entry;

typedef struct io_desc {
    char *name;
    int dtype;
    int rank;
    int64_t shape[ANEC_MAX_RANK];
    size_t bytes;
    size_t decl;
} io_desc;

typedef struct blob_ref {
    char *path;                  /* "@model_path/weights/w.bin" */
    char *const_name;
    uint64_t offset;
    uint32_t dtype;              /* BLOB_DT_* */
    uint64_t bytes;
    int line;
} blob_ref;

struct anec_runtime {
    const anec_driver *drv;
    void *ctx;
    char *root;
    int own_root;
    int budget;
    struct anec_stats st;
    rt_dir *dirs;
    cache_entry *cache;
    anec_program *progs;
    unsigned long seq;
    char err[ERR_LEN];
};

struct anec_program {
    anec_runtime *rt;
    anec_program *next, *prev;
    void *dprog;
    rt_dir *dir;
    int loaded;
    uint8_t key[32];
    io_desc *in, *out;           /* binding (alphabetical) order */
    size_t n_in, n_out;
    blob_ref *refs;
    size_t n_refs;
    char **files;                /* distinct BLOBFILE paths referenced by the MIL */
    size_t n_files;
    anec_surface *in_s, *out_s;
    size_t in_bytes, out_bytes;
    anec_limits limits;
    struct anec_stats st;
};

/* ---- small helpers ---------------------------------------------------------------- */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int rt_fail(anec_runtime *rt, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rt->err, sizeof rt->err, fmt, ap);
    va_end(ap);
    return code;
}

static char *join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *r = malloc(n);
    if (r)
        snprintf(r, n, "%s/%s", a, b);
    return r;
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

void anec_f32_to_f16(const float *src, uint16_t *dst, size_t n) { anec_cvt_f32_to_f16(src, dst, n); }
void anec_f16_to_f32(const uint16_t *src, float *dst, size_t n) { anec_cvt_f16_to_f32(src, dst, n); }

/* ---- files --------------------------------------------------------------------------- */

/* "@model_path/weights/w.bin" -> "weights/w.bin", NULL if unsafe. */
static const char *rel_path(const char *mil_path)
{
    if (strncmp(mil_path, "@model_path/", 12) != 0)
        return NULL;
    const char *r = mil_path + 12;
    if (!*r || r[0] == '/' || strchr(r, '\\'))
        return NULL;
    /* every component non-empty and not "." / ".." */
    const char *c = r;
    while (*c) {
        const char *e = strchr(c, '/');
        size_t n = e ? (size_t)(e - c) : strlen(c);
        if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            return NULL;
        if (!e)
            break;
        c = e + 1;
        if (!*c)
            return NULL;
    }
    return r;
}

/* mkdir -p of the parent directories of dir/rel */
static int make_parents(const char *dir, const char *rel)
{
    char *p = join(dir, rel);
    if (!p)
        return -1;
    size_t base = strlen(dir) + 1;
    for (char *s = p + base; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, 0755) && errno != EEXIST) {
                free(p);
                return -1;
            }
            *s = '/';
        }
    free(p);
    return 0;
}

static int fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Write bytes to `tmp` (created exclusively) and fsync it. */
static int write_temp(const char *tmp, const void *data, size_t len, char *why, size_t whylen)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_TRUNC, 0644);
    if (fd < 0) {
        snprintf(why, whylen, "cannot create %s: %s", tmp, strerror(errno));
        return -1;
    }
    const uint8_t *p = data;
    size_t left = len;
    while (left) {
        ssize_t k = write(fd, p, left);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            snprintf(why, whylen, "write to %s failed: %s", tmp, strerror(errno));
            close(fd);
            unlink(tmp);
            return -1;
        }
        p += k;
        left -= (size_t)k;
    }
    if (fsync(fd) || close(fd)) {
        snprintf(why, whylen, "fsync/close of %s failed: %s", tmp, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

static char *temp_name(const char *target)
{
    static unsigned long counter;
    size_t n = strlen(target) + 48;
    char *t = malloc(n);
    if (t)
        snprintf(t, n, "%s.tmp.%ld.%lu", target, (long)getpid(), ++counter);
    return t;
}

/* Atomic write: temp + fsync + rename. */
static int write_atomic(const char *path, const void *data, size_t len, char *why, size_t whylen)
{
    char *tmp = temp_name(path);
    if (!tmp) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    if (write_temp(tmp, data, len, why, whylen)) {
        free(tmp);
        return -1;
    }
    if (rename(tmp, path)) {
        snprintf(why, whylen, "rename to %s failed: %s", path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}

/* 1 if the file at path holds exactly data[0..len), 0 if not (or unreadable). */
static int file_equals(const char *path, const uint8_t *data, size_t len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    uint8_t buf[65536];
    size_t off = 0;
    int eq = 1;
    for (;;) {
        size_t k = fread(buf, 1, sizeof buf, f);
        if (k == 0)
            break;
        if (off + k > len || memcmp(buf, data + off, k) != 0) {
            eq = 0;
            break;
        }
        off += k;
    }
    if (ferror(f))
        eq = 0;
    fclose(f);
    return eq && off == len;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (flag == FTW_DP || flag == FTW_D)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

static void rm_tree(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* ---- program directories ----------------------------------------------------------------- */

static void dir_free(rt_dir *d)
{
    for (size_t i = 0; i < d->n_files; i++)
        free(d->files[i]);
    free(d->files);
    free(d->path);
    free(d);
}

static void dir_release(anec_runtime *rt, rt_dir *d)
{
    if (!d || --d->refs > 0)
        return;
    for (rt_dir **pp = &rt->dirs; *pp; pp = &(*pp)->next)
        if (*pp == d) {
            *pp = d->next;
            break;
        }
    rm_tree(d->path);
    rt->st.dirs_live--;
    dir_free(d);
}

/* Create an empty, uniquely named directory <root>/<hex>[-n]. */
static rt_dir *dir_create(anec_runtime *rt, const uint8_t key[32])
{
    char hex[65];
    rt_sha256_hex(key, hex);
    hex[32] = 0;
    rt_dir *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    size_t n = strlen(rt->root) + 64;
    d->path = malloc(n);
    if (!d->path) {
        free(d);
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
            rt_fail(rt, ANEC_EIO, "cannot create program directory %s: %s", d->path, strerror(errno));
            free(d->path);
            free(d);
            return NULL;
        }
    }
    memcpy(d->key, key, 32);
    d->refs = 1;
    d->next = rt->dirs;
    rt->dirs = d;
    rt->st.dirs_live++;
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

/* Write model.mil and the blobs into a fresh directory. */
static rt_dir *dir_populate(anec_runtime *rt, const uint8_t key[32], const uint8_t content[32], const char *mil,
                            size_t mil_len, const anec_blob *blobs, size_t n_blobs)
{
    rt_dir *d = dir_create(rt, key);
    if (!d)
        return NULL;
    char why[1024];
    char *p = join(d->path, "model.mil");
    int ok = p && write_atomic(p, mil, mil_len, why, sizeof why) == 0 && dir_add_file(d, "model.mil") == 0;
    free(p);
    for (size_t i = 0; ok && i < n_blobs; i++) {
        const char *rel = rel_path(blobs[i].path);
        if (make_parents(d->path, rel)) {
            snprintf(why, sizeof why, "cannot create the directories of %s: %s", rel, strerror(errno));
            ok = 0;
            break;
        }
        p = join(d->path, rel);
        ok = p && write_atomic(p, blobs[i].data, blobs[i].len, why, sizeof why) == 0 && dir_add_file(d, rel) == 0;
        free(p);
    }
    if (!ok) {
        rt_fail(rt, ANEC_EIO, "cannot write program directory %s: %s", d->path, why);
        dir_release(rt, d);
        return NULL;
    }
    if (content)
        memcpy(d->content, content, 32);
    d->shareable = 1;
    return d;
}

/* A private copy of src (hard links where possible; files are only ever
   replaced by rename, so links never see a later patch). */
static rt_dir *dir_copy(anec_runtime *rt, rt_dir *src)
{
    rt_dir *d = dir_create(rt, src->key);
    if (!d)
        return NULL;
    for (size_t i = 0; i < src->n_files; i++) {
        const char *rel = src->files[i];
        char *from = join(src->path, rel), *to = join(d->path, rel);
        int ok = from && to && make_parents(d->path, rel) == 0;
        if (ok && link(from, to) != 0) {
            /* no hard links here: copy the bytes */
            FILE *f = fopen(from, "rb");
            ok = 0;
            if (f) {
                uint8_t *buf = NULL;
                size_t n = 0, cap = 0, k;
                do {
                    if (cap - n < 65536) {
                        uint8_t *nb = realloc(buf, cap ? cap * 2 : 1 << 20);
                        if (!nb)
                            break;
                        buf = nb;
                        cap = cap ? cap * 2 : 1 << 20;
                    }
                    k = fread(buf + n, 1, cap - n, f);
                    n += k;
                } while (k > 0);
                int rerr = ferror(f);
                fclose(f);
                char why[512];
                ok = !rerr && buf && write_atomic(to, buf, n, why, sizeof why) == 0;
                free(buf);
            }
        }
        ok = ok && dir_add_file(d, rel) == 0;
        free(from);
        free(to);
        if (!ok) {
            rt_fail(rt, ANEC_EIO, "cannot copy program directory %s to %s: %s", src->path, d->path, strerror(errno));
            dir_release(rt, d);
            return NULL;
        }
    }
    d->shareable = 0;
    return d;
}

/* ---- runtime ----------------------------------------------------------------------------------- */

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

int anec_runtime_open(const char *driver, const anec_options *opts, anec_runtime **out)
{
    if (!out)
        return ANEC_EINVAL;
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
                return ANEC_EUNAVAIL;
            return ANEC_EINVAL;
        }
        char why[256];
        if (d->available(why, sizeof why) != ANEC_OK)
            return ANEC_EUNAVAIL;
    }
    anec_runtime *rt = calloc(1, sizeof *rt);
    if (!rt)
        return ANEC_ENOMEM;
    rt->drv = d;
    rt->budget = opts && opts->compile_budget > 0 ? opts->compile_budget : DEFAULT_BUDGET;
    if (opts && opts->temp_root) {
        rt->root = rt_strdup(opts->temp_root);
        /* mkdir -p */
        for (char *c = rt->root ? rt->root + 1 : NULL; c && *c; c++)
            if (*c == '/') {
                *c = 0;
                mkdir(rt->root, 0755);
                *c = '/';
            }
        if (!rt->root || (mkdir(rt->root, 0755) && errno != EEXIST)) {
            free(rt->root);
            free(rt);
            return ANEC_EIO;
        }
    } else {
        const char *t = getenv("TMPDIR");
        if (!t || !*t)
            t = "/tmp";
        size_t n = strlen(t) + 32;
        rt->root = malloc(n);
        if (!rt->root) {
            free(rt);
            return ANEC_ENOMEM;
        }
        snprintf(rt->root, n, "%s/anec-rt-XXXXXX", t);
        if (!mkdtemp(rt->root)) {
            free(rt->root);
            free(rt);
            return ANEC_EIO;
        }
        rt->own_root = 1;
    }
    char err[1024] = "";
    int rc = d->open(&rt->ctx, err, sizeof err);
    if (rc == ANEC_OK && d->set_option) {
        const char *env = getenv("ANEC_SIM_THREADS");
        int threads = opts && opts->sim_threads > 0 ? opts->sim_threads : (env && atoi(env) > 0 ? atoi(env) : 2);
        rc = d->set_option(rt->ctx, "threads", threads, err, sizeof err);
        if (rc == ANEC_OK)
            rc = d->set_option(rt->ctx, "compile_budget", rt->budget, err, sizeof err);
        if (rc != ANEC_OK)
            d->close(rt->ctx);
    }
    if (rc != ANEC_OK) {
        if (rt->own_root)
            rm_tree(rt->root);
        free(rt->root);
        free(rt);
        return rc;
    }
    rt->st.compile_budget = rt->budget;
    *out = rt;
    return ANEC_OK;
}

void anec_runtime_close(anec_runtime *rt)
{
    if (!rt)
        return;
    while (rt->progs)
        anec_program_free(rt->progs);
    while (rt->cache) {
        cache_entry *e = rt->cache;
        rt->cache = e->next;
        if (e->tmpl)
            rt->drv->release(rt->ctx, e->tmpl);
        dir_release(rt, e->tmpl_dir);
        free(e);
    }
    while (rt->dirs) {
        rt_dir *d = rt->dirs;
        rt->dirs = d->next;
        rm_tree(d->path);
        dir_free(d);
    }
    rt->drv->close(rt->ctx);
    if (rt->own_root)
        rm_tree(rt->root);
    free(rt->root);
    free(rt);
}

const char *anec_driver_name(const anec_runtime *rt) { return rt ? rt->drv->name : ""; }
const char *anec_last_error(const anec_runtime *rt) { return rt ? rt->err : ""; }

int anec_stats(const anec_runtime *rt, struct anec_stats *out)
{
    if (!rt || !out)
        return ANEC_EINVAL;
    *out = rt->st;
    out->compile_budget = rt->budget;
    out->compile_budget_left = (int64_t)rt->budget - (int64_t)rt->st.compiles;
    return ANEC_OK;
}

/* ---- compile ---------------------------------------------------------------------------- */

static int cmp_io(const void *a, const void *b) { return strcmp(((const io_desc *)a)->name, ((const io_desc *)b)->name); }
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void program_free_tables(anec_program *p)
{
    for (size_t i = 0; i < p->n_in; i++)
        free(p->in[i].name);
    for (size_t i = 0; i < p->n_out; i++)
        free(p->out[i].name);
    for (size_t i = 0; i < p->n_refs; i++) {
        free(p->refs[i].path);
        free(p->refs[i].const_name);
    }
    for (size_t i = 0; i < p->n_files; i++)
        free(p->files[i]);
    free(p->in);
    free(p->out);
    free(p->refs);
    free(p->files);
}

static int fill_io(io_desc *d, const char *name, const mil_type *t, size_t decl)
{
    d->name = rt_strdup(name);
    if (!d->name)
        return -1;
    d->dtype = mil_dtype_to_anec(t->dt);
    d->rank = t->rank;
    memcpy(d->shape, t->shape, sizeof d->shape);
    d->bytes = (size_t)mil_type_numel(t) * mil_dtype_size(t->dt);
    d->decl = decl;
    return 0;
}

/* Light parse shared by every driver: signature, return tuple, BLOBFILE consts.
   Only syntax errors fail here; semantic errors are the driver's to report. */
static int describe(anec_runtime *rt, anec_program *p, const char *mil, size_t mil_len)
{
    char err[1024];
    mil_program *prog = mil_parse(mil, mil_len, err, sizeof err);
    if (!prog)
        return rt_fail(rt, ANEC_EPARSE, "%s", err);
    const mil_func *f = mil_main_func(prog, err, sizeof err);
    if (!f) {
        mil_free(prog);
        return rt_fail(rt, ANEC_ECOMPILE, "%s", err);
    }
    int rc = ANEC_OK;
    p->in = calloc(f->n_inputs + 1, sizeof *p->in);
    p->out = calloc(f->n_returns + 1, sizeof *p->out);
    size_t nconst = 0;
    for (size_t i = 0; i < f->n_stmts; i++)
        nconst += strcmp(f->stmts[i].op, "const") == 0;
    p->refs = calloc(nconst + 1, sizeof *p->refs);
    p->files = calloc(nconst + 1, sizeof *p->files);
    if (!p->in || !p->out || !p->refs || !p->files) {
        mil_free(prog);
        return rt_fail(rt, ANEC_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < f->n_inputs && rc == ANEC_OK; i++) {
        if (fill_io(&p->in[i], f->inputs[i].name, &f->inputs[i].type, i))
            rc = rt_fail(rt, ANEC_ENOMEM, "out of memory");
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
        if (fill_io(&p->out[r], f->returns[r], t ? t : &unknown, r))
            rc = rt_fail(rt, ANEC_ENOMEM, "out of memory");
        p->n_out++;
    }
    for (size_t i = 0; i < f->n_stmts && rc == ANEC_OK; i++) {
        const mil_stmt *s = &f->stmts[i];
        if (strcmp(s->op, "const") || s->n_results != 1)
            continue;
        const mil_arg *val = mil_find_attr(s, "val");
        if (!val || val->val.kind != MIL_V_BLOB)
            continue;
        blob_ref *b = &p->refs[p->n_refs++];
        b->path = rt_strdup(val->val.blob_path);
        b->const_name = rt_strdup(s->results[0].name);
        b->offset = val->val.blob_offset;
        b->dtype = rt_blob_dtype(s->results[0].type.dt);
        b->bytes = mil_type_numel(&s->results[0].type) * blob_dtype_size(b->dtype);
        b->line = s->results[0].line;
        if (!b->path || !b->const_name) {
            rc = rt_fail(rt, ANEC_ENOMEM, "out of memory");
            break;
        }
        if (!rel_path(b->path)) {
            rc = rt_fail(rt, ANEC_ECOMPILE, "model.mil:%d: BLOBFILE path \"%s\" of const '%s' must be "
                         "@model_path/<relative path> without '..'", b->line, b->path, b->const_name);
            break;
        }
        int seen = 0;
        for (size_t k = 0; k < p->n_files; k++)
            seen |= strcmp(p->files[k], b->path) == 0;
        if (!seen) {
            p->files[p->n_files] = rt_strdup(b->path);
            if (!p->files[p->n_files]) {
                rc = rt_fail(rt, ANEC_ENOMEM, "out of memory");
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

/* Check one blob against every const that reads it. */
static int check_blob(anec_runtime *rt, const anec_program *p, const anec_blob *b, int check_finite, const char *what)
{
    int any = 0;
    for (size_t k = 0; k < p->n_refs; k++) {
        const blob_ref *r = &p->refs[k];
        if (strcmp(r->path, b->path))
            continue;
        any = 1;
        blob_tensor t;
        char why[512];
        if (blob_read_tensor(b->data, b->len, r->offset, r->dtype, r->bytes, &t, why, sizeof why))
            return rt_fail(rt, ANEC_EWEIGHTS, "%s: weight file %s for const '%s' (model.mil:%d, offset %llu): %s",
                           what, b->path, r->const_name, r->line, (unsigned long long)r->offset, why);
        if (check_finite) {
            long long bad = blob_first_nonfinite(&t);
            if (bad >= 0)
                return rt_fail(rt, ANEC_EWEIGHTS, "%s: weight file %s for const '%s' has a non-finite value (NaN or Inf) "
                               "at element %lld; the old weights stay in use", what, b->path, r->const_name, bad);
        }
    }
    (void)any;
    return ANEC_OK;
}

static void cache_key(const char *mil, size_t mil_len, const anec_blob *blobs, size_t n_blobs, uint8_t key[32],
                      uint8_t content[32], const char **sorted)
{
    for (size_t i = 0; i < n_blobs; i++)
        sorted[i] = blobs[i].path;
    qsort(sorted, n_blobs, sizeof *sorted, cmp_str);
    uint8_t h[32];
    rt_sha256(mil, mil_len, h);
    rt_sha256_ctx s;
    rt_sha256_init(&s);
    rt_sha256_update(&s, h, 32);
    for (size_t i = 0; i < n_blobs; i++)
        rt_sha256_update(&s, sorted[i], strlen(sorted[i]) + 1);
    rt_sha256_final(&s, key);
    rt_sha256_ctx c;
    rt_sha256_init(&c);
    for (size_t i = 0; i < n_blobs; i++)
        for (size_t j = 0; j < n_blobs; j++)
            if (blobs[j].path == sorted[i]) {
                rt_sha256(blobs[j].data, blobs[j].len, h);
                rt_sha256_update(&c, sorted[i], strlen(sorted[i]) + 1);
                rt_sha256_update(&c, h, 32);
                break;
            }
    rt_sha256_final(&c, content);
}

static int make_surfaces(anec_runtime *rt, anec_program *p)
{
    size_t mi = 0, mo = 0;
    for (size_t i = 0; i < p->n_in; i++)
        mi = p->in[i].bytes > mi ? p->in[i].bytes : mi;
    for (size_t i = 0; i < p->n_out; i++)
        mo = p->out[i].bytes > mo ? p->out[i].bytes : mo;
    size_t min = p->limits.min_surface_bytes, al = p->limits.surface_alignment ? p->limits.surface_alignment : 1;
    mi = mi < min ? min : mi;
    mo = mo < min ? min : mo;
    mi = (mi + al - 1) / al * al;
    mo = (mo + al - 1) / al * al;
    p->in_bytes = mi;
    p->out_bytes = mo;
    p->in_s = calloc(p->n_in + 1, sizeof *p->in_s);
    p->out_s = calloc(p->n_out + 1, sizeof *p->out_s);
    if (!p->in_s || !p->out_s)
        return rt_fail(rt, ANEC_ENOMEM, "out of memory");
    char err[512];
    for (size_t i = 0; i < p->n_in; i++)
        if (rt->drv->surface_create(rt->ctx, mi, &p->in_s[i], err, sizeof err))
            return rt_fail(rt, ANEC_ENOMEM, "cannot allocate input surface: %s", err);
    for (size_t i = 0; i < p->n_out; i++)
        if (rt->drv->surface_create(rt->ctx, mo, &p->out_s[i], err, sizeof err))
            return rt_fail(rt, ANEC_ENOMEM, "cannot allocate output surface: %s", err);
    return ANEC_OK;
}

static void free_surfaces(anec_program *p)
{
    anec_runtime *rt = p->rt;
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

static cache_entry *cache_find(anec_runtime *rt, const uint8_t key[32])
{
    for (cache_entry *e = rt->cache; e; e = e->next)
        if (memcmp(e->key, key, 32) == 0)
            return e;
    return NULL;
}

static int budget_error(anec_runtime *rt)
{
    return rt_fail(rt, ANEC_EBUDGET, "[ANE-COMPILE-BUDGET] compile budget exhausted: %llu of %d compiles used by this "
                   "runtime (the ANE fails after about 119 compiles per process). Programs with the same MIL and weight "
                   "paths are served from the cache without a compile; swap weights with a delta reload "
                   "(anec_reload_weights / Program.reload_weights) instead of compiling again",
                   (unsigned long long)rt->st.compiles, rt->budget);
}

int anec_compile(anec_runtime *rt, const char *mil, size_t mil_len, const anec_blob *blobs, size_t n_blobs,
                 const anec_limits *limits, anec_program **out)
{
    if (!rt)
        return ANEC_EINVAL;
    if (!out || (!mil && mil_len) || (!blobs && n_blobs))
        return rt_fail(rt, ANEC_EINVAL, "anec_compile: NULL argument");
    *out = NULL;
    uint64_t t0 = now_ns();
    for (size_t i = 0; i < n_blobs; i++) {
        if (!blobs[i].path || (!blobs[i].data && blobs[i].len))
            return rt_fail(rt, ANEC_EINVAL, "anec_compile: blob %zu has no path or data", i);
        if (!rel_path(blobs[i].path))
            return rt_fail(rt, ANEC_EINVAL, "weight path \"%s\" must be @model_path/<relative path> without '..'",
                           blobs[i].path);
        for (size_t j = 0; j < i; j++)
            if (strcmp(blobs[i].path, blobs[j].path) == 0)
                return rt_fail(rt, ANEC_EINVAL, "weight file %s is given twice", blobs[i].path);
    }
    anec_program *p = calloc(1, sizeof *p);
    if (!p)
        return rt_fail(rt, ANEC_ENOMEM, "out of memory");
    p->rt = rt;
    if (limits) {
        p->limits = *limits;
    } else {
        p->limits.max_blob_tensors = 16;
        p->limits.scalar_penalty = 1;
        p->limits.max_conv_out_channels = 16384;
        p->limits.min_surface_bytes = 49152;
        p->limits.allow_fp32_io = 1;
    }
    int rc = describe(rt, p, mil, mil_len);
    /* every referenced weight file must be given and must match its consts */
    for (size_t k = 0; rc == ANEC_OK && k < p->n_refs; k++) {
        int found = 0;
        for (size_t i = 0; i < n_blobs; i++)
            found |= strcmp(blobs[i].path, p->refs[k].path) == 0;
        if (!found)
            rc = rt_fail(rt, ANEC_EINVAL, "model.mil:%d: const '%s' reads weight file %s, which was not given",
                         p->refs[k].line, p->refs[k].const_name, p->refs[k].path);
    }
    for (size_t i = 0; rc == ANEC_OK && i < n_blobs; i++)
        rc = check_blob(rt, p, &blobs[i], 0, "compile");
    const char **sorted = NULL;
    uint8_t content[32];
    if (rc == ANEC_OK) {
        sorted = calloc(n_blobs + 1, sizeof *sorted);
        if (!sorted)
            rc = rt_fail(rt, ANEC_ENOMEM, "out of memory");
        else
            cache_key(mil, mil_len, blobs, n_blobs, p->key, content, sorted);
        free(sorted);
    }
    if (rc != ANEC_OK) {
        program_free_tables(p);
        free(p);
        return rc;
    }
    /* directory: share one with the same key and the same bytes, else write a new one */
    rt_dir *dir = NULL;
    for (rt_dir *d = rt->dirs; d && !dir; d = d->next)
        if (d->shareable && memcmp(d->key, p->key, 32) == 0 && memcmp(d->content, content, 32) == 0)
            dir = d;
    if (dir)
        dir->refs++;
    else
        dir = dir_populate(rt, p->key, content, mil, mil_len, blobs, n_blobs);
    if (!dir) {
        program_free_tables(p);
        free(p);
        return ANEC_EIO;
    }
    p->dir = dir;
    char err[ERR_LEN];
    err[0] = 0;
    cache_entry *e = cache_find(rt, p->key);
    int compiled = 0;
    if (e && e->tmpl && rt->drv->clone) {
        rc = rt->drv->clone(rt->ctx, e->tmpl, dir->path, &p->dprog, err, sizeof err);
    } else if (e && e->tmpl && e->tmpl_dir == dir) {
        p->dprog = e->tmpl; /* a driver without clone: hand the template over */
        e->tmpl = NULL;
        dir_release(rt, e->tmpl_dir);
        e->tmpl_dir = NULL;
    } else {
        if (rt->st.compiles >= (uint64_t)rt->budget) {
            rc = budget_error(rt);
            goto fail;
        }
        anec_compile_args args = {mil, mil_len, blobs, n_blobs, dir->path, p->limits};
        rc = rt->drv->compile(rt->ctx, &args, &p->dprog, err, sizeof err);
        if (rc == ANEC_OK) {
            compiled = 1;
            rt->st.compiles++;
            p->st.compiles = 1;
            if (!e) {
                e = calloc(1, sizeof *e);
                if (e) {
                    memcpy(e->key, p->key, 32);
                    e->next = rt->cache;
                    rt->cache = e;
                }
            }
            /* keep the compiled form in the cache; the program runs a clone of it */
            if (e && !e->tmpl && rt->drv->clone) {
                void *clone = NULL;
                char cerr[512];
                if (rt->drv->clone(rt->ctx, p->dprog, dir->path, &clone, cerr, sizeof cerr) == ANEC_OK) {
                    e->tmpl = p->dprog;
                    e->tmpl_dir = dir;
                    dir->refs++;
                    p->dprog = clone;
                }
            }
        }
    }
    if (rc != ANEC_OK) {
        if (rc == ANEC_EBUDGET)
            rt_fail(rt, rc, "%s. Programs with the same MIL and weight paths are served from the cache; swap weights "
                    "with a delta reload instead of compiling again", err);
        else
            rt_fail(rt, rc, "%s", err);
        goto fail;
    }
    if (!compiled) {
        rt->st.cache_hits++;
        p->st.cache_hits = 1;
    }
    for (size_t i = 0; i < p->n_out; i++)
        if (!p->out[i].dtype || !p->out[i].rank) {
            rc = rt_fail(rt, ANEC_ECOMPILE, "[ANE-LIVE-OUTPUTS] returned name '%s' is not a tensor defined in the function",
                         p->out[i].name);
            goto fail;
        }
    rc = make_surfaces(rt, p);
    if (rc != ANEC_OK)
        goto fail;
    p->next = rt->progs;
    if (rt->progs)
        rt->progs->prev = p;
    rt->progs = p;
    rt->st.programs_live++;
    uint64_t dt = now_ns() - t0;
    rt->st.ns_compile += dt;
    p->st.ns_compile = dt;
    *out = p;
    return ANEC_OK;
fail:
    if (p->dprog)
        rt->drv->release(rt->ctx, p->dprog);
    free_surfaces(p);
    dir_release(rt, p->dir);
    program_free_tables(p);
    free(p);
    return rc;
}

/* ---- load / unload / free ------------------------------------------------------------------ */

int anec_load(anec_program *p)
{
    if (!p)
        return ANEC_EINVAL;
    anec_runtime *rt = p->rt;
    if (p->loaded)
        return ANEC_OK;
    uint64_t t0 = now_ns();
    char err[ERR_LEN];
    err[0] = 0;
    int rc = rt->drv->load(rt->ctx, p->dprog, err, sizeof err);
    if (rc != ANEC_OK)
        return rt_fail(rt, rc, "%s", err);
    p->loaded = 1;
    uint64_t dt = now_ns() - t0;
    rt->st.loads++;
    rt->st.ns_load += dt;
    p->st.loads++;
    p->st.ns_load += dt;
    return ANEC_OK;
}

int anec_unload(anec_program *p)
{
    if (!p)
        return ANEC_EINVAL;
    anec_runtime *rt = p->rt;
    if (!p->loaded)
        return ANEC_OK;
    uint64_t t0 = now_ns();
    char err[ERR_LEN];
    err[0] = 0;
    int rc = rt->drv->unload(rt->ctx, p->dprog, err, sizeof err);
    p->loaded = 0;
    if (rc != ANEC_OK)
        return rt_fail(rt, rc, "%s", err);
    uint64_t dt = now_ns() - t0;
    rt->st.unloads++;
    rt->st.ns_unload += dt;
    p->st.unloads++;
    p->st.ns_unload += dt;
    return ANEC_OK;
}

void anec_program_free(anec_program *p)
{
    if (!p)
        return;
    anec_runtime *rt = p->rt;
    anec_unload(p);
    cache_entry *e = cache_find(rt, p->key);
    if (e && !e->tmpl && !rt->drv->clone && p->dir->shareable) {
        /* a driver without clone: keep this compiled program as the cache template */
        e->tmpl = p->dprog;
        e->tmpl_dir = p->dir;
        p->dir->refs++;
    } else {
        rt->drv->release(rt->ctx, p->dprog);
    }
    free_surfaces(p);
    dir_release(rt, p->dir);
    if (p->prev)
        p->prev->next = p->next;
    else
        rt->progs = p->next;
    if (p->next)
        p->next->prev = p->prev;
    rt->st.programs_live--;
    program_free_tables(p);
    free(p);
}

/* ---- introspection ---------------------------------------------------------------------------- */

size_t anec_program_num_inputs(const anec_program *p) { return p ? p->n_in : 0; }
size_t anec_program_num_outputs(const anec_program *p) { return p ? p->n_out : 0; }
const char *anec_program_dir(const anec_program *p) { return p ? p->dir->path : NULL; }
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
        return ANEC_EINVAL;
    return info(&p->in[i], i, out);
}

int anec_program_output(const anec_program *p, size_t i, anec_tensor_info *out)
{
    if (!p || !out || i >= p->n_out)
        return ANEC_EINVAL;
    return info(&p->out[i], i, out);
}

uint8_t *anec_program_input_surface(anec_program *p, size_t i) { return p && i < p->n_in ? p->in_s[i].base : NULL; }
uint8_t *anec_program_output_surface(anec_program *p, size_t i) { return p && i < p->n_out ? p->out_s[i].base : NULL; }

int anec_program_stats(const anec_program *p, struct anec_stats *out)
{
    if (!p || !out)
        return ANEC_EINVAL;
    *out = p->st;
    out->compile_budget = p->rt->budget;
    out->compile_budget_left = (int64_t)p->rt->budget - (int64_t)p->rt->st.compiles;
    out->programs_live = 1;
    out->dirs_live = 1;
    return ANEC_OK;
}

/* ---- evaluate ----------------------------------------------------------------------------------- */

static int eval_surfaces(anec_program *p, anec_surface *const *in, size_t n_in, anec_surface *const *out, size_t n_out)
{
    anec_runtime *rt = p->rt;
    if (!p->loaded)
        return rt_fail(rt, ANEC_ESTATE, "evaluate: the program is not loaded (call anec_load)");
    uint64_t t0 = now_ns();
    char err[ERR_LEN];
    err[0] = 0;
    int rc = rt->drv->evaluate(rt->ctx, p->dprog, in, n_in, out, n_out, err, sizeof err);
    if (rc != ANEC_OK)
        return rt_fail(rt, rc, "%s", err);
    uint64_t dt = now_ns() - t0;
    rt->st.evaluations++;
    rt->st.ns_evaluate += dt;
    p->st.evaluations++;
    p->st.ns_evaluate += dt;
    return ANEC_OK;
}

int anec_run(anec_program *p)
{
    if (!p)
        return ANEC_EINVAL;
    anec_surface *in[64], *out[64];
    anec_surface **ip = p->n_in <= 64 ? in : malloc(p->n_in * sizeof *ip);
    anec_surface **op = p->n_out <= 64 ? out : malloc(p->n_out * sizeof *op);
    int rc;
    if (!ip || !op) {
        rc = rt_fail(p->rt, ANEC_ENOMEM, "out of memory");
    } else {
        for (size_t i = 0; i < p->n_in; i++)
            ip[i] = &p->in_s[i];
        for (size_t i = 0; i < p->n_out; i++)
            op[i] = &p->out_s[i];
        rc = eval_surfaces(p, ip, p->n_in, op, p->n_out);
    }
    if (ip && ip != in)
        free(ip);
    if (op && op != out)
        free(op);
    return rc;
}

int anec_evaluate(anec_program *p, const anec_buffer *inputs, size_t n_in, anec_buffer *outputs, size_t n_out)
{
    if (!p)
        return ANEC_EINVAL;
    anec_runtime *rt = p->rt;
    if ((!inputs && n_in) || (!outputs && n_out))
        return rt_fail(rt, ANEC_EINVAL, "anec_evaluate: NULL buffer array");
    for (size_t i = 0; i < n_in; i++)
        if (!inputs[i].data && inputs[i].bytes)
            return rt_fail(rt, ANEC_EINVAL, "anec_evaluate: input buffer %zu has no memory", i);
    for (size_t i = 0; i < n_out; i++)
        if (!outputs[i].data && outputs[i].bytes)
            return rt_fail(rt, ANEC_EINVAL, "anec_evaluate: output buffer %zu has no memory", i);
    /* device surfaces of exactly the caller's sizes (so the device sees what the caller allocated) */
    anec_surface *s = calloc(n_in + n_out + 1, sizeof *s);
    anec_surface **ptrs = calloc(n_in + n_out + 1, sizeof *ptrs);
    int rc = ANEC_OK;
    size_t made = 0;
    char err[512];
    if (!s || !ptrs)
        rc = rt_fail(rt, ANEC_ENOMEM, "out of memory");
    for (size_t i = 0; rc == ANEC_OK && i < n_in + n_out; i++) {
        size_t bytes = i < n_in ? inputs[i].bytes : outputs[i - n_in].bytes;
        if (rt->drv->surface_create(rt->ctx, bytes, &s[i], err, sizeof err)) {
            rc = rt_fail(rt, ANEC_ENOMEM, "cannot allocate a surface: %s", err);
            break;
        }
        made++;
        ptrs[i] = &s[i];
        if (i < n_in && bytes)
            memcpy(s[i].base, inputs[i].data, bytes);
    }
    if (rc == ANEC_OK)
        rc = eval_surfaces(p, ptrs, n_in, ptrs + n_in, n_out);
    if (rc == ANEC_OK)
        for (size_t j = 0; j < n_out; j++)
            if (outputs[j].bytes)
                memcpy(outputs[j].data, s[n_in + j].base, outputs[j].bytes);
    for (size_t i = 0; i < made; i++)
        rt->drv->surface_free(rt->ctx, &s[i]);
    free(s);
    free(ptrs);
    return rc;
}

/* ---- delta reload ------------------------------------------------------------------------------ */

int anec_reload_weights(anec_program *p, const anec_blob *blobs, size_t n_blobs)
{
    if (!p)
        return ANEC_EINVAL;
    anec_runtime *rt = p->rt;
    if (!blobs && n_blobs)
        return rt_fail(rt, ANEC_EINVAL, "anec_reload_weights: NULL blob array");
    uint64_t t0 = now_ns();
    /* 1. validate everything before touching anything */
    for (size_t i = 0; i < n_blobs; i++) {
        if (!blobs[i].path || (!blobs[i].data && blobs[i].len))
            return rt_fail(rt, ANEC_EINVAL, "reload: blob %zu has no path or data", i);
        int known = 0;
        for (size_t k = 0; k < p->n_files; k++)
            known |= strcmp(p->files[k], blobs[i].path) == 0;
        if (!known) {
            char list[1024] = "";
            for (size_t k = 0; k < p->n_files && strlen(list) < sizeof list - 200; k++) {
                strncat(list, k ? ", " : "", sizeof list - strlen(list) - 1);
                strncat(list, p->files[k], sizeof list - strlen(list) - 1);
            }
            return rt_fail(rt, ANEC_EWEIGHTS, "reload: %s is not a weight file of this program (its files: %s)",
                           blobs[i].path, p->n_files ? list : "none");
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(blobs[i].path, blobs[j].path) == 0)
                return rt_fail(rt, ANEC_EINVAL, "reload: weight file %s is given twice", blobs[i].path);
        int rc = check_blob(rt, p, &blobs[i], 1, "reload");
        if (rc != ANEC_OK)
            return rc;
    }
    /* 2. which files change */
    char *changed = calloc(n_blobs + 1, 1);
    if (!changed)
        return rt_fail(rt, ANEC_ENOMEM, "out of memory");
    size_t n_changed = 0;
    for (size_t i = 0; i < n_blobs; i++) {
        char *path = join(p->dir->path, rel_path(blobs[i].path));
        if (!path) {
            free(changed);
            return rt_fail(rt, ANEC_ENOMEM, "out of memory");
        }
        changed[i] = !file_equals(path, blobs[i].data, blobs[i].len);
        n_changed += (size_t)changed[i];
        free(path);
    }
    int rc = ANEC_OK;
    int was_loaded = p->loaded;
    char err[ERR_LEN];
    err[0] = 0;
    if (n_changed == 0)
        goto done;
    if (p->dir->refs > 1) {
        /* 3a. shared directory: patch a private copy and move the program onto it */
        rt_dir *nd = dir_copy(rt, p->dir);
        if (!nd) {
            free(changed);
            return ANEC_EIO;
        }
        for (size_t i = 0; i < n_blobs && rc == ANEC_OK; i++) {
            if (!changed[i])
                continue;
            char *path = join(nd->path, rel_path(blobs[i].path));
            char why[1024];
            if (!path || write_atomic(path, blobs[i].data, blobs[i].len, why, sizeof why))
                rc = rt_fail(rt, ANEC_EIO, "reload: %s", path ? why : "out of memory");
            free(path);
        }
        void *np = NULL;
        if (rc == ANEC_OK) {
            if (rt->drv->clone) {
                rc = rt->drv->clone(rt->ctx, p->dprog, nd->path, &np, err, sizeof err);
                if (rc != ANEC_OK)
                    rt_fail(rt, rc, "reload: %s", err);
            } else {
                rc = rt_fail(rt, ANEC_EDRIVER, "reload: the %s driver cannot move a program to a private directory "
                             "(no clone); free the other programs sharing %s first", rt->drv->name, p->dir->path);
            }
        }
        if (rc != ANEC_OK) {
            dir_release(rt, nd);
            free(changed);
            return rc;
        }
        if (was_loaded)
            anec_unload(p);
        rt->drv->release(rt->ctx, p->dprog);
        p->dprog = np;
        dir_release(rt, p->dir);
        p->dir = nd;
    } else {
        /* 3b. private directory: temp files first (nothing changes if one fails), then swap */
        char **tmps = calloc(n_blobs + 1, sizeof *tmps);
        char **dsts = calloc(n_blobs + 1, sizeof *dsts);
        if (!tmps || !dsts) {
            free(tmps);
            free(dsts);
            free(changed);
            return rt_fail(rt, ANEC_ENOMEM, "out of memory");
        }
        for (size_t i = 0; i < n_blobs && rc == ANEC_OK; i++) {
            if (!changed[i])
                continue;
            dsts[i] = join(p->dir->path, rel_path(blobs[i].path));
            tmps[i] = dsts[i] ? temp_name(dsts[i]) : NULL;
            char why[1024];
            if (!tmps[i]) {
                rc = rt_fail(rt, ANEC_ENOMEM, "out of memory");
            } else if (write_temp(tmps[i], blobs[i].data, blobs[i].len, why, sizeof why)) {
                free(tmps[i]);
                tmps[i] = NULL;
                rc = rt_fail(rt, ANEC_EIO, "reload: %s; the old weights stay in use", why);
            }
        }
        if (rc == ANEC_OK) {
            if (was_loaded)
                anec_unload(p);
            for (size_t i = 0; i < n_blobs && rc == ANEC_OK; i++) {
                if (!tmps[i])
                    continue;
                if (rename(tmps[i], dsts[i])) {
                    rc = rt_fail(rt, ANEC_EIO, "reload: rename to %s failed: %s", dsts[i], strerror(errno));
                } else {
                    free(tmps[i]);
                    tmps[i] = NULL;
                }
            }
            fsync_dir(p->dir->path);
            p->dir->shareable = 0;
        }
        for (size_t i = 0; i < n_blobs; i++) {
            if (tmps[i]) {
                unlink(tmps[i]);
                free(tmps[i]);
            }
            free(dsts[i]);
        }
        free(tmps);
        free(dsts);
        if (rc != ANEC_OK) {
            free(changed);
            return rc;
        }
    }
    /* 4. load the new weights */
    if (was_loaded)
        rc = anec_load(p);
done:
    free(changed);
    if (rc == ANEC_OK) {
        uint64_t dt = now_ns() - t0;
        rt->st.reloads++;
        rt->st.blobs_patched += n_changed;
        rt->st.ns_reload += dt;
        p->st.reloads++;
        p->st.blobs_patched += n_changed;
        p->st.ns_reload += dt;
    }
    return rc;
}
