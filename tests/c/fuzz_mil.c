/* fuzz_mil.c - libFuzzer target: the MIL parser and the sim compiler on arbitrary bytes;
   programs that compile, have no weight files and are small are also executed. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim_plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const anec_limits LIMITS = {16, 1, 16384, 49152, 1, 0};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    int status;
    sim_plan *p = sim_plan_build((const char *)data, size, &LIMITS, &status, err, sizeof err);
    if (!p)
        return 0;
    size_t total = 0;
    for (size_t i = 0; i < p->n_vals; i++)
        total += p->vals[i].bytes;
    if (p->n_blobs == 0 && total <= (1u << 20) && p->n_inputs <= 16 && p->n_outputs <= 16) {
        sim_state *s = sim_state_new(p, 1);
        if (s && sim_state_load(s, NULL, 0, 0, err, sizeof err) == ANEC_OK) {
            uint8_t *in[16], *out[16];
            for (size_t i = 0; i < p->n_inputs; i++) {
                size_t n = p->vals[p->in_bind[i]].bytes;
                in[i] = calloc(n ? n : 1, 1);
                /* some non-zero fp16/fp32 bit patterns from the input itself */
                for (size_t k = 0; in[i] && k < n && k < size; k++)
                    in[i][k] = data[k];
            }
            for (size_t j = 0; j < p->n_outputs; j++)
                out[j] = malloc(p->vals[p->out_bind[j]].bytes ? p->vals[p->out_bind[j]].bytes : 1);
            int ok = 1;
            for (size_t i = 0; i < p->n_inputs; i++)
                ok &= in[i] != NULL;
            for (size_t j = 0; j < p->n_outputs; j++)
                ok &= out[j] != NULL;
            if (ok)
                sim_state_run(s, in, out, err, sizeof err);
            for (size_t i = 0; i < p->n_inputs; i++)
                free(in[i]);
            for (size_t j = 0; j < p->n_outputs; j++)
                free(out[j]);
        }
        sim_state_free(s);
    }
    sim_plan_release(p);
    return 0;
}
