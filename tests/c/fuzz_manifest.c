/* fuzz_manifest.c - libFuzzer target: what an artifact's manifest drives into C.
 *
 * A manifest gives the runtime its limits, the weight files (MIL path + bytes)
 * and the MIL text; this target feeds all three, fuzzed, through the public
 * API on the sim: anec_compile, then for programs that compile anec_load,
 * anec_call with inputs taken from the fuzz bytes, and a delta reload with
 * the same blobs and with a corrupted copy. Input layout (all optional; a
 * short input just ends early):
 *
 *   u8 flags           bit 0: pass limits (else NULL, the defaults); bit 1: call;
 *                      bit 2: reload
 *   u8 x 6             selectors into the tables of interesting limit values
 *   u8 n_blobs         (mod 5)
 *   per blob: u8 path  a path from PATHS, or 0xFF: u8 n, then n bytes of path
 *             u16 n    little-endian, then n bytes of BLOBFILE
 *   rest               the MIL text
 *
 * Limits that would make the runtime allocate more than 1 MiB surfaces are not
 * passed (the fuzzer's memory limit, not a runtime bug), but limits whose
 * surface size arithmetic overflows are: they must be refused. Seeds:
 * tests/c/corpus/manifest/ (written by tests/c/manifest_seeds.py).
 */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "anec_rt.h"
#include "rt_files.h"
#include "sim_plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_BLOBS 4
#define SMALL (1u << 20)

static const char *const PATHS[] = {
    "@model_path/weights/w.bin", "@model_path/weights/w1.bin", "@model_path/weights/weight.bin",
    "@model_path/inputs/w.bin", "@model_path/weights/../../etc/passwd", "@model_path/../w.bin",
    "@model_path//w.bin", "@model_path/", "@model_path/./w.bin", "/etc/passwd", "weights/w.bin",
    "@model_path/model.mil", "@model_path/net.plist", "@model_path/data", "@model_path/a\\b",
    "@model_path/weights/", "",
};
#define N_PATHS (sizeof PATHS / sizeof PATHS[0])

static const int INTS[] = {16, 0, 1, -1, 2, 15, 16384, 2147483647, -2147483647 - 1, 3, 64};
static const size_t SIZES[] = {49152, 0, 1, 63, 64, 4096, 16384, (size_t)-1, (size_t)-1 - 62, (size_t)-1 / 2 + 1, 3};

typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

static int take(reader *r, size_t k, const uint8_t **out)
{
    if (r->n < k)
        return -1;
    *out = r->p;
    r->p += k;
    r->n -= k;
    return 0;
}

static unsigned u8(reader *r, unsigned dflt)
{
    const uint8_t *b;
    return take(r, 1, &b) ? dflt : b[0];
}

static anec_runtime *RT;
static unsigned COMPILED;

static void close_runtime(void)
{
    anec_runtime_close(RT);
    RT = NULL;
}

static anec_runtime *runtime(void)
{
    if (RT)
        return RT;
    /* program directories on tmpfs when there is one: every compile writes files */
    struct stat sb;
    if (stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) && access("/dev/shm", W_OK) == 0)
        setenv("TMPDIR", "/dev/shm", 1);
    anec_options o = {.sim_threads = 1};
    if (anec_runtime_open("sim", &o, &RT) != ANEC_OK)
        abort();
    static int registered;
    if (!registered++)
        atexit(close_runtime);
    return RT;
}

