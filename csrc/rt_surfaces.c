/*
 * rt_surfaces.c - a program's I/O surfaces: created by the core with one
 * uniform size per direction (>= min_surface_bytes, aligned), CPU-locked only
 * while the CPU reads or writes them (ANE-SURFACE-LOCK; nested locks counted,
 * read-only for reads), kept locked while the caller holds their raw
 * pointers except around evaluations, and the copies between host tensors and
 * surfaces (fp32 <-> fp16 converted where the program is fp16), whole or rows
 * of one input (anec_write_input_slice).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fp16.h"
#include "rt_files.h"
#include "rt_internal.h"
#include "rt_util.h"

/* ---- surfaces: CPU-locked only while the CPU touches them (ANE-SURFACE-LOCK) ------------------------ */

int rt_surface_lock(anec_runtime *rt, anec_surface *s, int read_only)
{
    if (s->cpu_locks > 0) {
        if (s->lock_read_only && !read_only)
            return rt_fail(ANEC_ESTATE, "internal error: a write to a surface locked read-only");
        s->cpu_locks++;
        return ANEC_OK;
    }
    char err[512] = "";
    int rc = rt->drv->surface_lock(rt->ctx, s, read_only, err, sizeof err);
    if (rc != ANEC_OK)
        return rt_fail(rc, "%s", err);
    s->cpu_locks = 1;
    s->lock_read_only = read_only != 0;
    return ANEC_OK;
}

void rt_surface_unlock(anec_runtime *rt, anec_surface *s)
{
    if (s->cpu_locks > 0 && --s->cpu_locks == 0)
        rt->drv->surface_unlock(rt->ctx, s, s->lock_read_only);
}

int rt_transfer_surface(anec_program *p, const io_desc *d, const anec_io *io, anec_surface *s, int to_host,
                        const char *side)
{
    int rc = rt_surface_lock(p->rt, s, to_host);
    if (rc != ANEC_OK)
        return rc;
    rc = rt_transfer(d, io, s->base, to_host, side);
    rt_surface_unlock(p->rt, s);
    if (rc == ANEC_OK)
        rt_count_bytes(p, to_host ? 0 : d->bytes, to_host ? d->bytes : 0, 0);
    return rc;
}

/* ---- rows of an input (anec_write_input_slice) ------------------------------------------------ */

int rt_slice_check(const io_desc *d, const anec_slice *sl, const anec_io *io)
{
    if (!sl || !io || !io->data)
        return rt_fail(ANEC_EINVAL, "input '%s': a slice write needs a slice and data", d->name);
    size_t whole, part, in_size;
    const char *what = NULL;
    if (sl->outer == 0 || sl->extent == 0 || sl->inner == 0)
        what = "a view with an empty axis";
    else if (sl->outer > SIZE_MAX || sl->extent > SIZE_MAX || sl->inner > SIZE_MAX ||
             rt_mul_size((size_t)sl->outer, (size_t)sl->extent, &whole) || rt_mul_size(whole, (size_t)sl->inner, &whole) ||
             whole != d->numel)
        what = "a view whose element count is not the input's";
    if (what)
        return rt_fail(ANEC_EINVAL, "input '%s' has %zu elements; got %s ([%llu][%llu][%llu])", d->name, d->numel,
                       what, (unsigned long long)sl->outer, (unsigned long long)sl->extent,
                       (unsigned long long)sl->inner);
    if (sl->count == 0 || sl->start >= sl->extent || sl->count > sl->extent - sl->start)
        return rt_fail(ANEC_EINVAL, "input '%s': %llu rows from row %llu do not fit its %llu rows (1 or more rows, "
                       "start + count <= rows)", d->name, (unsigned long long)sl->count,
                       (unsigned long long)sl->start, (unsigned long long)sl->extent);
    if (io->dtype == d->dtype)
        in_size = d->bytes / d->numel;
    else if (d->dtype == ANEC_DTYPE_FP16 && io->dtype == ANEC_DTYPE_FP32)
        in_size = 4;
    else
        return rt_fail(ANEC_EINVAL, "input '%s' is %s; got %s rows (only fp32 -> fp16 is converted)", d->name,
                       rt_dtype_name(d->dtype), rt_dtype_name(io->dtype));
    /* outer * count * inner <= the element count: no overflow from here on */
    part = (size_t)sl->outer * (size_t)sl->count * (size_t)sl->inner;
    if (io->bytes / in_size != part || io->bytes % in_size)
        return rt_fail(ANEC_EINVAL, "input '%s': %llu rows of [%llu][..][%llu] are %zu elements of %s; got %zu bytes",
                       d->name, (unsigned long long)sl->count, (unsigned long long)sl->outer,
                       (unsigned long long)sl->inner, part, rt_dtype_name(io->dtype), io->bytes);
    return ANEC_OK;
}

