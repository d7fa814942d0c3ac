/*
 * rt_drivers.c - the driver table: the drivers this build has, in the order
 * the "auto" driver tries them (the device first; the sim last, which is
 * always available), and what the core asks of a driver through it: lookup
 * by name with the message for an unknown or absent one, its row (the index
 * of its process-wide compile count, rt_budget.c), whether it takes the sim's
 * device model from $ANEC_SIM_DEVICE, and whether its process-wide state may
 * be reset (the sim's, and the protocol tests' fake of the device). The only
 * file of the runtime core that names a driver.
 */
#include <stdio.h>
#include <string.h>

#include "rt_internal.h"

typedef struct rt_driver_row {
    const anec_driver *drv;
    int env_device;              /* takes $ANEC_SIM_DEVICE when no device option is given */
    void (*reset_process)(void); /* forgets its per-process state (NULL: the process's own) */
} rt_driver_row;

#ifdef ANEC_ANE_TESTING
/* the protocol tests' ane is a fake: its count may be reset too */
static void fake_device_reset(void) {}
#define ANE_RESET fake_device_reset
#else
#define ANE_RESET NULL
#endif

static const rt_driver_row k_drivers[] = {
#ifndef ANEC_NO_ANE_DRIVER
    {&anec_driver_ane, 0, ANE_RESET},
#endif
    {&anec_driver_sim, 1, anec_sim_reset_process},
};
#define N_DRIVERS (sizeof k_drivers / sizeof k_drivers[0])
_Static_assert(N_DRIVERS <= RT_MAX_DRIVERS, "RT_MAX_DRIVERS is too small for the driver table");

int rt_driver_index(const char *name)
{
    for (size_t i = 0; name && i < N_DRIVERS; i++)
        if (strcmp(k_drivers[i].drv->name, name) == 0)
            return (int)i;
    return -1;
}

const anec_driver *rt_driver_find(const char *name, int *code, char *why, size_t whylen)
{
    int i = rt_driver_index(name);
    if (i >= 0)
        return k_drivers[i].drv;
    *code = strcmp(name, "ane") == 0 ? ANEC_EUNAVAIL : ANEC_EINVAL;
    if (why && whylen) {
        if (*code == ANEC_EUNAVAIL)
            snprintf(why, whylen, "this build has no ane driver");
        else
            snprintf(why, whylen, "unknown driver '%s' (sim, ane, auto)", name);
    }
    return NULL;
}

const anec_driver *rt_driver_auto(void)
{
    char why[512];
    for (size_t i = 0; i + 1 < N_DRIVERS; i++)
        if (k_drivers[i].drv->available(why, sizeof why) == ANEC_OK)
            return k_drivers[i].drv;
    return k_drivers[N_DRIVERS - 1].drv;
}

int rt_driver_env_device(const anec_driver *d)
{
    int i = rt_driver_index(d->name);
    return i >= 0 && k_drivers[i].env_device;
}

int rt_driver_reset_process(int index)
{
    if (index < 0 || !k_drivers[index].reset_process)
        return rt_fail(ANEC_EINVAL, "only the sim's compile count can be reset (the device counts per process)");
    k_drivers[index].reset_process();
    return ANEC_OK;
}

int anec_driver_available(const char *name, char *why, size_t whylen)
{
    if (!name) {
        if (why && whylen)
            snprintf(why, whylen, "no driver name");
        return 0;
    }
    if (strcmp(name, "auto") == 0)
        return 1;
    int code;
    const anec_driver *d = rt_driver_find(name, &code, why, whylen);
    if (!d)
        return 0;
    char tmp[512];
    tmp[0] = 0;
    int ok = d->available(tmp, sizeof tmp) == ANEC_OK;
    if (why && whylen)
        snprintf(why, whylen, "%s", tmp);
    return ok ? 1 : 0;
}
