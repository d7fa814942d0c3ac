/*
 * test_ane_protocol.c - the ane driver's call protocol, checked on Linux.
 *
 * Drives anec_driver_ane (the vtable) directly with hand-made compile args
 * against the recording fake of the Apple side (fake_apple.c), and asserts
 * the exact classes, selectors, signatures and argument kinds the driver
 * sends, the files it prepares for the device, memory management (every
 * object released, autorelease pools balanced) and error reporting.
 *
 * Output is TAP-like ("ok N - name" / "not ok N - name"); the exit status is
 * the number of failed tests (0: all passed).
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "anec_driver.h"
#include "fake_apple.h"
#include "tap_runner.h"

/* ------------------------------------------------------------------------ */
/* harness                                                                   */

static int g_optimistic;   /* the fake device re-reads weight files at load */
static int g_hex_content;  /* the fake hexStringIdentifier covers weight values */

static void failf(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void failf(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stdout, "#   %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    g_failed_now = 1;
}

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            failf(__FILE__, __LINE__, "check failed: %s", #cond);                     \
            return;                                                                   \
        }                                                                             \
    } while (0)
#define CHECK_MSG(cond, ...)                                                          \
    do {                                                                              \
        if (!(cond)) {                                                                \
            failf(__FILE__, __LINE__, __VA_ARGS__);                                   \
            return;                                                                   \
        }                                                                             \
    } while (0)
#define CHECK_OK(rc, err) CHECK_MSG((rc) == ANEC_OK, "status %d: %s", (rc), (err))

static const anec_driver *D = &anec_driver_ane;

static int path_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static void write_bytes(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n) {
        perror(path);
        exit(99);
    }
    fclose(f);
}

static int file_equals(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    unsigned char *buf = malloc(n + 1);
    size_t r = fread(buf, 1, n + 1, f);
    fclose(f);
    int eq = r == n && memcmp(buf, b, n) == 0;
    free(buf);
    return eq;
}

/* ------------------------------------------------------------------------ */
/* test data: MIL text, BLOBFILEs, program directories                       */

static const char k_mil[] =
    "program(1.3)\n"
    "[buildInfo = dict<string, string>({{\"coremlc-component-MIL\", \"3510.2.1\"}})]\n"
    "{\n"
    "    func main<ios18>(tensor<fp16, [1, 64, 1, 384]> a_in, tensor<fp16, [1, 64, 1, 384]> b_in) {\n"
    "        tensor<fp16, [64, 64, 1, 1]> w = const()[name = string(\"w\"), val = tensor<fp16, [64, 64, 1, 1]>(BLOBFILE(path = string(\"@model_path/weights/w.bin\"), offset = uint64(64)))];\n"
    "        tensor<fp16, [1, 64, 1, 1]> b = const()[name = string(\"b\"), val = tensor<fp16, [1, 64, 1, 1]>(BLOBFILE(path = string(\"@model_path/weights/b.bin\"), offset = uint64(64)))];\n"
    "        tensor<fp16, [1, 64, 1, 384]> y = add(x = a_in, y = b_in)[name = string(\"y\")];\n"
    "    } -> (y);\n"
    "}\n";

/* One BLOBFILE holding one tensor: its compiled data is that BLOBFILE. */
static const char k_mil1[] =
    "program(1.3)\n"
    "{\n"
    "    func main<ios18>(tensor<fp16, [1, 64, 1, 384]> x) {\n"
    "        tensor<fp16, [64, 64, 1, 1]> w = const()[name = string(\"w\"), val = tensor<fp16, [64, 64, 1, 1]>(BLOBFILE(path = string(\"@model_path/weights/w.bin\"), offset = uint64(64)))];\n"
    "        tensor<fp16, [1, 64, 1, 384]> y = conv(weight = w, x = x)[name = string(\"y\")];\n"
    "    } -> (y);\n"
    "}\n";

static const char k_mil_noweights[] =
    "program(1.3)\n"
    "{\n"
    "    func main<ios18>(tensor<fp16, [1, 64, 1, 384]> x) {\n"
    "        tensor<fp16, [1, 64, 1, 384]> y = relu(x = x)[name = string(\"y\")];\n"
    "    } -> (y);\n"
    "}\n";

/* A MILBlob v2 file with one fp16 tensor of n elements filled from `seed`. */
typedef struct { unsigned char *data; size_t len; } blob_t;

static blob_t make_blob(size_t n, unsigned seed)
{
    blob_t b;
    b.len = 128 + ((2 * n + 63) / 64) * 64;
    b.data = calloc(1, b.len);
    uint32_t u32;
    uint64_t u64;
    u32 = 1; memcpy(b.data + 0, &u32, 4);            /* count */
    u32 = 2; memcpy(b.data + 4, &u32, 4);            /* version */
    u32 = 0xDEADBEEFu; memcpy(b.data + 64, &u32, 4); /* sentinel */
    u32 = 1; memcpy(b.data + 68, &u32, 4);           /* fp16 */
    u64 = 2 * n; memcpy(b.data + 72, &u64, 8);       /* size */
    u64 = 128; memcpy(b.data + 80, &u64, 8);         /* data offset */
    for (size_t i = 0; i < 2 * n; i++)
        b.data[128 + i] = (unsigned char)(seed * 31u + i * 7u);
    return b;
}

/* A program as the core would prepare it: <root>/core/<name>/{model.mil, weights/...}. */
typedef struct {
    char dir[1300];
    anec_blob blobs[4];
    blob_t data[4];
    size_t n;
    anec_compile_args args;
} program_t;

static void make_program(program_t *p, const char *name, const char *mil,
                         const char *const *paths, size_t n, unsigned seed)
{
    memset(p, 0, sizeof *p);
    char sub[1400];
    snprintf(p->dir, sizeof p->dir, "%s/core", g_root);
    mkdir(p->dir, 0755);
    snprintf(p->dir, sizeof p->dir, "%s/core/%s", g_root, name);
    mkdir(p->dir, 0755);
    snprintf(sub, sizeof sub, "%s/weights", p->dir);
    mkdir(sub, 0755);
    snprintf(sub, sizeof sub, "%s/model.mil", p->dir);
    write_bytes(sub, mil, strlen(mil));
    p->n = n;
    for (size_t i = 0; i < n; i++) {
        p->data[i] = make_blob(64 + 16 * i, seed + (unsigned)i);
        p->blobs[i].path = paths[i];
        p->blobs[i].data = p->data[i].data;
        p->blobs[i].len = p->data[i].len;
        snprintf(sub, sizeof sub, "%s/%s", p->dir, paths[i] + strlen("@model_path/"));
        write_bytes(sub, p->data[i].data, p->data[i].len);
    }
    p->args.mil = mil;
    p->args.mil_len = strlen(mil);
    p->args.blobs = n ? p->blobs : NULL;
    p->args.n_blobs = n;
    p->args.dir = p->dir;
    p->args.limits.max_blob_tensors = 16;
    p->args.limits.scalar_penalty = 1;
    p->args.limits.max_conv_out_channels = 16384;
    p->args.limits.min_surface_bytes = 49152;
    p->args.limits.allow_fp32_io = 1;
}

