/*
 * sim_state.c - a sim program's run-time state and its values: created for a
 * plan, loaded with the baked weights (each BLOBFILE tensor taken into the
 * process's shared weights, sim_weights.c, one aligned copy of identical
 * payloads across programs, the pages of a mapped compiled data given back as
 * each is taken; compressed weights decompressed from their payloads;
 * driver_sim.c decides where the data comes from, and it is never re-read),
 * unloaded and freed; the fp32 views of its values and their rounding back to
 * storage (sim_exec.h); and the packing of the constant weights of narrow
 * pointwise products on a program's second run since its load. The kernels
 * are sim_exec.c.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#define _DARWIN_C_SOURCE
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "blobfile.h"
#include "fp16.h"
#include "rt_util.h"
#include "sim_exec.h"
#include "sim_kernels.h"
#include "sim_plan.h"

sim_state *sim_state_new(sim_plan *plan, int threads)
{
    sim_state *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->store = calloc(plan->n_vals ? plan->n_vals : 1, sizeof(void *));
    if (!s->store) {
        free(s);
        return NULL;
    }
    sim_plan_retain(plan);
    s->plan = plan;
    s->threads = threads < 1 ? 1 : threads;
    return s;
}

void sim_state_unload(sim_state *s)
{
    sim_plan *p = s->plan;
    for (size_t i = 0; i < p->n_vals; i++) {
        if (p->vals[i].kind != SV_CONST && !(p->vals[i].kind == SV_BLOB && sim_weight_release(s->store[i])))
            free(s->store[i]);
        s->store[i] = NULL;
    }
    if (s->panels)
        for (size_t i = 0; i < p->n_ops; i++) {
            free(s->panels[i].f32);
        }
    free(s->panels);
    s->panels = NULL;
    s->runs = 0;
    for (int i = 0; i < 3; i++) {
        free(s->scratch[i]);
        s->scratch[i] = NULL;
        s->scratch_cap[i] = 0;
    }
    s->loaded = 0;
}

void sim_state_free(sim_state *s)
{
    if (!s)
        return;
    sim_state_unload(s);
    free(s->store);
    sim_plan_release(s->plan);
    free(s);
}

/* Give back the whole pages of data[0..len) (a private read-only file mapping). */
static void drop(const void *data, size_t len)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)data, start = (a + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
    uintptr_t stop = (a + len) / (uintptr_t)page * (uintptr_t)page;
    if (page > 0 && stop > start)
        (void)madvise((void *)start, stop - start, MADV_DONTNEED); /* a hint: the pages are read again if used */
}

