/*
 * fake_apple.c - the recording fake of the Apple side of the ane driver.
 * See fake_apple.h for what it models; test-only, Linux (POSIX file calls).
 */
#define _GNU_SOURCE
#include "fake_apple.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FK_ALIVE 0xA11FEu
#define FK_DEAD 0xDEADu
#define FK_SEL_MAGIC 0x5E1u

/* ------------------------------------------------------------------------ */
/* state                                                                     */

typedef struct fk_sel {
    uint32_t magic;
    char *name;
    struct fk_sel *next;
} fk_sel;

typedef struct { char **v; size_t n, cap; } strlist;

static struct {
    char root[1024];
    ane_syms syms;
    fk_obj *all;                /* every object ever created (freed at reset) */
    int serial;
    fk_sel *sels;
    strlist calls, violations;
    char fail_sel[256];
    char *fail_desc;
    int fail_has_error;
    char hidden[8][64];
    int n_hidden;
    /* autorelease pools */
    fk_obj **pool;
    size_t pool_n, pool_cap;
    size_t marks[64];
    int depth;
    /* immortal objects */
    fk_obj *classes[8];
    fk_obj *file_manager;
    fk_obj *surface_keys[6];
    int cb_dict_key, cb_dict_value, cb_array;   /* their addresses are the callbacks */
    fk_reading reading;         /* what a load reads (fk_set_device) */
    int hex_content;            /* hexStringIdentifier covers the weight values too */
    /* FK_LOAD_MEMORY_SHARED: the weights of the last compile per hexStringIdentifier */
    struct { char hex[17]; uint64_t wsum; } hex_cache[64];
    int n_hex_cache;
} F;

static const char *const k_class_names[8] = {
    "_ANEInMemoryModelDescriptor", "_ANEInMemoryModel", "_ANERequest", "_ANEIOSurfaceObject",
    "NSFileManager", "NSData", NULL, NULL,
};
enum { K_DESC, K_MODEL, K_REQUEST, K_IOSOBJ, K_FILEMANAGER, K_DATA, K_NCLASSES };

static const char *const k_surface_keys[6] = {
    "IOSurfaceWidth", "IOSurfaceHeight", "IOSurfaceBytesPerElement",
    "IOSurfaceBytesPerRow", "IOSurfaceAllocSize", "IOSurfacePixelFormat",
};

static void sl_push(strlist *l, char *s)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        if (!l->v)
            abort();
    }
    l->v[l->n++] = s;
}

static void sl_clear(strlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    l->n = 0;
}

static char *vfmt(const char *fmt, va_list ap)
{
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        abort();
    return s;
}

static void record(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void record(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sl_push(&F.calls, vfmt(fmt, ap));
    va_end(ap);
}

static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void violation(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sl_push(&F.violations, vfmt(fmt, ap));
    va_end(ap);
}

/* ------------------------------------------------------------------------ */
/* objects                                                                   */

int fk_alive(const fk_obj *o)
{
    if (!o)
        return 0;
    for (fk_obj *p = F.all; p; p = p->next_all)
        if (p == o)
            return p->magic == FK_ALIVE;
    return 0;
}

static fk_obj *new_obj(fk_kind kind, const char *cls)
{
    fk_obj *o = calloc(1, sizeof *o);
    if (!o)
        abort();
    o->magic = FK_ALIVE;
    o->kind = kind;
    o->cls = cls;
    o->rc = 1;
    o->serial = ++F.serial;
    o->next_all = F.all;
    F.all = o;
    return o;
}

static fk_obj *new_string(const char *s)
{
    fk_obj *o = new_obj(FK_STRING, "NSString");
    o->str = strdup(s);
    return o;
}

static fk_obj *new_data(const void *bytes, size_t len)
{
    fk_obj *o = new_obj(FK_DATA, "NSData");
    o->bytes = malloc(len ? len : 1);
    if (len)
        memcpy(o->bytes, bytes, len);
    o->len = len;
    return o;
}

/* Check an id argument: NULL or a live fake object. */
static fk_obj *obj(const void *p, const char *what)
{
    if (!p)
        return NULL;
    for (fk_obj *o = F.all; o; o = o->next_all) {
        if (o == p) {
            if (o->magic != FK_ALIVE) {
                violation("%s: object #%d (%s) used after it was freed", what, o->serial, o->cls);
                return NULL;
            }
            return o;
        }
    }
    violation("%s: %p is not an object", what, p);
    return NULL;
}

static void release_obj(fk_obj *o);

static void retain_obj(fk_obj *o)
{
    if (o && !o->immortal)
        o->rc++;
}

static void destroy(fk_obj *o)
{
    if (o->kind == FK_SURFACE && o->locks > 0)
        violation("IOSurface #%d freed while CPU-locked", o->serial);
    o->magic = FK_DEAD;
    for (size_t i = 0; i < o->n; i++) {
        if (o->keys)
            release_obj(o->keys[i]);
        release_obj(o->vals[i]);
    }
    for (int i = 0; i < o->n_refs; i++)
        release_obj(o->refs[i]);
    free(o->bytes);
    free(o->shadow);
    o->bytes = NULL;
    o->shadow = NULL;
}

static void release_obj(fk_obj *o)
{
    if (!o || o->immortal)
        return;
    if (o->magic != FK_ALIVE) {
        violation("release of freed object #%d (%s)", o->serial, o->cls);
        return;
    }
    if (o->rc <= 0) {
        violation("over-release of object #%d (%s)", o->serial, o->cls);
        return;
    }
    if (--o->rc == 0)
        destroy(o);
}

static void add_ref(fk_obj *o, fk_obj *member)
{
    retain_obj(member);
    o->refs[o->n_refs++] = member;
}

static fk_obj *autorelease(fk_obj *o)
{
    if (F.depth == 0) {
        violation("object #%d (%s) autoreleased with no pool in place", o->serial, o->cls);
        return o;
    }
    if (F.pool_n == F.pool_cap) {
        F.pool_cap = F.pool_cap ? 2 * F.pool_cap : 64;
        F.pool = realloc(F.pool, F.pool_cap * sizeof *F.pool);
        if (!F.pool)
            abort();
    }
    F.pool[F.pool_n++] = o;
    return o;
}

static void coll_add(fk_obj *c, fk_obj *key, fk_obj *val)
{
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 4;
        c->vals = realloc(c->vals, c->cap * sizeof *c->vals);
        if (c->kind == FK_DICT)
            c->keys = realloc(c->keys, c->cap * sizeof *c->keys);
        if (!c->vals || (c->kind == FK_DICT && !c->keys))
            abort();
    }
    retain_obj(val);
    c->vals[c->n] = val;
    if (c->kind == FK_DICT) {
        retain_obj(key);
        c->keys[c->n] = key;
    }
    c->n++;
}

fk_obj *fk_dict_get(const fk_obj *d, const char *key)
{
    if (!d || d->kind != FK_DICT)
        return NULL;
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i]->kind == FK_STRING && strcmp(d->keys[i]->str, key) == 0)
            return d->vals[i];
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* rendering for the call log                                                */