/* The core's delta reload: rewrite blob i in the program directory. */
static void patch_blob(program_t *p, size_t i, unsigned seed)
{
    char path[1400];
    free(p->data[i].data);
    p->data[i] = make_blob(64 + 16 * i, seed);
    p->blobs[i].data = p->data[i].data;
    snprintf(path, sizeof path, "%s/%s", p->dir, p->blobs[i].path + strlen("@model_path/"));
    write_bytes(path, p->data[i].data, p->data[i].len);
}

static void free_program(program_t *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->data[i].data);
}

/* The weight hash a fresh compile + load of p gives on the fake device. */
static uint64_t compiled_hash(const program_t *p)
{
    const char *paths[4];
    const uint8_t *datas[4];
    size_t lens[4];
    for (size_t i = 0; i < p->n; i++) {
        paths[i] = p->blobs[i].path;
        datas[i] = p->blobs[i].data;
        lens[i] = p->blobs[i].len;
    }
    return fk_compiled_hash(p->args.mil, paths, datas, lens, p->n);
}

/* The hexId directory of the most recent model. */
static const char *last_hex(void)
{
    fk_obj *m = fk_last(FK_MODEL);
    return m ? m->hex : "";
}

/* ------------------------------------------------------------------------ */
/* call-log helpers                                                          */

/* Messages sent (lines starting with + or -), without -UTF8String reads. */
static size_t messages(size_t from, const char **out, size_t cap)
{
    size_t n = 0;
    for (size_t i = from; i < fk_ncalls() && n < cap; i++) {
        const char *c = fk_call(i);
        if ((c[0] == '+' || c[0] == '-') && !strstr(c, " UTF8String"))
            out[n++] = c;
    }
    return n;
}

/* Index of the first call from `from` containing needle (SIZE_MAX if none). */
static size_t first_call(size_t from, const char *needle)
{
    for (size_t i = from; i < fk_ncalls(); i++)
        if (strstr(fk_call(i), needle))
            return i;
    return (size_t)-1;
}

static int count_calls(size_t from, const char *needle)
{
    int n = 0;
    for (size_t i = from; i < fk_ncalls(); i++)
        n += strstr(fk_call(i), needle) != NULL;
    return n;
}

/* Compare the message sequence from `from` with `expected` ("{HEX}" stands
   for `hex`); prints both on mismatch. */
static int expect_messages(size_t from, const char *const *expected, size_t n_exp,
                           const char *hex)
{
    const char *got[256];
    size_t n = messages(from, got, 256);
    int ok = n == n_exp;
    char want[n_exp ? n_exp : 1][1024];
    for (size_t i = 0; i < n_exp; i++) {
        const char *e = expected[i], *h = strstr(e, "{HEX}");
        if (h)
            snprintf(want[i], sizeof want[i], "%.*s%s%s", (int)(h - e), e, hex, h + 5);
        else
            snprintf(want[i], sizeof want[i], "%s", e);
        if (ok && strcmp(want[i], got[i]) != 0)
            ok = 0;
    }
    if (!ok) {
        printf("#   expected %zu messages:\n", n_exp);
        for (size_t i = 0; i < n_exp; i++)
            printf("#     %s\n", want[i]);
        printf("#   got %zu:\n", n);
        for (size_t i = 0; i < n; i++)
            printf("#     %s\n", got[i]);
    }
    return ok;
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------------------ */
/* tests                                                                     */

static const char *const k_paths2[] = {"@model_path/weights/w.bin", "@model_path/weights/b.bin"};
static const char *const k_paths1[] = {"@model_path/weights/w.bin"};

static void test_unavailable_without_framework(void)
{
    char why[512] = "";
    ane_syms_install_fake(NULL); /* real resolution, as in production */
    int rc = D->available(why, sizeof why);
    CHECK(rc != ANEC_OK);
    CHECK_MSG(strstr(why, "AppleNeuralEngine.framework not found") &&
                  strstr(why, "macOS on Apple silicon"),
              "reason: %s", why);
    void *ctx = (void *)1;
    char err[512] = "";
    CHECK(D->open(&ctx, err, sizeof err) == ANEC_EUNAVAIL);
    CHECK(ctx == NULL);
    CHECK_MSG(strstr(err, "AppleNeuralEngine.framework not found"), "open: %s", err);
    /* cached: a second call gives the same answer */
    char why2[512] = "";
    CHECK(D->available(why2, sizeof why2) == rc && strcmp(why, why2) == 0);
    CHECK(strcmp(D->name, "ane") == 0);
}

static void test_available_with_fake_and_missing_class(void)
{
    char why[512] = "";
    CHECK_OK(D->available(why, sizeof why), why);
    CHECK_MSG(strcmp(why, "AppleNeuralEngine.framework with the in-memory compile API") == 0, "%s", why);
    CHECK(D->available(NULL, 0) == ANEC_OK);
    fk_hide_class("_ANEInMemoryModel");
    CHECK(D->available(why, sizeof why) == ANEC_EUNAVAIL);
    CHECK_MSG(strstr(why, "_ANEInMemoryModel"), "reason: %s", why);
    void *ctx = NULL;
    char err[512];
    CHECK(D->open(&ctx, err, sizeof err) == ANEC_EUNAVAIL && ctx == NULL);
    /* available() sends no message and creates nothing */
    CHECK(messages(0, (const char *[1]){0}, 1) == 0);
    CHECK(fk_live() == 0);
}

static void test_compile_sequence(void)
{
    void *ctx = NULL, *prog = NULL;
    char err[2048] = "";
    program_t p;
    make_program(&p, "two_blobs", k_mil, k_paths2, 2, 1);
    CHECK_OK(D->open(&ctx, err, sizeof err), err);
    size_t mark = fk_ncalls();
    CHECK_OK(D->compile(ctx, &p.args, &prog, err, sizeof err), err);
    char mil_arg[160];
    snprintf(mil_arg, sizeof mil_arg,
             "+_ANEInMemoryModelDescriptor modelWithMILText:weights:optionsPlist: NSData[%zu] "
             "NSDictionary{2} nil",
             strlen(k_mil));
    const char *expected[] = {
        mil_arg,
        "+_ANEInMemoryModel inMemoryModelWithDescriptor: _ANEInMemoryModelDescriptor",
        "-_ANEInMemoryModel hexStringIdentifier",
        "+NSFileManager defaultManager",
        "-NSFileManager createDirectoryAtPath:withIntermediateDirectories:attributes:error: "
        "NSString\"$TMP/{HEX}/weights\" YES nil &error",
        "-NSData writeToFile:atomically: NSString\"$TMP/{HEX}/model.mil\" YES",
        "-NSData writeToFile:atomically: NSString\"$TMP/{HEX}/weights/w.bin\" YES",
        "-NSData writeToFile:atomically: NSString\"$TMP/{HEX}/weights/b.bin\" YES",
        "-_ANEInMemoryModel compileWithQoS:options:error: 21 NSDictionary{0} &error",
    };
    CHECK(expect_messages(mark, expected, N_OF(expected), last_hex()));
    CHECK(count_calls(mark, "NSTemporaryDirectory") == 1);
    /* compile does not load */
    CHECK(count_calls(mark, "loadWithQoS") == 0);
    fk_obj *m = fk_last(FK_MODEL);
    CHECK(m->compiled && !m->loaded);

    /* the hexId directory holds exactly what the device compiled from */
    char path[2048];
    snprintf(path, sizeof path, "%s/%s/model.mil", g_root, m->hex);
    CHECK(file_equals(path, k_mil, strlen(k_mil)));
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s/%s", g_root, m->hex,
                 p.blobs[i].path + strlen("@model_path/"));
        CHECK_MSG(file_equals(path, p.blobs[i].data, p.blobs[i].len), "%s", path);
    }
    D->release(ctx, prog);
    D->close(ctx);
    free_program(&p);
}

