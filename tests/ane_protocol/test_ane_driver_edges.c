/*
 * test_ane_driver_edges.c - edges of the ane driver's protocol that the main
 * protocol program (test_ane_protocol.c) does not reach, against the same
 * recording fake of the Apple side (fake_apple.c):
 *
 *   - a weight with a length and no bytes, and a patch path that leaves the
 *     program directory, are refused before anything reaches the framework or
 *     the disk;
 *   - the request follows the surfaces bound: the same surfaces in another
 *     order get a new request, and the outputs follow the new order;
 *   - one surface bound twice is handed over once (no double unlock, which
 *     the fake flags as a protocol violation);
 *   - the options the core passes to every driver are accepted.
 *
 * None of these depends on how the device treats weights, so each test runs
 * once, on the fake's default device (test_ane_protocol.c runs its tests on
 * every reading of the evidence the fake models). TAP-like output; the exit status is the number of failed tests. Built and
 * run by tests/ane_protocol/test_ane_driver_edges.py.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "anec_driver.h"
#include "fake_apple.h"
#include "tap_runner.h"

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            printf("#   %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);       \
            g_failed_now = 1;                                                         \
            return;                                                                   \
        }                                                                             \
    } while (0)
#define CHECK_OK(rc, err)                                                             \
    do {                                                                              \
        int rc_ = (rc);                                                               \
        if (rc_ != ANEC_OK) {                                                         \
            printf("#   %s:%d: status %d: %s\n", __FILE__, __LINE__, rc_, (err));     \
            g_failed_now = 1;                                                         \
            return;                                                                   \
        }                                                                             \
    } while (0)

static const anec_driver *D = &anec_driver_ane;

/* Two fp16 inputs, one output, one BLOBFILE weight. */
static const char k_mil[] =
    "program(1.3)\n"
    "{\n"
    "    func main<ios18>(tensor<fp16, [1, 64, 1, 384]> a_in, tensor<fp16, [1, 64, 1, 384]> b_in) {\n"
    "        tensor<fp16, [64, 64, 1, 1]> w = const()[name = string(\"w\"), val = tensor<fp16, [64, 64, 1, 1]>(BLOBFILE(path = string(\"@model_path/weights/w.bin\"), offset = uint64(64)))];\n"
    "        tensor<fp16, [1, 64, 1, 384]> y = add(x = a_in, y = b_in)[name = string(\"y\")];\n"
    "    } -> (y);\n"
    "}\n";

#define W_PATH "@model_path/weights/w.bin"
#define SURFACE 49152

typedef struct {
    char dir[1300];
    unsigned char blob[256];
    anec_blob b;
    anec_compile_args args;
} program_t;

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        perror(path);
        exit(99);
    }
    fclose(f);
}

/* A program directory as the core prepares it: model.mil and weights/w.bin (a
   MILBlob v2 file with one fp16 tensor), and the compile arguments for it. */
