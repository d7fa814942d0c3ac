/* test_mil.c - MIL parser and sim compiler: accepted forms, rejections with line + constraint id. */
#include "mil_parse.h"
#include "sim_kernels.h"
#include "sim_plan.h"
#include "tharness.h"

#define HDR "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [1, 4, 1, 8]> x) {\n"
#define END "    } -> (y);\n}\n"

/* The limits a program is compiled with when a test does not give its own (the sim takes
   them from the manifest or the open options; it has no defaults of its own). */
static const anec_limits LIMITS = {16, 1, 16384, 49152, 1, 0};

static sim_plan *build(const char *mil, const anec_limits *lim, int *status, char *err, size_t n)
{
    return sim_plan_build(mil, strlen(mil), lim ? lim : &LIMITS, status, err, n);
}

static void accept(const char *mil)
{
    char err[1024] = "";
    int st;
    sim_plan *p = build(mil, NULL, &st, err, sizeof err);
    CHECK(p != NULL);
    if (!p)
        fprintf(stderr, "  unexpected rejection: %s\n", err);
    sim_plan_release(p);
}

static void reject(const char *mil, int status, const char *needle)
{
    char err[1024] = "";
    int st = 0;
    sim_plan *p = build(mil, NULL, &st, err, sizeof err);
    CHECK(p == NULL);
    CHECK(st == status);
    CHECK_HAS(err, needle);
    sim_plan_release(p);
}

/* The bits the sim stores for scalar const `name = dtype(literal)`: the decimal spellings
   the emitter writes (shortest round-trip %g decimals) must read back bit-exactly. */
static uint32_t literal_bits(const char *dtype, const char *literal)
{
    char mil[1024], err[512] = "";
    snprintf(mil, sizeof mil,
             HDR "        %s c = const()[name = string(\"c\"), val = %s(%s)];\n"
                 "        tensor<fp16, [1, 4, 1, 8]> y = relu(x = x)[name = string(\"y\")];\n" END,
             dtype, dtype, literal);
    int st;
    sim_plan *p = build(mil, NULL, &st, err, sizeof err);
    CHECK(p != NULL);
    if (!p) {
        fprintf(stderr, "  %s(%s) rejected: %s\n", dtype, literal, err);
        return 0xffffffffu;
    }
    uint32_t bits = 0xffffffffu;
    for (size_t i = 0; i < p->n_vals; i++) {
        const sim_value *v = &p->vals[i];
        if (strcmp(v->name, "c") != 0 || !v->cdata)
            continue;
        if (v->dt == MIL_DT_FP16) {
            uint16_t h;
            memcpy(&h, v->cdata, 2);
            bits = h;
        } else {
            memcpy(&bits, v->cdata, 4);
        }
    }
    sim_plan_release(p);
    return bits;
}