/* constraint: ANE-MIL-NSDATA */
static void test_mil_is_nsdata_and_weights_dict(void)
{
    void *ctx = NULL, *prog = NULL;
    char err[2048] = "";
    program_t p;
    make_program(&p, "dict", k_mil, k_paths2, 2, 7);
    CHECK_OK(D->open(&ctx, err, sizeof err), err);
    CHECK_OK(D->compile(ctx, &p.args, &prog, err, sizeof err), err);
    fk_obj *desc = fk_last(FK_DESC);
    CHECK(desc && fk_alive(desc));
    fk_obj *mil = desc->refs[0], *weights = desc->refs[1];
    /* the MIL text is NSData holding exactly the bytes, no NUL */
    CHECK(mil->kind == FK_DATA);
    CHECK(mil->len == strlen(k_mil) && memcmp(mil->bytes, k_mil, mil->len) == 0);
    /* keys are the MIL paths; values {offset: @0, data: whole BLOBFILE} */
    CHECK(weights->kind == FK_DICT && weights->n == 2);
    for (size_t i = 0; i < 2; i++) {
        fk_obj *entry = fk_dict_get(weights, p.blobs[i].path);
        CHECK_MSG(entry && entry->kind == FK_DICT && entry->n == 2, "entry %s",
                  p.blobs[i].path);
        fk_obj *off = fk_dict_get(entry, "offset"), *data = fk_dict_get(entry, "data");
        CHECK(off && off->kind == FK_NUMBER && off->num == 0);
        CHECK(data && data->kind == FK_DATA && data->len == p.blobs[i].len);
        CHECK(memcmp(data->bytes, p.blobs[i].data, data->len) == 0);
        /* the whole file, header included: MILBlob count/version at 0 */
        CHECK(data->bytes[0] == 1 && data->bytes[4] == 2);
    }
    D->release(ctx, prog);
    D->close(ctx);
    free_program(&p);
}

/* constraint: ANE-WEIGHTS-DICT */
static void test_empty_weights_dict_not_nil(void)
{
    void *ctx = NULL, *prog = NULL;
    char err[2048] = "";
    program_t p;
    make_program(&p, "noweights", k_mil_noweights, NULL, 0, 0);
    CHECK_OK(D->open(&ctx, err, sizeof err), err);
    size_t mark = fk_ncalls();
    CHECK_OK(D->compile(ctx, &p.args, &prog, err, sizeof err), err);
    char line[200];
    snprintf(line, sizeof line,
             "+_ANEInMemoryModelDescriptor modelWithMILText:weights:optionsPlist: NSData[%zu] "
             "NSDictionary{0} nil",
             strlen(k_mil_noweights));
    const char *got[64];
    size_t n = messages(mark, got, 64);
    CHECK(n > 0);
    CHECK_MSG(strcmp(got[0], line) == 0, "got: %s", got[0]);
    fk_obj *weights = fk_last(FK_DESC)->refs[1];
    CHECK(weights && weights->kind == FK_DICT && weights->n == 0);
    /* no weight file written, only model.mil */
    CHECK(count_calls(mark, "writeToFile:atomically:") == 1);
    CHECK(count_calls(mark, "writeToFile:atomically: NSString\"$TMP/") == 1);
    CHECK(count_calls(mark, "/model.mil\" YES") == 1);
    CHECK_OK(D->load(ctx, prog, err, sizeof err), err);
    D->release(ctx, prog);
    D->close(ctx);
    free_program(&p);
}

/* constraint: ANE-SURFACE-LOCK */
static void test_surfaces(void)
{
    void *ctx = NULL;
    char err[512] = "";
    anec_surface s;
    CHECK_OK(D->open(&ctx, err, sizeof err), err);
    size_t mark = fk_ncalls();
    CHECK_OK(D->surface_create(ctx, 49152, &s, err, sizeof err), err);
    CHECK(s.handle && s.bytes == 49152);
    int seen = 0;
    for (size_t i = mark; i < fk_ncalls(); i++)
        if (strncmp(fk_call(i), "IOSurfaceCreate", 15) == 0) {
            seen++;
            CHECK_MSG(strcmp(fk_call(i),
                             "IOSurfaceCreate Width=49152 Height=1 BytesPerElement=1 "
                             "BytesPerRow=49152 AllocSize=49152 PixelFormat=0") == 0,
                      "%s", fk_call(i));
        }
    CHECK(seen == 1);
    fk_obj *surf = fk_last(FK_SURFACE);
    /* created unlocked (ANE-SURFACE-LOCK): zeroed under a lock, then released */
    CHECK(surf->locks == 0 && count_calls(mark, "IOSurfaceLock") == 1 && count_calls(mark, "IOSurfaceUnlock") == 1);
    CHECK(first_call(mark, "IOSurfaceLock") < first_call(mark, "IOSurfaceUnlock"));
    CHECK(surf->bytes[0] == FK_POISON); /* unlocked: the CPU sees no real byte */
    /* a read-only lock (kIOSurfaceLockReadOnly) shows the real bytes */
    mark = fk_ncalls();
    CHECK_OK(D->surface_lock(ctx, &s, 1, err, sizeof err), err);
    CHECK(count_calls(mark, "IOSurfaceLock IOSurface(49152) 1") == 1);
    CHECK(surf->locks == 1 && s.base == surf->bytes);
    for (size_t k = 0; k < s.bytes; k++)
        CHECK(s.base[k] == 0); /* zeroed (the fake fills new surfaces with 0xA5) */
    D->surface_unlock(ctx, &s, 1);
    CHECK(surf->locks == 0 && s.base == NULL && count_calls(mark, "IOSurfaceUnlock IOSurface(49152) 1") == 1);
    /* what the CPU writes under a write lock is what the device sees after */
    CHECK_OK(D->surface_lock(ctx, &s, 0, err, sizeof err), err);
    s.base[7] = 42;
    uint8_t *stale = s.base;
    D->surface_unlock(ctx, &s, 0);
    CHECK(surf->shadow[7] == 42 && stale[7] == FK_POISON);
    /* a write outside a lock is lost; a write under a read-only lock is a violation */
    stale[7] = 9;
    CHECK_OK(D->surface_lock(ctx, &s, 1, err, sizeof err), err);
    CHECK(s.base[7] == 42);
    s.base[8] = 1;
    size_t v = fk_nviolations();
    D->surface_unlock(ctx, &s, 1);
    CHECK(fk_nviolations() == v + 1 && strstr(fk_violation(v), "written under a read-only lock"));
    fk_clear_violations();
    anec_surface bad;
    CHECK(D->surface_create(ctx, 0, &bad, err, sizeof err) == ANEC_EINVAL);
    D->surface_free(ctx, &s);
    CHECK(s.handle == NULL && s.base == NULL);
    D->close(ctx);
}

