/*
 * rt_pipeline.c - a pipeline of stage programs run as one program (anec_rt.h).
 *
 * The compiler cuts a func that breaks a per-program budget into stages
 * (anec/passes/partition.py); here they run in order, in C, one call per
 * evaluation:
 *
 *   - every stage input is bound once, at create: a pipeline input (written
 *     from the host tensor into the first consumer's surface, then copied to
 *     the others), or an earlier stage's output. An output surface whose
 *     allocation size equals the consumer's input size is bound to the
 *     consumer directly (no copy: the device reads the packed tensor from
 *     byte 0 of whatever surface is bound, and every surface of a direction
 *     must have one size, ANE-UNIFORM-SURFACES); otherwise its packed bytes
 *     are copied into the consumer's own surface. Each stage's surfaces have
 *     its own program's size (the compiler sizes stages of one pipeline alike
 *     only where that stays near each stage's need). The surface arrays handed
 *     to the driver never change, so the device request of each stage is
 *     built once.
 *   - a resident input (stage -2) is a weight the stage's program takes as an
 *     input: the host writes it once into that program's own surface, and the
 *     pipeline neither feeds nor copies it. Stages that differ only in their
 *     weights share one compiled program this way (one compile; each stage
 *     is its own model object with its own weight surfaces).
 *   - a call holds the pipeline's lock (calls and reloads of one pipeline are
 *     serialized: no call sees some stages with old weights and others with
 *     new ones) and each stage's lock while it runs.
 *   - a pipeline input a call passes as NULL keeps what its consumers'
 *     surfaces hold (state, e.g. a KV cache); anec_write_input_slice writes
 *     rows of it into every consumer's surface, under the pipeline's lock.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt_internal.h"

typedef struct pipe_stage {
    anec_program *p;
    anec_pipe_src *src;          /* per program input (binding order) */
    anec_surface **in;           /* the surfaces bound to its inputs */
    anec_surface **out;          /* its own output surfaces */
    int *zero_copy;              /* per input: 1 bound to the producer's surface */
} pipe_stage;

typedef struct pipe_feed {       /* one pipeline input */
    int stage;                   /* first consumer */
    size_t index;
    size_t n_more;               /* further consumers */
    anec_pipe_src *more;
} pipe_feed;

struct anec_pipeline {
    pthread_mutex_t lock;
    anec_runtime *rt;
    pid_t pid;
    pipe_stage *stages;
    size_t n_stages;
    pipe_feed *feeds;
    size_t n_inputs;
    anec_pipe_src *outputs;
    size_t n_outputs;
    struct anec_pipeline_stats st;
};

static void pipeline_destroy(anec_pipeline *pl)
{
    for (size_t s = 0; s < pl->n_stages; s++) {
        pipe_stage *st = &pl->stages[s];
        if (st->p)
            rt_program_unpin(st->p);
        free(st->src);
        free(st->in);
        free(st->out);
        free(st->zero_copy);
    }
    for (size_t i = 0; i < pl->n_inputs; i++)
        free(pl->feeds[i].more);
    free(pl->stages);
    free(pl->feeds);
    free(pl->outputs);
    pthread_mutex_destroy(&pl->lock);
    free(pl);
}

