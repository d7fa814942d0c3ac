/* test_rt.c - the public C API end to end on the sim driver (run under ASan by `make c-asan`). */
#define _POSIX_C_SOURCE 200809L
#include <sys/stat.h>
#include <unistd.h>

#include "anec_rt.h"
#include "fp16.h"
#include "tharness.h"

static const char *MIL =
    "program(1.3)\n{\n"
    "    func main<ios18>(tensor<fp16, [1, 8, 1, 4]> x, tensor<fp16, [1, 8, 1, 4]> a) {\n"
    "        tensor<fp16, [8, 8, 1, 1]> w = const()[name = string(\"w\"), val = tensor<fp16, [8, 8, 1, 1]>(BLOBFILE(path = string(\"@model_path/weights/w.bin\"), offset = uint64(64)))];\n"
    "        tensor<fp16, [1, 8, 1, 4]> c = conv(weight = w, x = x)[name = string(\"c\")];\n"
    "        tensor<fp16, [1, 8, 1, 4]> y = add(x = c, y = a)[name = string(\"y\")];\n"
    "    } -> (y, c);\n}\n";

static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }

/* BLOBFILE with the 8x8 matrix value * identity */
static void make_blob(uint8_t *buf, float value)
{
    memset(buf, 0, 128 + 128);
    put32(buf, 1);
    put32(buf + 4, 2);
    put32(buf + 64, 0xDEADBEEFu);
    put32(buf + 68, 1);
    put32(buf + 72, 128);
    put32(buf + 80, 128);
    uint16_t *w = (uint16_t *)(void *)(buf + 128);
    for (int o = 0; o < 8; o++)
        for (int i = 0; i < 8; i++)
            w[o * 8 + i] = anec_h_from_f(o == i ? value : 0.0f);
}

static float out0(anec_program *p, size_t j, size_t k)
{
    return anec_f_from_h(((uint16_t *)(void *)anec_program_output_surface(p, j))[k]);
}

static void fill(anec_program *p, float xv, float av)
{
    /* binding order: a (0), x (1) */
    uint16_t *a = (uint16_t *)(void *)anec_program_input_surface(p, 0), *x = (uint16_t *)(void *)anec_program_input_surface(p, 1);
    for (int i = 0; i < 32; i++) {
        a[i] = anec_h_from_f(av);
        x[i] = anec_h_from_f(xv);
    }
}

