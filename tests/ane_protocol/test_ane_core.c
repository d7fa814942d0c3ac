/*
 * test_ane_core.c - the runtime core (rt_core.c) on the ane driver, against
 * the recording fake of the Apple side.
 *
 * test_ane_protocol.c checks the driver alone; this program checks the calls
 * the core really makes through the public API (anec_rt.h) on driver "ane":
 * compile keeps a compiled template and runs a clone of it, a cache hit is a
 * clone (no compile), delta reload is unload + load, caller buffers become
 * IOSurfaces, and closing the runtime leaves no object and no temp directory.
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

static int g_failed_now;
static char g_base[1024];
static char g_root[1100];

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            printf("#   %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);       \
            g_failed_now = 1;                                                         \
            return;                                                                   \
        }                                                                             \
    } while (0)
#define CHECK_RC(rt, expr)                                                            \
    do {                                                                              \
        int rc_ = (expr);                                                             \
        if (rc_ != ANEC_OK) {                                                         \
            printf("#   %s:%d: %s -> %d: %s\n", __FILE__, __LINE__, #expr, rc_,       \
                   (rt) ? anec_last_error(rt) : "");                                  \
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

/* ---- a program: y = x * w (conv-free elementwise), w from a BLOBFILE ---- */

static const char k_mil[] =
    "program(1.3)\n"
    "[buildInfo = dict<string, string>({{\"coremlc-component-MIL\", \"3510.2.1\"}, "
    "{\"coremlc-version\", \"3505.4.1\"}})]\n"
    "{\n"
    "    func main<ios18>(tensor<fp16, [1, 64, 1, 8]> zeta, tensor<fp16, [1, 64, 1, 8]> alpha) {\n"
    "        tensor<fp16, [1, 64, 1, 8]> w = const()[name = string(\"w\"), val = "
    "tensor<fp16, [1, 64, 1, 8]>(BLOBFILE(path = string(\"@model_path/weights/w.bin\"), "
    "offset = uint64(64)))];\n"
    "        tensor<fp16, [1, 64, 1, 8]> t = mul(x = zeta, y = w)[name = string(\"t\")];\n"
    "        tensor<fp16, [1, 64, 1, 8]> y = sub(x = t, y = alpha)[name = string(\"y\")];\n"
    "    } -> (y);\n"
    "}\n";

#define N_W (64 * 8)

