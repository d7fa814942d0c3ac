/*
 * rt_eval.c - evaluation: rt_eval_locked (the driver's evaluate on unlocked
 * surfaces, counted), anec_run on the program's surfaces, anec_call and
 * anec_set_inputs / anec_reload_inputs (host tensors written into the input
 * surfaces), anec_write_input_slice (rows of one input, in place), and
 * anec_evaluate on surfaces of exactly the caller's buffer sizes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

/* ---- evaluate ----------------------------------------------------------------------------------- */

int rt_eval_locked(anec_program *p, anec_surface *const *in, size_t n_in, anec_surface *const *out, size_t n_out)
{
    anec_runtime *rt = p->rt;
    if (!p->loaded)
        return rt_fail(ANEC_ESTATE, "evaluate: the program is not loaded (call anec_load)");
    uint64_t t0 = rt_now_ns();
    char err[RT_ERR_LEN];
    err[0] = 0;
    int rc = rt->drv->evaluate(rt->ctx, p->dprog, in, n_in, out, n_out, err, sizeof err);
    if (rc != ANEC_OK)
        return rt_fail(rc, "%s", err);
    struct anec_stats d = {0};
    d.evaluations = 1;
    d.ns_evaluate = rt_now_ns() - t0;
    rt_count(rt, &d);
    p->st.evaluations++;
    p->st.ns_evaluate += d.ns_evaluate;
    return ANEC_OK;
}

static int run_locked(anec_program *p)
{
    anec_surface *in[64], *out[64];
    anec_surface **ip = p->n_in <= 64 ? in : malloc(p->n_in * sizeof *ip);
    anec_surface **op = p->n_out <= 64 ? out : malloc(p->n_out * sizeof *op);
    int rc;
    if (!ip || !op) {
        rc = rt_fail(ANEC_ENOMEM, "out of memory");
    } else {
        for (size_t i = 0; i < p->n_in; i++)
            ip[i] = &p->in_s[i];
        for (size_t i = 0; i < p->n_out; i++)
            op[i] = &p->out_s[i];
        if (p->exposed) /* the device gets them unlocked; the caller's pointers are locked again after */
            rt_unexpose(p);
        rc = rt_eval_locked(p, ip, p->n_in, op, p->n_out);
        if (p->exposed) {
            int lrc = rt_expose(p);
            rc = rc == ANEC_OK ? lrc : rc;
        }
    }
    if (ip && ip != in)
        free(ip);
    if (op && op != out)
        free(op);
    return rc;
}