int anec_pipeline_create(anec_runtime *rt, const anec_pipe_stage *stages, size_t n_stages, size_t n_inputs,
                         const anec_pipe_src *outputs, size_t n_outputs, anec_pipeline **out)
{
    if (!rt || !out || (!stages && n_stages) || (!outputs && n_outputs) || n_stages == 0)
        return rt_fail(ANEC_EINVAL, "anec_pipeline_create: missing argument");
    *out = NULL;
    anec_pipeline *pl = calloc(1, sizeof *pl);
    if (!pl)
        return rt_fail(ANEC_ENOMEM, "out of memory");
    pthread_mutex_init(&pl->lock, NULL);
    pl->rt = rt;
    pl->pid = getpid();
    pl->stages = calloc(n_stages, sizeof *pl->stages);
    pl->feeds = calloc(n_inputs + 1, sizeof *pl->feeds);
    pl->outputs = calloc(n_outputs + 1, sizeof *pl->outputs);
    if (!pl->stages || !pl->feeds || !pl->outputs) {
        pipeline_destroy(pl);
        return rt_fail(ANEC_ENOMEM, "out of memory");
    }
    pl->n_stages = n_stages;
    pl->n_inputs = n_inputs;
    pl->n_outputs = n_outputs;
    for (size_t i = 0; i < n_inputs; i++)
        pl->feeds[i].stage = -1;
    int rc = ANEC_OK;
    for (size_t s = 0; s < n_stages && rc == ANEC_OK; s++) {
        anec_program *p = stages[s].program;
        pipe_stage *st = &pl->stages[s];
        if (!p || p->rt != rt || p->closed || (!stages[s].inputs && p->n_in)) {
            rc = rt_fail(ANEC_EINVAL, "pipeline stage %zu: no open program of this runtime, or no input sources", s);
            break;
        }
        rt_program_pin(p);
        st->p = p;
        st->src = calloc(p->n_in + 1, sizeof *st->src);
        st->in = calloc(p->n_in + 1, sizeof *st->in);
        st->out = calloc(p->n_out + 1, sizeof *st->out);
        st->zero_copy = calloc(p->n_in + 1, sizeof *st->zero_copy);
        if (!st->src || !st->in || !st->out || !st->zero_copy) {
            rc = rt_fail(ANEC_ENOMEM, "out of memory");
            break;
        }
        for (size_t j = 0; j < p->n_out; j++)
            st->out[j] = &p->out_s[j];
        pl->st.surface_bytes += (uint64_t)p->in_bytes * p->n_in + (uint64_t)p->out_bytes * p->n_out;
        for (size_t i = 0; i < p->n_in && rc == ANEC_OK; i++) {
            anec_pipe_src src = stages[s].inputs[i];
            st->src[i] = src;
            st->in[i] = &p->in_s[i];
            const io_desc *want = &p->in[i];
            if (src.stage == -2) {
                pl->st.resident_inputs++;
                continue;
            }
            if (src.stage < -2) {
                rc = rt_fail(ANEC_EINVAL, "pipeline stage %zu input '%s': no source kind %d", s, want->name,
                             src.stage);
                break;
            }
            if (src.stage < 0) {
                if (src.index >= n_inputs) {
                    rc = rt_fail(ANEC_EINVAL, "pipeline stage %zu input '%s': no pipeline input %zu", s, want->name,
                                 src.index);
                    break;
                }
                pipe_feed *f = &pl->feeds[src.index];
                if (f->stage < 0) {
                    f->stage = (int)s;
                    f->index = i;
                    continue;
                }
                const io_desc *first = &pl->stages[f->stage].p->in[f->index];
                if (first->dtype != want->dtype || first->bytes != want->bytes) {
                    rc = rt_fail(ANEC_EINVAL, "pipeline input %zu feeds '%s' (stage %d) and '%s' (stage %zu), "
                                 "which differ in dtype or size", src.index, first->name, f->stage, want->name, s);
                    break;
                }
                anec_pipe_src *more = realloc(f->more, (f->n_more + 1) * sizeof *more);
                if (!more) {
                    rc = rt_fail(ANEC_ENOMEM, "out of memory");
                    break;
                }
                f->more = more;
                f->more[f->n_more++] = (anec_pipe_src){(int)s, i};
                continue;
            }
            if ((size_t)src.stage >= s || src.index >= pl->stages[src.stage].p->n_out) {
                rc = rt_fail(ANEC_EINVAL, "pipeline stage %zu input '%s': stage %d has no output %zu (sources must "
                             "be earlier stages)", s, want->name, src.stage, src.index);
                break;
            }
            anec_program *q = pl->stages[src.stage].p;
            const io_desc *have = &q->out[src.index];
            if (have->dtype != want->dtype || have->bytes != want->bytes) {
                rc = rt_fail(ANEC_EINVAL, "pipeline stage %zu input '%s' (%zu bytes) cannot take stage %d output '%s' "
                             "(%zu bytes, another dtype or size)", s, want->name, want->bytes, src.stage, have->name,
                             have->bytes);
                break;
            }
            if (q->out_bytes == p->in_bytes) {
                st->in[i] = &q->out_s[src.index];
                st->zero_copy[i] = 1;
                pl->st.zero_copy_edges++;
            } else {
                pl->st.copied_edges++;
            }
        }
    }
    for (size_t i = 0; rc == ANEC_OK && i < n_inputs; i++) {
        if (pl->feeds[i].stage < 0)
            rc = rt_fail(ANEC_EINVAL, "pipeline input %zu feeds no stage", i);
        else
            pl->st.host_inputs += 1 + pl->feeds[i].n_more;
    }
    for (size_t o = 0; rc == ANEC_OK && o < n_outputs; o++) {
        anec_pipe_src src = outputs[o];
        if (src.stage < 0 || (size_t)src.stage >= n_stages || src.index >= pl->stages[src.stage].p->n_out)
            rc = rt_fail(ANEC_EINVAL, "pipeline output %zu: stage %d has no output %zu", o, src.stage, src.index);
        pl->outputs[o] = src;
    }
    if (rc != ANEC_OK) {
        pipeline_destroy(pl);
        return rc;
    }
    pl->st.stages = n_stages;
    *out = pl;
    return ANEC_OK;
}