/* Write a surface as the core does: under a write lock. */
static void fill(void *ctx, anec_surface *s, uint8_t (*f)(size_t))
{
    char err[256];
    if (D->surface_lock(ctx, s, 0, err, sizeof err) != ANEC_OK)
        return;
    for (size_t k = 0; k < s->bytes; k++)
        s->base[k] = f(k);
    D->surface_unlock(ctx, s, 0);
}

/* Read byte k of a surface as the core does: under a read-only lock. */
static int peek(void *ctx, anec_surface *s, size_t k)
{
    char err[256];
    if (D->surface_lock(ctx, s, 1, err, sizeof err) != ANEC_OK)
        return -1;
    int v = s->base[k];
    D->surface_unlock(ctx, s, 1);
    return v;
}

static uint8_t fill_a(size_t k) { return (uint8_t)(k * 3); }
static uint8_t fill_b(size_t k) { return (uint8_t)(k * 5 + 1); }
static uint8_t fill_7(size_t k) { (void)k; return 7; }

/* compile, load, evaluate twice (one request, reused), check outputs. */
static void test_load_evaluate_reuses_request(void)
{
    void *ctx = NULL, *prog = NULL;
    char err[2048] = "";
    program_t p;
    make_program(&p, "eval", k_mil, k_paths2, 2, 3);
    CHECK_OK(D->open(&ctx, err, sizeof err), err);
    CHECK_OK(D->compile(ctx, &p.args, &prog, err, sizeof err), err);
    size_t mark = fk_ncalls();
    CHECK_OK(D->load(ctx, prog, err, sizeof err), err);
    /* the model that was compiled is loaded: its compiled form is in place */
    const char *load_seq[] = {
        "-_ANEInMemoryModel loadWithQoS:options:error: 21 NSDictionary{0} &error",
    };
    CHECK(expect_messages(mark, load_seq, N_OF(load_seq), last_hex()));
    CHECK(fk_last(FK_MODEL)->loaded && fk_last(FK_MODEL)->compiled);
    CHECK(fk_last(FK_MODEL)->wsum == compiled_hash(&p));

    anec_surface a, b, y;
    CHECK_OK(D->surface_create(ctx, 49152, &a, err, sizeof err), err);
    CHECK_OK(D->surface_create(ctx, 49152, &b, err, sizeof err), err);
    CHECK_OK(D->surface_create(ctx, 49152, &y, err, sizeof err), err);
    fill(ctx, &a, fill_a);
    fill(ctx, &b, fill_b);
    static uint8_t av[49152], bv[49152];
    for (size_t k = 0; k < 49152; k++) {
        av[k] = fill_a(k);
        bv[k] = fill_b(k);
    }
    anec_surface *in[2] = {&a, &b}, *out[1] = {&y};
    mark = fk_ncalls();
    CHECK_OK(D->evaluate(ctx, prog, in, 2, out, 1, err, sizeof err), err);
    const char *eval1[] = {
        "+_ANEIOSurfaceObject objectWithIOSurface: IOSurface(49152)",
        "+_ANEIOSurfaceObject objectWithIOSurface: IOSurface(49152)",
        "+_ANEIOSurfaceObject objectWithIOSurface: IOSurface(49152)",
        "+_ANERequest requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:"
        "perfStats:procedureIndex: NSArray[2 x _ANEIOSurfaceObject] @[0,1] "
        "NSArray[1 x _ANEIOSurfaceObject] @[0] nil nil @0",
        "-_ANEInMemoryModel evaluateWithQoS:options:request:error: 21 NSDictionary{0} "
        "_ANERequest &error",
    };
    CHECK(expect_messages(mark, eval1, N_OF(eval1), ""));
    /* evaluate touches no CPU lock: the surfaces are unlocked already (ANE-SURFACE-LOCK) */
    CHECK(count_calls(mark, "IOSurfaceUnlock") == 0 && count_calls(mark, "IOSurfaceLock") == 0);
    CHECK(fk_last(FK_SURFACE)->locks == 0);

    /* the inputs were bound in the order given (a first, then b) */
    const uint8_t *ins[2] = {av, bv};
    size_t lens[2] = {a.bytes, b.bytes};
    uint64_t w = compiled_hash(&p);
    for (size_t k = 0; k < y.bytes; k += 97)
        CHECK_MSG(peek(ctx, &y, k) == fk_expected_output(ins, lens, 2, w, 0, k), "byte %zu", k);

    /* second evaluation: the same request, nothing rebuilt */
    fk_obj *req = fk_last(FK_REQUEST);
    av[0] = 200;
    CHECK_OK(D->surface_lock(ctx, &a, 0, err, sizeof err), err);
    a.base[0] = 200;
    /* a surface the CPU still holds is refused by the device */
    CHECK(D->evaluate(ctx, prog, in, 2, out, 1, err, sizeof err) != ANEC_OK);
    CHECK(fk_nviolations() == 1 && strstr(fk_violation(0), "still CPU-locked"));
    fk_clear_violations();
    D->surface_unlock(ctx, &a, 0);
    mark = fk_ncalls();
    CHECK_OK(D->evaluate(ctx, prog, in, 2, out, 1, err, sizeof err), err);
    const char *eval2[] = {
        "-_ANEInMemoryModel evaluateWithQoS:options:request:error: 21 NSDictionary{0} "
        "_ANERequest &error",
    };
    CHECK(expect_messages(mark, eval2, 1, ""));
    CHECK(fk_last(FK_REQUEST) == req && fk_alive(req));
    CHECK(peek(ctx, &y, 0) == fk_expected_output(ins, lens, 2, w, 0, 0));

    /* another output surface: a new request for the new set */
    anec_surface y2;
    CHECK_OK(D->surface_create(ctx, 49152, &y2, err, sizeof err), err);
    anec_surface *out2[1] = {&y2};
    mark = fk_ncalls();
    CHECK_OK(D->evaluate(ctx, prog, in, 2, out2, 1, err, sizeof err), err);
    CHECK(count_calls(mark, "+_ANERequest requestWithInputs") == 1);
    CHECK(fk_last(FK_REQUEST) != req && !fk_alive(req)); /* the old one released */
    CHECK(peek(ctx, &y2, 5) == fk_expected_output(ins, lens, 2, w, 0, 5));

    /* a request belongs to one load: unload drops it, the next evaluate builds one */
    req = fk_last(FK_REQUEST);
    CHECK_OK(D->unload(ctx, prog, err, sizeof err), err);
    CHECK(!fk_alive(req));
    CHECK_OK(D->load(ctx, prog, err, sizeof err), err);
    mark = fk_ncalls();
    CHECK_OK(D->evaluate(ctx, prog, in, 2, out2, 1, err, sizeof err), err);
    CHECK(count_calls(mark, "+_ANERequest requestWithInputs") == 1);

    /* the core frees surfaces before the program: still no dangling use */
    D->surface_free(ctx, &a);
    D->surface_free(ctx, &b);
    D->surface_free(ctx, &y);
    D->surface_free(ctx, &y2);
    mark = fk_ncalls();
    D->release(ctx, prog);
    const char *rel[] = {
        "-_ANEInMemoryModel unloadWithQoS:error: 21 &error",
        "+NSFileManager defaultManager",
        "-NSFileManager removeItemAtPath:error: NSString\"$TMP/{HEX}\" &error",
    };
    CHECK(expect_messages(mark, rel, N_OF(rel), last_hex()));
    D->close(ctx);
    free_program(&p);
}