static void test_decimal_literals_read_back_exactly(void)
{
    static const struct { const char *dtype, *literal; uint32_t bits; } cases[] = {
        {"fp16", "1", 0x3c00}, {"fp16", "-10", 0xc900}, {"fp16", "0.75", 0x3a00},
        {"fp16", "0", 0x0000}, {"fp16", "-0.0", 0x8000},
        {"fp16", "1e-05", 0x00a8},        /* subnormal: 168 * 2^-24 */
        {"fp16", "6e-08", 0x0001},        /* the smallest subnormal */
        {"fp16", "6.1e-05", 0x03ff},      /* the largest subnormal */
        {"fp16", "6.104e-05", 0x0400},    /* the smallest normal */
        {"fp16", "65500", 0x7bff},        /* the largest finite: 65504 */
        {"fp16", "-65500", 0xfbff},
        {"fp16", "0.001302", 0x1555},     /* 1/768 */
        {"fp16", "0.0447", 0x29b9},       /* 0.044715 as fp16 */
        {"fp16", "inf", 0x7c00}, {"fp16", "-inf", 0xfc00},
        {"fp32", "0.1", 0x3dcccccd}, {"fp32", "0.33333334", 0x3eaaaaab},
        {"fp32", "1e-45", 0x00000001},    /* the smallest subnormal */
        {"fp32", "1.1754942e-38", 0x007fffff}, {"fp32", "1.1754944e-38", 0x00800000},
        {"fp32", "3.4028235e+38", 0x7f7fffff}, {"fp32", "-3.4028235e+38", 0xff7fffff},
        {"fp32", "16777216", 0x4b800000}, {"fp32", "1.2345679e+08", 0x4ceb79a3},
        {"fp32", "-0.0", 0x80000000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint32_t got = literal_bits(cases[i].dtype, cases[i].literal);
        CHECK(got == cases[i].bits);
        if (got != cases[i].bits)
            fprintf(stderr, "  %s(%s): bits 0x%x, want 0x%x\n", cases[i].dtype, cases[i].literal,
                    (unsigned)got, (unsigned)cases[i].bits);
    }
    uint32_t nan = literal_bits("fp16", "nan");
    CHECK((nan & 0x7c00u) == 0x7c00u && (nan & 0x03ffu) != 0);
}

/* A plan step whose kernel id has no kernel (a table out of step with the plan) fails the run
   naming the MIL op and its line; it never leaves the output as it was. */
static void test_a_step_without_a_kernel_is_an_error(void)
{
    char err[512] = "";
    int st;
    sim_plan *p = build(HDR "        tensor<fp16, [1, 4, 1, 8]> y = relu(x = x)[name = string(\"y\")];\n" END, NULL, &st, err,
                        sizeof err);
    CHECK(p != NULL && p->n_ops == 1);
    if (!p || p->n_ops != 1)
        return;
    CHECK(p->ops[0].op && strcmp(p->ops[0].op, "relu") == 0);
    uint16_t in[32] = {0}, out[32];
    uint8_t *ins[] = {(uint8_t *)in}, *outs[] = {(uint8_t *)out};
    sim_state *s = sim_state_new(p, 1);
    CHECK(s && sim_state_load(s, NULL, 0, 0, err, sizeof err) == ANEC_OK);
    CHECK(sim_state_run(s, ins, outs, err, sizeof err) == ANEC_OK);
    int kinds[] = {SOP_NONE, SOP_COUNT, -1};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        p->ops[0].kind = kinds[i];
        err[0] = 0;
        CHECK(sim_state_run(s, ins, outs, err, sizeof err) == ANEC_EDRIVER);
        CHECK_HAS(err, "model.mil:4: the sim has no kernel for op 'relu'");
    }
    sim_state_free(s);
    sim_plan_release(p);
}

/* concat is contested (ANE-CONCAT): rejected by default, built for a device that accepts it. */
static const char *const ACCEPT_CONCAT[] = {"concat", NULL};

static void concat_case(const char *body, const char *needle)
{
    char mil[2048], err[1024] = "";
    int st = 0;
    snprintf(mil, sizeof mil, HDR "        int32 ax = const()[name = string(\"ax\"), val = int32(1)];\n%s" END, body);
    sim_plan *p = sim_plan_build_accepting(mil, strlen(mil), &LIMITS, ACCEPT_CONCAT, &st, err, sizeof err);
    if (!needle) {
        CHECK(p != NULL && p->n_ops == 1 && p->ops[0].n_ins == 2 && p->ops[0].sizes[1] == 4);
        if (!p)
            fprintf(stderr, "  unexpected rejection: %s\n", err);
    } else {
        CHECK(p == NULL && st == ANEC_ECOMPILE);
        CHECK_HAS(err, needle);
    }
    sim_plan_release(p);
    p = sim_plan_build(mil, strlen(mil), &LIMITS, &st, err, sizeof err); /* the default device: Orion's reading */
    CHECK(p == NULL && st == ANEC_ECOMPILE);
    CHECK_HAS(err, "[ANE-CONCAT]");
    sim_plan_release(p);
}

/* constraint: ANE-CONCAT */
static void test_concat_only_where_the_device_accepts_it(void)
{
    const char *y = "        tensor<fp16, [1, 8, 1, 8]> y = ";
    char b[512];
    snprintf(b, sizeof b, "%sconcat(axis = ax, interleave = bool(false), values = (x, x))[name = string(\"y\")];\n", y);
    concat_case(b, NULL);
    snprintf(b, sizeof b, "%sconcat(axis = ax, interleave = bool(true), values = (x, x))[name = string(\"y\")];\n", y);
    concat_case(b, "interleave = true");
    snprintf(b, sizeof b, "%sconcat(axis = ax, values = x)[name = string(\"y\")];\n", y);
    concat_case(b, "must be a tuple");
    snprintf(b, sizeof b, "%sconcat(axis = ax, values = (x, q))[name = string(\"y\")];\n", y);
    concat_case(b, "item q refers to an undefined name");
    snprintf(b, sizeof b, "        tensor<fp16, [1, 4, 1, 4]> h = slice_by_size(x = x, begin = tensor<int32, [4]>([0, 0, 0, 0]), "
             "size = tensor<int32, [4]>([1, 4, 1, 4]))[name = string(\"h\")];\n"
             "%sconcat(axis = ax, values = (x, h))[name = string(\"y\")];\n", y);
    concat_case(b, "values differ outside axis 1");
    snprintf(b, sizeof b, "        tensor<fp16, [1, 4, 1, 16]> y = concat(axis = ax, values = (x, x))[name = string(\"y\")];\n");
    concat_case(b, "declared");
}