static int pl_enter(anec_pipeline *pl)
{
    if (!pl)
        return rt_fail(ANEC_EINVAL, "NULL pipeline");
    if (pl->pid != getpid())
        return rt_fail(ANEC_ESTATE, "this pipeline was made by process %ld and cannot be used after fork()",
                       (long)pl->pid);
    pthread_mutex_lock(&pl->lock);
    return ANEC_OK;
}

/* Pipeline inputs into their consumers' surfaces (pl->lock held). */
static int feed_inputs(anec_pipeline *pl, const anec_io *inputs, size_t n_in)
{
    if (n_in != pl->n_inputs || (n_in && !inputs))
        return rt_fail(ANEC_EINVAL, "the pipeline has %zu inputs; got %zu", pl->n_inputs, n_in);
    for (size_t i = 0; i < n_in; i++) {
        if (!inputs[i].data)
            continue;
        pipe_feed *f = &pl->feeds[i];
        anec_program *p = pl->stages[f->stage].p;
        int rc = rt_enter(p);
        if (rc != ANEC_OK)
            return rc;
        rc = rt_transfer_surface(p, &p->in[f->index], &inputs[i], &p->in_s[f->index], 0, "input");
        anec_surface *from = &p->in_s[f->index];
        size_t bytes = p->in[f->index].bytes;
        pthread_mutex_unlock(&p->lock);
        if (rc != ANEC_OK)
            return rc;
        pl->st.host_in_bytes += bytes;
        for (size_t k = 0; k < f->n_more; k++) {
            anec_program *q = pl->stages[f->more[k].stage].p;
            if ((rc = rt_enter(q)) != ANEC_OK)
                return rc;
            rc = rt_surface_copy(q->rt, &q->in_s[f->more[k].index], from, bytes);
            if (rc == ANEC_OK)
                rt_count_bytes(q, 0, 0, bytes);
            pthread_mutex_unlock(&q->lock);
            if (rc != ANEC_OK)
                return rc;
            pl->st.surface_copy_bytes += bytes;
        }
    }
    return ANEC_OK;
}

int anec_pipeline_call(anec_pipeline *pl, const anec_io *inputs, size_t n_in, const anec_io *outputs, size_t n_out)
{
    int rc = pl_enter(pl);
    if (rc != ANEC_OK)
        return rc;
    uint64_t t0 = rt_now_ns();
    if (n_out != pl->n_outputs || (n_out && !outputs))
        rc = rt_fail(ANEC_EINVAL, "the pipeline has %zu outputs; got %zu", pl->n_outputs, n_out);
    if (rc == ANEC_OK)
        rc = feed_inputs(pl, inputs, n_in);
    for (size_t s = 0; rc == ANEC_OK && s < pl->n_stages; s++) {
        pipe_stage *st = &pl->stages[s];
        anec_program *p = st->p;
        if ((rc = rt_enter(p)) != ANEC_OK)
            break;
        for (size_t i = 0; rc == ANEC_OK && i < p->n_in; i++)
            if (st->src[i].stage >= 0 && !st->zero_copy[i]) {
                const pipe_stage *from = &pl->stages[st->src[i].stage];
                rc = rt_surface_copy(p->rt, &p->in_s[i], &from->p->out_s[st->src[i].index], p->in[i].bytes);
                if (rc == ANEC_OK) {
                    rt_count_bytes(p, 0, 0, p->in[i].bytes);
                    pl->st.surface_copy_bytes += p->in[i].bytes;
                }
            }
        if (rc == ANEC_OK)
            rc = rt_eval_locked(p, st->in, p->n_in, st->out, p->n_out);
        if (rc != ANEC_OK) {
            char msg[RT_ERR_LEN];
            snprintf(msg, sizeof msg, "%s", anec_last_error(NULL));
            rt_fail(rc, "pipeline stage %zu: %s", s, msg);
        }
        pthread_mutex_unlock(&p->lock);
    }
    for (size_t o = 0; rc == ANEC_OK && o < n_out; o++) {
        if (!outputs[o].data)
            continue;
        anec_program *p = pl->stages[pl->outputs[o].stage].p;
        size_t j = pl->outputs[o].index;
        if ((rc = rt_enter(p)) != ANEC_OK)
            break;
        rc = rt_transfer_surface(p, &p->out[j], &outputs[o], &p->out_s[j], 1, "output");
        pthread_mutex_unlock(&p->lock);
        if (rc == ANEC_OK)
            pl->st.host_out_bytes += p->out[j].bytes;
    }
    if (rc == ANEC_OK) {
        pl->st.calls++;
        pl->st.ns_call += rt_now_ns() - t0;
    }
    pthread_mutex_unlock(&pl->lock);
    return rc;
}