/* One output byte of a program that computes with weight hash w. */
static uint8_t eval_byte(void *ctx, void *prog, size_t k, uint64_t *w_seen)
{
    char err[1024];
    anec_surface x, y;
    if (D->surface_create(ctx, 49152, &x, err, sizeof err) || D->surface_create(ctx, 49152, &y, err, sizeof err))
        return 0;
    fill(ctx, &x, fill_7);
    anec_surface *in[1] = {&x}, *out[1] = {&y};
    uint8_t v = 0;
    if (D->evaluate(ctx, prog, in, 1, out, 1, err, sizeof err) == ANEC_OK)
        v = (uint8_t)peek(ctx, &y, k);
    if (w_seen)
        *w_seen = fk_last(FK_MODEL)->wsum;
    D->surface_free(ctx, &x);
    D->surface_free(ctx, &y);
    return v;
}

/* Weights are baked at compile: rewriting the weight files and loading again
   changes nothing; the compiled data is what a load installs. */
/* constraint: ANE-BAKED-WEIGHTS */
static void test_weights_baked_at_compile(void)
{
    void *ctx = NULL, *prog = NULL;
    char err[2048] = "";
    program_t p;
    make_program(&p, "baked", k_mil, k_paths2, 2, 11);
    uint64_t w0 = compiled_hash(&p);
    CHECK_OK(D->open(&ctx, err, sizeof err), err);
    CHECK_OK(D->compile(ctx, &p.args, &prog, err, sizeof err), err);
    CHECK_OK(D->load(ctx, prog, err, sizeof err), err);
    fk_obj *model = fk_last(FK_MODEL);
    CHECK(model->wsum == w0);
    /* what the old reload did: rewrite weights/ (the core's and the device's), unload, load */
    patch_blob(&p, 0, 99);
    char dev[1500];
    snprintf(dev, sizeof dev, "%s/%s/weights/w.bin", g_root, model->hex);
    write_bytes(dev, p.blobs[0].data, p.blobs[0].len);
    size_t mark = fk_ncalls();
    CHECK_OK(D->unload(ctx, prog, err, sizeof err), err);
    CHECK_OK(D->load(ctx, prog, err, sizeof err), err);
    CHECK(count_calls(mark, "compileWithQoS") == 0);
    if (g_optimistic)
        CHECK(model->wsum == compiled_hash(&p)); /* ANE-LOAD-REREADS-WEIGHTS: the files are re-read */
    else
        CHECK(model->wsum == w0);                /* ANE-BAKED-WEIGHTS: nothing changes */
    D->release(ctx, prog);
    D->close(ctx);
    free_program(&p);
}

/* Data patch of the same model object (ANE-SAME-OBJECT-PATCH): the new
   BLOBFILE becomes the compiled data of a one-tensor program, then only load:
   equal to a fresh compile, no compile, under the readings where a load reads
   files (the in-memory readings are covered by test_ane_core.c). */
/* constraint: ANE-SAME-OBJECT-PATCH */
static void test_patch_data_then_load_equals_fresh_compile(void)
{
    void *ctx = NULL, *prog = NULL, *fresh = NULL;
    char err[2048] = "";
    program_t p, q;
    make_program(&p, "patch", k_mil1, k_paths1, 1, 21);
    CHECK_OK(D->open(&ctx, err, sizeof err), err);
    CHECK_OK(D->compile(ctx, &p.args, &prog, err, sizeof err), err);
    /* the compiled data of a one-tensor program is the BLOBFILE itself */
    CHECK(D->data_equals(ctx, prog, p.blobs[0].data, p.blobs[0].len, err, sizeof err) == 1);
    CHECK_OK(D->load(ctx, prog, err, sizeof err), err);
    fk_obj *model = fk_last(FK_MODEL);
    uint64_t w_old;
    uint8_t before = eval_byte(ctx, prog, 3, &w_old);
    CHECK(w_old == compiled_hash(&p));
    /* patching a loaded program is refused */
    CHECK(D->patch_data(ctx, prog, "weights/w.bin", p.blobs[0].data, p.blobs[0].len, 0, err, sizeof err) ==
          ANEC_ESTATE);
    CHECK_OK(D->unload(ctx, prog, err, sizeof err), err);
    patch_blob(&p, 0, 99); /* the core writes its copy first */
    size_t mark = fk_ncalls();
    CHECK_OK(D->patch_data(ctx, prog, "weights/w.bin", p.blobs[0].data, p.blobs[0].len, 0, err, sizeof err), err);
    const char *seq[] = {
        "-NSData writeToFile:atomically: NSString\"$TMP/{HEX}/data\" YES",
        "-NSData writeToFile:atomically: NSString\"$TMP/{HEX}/weights/w.bin\" YES",
    };
    CHECK(expect_messages(mark, seq, N_OF(seq), model->hex));
    CHECK(D->data_equals(ctx, prog, p.blobs[0].data, p.blobs[0].len, err, sizeof err) == 1);
    CHECK_OK(D->load(ctx, prog, err, sizeof err), err);
    CHECK(count_calls(mark, "compileWithQoS") == 0 && count_calls(mark, "modelWithMILText") == 0);
    uint64_t w_new;
    uint8_t after = eval_byte(ctx, prog, 3, &w_new);
    CHECK(w_new == compiled_hash(&p) && w_new != w_old && after != before);
    /* equal to a fresh compile with the new weights */
    make_program(&q, "fresh", k_mil1, k_paths1, 1, 21);
    patch_blob(&q, 0, 99);
    CHECK_OK(D->compile(ctx, &q.args, &fresh, err, sizeof err), err);
    CHECK_OK(D->load(ctx, fresh, err, sizeof err), err);
    uint64_t w_fresh;
    CHECK(eval_byte(ctx, fresh, 3, &w_fresh) == after && w_fresh == w_new);
    D->release(ctx, prog);
    D->release(ctx, fresh);
    D->close(ctx);
    free_program(&p);
    free_program(&q);
}