int rt_slice_write(anec_program *p, const io_desc *d, const anec_slice *sl, const anec_io *io, anec_surface *s,
                   uint64_t *written)
{
    int rc = rt_slice_check(d, sl, io);
    if (rc != ANEC_OK || (rc = rt_surface_lock(p->rt, s, 0)) != ANEC_OK)
        return rc;
    size_t esz = d->bytes / d->numel, in_size = io->dtype == d->dtype ? esz : 4;
    size_t run = (size_t)sl->count * (size_t)sl->inner; /* elements per outer index */
    const uint8_t *src = io->data;
    for (size_t o = 0; o < (size_t)sl->outer; o++) {
        uint8_t *dst = s->base + ((o * (size_t)sl->extent + (size_t)sl->start) * (size_t)sl->inner) * esz;
        const uint8_t *from = src + o * run * in_size;
        if (in_size == esz)
            memcpy(dst, from, run * esz);
        else
            anec_cvt_f32_to_f16((const float *)(const void *)from, (uint16_t *)(void *)dst, run);
    }
    rt_surface_unlock(p->rt, s);
    uint64_t bytes = (uint64_t)sl->outer * run * esz;
    rt_count_bytes(p, bytes, 0, 0);
    if (written)
        *written = bytes;
    return ANEC_OK;
}

int rt_surface_copy(anec_runtime *rt, anec_surface *to, anec_surface *from, size_t bytes)
{
    int rc = rt_surface_lock(rt, from, 1);
    if (rc != ANEC_OK)
        return rc;
    if ((rc = rt_surface_lock(rt, to, 0)) == ANEC_OK) {
        memcpy(to->base, from->base, bytes);
        rt_surface_unlock(rt, to);
    }
    rt_surface_unlock(rt, from);
    return rc;
}

/* The caller takes the raw pointers (anec_program_input_surface): every
   surface of p stays locked for writing, except around evaluations. */
int rt_expose(anec_program *p)
{
    int rc = ANEC_OK;
    for (size_t k = 0; rc == ANEC_OK && k < p->n_in + p->n_out; k++)
        rc = rt_surface_lock(p->rt, k < p->n_in ? &p->in_s[k] : &p->out_s[k - p->n_in], 0);
    p->exposed = 1;
    return rc;
}

void rt_unexpose(anec_program *p)
{
    for (size_t k = 0; k < p->n_in + p->n_out; k++)
        rt_surface_unlock(p->rt, k < p->n_in ? &p->in_s[k] : &p->out_s[k - p->n_in]);
}

void rt_free_surfaces(anec_program *p)
{
    anec_runtime *rt = p->rt;
    for (size_t k = 0; p->in_s && p->out_s && k < p->n_in + p->n_out; k++) {
        anec_surface *s = k < p->n_in ? &p->in_s[k] : &p->out_s[k - p->n_in];
        while (s->cpu_locks)
            rt_surface_unlock(rt, s);
    }
    for (size_t i = 0; p->in_s && i < p->n_in; i++)
        if (p->in_s[i].base || p->in_s[i].handle)
            rt->drv->surface_free(rt->ctx, &p->in_s[i]);
    for (size_t i = 0; p->out_s && i < p->n_out; i++)
        if (p->out_s[i].base || p->out_s[i].handle)
            rt->drv->surface_free(rt->ctx, &p->out_s[i]);
    free(p->in_s);
    free(p->out_s);
    p->in_s = p->out_s = NULL;
}