/* The sim's constant weights: one aligned copy per distinct payload, shared by reference;
   payloads that differ in one byte (or only in length) get buffers of their own. */
static void test_identical_weights_are_held_once(void)
{
    uint8_t a[200], b[200];
    for (int i = 0; i < 200; i++)
        a[i] = b[i] = (uint8_t)(i * 7);
    b[199] ^= 1;
    size_t before = sim_weight_bytes();
    void *x = sim_weight_acquire(a, sizeof a), *y = sim_weight_acquire(a, sizeof a);
    void *z = sim_weight_acquire(b, sizeof b), *w = sim_weight_acquire(a, 100);
    CHECK(x && x == y && z && z != x && w && w != x && w != z);
    CHECK(x && (uintptr_t)x % 64 == 0 && memcmp(x, a, sizeof a) == 0 && memcmp(z, b, sizeof b) == 0);
    CHECK(sim_weight_bytes() == before + 500);
    CHECK(sim_weight_release(x) == 1 && sim_weight_bytes() == before + 500); /* y still holds it */
    CHECK(sim_weight_release(y) == 1 && sim_weight_release(z) == 1 && sim_weight_release(w) == 1);
    CHECK(sim_weight_bytes() == before);
    CHECK(sim_weight_release(a) == 0); /* not one of them: the caller's to free */

    /* an fp16 matrix taken as slivers: shared with the same payload taken so, not with its
       rows, nor with a payload one half apart; element (r, k) at half k * 32 + r of sliver
       r / 32, rows past the last zero */
    if (sk_have_narrow()) {
        enum { R = 37, C = 5 };
        uint16_t m[R * C], n[R * C];
        for (int i = 0; i < R * C; i++)
            m[i] = n[i] = (uint16_t)(0x3c00 + i);
        n[R * C - 1] ^= 1;
        void *s1 = sim_weight_acquire_slivers(m, R, C), *s2 = sim_weight_acquire_slivers(m, R, C);
        void *s3 = sim_weight_acquire_slivers(n, R, C), *rows = sim_weight_acquire(m, sizeof m);
        CHECK(s1 && s1 == s2 && s3 && s3 != s1 && rows && rows != s1 && (uintptr_t)s1 % 64 == 0);
        const uint16_t *h = s1;
        int bad = 0;
        for (int r = 0; r < 64; r++)
            for (int k = 0; k < C; k++)
                bad += h[(r / 32) * 32 * C + k * 32 + r % 32] != (r < R ? m[r * C + k] : 0);
        CHECK(bad == 0);
        CHECK(sim_weight_bytes() == before + 3 * sizeof m);
        CHECK(sim_weight_acquire_slivers(m, 0, C) == NULL);
        CHECK(sim_weight_release(s1) && sim_weight_release(s2) && sim_weight_release(s3) && sim_weight_release(rows));
        CHECK(sim_weight_bytes() == before);
    }
}

