/*
 * sim_reduce.c - the sim's reductions (reduce_sum, reduce_mean, reduce_max
 * over any set of axes): the input walked once in memory order into the
 * output it reduces to, eight lanes at a time where the reduced run is
 * contiguous, in fp32, then rounded to the output's type like every result.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim_exec.h"
#include "sim_kernels.h"
#include "sim_plan.h"

/* ro[i] += x[i], eight at a time where it can (vector instructions, the same sums) */
static void add_into(float *restrict ro, const float *restrict x, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            ro[i + j] += x[i + j];
    for (; i < n; i++)
        ro[i] += x[i];
}

/* ro[i] = max(ro[i], x[i]), a NaN in x winning */
static void max_into(float *restrict ro, const float *restrict x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (x[i] > ro[i] || x[i] != x[i])
            ro[i] = x[i];
}

/* Any reduction: the input walked in order, each element added (or compared) into its
   result (ostr: the result's stride along each input dim, 0 where reduced). */
static void reduce_walk(const sim_value *xv, const int64_t *ostr, const float *a, float *r, int is_max)
{
    int rank = xv->rank;
    int64_t idx[ANEC_MAX_RANK] = {0};
    int64_t off = 0;
    for (size_t i = 0; i < xv->numel; i++) {
        if (is_max) {
            if (a[i] > r[off] || a[i] != a[i])
                r[off] = a[i];
        } else {
            r[off] += a[i];
        }
        for (int d = rank - 1; d >= 0; d--) {
            off += ostr[d];
            if (++idx[d] < xv->shape[d])
                break;
            off -= ostr[d] * xv->shape[d];
            idx[d] = 0;
        }
    }
}

int sim_run_reduce(sim_state *s, const sim_op *o, int how)
{
    const sim_value *xv = &s->plan->vals[o->x], *ov = &s->plan->vals[o->outs[0]];
    const float *a = sim_fview(s, 0, o->x);
    float *r = sim_fout(s, o->outs[0]);
    if (!a || !r)
        return ANEC_ENOMEM;
    int rank = xv->rank;
    /* output strides per input dim (0 for reduced dims) */
    int64_t kept_shape[ANEC_MAX_RANK], kst[ANEC_MAX_RANK], ostr[ANEC_MAX_RANK];
    int nk = 0;
    size_t count = 1;
    for (int d = 0; d < rank; d++) {
        if (o->axes_mask & (1 << d))
            count *= (size_t)xv->shape[d];
        else
            kept_shape[nk++] = xv->shape[d];
    }
    sk_strides(nk, kept_shape, kst);
    for (int d = 0, k = 0; d < rank; d++)
        ostr[d] = (o->axes_mask & (1 << d)) ? 0 : kst[k++];
    float init = how == REDUCE_MAX ? -INFINITY : 0.0f;
    for (size_t i = 0; i < ov->numel; i++)
        r[i] = init;
    int is_max = how == REDUCE_MAX;
    /* reduced dims next to each other (a norm's channels, a softmax's last axis): the input is
       [outer, count, inner], and each result takes its count elements in the walk's order */
    int lo = 0, hi = rank - 1;
    while (lo < rank && !(o->axes_mask & (1 << lo)))
        lo++;
    while (hi > lo && !(o->axes_mask & (1 << hi)))
        hi--;
    int run = lo < rank; /* some axis is reduced, and so is every axis between the first and last */
    for (int d = lo + 1; d < hi && run; d++)
        run = (o->axes_mask >> d) & 1;
    if (!run) {
        reduce_walk(xv, ostr, a, r, is_max);
    } else {
        size_t outer = 1, inner = 1;
        for (int d = 0; d < lo; d++)
            outer *= (size_t)xv->shape[d];
        for (int d = hi + 1; d < rank; d++)
            inner *= (size_t)xv->shape[d];
        const float *x = a;
        for (size_t p = 0; p < outer; p++) {
            float *ro = r + p * inner;
            for (size_t c = 0; c < count; c++, x += inner) {
                if (is_max)
                    max_into(ro, x, inner);
                else
                    add_into(ro, x, inner);
            }
        }
    }
    if (how == REDUCE_MEAN) {
        float inv = 1.0f / (float)count;
        for (size_t i = 0; i < ov->numel; i++)
            r[i] *= inv;
    }
    sim_commit(s, o->outs[0], r);
    return ANEC_OK;
}
