/* test_rt.c - the public C API end to end on the sim driver (run under ASan by `make c-asan`). */
#define _POSIX_C_SOURCE 200809L
#include <sys/stat.h>
#include <unistd.h>

#include "anec_rt.h"
#include "fp16.h"
#include "rt_sha256.h"
#include "tharness.h"

/* the M4 limits (anec/targets.py), as a manifest records them */
static const anec_limits LIM = {16, 1, 16384, 49152, 1, 0};

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

static int write_file(const char *dir, const char *rel, const void *data, size_t len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t k = fwrite(data, 1, len, f);
    return fclose(f) == 0 && k == len ? 0 : -1;
}

static anec_runtime *open_sim(const char *device, unsigned verified)
{
    anec_options o = {.sim_threads = 1, .reload_verified = verified, .sim_device = device};
    anec_runtime *rt = NULL;
    CHECK(anec_runtime_open("sim", &o, &rt) == ANEC_OK);
    return rt;
}

/* Weights are baked at compile: rewriting weights/ and loading again changes
   nothing (load=data) ... unless the device re-reads them (load=weights); the
   compiled `data` is what a load reads. */
static void test_baking(void)
{
    static uint8_t b2[256], b3[256];
    make_blob(b2, 2.0f);
    make_blob(b3, 3.0f);
    anec_blob b = {"@model_path/weights/w.bin", b2, sizeof b2};
    for (int mode = 0; mode < 2; mode++) {
        anec_runtime *rt = open_sim(mode ? "load=weights" : "load=data", 0);
        anec_program *p = NULL;
        CHECK(anec_compile(rt, MIL, strlen(MIL), &b, 1, &LIM, &p) == ANEC_OK);
        CHECK(anec_load(p) == ANEC_OK);
        CHECK(write_file(anec_program_dir(p), "weights/w.bin", b3, sizeof b3) == 0);
        CHECK(anec_unload(p) == ANEC_OK && anec_load(p) == ANEC_OK);
        fill(p, 1.0f, 0.0f);
        CHECK(anec_run(p) == ANEC_OK);
        CHECK(out0(p, 0, 0) == (mode ? 3.0f : 2.0f));
        /* the compiled data is what the sim (load=data) reads */
        CHECK(write_file(anec_program_dir(p), "data", b3, sizeof b3) == 0);
        CHECK(anec_unload(p) == ANEC_OK && anec_load(p) == ANEC_OK);
        CHECK(anec_run(p) == ANEC_OK && out0(p, 0, 0) == 3.0f);
        /* a corrupt compiled data fails the load, like the device */
        CHECK(write_file(anec_program_dir(p), "data", b3, 100) == 0);
        CHECK(anec_unload(p) == ANEC_OK);
        CHECK(anec_load(p) == (mode ? ANEC_OK : ANEC_ELOAD));
        anec_runtime_close(rt);
        anec_program_free(p);
    }
}

/* Two weight tensors: the compiled data is opaque (data=tensor), so a reload
   recompiles; with data=file and one packed file the data patch applies. */
static const char *MIL2 =
    "program(1.3)\n{\n"
    "    func main<ios18>(tensor<fp16, [1, 8, 1, 4]> x, tensor<fp16, [1, 8, 1, 4]> a) {\n"
    "        tensor<fp16, [8, 8, 1, 1]> w = const()[name = string(\"w\"), val = tensor<fp16, [8, 8, 1, 1]>(BLOBFILE(path = string(\"@model_path/weights/w.bin\"), offset = uint64(64)))];\n"
    "        tensor<fp16, [8, 8, 1, 1]> v = const()[name = string(\"v\"), val = tensor<fp16, [8, 8, 1, 1]>(BLOBFILE(path = string(\"@model_path/weights/w.bin\"), offset = uint64(192)))];\n"
    "        tensor<fp16, [1, 8, 1, 4]> c = conv(weight = w, x = x)[name = string(\"c\")];\n"
    "        tensor<fp16, [1, 8, 1, 4]> y = conv(weight = v, x = a)[name = string(\"y\")];\n"
    "    } -> (y, c);\n}\n";

