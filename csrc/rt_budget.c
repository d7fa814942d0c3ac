/*
 * rt_budget.c - the compile budget (ANE-COMPILE-BUDGET): the compiles this
 * process made on each driver (counted per process and driver, as on the
 * device, indexed by the driver's row in rt_drivers.c), the device's compiles
 * per process (the target's value, the smallest any runtime was given), each
 * runtime's optional cap, and the budget view of anec_stats.
 */
#include <stdint.h>
#include <string.h>

#include "rt_internal.h"

static pthread_mutex_t g_proc = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_compiles[RT_MAX_DRIVERS];
/* The device's compiles per process (the target's; 0: not known yet), per driver. */
static int g_budget[RT_MAX_DRIVERS];

static int row(const anec_runtime *rt) { return rt_driver_index(rt->drv->name); }

uint64_t anec_process_compiles(const char *driver)
{
    int di = rt_driver_index(driver);
    if (di < 0)
        return 0;
    pthread_mutex_lock(&g_proc);
    uint64_t n = g_compiles[di];
    pthread_mutex_unlock(&g_proc);
    return n;
}

int anec_process_reset_budget(const char *driver)
{
    int di = rt_driver_index(driver);
    int rc = rt_driver_reset_process(di);
    if (rc == ANEC_OK) {
        pthread_mutex_lock(&g_proc);
        g_compiles[di] = 0;
        pthread_mutex_unlock(&g_proc);
    }
    return rc;
}

int rt_budget_set_process(const anec_driver *d, int budget)
{
    int di = rt_driver_index(d->name);
    pthread_mutex_lock(&g_proc);
    if (g_budget[di] == 0 || budget < g_budget[di])
        g_budget[di] = budget;
    budget = g_budget[di];
    pthread_mutex_unlock(&g_proc);
    return budget;
}

/* The caller holds rt->lock, so this runtime's compiles are serialized and
   rt->st.compiles is exact for its cap. */
int rt_budget_reserve(anec_runtime *rt)
{
    int di = row(rt);
    pthread_mutex_lock(&g_proc);
    uint64_t proc = g_compiles[di];
    pthread_mutex_lock(&rt->st_lock);
    uint64_t mine = rt->st.compiles;
    pthread_mutex_unlock(&rt->st_lock);
    int rc = ANEC_OK;
    int budget = g_budget[di];
    if (budget > 0 && proc >= (uint64_t)budget)
        rc = rt_fail(ANEC_EBUDGET, "[ANE-COMPILE-BUDGET] this process already made %llu "
                     "compiles on the %s driver (the ANE fails after about %d compiles per process). Programs with "
                     "the same MIL, weight paths and weights are served from the cache without a compile; change "
                     "weights with a delta reload (data patch, or weights compiled as program inputs) instead of "
                     "compiling again", (unsigned long long)proc, rt->drv->name, budget);
    else if (rt->cap > 0 && mine >= (uint64_t)rt->cap)
        rc = rt_fail(ANEC_EBUDGET, "[ANE-COMPILE-BUDGET] %llu of %d compiles allowed for "
                     "this runtime are used. Programs with the same MIL, weight paths and weights are served from the cache "
                     "without a compile; change weights with a delta reload instead of compiling again",
                     (unsigned long long)mine, rt->cap);
    else
        g_compiles[di]++;
    pthread_mutex_unlock(&g_proc);
    return rc;
}

void rt_budget_release(anec_runtime *rt)
{
    int di = row(rt);
    pthread_mutex_lock(&g_proc);
    if (g_compiles[di])
        g_compiles[di]--;
    pthread_mutex_unlock(&g_proc);
}

void rt_budget_view(const anec_runtime *rt, struct anec_stats *out, uint64_t mine)
{
    uint64_t proc = anec_process_compiles(rt->drv->name);
    pthread_mutex_lock(&g_proc);
    int64_t budget = g_budget[row(rt)];
    pthread_mutex_unlock(&g_proc);
    if (budget <= 0)
        budget = INT64_MAX; /* unknown: only the runtime cap (if any) */
    int64_t left = budget - (int64_t)proc;
    if (rt->cap > 0) {
        int64_t cl = (int64_t)rt->cap - (int64_t)mine;
        left = cl < left ? cl : left;
        budget = rt->cap < budget ? rt->cap : budget;
    }
    out->compile_budget = budget;
    out->compile_budget_left = left < 0 ? 0 : left;
    out->process_compiles = proc;
}