int rt_pipeline_write_slice(anec_pipeline *pl, size_t input, const anec_slice *sl, const anec_io *io)
{
    int rc = pl_enter(pl);
    if (rc != ANEC_OK)
        return rc;
    if (input >= pl->n_inputs) {
        pthread_mutex_unlock(&pl->lock);
        return rt_fail(ANEC_EINVAL, "the pipeline has %zu inputs; got input %zu", pl->n_inputs, input);
    }
    const pipe_feed *f = &pl->feeds[input];
    /* checked once before any surface is written: every consumer has the first one's dtype and size */
    anec_program *first = pl->stages[f->stage].p;
    if ((rc = rt_enter(first)) == ANEC_OK) {
        rc = rt_slice_check(&first->in[f->index], sl, io);
        pthread_mutex_unlock(&first->lock);
    }
    for (size_t k = 0; rc == ANEC_OK && k <= f->n_more; k++) {
        anec_pipe_src c = k == 0 ? (anec_pipe_src){f->stage, f->index} : f->more[k - 1];
        anec_program *q = pl->stages[c.stage].p;
        uint64_t bytes = 0;
        if ((rc = rt_enter(q)) != ANEC_OK)
            break;
        rc = rt_slice_write(q, &q->in[c.index], sl, io, &q->in_s[c.index], &bytes);
        pthread_mutex_unlock(&q->lock);
        pl->st.host_in_bytes += bytes;
    }
    pthread_mutex_unlock(&pl->lock);
    return rc;
}

/* Count one reload of the pipeline by input-surface writes that took since t0. */
static void count_inputs_reload(anec_pipeline *pl, uint64_t t0)
{
    struct anec_stats d = {0};
    d.reloads = 1;
    d.reloads_inputs = 1;
    d.ns_reload = rt_now_ns() - t0;
    rt_count(pl->rt, &d);
}

int anec_pipeline_set_inputs(anec_pipeline *pl, const anec_io *inputs, size_t n_in, int as_reload)
{
    int rc = pl_enter(pl);
    if (rc != ANEC_OK)
        return rc;
    uint64_t t0 = rt_now_ns();
    rc = feed_inputs(pl, inputs, n_in);
    if (rc == ANEC_OK && as_reload)
        count_inputs_reload(pl, t0);
    pthread_mutex_unlock(&pl->lock);
    return rc;
}