int main(void)
{
    test_identical_weights_are_held_once();
    test_decimal_literals_read_back_exactly();
    test_a_step_without_a_kernel_is_an_error();
    test_concat_only_where_the_device_accepts_it();

    /* accepted forms */
    accept(HDR "        tensor<fp16, [1, 4, 1, 8]> y = relu(x = x)[name = string(\"y\")];\n" END);
    accept("program(1.0)\n[buildInfo = dict<tensor<string, []>, tensor<string, []>>({{\"coremlc-version\", \"1\"}})]\n"
           "{ func main<ios16>(tensor<fp16, [1, 4, 1, 8]> x) {\n"
           "  tensor<fp16, []> c=const()[name=tensor<string, []>(\"c\"), val=tensor<fp16, []>(0x1.8p-1)];\n"
           "  tensor<fp16, [1, 4, 1, 8]> y=mul(x=x,y=c)[name=tensor<string, []>(\"y\")];\n } -> (y);\n}\n");
    accept(HDR "        fp16 a = const()[name = string(\"a\"), val = fp16(-inf)];\n"
               "        fp32 b = const()[name = string(\"b\"), val = fp32(1.5e-3)];\n"
               "        tensor<fp16, [1, 4, 1, 8]> y = add(x = x, y = fp16(0x0p+0))[name = string(\"y\")];\n" END);
    accept(HDR "        int32 ax = const()[name = string(\"ax\"), val = int32(1)];\n"
               "        (tensor<fp16, [1, 2, 1, 8]> y, tensor<fp16, [1, 2, 1, 8]> z) = split(axis = ax, num_splits = int32(2), x = x)[name = string(\"s\")];\n"
               "    } -> (y, z);\n}\n");
    accept(HDR "        tensor<fp16, [1, 1, 1, 8]> y = reduce_sum(axes = tensor<int32, [1]>([1]), keep_dims = bool(true), x = x)[name = string(\"y\")];\n" END);

    /* syntax errors: line:col */
    reject(HDR "        tensor<fp16, [1, 4, 1, 8]> y = relu(x = x)\n" END, ANEC_EPARSE, "model.mil:5:5: expected ';'");
    reject("program(1.3) { func main(tensor<fp16, [?]> x) { } -> (x); }", ANEC_EPARSE, "dynamic dimension");
    reject("program(1.3) { func main(tensor<fp16, [4]> x) { ", ANEC_EPARSE, "end of input");
    reject("", ANEC_EPARSE, "model.mil:1:1: expected 'program");
    reject("program(1.3) { func main(tensor<fp16, [4]> x) { tensor<fp16, [4]> y = relu(x = x)[name = string(\"y)]; } -> (y); }",
           ANEC_EPARSE, "unterminated string");
    reject("program(1.3) { func main(tensor<fp16, [0]> x) { } -> (x); }", ANEC_EPARSE, "positive integer");

    /* ANE rejections name the line and the constraint */
    reject(HDR "        tensor<fp16, [1, 4, 1, 8]> y = gelu(x = x)[name = string(\"y\")];\n" END, ANEC_ECOMPILE,
           "model.mil:4: [ANE-GELU]");
    reject(HDR "        tensor<fp16, [1, 4, 1, 8]> y = rsqrt(x = x)[name = string(\"y\")];\n" END, ANEC_ECOMPILE, "[ANE-RSQRT]");
    reject(HDR "        tensor<fp16, [1, 4, 1, 8]> y = neg(x = x)[name = string(\"y\")];\n" END, ANEC_ECOMPILE, "[ANE-NEG]");
    reject(HDR "        int32 ax = const()[name = string(\"ax\"), val = int32(1)];\n"
               "        tensor<fp16, [1, 8, 1, 8]> y = concat(axis = ax, values = (x, x))[name = string(\"y\")];\n" END,
           ANEC_ECOMPILE, "model.mil:5: [ANE-CONCAT]");
    reject(HDR "        tensor<fp16, [8, 4]> w = const()[name = string(\"w\"), val = tensor<fp16, [8, 4]>([1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1])];\n"
               "        tensor<fp16, [1, 4, 1, 4]> y = matmul(transpose_x = bool(false), x = x, y = w)[name = string(\"y\")];\n" END,
           ANEC_ECOMPILE, "[ANE-MATMUL-FLAGS]");
    reject(HDR "        tensor<fp16, [1, 4, 1, 8]> y = relu(x = x)[name = string(\"y\")];\n    } -> (y, q);\n}\n", ANEC_ECOMPILE,
           "[ANE-LIVE-OUTPUTS] returned name 'q'");
    reject(HDR "        tensor<fp16, [1, 4, 1, 9]> y = relu(x = x)[name = string(\"y\")];\n" END, ANEC_ECOMPILE,
           "is declared tensor<fp16, [1, 4, 1, 9]> but the op produces tensor<fp16, [1, 4, 1, 8]>");
    reject(HDR "        tensor<fp16, [1, 4, 1, 8]> y = wibble(x = x)[name = string(\"y\")];\n" END, ANEC_ECOMPILE, "unknown op 'wibble'");

    /* limits: required */
    {
        const char *mil = HDR "        tensor<fp16, [1, 4, 1, 8]> y = relu(x = x)[name = string(\"y\")];\n" END;
        char err[256] = "";
        int st = 0;
        sim_plan *p = sim_plan_build(mil, strlen(mil), NULL, &st, err, sizeof err);
        CHECK(p == NULL && st == ANEC_EINVAL);
        CHECK_HAS(err, "no limits given");
    }
    {
        const char *mil = "program(1.3) { func main(tensor<fp32, [1, 4]> x) { tensor<fp32, [1, 4]> y = relu(x = x)[name = string(\"y\")]; } -> (y); }";
        anec_limits lim = {16, 1, 16384, 49152, 0, 0};
        char err[512];
        int st;
        sim_plan *p = build(mil, &lim, &st, err, sizeof err);
        CHECK(!p && st == ANEC_ECOMPILE);
        CHECK_HAS(err, "[ANE-FP32-IO]");
        lim.allow_fp32_io = 1;
        p = build(mil, &lim, &st, err, sizeof err);
        CHECK(p != NULL);
        CHECK(p && p->n_inputs == 1 && p->n_outputs == 1);
        sim_plan_release(p);
    }

    /* numbers from the text that have no value in their C type are refused, never cast */
    {
        static const char *const offsets[] = {"1e300", "18446744073709551616", "inf", "nan", "-64", "64.5"};
        for (size_t i = 0; i < sizeof offsets / sizeof offsets[0]; i++) {
            char mil[1024];
            snprintf(mil, sizeof mil,
                     HDR "        tensor<fp16, [4]> w = const()[name = string(\"w\"), val = tensor<fp16, [4]>(BLOBFILE("
                         "path = string(\"@model_path/weights/w.bin\"), offset = uint64(%s)))];\n"
                         "        tensor<fp16, [1, 4, 1, 8]> y = relu(x = x)[name = string(\"y\")];\n" END,
                     offsets[i]);
            reject(mil, ANEC_EPARSE, "BLOBFILE offset must be an integer literal in [0, 2^64)");
        }
        anec_limits lim = {-2147483647 - 1, 2147483647, 16384, 49152, 1, 0};
        char err[512];
        int st;
        const char *mil = HDR "        tensor<fp16, [4]> w = const()[name = string(\"w\"), val = tensor<fp16, [4]>(BLOBFILE("
                              "path = string(\"@model_path/weights/w.bin\"), offset = uint64(64)))];\n"
                              "        tensor<fp16, [1, 4, 1, 8]> y = mul(x = x, y = fp16(2))[name = string(\"y\")];\n" END;
        sim_plan *p = build(mil, &lim, &st, err, sizeof err);
        CHECK(!p && st == ANEC_ECOMPILE);
        CHECK_HAS(err, "at most 0 are allowed");
    }
    /* a NUL byte is an unexpected byte, not punctuation */
    {
        static const char text[] = "program(1.3)\0{ func main(tensor<fp16, [4]> x) { } -> (x); }";
        char err[512];
        mil_program *p = mil_parse(text, sizeof text - 1, err, sizeof err);
        CHECK(p == NULL);
        CHECK_HAS(err, "model.mil:1:13: unexpected byte 0x00");
        mil_free(p);
    }
    /* sizes the sim plans are bounded: a conv whose im2col buffer would overflow is refused */
    reject("program(1.3) { func main(tensor<fp16, [1, 1, 65536, 65536]> x) {"
           " tensor<fp16, [1, 1, 3, 3]> w = const()[name = string(\"w\"), val = tensor<fp16, [1, 1, 3, 3]>([1,1,1,1,1,1,1,1,1])];"
           " string pt = const()[name = string(\"pt\"), val = string(\"same\")];"
           " tensor<fp16, [1, 1, 65536, 65536]> y = conv(pad_type = pt, weight = w, x = x)[name = string(\"y\")]; } -> (y); }",
           ANEC_ECOMPILE, "im2col buffer would have more than 2^34 elements");

    /* parser never reads past the given length: parse every prefix of a valid program */
    {
        const char *mil = HDR "        tensor<fp16, [1, 4, 1, 8]> y = relu(x = x)[name = string(\"y\")];\n" END;
        size_t n = strlen(mil);
        int ok_full = 0;
        for (size_t k = 0; k <= n; k++) {
            char *copy = malloc(k ? k : 1);
            memcpy(copy, mil, k);
            char err[512];
            mil_program *p = mil_parse(copy, k, err, sizeof err);
            if (k == n)
                ok_full = p != NULL;
            else
                CHECK(p == NULL || k >= n - 1);
            mil_free(p);
            free(copy);
        }
        CHECK(ok_full);
    }
    T_DONE("test_mil");
}