int main(void)
{
    /* tmpfs when there is one: the 1000 reloads below fsync every file they write */
    char root[64];
    snprintf(root, sizeof root, "%s/anec-ctest-XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    CHECK(mkdtemp(root) != NULL);
    anec_options opts = {3, root, 2};
    anec_runtime *rt = NULL;
    CHECK(anec_runtime_open("sim", &opts, &rt) == ANEC_OK);
    CHECK(strcmp(anec_driver_name(rt), "sim") == 0);
    anec_runtime *none = NULL;
    CHECK(anec_runtime_open("nope", NULL, &none) == ANEC_EINVAL && none == NULL);

    static uint8_t blob[256], blob2[256];
    make_blob(blob, 2.0f);
    make_blob(blob2, 3.0f);
    anec_blob b = {"@model_path/weights/w.bin", blob, sizeof blob};
    anec_program *p = NULL;
    CHECK(anec_compile(rt, MIL, strlen(MIL), &b, 1, NULL, &p) == ANEC_OK);
    CHECK(anec_program_num_inputs(p) == 2 && anec_program_num_outputs(p) == 2);
    anec_tensor_info info;
    CHECK(anec_program_input(p, 0, &info) == ANEC_OK && strcmp(info.name, "a") == 0 && info.decl_index == 1);
    CHECK(info.dtype == ANEC_DTYPE_FP16 && info.rank == 4 && info.shape[1] == 8 && info.bytes == 64);
    CHECK(anec_program_output(p, 0, &info) == ANEC_OK && strcmp(info.name, "c") == 0);
    CHECK(anec_program_input(p, 2, &info) == ANEC_EINVAL);
    CHECK(anec_program_input_surface_bytes(p) == 49152);

    CHECK(anec_run(p) == ANEC_ESTATE);
    CHECK(strstr(anec_last_error(rt), "not loaded") != NULL);
    CHECK(anec_load(p) == ANEC_OK);
    fill(p, 1.0f, 0.5f);
    CHECK(anec_run(p) == ANEC_OK);
    CHECK(out0(p, 0, 0) == 2.0f && out0(p, 1, 0) == 2.5f); /* c = 2x, y = c + a */

    /* caller buffers: non-uniform sizes fail like the device */
    {
        static uint8_t in0[49152], in1[65536], o0[49152], o1[49152];
        anec_buffer ins[2] = {{in0, sizeof in0}, {in1, sizeof in1}}, outs[2] = {{o0, sizeof o0}, {o1, sizeof o1}};
        CHECK(anec_evaluate(p, ins, 2, outs, 2) == ANEC_EEVAL);
        CHECK_HAS(anec_last_error(rt), "status=0x1d");
        CHECK_HAS(anec_last_error(rt), "[ANE-UNIFORM-SURFACES]");
        ins[1].bytes = 49152;
        ((uint16_t *)(void *)in1)[0] = anec_h_from_f(1.0f);
        CHECK(anec_evaluate(p, ins, 2, outs, 2) == ANEC_OK);
        CHECK(anec_f_from_h(((uint16_t *)(void *)o1)[0]) == 2.0f);
        ins[0].bytes = ins[1].bytes = 1024;
        CHECK(anec_evaluate(p, ins, 2, outs, 2) == ANEC_EEVAL);
        CHECK_HAS(anec_last_error(rt), "[ANE-MIN-SURFACE]");
    }

    /* cache: same MIL and weights -> no compile, shared directory */
    anec_program *q = NULL;
    CHECK(anec_compile(rt, MIL, strlen(MIL), &b, 1, NULL, &q) == ANEC_OK);
    struct anec_stats st;
    anec_stats(rt, &st);
    CHECK(st.compiles == 1 && st.cache_hits == 1 && st.dirs_live == 1);
    CHECK(strcmp(anec_program_dir(p), anec_program_dir(q)) == 0);
    CHECK(anec_load(q) == ANEC_OK);

    /* delta reload of p: q keeps its weights; 1000 reloads, no compile */
    anec_blob b2 = {"@model_path/weights/w.bin", blob2, sizeof blob2};
    for (int i = 0; i < 1000; i++) {
        anec_blob *nb = (i % 2 == 0) ? &b2 : &b;
        CHECK(anec_reload_weights(p, nb, 1) == ANEC_OK);
    }
    CHECK(anec_reload_weights(p, &b2, 1) == ANEC_OK);
    fill(p, 1.0f, 0.0f);
    CHECK(anec_run(p) == ANEC_OK && out0(p, 0, 0) == 3.0f);
    fill(q, 1.0f, 0.0f);
    CHECK(anec_run(q) == ANEC_OK && out0(q, 0, 0) == 2.0f);
    anec_stats(rt, &st);
    CHECK(st.compiles == 1 && st.reloads == 1001 && st.blobs_patched == 1001);
    CHECK(strcmp(anec_program_dir(p), anec_program_dir(q)) != 0);

    /* validation failures leave the old weights in use */
    {
        static uint8_t bad[256];
        memcpy(bad, blob2, sizeof bad);
        ((uint16_t *)(void *)(bad + 128))[9] = 0x7e00; /* NaN */
        anec_blob bb = {"@model_path/weights/w.bin", bad, sizeof bad};
        CHECK(anec_reload_weights(p, &bb, 1) == ANEC_EWEIGHTS);
        CHECK_HAS(anec_last_error(rt), "non-finite");
        bb.len = 200;
        CHECK(anec_reload_weights(p, &bb, 1) == ANEC_EWEIGHTS);
        anec_blob other = {"@model_path/weights/v.bin", blob2, sizeof blob2};
        CHECK(anec_reload_weights(p, &other, 1) == ANEC_EWEIGHTS);
        CHECK(anec_run(p) == ANEC_OK && out0(p, 0, 0) == 3.0f);
    }

    /* shared directory survives freeing one program */
    char qdir[512];
    snprintf(qdir, sizeof qdir, "%s", anec_program_dir(q));
    anec_program *r = NULL;
    CHECK(anec_compile(rt, MIL, strlen(MIL), &b, 1, NULL, &r) == ANEC_OK);
    CHECK(strcmp(anec_program_dir(r), qdir) == 0);
    anec_program_free(q);
    struct stat sb;
    CHECK(stat(qdir, &sb) == 0);
    CHECK(anec_load(r) == ANEC_OK);
    fill(r, 1.0f, 0.0f);
    CHECK(anec_run(r) == ANEC_OK && out0(r, 0, 0) == 2.0f);

    /* budget: 3 compiles allowed */
    const char *M2 = "program(1.3) { func main(tensor<fp16, [1, 4]> x) { tensor<fp16, [1, 4]> y = relu(x = x)[name = string(\"y\")]; } -> (y); }";
    const char *M3 = "program(1.3) { func main(tensor<fp16, [1, 4]> x) { tensor<fp16, [1, 4]> y = exp(x = x)[name = string(\"y\")]; } -> (y); }";
    const char *M4 = "program(1.3) { func main(tensor<fp16, [1, 4]> x) { tensor<fp16, [1, 4]> y = tanh(x = x)[name = string(\"y\")]; } -> (y); }";
    anec_program *m2 = NULL, *m3 = NULL, *m4 = NULL;
    CHECK(anec_compile(rt, M2, strlen(M2), NULL, 0, NULL, &m2) == ANEC_OK);
    CHECK(anec_compile(rt, M3, strlen(M3), NULL, 0, NULL, &m3) == ANEC_OK);
    CHECK(anec_compile(rt, M4, strlen(M4), NULL, 0, NULL, &m4) == ANEC_EBUDGET);
    CHECK_HAS(anec_last_error(rt), "[ANE-COMPILE-BUDGET]");
    anec_program_free(m2);
    CHECK(anec_compile(rt, M2, strlen(M2), NULL, 0, NULL, &m2) == ANEC_OK); /* cache */
    anec_stats(rt, &st);
    CHECK(st.compiles == 3 && st.compile_budget_left == 0);

    /* parse errors are reported with the line */
    CHECK(anec_compile(rt, "program(1.3) {\n func", 20, NULL, 0, NULL, &m4) == ANEC_EPARSE);
    CHECK_HAS(anec_last_error(rt), "model.mil:2");

    anec_runtime_close(rt); /* frees p, r, m2, m3 and removes the directories */
    CHECK(rmdir(root) == 0); /* empty: nothing left behind */

    /* helpers */
    float f[3] = {1.0f, 65504.0f, 1e-8f};
    uint16_t h[3];
    anec_f32_to_f16(f, h, 3);
    CHECK(h[0] == 0x3c00 && h[1] == 0x7bff && h[2] == 0);
    CHECK(strcmp(anec_strerror(ANEC_EBUDGET), "compile budget exhausted") == 0);
    T_DONE("test_rt");
}