int sim_state_load(sim_state *s, const sim_file *files, size_t n_files, int drop_pages, char *err, size_t errlen)
{
    sim_plan *p = s->plan;
    if (s->loaded)
        return ANEC_OK;
    char *done = calloc(p->n_vals ? p->n_vals : 1, 1);
    if (!done) {
        sim_state_unload(s);
        snprintf(err, errlen, "out of memory");
        return ANEC_ENOMEM;
    }
    int rc = ANEC_OK;
    for (size_t i = 0; i < p->n_vals && rc == ANEC_OK; i++) {
        sim_value *v = &p->vals[i];
        if (v->kind != SV_BLOB || done[i] || v->dec)
            continue;
        const sim_file *f = NULL;
        for (size_t k = 0; k < n_files && !f; k++)
            if (strcmp(files[k].path, v->blob_path) == 0)
                f = &files[k];
        if (!f) {
            snprintf(err, errlen, "load: the compiled weights hold no file %s for const '%s' (model.mil:%d)",
                     v->blob_path, v->name, v->line);
            rc = ANEC_ELOAD;
            break;
        }
        const uint8_t *file = f->data;
        size_t len = f->len;
    /* every const stored in this file */
        for (size_t j = i; j < p->n_vals; j++) {
            sim_value *w = &p->vals[j];
            if (w->kind != SV_BLOB || done[j] || w->dec || strcmp(w->blob_path, v->blob_path) != 0)
                continue;
            blob_tensor t;
            char berr_[400];
            if (blob_read_tensor(file, len, w->blob_offset, rt_blob_dtype(w->dt), w->bytes, &t, berr_, sizeof berr_)) {
                snprintf(err, errlen, "load: %s, const '%s' (model.mil:%d), offset %llu: %s", w->blob_path, w->name, w->line,
                         (unsigned long long)w->blob_offset, berr_);
                rc = ANEC_ELOAD;
                break;
            }
            if (sim_dtype_subbyte(w->dt) && t.size * 8 - t.padding_bits != (uint64_t)w->numel * blob_dtype_bits(t.dtype)) {
                snprintf(err, errlen, "load: %s, const '%s' (model.mil:%d), offset %llu: %llu padding bits make the "
                         "payload hold %llu %s elements, the declared type has %zu", w->blob_path, w->name, w->line,
                         (unsigned long long)w->blob_offset, (unsigned long long)t.padding_bits,
                         (unsigned long long)((t.size * 8 - t.padding_bits) / blob_dtype_bits(t.dtype)),
                         mil_dtype_name(w->dt), w->numel);
                rc = ANEC_ELOAD;
                break;
            }
            /* one aligned copy per process of each distinct payload (kernels read it in place),
               as slivers where only pointwise convs read it */
            void *copy = w->slivers ? sim_weight_acquire_slivers(t.data, (int)w->shape[0], (int)w->shape[1])
                                    : sim_weight_acquire(t.data, w->bytes);
            if (!copy) {
                rc = ANEC_ENOMEM;
                snprintf(err, errlen, "out of memory");
                break;
            }
            if (drop_pages)
                drop(t.data, w->bytes);
            s->store[j] = copy;
            done[j] = 1;
        }
    }
    free(done);
    for (size_t i = 0; i < p->n_vals && rc == ANEC_OK; i++) /* consts first: literal payload operands */
        if (p->vals[i].kind == SV_CONST)
            s->store[i] = p->vals[i].cdata;
    for (size_t i = 0; i < p->n_vals && rc == ANEC_OK; i++) /* compressed weights, from their payloads */
        if (p->vals[i].kind == SV_BLOB && p->vals[i].dec)
            rc = sim_decompress(s, (int)i, err, errlen);
    if (rc == ANEC_OK && !(s->panels = calloc(p->n_ops ? p->n_ops : 1, sizeof *s->panels))) {
        rc = ANEC_ENOMEM;
        snprintf(err, errlen, "out of memory");
    }
    for (size_t i = 0; i < p->n_vals && rc == ANEC_OK; i++) {
        sim_value *v = &p->vals[i];
        if (v->kind == SV_CONST) {
            s->store[i] = v->cdata;
        } else if (v->kind == SV_OP && !v->view) { /* inputs and views: set per run (sim_state_run) */
            s->store[i] = malloc(v->bytes ? v->bytes : 1);
            if (!s->store[i]) {
                rc = ANEC_ENOMEM;
                snprintf(err, errlen, "out of memory allocating '%s'", v->name);
            }
        }
    }
    if (rc != ANEC_OK) {
        sim_state_unload(s);
        return rc;
    }
    s->loaded = 1;
    return ANEC_OK;
}

float *sim_scratch(sim_state *s, int slot, size_t n)
{
    if (slot < 3) {
        if (s->scratch_cap[slot] < n) {
            float *p = realloc(s->scratch[slot], n * sizeof(float));
            if (!p)
                return NULL;
            s->scratch[slot] = p;
            s->scratch_cap[slot] = n;
        }
        return s->scratch[slot];
    }
    return NULL;
}

/* ---- element conversion --------------------------------------------------------- */

void sim_to_float(const void *src, mil_dtype dt, size_t n, float *dst)
{
    switch (dt) {
    case MIL_DT_FP16: anec_cvt_f16_to_f32(src, dst, n); break;
    case MIL_DT_FP32: memcpy(dst, src, n * sizeof(float)); break;
    case MIL_DT_INT32: for (size_t i = 0; i < n; i++) dst[i] = (float)((const int32_t *)src)[i]; break;
    case MIL_DT_INT8: for (size_t i = 0; i < n; i++) dst[i] = (float)((const int8_t *)src)[i]; break;
    case MIL_DT_UINT8:
    case MIL_DT_BOOL: for (size_t i = 0; i < n; i++) dst[i] = (float)((const uint8_t *)src)[i]; break;
    default: memset(dst, 0, n * sizeof(float)); break;
    }
}

static double clampd(double v, double lo, double hi) { return v != v ? 0 : v < lo ? lo : v > hi ? hi : v; }

