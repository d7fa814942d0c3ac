/*
 * driver_sim.c - the "sim" driver: a strict ANE simulator behind the driver
 * interface (anec_driver.h).
 *
 *   compile   parse the MIL and build a plan (sim_plan.c), rejecting what the
 *             ANE compiler rejects; at most `compile_budget` compiles per
 *             driver context (a context models one process on the device).
 *   load      read and validate the BLOBFILEs from the program directory;
 *             weights are baked from then on (sim_exec.c).
 *   evaluate  check the surfaces like the device (same count, uniform
 *             allocation size per direction, not below the minimum, large
 *             enough for the packed tensor) and run the plan; failures carry
 *             the device's status=0x1d and a constraint id.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anec_driver.h"
#include "rt_util.h"
#include "sim_plan.h"

typedef struct sim_ctx {
    int threads;
    long long budget;
    long long compiles;
} sim_ctx;

typedef struct sim_prog {
    sim_state *st;
    char *dir;
    size_t min_surface;
} sim_prog;

static int sim_available(char *why, size_t whylen)
{
    if (why && whylen)
        snprintf(why, whylen, "the sim runs everywhere");
    return ANEC_OK;
}

static int sim_open(void **ctx, char *err, size_t errlen)
{
    sim_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return ANEC_ENOMEM;
    }
    c->threads = 2;
    const char *env = getenv("ANEC_SIM_THREADS");
    if (env && atoi(env) > 0)
        c->threads = atoi(env);
    c->budget = 119;
    *ctx = c;
    return ANEC_OK;
}

static void sim_close(void *ctx) { free(ctx); }

static int sim_set_option(void *ctx, const char *key, long long value, char *err, size_t errlen)
{
    sim_ctx *c = ctx;
    if (strcmp(key, "threads") == 0 && value >= 1 && value <= 64) {
        c->threads = (int)value;
        return ANEC_OK;
    }
    if (strcmp(key, "compile_budget") == 0 && value >= 0) {
        c->budget = value;
        return ANEC_OK;
    }
    snprintf(err, errlen, "sim: invalid option %s = %lld", key, value);
    return ANEC_EINVAL;
}

static int new_prog(sim_plan *plan, const char *dir, size_t min_surface, int threads, void **out, char *err, size_t errlen)
{
    sim_prog *p = calloc(1, sizeof *p);
    if (p) {
        p->st = sim_state_new(plan, threads);
        p->dir = rt_strdup(dir);
    }
    if (!p || !p->st || !p->dir) {
        if (p) {
            sim_state_free(p->st);
            free(p->dir);
            free(p);
        }
        snprintf(err, errlen, "out of memory");
        return ANEC_ENOMEM;
    }
    p->min_surface = min_surface;
    *out = p;
    return ANEC_OK;
}

static int sim_compile(void *ctx, const anec_compile_args *args, void **prog, char *err, size_t errlen)
{
    sim_ctx *c = ctx;
    if (c->compiles >= c->budget) {
        snprintf(err, errlen, "[ANE-COMPILE-BUDGET] compile refused: this process already compiled %lld programs, "
                 "the device's limit is %lld per process", c->compiles, c->budget);
        return ANEC_EBUDGET;
    }
    int status;
    sim_plan *plan = sim_plan_build(args->mil, args->mil_len, &args->limits, &status, err, errlen);
    if (!plan)
        return status;
    int rc = new_prog(plan, args->dir, args->limits.min_surface_bytes, c->threads, prog, err, errlen);
    sim_plan_release(plan);
    if (rc == ANEC_OK)
        c->compiles++;
    return rc;
}

static int sim_clone(void *ctx, void *prog, const char *dir, void **out, char *err, size_t errlen)
{
    sim_ctx *c = ctx;
    sim_prog *p = prog;
    return new_prog(p->st->plan, dir, p->min_surface, c->threads, out, err, errlen);
}

static int sim_load(void *ctx, void *prog, char *err, size_t errlen)
{
    (void)ctx;
    sim_prog *p = prog;
    return sim_state_load(p->st, p->dir, err, errlen);
}

static int sim_unload(void *ctx, void *prog, char *err, size_t errlen)
{
    (void)ctx;
    (void)err;
    (void)errlen;
    sim_state_unload(((sim_prog *)prog)->st);
    return ANEC_OK;
}

static int sim_surface_create(void *ctx, size_t bytes, anec_surface *out, char *err, size_t errlen)
{
    (void)ctx;
    size_t n = (bytes + 63u) & ~(size_t)63u;
    uint8_t *b = aligned_alloc(64, n ? n : 64);
    if (!b) {
        snprintf(err, errlen, "out of memory allocating a %zu-byte surface", bytes);
        return ANEC_ENOMEM;
    }
    memset(b, 0, n ? n : 64);
    out->handle = NULL;
    out->base = b;
    out->bytes = bytes;
    return ANEC_OK;
}

static void sim_surface_free(void *ctx, anec_surface *s)
{
    (void)ctx;
    free(s->base);
    s->base = NULL;
    s->bytes = 0;
}

#define STATUS_1D "ANEProgramProcessRequestDirect() failed with status=0x1d: Program Inference error "

static int check_side(const sim_plan *plan, const int *bind, size_t n, anec_surface *const *surf, size_t min,
                      const char *side, char *err, size_t errlen)
{
    for (size_t i = 1; i < n; i++)
        if (surf[i]->bytes != surf[0]->bytes) {
            snprintf(err, errlen, STATUS_1D "[ANE-UNIFORM-SURFACES] %s surfaces have different allocation sizes "
                     "(%s: %zu bytes, %s: %zu bytes); allocate every %s surface at the same size",
                     side, plan->vals[bind[0]].name, surf[0]->bytes, plan->vals[bind[i]].name, surf[i]->bytes, side);
            return ANEC_EEVAL;
        }
    for (size_t i = 0; i < n; i++) {
        if (surf[i]->bytes < min) {
            snprintf(err, errlen, STATUS_1D "[ANE-MIN-SURFACE] %s surface for '%s' is %zu bytes, below the minimum of %zu",
                     side, plan->vals[bind[i]].name, surf[i]->bytes, min);
            return ANEC_EEVAL;
        }
        if (surf[i]->bytes < plan->vals[bind[i]].bytes) {
            snprintf(err, errlen, STATUS_1D "%s surface for '%s' is %zu bytes but the packed tensor needs %zu",
                     side, plan->vals[bind[i]].name, surf[i]->bytes, plan->vals[bind[i]].bytes);
            return ANEC_EEVAL;
        }
        if (!surf[i]->base) {
            snprintf(err, errlen, STATUS_1D "%s surface for '%s' has no memory", side, plan->vals[bind[i]].name);
            return ANEC_EEVAL;
        }
    }
    return ANEC_OK;
}

static int sim_evaluate(void *ctx, void *prog, anec_surface *const *inputs, size_t n_in,
                        anec_surface *const *outputs, size_t n_out, char *err, size_t errlen)
{
    sim_ctx *c = ctx;
    sim_prog *p = prog;
    const sim_plan *plan = p->st->plan;
    if (!p->st->loaded) {
        snprintf(err, errlen, "evaluate: the program is not loaded");
        return ANEC_ESTATE;
    }
    if (n_in != plan->n_inputs || n_out != plan->n_outputs) {
        snprintf(err, errlen, STATUS_1D "the program has %zu inputs and %zu outputs, the request binds %zu and %zu",
                 plan->n_inputs, plan->n_outputs, n_in, n_out);
        return ANEC_EEVAL;
    }
    int rc = check_side(plan, plan->in_bind, n_in, inputs, p->min_surface, "input", err, errlen);
    if (rc == ANEC_OK)
        rc = check_side(plan, plan->out_bind, n_out, outputs, p->min_surface, "output", err, errlen);
    if (rc != ANEC_OK)
        return rc;
    uint8_t *in[256], *out[256];
    uint8_t **inp = n_in <= 256 ? in : malloc(n_in * sizeof *inp);
    uint8_t **outp = n_out <= 256 ? out : malloc(n_out * sizeof *outp);
    if (!inp || !outp) {
        if (inp != in) free(inp);
        if (outp != out) free(outp);
        snprintf(err, errlen, "out of memory");
        return ANEC_ENOMEM;
    }
    for (size_t i = 0; i < n_in; i++)
        inp[i] = inputs[i]->base;
    for (size_t i = 0; i < n_out; i++)
        outp[i] = outputs[i]->base;
    p->st->threads = c->threads;
    rc = sim_state_run(p->st, inp, outp, err, errlen);
    if (inp != in) free(inp);
    if (outp != out) free(outp);
    return rc;
}

static void sim_release(void *ctx, void *prog)
{
    (void)ctx;
    sim_prog *p = prog;
    if (!p)
        return;
    sim_state_free(p->st);
    free(p->dir);
    free(p);
}

const anec_driver anec_driver_sim = {
    .name = "sim",
    .available = sim_available,
    .open = sim_open,
    .close = sim_close,
    .compile = sim_compile,
    .load = sim_load,
    .unload = sim_unload,
    .surface_create = sim_surface_create,
    .surface_free = sim_surface_free,
    .evaluate = sim_evaluate,
    .release = sim_release,
    .clone = sim_clone,
    .set_option = sim_set_option,
};
