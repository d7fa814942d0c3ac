/* test_mil.c - MIL parser and sim compiler: accepted forms, rejections with line + constraint id. */
#include "sim_mil.h"
#include "sim_plan.h"
#include "tharness.h"

#define HDR "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [1, 4, 1, 8]> x) {\n"
#define END "    } -> (y);\n}\n"

static sim_plan *build(const char *mil, const anec_limits *lim, int *status, char *err, size_t n)
{
    return sim_plan_build(mil, strlen(mil), lim, status, err, n);
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

int main(void)
{
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

    /* limits */
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
