/*
 * rt_stats.c - the runtime's and each program's counters (compiles, cache
 * hits, loads, reloads by strategy, evaluations, time per phase, bytes the
 * CPU moves to and from surfaces) and the public anec_stats /
 * anec_program_stats, which add the compile budget's view (rt_budget.c).
 */
#include <stdint.h>

#include "rt_internal.h"

/* ---- counters -------------------------------------------------------------------------- */

void rt_count(anec_runtime *rt, const struct anec_stats *d)
{
    pthread_mutex_lock(&rt->st_lock);
    struct anec_stats *s = &rt->st;
    s->compiles += d->compiles;
    s->cache_hits += d->cache_hits;
    s->loads += d->loads;
    s->unloads += d->unloads;
    s->reloads += d->reloads;
    s->evaluations += d->evaluations;
    s->blobs_patched += d->blobs_patched;
    s->ns_compile += d->ns_compile;
    s->ns_load += d->ns_load;
    s->ns_unload += d->ns_unload;
    s->ns_reload += d->ns_reload;
    s->ns_evaluate += d->ns_evaluate;
    s->reloads_data_patch += d->reloads_data_patch;
    s->reloads_recompile += d->reloads_recompile;
    s->reloads_inputs += d->reloads_inputs;
    s->reloads_new_object += d->reloads_new_object;
    s->host_in_bytes += d->host_in_bytes;
    s->host_out_bytes += d->host_out_bytes;
    s->surface_copy_bytes += d->surface_copy_bytes;
    pthread_mutex_unlock(&rt->st_lock);
}

void rt_count_bytes(anec_program *p, uint64_t in, uint64_t out, uint64_t copied)
{
    struct anec_stats d = {0};
    d.host_in_bytes = in;
    d.host_out_bytes = out;
    d.surface_copy_bytes = copied;
    rt_count(p->rt, &d);
    p->st.host_in_bytes += in;
    p->st.host_out_bytes += out;
    p->st.surface_copy_bytes += copied;
}

/* Count one load of p that took since t0, in the runtime's and the program's stats. */
void rt_count_load(anec_program *p, uint64_t t0)
{
    struct anec_stats d = {0};
    d.loads = 1;
    d.ns_load = rt_now_ns() - t0;
    rt_count(p->rt, &d);
    p->st.loads++;
    p->st.ns_load += d.ns_load;
}

/* Count one reload of p by input-surface writes that took since t0. */
void rt_count_inputs_reload(anec_program *p, uint64_t t0)
{
    struct anec_stats d = {0};
    d.reloads = 1;
    d.reloads_inputs = 1;
    d.ns_reload = rt_now_ns() - t0;
    rt_count(p->rt, &d);
    p->st.reloads++;
    p->st.reloads_inputs++;
    p->st.ns_reload += d.ns_reload;
}

int anec_stats(const anec_runtime *rt, struct anec_stats *out)
{
    if (!rt || !out)
        return ANEC_EINVAL;
    if (rt_forked(rt))
        return rt_forked_error(rt);
    pthread_mutex_lock((pthread_mutex_t *)&rt->st_lock);
    *out = rt->st;
    pthread_mutex_unlock((pthread_mutex_t *)&rt->st_lock);
    rt_budget_view(rt, out, out->compiles);
    return ANEC_OK;
}

int anec_program_stats(const anec_program *p, struct anec_stats *out)
{
    if (!p || !out)
        return rt_fail(ANEC_EINVAL, "NULL argument");
    if (rt_forked(p->rt))
        return rt_forked_error(p->rt);
    pthread_mutex_lock((pthread_mutex_t *)&p->lock);
    *out = p->st;
    pthread_mutex_unlock((pthread_mutex_t *)&p->lock);
    pthread_mutex_lock((pthread_mutex_t *)&p->rt->st_lock);
    uint64_t mine = p->rt->st.compiles;
    pthread_mutex_unlock((pthread_mutex_t *)&p->rt->st_lock);
    rt_budget_view(p->rt, out, mine);
    out->programs_live = p->closed ? 0 : 1;
    out->dirs_live = p->closed ? 0 : 1;
    return ANEC_OK;
}