static void make_blob2(uint8_t *buf, float wv, float vv)
{
    memset(buf, 0, 384);
    put32(buf, 2);
    put32(buf + 4, 2);
    uint32_t offs[2] = {64, 192};
    float vals[2] = {wv, vv};
    for (int t = 0; t < 2; t++) {
        uint8_t *m = buf + offs[t];
        put32(m, 0xDEADBEEFu);
        put32(m + 4, 1);
        put32(m + 8, 128);
        put32(m + 16, offs[t] + 64);
        uint16_t *w = (uint16_t *)(void *)(m + 64);
        for (int o = 0; o < 8; o++)
            for (int i = 0; i < 8; i++)
                w[o * 8 + i] = anec_h_from_f(o == i ? vals[t] : 0.0f);
    }
}

static void test_strategies(void)
{
    static uint8_t p1[384], p2[384];
    make_blob2(p1, 2.0f, 5.0f);
    make_blob2(p2, 3.0f, 7.0f);
    anec_blob b1 = {"@model_path/weights/w.bin", p1, sizeof p1}, b2 = {"@model_path/weights/w.bin", p2, sizeof p2};
    struct anec_stats st;
    anec_reload_info ri;
    for (int mode = 0; mode < 2; mode++) {
        anec_runtime *rt = open_sim(mode ? "data=file" : "data=tensor", 0);
        anec_program *p = NULL;
        CHECK(anec_compile(rt, MIL2, strlen(MIL2), &b1, 1, &LIM, &p) == ANEC_OK);
        CHECK(anec_load(p) == ANEC_OK);
        CHECK(anec_program_reload_info(p, &ri) == ANEC_OK);
        CHECK(ri.data_patchable == mode);
        CHECK(ri.strategy == (mode ? ANEC_RELOAD_DATA_PATCH : ANEC_RELOAD_RECOMPILE));
        CHECK(anec_reload_weights(p, &b2, 1) == ANEC_OK);
        fill(p, 1.0f, 1.0f);
        CHECK(anec_run(p) == ANEC_OK && out0(p, 0, 0) == 3.0f && out0(p, 1, 0) == 7.0f);
        anec_stats(rt, &st);
        CHECK(st.compiles == (uint64_t)(mode ? 1 : 2) && st.reloads == 1);
        CHECK(st.reloads_recompile == (uint64_t)!mode && st.reloads_data_patch == (uint64_t)mode);
        /* a forced data patch of an opaque program is refused; old weights stay */
        if (!mode) {
            CHECK(anec_reload_weights_using(p, &b1, 1, ANEC_RELOAD_DATA_PATCH) == ANEC_EINVAL);
            CHECK_HAS(anec_last_error(NULL), "cannot be data-patched");
            CHECK(anec_run(p) == ANEC_OK && out0(p, 0, 0) == 3.0f);
        }
        /* a forced recompile always works; the same weights again cost nothing */
        CHECK(anec_reload_weights_using(p, &b1, 1, ANEC_RELOAD_RECOMPILE) == ANEC_OK);
        /* ... and leaves the program as patchable as a first compile would */
        CHECK(anec_program_reload_info(p, &ri) == ANEC_OK && ri.data_patchable == mode);
        /* "auto" is not a strategy one can force */
        CHECK(anec_reload_weights_using(p, &b2, 1, ANEC_RELOAD_AUTO) == ANEC_EINVAL);
        CHECK_HAS(anec_last_error(NULL), "name a strategy");
        CHECK(anec_reload_weights_using(p, &b2, 1, ANEC_RELOAD_RECOMPILE + ANEC_RELOAD_DATA_PATCH + 7) == ANEC_EINVAL);
        CHECK_HAS(anec_last_error(NULL), "is not data-patch");
        CHECK(anec_reload_weights(p, &b1, 1) == ANEC_OK);
        CHECK(anec_run(p) == ANEC_OK && out0(p, 0, 0) == 2.0f && out0(p, 1, 0) == 5.0f);
        anec_stats(rt, &st);
        CHECK(st.compiles == (uint64_t)(mode ? 2 : 3) && st.reloads == 3 && st.blobs_patched == 2);
        anec_program_free(p);
        anec_runtime_close(rt);
    }
    /* nothing verified: the data-patchable program recompiles, and says why */
    {
        static uint8_t blob[256], blob2[256];
        make_blob(blob, 2.0f);
        make_blob(blob2, 4.0f);
        anec_blob b = {"@model_path/weights/w.bin", blob, sizeof blob}, bb = {"@model_path/weights/w.bin", blob2, sizeof blob2};
        anec_runtime *rt = open_sim(NULL, ANEC_RELOAD_VERIFIED);
        CHECK((anec_reload_verified(rt) & ANEC_RELOAD_DATA_PATCH) == 0);
        anec_program *p = NULL, *q = NULL;
        CHECK(anec_compile(rt, MIL, strlen(MIL), &b, 1, &LIM, &p) == ANEC_OK);
        CHECK(anec_program_reload_info(p, &ri) == ANEC_OK && ri.data_patchable == 1);
        CHECK(ri.strategy == ANEC_RELOAD_RECOMPILE);
        CHECK_HAS(ri.why, "not verified");
        CHECK(anec_load(p) == ANEC_OK && anec_reload_weights(p, &bb, 1) == ANEC_OK);
        fill(p, 1.0f, 0.0f);
        CHECK(anec_run(p) == ANEC_OK && out0(p, 0, 0) == 4.0f);
        /* a cache hit with other weights cannot be patched either: compiled */
        CHECK(anec_compile(rt, MIL, strlen(MIL), &b, 1, &LIM, &q) == ANEC_OK);
        anec_stats(rt, &st);
        CHECK(st.compiles == 3 && st.cache_hits == 0);
        CHECK(anec_load(q) == ANEC_OK);
        fill(q, 1.0f, 0.0f);
        CHECK(anec_run(q) == ANEC_OK && out0(q, 0, 0) == 2.0f);
        anec_program_free(q);
        anec_program_free(p);
        anec_runtime_close(rt);
    }
}

