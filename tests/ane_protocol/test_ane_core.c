/*
 * test_ane_core.c - the runtime core (rt_*.c) on the ane
 * driver, against the recording fake of the Apple side.
 *
 * test_ane_protocol.c checks the driver alone; this program checks what the
 * core really does through the public API (anec_rt.h) on driver "ane", in
 * every reading of the public evidence the fake models (fake_apple.h: load
 * reads the compiled data, re-reads weights/, keeps the weights in the model
 * object, or also caches them per hexId; hexId of MIL + paths or of the
 * values too). For each reading and each reload strategy, forced, the
 * selftest's probe tells it apart: the output either equals a fresh compile
 * with the new weights or stays the old one. With the verdict the probe
 * gives (g_verdict), every reload path and every cache hit in auto mode
 * computes exactly what a fresh compile with the new weights computes, or
 * falls back (and says so); no path is ever stale.
 *
 * TAP-like output; the exit status is the number of failed tests.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "anec_rt.h"
#include "fake_apple.h"
#include "tap_runner.h"

/* the M4 limits (anec/targets.py), as a manifest records them */
static const anec_limits LIM = {16, 1, 16384, 49152, 1, 0};

static int g_hex_content;
static fk_reading g_reading;
static unsigned g_verdict; /* the no-compile strategies the reading honours: what the selftest verifies */

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            printf("#   %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);       \
            g_failed_now = 1;                                                         \
            return;                                                                   \
        }                                                                             \
    } while (0)
#define CHECK_RC(expr)                                                                \
    do {                                                                              \
        int rc_ = (expr);                                                             \
        if (rc_ != ANEC_OK) {                                                         \
            printf("#   %s:%d: %s -> %d: %s\n", __FILE__, __LINE__, #expr, rc_,       \
                   anec_last_error(NULL));                                            \
            g_failed_now = 1;                                                         \
            return;                                                                   \
        }                                                                             \
    } while (0)

static int count_calls(size_t from, const char *needle)
{
    int n = 0;
    for (size_t i = from; i < fk_ncalls(); i++)
        n += strstr(fk_call(i), needle) != NULL;
    return n;
}

/* Entries of a directory other than "core-*" (the runtime's own root). */
static int hex_dirs(const char *root)
{
    DIR *d = opendir(root);
    int n = 0;
    struct dirent *e;
    if (!d)
        return -1;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.' && strncmp(e->d_name, "core", 4) != 0;
    closedir(d);
    return n;
}

/* ---- programs: y = zeta * w - alpha (one weight tensor), and with two ---- */

static const char k_mil[] =
    "program(1.3)\n"
    "{\n"
    "    func main<ios18>(tensor<fp16, [1, 64, 1, 8]> zeta, tensor<fp16, [1, 64, 1, 8]> alpha) {\n"
    "        tensor<fp16, [1, 64, 1, 8]> w = const()[name = string(\"w\"), val = "
    "tensor<fp16, [1, 64, 1, 8]>(BLOBFILE(path = string(\"@model_path/weights/w.bin\"), "
    "offset = uint64(64)))];\n"
    "        tensor<fp16, [1, 64, 1, 8]> t = mul(x = zeta, y = w)[name = string(\"t\")];\n"
    "        tensor<fp16, [1, 64, 1, 8]> y = sub(x = t, y = alpha)[name = string(\"y\")];\n"
    "    } -> (y);\n"
    "}\n";

static const char k_mil2[] =
    "program(1.3)\n"
    "{\n"
    "    func main<ios18>(tensor<fp16, [1, 64, 1, 8]> zeta, tensor<fp16, [1, 64, 1, 8]> alpha) {\n"
    "        tensor<fp16, [1, 64, 1, 8]> w = const()[name = string(\"w\"), val = "
    "tensor<fp16, [1, 64, 1, 8]>(BLOBFILE(path = string(\"@model_path/weights/w.bin\"), "
    "offset = uint64(64)))];\n"
    "        tensor<fp16, [1, 64, 1, 8]> v = const()[name = string(\"v\"), val = "
    "tensor<fp16, [1, 64, 1, 8]>(BLOBFILE(path = string(\"@model_path/weights/v.bin\"), "
    "offset = uint64(64)))];\n"
    "        tensor<fp16, [1, 64, 1, 8]> t = mul(x = zeta, y = w)[name = string(\"t\")];\n"
    "        tensor<fp16, [1, 64, 1, 8]> u = add(x = t, y = v)[name = string(\"u\")];\n"
    "        tensor<fp16, [1, 64, 1, 8]> y = sub(x = u, y = alpha)[name = string(\"y\")];\n"
    "    } -> (y);\n"
    "}\n";

#define N_W (64 * 8)
#define BLOB_LEN (128 + 2 * N_W)

/* MILBlob v2 with one fp16 tensor of N_W elements, all equal to `h` (fp16 bits). */
static void make_blob(unsigned char *b, uint16_t h)
{
    memset(b, 0, BLOB_LEN);
    uint32_t u32;
    uint64_t u64;
    u32 = 1; memcpy(b + 0, &u32, 4);
    u32 = 2; memcpy(b + 4, &u32, 4);
    u32 = 0xDEADBEEFu; memcpy(b + 64, &u32, 4);
    u32 = 1; memcpy(b + 68, &u32, 4);
    u64 = 2 * N_W; memcpy(b + 72, &u64, 8);
    u64 = 128; memcpy(b + 80, &u64, 8);
    for (size_t i = 0; i < N_W; i++)
        memcpy(b + 128 + 2 * i, &h, 2);
}

typedef struct {
    const char *mil;
    anec_blob blobs[2];
    unsigned char data[2][BLOB_LEN];
    size_t n;
} prog_t;

static const char *const k_paths[2] = {"@model_path/weights/w.bin", "@model_path/weights/v.bin"};

static void make_prog(prog_t *p, int two, uint16_t hw, uint16_t hv)
{
    p->mil = two ? k_mil2 : k_mil;
    p->n = two ? 2 : 1;
    uint16_t h[2] = {hw, hv};
    for (size_t i = 0; i < p->n; i++) {
        make_blob(p->data[i], h[i]);
        p->blobs[i] = (anec_blob){k_paths[i], p->data[i], BLOB_LEN};
    }
}

/* The weight hash a fresh compile + load with p's weights gives. */
static uint64_t fresh_hash(const prog_t *p)
{
    const char *paths[2];
    const uint8_t *datas[2];
    size_t lens[2];
    for (size_t i = 0; i < p->n; i++) {
        paths[i] = p->blobs[i].path;
        datas[i] = p->blobs[i].data;
        lens[i] = p->blobs[i].len;
    }
    return fk_compiled_hash(p->mil, paths, datas, lens, p->n);
}

/* Does running q give exactly what a fresh compile of p's weights gives? */
static int computes(anec_program *q, const prog_t *p)
{
    for (size_t i = 0; i < 2; i++)
        memset(anec_program_input_surface(q, i), (int)(3 + i), 49152);
    if (anec_run(q) != ANEC_OK)
        return 0;
    const uint8_t *iv[2] = {anec_program_input_surface(q, 0), anec_program_input_surface(q, 1)};
    size_t il[2] = {49152, 49152};
    const uint8_t *out = anec_program_output_surface(q, 0);
    uint64_t w = fresh_hash(p);
    for (size_t k = 0; k < 49152; k += 127)
        if (out[k] != fk_expected_output(iv, il, 2, w, 0, k))
            return 0;
    return 1;
}

static anec_runtime *open_rt(unsigned verified)
{
    anec_options opts = {0};
    static char core_root[1200];
    snprintf(core_root, sizeof core_root, "%s/core-root", g_root);
    mkdir(core_root, 0755);
    opts.temp_root = core_root;
    opts.reload_verified = verified;
    anec_runtime *rt = NULL;
    if (anec_runtime_open("ane", &opts, &rt) != ANEC_OK) {
        printf("#   open: %s\n", anec_last_error(NULL));
        return NULL;
    }
    return rt;
}

#define VERIFIED_PATCH (ANEC_RELOAD_VERIFIED | ANEC_RELOAD_DATA_PATCH)
#define VERDICT (ANEC_RELOAD_VERIFIED | g_verdict)

/* The strategies a reading honours (fake_apple.h): a rewrite of `data` reaches
   the same object only when loads read files; a new, never-compiled object
   loads its data unless its hexId has cached (stale) weights. */
static unsigned honoured(fk_reading r, int hex_content)
{
    switch (r) {
    case FK_LOAD_DATA:
    case FK_LOAD_WEIGHTS:
        return ANEC_RELOAD_DATA_PATCH | ANEC_RELOAD_NEW_OBJECT;
    case FK_LOAD_MEMORY:
        return ANEC_RELOAD_NEW_OBJECT;
    case FK_LOAD_MEMORY_SHARED:
        return hex_content ? ANEC_RELOAD_NEW_OBJECT : 0u;
    }
    return 0;
}

/* The strategy auto mode picks for a data-patchable program under mask v. */
static int preferred(unsigned v)
{
    return v & ANEC_RELOAD_DATA_PATCH ? ANEC_RELOAD_DATA_PATCH
           : v & ANEC_RELOAD_NEW_OBJECT ? ANEC_RELOAD_NEW_OBJECT
                                        : ANEC_RELOAD_RECOMPILE;
}

/* ---- tests ------------------------------------------------------------------ */

static void test_compile_runs_the_compiled_model(void)
{
    anec_runtime *rt = open_rt(0);
    CHECK(rt);
    prog_t a;
    make_prog(&a, 0, 0x3C00, 0);
    anec_program *p = NULL;
    CHECK(strcmp(anec_driver_name(rt), "ane") == 0);
    CHECK((anec_reload_verified(rt) & ANEC_RELOAD_DATA_PATCH) == 0); /* nothing verified on the ane */
    size_t mark = fk_ncalls();
    CHECK_RC(anec_compile(rt, a.mil, strlen(a.mil), a.blobs, a.n, &LIM, &p));
    CHECK(count_calls(mark, "compileWithQoS") == 1);
    CHECK(count_calls(mark, "modelWithMILText") == 1); /* no uncompiled clone */
    fk_obj *m = fk_last(FK_MODEL);
    CHECK(count_calls(mark, "IOSurfaceCreate Width=49152 Height=1 BytesPerElement=1 "
                            "BytesPerRow=49152 AllocSize=49152 PixelFormat=0") == 3);
    CHECK_RC(anec_load(p));
    CHECK(m->compiled && m->loaded && fk_last(FK_MODEL) == m);
    CHECK(computes(p, &a));
    anec_tensor_info info;
    CHECK_RC(anec_program_input(p, 0, &info));
    CHECK(strcmp(info.name, "alpha") == 0 && info.decl_index == 1);
    /* the compiled data of a one-tensor program is its BLOBFILE: patchable, but unverified */
    anec_reload_info ri;
    CHECK_RC(anec_program_reload_info(p, &ri));
    CHECK(ri.data_patchable == 1 && ri.strategy == ANEC_RELOAD_RECOMPILE);
    CHECK(strstr(ri.why, "anec.selftest") != NULL);
    anec_program_free(p);
    anec_runtime_close(rt);
    CHECK(fk_live() == 0 && hex_dirs(g_root) == 0);
}

/* every reload strategy: equal to a fresh compile, never stale */
static void reload_case(int two, unsigned verified, int want_strategy, int want_compiles)
{
    anec_runtime *rt = open_rt(verified);
    CHECK(rt);
    prog_t a, b;
    make_prog(&a, two, 0x3C00, 0x3800);
    make_prog(&b, two, 0x4000, 0x3400);
    anec_program *p = NULL;
    CHECK_RC(anec_compile(rt, a.mil, strlen(a.mil), a.blobs, a.n, &LIM, &p));
    CHECK_RC(anec_load(p));
    CHECK(computes(p, &a));
    anec_reload_info ri;
    CHECK_RC(anec_program_reload_info(p, &ri));
    CHECK(ri.strategy == want_strategy);
    size_t mark = fk_ncalls();
    CHECK_RC(anec_reload_weights(p, b.blobs, b.n));
    CHECK(count_calls(mark, "compileWithQoS") == want_compiles);
    CHECK(computes(p, &b));
    /* and back: a second reload of the same kind */
    CHECK_RC(anec_reload_weights(p, a.blobs, a.n));
    CHECK(computes(p, &a));
    /* unchanged weights: nothing happens at all */
    mark = fk_ncalls();
    CHECK_RC(anec_reload_weights(p, a.blobs, a.n));
    CHECK(count_calls(mark, "WithQoS") == 0);
    struct anec_stats st;
    CHECK_RC(anec_stats(rt, &st));
    CHECK(st.reloads == 3 && st.compiles == (uint64_t)(1 + 2 * want_compiles));
    CHECK(st.reloads_data_patch == (uint64_t)(want_strategy == ANEC_RELOAD_DATA_PATCH ? 2 : 0));
    CHECK(st.reloads_recompile == (uint64_t)(want_strategy == ANEC_RELOAD_RECOMPILE ? 2 : 0));
    CHECK(st.reloads_new_object == (uint64_t)(want_strategy == ANEC_RELOAD_NEW_OBJECT ? 2 : 0));
    anec_program_free(p);
    anec_runtime_close(rt);
    CHECK(fk_live() == 0 && hex_dirs(g_root) == 0);
}

/* constraint: ANE-DATA-IS-BLOBFILE ANE-SAME-OBJECT-PATCH */
static void test_reload_with_the_verdict(void)
{
    int s = preferred(g_verdict);
    reload_case(0, VERDICT, s, s == ANEC_RELOAD_RECOMPILE);
}
/* constraint: ANE-BAKED-WEIGHTS */
static void test_reload_falls_back_to_recompile_unverified(void) { reload_case(0, 0, ANEC_RELOAD_RECOMPILE, 1); }
/* constraint: ANE-DATA-IS-BLOBFILE */
static void test_reload_two_tensors_recompiles(void) { reload_case(1, VERDICT, ANEC_RELOAD_RECOMPILE, 1); }

/* The selftest's probe of one strategy, forced on a runtime that verified
   nothing: the output either equals a fresh compile with the new weights (the
   reading honours it) or is exactly the old one (it does not: the probe sees
   "no change" and leaves the strategy unverified). */
static void probe_case(int strategy)
{
    anec_runtime *rt = open_rt(0);
    CHECK(rt);
    prog_t a, b;
    make_prog(&a, 0, 0x3C00, 0);
    make_prog(&b, 0, 0x4000, 0);
    anec_program *p = NULL;
    CHECK_RC(anec_compile(rt, a.mil, strlen(a.mil), a.blobs, a.n, &LIM, &p));
    CHECK_RC(anec_load(p));
    CHECK(computes(p, &a));
    size_t mark = fk_ncalls();
    CHECK_RC(anec_reload_weights_using(p, b.blobs, b.n, strategy));
    CHECK(count_calls(mark, "compileWithQoS") == (strategy == ANEC_RELOAD_RECOMPILE));
    int fresh = strategy == ANEC_RELOAD_RECOMPILE || (honoured(g_reading, g_hex_content) & (unsigned)strategy);
    CHECK(computes(p, fresh ? &b : &a));
    /* what it computes with survives an unload and a load */
    CHECK_RC(anec_unload(p));
    CHECK_RC(anec_load(p));
    CHECK(computes(p, fresh ? &b : &a));
    anec_program_free(p);
    anec_runtime_close(rt);
    CHECK(fk_live() == 0 && hex_dirs(g_root) == 0);
}

/* constraint: ANE-BAKED-WEIGHTS ANE-SAME-OBJECT-PATCH */
static void test_probe_data_patch(void) { probe_case(ANEC_RELOAD_DATA_PATCH); }
/* constraint: ANE-BAKED-WEIGHTS ANE-NEW-OBJECT-LOAD */
static void test_probe_new_object(void) { probe_case(ANEC_RELOAD_NEW_OBJECT); }
static void test_probe_recompile(void) { probe_case(ANEC_RELOAD_RECOMPILE); }

/* the data patch from arrays: the driver is handed the new file's bytes (mapped) */
static void test_reload_arrays_data_patch(void)
{
    anec_runtime *rt = open_rt(VERDICT);
    CHECK(rt);
    int s = preferred(g_verdict);
    prog_t a, b;
    make_prog(&a, 0, 0x3C00, 0);
    make_prog(&b, 0, 0x4000, 0);
    anec_program *p = NULL;
    CHECK_RC(anec_compile(rt, a.mil, strlen(a.mil), a.blobs, a.n, &LIM, &p));
    CHECK_RC(anec_load(p));
    float w32[N_W];
    for (size_t i = 0; i < N_W; i++)
        w32[i] = 2.0f; /* 0x4000 in fp16: b's weights, converted by the core */
    anec_weight_array arr = {64, w32, N_W, ANEC_DTYPE_FP32};
    long long bad = 7;
    size_t mark = fk_ncalls();
    if (s == ANEC_RELOAD_RECOMPILE) { /* nothing verified that reloads without a compile: refused */
        CHECK(anec_reload_arrays(p, k_paths[0], &arr, 1, &bad) == ANEC_EINVAL && computes(p, &a));
        anec_program_free(p);
        anec_runtime_close(rt);
        CHECK(fk_live() == 0 && hex_dirs(g_root) == 0);
        return;
    }
    CHECK_RC(anec_reload_arrays(p, k_paths[0], &arr, 1, &bad));
    CHECK(bad == -1 && count_calls(mark, "compileWithQoS") == 0);
    CHECK(computes(p, &b));
    w32[9] = 70000.0f; /* beyond fp16: refused, nothing changes */
    CHECK(anec_reload_arrays(p, k_paths[0], &arr, 1, &bad) == ANEC_EWEIGHTS && bad == 0);
    CHECK(computes(p, &b));
    uint16_t w16[N_W];
    for (size_t i = 0; i < N_W; i++)
        w16[i] = 0x3C00;
    arr = (anec_weight_array){64, w16, N_W, ANEC_DTYPE_FP16};
    CHECK_RC(anec_reload_arrays(p, k_paths[0], &arr, 1, &bad));
    CHECK(computes(p, &a));
    mark = fk_ncalls();
    CHECK_RC(anec_reload_arrays(p, k_paths[0], &arr, 1, &bad)); /* unchanged: nothing happens */
    CHECK(count_calls(mark, "WithQoS") == 0);
    struct anec_stats st;
    CHECK_RC(anec_stats(rt, &st));
    CHECK(st.reloads == 3 && st.compiles == 1);
    CHECK(st.reloads_data_patch == (s == ANEC_RELOAD_DATA_PATCH ? 2u : 0u));
    CHECK(st.reloads_new_object == (s == ANEC_RELOAD_NEW_OBJECT ? 2u : 0u));
    anec_program_free(p);
    anec_runtime_close(rt);
    CHECK(fk_live() == 0 && hex_dirs(g_root) == 0);
}

/* cache hits: same MIL and weight paths */
static void cache_case(int two, unsigned verified, int same_weights, int want_compiles)
{
    anec_runtime *rt = open_rt(verified);
    CHECK(rt);
    prog_t a, b;
    make_prog(&a, two, 0x3C00, 0x3800);
    make_prog(&b, two, same_weights ? 0x3C00 : 0x4200, same_weights ? 0x3800 : 0x3000);
    anec_program *p = NULL, *q = NULL;
    CHECK_RC(anec_compile(rt, a.mil, strlen(a.mil), a.blobs, a.n, &LIM, &p));
    CHECK_RC(anec_load(p));
    size_t mark = fk_ncalls();
    CHECK_RC(anec_compile(rt, b.mil, strlen(b.mil), b.blobs, b.n, &LIM, &q));
    CHECK(count_calls(mark, "compileWithQoS") == want_compiles);
    CHECK_RC(anec_load(q));
    /* both loaded at once, each with its own weights */
    CHECK(computes(q, &b));
    CHECK(computes(p, &a));
    CHECK_RC(anec_unload(p));
    CHECK_RC(anec_load(p));
    CHECK(computes(p, &a));
    CHECK(computes(q, &b));
    struct anec_stats st;
    CHECK_RC(anec_stats(rt, &st));
    CHECK(st.compiles == (uint64_t)(1 + want_compiles) && st.cache_hits == (uint64_t)(1 - want_compiles));
    /* the first program goes; the second keeps working */
    anec_program_free(p);
    CHECK_RC(anec_unload(q));
    CHECK_RC(anec_load(q));
    CHECK(computes(q, &b));
    anec_program_free(q);
    anec_runtime_close(rt);
    CHECK(fk_live() == 0 && hex_dirs(g_root) == 0);
}

static void test_cache_hit_same_weights(void) { cache_case(1, 0, 1, 0); }
/* constraint: ANE-NEW-OBJECT-LOAD */
static void test_cache_hit_other_weights_new_object(void)
{
    cache_case(0, VERDICT, 0, !(g_verdict & ANEC_RELOAD_NEW_OBJECT));
}
/* a verified same-object patch alone does not make a clone with other weights safe */
static void test_cache_hit_other_weights_patch_only_compiles(void) { cache_case(0, VERIFIED_PATCH, 0, 1); }
static void test_cache_hit_other_weights_unverified_compiles(void) { cache_case(0, 0, 0, 1); }
static void test_cache_hit_other_weights_two_tensors_compiles(void) { cache_case(1, VERDICT, 0, 1); }

/* A, then B compiled under the same key (no new object verified), then A
   again: the third is a clone of the first only where a never-compiled
   object surely gets A (the reading where the framework caches weights per
   hexId would hand it B, the last compiled): never stale */
static void test_cache_hit_after_a_compile_with_other_weights(void)
{
    anec_runtime *rt = open_rt(VERDICT);
    CHECK(rt);
    prog_t a, b;
    make_prog(&a, 0, 0x3C00, 0);
    make_prog(&b, 0, 0x4400, 0);
    anec_program *p = NULL, *q = NULL, *r = NULL;
    CHECK_RC(anec_compile(rt, a.mil, strlen(a.mil), a.blobs, a.n, &LIM, &p));
    CHECK_RC(anec_compile(rt, b.mil, strlen(b.mil), b.blobs, b.n, &LIM, &q));
    size_t mark = fk_ncalls();
    CHECK_RC(anec_compile(rt, a.mil, strlen(a.mil), a.blobs, a.n, &LIM, &r));
    int new_object = (g_verdict & ANEC_RELOAD_NEW_OBJECT) != 0;
    CHECK(count_calls(mark, "compileWithQoS") == !new_object);
    CHECK_RC(anec_load(r));
    CHECK(computes(r, &a));
    CHECK_RC(anec_load(q));
    CHECK(computes(q, &b));
    anec_program_free(p);
    anec_program_free(q);
    anec_program_free(r);
    anec_runtime_close(rt);
    CHECK(fk_live() == 0 && hex_dirs(g_root) == 0);
}

/* a program freed, then loaded again: the cache keeps its compiled form */
static void test_cache_keeps_a_closed_program(void)
{
    anec_runtime *rt = open_rt(VERDICT);
    CHECK(rt);
    prog_t a, b;
    make_prog(&a, 0, 0x3C00, 0);
    make_prog(&b, 0, 0x4400, 0);
    anec_program *p = NULL, *q = NULL;
    CHECK_RC(anec_compile(rt, a.mil, strlen(a.mil), a.blobs, a.n, &LIM, &p));
    anec_program_free(p);
    size_t mark = fk_ncalls();
    CHECK_RC(anec_compile(rt, b.mil, strlen(b.mil), b.blobs, b.n, &LIM, &q));
    CHECK(count_calls(mark, "compileWithQoS") == !(g_verdict & ANEC_RELOAD_NEW_OBJECT));
    CHECK_RC(anec_load(q));
    CHECK(computes(q, &b));
    anec_program_free(q);
    anec_runtime_close(rt);
    CHECK(fk_live() == 0 && hex_dirs(g_root) == 0);
}

/* caller buffers (anec_evaluate) become IOSurfaces of exactly their sizes */
static void test_caller_buffers(void)
{
    anec_runtime *rt = open_rt(0);
    CHECK(rt);
    prog_t a;
    make_prog(&a, 0, 0x4200, 0);
    anec_program *p = NULL;
    CHECK_RC(anec_compile(rt, a.mil, strlen(a.mil), a.blobs, a.n, &LIM, &p));
    CHECK_RC(anec_load(p));
    static unsigned char in0[49152], in1[49152], out0[49152];
    memset(in0, 1, sizeof in0);
    memset(in1, 2, sizeof in1);
    anec_buffer ins[2] = {{in0, sizeof in0}, {in1, sizeof in1}};
    anec_buffer outs[1] = {{out0, sizeof out0}};
    size_t mark = fk_ncalls();
    CHECK_RC(anec_evaluate(p, ins, 2, outs, 1));
    CHECK(count_calls(mark, "IOSurfaceCreate") == 3);
    const uint8_t *iv[2] = {in0, in1};
    size_t il[2] = {sizeof in0, sizeof in1};
    for (size_t k = 0; k < sizeof out0; k += 331)
        CHECK(out0[k] == fk_expected_output(iv, il, 2, fresh_hash(&a), 0, k));
    anec_program_free(p);
    anec_runtime_close(rt);
    CHECK(fk_live() == 0 && hex_dirs(g_root) == 0);
}

/* anec_call: inputs written under write locks, outputs read under read-only
   locks, nothing locked during the evaluation or after (ANE-SURFACE-LOCK; the
   fake poisons what the CPU sees of an unlocked surface, so a copy outside a
   lock gives wrong outputs) */
/* constraint: ANE-SURFACE-LOCK */
static void test_call_locks_only_around_copies(void)
{
    anec_runtime *rt = open_rt(0);
    CHECK(rt);
    prog_t a;
    make_prog(&a, 0, 0x4200, 0);
    anec_program *p = NULL;
    CHECK_RC(anec_compile(rt, a.mil, strlen(a.mil), a.blobs, a.n, &LIM, &p));
    CHECK_RC(anec_load(p));
    static uint16_t x0[N_W], x1[N_W], y[N_W];
    for (size_t i = 0; i < N_W; i++) {
        x0[i] = (uint16_t)(0x3C00 + i);
        x1[i] = (uint16_t)(0x4000 + 3 * i);
    }
    anec_io ins[2] = {{ANEC_DTYPE_FP16, x0, sizeof x0}, {ANEC_DTYPE_FP16, x1, sizeof x1}};
    anec_io outs[1] = {{ANEC_DTYPE_FP16, y, sizeof y}};
    size_t mark = fk_ncalls();
    CHECK_RC(anec_call(p, ins, 2, outs, 1));
    CHECK(count_calls(mark, "IOSurfaceLock IOSurface(49152) 0") == 2);   /* the two inputs, for writing */
    CHECK(count_calls(mark, "IOSurfaceLock IOSurface(49152) 1") == 1);   /* the output, read-only */
    CHECK(count_calls(mark, "IOSurfaceUnlock") == 3);
    fk_obj *last = fk_last(FK_SURFACE); /* the last surface made: the output */
    CHECK(last && last->locks == 0);
    /* the device saw the inputs (packed at byte 0, the rest zero) and the loaded weights */
    static uint8_t iv0[49152], iv1[49152];
    memcpy(iv0, x0, sizeof x0);
    memcpy(iv1, x1, sizeof x1);
    const uint8_t *iv[2] = {iv0, iv1};
    size_t il[2] = {49152, 49152};
    const uint8_t *yb = (const uint8_t *)y;
    for (size_t k = 0; k < sizeof y; k += 7)
        CHECK(yb[k] == fk_expected_output(iv, il, 2, fresh_hash(&a), 0, k));
    anec_program_free(p);
    anec_runtime_close(rt);
    CHECK(fk_live() == 0 && hex_dirs(g_root) == 0);
}

/* anec_reload_input_views: a refused view locks nothing; good views lock each
   written surface once for writing around the copy, and the device sees the
   transposed values (ANE-SURFACE-LOCK) */
static void test_input_views_lock_only_around_copies(void)
{
    anec_runtime *rt = open_rt(0);
    CHECK(rt);
    prog_t a;
    make_prog(&a, 0, 0x4200, 0);
    anec_program *p = NULL;
    CHECK_RC(anec_compile(rt, a.mil, strlen(a.mil), a.blobs, a.n, &LIM, &p));
    CHECK_RC(anec_load(p));
    /* src0 viewed as its 8 x 64 transpose, src1 as it is */
    static uint16_t src0[N_W], src1[N_W], y[N_W];
    for (size_t i = 0; i < N_W; i++) {
        src0[i] = (uint16_t)(0x3C00 + i);
        src1[i] = (uint16_t)(0x4000 + 3 * i);
    }
    anec_input_view v[2] = {{0, src0, ANEC_DTYPE_FP16, 64, 8, 1, 64}, {1, src1, ANEC_DTYPE_FP16, 1, N_W, 0, 1}};
    long long bad = 0;
    src1[5] = 0x7C00; /* +Inf: refused before any surface is locked */
    size_t mark = fk_ncalls();
    CHECK(anec_reload_input_views(p, v, 2, &bad) == ANEC_EWEIGHTS && bad == 1);
    CHECK(count_calls(mark, "IOSurfaceLock") == 0);
    src1[5] = (uint16_t)(0x4000 + 15);
    mark = fk_ncalls();
    CHECK_RC(anec_reload_input_views(p, v, 2, &bad));
    CHECK(bad == -1);
    CHECK(count_calls(mark, "IOSurfaceLock IOSurface(49152) 0") == 2);
    CHECK(count_calls(mark, "IOSurfaceUnlock") == 2);
    anec_io ins[2] = {{ANEC_DTYPE_FP16, NULL, 0}, {ANEC_DTYPE_FP16, NULL, 0}};
    anec_io outs[1] = {{ANEC_DTYPE_FP16, y, sizeof y}};
    CHECK_RC(anec_call(p, ins, 2, outs, 1));
    static uint16_t t0[N_W];
    for (size_t r = 0; r < 64; r++)
        for (size_t c = 0; c < 8; c++)
            t0[r * 8 + c] = src0[c * 64 + r];
    static uint8_t iv0[49152], iv1[49152];
    memcpy(iv0, t0, sizeof t0);
    memcpy(iv1, src1, sizeof src1);
    const uint8_t *iv[2] = {iv0, iv1};
    size_t il[2] = {49152, 49152};
    const uint8_t *yb = (const uint8_t *)y;
    for (size_t k = 0; k < sizeof y; k += 7)
        CHECK(yb[k] == fk_expected_output(iv, il, 2, fresh_hash(&a), 0, k));
    anec_program_free(p);
    anec_runtime_close(rt);
    CHECK(fk_live() == 0 && hex_dirs(g_root) == 0);
}

/* anec_write_input_slice: a refused slice locks nothing; a good one locks the
   surface that holds the input once for writing around its rows (every
   stage's, for a pipeline), and the next call, which leaves the input out,
   makes the device see the old content with the new rows (ANE-SURFACE-LOCK) */
/* constraint: ANE-SURFACE-LOCK ANE-INPUT-RESIDENT */
static void test_slice_writes_lock_only_around_their_rows(void)
{
    anec_runtime *rt = open_rt(0);
    CHECK(rt);
    prog_t a;
    make_prog(&a, 0, 0x4200, 0);
    anec_program *p = NULL, *q = NULL;
    CHECK_RC(anec_compile(rt, a.mil, strlen(a.mil), a.blobs, a.n, &LIM, &p));
    CHECK_RC(anec_compile(rt, a.mil, strlen(a.mil), a.blobs, a.n, &LIM, &q));
    CHECK_RC(anec_load(p));
    CHECK_RC(anec_load(q));
    static uint16_t alpha[N_W], zeta[N_W], col[64], y[N_W];
    for (size_t i = 0; i < N_W; i++) {
        alpha[i] = (uint16_t)(0x3C00 + i);
        zeta[i] = (uint16_t)(0x4000 + 3 * i);
    }
    for (size_t c = 0; c < 64; c++)
        col[c] = (uint16_t)(0x5000 + c);
    anec_io ins[2] = {{ANEC_DTYPE_FP16, alpha, sizeof alpha}, {ANEC_DTYPE_FP16, zeta, sizeof zeta}};
    /* one program, then a pipeline of two stages that both read both inputs */
    anec_pipe_src srcs[2] = {{-1, 0}, {-1, 1}};
    anec_pipe_stage stages[2] = {{p, srcs}, {q, srcs}};
    anec_pipe_src outs[1] = {{1, 0}};
    anec_pipeline *pl = NULL;
    CHECK_RC(anec_pipeline_create(rt, stages, 2, 2, outs, 1, &pl));
    for (int piped = 0; piped < 2; piped++) {
        anec_program *target = piped ? NULL : p;
        anec_pipeline *ptarget = piped ? pl : NULL;
        CHECK_RC(piped ? anec_pipeline_set_inputs(pl, ins, 2, 0) : anec_set_inputs(p, ins, 2));
        /* column 3 of zeta [1, 64, 1, 8]: 64 rows of 8, one element each */
        anec_slice bad = {64, 8, 1, 8, 1}, good = {64, 8, 1, 3, 1};
        anec_io rows = {ANEC_DTYPE_FP16, col, sizeof col};
        size_t mark = fk_ncalls();
        CHECK(anec_write_input_slice(target, ptarget, 1, &bad, &rows) == ANEC_EINVAL);
        CHECK(count_calls(mark, "IOSurfaceLock") == 0);
        mark = fk_ncalls();
        CHECK_RC(anec_write_input_slice(target, ptarget, 1, &good, &rows));
        CHECK(count_calls(mark, "IOSurfaceLock IOSurface(49152) 0") == 1 + piped);
        CHECK(count_calls(mark, "IOSurfaceLock IOSurface(49152) 1") == 0);
        CHECK(count_calls(mark, "IOSurfaceUnlock") == 1 + piped);
        anec_io keep[2] = {{ANEC_DTYPE_FP16, NULL, 0}, {ANEC_DTYPE_FP16, NULL, 0}};
        anec_io out[1] = {{ANEC_DTYPE_FP16, y, sizeof y}};
        CHECK_RC(piped ? anec_pipeline_call(pl, keep, 2, out, 1) : anec_call(p, keep, 2, out, 1));
        static uint16_t z2[N_W];
        memcpy(z2, zeta, sizeof zeta);
        for (size_t c = 0; c < 64; c++)
            z2[c * 8 + 3] = col[c];
        static uint8_t iv0[49152], iv1[49152];
        memcpy(iv0, alpha, sizeof alpha);
        memcpy(iv1, z2, sizeof z2);
        const uint8_t *iv[2] = {iv0, iv1};
        size_t il[2] = {49152, 49152};
        const uint8_t *yb = (const uint8_t *)y;
        for (size_t k = 0; k < sizeof y; k += 7)
            CHECK(yb[k] == fk_expected_output(iv, il, 2, fresh_hash(&a), 0, k));
        fk_obj *last = fk_last(FK_SURFACE);
        CHECK(last && last->locks == 0);
    }
    anec_pipeline_free(pl);
    anec_program_free(p);
    anec_program_free(q);
    anec_runtime_close(rt);
    CHECK(fk_live() == 0 && hex_dirs(g_root) == 0);
}

static void test_core_compile_error_on_ane(void)
{
    anec_runtime *rt = open_rt(0);
    CHECK(rt);
    prog_t a;
    make_prog(&a, 0, 0x3C00, 0);
    anec_program *p = NULL;
    fk_fail("compileWithQoS:options:error:", "InvalidMILProgram: unsupported op 'concat'");
    int rc = anec_compile(rt, a.mil, strlen(a.mil), a.blobs, a.n, &LIM, &p);
    CHECK(rc == ANEC_ECOMPILE && p == NULL);
    CHECK(strstr(anec_last_error(NULL), "InvalidMILProgram: unsupported op 'concat'") != NULL);
    struct anec_stats st;
    CHECK_RC(anec_stats(rt, &st));
    CHECK(st.compiles == 0 && st.process_compiles == 0);
    fk_fail(NULL, NULL);
    anec_runtime_close(rt);
    CHECK(fk_live() == 0);
    CHECK(hex_dirs(g_root) == 0);
}

static const tap_test k_tests[] = {
    {"compile: the program runs the model that was compiled", test_compile_runs_the_compiled_model, 0},
    {"probe: a forced data patch is fresh or exactly stale", test_probe_data_patch, 0},
    {"probe: a forced new object is fresh or exactly stale", test_probe_new_object, 0},
    {"probe: a forced recompile is fresh", test_probe_recompile, 0},
    {"reload with the probe's verdict: preferred strategy, equals a fresh compile", test_reload_with_the_verdict, 0},
    {"reload from arrays with the verdict: converted, checked, equals a fresh compile", test_reload_arrays_data_patch, 0},
    {"reload, nothing verified: recompile, equals a fresh compile", test_reload_falls_back_to_recompile_unverified, 0},
    {"reload, two tensors (opaque data): recompile, equals a fresh compile", test_reload_two_tensors_recompiles, 0},
    {"cache hit, same weights: clone, no compile", test_cache_hit_same_weights, 0},
    {"cache hit, other weights, verdict: a new object where verified", test_cache_hit_other_weights_new_object, 0},
    {"cache hit, other weights, only data patch verified: compiled", test_cache_hit_other_weights_patch_only_compiles, 0},
    {"cache hit, other weights, unverified: compiled", test_cache_hit_other_weights_unverified_compiles, 0},
    {"cache hit, other weights, two tensors: compiled", test_cache_hit_other_weights_two_tensors_compiles, 0},
    {"cache hit after a compile with other weights: never stale", test_cache_hit_after_a_compile_with_other_weights, 0},
    {"cache keeps a closed program's compiled form", test_cache_keeps_a_closed_program, 0},
    {"caller buffers become IOSurfaces of their sizes", test_caller_buffers, 0},
    {"anec_call locks surfaces only around its copies", test_call_locks_only_around_copies, 0},
    {"input views lock surfaces only around their copies", test_input_views_lock_only_around_copies, 0},
    {"slice writes lock surfaces only around their rows", test_slice_writes_lock_only_around_their_rows, 0},
    {"device compile error reaches anec_last_error", test_core_compile_error_on_ane, 0},
};

/* every reading of what a load reads (fake_apple.h) x both hexId kinds */
static void setup(size_t mode, size_t number, char *tag, size_t cap)
{
    (void)number;
    g_reading = (fk_reading)(mode / 2);
    g_hex_content = (int)(mode % 2);
    g_verdict = honoured(g_reading, g_hex_content);
    fk_set_device(g_reading, g_hex_content);
    anec_process_reset_budget("ane"); /* a new process per test (allowed for the fake only) */
    snprintf(tag, cap, "%s, hexId of %s", fk_reading_name(g_reading), g_hex_content ? "values" : "MIL+paths");
}

int main(void)
{
    const tap_suite suite = {"anec-ane-core", k_tests, sizeof k_tests / sizeof k_tests[0], FK_N_READINGS * 2, 3, 0,
                             setup};
    return tap_run(&suite);
}