static void make_program(program_t *p, const char *name)
{
    memset(p, 0, sizeof *p);
    char path[1400];
    snprintf(p->dir, sizeof p->dir, "%s/%s", g_root, name);
    mkdir(p->dir, 0755);
    snprintf(path, sizeof path, "%s/weights", p->dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/model.mil", p->dir);
    write_file(path, k_mil, strlen(k_mil));
    uint32_t u32;
    uint64_t u64;
    u32 = 1; memcpy(p->blob + 0, &u32, 4);            /* count */
    u32 = 2; memcpy(p->blob + 4, &u32, 4);            /* version */
    u32 = 0xDEADBEEFu; memcpy(p->blob + 64, &u32, 4); /* sentinel */
    u32 = 1; memcpy(p->blob + 68, &u32, 4);           /* fp16 */
    u64 = 128; memcpy(p->blob + 72, &u64, 8);         /* size */
    u64 = 128; memcpy(p->blob + 80, &u64, 8);         /* data offset */
    for (size_t i = 128; i < sizeof p->blob; i++)
        p->blob[i] = (unsigned char)(i * 7u);
    snprintf(path, sizeof path, "%s/weights/w.bin", p->dir);
    write_file(path, p->blob, sizeof p->blob);
    p->b = (anec_blob){W_PATH, p->blob, sizeof p->blob};
    p->args.mil = k_mil;
    p->args.mil_len = strlen(k_mil);
    p->args.blobs = &p->b;
    p->args.n_blobs = 1;
    p->args.dir = p->dir;
    p->args.limits = (anec_limits){16, 1, 16384, SURFACE, 1, 0};
}

/* Messages sent to the framework since `from` (lines starting with + or -). */
static int messages_since(size_t from)
{
    int n = 0;
    for (size_t i = from; i < fk_ncalls(); i++)
        n += fk_call(i)[0] == '+' || fk_call(i)[0] == '-';
    return n;
}

static int count_calls(size_t from, const char *needle)
{
    int n = 0;
    for (size_t i = from; i < fk_ncalls(); i++)
        n += strstr(fk_call(i), needle) != NULL;
    return n;
}

static void test_weight_without_bytes_refused(void)
{
    void *ctx = NULL, *prog = NULL;
    char err[2048] = "";
    program_t p;
    make_program(&p, "nodata");
    CHECK_OK(D->open(&ctx, err, sizeof err), err);
    p.b.data = NULL; /* a length but no bytes */
    size_t mark = fk_ncalls();
    CHECK(D->compile(ctx, &p.args, &prog, err, sizeof err) == ANEC_EINVAL && !prog);
    CHECK(strstr(err, W_PATH) && strstr(err, "no data"));
    CHECK(messages_since(mark) == 0);
    D->close(ctx);
}

static void test_patch_path_outside_the_program_refused(void)
{
    void *ctx = NULL, *prog = NULL;
    char err[2048] = "";
    program_t p;
    make_program(&p, "patch");
    CHECK_OK(D->open(&ctx, err, sizeof err), err);
    CHECK_OK(D->compile(ctx, &p.args, &prog, err, sizeof err), err);
    static const char *const bad[] = {"../escape.bin", "weights/../../escape.bin", "/escape.bin", "", "weights/"};
    size_t mark = fk_ncalls();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = D->patch_data(ctx, prog, bad[i], p.blob, sizeof p.blob, 0, err, sizeof err);
        if (rc != ANEC_EINVAL)
            printf("#   patch path '%s': status %d\n", bad[i], rc);
        CHECK(rc == ANEC_EINVAL && strstr(err, "not a relative program path"));
    }
    CHECK(messages_since(mark) == 0);
    char outside[1300];
    snprintf(outside, sizeof outside, "%s/escape.bin", g_root);
    CHECK(access(outside, F_OK) != 0);
    /* a path inside the program is accepted */
    CHECK_OK(D->patch_data(ctx, prog, "weights/w.bin", p.blob, sizeof p.blob, 0, err, sizeof err), err);
    D->release(ctx, prog);
    D->close(ctx);
}

/* The CPU's access to a surface's bytes: the one place that knows how it reaches them, under a
   lock held only while it copies (ANE-SURFACE-LOCK; read-only for reads). */
static void cpu_write(void *ctx, anec_surface *s, const uint8_t *src)
{
    char err[256] = "";
    CHECK_OK(D->surface_lock(ctx, s, 0, err, sizeof err), err);
    memcpy(s->base, src, s->bytes);
    D->surface_unlock(ctx, s, 0);
}

static void cpu_read(void *ctx, anec_surface *s, uint8_t *dst)
{
    char err[256] = "";
    CHECK_OK(D->surface_lock(ctx, s, 1, err, sizeof err), err);
    memcpy(dst, s->base, s->bytes);
    D->surface_unlock(ctx, s, 1);
}

static uint8_t g_a[SURFACE], g_b[SURFACE], g_y[SURFACE];

/* The output read back equals what the fake device computes for inputs bound in the order
   (first, second). */
static int output_is(void *ctx, anec_surface *y, const uint8_t *first, const uint8_t *second, uint64_t w)
{
    cpu_read(ctx, y, g_y);
    const uint8_t *ins[2] = {first, second};
    size_t lens[2] = {SURFACE, SURFACE};
    for (size_t k = 0; k < SURFACE; k += 61)
        if (g_y[k] != fk_expected_output(ins, lens, 2, w, 0, k))
            return 0;
    return 1;
}