/* Compile without load, then a data patch: the first load uses the patch. */
/* constraint: ANE-NEW-OBJECT-LOAD */
static void test_patch_before_first_load(void)
{
    void *ctx = NULL, *prog = NULL;
    char err[2048] = "";
    program_t p;
    make_program(&p, "early", k_mil1, k_paths1, 1, 13);
    CHECK_OK(D->open(&ctx, err, sizeof err), err);
    CHECK_OK(D->compile(ctx, &p.args, &prog, err, sizeof err), err);
    patch_blob(&p, 0, 77);
    CHECK_OK(D->patch_data(ctx, prog, "weights/w.bin", p.blobs[0].data, p.blobs[0].len, 0, err, sizeof err), err);
    CHECK_OK(D->load(ctx, prog, err, sizeof err), err);
    CHECK(fk_last(FK_MODEL)->wsum == compiled_hash(&p));
    D->release(ctx, prog);
    D->close(ctx);
    free_program(&p);
}

/* Same MIL + weight paths, other weights: under Orion's reading both programs
   get one hexId directory; each load must install its own compiled form. */
static void test_shared_hexid_directory(void)
{
    void *ctx = NULL, *pa = NULL, *pb = NULL;
    char err[2048] = "";
    program_t A, B;
    make_program(&A, "layer0", k_mil, k_paths2, 2, 21);
    make_program(&B, "layer1", k_mil, k_paths2, 2, 42);
    CHECK_OK(D->open(&ctx, err, sizeof err), err);
    CHECK_OK(D->compile(ctx, &A.args, &pa, err, sizeof err), err);
    fk_obj *ma = fk_last(FK_MODEL);
    size_t mark = fk_ncalls();
    CHECK_OK(D->compile(ctx, &B.args, &pb, err, sizeof err), err);
    fk_obj *mb = fk_last(FK_MODEL);
    CHECK(ma != mb);
    CHECK((strcmp(ma->hex, mb->hex) == 0) == !g_hex_content);
    if (!g_hex_content) {
        /* B's compile overwrites the directory: A's compiled form is saved first */
        CHECK(count_calls(mark, "writeToFile:atomically: NSString\"$TMP/core/layer0/net.plist\"") == 1);
        CHECK(count_calls(mark, "writeToFile:atomically: NSString\"$TMP/core/layer0/data\"") == 1);
    } else {
        CHECK(count_calls(mark, "$TMP/core/layer0/") == 0);
    }
    char dir[1400];
    snprintf(dir, sizeof dir, "%s/%s", g_root, ma->hex);

    CHECK_OK(D->load(ctx, pa, err, sizeof err), err);
    CHECK(ma->wsum == compiled_hash(&A));
    CHECK_OK(D->load(ctx, pb, err, sizeof err), err);
    CHECK(mb->wsum == compiled_hash(&B));
    CHECK(ma->wsum != mb->wsum);
    /* again, in the other order */
    CHECK_OK(D->unload(ctx, pa, err, sizeof err), err);
    CHECK_OK(D->load(ctx, pa, err, sizeof err), err);
    CHECK(ma->wsum == compiled_hash(&A));

    /* releasing A keeps the directory B still uses */
    mark = fk_ncalls();
    D->release(ctx, pa);
    CHECK(count_calls(mark, "removeItemAtPath") == (g_hex_content ? 1 : 0));
    CHECK(path_exists(dir) == !g_hex_content);
    CHECK_OK(D->unload(ctx, pb, err, sizeof err), err);
    CHECK_OK(D->load(ctx, pb, err, sizeof err), err);
    CHECK(mb->wsum == compiled_hash(&B));
    mark = fk_ncalls();
    D->release(ctx, pb);
    CHECK(count_calls(mark, "removeItemAtPath") == 1);
    CHECK(!path_exists(dir));
    D->close(ctx);
    free_program(&A);
    free_program(&B);
}

/* clone: a new model on the donor's compiled form, never compiled. It computes
   with the donor's weights (compiled data is copied) until patched; whatever
   hexId the framework gives it. */