int anec_pipeline_set_stage_inputs(anec_pipeline *pl, const anec_io *const *inputs, const size_t *n_in,
                                   int as_reload)
{
    int rc = pl_enter(pl);
    if (rc != ANEC_OK)
        return rc;
    if (!inputs || !n_in) {
        pthread_mutex_unlock(&pl->lock);
        return rt_fail(ANEC_EINVAL, "anec_pipeline_set_stage_inputs: NULL argument");
    }
    uint64_t t0 = rt_now_ns();
    /* 1. every input resident, before anything is written */
    for (size_t s = 0; rc == ANEC_OK && s < pl->n_stages; s++) {
        if (!n_in[s])
            continue;
        const pipe_stage *st = &pl->stages[s];
        if (n_in[s] != st->p->n_in || !inputs[s]) {
            rc = rt_fail(ANEC_EINVAL, "pipeline stage %zu has %zu inputs; got %zu", s, st->p->n_in, n_in[s]);
            break;
        }
        for (size_t i = 0; i < n_in[s]; i++)
            if (inputs[s][i].data && st->src[i].stage != -2) {
                rc = rt_fail(ANEC_EINVAL, "pipeline stage %zu input '%s' is not resident (the pipeline feeds it)",
                             s, st->p->in[i].name);
                break;
            }
    }
    /* 2. written stage by stage, the pipeline locked throughout */
    for (size_t s = 0; rc == ANEC_OK && s < pl->n_stages; s++) {
        if (!n_in[s])
            continue;
        rc = anec_set_inputs(pl->stages[s].p, inputs[s], n_in[s]);
        if (rc != ANEC_OK) {
            char msg[RT_ERR_LEN];
            snprintf(msg, sizeof msg, "%s", anec_last_error(NULL));
            rt_fail(rc, "pipeline stage %zu: %s", s, msg);
        }
    }
    if (rc == ANEC_OK && as_reload)
        count_inputs_reload(pl, t0);
    pthread_mutex_unlock(&pl->lock);
    return rc;
}

int anec_pipeline_reload(anec_pipeline *pl, const anec_blob *const *blobs, const size_t *n_blobs)
{
    int rc = pl_enter(pl);
    if (rc != ANEC_OK)
        return rc;
    if (!blobs || !n_blobs) {
        pthread_mutex_unlock(&pl->lock);
        return rt_fail(ANEC_EINVAL, "anec_pipeline_reload: NULL argument");
    }
    /* 1. everything validated, and the compiles needed counted, before any stage changes */
    size_t compiles = 0;
    for (size_t s = 0; rc == ANEC_OK && s < pl->n_stages; s++) {
        if (!n_blobs[s])
            continue;
        anec_program *p = pl->stages[s].p;
        if ((rc = rt_enter(p)) != ANEC_OK)
            break;
        rc = rt_reload_validate(p, blobs[s], n_blobs[s]);
        if (rc != ANEC_OK) {
            char msg[RT_ERR_LEN];
            snprintf(msg, sizeof msg, "%s", anec_last_error(NULL));
            rt_fail(rc, "pipeline stage %zu: %s", s, msg);
        } else if (rt_reload_changes(p, blobs[s], n_blobs[s])) {
            char why[256];
            compiles += rt_reload_strategy(p, why, sizeof why) == ANEC_RELOAD_RECOMPILE;
        }
        pthread_mutex_unlock(&p->lock);
    }
    if (rc == ANEC_OK && compiles) {
        struct anec_stats st;
        anec_stats(pl->rt, &st);
        if ((uint64_t)st.compile_budget_left < compiles)
            rc = rt_fail(ANEC_EBUDGET, "[ANE-COMPILE-BUDGET] this reload needs %zu compiles (stages whose weights "
                         "are not data-patchable), %lld are left; nothing was changed. Compile the pipeline with "
                         "its weights as program inputs to reload without compiles", compiles,
                         (long long)st.compile_budget_left);
    }
    /* 2. apply, stage by stage */
    size_t done = 0;
    for (size_t s = 0; rc == ANEC_OK && s < pl->n_stages; s++) {
        if (!n_blobs[s])
            continue;
        rc = anec_reload_weights(pl->stages[s].p, blobs[s], n_blobs[s]);
        if (rc != ANEC_OK) {
            char msg[RT_ERR_LEN];
            snprintf(msg, sizeof msg, "%s", anec_last_error(NULL));
            rt_fail(rc, "pipeline stage %zu: %s (stages reloaded before it: %zu)", s, msg, done);
        }
        done++;
    }
    pthread_mutex_unlock(&pl->lock);
    return rc;
}

int anec_pipeline_stats(const anec_pipeline *pl, struct anec_pipeline_stats *out)
{
    if (!pl || !out)
        return rt_fail(ANEC_EINVAL, "NULL argument");
    pthread_mutex_lock((pthread_mutex_t *)&pl->lock);
    *out = pl->st;
    pthread_mutex_unlock((pthread_mutex_t *)&pl->lock);
    return ANEC_OK;
}

void anec_pipeline_free(anec_pipeline *pl)
{
    if (!pl || pl->pid != getpid())
        return;
    pipeline_destroy(pl);
}