/* MILBlob v2 with one fp16 tensor of N_W elements, all equal to `h` (fp16 bits). */
static void make_blob(unsigned char *b, size_t len, uint16_t h)
{
    memset(b, 0, len);
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

#define BLOB_LEN (128 + 2 * N_W)

static uint64_t hash_of(const unsigned char *blob)
{
    const char *c[1] = {(const char *)blob};
    size_t l[1] = {BLOB_LEN};
    return fk_weights_hash(c, l, 1);
}

static void test_core_on_ane(void)
{
    anec_runtime *rt = NULL;
    anec_program *p = NULL, *q = NULL;
    unsigned char w1[BLOB_LEN], w2[BLOB_LEN], w3[BLOB_LEN];
    make_blob(w1, sizeof w1, 0x3C00); /* 1.0 */
    make_blob(w2, sizeof w2, 0x4000); /* 2.0 */
    make_blob(w3, sizeof w3, 0x4200); /* 3.0 */
    anec_blob b = {"@model_path/weights/w.bin", w1, sizeof w1};
    anec_options opts = {0};
    char core_root[1200];
    snprintf(core_root, sizeof core_root, "%s/core-root", g_root);
    mkdir(core_root, 0755);
    opts.temp_root = core_root;

    CHECK(anec_driver_available("ane", NULL, 0) == 1);
    CHECK_RC(NULL, anec_runtime_open("ane", &opts, &rt));
    CHECK(strcmp(anec_driver_name(rt), "ane") == 0);

    /* compile: one device compile; the program runs a clone of the template */
    size_t mark = fk_ncalls();
    CHECK_RC(rt, anec_compile(rt, k_mil, strlen(k_mil), &b, 1, NULL, &p));
    CHECK(count_calls(mark, "compileWithQoS") == 1);
    CHECK(count_calls(mark, "modelWithMILText") == 2);
    CHECK(count_calls(mark, " loadWithQoS") == 0);
    CHECK(hex_dirs(g_root) == 1);
    /* core-owned surfaces: uniform, >= the minimum, flat IOSurfaces */
    CHECK(count_calls(mark, "IOSurfaceCreate Width=49152 Height=1 BytesPerElement=1 "
                            "BytesPerRow=49152 AllocSize=49152 PixelFormat=0") == 3);
    mark = fk_ncalls();
    CHECK_RC(rt, anec_load(p));
    CHECK(count_calls(mark, " loadWithQoS") == 1);
    fk_obj *mp = fk_last(FK_MODEL);
    CHECK(mp->loaded && !mp->compiled && mp->wsum == hash_of(w1));

    /* run twice: one request */
    mark = fk_ncalls();
    CHECK_RC(rt, anec_run(p));
    CHECK_RC(rt, anec_run(p));
    CHECK(count_calls(mark, "requestWithInputs") == 1);
    CHECK(count_calls(mark, "evaluateWithQoS") == 2);
    /* inputs are bound alphabetically: alpha (binding 0) then zeta */
    anec_tensor_info info;
    CHECK_RC(rt, anec_program_input(p, 0, &info));
    CHECK(strcmp(info.name, "alpha") == 0 && info.decl_index == 1);

    /* delta reload: unload, patch, load; no compile */
    anec_blob b2 = {"@model_path/weights/w.bin", w2, sizeof w2};
    mark = fk_ncalls();
    CHECK_RC(rt, anec_reload_weights(p, &b2, 1));
    CHECK(count_calls(mark, "compileWithQoS") == 0);
    CHECK(count_calls(mark, " unloadWithQoS") == 1 && count_calls(mark, " loadWithQoS") == 1);
    CHECK(fk_last(FK_MODEL)->wsum == hash_of(w2));

    /* the same MIL and paths with other weights: a cache hit, cloned, no compile */
    anec_blob b3 = {"@model_path/weights/w.bin", w3, sizeof w3};
    mark = fk_ncalls();
    CHECK_RC(rt, anec_compile(rt, k_mil, strlen(k_mil), &b3, 1, NULL, &q));
    CHECK(count_calls(mark, "compileWithQoS") == 0);
    CHECK_RC(rt, anec_load(q));
    fk_obj *mq = fk_last(FK_MODEL);
    CHECK(mq != mp && mq->loaded && mq->wsum == hash_of(w3));
    struct anec_stats st;
    CHECK_RC(rt, anec_stats(rt, &st));
    CHECK(st.compiles == 1 && st.cache_hits == 1);
    /* both programs share one hexId directory and stay loaded with their own weights */
    CHECK(hex_dirs(g_root) == 1);
    CHECK(fk_last(FK_MODEL)->wsum == hash_of(w3));

    /* caller buffers (anec_evaluate) become IOSurfaces of exactly their sizes */
    unsigned char in0[49152], in1[49152], out0[49152];
    memset(in0, 1, sizeof in0);
    memset(in1, 2, sizeof in1);
    anec_buffer ins[2] = {{in0, sizeof in0}, {in1, sizeof in1}};
    anec_buffer outs[1] = {{out0, sizeof out0}};
    mark = fk_ncalls();
    CHECK_RC(rt, anec_evaluate(q, ins, 2, outs, 1));
    CHECK(count_calls(mark, "IOSurfaceCreate") == 3);
    const uint8_t *iv[2] = {in0, in1};
    size_t il[2] = {sizeof in0, sizeof in1};
    for (size_t k = 0; k < sizeof out0; k += 331)
        CHECK(out0[k] == fk_expected_output(iv, il, 2, hash_of(w3), 0, k));

    /* free the first program: the directory stays for the second */
    anec_program_free(p);
    p = NULL;
    CHECK(hex_dirs(g_root) == 1);
    CHECK_RC(rt, anec_unload(q));
    CHECK_RC(rt, anec_load(q));
    CHECK(fk_last(FK_MODEL)->wsum == hash_of(w3));
    anec_program_free(q);
    anec_runtime_close(rt);
    rt = NULL;
    /* nothing left: no object, no hexId directory */
    CHECK(fk_live() == 0);
    CHECK(hex_dirs(g_root) == 0);
}

static void test_core_compile_error_on_ane(void)
{
    anec_runtime *rt = NULL;
    anec_program *p = NULL;
    unsigned char w1[BLOB_LEN];
    make_blob(w1, sizeof w1, 0x3C00);
    anec_blob b = {"@model_path/weights/w.bin", w1, sizeof w1};
    anec_options opts = {0};
    char core_root[1200];
    snprintf(core_root, sizeof core_root, "%s/core-root", g_root);
    mkdir(core_root, 0755);
    opts.temp_root = core_root;
    CHECK_RC(NULL, anec_runtime_open("ane", &opts, &rt));
    fk_fail("compileWithQoS:options:error:", "InvalidMILProgram: unsupported op 'concat'");
    int rc = anec_compile(rt, k_mil, strlen(k_mil), &b, 1, NULL, &p);
    CHECK(rc == ANEC_ECOMPILE && p == NULL);
    CHECK(strstr(anec_last_error(rt), "InvalidMILProgram: unsupported op 'concat'") != NULL);
    struct anec_stats st;
    CHECK_RC(rt, anec_stats(rt, &st));
    CHECK(st.compiles == 0);
    fk_fail(NULL, NULL);
    anec_runtime_close(rt);
    CHECK(fk_live() == 0);
    CHECK(hex_dirs(g_root) == 0);
}

typedef struct {
    const char *name;
    void (*fn)(void);
} test_t;

static const test_t k_tests[] = {
    {"core on ane: template + clone, reload, cache hit, buffers, cleanup", test_core_on_ane},
    {"core on ane: device compile error reaches anec_last_error", test_core_compile_error_on_ane},
};

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *tmp = getenv("TMPDIR");
    snprintf(g_base, sizeof g_base, "%s/anec-ane-core-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_base)) {
        perror("mkdtemp");
        return 99;
    }
    size_t n = sizeof k_tests / sizeof k_tests[0];
    int failed = 0;
    printf("1..%zu\n", n);
    for (size_t i = 0; i < n; i++) {
        snprintf(g_root, sizeof g_root, "%s/t%02zu", g_base, i + 1);
        mkdir(g_root, 0755);
        fk_init(g_root);
        g_failed_now = 0;
        k_tests[i].fn();
        for (size_t v = 0; v < fk_nviolations(); v++) {
            printf("#   protocol violation: %s\n", fk_violation(v));
            g_failed_now = 1;
        }
        if (fk_pool_depth() != 0) {
            printf("#   %d autorelease pool(s) left open\n", fk_pool_depth());
            g_failed_now = 1;
        }
        printf("%sok %zu - %s\n", g_failed_now ? "not " : "", i + 1, k_tests[i].name);
        failed += g_failed_now;
        fk_shutdown();
    }
    if (!failed) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_base);
        if (system(cmd) != 0)
            printf("# could not remove %s\n", g_base);
    }
    printf("# %zu tests, %d failed\n", n, failed);
    return failed;
}