int rt_make_surfaces(anec_program *p)
{
    anec_runtime *rt = p->rt;
    size_t mi = 0, mo = 0;
    for (size_t i = 0; i < p->n_in; i++)
        mi = p->in[i].bytes > mi ? p->in[i].bytes : mi;
    for (size_t i = 0; i < p->n_out; i++)
        mo = p->out[i].bytes > mo ? p->out[i].bytes : mo;
    size_t min = p->limits.min_surface_bytes;
    mi = mi < min ? min : mi;
    mo = mo < min ? min : mo;
    if (rt_round_up(mi, p->limits.surface_alignment, &mi) || rt_round_up(mo, p->limits.surface_alignment, &mo) ||
        mi == 0 || mo == 0)
        return rt_fail(ANEC_EINVAL, "surface size overflows (min_surface_bytes %zu, surface_alignment %zu)",
                       p->limits.min_surface_bytes, p->limits.surface_alignment);
    p->in_bytes = mi;
    p->out_bytes = mo;
    p->in_s = calloc(p->n_in + 1, sizeof *p->in_s);
    p->out_s = calloc(p->n_out + 1, sizeof *p->out_s);
    if (!p->in_s || !p->out_s)
        return rt_fail(ANEC_ENOMEM, "out of memory");
    char err[512];
    for (size_t i = 0; i < p->n_in; i++)
        if (rt->drv->surface_create(rt->ctx, mi, &p->in_s[i], err, sizeof err))
            return rt_fail(ANEC_ENOMEM, "cannot allocate input surface: %s", err);
    for (size_t i = 0; i < p->n_out; i++)
        if (rt->drv->surface_create(rt->ctx, mo, &p->out_s[i], err, sizeof err))
            return rt_fail(ANEC_ENOMEM, "cannot allocate output surface: %s", err);
    return ANEC_OK;
}

const char *rt_dtype_name(int dt)
{
    switch (dt) {
    case ANEC_DTYPE_FP16: return "fp16";
    case ANEC_DTYPE_FP32: return "fp32";
    case ANEC_DTYPE_UINT8: return "uint8";
    case ANEC_DTYPE_INT8: return "int8";
    case ANEC_DTYPE_INT32: return "int32";
    case ANEC_DTYPE_BOOL: return "bool";
    default: return "unknown";
    }
}

int rt_transfer(const io_desc *d, const anec_io *io, uint8_t *surface, int to_host, const char *side)
{
    if (io->dtype == d->dtype) {
        if (io->bytes != d->bytes)
            return rt_fail(ANEC_EINVAL, "%s '%s' is %s%s of %zu bytes; got %zu bytes", side, d->name,
                           rt_dtype_name(d->dtype), "", d->bytes, io->bytes);
        if (to_host)
            memcpy(io->data, surface, d->bytes);
        else
            memcpy(surface, io->data, d->bytes);
        return ANEC_OK;
    }
    if (d->dtype == ANEC_DTYPE_FP16 && io->dtype == ANEC_DTYPE_FP32) {
        if (io->bytes / 4 != d->numel || io->bytes % 4)
            return rt_fail(ANEC_EINVAL, "%s '%s' has %zu elements; got %zu bytes of fp32", side, d->name, d->numel,
                           io->bytes);
        if (to_host)
            anec_cvt_f16_to_f32((const uint16_t *)(const void *)surface, io->data, d->numel);
        else
            anec_cvt_f32_to_f16(io->data, (uint16_t *)(void *)surface, d->numel);
        return ANEC_OK;
    }
    return rt_fail(ANEC_EINVAL, "%s '%s' is %s; got %s (only fp32 <-> fp16 is converted)", side, d->name,
                   rt_dtype_name(d->dtype), rt_dtype_name(io->dtype));
}