int anec_run(anec_program *p)
{
    int rc = rt_enter(p);
    if (rc != ANEC_OK)
        return rc;
    rc = run_locked(p);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

static int write_inputs(anec_program *p, const anec_io *inputs, size_t n_in)
{
    if (n_in != p->n_in)
        return rt_fail(ANEC_EINVAL, "the program has %zu inputs; got %zu", p->n_in, n_in);
    if (n_in && !inputs)
        return rt_fail(ANEC_EINVAL, "NULL input array");
    for (size_t i = 0; i < n_in; i++)
        if (inputs[i].data) {
            int rc = rt_transfer_surface(p, &p->in[i], &inputs[i], &p->in_s[i], 0, "input");
            if (rc != ANEC_OK)
                return rc;
        }
    return ANEC_OK;
}

int anec_call(anec_program *p, const anec_io *inputs, size_t n_in, const anec_io *outputs, size_t n_out)
{
    int rc = rt_enter(p);
    if (rc != ANEC_OK)
        return rc;
    if (n_out != p->n_out || (n_out && !outputs))
        rc = rt_fail(ANEC_EINVAL, "the program has %zu outputs; got %zu", p->n_out, n_out);
    if (rc == ANEC_OK)
        rc = write_inputs(p, inputs, n_in);
    if (rc == ANEC_OK)
        rc = run_locked(p);
    for (size_t j = 0; rc == ANEC_OK && j < n_out; j++)
        if (outputs[j].data)
            rc = rt_transfer_surface(p, &p->out[j], &outputs[j], &p->out_s[j], 1, "output");
    pthread_mutex_unlock(&p->lock);
    return rc;
}

int anec_set_inputs(anec_program *p, const anec_io *inputs, size_t n_in)
{
    int rc = rt_enter(p);
    if (rc != ANEC_OK)
        return rc;
    rc = write_inputs(p, inputs, n_in);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

int anec_reload_inputs(anec_program *p, const anec_io *inputs, size_t n_in)
{
    int rc = rt_enter(p);
    if (rc != ANEC_OK)
        return rc;
    uint64_t t0 = rt_now_ns();
    rc = write_inputs(p, inputs, n_in);
    if (rc == ANEC_OK)
        rt_count_inputs_reload(p, t0);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

int anec_write_input_slice(anec_program *p, anec_pipeline *pl, size_t input, const anec_slice *slice,
                           const anec_io *data)
{
    if (!p == !pl)
        return rt_fail(ANEC_EINVAL, "anec_write_input_slice: give one program or one pipeline");
    if (pl)
        return rt_pipeline_write_slice(pl, input, slice, data);
    int rc = rt_enter(p);
    if (rc != ANEC_OK)
        return rc;
    if (input >= p->n_in)
        rc = rt_fail(ANEC_EINVAL, "the program has %zu inputs; got input %zu", p->n_in, input);
    else
        rc = rt_slice_write(p, &p->in[input], slice, data, &p->in_s[input], NULL);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

int anec_evaluate(anec_program *p, const anec_buffer *inputs, size_t n_in, anec_buffer *outputs, size_t n_out)
{
    int rc = rt_enter(p);
    if (rc != ANEC_OK)
        return rc;
    anec_runtime *rt = p->rt;
    if ((!inputs && n_in) || (!outputs && n_out)) {
        pthread_mutex_unlock(&p->lock);
        return rt_fail(ANEC_EINVAL, "anec_evaluate: NULL buffer array");
    }
    for (size_t i = 0; i < n_in + n_out; i++) {
        const anec_buffer *b = i < n_in ? &inputs[i] : &outputs[i - n_in];
        if (!b->data && b->bytes) {
            pthread_mutex_unlock(&p->lock);
            return rt_fail(ANEC_EINVAL, "anec_evaluate: %s buffer %zu has no memory", i < n_in ? "input" : "output",
                           i < n_in ? i : i - n_in);
        }
    }
    /* device surfaces of exactly the caller's sizes (so the device sees what the caller allocated) */
    anec_surface *s = calloc(n_in + n_out + 1, sizeof *s);
    anec_surface **ptrs = calloc(n_in + n_out + 1, sizeof *ptrs);
    size_t made = 0;
    char err[512];
    if (!s || !ptrs)
        rc = rt_fail(ANEC_ENOMEM, "out of memory");
    for (size_t i = 0; rc == ANEC_OK && i < n_in + n_out; i++) {
        size_t bytes = i < n_in ? inputs[i].bytes : outputs[i - n_in].bytes;
        if (rt->drv->surface_create(rt->ctx, bytes, &s[i], err, sizeof err)) {
            rc = rt_fail(ANEC_ENOMEM, "cannot allocate a surface: %s", err);
            break;
        }
        made++;
        ptrs[i] = &s[i];
        if (i < n_in && bytes && (rc = rt_surface_lock(rt, &s[i], 0)) == ANEC_OK) {
            memcpy(s[i].base, inputs[i].data, bytes);
            rt_surface_unlock(rt, &s[i]);
            rt_count_bytes(p, bytes, 0, 0);
        }
    }
    if (rc == ANEC_OK)
        rc = rt_eval_locked(p, ptrs, n_in, ptrs + n_in, n_out);
    for (size_t j = 0; rc == ANEC_OK && j < n_out; j++)
        if (outputs[j].bytes && (rc = rt_surface_lock(rt, &s[n_in + j], 1)) == ANEC_OK) {
            memcpy(outputs[j].data, s[n_in + j].base, outputs[j].bytes);
            rt_surface_unlock(rt, &s[n_in + j]);
            rt_count_bytes(p, 0, outputs[j].bytes, 0);
        }
    for (size_t i = 0; i < made; i++)
        rt->drv->surface_free(rt->ctx, &s[i]);
    free(s);
    free(ptrs);
    pthread_mutex_unlock(&p->lock);
    return rc;
}