/* Two stages of MIL wired c -> x, y -> a: stage 1 computes 3*(2x) + (2x + a) = 8x + a.
   Same surface sizes: both edges are zero-copy. A reload with a bad blob for
   stage 1 changes neither stage; bad wiring is refused. */
/* The bytes of the file rel in dir equal buf[0 .. len). */
static int file_is(const char *dir, const char *rel, const uint8_t *buf, size_t len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    static uint8_t got[4096];
    size_t n = fread(got, 1, sizeof got, f);
    fclose(f);
    return n == len && memcmp(got, buf, len) == 0;
}

/* Bad blob lists are refused before anything changes; a data-patched program
   serves later cache hits under its new weights only; a data patch the driver
   refuses puts the old weight file back. */
static void test_reload_edges(void)
{
    static uint8_t blob[256], blob2[256];
    make_blob(blob, 2.0f);
    make_blob(blob2, 3.0f);
    anec_blob b = {"@model_path/weights/w.bin", blob, sizeof blob}, b2 = {"@model_path/weights/w.bin", blob2, sizeof blob2};
    anec_runtime *rt = open_sim(NULL, 0);
    anec_program *p = NULL, *q = NULL, *r = NULL;
    CHECK(anec_compile(rt, MIL, strlen(MIL), &b, 1, &LIM, &p) == ANEC_OK);
    CHECK(anec_load(p) == ANEC_OK);

    anec_blob twice[2] = {b2, b2};
    CHECK(anec_reload_weights(p, twice, 2) == ANEC_EINVAL);
    CHECK_HAS(anec_last_error(NULL), "given twice");
    anec_blob nodata = {"@model_path/weights/w.bin", NULL, sizeof blob2};
    CHECK(anec_reload_weights(p, &nodata, 1) == ANEC_EINVAL);
    CHECK_HAS(anec_last_error(NULL), "no path or data");
    fill(p, 1.0f, 0.0f);
    CHECK(anec_run(p) == ANEC_OK && out0(p, 0, 0) == 2.0f);

    CHECK(anec_reload_weights(p, &b2, 1) == ANEC_OK);
    struct anec_stats st;
    anec_stats(rt, &st);
    CHECK(st.reloads_data_patch == 1);
    /* the old weights again: not p's compiled form, which now holds the new ones */
    CHECK(anec_compile(rt, MIL, strlen(MIL), &b, 1, &LIM, &q) == ANEC_OK);
    CHECK(anec_load(q) == ANEC_OK);
    fill(q, 1.0f, 0.0f);
    CHECK(anec_run(q) == ANEC_OK && out0(q, 0, 0) == 2.0f);
    /* the new weights: p's */
    CHECK(anec_compile(rt, MIL, strlen(MIL), &b2, 1, &LIM, &r) == ANEC_OK);
    CHECK(anec_load(r) == ANEC_OK);
    fill(r, 1.0f, 0.0f);
    CHECK(anec_run(r) == ANEC_OK && out0(r, 0, 0) == 3.0f);
    fill(p, 1.0f, 0.0f);
    CHECK(anec_run(p) == ANEC_OK && out0(p, 0, 0) == 3.0f);

    /* the driver refuses the patch (its compiled network is gone): the weight file is put back */
    anec_program_free(r);
    char net[1024];
    snprintf(net, sizeof net, "%s/net.plist", anec_program_dir(p));
    CHECK(file_is(anec_program_dir(p), "weights/w.bin", blob2, sizeof blob2));
    CHECK(unlink(net) == 0);
    CHECK(anec_reload_weights_using(p, &b, 1, ANEC_RELOAD_DATA_PATCH) != ANEC_OK);
    CHECK(file_is(anec_program_dir(p), "weights/w.bin", blob2, sizeof blob2));
    anec_program_free(q);
    anec_program_free(p);
    anec_runtime_close(rt);
}