/* constraint: ANE-NEW-OBJECT-LOAD */
static void test_clone_copies_the_compiled_form(void)
{
    void *ctx = NULL, *donor = NULL, *copy = NULL;
    char err[2048] = "";
    program_t A, B;
    make_program(&A, "donor", k_mil1, k_paths1, 1, 5);
    make_program(&B, "copy", k_mil1, k_paths1, 1, 6);
    CHECK_OK(D->open(&ctx, err, sizeof err), err);
    CHECK_OK(D->compile(ctx, &A.args, &donor, err, sizeof err), err);
    fk_obj *ma = fk_last(FK_MODEL);
    CHECK_OK(D->load(ctx, donor, err, sizeof err), err);
    size_t mark = fk_ncalls();
    CHECK_OK(D->clone(ctx, donor, B.dir, &copy, err, sizeof err), err);
    CHECK(count_calls(mark, "compileWithQoS") == 0);
    CHECK(count_calls(mark, "+_ANEInMemoryModelDescriptor modelWithMILText") == 1);
    CHECK(count_calls(mark, "writeToFile:atomically: NSString\"$TMP/core/copy/net.plist\"") == 1);
    CHECK(count_calls(mark, "writeToFile:atomically: NSString\"$TMP/core/copy/data\"") == 1);
    fk_obj *mc = fk_last(FK_MODEL);
    CHECK((strcmp(mc->hex, ma->hex) == 0) == !g_hex_content);
    /* its descriptor carries its own weight bytes */
    fk_obj *entry = fk_dict_get(mc->refs[0]->refs[1], "@model_path/weights/w.bin");
    fk_obj *data = fk_dict_get(entry, "data");
    CHECK(data && data->len == B.blobs[0].len &&
          memcmp(data->bytes, B.blobs[0].data, data->len) == 0);
    /* but its compiled data is the donor's: stale until patched (the core patches or compiles) */
    CHECK(D->data_equals(ctx, copy, A.blobs[0].data, A.blobs[0].len, err, sizeof err) == 1);
    CHECK_OK(D->load(ctx, copy, err, sizeof err), err);
    if (!g_optimistic)
        CHECK(mc->wsum == compiled_hash(&A));
    CHECK_OK(D->unload(ctx, copy, err, sizeof err), err);
    CHECK_OK(D->patch_data(ctx, copy, "weights/w.bin", B.blobs[0].data, B.blobs[0].len, 0, err, sizeof err), err);
    CHECK_OK(D->load(ctx, copy, err, sizeof err), err);
    CHECK(mc->wsum == compiled_hash(&B));
    /* the donor keeps its own weights (a shared directory is handed back) */
    CHECK_OK(D->unload(ctx, donor, err, sizeof err), err);
    CHECK_OK(D->load(ctx, donor, err, sizeof err), err);
    CHECK(ma->wsum == compiled_hash(&A));
    /* the donor can go first: the clone keeps working */
    D->release(ctx, donor);
    CHECK_OK(D->unload(ctx, copy, err, sizeof err), err);
    CHECK_OK(D->load(ctx, copy, err, sizeof err), err);
    CHECK(mc->wsum == compiled_hash(&B));
    D->release(ctx, copy);
    char dir[1400];
    snprintf(dir, sizeof dir, "%s/%s", g_root, mc->hex);
    CHECK(!path_exists(dir));
    /* a missing weight file in the clone's directory is a clear error */
    CHECK_OK(D->compile(ctx, &A.args, &donor, err, sizeof err), err);
    char missing[1500];
    snprintf(missing, sizeof missing, "%s/weights/w.bin", B.dir);
    unlink(missing);
    CHECK(D->clone(ctx, donor, B.dir, &copy, err, sizeof err) == ANEC_EIO && copy == NULL);
    CHECK_MSG(strstr(err, "weights/w.bin"), "%s", err);
    D->release(ctx, donor);
    D->close(ctx);
    free_program(&A);
    free_program(&B);
}

static void test_nserror_becomes_message(void)
{
    void *ctx = NULL, *prog = NULL;
    char err[2048] = "";
    program_t p;
    make_program(&p, "errors", k_mil, k_paths2, 2, 8);
    CHECK_OK(D->open(&ctx, err, sizeof err), err);

    /* compile */
    fk_fail("compileWithQoS:options:error:",
            "Error Domain=com.apple.appleneuralengine Code=3 \"InvalidMILProgram: "
            "concat is not supported\"");
    CHECK(D->compile(ctx, &p.args, &prog, err, sizeof err) == ANEC_ECOMPILE && !prog);
    CHECK_MSG(strstr(err, "InvalidMILProgram: concat is not supported") &&
                  strstr(err, "compileWithQoS"),
              "%s", err);
    /* nothing left behind: the temp directory is gone */
    char dir[1400];
    snprintf(dir, sizeof dir, "%s/%s", g_root, last_hex());
    CHECK(!path_exists(dir));
    CHECK(fk_live() == 2); /* only the context's @{} and @0 */

    /* descriptor refused (factory returns nil) */
    fk_fail("modelWithMILText:weights:optionsPlist:", NULL);
    CHECK(D->compile(ctx, &p.args, &prog, err, sizeof err) == ANEC_ECOMPILE && !prog);
    CHECK_MSG(strstr(err, "modelWithMILText"), "%s", err);

    /* load */
    fk_fail(NULL, NULL);
    CHECK_OK(D->compile(ctx, &p.args, &prog, err, sizeof err), err);
    fk_fail("loadWithQoS:options:error:", "ANE load: program handle rejected (0x12)");
    CHECK(D->load(ctx, prog, err, sizeof err) == ANEC_ELOAD);
    CHECK_MSG(strstr(err, "program handle rejected (0x12)"), "%s", err);
    /* failure without an NSError still gives a readable message */
    fk_fail("loadWithQoS:options:error:", NULL);
    CHECK(D->load(ctx, prog, err, sizeof err) == ANEC_ELOAD);
    CHECK_MSG(strstr(err, "loadWithQoS") && strstr(err, "no NSError"), "%s", err);

    /* evaluate: status 0x1d points at the surface constraints */
    fk_fail(NULL, NULL);
    CHECK_OK(D->load(ctx, prog, err, sizeof err), err);
    anec_surface x, y;
    CHECK_OK(D->surface_create(ctx, 4096, &x, err, sizeof err), err);
    CHECK_OK(D->surface_create(ctx, 4096, &y, err, sizeof err), err);
    anec_surface *in[1] = {&x}, *out[1] = {&y};
    fk_fail("evaluateWithQoS:options:request:error:",
            "ANEProgramProcessRequestDirect() Failed with status=0x1d : Program Inference error");
    CHECK(D->evaluate(ctx, prog, in, 1, out, 1, err, sizeof err) == ANEC_EEVAL);
    CHECK_MSG(strstr(err, "status=0x1d") && strstr(err, "ANE-MIN-SURFACE") &&
                  strstr(err, "ANE-UNIFORM-SURFACES"),
              "%s", err);
    /* a failed evaluation leaves the surfaces unlocked */
    CHECK(fk_last(FK_SURFACE)->locks == 0);

    /* unload */
    fk_fail("unloadWithQoS:error:", "unload refused");
    CHECK(D->unload(ctx, prog, err, sizeof err) == ANEC_EDRIVER);
    CHECK_MSG(strstr(err, "unload refused"), "%s", err);
    fk_fail(NULL, NULL);
    /* after a failed unload the program counts as unloaded: evaluate refuses */
    CHECK(D->evaluate(ctx, prog, in, 1, out, 1, err, sizeof err) == ANEC_ESTATE);
    D->surface_free(ctx, &x);
    D->surface_free(ctx, &y);
    D->release(ctx, prog);
    D->close(ctx);
    free_program(&p);
}