/* The surface size make_surfaces computes; 0 when its arithmetic overflows. */
static size_t surface_bytes(size_t need, const anec_limits *l)
{
    size_t v = need < l->min_surface_bytes ? l->min_surface_bytes : need;
    return rt_round_up(v, l->surface_alignment, &v) ? 0 : v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = {data, size};
    unsigned flags = u8(&r, 0);
    anec_limits lim;
    lim.max_blob_tensors = INTS[u8(&r, 0) % (sizeof INTS / sizeof INTS[0])];
    lim.scalar_penalty = INTS[(u8(&r, 0) + 4) % (sizeof INTS / sizeof INTS[0])];
    lim.max_conv_out_channels = INTS[(u8(&r, 0) + 6) % (sizeof INTS / sizeof INTS[0])];
    lim.min_surface_bytes = SIZES[u8(&r, 0) % (sizeof SIZES / sizeof SIZES[0])];
    lim.allow_fp32_io = (int)(u8(&r, 1) & 1u);
    lim.surface_alignment = SIZES[(u8(&r, 0) + 1) % (sizeof SIZES / sizeof SIZES[0])];
    const anec_limits *limits = flags & 1u ? &lim : NULL;

    anec_blob blobs[MAX_BLOBS];
    char paths[MAX_BLOBS][80];
    size_t n_blobs = u8(&r, 0) % (MAX_BLOBS + 1);
    for (size_t i = 0; i < n_blobs; i++) {
        unsigned sel = u8(&r, 0);
        if (sel == 0xFF) {
            const uint8_t *b;
            size_t n = u8(&r, 0) % sizeof paths[i];
            if (take(&r, n, &b))
                n = 0, b = (const uint8_t *)"";
            memcpy(paths[i], b, n);
            paths[i][n] = 0;
        } else {
            snprintf(paths[i], sizeof paths[i], "%s", PATHS[sel % N_PATHS]);
        }
        const uint8_t *lb, *bytes = NULL;
        size_t len = 0;
        if (take(&r, 2, &lb) == 0) {
            len = (size_t)lb[0] | ((size_t)lb[1] << 8);
            if (len > r.n)
                len = r.n;
            take(&r, len, &bytes);
        }
        blobs[i] = (anec_blob){paths[i], bytes, len};
    }
    const char *mil = (const char *)r.p;
    size_t mil_len = r.n;

    /* Only programs whose surfaces and values stay small reach anec_compile
       (it allocates the surfaces); others are parsed and planned above. */
    char err[512];
    int status;
    sim_plan *plan = sim_plan_build(mil, mil_len, limits, &status, err, sizeof err);
    if (plan) {
        size_t total = 0, in = 0, out = 0;
        for (size_t i = 0; i < plan->n_vals; i++)
            if (rt_add_size(total, plan->vals[i].bytes, &total))
                total = (size_t)-1;
        for (size_t i = 0; i < plan->n_inputs; i++)
            in = plan->vals[plan->in_bind[i]].bytes > in ? plan->vals[plan->in_bind[i]].bytes : in;
        for (size_t j = 0; j < plan->n_outputs; j++)
            out = plan->vals[plan->out_bind[j]].bytes > out ? plan->vals[plan->out_bind[j]].bytes : out;
        size_t si = limits ? surface_bytes(in, limits) : in, so = limits ? surface_bytes(out, limits) : out;
        int big = total > SMALL || plan->n_inputs > 16 || plan->n_outputs > 16 || si > SMALL || so > SMALL;
        sim_plan_release(plan);
        if (big)
            return 0;
    }

    anec_runtime *rt = runtime();
    anec_process_reset_budget("sim");
    anec_program *p = NULL;
    if (anec_compile(rt, mil, mil_len, blobs, n_blobs, limits, &p) != ANEC_OK) {
        (void)anec_last_error(rt);
        return 0;
    }
    if (anec_load(p) == ANEC_OK && (flags & 2u)) {
        size_t ni = anec_program_num_inputs(p), no = anec_program_num_outputs(p);
        anec_io ins[16], outs[16];
        void *bufs[32] = {0};
        int ok = ni <= 16 && no <= 16;
        for (size_t i = 0; ok && i < ni + no; i++) {
            anec_tensor_info t;
            ok = (i < ni ? anec_program_input(p, i, &t) : anec_program_output(p, i - ni, &t)) == ANEC_OK;
            bufs[i] = ok ? calloc(t.bytes ? t.bytes : 1, 1) : NULL;
            ok = ok && bufs[i];
            if (ok && i < ni)
                for (size_t k = 0; k < t.bytes && k < size; k++)
                    ((uint8_t *)bufs[i])[k] = data[k]; /* some non-zero bit patterns */
            if (ok)
                (i < ni ? ins : outs)[i < ni ? i : i - ni] = (anec_io){t.dtype, bufs[i], t.bytes};
        }
        if (ok)
            (void)anec_call(p, ins, ni, outs, no);
        for (size_t i = 0; i < 32; i++)
            free(bufs[i]);
    }
    if (flags & 4u) {
        (void)anec_reload_weights(p, blobs, n_blobs);
        /* the same blobs with one byte changed: a new weight, a broken header or a bad record */
        uint8_t *copy[MAX_BLOBS] = {0};
        anec_blob changed[MAX_BLOBS];
        for (size_t i = 0; i < n_blobs; i++) {
            changed[i] = blobs[i];
            if (blobs[i].len && (copy[i] = malloc(blobs[i].len))) {
                memcpy(copy[i], blobs[i].data, blobs[i].len);
                copy[i][(flags >> 3) * 7 % blobs[i].len] ^= 0x5Au;
                changed[i].data = copy[i];
            }
        }
        (void)anec_reload_weights(p, changed, n_blobs);
        for (size_t i = 0; i < n_blobs; i++)
            free(copy[i]);
    }
    anec_program_free(p);
    /* a runtime keeps every compiled form for later cache hits: start afresh now and then */
    if (++COMPILED % 256 == 0)
        close_runtime();
    return 0;
}