static void test_pipeline(void)
{
    static uint8_t b2[256], b3[256], b5[256];
    make_blob(b2, 2.0f);
    make_blob(b3, 3.0f);
    make_blob(b5, 5.0f);
    anec_blob w2 = {"@model_path/weights/w.bin", b2, sizeof b2}, w3 = {"@model_path/weights/w.bin", b3, sizeof b3};
    anec_blob w5 = {"@model_path/weights/w.bin", b5, sizeof b5}, bad = {"@model_path/weights/w.bin", b5, 100};
    anec_runtime *rt = open_sim(NULL, 0);
    anec_program *s0 = NULL, *s1 = NULL;
    CHECK(anec_compile(rt, MIL, strlen(MIL), &w2, 1, &LIM, &s0) == ANEC_OK && anec_load(s0) == ANEC_OK);
    CHECK(anec_compile(rt, MIL, strlen(MIL), &w3, 1, &LIM, &s1) == ANEC_OK && anec_load(s1) == ANEC_OK);
    /* binding order: inputs a, x; outputs c, y */
    anec_pipe_src in0[2] = {{-1, 1}, {-1, 0}};   /* a <- pipeline input 1, x <- pipeline input 0 */
    anec_pipe_src in1[2] = {{0, 1}, {0, 0}};     /* a <- stage 0's y, x <- stage 0's c */
    anec_pipe_stage stages[2] = {{s0, in0}, {s1, in1}};
    anec_pipe_src outs[1] = {{1, 1}};            /* stage 1's y */
    anec_pipeline *pl = NULL;
    CHECK(anec_pipeline_create(rt, stages, 2, 2, outs, 1, &pl) == ANEC_OK);
    float x[32], a[32], y[32];
    for (int i = 0; i < 32; i++) {
        x[i] = 1.0f;
        a[i] = 0.5f;
    }
    anec_io ins[2] = {{ANEC_DTYPE_FP32, x, sizeof x}, {ANEC_DTYPE_FP32, a, sizeof a}};
    anec_io out = {ANEC_DTYPE_FP32, y, sizeof y};
    CHECK(anec_pipeline_call(pl, ins, 2, &out, 1) == ANEC_OK);
    CHECK(y[0] == 8.5f && y[31] == 8.5f);
    struct anec_pipeline_stats ps;
    CHECK(anec_pipeline_stats(pl, &ps) == ANEC_OK);
    CHECK(ps.calls == 1 && ps.stages == 2 && ps.zero_copy_edges == 2 && ps.copied_edges == 0);
    /* all-or-nothing: stage 0's change is valid, stage 1's blob is truncated */
    const anec_blob *nb[2] = {&w5, &bad};
    size_t nn[2] = {1, 1};
    CHECK(anec_pipeline_reload(pl, nb, nn) != ANEC_OK);
    CHECK(anec_pipeline_call(pl, ins, 2, &out, 1) == ANEC_OK && y[0] == 8.5f);
    /* only stage 0: 3*(5x) + (5x + a) = 20x + a */
    size_t only0[2] = {1, 0};
    CHECK(anec_pipeline_reload(pl, nb, only0) == ANEC_OK);
    CHECK(anec_pipeline_call(pl, ins, 2, &out, 1) == ANEC_OK && y[0] == 20.5f);
    /* wrong argument counts */
    CHECK(anec_pipeline_call(pl, ins, 1, &out, 1) == ANEC_EINVAL);
    anec_pipeline_free(pl);
    /* wiring: a stage may read only earlier stages, existing outputs and inputs */
    anec_pipe_src self[2] = {{1, 0}, {0, 0}}, far[2] = {{0, 7}, {0, 0}}, noin[2] = {{-1, 5}, {-1, 0}};
    anec_pipe_src *wrong[3] = {self, far, noin};
    for (int k = 0; k < 3; k++) {
        anec_pipe_stage st2[2] = {{s0, in0}, {s1, wrong[k]}};
        pl = NULL;
        CHECK(anec_pipeline_create(rt, st2, 2, 2, outs, 1, &pl) == ANEC_EINVAL && pl == NULL);
    }
    /* a pipeline input that feeds nothing */
    anec_pipe_src only_x[2] = {{-1, 0}, {-1, 0}};
    anec_pipe_stage st3[1] = {{s0, only_x}};
    anec_pipe_src o3[1] = {{0, 1}};
    CHECK(anec_pipeline_create(rt, st3, 1, 2, o3, 1, &pl) == ANEC_EINVAL);
    /* a weight file may not take a name of the compiled form */
    {
        static const char *const reserved[] = {"@model_path/data", "@model_path/net.plist", "@model_path/model.mil",
                                               "@model_path/w.bin", "@model_path/weights/"};
        for (size_t k = 0; k < sizeof reserved / sizeof *reserved; k++) {
            anec_blob r = {reserved[k], b2, sizeof b2};
            anec_program *q = NULL;
            CHECK(anec_compile(rt, MIL, strlen(MIL), &r, 1, &LIM, &q) == ANEC_EINVAL && q == NULL);
            CHECK_HAS(anec_last_error(NULL), "@model_path/weights/");
        }
    }
    /* stages stay the caller's: closing the runtime first, then freeing, is fine */
    anec_pipe_stage st4[1] = {{s0, in0}};
    CHECK(anec_pipeline_create(rt, st4, 1, 2, o3, 1, &pl) == ANEC_OK);
    anec_runtime_close(rt);
    CHECK(anec_pipeline_call(pl, ins, 2, &out, 1) == ANEC_ESTATE);
    anec_pipeline_free(pl);
    anec_program_free(s0);
    anec_program_free(s1);
}