static void render(const void *p, char *buf, size_t n)
{
    fk_obj *o = obj(p, "argument");
    if (!p) {
        snprintf(buf, n, "nil");
    } else if (!o) {
        snprintf(buf, n, "<invalid>");
    } else if (o->kind == FK_STRING) {
        size_t rl = strlen(F.root);
        if (rl && strncmp(o->str, F.root, rl) == 0)
            snprintf(buf, n, "NSString\"$TMP%s\"", o->str + rl);
        else
            snprintf(buf, n, "NSString\"%s\"", o->str);
    } else if (o->kind == FK_DATA) {
        snprintf(buf, n, "NSData[%zu]", o->len);
    } else if (o->kind == FK_NUMBER) {
        snprintf(buf, n, "@%lld", (long long)o->num);
    } else if (o->kind == FK_DICT) {
        snprintf(buf, n, "NSDictionary{%zu}", o->n);
    } else if (o->kind == FK_ARRAY) {
        int numbers = 1;
        for (size_t i = 0; i < o->n; i++)
            numbers = numbers && o->vals[i]->kind == FK_NUMBER;
        if (numbers) {
            size_t k = (size_t)snprintf(buf, n, "@[");
            for (size_t i = 0; i < o->n && k < n; i++)
                k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "",
                                      (long long)o->vals[i]->num);
            if (k < n)
                snprintf(buf + k, n - k, "]");
        } else {
            snprintf(buf, n, "NSArray[%zu x %s]", o->n, o->n ? o->vals[0]->cls : "-");
        }
    } else if (o->kind == FK_SURFACE) {
        snprintf(buf, n, "IOSurface(%lld)", (long long)o->props[4]);
    } else {
        snprintf(buf, n, "%s", o->cls);
    }
}

/* "+Class" or "-Class" */
static void receiver(fk_obj *self, char *buf, size_t n)
{
    if (!self)
        snprintf(buf, n, "nil");
    else if (self->kind == FK_CLASS)
        snprintf(buf, n, "+%s", self->str);
    else
        snprintf(buf, n, "-%s", self->cls);
}

/* ------------------------------------------------------------------------ */
/* selectors and injected failures                                           */

static ane_sel fk_sel_register(const char *name)
{
    for (fk_sel *s = F.sels; s; s = s->next)
        if (strcmp(s->name, name) == 0)
            return s;
    fk_sel *s = calloc(1, sizeof *s);
    if (!s)
        abort();
    s->magic = FK_SEL_MAGIC;
    s->name = strdup(name);
    s->next = F.sels;
    F.sels = s;
    return s;
}

static const char *sel_name(ane_sel op)
{
    for (fk_sel *s = F.sels; s; s = s->next)
        if ((void *)s == op)
            return s->name;
    violation("%p is not a registered selector", op);
    return "?";
}

static int failing(const char *sel)
{
    return F.fail_sel[0] && strcmp(F.fail_sel, sel) == 0;
}

/* Fail a BOOL method: set *error (autoreleased) when a description was given. */
static ane_bool fail_with_error(ane_id *error)
{
    if (F.fail_has_error && error) {
        fk_obj *e = new_obj(FK_ERROR, "NSError");
        e->str = strdup(F.fail_desc);
        *error = autorelease(e);
    }
    return 0;
}

static ane_bool device_error(ane_id *error, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static ane_bool device_error(ane_id *error, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = vfmt(fmt, ap);
    va_end(ap);
    if (error) {
        fk_obj *e = new_obj(FK_ERROR, "NSError");
        e->str = s;
        *error = autorelease(e);
    } else {
        free(s);
    }
    return 0;
}

static void unexpected(const char *slot, fk_obj *self, const char *sel)
{
    char r[128];
    receiver(self, r, sizeof r);
    violation("unexpected %s %s through %s", r, sel, slot);
}

/* ------------------------------------------------------------------------ */
/* files (the fake device and NSFileManager act on the real file system)    */

static int read_file(const char *path, uint8_t **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t cap = 4096, n = 0;
    uint8_t *b = malloc(cap);
    size_t r;
    while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            cap *= 2;
            b = realloc(b, cap);
        }
    }
    fclose(f);
    if (!b)
        abort();
    *out = b;
    *len = n;
    return 0;
}

static int write_file(const char *path, const uint8_t *bytes, size_t len)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.fk-tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return -1;
    int ok = fwrite(bytes, 1, len, f) == len;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