static void test_request_follows_the_binding_order(void)
{
    void *ctx = NULL, *prog = NULL;
    char err[2048] = "";
    program_t p;
    make_program(&p, "order");
    CHECK_OK(D->open(&ctx, err, sizeof err), err);
    CHECK_OK(D->compile(ctx, &p.args, &prog, err, sizeof err), err);
    CHECK_OK(D->load(ctx, prog, err, sizeof err), err);
    uint64_t w = fk_last(FK_MODEL)->wsum;
    anec_surface a, b, y;
    CHECK_OK(D->surface_create(ctx, SURFACE, &a, err, sizeof err), err);
    CHECK_OK(D->surface_create(ctx, SURFACE, &b, err, sizeof err), err);
    CHECK_OK(D->surface_create(ctx, SURFACE, &y, err, sizeof err), err);
    for (size_t k = 0; k < SURFACE; k++) {
        g_a[k] = (uint8_t)(k * 3);
        g_b[k] = (uint8_t)(k * 5 + 1);
    }
    cpu_write(ctx, &a, g_a);
    cpu_write(ctx, &b, g_b);
    /* the two orders give different outputs on this device: the check below can fail */
    const uint8_t *ab[2] = {g_a, g_b}, *ba[2] = {g_b, g_a};
    size_t lens[2] = {SURFACE, SURFACE};
    int differ = 0;
    for (size_t k = 0; k < SURFACE && !differ; k += 61)
        differ = fk_expected_output(ab, lens, 2, w, 0, k) != fk_expected_output(ba, lens, 2, w, 0, k);
    CHECK(differ);

    anec_surface *in_ab[2] = {&a, &b}, *in_ba[2] = {&b, &a}, *out[1] = {&y};
    CHECK_OK(D->evaluate(ctx, prog, in_ab, 2, out, 1, err, sizeof err), err);
    CHECK(output_is(ctx, &y, g_a, g_b, w));
    size_t mark = fk_ncalls();
    CHECK_OK(D->evaluate(ctx, prog, in_ba, 2, out, 1, err, sizeof err), err);
    CHECK(count_calls(mark, "+_ANERequest requestWithInputs") == 1);
    CHECK(output_is(ctx, &y, g_b, g_a, w));
    /* and back: a new request again, not the first one's leftovers */
    mark = fk_ncalls();
    CHECK_OK(D->evaluate(ctx, prog, in_ab, 2, out, 1, err, sizeof err), err);
    CHECK(count_calls(mark, "+_ANERequest requestWithInputs") == 1);
    CHECK(output_is(ctx, &y, g_a, g_b, w));
    D->surface_free(ctx, &a);
    D->surface_free(ctx, &b);
    D->surface_free(ctx, &y);
    D->release(ctx, prog);
    D->close(ctx);
}

static void test_one_surface_bound_twice(void)
{
    void *ctx = NULL, *prog = NULL;
    char err[2048] = "";
    program_t p;
    make_program(&p, "twice");
    CHECK_OK(D->open(&ctx, err, sizeof err), err);
    CHECK_OK(D->compile(ctx, &p.args, &prog, err, sizeof err), err);
    CHECK_OK(D->load(ctx, prog, err, sizeof err), err);
    uint64_t w = fk_last(FK_MODEL)->wsum;
    anec_surface a, y;
    CHECK_OK(D->surface_create(ctx, SURFACE, &a, err, sizeof err), err);
    CHECK_OK(D->surface_create(ctx, SURFACE, &y, err, sizeof err), err);
    for (size_t k = 0; k < SURFACE; k++)
        g_a[k] = (uint8_t)(k * 11 + 2);
    cpu_write(ctx, &a, g_a);
    anec_surface *in[2] = {&a, &a}, *out[1] = {&y};
    for (int run = 0; run < 2; run++) {
        CHECK_OK(D->evaluate(ctx, prog, in, 2, out, 1, err, sizeof err), err);
        CHECK(output_is(ctx, &y, g_a, g_a, w));
        CHECK(fk_nviolations() == 0);
    }
    /* the CPU can still write the surface after the evaluations */
    cpu_write(ctx, &a, g_b);
    D->surface_free(ctx, &a);
    D->surface_free(ctx, &y);
    D->release(ctx, prog);
    D->close(ctx);
}

static void test_core_options_accepted(void)
{
    void *ctx = NULL;
    char err[2048] = "";
    CHECK_OK(D->open(&ctx, err, sizeof err), err);
    /* anec_runtime_open passes these to every driver it opens */
    CHECK_OK(D->set_option(ctx, "threads", "4", err, sizeof err), err);
    CHECK_OK(D->set_option(ctx, "compile_budget", "119", err, sizeof err), err);
    CHECK(D->set_option(ctx, "no_such_option", "1", err, sizeof err) == ANEC_EINVAL && strstr(err, "no_such_option"));
    D->close(ctx);
}

static const tap_test k_tests[] = {
    {"a weight with a length and no bytes never reaches the framework", test_weight_without_bytes_refused, 0},
    {"patch paths outside the program are refused", test_patch_path_outside_the_program_refused, 0},
    {"the request follows the order the surfaces are bound in", test_request_follows_the_binding_order, 0},
    {"one surface bound twice is handed over once", test_one_surface_bound_twice, 0},
    {"the core's driver options are accepted", test_core_options_accepted, 0},
};

int main(void)
{
    /* each test once, on the fake's default device */
    const tap_suite suite = {"anec-ane-edges", k_tests, sizeof k_tests / sizeof k_tests[0], 1, 2, 1, NULL};
    return tap_run(&suite);
}