/* SHA-256 (the content hash of the cache) against published and hashlib digests, through
   every path: one block, many blocks (the SHA extensions when the CPU has them), and updates
   that split the message at every offset around a block boundary. */
static void test_sha256(void)
{
    static const struct { const char *msg; size_t repeat; const char *hex; } v[] = {
        {"", 1, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", 1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 1,
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"a", 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
    };
    for (size_t k = 0; k < sizeof v / sizeof *v; k++) {
        size_t n = strlen(v[k].msg), total = n * v[k].repeat;
        uint8_t *m = malloc(total + 1);
        CHECK(m != NULL);
        for (size_t r = 0; r < v[k].repeat; r++)
            memcpy(m + r * n, v[k].msg, n);
        uint8_t d[32];
        char hex[65];
        rt_sha256(m, total, d);
        rt_sha256_hex(d, hex);
        CHECK(strcmp(hex, v[k].hex) == 0);
        free(m);
    }
    enum { N = 100003 };
    static uint8_t data[N];
    for (size_t i = 0; i < N; i++)
        data[i] = (uint8_t)(i * 131 + 7);
    uint8_t whole[32];
    char hex[65];
    rt_sha256(data, N, whole);
    rt_sha256_hex(whole, hex);
    CHECK(strcmp(hex, "bbfad4f95f90d384d555f3df407b8abd654b51131434e1bdca5cda29038f40d1") == 0);
    for (size_t cut = 0; cut < 200; cut++) {
        rt_sha256_ctx c;
        uint8_t d[32];
        rt_sha256_init(&c);
        rt_sha256_update(&c, data, cut);
        rt_sha256_update(&c, data + cut, 1);
        rt_sha256_update(&c, data + cut + 1, N - cut - 1);
        rt_sha256_final(&c, d);
        CHECK(memcmp(d, whole, 32) == 0);
    }
}

int main(void)
{
    test_sha256();
    /* tmpfs when there is one: the 1000 reloads below fsync every file they write */
    char root[64];
    snprintf(root, sizeof root, "%s/anec-ctest-XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    CHECK(mkdtemp(root) != NULL);
    anec_options opts = {.compile_budget = 3, .temp_root = root, .sim_threads = 2};
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
    /* the runtime has no limits of its own: the manifest's are required */
    CHECK(anec_compile(rt, MIL, strlen(MIL), &b, 1, NULL, &p) == ANEC_EINVAL && p == NULL);
    CHECK_HAS(anec_last_error(NULL), "limits are required");
    CHECK(anec_compile(rt, MIL, strlen(MIL), &b, 1, &LIM, &p) == ANEC_OK);
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
    CHECK(anec_compile(rt, MIL, strlen(MIL), &b, 1, &LIM, &q) == ANEC_OK);
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
    CHECK(st.reloads_data_patch == 1001 && st.reloads_recompile == 0);
    {
        anec_reload_info ri;
        CHECK(anec_program_reload_info(p, &ri) == ANEC_OK);
        CHECK(ri.strategy == ANEC_RELOAD_DATA_PATCH && ri.data_patchable == 1);
        CHECK_HAS(ri.why, "data patch");
    }
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
    CHECK(anec_compile(rt, MIL, strlen(MIL), &b, 1, &LIM, &r) == ANEC_OK);
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
    CHECK(anec_compile(rt, M2, strlen(M2), NULL, 0, &LIM, &m2) == ANEC_OK);
    CHECK(anec_compile(rt, M3, strlen(M3), NULL, 0, &LIM, &m3) == ANEC_OK);
    CHECK(anec_compile(rt, M4, strlen(M4), NULL, 0, &LIM, &m4) == ANEC_EBUDGET);
    CHECK_HAS(anec_last_error(rt), "[ANE-COMPILE-BUDGET]");
    anec_program_free(m2);
    CHECK(anec_compile(rt, M2, strlen(M2), NULL, 0, &LIM, &m2) == ANEC_OK); /* cache */
    anec_stats(rt, &st);
    CHECK(st.compiles == 3 && st.compile_budget_left == 0);

    /* parse errors are reported with the line */
    CHECK(anec_compile(rt, "program(1.3) {\n func", 20, NULL, 0, &LIM, &m4) == ANEC_EPARSE);
    CHECK_HAS(anec_last_error(rt), "model.mil:2");

    /* closing the runtime closes its programs; their handles stay valid */
    anec_runtime_close(rt);
    CHECK(anec_run(p) == ANEC_ESTATE);
    CHECK_HAS(anec_last_error(NULL), "runtime was closed");
    CHECK(strcmp(anec_program_dir(p), "") == 0);
    anec_program_close(p); /* idempotent */
    anec_program_free(p);
    anec_program_free(r);
    anec_program_free(m2);
    anec_program_free(m3); /* the last handle frees the runtime */
    CHECK(rmdir(root) == 0); /* empty: nothing left behind */

    test_baking();
    test_strategies();
    test_pipeline();
    test_reload_edges();

    /* helpers */
    float f[3] = {1.0f, 65504.0f, 1e-8f};
    uint16_t h[3];
    anec_f32_to_f16(f, h, 3);
    CHECK(h[0] == 0x3c00 && h[1] == 0x7bff && h[2] == 0);
    CHECK(strcmp(anec_strerror(ANEC_EBUDGET), "compile budget exhausted") == 0);
    T_DONE("test_rt");
}