static void test_bad_arguments(void)
{
    void *ctx = NULL, *prog = NULL;
    char err[2048] = "";
    program_t p;
    static const char *const bad1[] = {"weights/w.bin"};
    static const char *const bad2[] = {"@model_path/../escape.bin"};
    CHECK_OK(D->open(&ctx, err, sizeof err), err);
    make_program(&p, "bad", k_mil, k_paths2, 2, 1);
    p.blobs[0].path = bad1[0];
    size_t mark = fk_ncalls();
    CHECK(D->compile(ctx, &p.args, &prog, err, sizeof err) == ANEC_EINVAL && !prog);
    CHECK_MSG(strstr(err, "weights/w.bin") && strstr(err, "@model_path/"), "%s", err);
    p.blobs[0].path = bad2[0];
    CHECK(D->compile(ctx, &p.args, &prog, err, sizeof err) == ANEC_EINVAL);
    p.blobs[0].path = k_paths2[0];
    p.args.dir = NULL;
    CHECK(D->compile(ctx, &p.args, &prog, err, sizeof err) == ANEC_EINVAL);
    CHECK_MSG(strstr(err, "program directory"), "%s", err);
    /* nothing reached the framework */
    CHECK(messages(mark, (const char *[1]){0}, 1) == 0);

    /* evaluate before load */
    p.args.dir = p.dir;
    CHECK_OK(D->compile(ctx, &p.args, &prog, err, sizeof err), err);
    anec_surface x, y;
    CHECK_OK(D->surface_create(ctx, 49152, &x, err, sizeof err), err);
    CHECK_OK(D->surface_create(ctx, 49152, &y, err, sizeof err), err);
    anec_surface *in[1] = {&x}, *out[1] = {&y};
    CHECK(D->evaluate(ctx, prog, in, 1, out, 1, err, sizeof err) == ANEC_ESTATE);
    CHECK_MSG(strstr(err, "not loaded"), "%s", err);
    CHECK_OK(D->load(ctx, prog, err, sizeof err), err);
    CHECK(D->evaluate(ctx, prog, in, 0, out, 1, err, sizeof err) == ANEC_EINVAL);
    /* a blob in a subdirectory gets its directory created */
    D->surface_free(ctx, &x);
    D->surface_free(ctx, &y);
    D->release(ctx, prog);
    free_program(&p);

    static const char *const nested[] = {"@model_path/weights/layer0/wq.bin"};
    make_program(&p, "nested", k_mil_noweights, NULL, 0, 0);
    char sub[1500];
    snprintf(sub, sizeof sub, "%s/weights/layer0", p.dir);
    mkdir(sub, 0755);
    p.data[0] = make_blob(32, 3);
    p.n = 1;
    p.blobs[0].path = nested[0];
    p.blobs[0].data = p.data[0].data;
    p.blobs[0].len = p.data[0].len;
    snprintf(sub, sizeof sub, "%s/weights/layer0/wq.bin", p.dir);
    write_bytes(sub, p.data[0].data, p.data[0].len);
    p.args.blobs = p.blobs;
    p.args.n_blobs = 1;
    CHECK_OK(D->compile(ctx, &p.args, &prog, err, sizeof err), err);
    char dev[1500];
    snprintf(dev, sizeof dev, "%s/%s/weights/layer0/wq.bin", g_root, last_hex());
    CHECK(file_equals(dev, p.data[0].data, p.data[0].len));
    D->release(ctx, prog);
    D->close(ctx);
    free_program(&p);
}

/* close/release leave nothing: every object released, pools balanced, temp
   directories removed. (Checked after every test by the runner as well.) */
static void test_release_loaded_program_and_close(void)
{
    void *ctx = NULL, *p1 = NULL, *p2 = NULL;
    char err[2048] = "";
    program_t A, B;
    make_program(&A, "r1", k_mil, k_paths2, 2, 1);
    make_program(&B, "r2", k_mil_noweights, NULL, 0, 0);
    CHECK_OK(D->open(&ctx, err, sizeof err), err);
    CHECK_OK(D->compile(ctx, &A.args, &p1, err, sizeof err), err);
    CHECK_OK(D->load(ctx, p1, err, sizeof err), err);
    CHECK_OK(D->compile(ctx, &B.args, &p2, err, sizeof err), err);
    size_t mark = fk_ncalls();
    D->release(ctx, p2); /* never loaded: no unload */
    CHECK(count_calls(mark, "unloadWithQoS") == 0);
    mark = fk_ncalls();
    D->release(ctx, p1); /* loaded: unloaded first */
    CHECK(count_calls(mark, "unloadWithQoS") == 1);
    D->release(ctx, NULL);
    D->close(ctx);
    CHECK(fk_live() == 0);
    /* only the core's directories remain under the temp root */
    char core[1300];
    snprintf(core, sizeof core, "%s/core", g_root);
    CHECK(path_exists(core));
    free_program(&A);
    free_program(&B);
}

/* ------------------------------------------------------------------------ */
/* runner                                                                    */

static const tap_test k_tests[] = {
    {"unavailable without the framework (Linux)", test_unavailable_without_framework, 1},
    {"available with the fake; missing class named", test_available_with_fake_and_missing_class, 0},
    {"compile: descriptor, model, hexId dir, compileWithQoS 21", test_compile_sequence, 0},
    {"MIL as NSData; weights {path: {offset: @0, data}}", test_mil_is_nsdata_and_weights_dict, 0},
    {"no blobs: empty weights dictionary, never nil", test_empty_weights_dict_not_nil, 0},
    {"surfaces: flat IOSurface properties, locked, zeroed", test_surfaces, 0},
    {"load + evaluate: one request per load, built on unlocked surfaces", test_load_evaluate_reuses_request, 0},
    {"weights are baked at compile: rewritten files + load change nothing", test_weights_baked_at_compile, 0},
    {"data patch + load: no compile, equals a fresh compile", test_patch_data_then_load_equals_fresh_compile, 0},
    {"data patched before the first load is loaded", test_patch_before_first_load, 0},
    {"shared hexId directory: refcounted, each load installs its own compiled form", test_shared_hexid_directory, 0},
    {"clone: no compile, donor's compiled form until patched, any hexId", test_clone_copies_the_compiled_form, 0},
    {"NSError text in the anec error message", test_nserror_becomes_message, 0},
    {"bad arguments never reach the framework", test_bad_arguments, 0},
    {"release and close leave nothing behind", test_release_loaded_program_and_close, 0},
};

/* every test on the device each reading of the evidence describes:
   baked or optimistic load, hexId of MIL + paths or of the values too */
static void setup(size_t mode, size_t number, char *tag, size_t cap)
{
    static const char *const modes[4] = {"baked, hexId of MIL+paths", "baked, hexId of values",
                                         "optimistic, hexId of MIL+paths", "optimistic, hexId of values"};
    (void)number;
    g_optimistic = mode >= 2;
    g_hex_content = mode % 2;
    fk_set_device(g_optimistic ? FK_LOAD_WEIGHTS : FK_LOAD_DATA, g_hex_content);
    snprintf(tag, cap, "%s", modes[mode]);
}

int main(void)
{
    const tap_suite suite = {"anec-ane-protocol", k_tests, N_OF(k_tests), 4, 2, 1, setup};
    return tap_run(&suite);
}