static int mkdir_p(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    return (mkdir(buf, 0755) != 0 && errno != EEXIST) ? -1 : 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int rm_rf(const char *path)
{
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ------------------------------------------------------------------------ */
/* the fake device                                                           */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static int cmp_keys(const void *a, const void *b)
{
    const fk_obj *const *x = a, *const *y = b;
    return strcmp((*x)->str, (*y)->str);
}

/* The weights dictionary's keys, sorted. */
static fk_obj **sorted_keys(const fk_obj *weights)
{
    fk_obj **k = calloc(weights->n + 1, sizeof *k);
    if (!k)
        abort();
    if (weights->n) {
        memcpy(k, weights->keys, weights->n * sizeof *k);
        qsort(k, weights->n, sizeof *k, cmp_keys);
    }
    return k;
}

uint64_t fk_weights_hash(const char *const *contents, const size_t *lens, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = fnv(h, contents[i], lens[i]);
    return h;
}

uint8_t fk_expected_output(const uint8_t *const *inputs, const size_t *in_len, size_t n_in,
                           uint64_t wsum, size_t j, size_t k)
{
    unsigned v = (unsigned)((wsum >> (8 * (k % 8))) & 0xff) + (unsigned)j;
    for (size_t i = 0; i < n_in; i++)
        v += (unsigned)(i + 1) * inputs[i][k % in_len[i]];
    return (uint8_t)v;
}

/* NSTemporaryDirectory()/<hexId> of a model. */
static void model_dir(const fk_obj *m, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", F.root, m->hex);
}

/* "@model_path/x" -> dir/x */
static void weight_file(const char *dir, const char *key, char *buf, size_t n)
{
    const char *prefix = "@model_path/";
    if (strncmp(key, prefix, strlen(prefix)) != 0)
        violation("weights key '%s' does not start with @model_path/", key);
    snprintf(buf, n, "%s/%s", dir, key + (strncmp(key, prefix, strlen(prefix)) ? 0 : strlen(prefix)));
}

/* Number of BLOBFILE tensors the MIL text declares. */
static size_t blob_tensors(const fk_obj *mil)
{
    size_t n = 0;
    const char *needle = "BLOBFILE(";
    size_t nl = strlen(needle);
    for (size_t i = 0; i + nl <= mil->len; i++)
        n += memcmp(mil->bytes + i, needle, nl) == 0;
    return n;
}

/* The data file the fake compiler writes for these weights. */
static uint8_t *compiled_data(const fk_obj *mil, const fk_obj *weights, size_t *len)
{
    fk_obj **keys = sorted_keys(weights);
    uint8_t *out = NULL;
    if (blob_tensors(mil) == 1 && weights->n == 1) {
        fk_obj *data = fk_dict_get(fk_dict_get(weights, keys[0]->str), "data");
        *len = data ? data->len : 0;
        out = malloc(*len ? *len : 1);
        if (out && *len)
            memcpy(out, data->bytes, *len);
    } else {
        size_t total = 8;
        for (size_t i = 0; i < weights->n; i++) {
            fk_obj *data = fk_dict_get(fk_dict_get(weights, keys[i]->str), "data");
            total += 8 + (data ? data->len : 0);
        }
        out = malloc(total);
        if (out) {
            memcpy(out, "FKOPAQUE", 8);
            size_t o = 8;
            for (size_t i = 0; i < weights->n; i++) {
                fk_obj *data = fk_dict_get(fk_dict_get(weights, keys[i]->str), "data");
                uint64_t l = data ? data->len : 0;
                memcpy(out + o, &l, 8);
                if (l)
                    memcpy(out + o + 8, data->bytes, l);
                o += 8 + l;
            }
        }
        *len = total;
    }
    free(keys);
    if (!out)
        abort();
    return out;
}

uint64_t fk_compiled_hash(const char *mil, const char *const *paths, const uint8_t *const *datas,
                          const size_t *lens, size_t n)
{
    if (F.reading == FK_LOAD_WEIGHTS) {
        /* load hashes the weight files in path order */
        const char *c[16];
        size_t l[16];
        size_t order[16];
        for (size_t i = 0; i < n; i++)
            order[i] = i;
        for (size_t i = 1; i < n; i++)
            for (size_t j = i; j > 0 && strcmp(paths[order[j - 1]], paths[order[j]]) > 0; j--) {
                size_t t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            }
        for (size_t i = 0; i < n; i++) {
            c[i] = (const char *)datas[order[i]];
            l[i] = lens[order[i]];
        }
        return fk_weights_hash(c, l, n);
    }
    fk_obj *m = new_data(mil, strlen(mil));
    fk_obj *d = new_obj(FK_DICT, "NSDictionary");
    for (size_t i = 0; i < n; i++) {
        fk_obj *e = new_obj(FK_DICT, "NSDictionary");
        fk_obj *k = new_string("data"), *v = new_data(datas[i], lens[i]), *pk = new_string(paths[i]);
        coll_add(e, k, v);
        coll_add(d, pk, e);
        release_obj(k);
        release_obj(v);
        release_obj(pk);
        release_obj(e);
    }
    size_t len;
    uint8_t *b = compiled_data(m, d, &len);
    const char *c[1] = {(const char *)b};
    uint64_t h = fk_weights_hash(c, &len, 1);
    free(b);
    release_obj(d);
    release_obj(m);
    return h;
}

void fk_set_device(fk_reading reading, int hex_content)
{
    F.reading = reading;
    F.hex_content = hex_content;
}

const char *fk_reading_name(fk_reading reading)
{
    switch (reading) {
    case FK_LOAD_DATA: return "baked (load reads data)";
    case FK_LOAD_WEIGHTS: return "optimistic (load re-reads weights/)";
    case FK_LOAD_MEMORY: return "in-memory (per object)";
    case FK_LOAD_MEMORY_SHARED: return "in-memory, cached per hexId";
    }
    return "?";
}

/* FK_LOAD_MEMORY_SHARED: the cached weights of a hexId (1), or 0. */
static int hex_cache_get(const char *hex, uint64_t *wsum)
{
    for (int i = 0; i < F.n_hex_cache; i++)
        if (strcmp(F.hex_cache[i].hex, hex) == 0) {
            *wsum = F.hex_cache[i].wsum;
            return 1;
        }
    return 0;
}

static void hex_cache_put(const char *hex, uint64_t wsum)
{
    int i = 0;
    while (i < F.n_hex_cache && strcmp(F.hex_cache[i].hex, hex) != 0)
        i++;
    if (i == F.n_hex_cache) {
        if (F.n_hex_cache == 64)
            abort();
        F.n_hex_cache++;
    }
    snprintf(F.hex_cache[i].hex, sizeof F.hex_cache[i].hex, "%s", hex);
    F.hex_cache[i].wsum = wsum;
}

static ane_bool device_compile(fk_obj *m, ane_id *error)
{
    fk_obj *desc = m->refs[0], *mil = desc->refs[0], *weights = desc->refs[1];
    char dir[2048], path[4200];
    model_dir(m, dir, sizeof dir);
    uint8_t *b;
    size_t len;
    snprintf(path, sizeof path, "%s/model.mil", dir);
    if (read_file(path, &b, &len) != 0)
        return device_error(error, "ANECCompile() FAILED: model.mil missing in %s", dir);
    int same = len == mil->len && memcmp(b, mil->bytes, len) == 0;
    free(b);
    if (!same)
        return device_error(error, "model.mil in the temp dir differs from the MIL text");
    for (size_t i = 0; i < weights->n; i++) {
        fk_obj *entry = weights->vals[i];
        fk_obj *data = fk_dict_get(entry, "data");
        weight_file(dir, weights->keys[i]->str, path, sizeof path);
        if (read_file(path, &b, &len) != 0)
            return device_error(error, "ANECCompile() FAILED: weight file %s missing", path);
        same = data && len == data->len && memcmp(b, data->bytes, len) == 0;
        free(b);
        if (!same)
            return device_error(error, "weight file %s differs from the weights dictionary",
                                path);
    }
    /* The compiler leaves its output in the directory, like the device: the
       network and the baked weights. For a program with one BLOBFILE tensor
       `data` is that BLOBFILE's bytes (Orion's E5 spike); otherwise it is an
       opaque container. */
    size_t dlen = 0;
    uint8_t *data = compiled_data(mil, weights, &dlen);
    snprintf(path, sizeof path, "%s/data", dir);
    int ok = write_file(path, data, dlen) == 0;
    if (F.reading == FK_LOAD_MEMORY || F.reading == FK_LOAD_MEMORY_SHARED) {
        /* the framework keeps the compiled weights in the model object (and,
           in the shared reading, per hexStringIdentifier) */
        const char *c[1] = {(const char *)data};
        m->mem_wsum = fk_weights_hash(c, &dlen, 1);
        m->has_mem = 1;
        if (F.reading == FK_LOAD_MEMORY_SHARED)
            hex_cache_put(m->hex, m->mem_wsum);
    }
    free(data);
    snprintf(path, sizeof path, "%s/net.plist", dir);
    char net[64];
    int nl = snprintf(net, sizeof net, "fake-net %s", m->hex);
    if (!ok || write_file(path, (const uint8_t *)net, (size_t)nl) != 0)
        return device_error(error, "cannot write the compiled form in %s", dir);
    m->compiled = 1;
    return 1;
}

static ane_bool device_load(fk_obj *m, ane_id *error)
{
    fk_obj *weights = m->refs[0]->refs[1];
    char dir[2048], path[4200];
    model_dir(m, dir, sizeof dir);
    int memory = F.reading == FK_LOAD_MEMORY || F.reading == FK_LOAD_MEMORY_SHARED;
    uint64_t cached;
    if (memory && (m->has_mem || (F.reading == FK_LOAD_MEMORY_SHARED && hex_cache_get(m->hex, &cached)))) {
        /* in memory: the object's own weights, else those cached for its hexId; no file is read */
        m->wsum = m->has_mem ? m->mem_wsum : cached;
        m->mem_wsum = m->wsum;
        m->has_mem = 1;
        m->loaded = 1;
        m->num = ++F.serial; /* requests built before this load are stale */
        return 1;
    }
    snprintf(path, sizeof path, "%s/net.plist", dir);
    if (access(path, F_OK) != 0)
        return device_error(error, "no compiled network in %s", dir);
    if (F.reading != FK_LOAD_WEIGHTS) {
        /* the evidenced device: load reads the compiled data, never weights/ */
        uint8_t *b;
        size_t len;
        snprintf(path, sizeof path, "%s/data", dir);
        if (read_file(path, &b, &len) != 0)
            return device_error(error, "load: compiled data missing in %s", dir);
        const char *c[1] = {(const char *)b};
        m->wsum = fk_weights_hash(c, &len, 1);
        m->loaded = 1;
        m->num = ++F.serial; /* requests built before this load are stale */
        if (memory) { /* a never-compiled object keeps what its first load read */
            m->mem_wsum = m->wsum;
            m->has_mem = 1;
        }
        free(b);
        return 1;
    }
    fk_obj **keys = sorted_keys(weights);
    const char **contents = calloc(weights->n + 1, sizeof *contents);
    size_t *lens = calloc(weights->n + 1, sizeof *lens);
    ane_bool ok = 1;
    for (size_t i = 0; i < weights->n; i++) {
        weight_file(dir, keys[i]->str, path, sizeof path);
        uint8_t *b;
        if (read_file(path, &b, &lens[i]) != 0) {
            ok = device_error(error, "load: weight file %s missing", path);
            break;
        }
        contents[i] = (const char *)b;
    }
    if (ok) {
        m->wsum = fk_weights_hash(contents, lens, weights->n);
        m->loaded = 1;
        m->num = ++F.serial; /* requests built before this load are stale */
    }
    for (size_t i = 0; i < weights->n; i++)
        free((void *)contents[i]);
    free(contents);
    free(lens);
    free(keys);
    return ok;
}

static ane_bool device_evaluate(fk_obj *m, fk_obj *req, ane_id *error)
{
    fk_obj *in = req->refs[0], *out = req->refs[2];
    for (int a = 0; a < 2; a++) {
        fk_obj *arr = a ? out : in;
        for (size_t i = 0; i < arr->n; i++) {
            fk_obj *s = arr->vals[i]->refs[0];
            if (s->locks) {
                violation("evaluate with IOSurface #%d still CPU-locked", s->serial);
                return device_error(error, "evaluate: IOSurface #%d is locked by the CPU", s->serial);
            }
        }
    }
    const uint8_t *ins[16];
    size_t lens[16];
    if (in->n > 16)
        return device_error(error, "too many inputs");
    for (size_t i = 0; i < in->n; i++) {
        fk_obj *s = in->vals[i]->refs[0];
        ins[i] = s->shadow; /* the device's view */
        lens[i] = s->len;
    }
    for (size_t j = 0; j < out->n; j++) {
        fk_obj *s = out->vals[j]->refs[0];
        for (size_t k = 0; k < s->len; k++)
            s->shadow[k] = fk_expected_output(ins, lens, in->n, m->wsum, j, k);
    }
    return 1;
}

/* ------------------------------------------------------------------------ */
/* libobjc                                                                   */

static ane_class fk_getClass(const char *name)
{
    for (int i = 0; i < F.n_hidden; i++)
        if (strcmp(F.hidden[i], name) == 0)
            return NULL;
    for (int i = 0; i < K_NCLASSES; i++)
        if (strcmp(k_class_names[i], name) == 0)
            return F.classes[i];
    return NULL;
}

static void *fk_pool_push(void)
{
    if (F.depth == 64)
        abort();
    F.marks[F.depth++] = F.pool_n;
    return (void *)(uintptr_t)(0x1000 + F.depth);
}

static void fk_pool_pop(void *token)
{
    if (F.depth == 0 || token != (void *)(uintptr_t)(0x1000 + F.depth)) {
        violation("autorelease pool popped out of order");
        return;
    }
    size_t mark = F.marks[--F.depth];
    while (F.pool_n > mark)
        release_obj(F.pool[--F.pool_n]);
}

/* ---- msg slots */

static ane_id fk_msg0(ane_id self_, ane_sel op)
{
    fk_obj *self = obj(self_, "receiver");
    const char *sel = sel_name(op);
    char r[128];
    receiver(self, r, sizeof r);
    record("%s %s", r, sel);
    if (!self)
        return NULL;
    if (self->kind == FK_MODEL && strcmp(sel, "hexStringIdentifier") == 0)
        return autorelease(new_string(self->hex));
    if (self->kind == FK_ERROR && strcmp(sel, "description") == 0)
        return autorelease(new_string(self->str));
    if (self == F.classes[K_FILEMANAGER] && strcmp(sel, "defaultManager") == 0)
        return F.file_manager;
    unexpected("msg0", self, sel);
    return NULL;
}

static const char *fk_msg_cstr(ane_id self_, ane_sel op)
{
    fk_obj *self = obj(self_, "receiver");
    const char *sel = sel_name(op);
    char r[128];
    receiver(self, r, sizeof r);
    record("%s %s", r, sel);
    if (self && self->kind == FK_STRING && strcmp(sel, "UTF8String") == 0)
        return self->str;
    unexpected("msg_cstr", self, sel);
    return NULL;
}

static ane_id fk_msg1(ane_id self_, ane_sel op, ane_id a_)
{
    fk_obj *self = obj(self_, "receiver");
    const char *sel = sel_name(op);
    fk_obj *a = obj(a_, sel);
    char r[128], ra[128];
    receiver(self, r, sizeof r);
    render(a_, ra, sizeof ra);
    record("%s %s %s", r, sel, ra);
    if (!self)
        return NULL;
    if (self == F.classes[K_MODEL] && strcmp(sel, "inMemoryModelWithDescriptor:") == 0) {
        if (!a || a->kind != FK_DESC) {
            violation("inMemoryModelWithDescriptor: argument is not a descriptor");
            return NULL;
        }
        if (failing(sel))
            return NULL;
        fk_obj *m = new_obj(FK_MODEL, "_ANEInMemoryModel");
        add_ref(m, a);
        /* Like the framework: the identity depends on the MIL text and the
           weight paths, not on the weight values. */
        fk_obj *mil = a->refs[0], *weights = a->refs[1];
        uint64_t h = fnv(0xcbf29ce484222325ull, mil->bytes, mil->len);
        fk_obj **keys = sorted_keys(weights);
        for (size_t i = 0; i < weights->n; i++) {
            h = fnv(fnv(h, "", 1), keys[i]->str, strlen(keys[i]->str));
            if (F.hex_content) { /* maderix's reading: the weight values count too */
                fk_obj *data = fk_dict_get(fk_dict_get(weights, keys[i]->str), "data");
                if (data)
                    h = fnv(h, data->bytes, data->len);
            }
        }
        free(keys);
        snprintf(m->hex, sizeof m->hex, "%016llx", (unsigned long long)h);
        return autorelease(m);
    }
    if (self == F.classes[K_IOSOBJ] && strcmp(sel, "objectWithIOSurface:") == 0) {
        if (!a || a->kind != FK_SURFACE) {
            violation("objectWithIOSurface: argument is not an IOSurface");
            return NULL;
        }
        if (a->locks)
            violation("objectWithIOSurface: IOSurface #%d is still CPU-locked", a->serial);
        if (failing(sel))
            return NULL;
        fk_obj *w = new_obj(FK_IOSOBJ, "_ANEIOSurfaceObject");
        add_ref(w, a);
        return autorelease(w);
    }
    if (self == F.classes[K_DATA] && strcmp(sel, "dataWithContentsOfFile:") == 0) {
        if (!a || a->kind != FK_STRING) {
            violation("dataWithContentsOfFile: argument is not an NSString");
            return NULL;
        }
        uint8_t *b;
        size_t len;
        if (failing(sel) || read_file(a->str, &b, &len) != 0)
            return NULL;
        fk_obj *d = new_data(b, len);
        free(b);
        return autorelease(d);
    }
    unexpected("msg1", self, sel);
    return NULL;
}

static ane_id fk_msg3(ane_id self_, ane_sel op, ane_id a_, ane_id b_, ane_id c_)
{
    fk_obj *self = obj(self_, "receiver");
    const char *sel = sel_name(op);
    fk_obj *a = obj(a_, sel), *b = obj(b_, sel), *c = obj(c_, sel);
    char r[128], ra[128], rb[128], rc[128];
    receiver(self, r, sizeof r);
    render(a_, ra, sizeof ra);
    render(b_, rb, sizeof rb);
    render(c_, rc, sizeof rc);
    record("%s %s %s %s %s", r, sel, ra, rb, rc);
    if (self != F.classes[K_DESC] ||
        strcmp(sel, "modelWithMILText:weights:optionsPlist:") != 0) {
        unexpected("msg3", self, sel);
        return NULL;
    }
    if (!a || a->kind != FK_DATA) {
        violation("modelWithMILText: MIL text is %s, not NSData", a ? a->cls : "nil");
        return NULL;
    }
    if (!b || b->kind != FK_DICT) {
        violation("modelWithMILText: weights is %s, not an NSDictionary (nil crashes)",
                  b ? b->cls : "nil");
        return NULL;
    }
    if (c)
        violation("modelWithMILText: optionsPlist is not nil");
    for (size_t i = 0; i < b->n; i++) {
        fk_obj *e = b->vals[i];
        fk_obj *off = fk_dict_get(e, "offset"), *data = fk_dict_get(e, "data");
        if (b->keys[i]->kind != FK_STRING || e->kind != FK_DICT || e->n != 2 || !off ||
            off->kind != FK_NUMBER || !data || data->kind != FK_DATA)
            violation("weights entry %zu is not {offset: NSNumber, data: NSData}", i);
    }
    if (failing(sel))
        return NULL;
    fk_obj *d = new_obj(FK_DESC, "_ANEInMemoryModelDescriptor");
    add_ref(d, a);
    add_ref(d, b);
    return autorelease(d);
}

static int is_index_array(const fk_obj *a, size_t n)
{
    if (!a || a->kind != FK_ARRAY || a->n != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (a->vals[i]->kind != FK_NUMBER || a->vals[i]->num != (int64_t)i)
            return 0;
    return 1;
}

static int is_surface_array(const fk_obj *a)
{
    if (!a || a->kind != FK_ARRAY || a->n == 0)
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (a->vals[i]->kind != FK_IOSOBJ)
            return 0;
    return 1;
}

static ane_id fk_msg7(ane_id self_, ane_sel op, ane_id a_, ane_id b_, ane_id c_, ane_id d_,
                      ane_id e_, ane_id f_, ane_id g_)
{
    fk_obj *self = obj(self_, "receiver");
    const char *sel = sel_name(op);
    ane_id args[7] = {a_, b_, c_, d_, e_, f_, g_};
    fk_obj *o[7];
    char r[128], ra[7][128];
    receiver(self, r, sizeof r);
    for (int i = 0; i < 7; i++) {
        o[i] = obj(args[i], sel);
        render(args[i], ra[i], sizeof ra[i]);
    }
    record("%s %s %s %s %s %s %s %s %s", r, sel, ra[0], ra[1], ra[2], ra[3], ra[4], ra[5],
           ra[6]);
    if (self != F.classes[K_REQUEST] ||
        strcmp(sel, "requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:"
                    "perfStats:procedureIndex:") != 0) {
        unexpected("msg7", self, sel);
        return NULL;
    }
    int ok = is_surface_array(o[0]) && is_surface_array(o[2]) &&
             is_index_array(o[1], o[0]->n) && is_index_array(o[3], o[2]->n);
    if (!ok)
        violation("request: inputs/outputs must be _ANEIOSurfaceObject arrays with indices "
                  "@0..@(n-1)");
    if (o[4] || o[5])
        violation("request: weightsBuffer and perfStats must be nil");
    if (!o[6] || o[6]->kind != FK_NUMBER || o[6]->num != 0)
        violation("request: procedureIndex must be the NSNumber @0");
    if (!ok || failing(sel))
        return NULL;
    fk_obj *q = new_obj(FK_REQUEST, "_ANERequest");
    for (int i = 0; i < 4; i++)
        add_ref(q, o[i]);
    return autorelease(q);
}

static int check_options(const char *sel, fk_obj *opts, ane_id *error)
{
    if (!opts || opts->kind != FK_DICT) {
        violation("%s: options must be an NSDictionary", sel);
        return 0;
    }
    if (!error)
        violation("%s: no error out-parameter", sel);
    return 1;
}

static ane_bool fk_msg_qos_opts_err(ane_id self_, ane_sel op, unsigned int qos, ane_id opts_,
                                    ane_id *error)
{
    fk_obj *self = obj(self_, "receiver");
    const char *sel = sel_name(op);
    fk_obj *opts = obj(opts_, sel);
    char r[128], ro[128];
    receiver(self, r, sizeof r);
    render(opts_, ro, sizeof ro);
    record("%s %s %u %s %s", r, sel, qos, ro, error ? "&error" : "NULL");
    if (!self || self->kind != FK_MODEL ||
        (strcmp(sel, "compileWithQoS:options:error:") != 0 &&
         strcmp(sel, "loadWithQoS:options:error:") != 0)) {
        unexpected("msg_qos_opts_err", self, sel);
        return 0;
    }
    if (!check_options(sel, opts, error))
        return 0;
    if (failing(sel))
        return fail_with_error(error);
    if (sel[0] == 'c')
        return device_compile(self, error);
    if (self->loaded)
        violation("load of a loaded model");
    return device_load(self, error);
}

static ane_bool fk_msg_qos_err(ane_id self_, ane_sel op, unsigned int qos, ane_id *error)
{
    fk_obj *self = obj(self_, "receiver");
    const char *sel = sel_name(op);
    char r[128];
    receiver(self, r, sizeof r);
    record("%s %s %u %s", r, sel, qos, error ? "&error" : "NULL");
    if (!self || self->kind != FK_MODEL || strcmp(sel, "unloadWithQoS:error:") != 0) {
        unexpected("msg_qos_err", self, sel);
        return 0;
    }
    if (!self->loaded)
        violation("unload of a model that is not loaded");
    if (failing(sel))
        return fail_with_error(error);
    self->loaded = 0;
    return 1;
}

static ane_bool fk_msg_qos_opts_req_err(ane_id self_, ane_sel op, unsigned int qos,
                                        ane_id opts_, ane_id req_, ane_id *error)
{
    fk_obj *self = obj(self_, "receiver");
    const char *sel = sel_name(op);
    fk_obj *opts = obj(opts_, sel), *req = obj(req_, sel);
    char r[128], ro[128], rq[128];
    receiver(self, r, sizeof r);
    render(opts_, ro, sizeof ro);
    render(req_, rq, sizeof rq);
    record("%s %s %u %s %s %s", r, sel, qos, ro, rq, error ? "&error" : "NULL");
    if (!self || self->kind != FK_MODEL ||
        strcmp(sel, "evaluateWithQoS:options:request:error:") != 0) {
        unexpected("msg_qos_opts_req_err", self, sel);
        return 0;
    }
    if (!check_options(sel, opts, error))
        return 0;
    if (!req || req->kind != FK_REQUEST) {
        violation("evaluate: request is not an _ANERequest");
        return 0;
    }
    if (!self->loaded)
        return device_error(error, "evaluate of a model that is not loaded");
    if (req->serial < self->num)
        violation("evaluate with an _ANERequest built before the model's last load");
    if (failing(sel))
        return fail_with_error(error);
    return device_evaluate(self, req, error);
}

static ane_bool fk_msg_write(ane_id self_, ane_sel op, ane_id path_, ane_bool atomically)
{
    fk_obj *self = obj(self_, "receiver");
    const char *sel = sel_name(op);
    fk_obj *path = obj(path_, sel);
    char r[128], rp[1200];
    receiver(self, r, sizeof r);
    render(path_, rp, sizeof rp);
    record("%s %s %s %s", r, sel, rp, atomically ? "YES" : "NO");
    if (!self || self->kind != FK_DATA || strcmp(sel, "writeToFile:atomically:") != 0 || !path ||
        path->kind != FK_STRING) {
        unexpected("msg_write", self, sel);
        return 0;
    }
    if (failing(sel))
        return 0;
    return write_file(path->str, self->bytes, self->len) == 0;
}

static ane_bool fk_msg_remove(ane_id self_, ane_sel op, ane_id path_, ane_id *error)
{
    fk_obj *self = obj(self_, "receiver");
    const char *sel = sel_name(op);
    fk_obj *path = obj(path_, sel);
    char r[128], rp[1200];
    receiver(self, r, sizeof r);
    render(path_, rp, sizeof rp);
    record("%s %s %s %s", r, sel, rp, error ? "&error" : "NULL");
    if (self != F.file_manager || strcmp(sel, "removeItemAtPath:error:") != 0 || !path ||
        path->kind != FK_STRING) {
        unexpected("msg_remove", self, sel);
        return 0;
    }
    if (failing(sel))
        return fail_with_error(error);
    if (rm_rf(path->str) != 0)
        return device_error(error, "cannot remove %s", path->str);
    return 1;
}

static ane_bool fk_msg_mkdir(ane_id self_, ane_sel op, ane_id path_, ane_bool intermediate,
                             ane_id attrs_, ane_id *error)
{
    fk_obj *self = obj(self_, "receiver");
    const char *sel = sel_name(op);
    fk_obj *path = obj(path_, sel);
    char r[128], rp[1200], ra[128];
    receiver(self, r, sizeof r);
    render(path_, rp, sizeof rp);
    render(attrs_, ra, sizeof ra);
    record("%s %s %s %s %s %s", r, sel, rp, intermediate ? "YES" : "NO", ra,
           error ? "&error" : "NULL");
    if (self != F.file_manager ||
        strcmp(sel, "createDirectoryAtPath:withIntermediateDirectories:attributes:error:") != 0 ||
        !path || path->kind != FK_STRING) {
        unexpected("msg_mkdir", self, sel);
        return 0;
    }
    if (failing(sel))
        return fail_with_error(error);
    if ((intermediate ? mkdir_p(path->str) : mkdir(path->str, 0755)) != 0)
        return device_error(error, "cannot create %s: %s", path->str, strerror(errno));
    return 1;
}

/* ------------------------------------------------------------------------ */
/* CoreFoundation                                                            */

static ane_id fk_CFDataCreate(const void *alloc, const uint8_t *bytes, ane_cfindex len)
{
    if (alloc)
        violation("CFDataCreate with a non-default allocator");
    record("CFDataCreate %ld", len);
    return new_data(bytes, (size_t)len);
}

static ane_cfindex fk_CFDataGetLength(ane_id d_)
{
    fk_obj *d = obj(d_, "CFDataGetLength");
    record("CFDataGetLength");
    if (!d || d->kind != FK_DATA) {
        violation("CFDataGetLength of a non-NSData");
        return 0;
    }
    return (ane_cfindex)d->len;
}

static const uint8_t *fk_CFDataGetBytePtr(ane_id d_)
{
    fk_obj *d = obj(d_, "CFDataGetBytePtr");
    record("CFDataGetBytePtr");
    if (!d || d->kind != FK_DATA) {
        violation("CFDataGetBytePtr of a non-NSData");
        return NULL;
    }
    return d->bytes;
}

static ane_id fk_CFDictionaryCreateMutable(const void *alloc, ane_cfindex cap, const void *kcb,
                                           const void *vcb)
{
    (void)cap;
    if (alloc)
        violation("CFDictionaryCreateMutable with a non-default allocator");
    if (kcb != &F.cb_dict_key || vcb != &F.cb_dict_value)
        violation("CFDictionaryCreateMutable without the kCFType callbacks");
    record("CFDictionaryCreateMutable");
    return new_obj(FK_DICT, "NSDictionary");
}

static void fk_CFDictionarySetValue(ane_id d_, const void *k_, const void *v_)
{
    fk_obj *d = obj(d_, "CFDictionarySetValue"), *k = obj(k_, "CFDictionarySetValue key"),
           *v = obj(v_, "CFDictionarySetValue value");
    char rk[1200], rv[128];
    render(k_, rk, sizeof rk);
    render(v_, rv, sizeof rv);
    record("CFDictionarySetValue %s %s", rk, rv);
    if (!d || d->kind != FK_DICT || !k || !v) {
        violation("CFDictionarySetValue on a non-dictionary or with a nil key/value");
        return;
    }
    for (size_t i = 0; i < d->n; i++) {
        if (d->keys[i]->kind == FK_STRING && k->kind == FK_STRING &&
            strcmp(d->keys[i]->str, k->str) == 0) {
            retain_obj(v);
            release_obj(d->vals[i]);
            d->vals[i] = v;
            return;
        }
    }
    coll_add(d, k, v);
}

static ane_id fk_CFNumberCreate(const void *alloc, ane_cfindex type, const void *value)
{
    if (alloc)
        violation("CFNumberCreate with a non-default allocator");
    if (type != ANE_CF_NUMBER_SINT64) {
        violation("CFNumberCreate with type %ld (expected kCFNumberSInt64Type)", type);
        return NULL;
    }
    fk_obj *n = new_obj(FK_NUMBER, "NSNumber");
    memcpy(&n->num, value, sizeof n->num);
    record("CFNumberCreate %lld", (long long)n->num);
    return n;
}

static ane_id fk_CFStringCreateWithCString(const void *alloc, const char *s, uint32_t enc)
{
    if (alloc)
        violation("CFStringCreateWithCString with a non-default allocator");
    if (enc != ANE_CF_STRING_ENCODING_UTF8)
        violation("CFStringCreateWithCString with encoding %#x (expected UTF-8)", enc);
    fk_obj *o = new_string(s);
    char r[1200];
    render(o, r, sizeof r);
    record("CFStringCreateWithCString %s", r);
    return o;
}

static ane_id fk_CFArrayCreate(const void *alloc, const void **values, ane_cfindex n,
                               const void *cb)
{
    if (alloc)
        violation("CFArrayCreate with a non-default allocator");
    if (cb != &F.cb_array)
        violation("CFArrayCreate without kCFTypeArrayCallBacks");
    fk_obj *a = new_obj(FK_ARRAY, "NSArray");
    for (ane_cfindex i = 0; i < n; i++) {
        fk_obj *v = obj(values[i], "CFArrayCreate value");
        if (v)
            coll_add(a, NULL, v);
    }
    char r[256];
    render(a, r, sizeof r);
    record("CFArrayCreate %s", r);
    return a;
}

static const void *fk_CFRetain(const void *p)
{
    fk_obj *o = obj(p, "CFRetain");
    char r[1200];
    render(p, r, sizeof r);
    record("CFRetain %s", r);
    if (!o)
        violation("CFRetain(NULL) crashes");
    retain_obj(o);
    return p;
}

static void fk_CFRelease(const void *p)
{
    char r[1200];
    if (!p) {
        violation("CFRelease(NULL) crashes");
        return;
    }
    render(p, r, sizeof r);
    record("CFRelease %s", r);
    for (fk_obj *o = F.all; o; o = o->next_all) {
        if (o == p) {
            release_obj(o);
            return;
        }
    }
    violation("CFRelease of %p, not an object", p);
}

/* ------------------------------------------------------------------------ */
/* IOSurface                                                                 */

static ane_id fk_IOSurfaceCreate(ane_id props_)
{
    fk_obj *props = obj(props_, "IOSurfaceCreate");
    if (!props || props->kind != FK_DICT) {
        violation("IOSurfaceCreate without a properties dictionary");
        return NULL;
    }
    fk_obj *s = new_obj(FK_SURFACE, "IOSurface");
    char line[512];
    size_t k = (size_t)snprintf(line, sizeof line, "IOSurfaceCreate");
    for (int i = 0; i < 6; i++) {
        fk_obj *v = NULL;
        for (size_t j = 0; j < props->n; j++)
            if (props->keys[j] == F.surface_keys[i])
                v = props->vals[j];
        if (!v || v->kind != FK_NUMBER) {
            violation("IOSurfaceCreate: property %s missing", k_surface_keys[i]);
            s->props[i] = -1;
        } else {
            s->props[i] = v->num;
        }
        k += (size_t)snprintf(line + k, sizeof line - k, " %s=%lld", k_surface_keys[i] + 9,
                              (long long)s->props[i]);
    }
    if (props->n != 6)
        violation("IOSurfaceCreate: %zu properties (expected 6)", props->n);
    record("%s", line);
    s->len = s->props[4] > 0 ? (size_t)s->props[4] : 0;
    s->bytes = malloc(s->len ? s->len : 1);
    s->shadow = malloc(s->len ? s->len : 1);
    if (!s->bytes || !s->shadow)
        abort();
    /* fresh pages hold garbage in the fake, so a missing clear shows */
    memset(s->shadow, 0xA5, s->len);
    memset(s->bytes, FK_POISON, s->len);
    return s;
}

static int fk_IOSurfaceLock(ane_id s_, uint32_t options, uint32_t *seed)
{
    fk_obj *s = obj(s_, "IOSurfaceLock");
    record("IOSurfaceLock IOSurface(%lld) %u", s ? (long long)s->props[4] : -1LL, options);
    if (!s || s->kind != FK_SURFACE)
        return -1;
    if (options & ~1u)
        violation("IOSurfaceLock with options %#x (0 or kIOSurfaceLockReadOnly)", options);
    if (seed)
        *seed = (uint32_t)s->serial;
    if (s->locks++ == 0) { /* the CPU sees the real bytes now */
        memcpy(s->bytes, s->shadow, s->len);
        s->lock_ro = (options & 1u) != 0;
    } else if (s->lock_ro && !(options & 1u)) {
        violation("IOSurface #%d locked for writing inside a read-only lock", s->serial);
    }
    return 0;
}

static int fk_IOSurfaceUnlock(ane_id s_, uint32_t options, uint32_t *seed)
{
    fk_obj *s = obj(s_, "IOSurfaceUnlock");
    record("IOSurfaceUnlock IOSurface(%lld) %u", s ? (long long)s->props[4] : -1LL, options);
    if (!s || s->kind != FK_SURFACE)
        return -1;
    (void)seed;
    if (s->locks == 0) {
        violation("IOSurfaceUnlock of an unlocked surface #%d", s->serial);
        return -1;
    }
    if (--s->locks == 0) {
        if (((options & 1u) != 0) != s->lock_ro)
            violation("IOSurfaceUnlock of #%d with options %#x, locked with %#x", s->serial, options,
                      s->lock_ro ? 1u : 0u);
        if (s->lock_ro && memcmp(s->bytes, s->shadow, s->len) != 0)
            violation("IOSurface #%d written under a read-only lock", s->serial); /* the write is lost */
        else if (!s->lock_ro)
            memcpy(s->shadow, s->bytes, s->len);
        memset(s->bytes, FK_POISON, s->len); /* unlocked: the CPU sees no real byte */
    }
    return 0;
}

static void *fk_IOSurfaceGetBaseAddress(ane_id s_)
{
    fk_obj *s = obj(s_, "IOSurfaceGetBaseAddress");
    return s && s->kind == FK_SURFACE ? s->bytes : NULL;
}

static size_t fk_IOSurfaceGetAllocSize(ane_id s_)
{
    fk_obj *s = obj(s_, "IOSurfaceGetAllocSize");
    return s && s->kind == FK_SURFACE ? s->len : 0;
}

/* ------------------------------------------------------------------------ */
/* Foundation                                                                */

static ane_id fk_NSTemporaryDirectory(void)
{
    char buf[1100];
    snprintf(buf, sizeof buf, "%s/", F.root);
    record("NSTemporaryDirectory");
    return autorelease(new_string(buf));
}

/* ------------------------------------------------------------------------ */
/* setup                                                                     */

static void free_all(void)
{
    fk_obj *o = F.all;
    while (o) {
        fk_obj *next = o->next_all;
        if (o->magic == FK_ALIVE) {
            free(o->bytes);
            free(o->shadow);
        }
        free(o->str);
        free(o->keys);
        free(o->vals);
        free(o);
        o = next;
    }
    F.all = NULL;
    while (F.sels) {
        fk_sel *s = F.sels;
        F.sels = s->next;
        free(s->name);
        free(s);
    }
    sl_clear(&F.calls);
    sl_clear(&F.violations);
    free(F.calls.v);
    free(F.violations.v);
    free(F.pool);
    free(F.fail_desc);
}

static fk_obj *immortal(fk_obj *o)
{
    o->immortal = 1;
    return o;
}

void fk_init(const char *root)
{
    free_all();
    memset(&F, 0, sizeof F);
    snprintf(F.root, sizeof F.root, "%s", root);
    for (int i = 0; i < K_NCLASSES; i++) {
        F.classes[i] = immortal(new_obj(FK_CLASS, "Class"));
        F.classes[i]->str = strdup(k_class_names[i]);
    }
    F.file_manager = immortal(new_obj(FK_FILEMANAGER, "NSFileManager"));
    for (int i = 0; i < 6; i++)
        F.surface_keys[i] = immortal(new_string(k_surface_keys[i]));

    ane_syms *s = &F.syms;
    s->objc_getClass = fk_getClass;
    s->sel_registerName = fk_sel_register;
    s->objc_autoreleasePoolPush = fk_pool_push;
    s->objc_autoreleasePoolPop = fk_pool_pop;
    s->msg0 = fk_msg0;
    s->msg_cstr = fk_msg_cstr;
    s->msg1 = fk_msg1;
    s->msg3 = fk_msg3;
    s->msg7 = fk_msg7;
    s->msg_qos_opts_err = fk_msg_qos_opts_err;
    s->msg_qos_err = fk_msg_qos_err;
    s->msg_qos_opts_req_err = fk_msg_qos_opts_req_err;
    s->msg_write = fk_msg_write;
    s->msg_remove = fk_msg_remove;
    s->msg_mkdir = fk_msg_mkdir;
    s->kCFTypeDictionaryKeyCallBacks = &F.cb_dict_key;
    s->kCFTypeDictionaryValueCallBacks = &F.cb_dict_value;
    s->kCFTypeArrayCallBacks = &F.cb_array;
    s->CFDataCreate = fk_CFDataCreate;
    s->CFDataGetLength = fk_CFDataGetLength;
    s->CFDataGetBytePtr = fk_CFDataGetBytePtr;
    s->CFDictionaryCreateMutable = fk_CFDictionaryCreateMutable;
    s->CFDictionarySetValue = fk_CFDictionarySetValue;
    s->CFNumberCreate = fk_CFNumberCreate;
    s->CFStringCreateWithCString = fk_CFStringCreateWithCString;
    s->CFArrayCreate = fk_CFArrayCreate;
    s->CFRetain = fk_CFRetain;
    s->CFRelease = fk_CFRelease;
    s->kIOSurfaceWidth = F.surface_keys[0];
    s->kIOSurfaceHeight = F.surface_keys[1];
    s->kIOSurfaceBytesPerElement = F.surface_keys[2];
    s->kIOSurfaceBytesPerRow = F.surface_keys[3];
    s->kIOSurfaceAllocSize = F.surface_keys[4];
    s->kIOSurfacePixelFormat = F.surface_keys[5];
    s->IOSurfaceCreate = fk_IOSurfaceCreate;
    s->IOSurfaceLock = fk_IOSurfaceLock;
    s->IOSurfaceUnlock = fk_IOSurfaceUnlock;
    s->IOSurfaceGetBaseAddress = fk_IOSurfaceGetBaseAddress;
    s->IOSurfaceGetAllocSize = fk_IOSurfaceGetAllocSize;
    s->NSTemporaryDirectory = fk_NSTemporaryDirectory;
    ane_syms_install_fake(s);
}

void fk_shutdown(void)
{
    ane_syms_install_fake(NULL);
    free_all();
    memset(&F, 0, sizeof F);
}

const ane_syms *fk_syms(void) { return &F.syms; }
const char *fk_root(void) { return F.root; }
size_t fk_ncalls(void) { return F.calls.n; }
const char *fk_call(size_t i) { return i < F.calls.n ? F.calls.v[i] : NULL; }
void fk_clear_calls(void) { sl_clear(&F.calls); }
void fk_clear_violations(void) { sl_clear(&F.violations); }
size_t fk_nviolations(void) { return F.violations.n; }
const char *fk_violation(size_t i) { return i < F.violations.n ? F.violations.v[i] : NULL; }
int fk_pool_depth(void) { return F.depth; }

void fk_fail(const char *selector, const char *description)
{
    free(F.fail_desc);
    F.fail_desc = NULL;
    F.fail_sel[0] = '\0';
    F.fail_has_error = 0;
    if (!selector)
        return;
    snprintf(F.fail_sel, sizeof F.fail_sel, "%s", selector);
    if (description) {
        F.fail_desc = strdup(description);
        F.fail_has_error = 1;
    }
}

void fk_hide_class(const char *name)
{
    if (F.n_hidden < 8)
        snprintf(F.hidden[F.n_hidden++], sizeof F.hidden[0], "%s", name);
}

fk_obj *fk_last(fk_kind kind)
{
    for (fk_obj *o = F.all; o; o = o->next_all)
        if (o->kind == kind)
            return o;
    return NULL;
}

size_t fk_live(void)
{
    size_t n = 0;
    for (fk_obj *o = F.all; o; o = o->next_all)
        n += !o->immortal && o->magic == FK_ALIVE;
    return n;
}
