/* fuzz_mil.c - libFuzzer target: the MIL parser and the sim compiler on arbitrary bytes. */
#include <stddef.h>
#include <stdint.h>

#include "sim_plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    int status;
    sim_plan *p = sim_plan_build((const char *)data, size, NULL, &status, err, sizeof err);
    sim_plan_release(p);
    return 0;
}