void sim_from_float(const float *src, mil_dtype dt, size_t n, void *dst)
{
    switch (dt) {
    case MIL_DT_FP16: anec_cvt_f32_to_f16(src, dst, n); break;
    case MIL_DT_FP32: if (dst != (const void *)src) memcpy(dst, src, n * sizeof(float)); break;
    case MIL_DT_INT32: for (size_t i = 0; i < n; i++) ((int32_t *)dst)[i] = (int32_t)clampd(trunc(src[i]), -2147483648.0, 2147483647.0); break;
    case MIL_DT_INT8: for (size_t i = 0; i < n; i++) ((int8_t *)dst)[i] = (int8_t)clampd(trunc(src[i]), -128, 127); break;
    case MIL_DT_UINT8: for (size_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = (uint8_t)clampd(trunc(src[i]), 0, 255); break;
    case MIL_DT_BOOL: for (size_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = src[i] != 0; break;
    default: break;
    }
}

/* fp32 view of value v: the storage itself for fp32, else a converted copy in scratch slot. */
const float *sim_fview(sim_state *s, int slot, int v)
{
    sim_value *val = &s->plan->vals[v];
    if (val->dt == MIL_DT_FP32)
        return s->store[v];
    float *buf = sim_scratch(s, slot, val->numel);
    if (buf)
        sim_to_float(s->store[v], val->dt, val->numel, buf);
    return buf;
}

/* Where to compute the fp32 result of value v: its storage for fp32, else scratch slot 2. */
float *sim_fout(sim_state *s, int v)
{
    sim_value *val = &s->plan->vals[v];
    if (val->dt == MIL_DT_FP32)
        return s->store[v];
    return sim_scratch(s, 2, val->numel);
}

void sim_commit(sim_state *s, int v, const float *buf)
{
    sim_value *val = &s->plan->vals[v];
    sim_from_float(buf, val->dt, val->numel, s->store[v]);
}

int sim_sk_dt(mil_dtype dt) { return dt == MIL_DT_FP32 ? SK_F32 : SK_F16; }

/* The products whose constant weight is packed once, when a program runs for the second time
   since its load (a program loaded for a single call, as after each step's reload in a
   training loop, never pays for it): a pointwise, ungrouped conv over a BLOBFILE weight, at
   most PACK_MAX_COLS output columns wide (a decode step's block), whose weight is fp32: it is
   packed as fp32 panels for sk_gemm_packed. An fp16 weight is never packed here: one read only
   by pointwise convs is held as the narrow kernel's slivers from its load (sim_value.slivers),
   which every product reads where they are (sk_gemm_narrow for a decode step's block, bound
   by reading the weight, at memory speed); any other is read as rows (sk_gemm_rows). Up to
   PACK_BUDGET bytes per program, and never more than a quarter of the memory still free when
   it packs (so that many programs cannot pack the machine full); beyond that, or if memory
   runs out, the weights are read where they are (sk_gemm_rows) as before packing. Either way
   the result is the same, bit for bit. */
#define PACK_BUDGET ((size_t)1 << 30)

/* A conv whose product is one GEMM over its input as laid out (no im2col): a 1x1 kernel,
   stride 1, no padding. */
int sim_pointwise_conv(const sim_op *o, const sim_value *wv)
{
    return wv->shape[2] == 1 && wv->shape[3] == 1 && o->strides[0] == 1 && o->strides[1] == 1 &&
           o->pads[0] == 0 && o->pads[1] == 0 && o->pads[2] == 0 && o->pads[3] == 0;
}

/* A conv whose product is one GEMM of at most PACK_MAX_COLS columns: pointwise and
   ungrouped (narrow_product runs it). */
int sim_narrow_conv(const sim_plan *p, const sim_op *o)
{
    const sim_value *wv = &p->vals[o->y], *ov = &p->vals[o->outs[0]];
    return o->groups == 1 && sim_pointwise_conv(o, wv) && ov->shape[2] * ov->shape[3] <= PACK_MAX_COLS;
}

static int packable(const sim_plan *p, const sim_op *o)
{
    if (o->kind != SOP_CONV || o->x < 0 || o->y < 0)
        return 0;
    return p->vals[o->y].kind == SV_BLOB && sim_narrow_conv(p, o);
}

/* PACK_BUDGET, or a quarter of the free memory if that is less (where the OS tells it) */
static size_t pack_budget(void)
{
    size_t budget = PACK_BUDGET;
#ifdef _SC_AVPHYS_PAGES
    long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    if (pages > 0 && size > 0 && (size_t)pages / 4 < budget / (size_t)size)
        budget = (size_t)pages / 4 * (size_t)size;
#endif
    return budget;
}

void sim_pack_weights(sim_state *s)
{
    const sim_plan *p = s->plan;
    size_t used = 0, budget = pack_budget();
    for (size_t i = 0; i < p->n_ops; i++) {
        const sim_op *o = &p->ops[i];
        if (!packable(p, o) || p->vals[o->y].dt != MIL_DT_FP32)
            continue; /* an fp16 weight is read where it is (sk_gemm_narrow, sk_gemm_rows) */
        const sim_value *wv = &p->vals[o->y];
        int64_t M = wv->shape[0], K = wv->shape[1];
        if (M > INT_MAX || K > INT_MAX)
            continue;
        size_t n = sk_packed_a_floats((int)M, (int)K);
        if (n == 0 || n > (budget - used) / sizeof(float))
            continue;
        float *dst = malloc(n * sizeof(float));
        sk_mat A = {s->store[o->y], SK_F32, (ptrdiff_t)K, 1};
        if (!dst || sk_pack_a((int)M, (int)K, A, dst) != 0) {
            free(dst);
            return; /* the ops packed so far keep their panels; the others pack per call */
        }
        s->panels[i].f32 = dst;
        used += n * sizeof(float);
    }
}
