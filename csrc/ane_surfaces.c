/*
 * ane_surfaces.c - the ane driver's IOSurfaces and the evaluation request
 * built on them.
 *
 * IOSurfaces are flat byte buffers (Width = bytes, Height = 1, BytesPerElement
 * = 1, BytesPerRow = bytes, AllocSize = bytes, PixelFormat = 0). The CPU
 * locks one only while it reads or writes it (ANE-SURFACE-LOCK: maderix and
 * Orion lock around their copies only): surface_lock/surface_unlock, with
 * kIOSurfaceLockReadOnly for reads; `base` is valid only under a lock, and
 * evaluate refuses a surface the core still holds.
 *
 * The request wraps each bound surface in an _ANEIOSurfaceObject; one is
 * built per bound surface set and load and reused while the same surfaces
 * are bound in the same order.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ane_driver.h"

/* ------------------------------------------------------------------------ */
/* surfaces                                                                  */

static int set_number(ane_ctx *c, ane_id dict, ane_id key, int64_t v)
{
    ane_id n = c->S->CFNumberCreate(NULL, ANE_CF_NUMBER_SINT64, &v);
    if (!n)
        return 0;
    c->S->CFDictionarySetValue(dict, key, n);
    c->S->CFRelease(n);
    return 1;
}

int ane_surface_create(void *vctx, size_t bytes, anec_surface *out, char *err,
                              size_t errlen)
{
    ane_ctx *c = vctx;
    const ane_syms *S = c->S;
    memset(out, 0, sizeof *out);
    if (bytes == 0 || bytes > (size_t)INT64_MAX) {
        ane_set_err(err, errlen, "ANE driver: invalid surface size %zu", bytes);
        return ANEC_EINVAL;
    }
    ane_id props = S->CFDictionaryCreateMutable(NULL, 6, S->kCFTypeDictionaryKeyCallBacks,
                                                S->kCFTypeDictionaryValueCallBacks);
    int ok = props != NULL;
    /* A flat byte buffer: the tensor shape lives in the MIL declaration. */
    ok = ok && set_number(c, props, S->kIOSurfaceWidth, (int64_t)bytes);
    ok = ok && set_number(c, props, S->kIOSurfaceHeight, 1);
    ok = ok && set_number(c, props, S->kIOSurfaceBytesPerElement, 1);
    ok = ok && set_number(c, props, S->kIOSurfaceBytesPerRow, (int64_t)bytes);
    ok = ok && set_number(c, props, S->kIOSurfaceAllocSize, (int64_t)bytes);
    ok = ok && set_number(c, props, S->kIOSurfacePixelFormat, 0);
    ane_id s = ok ? S->IOSurfaceCreate(props) : NULL;
    if (props)
        S->CFRelease(props);
    if (!s) {
        ane_set_err(err, errlen, "ANE driver: IOSurfaceCreate failed for %zu bytes", bytes);
        return ANEC_ENOMEM;
    }
    if (S->IOSurfaceGetAllocSize(s) < bytes || S->IOSurfaceLock(s, 0, NULL) != 0) {
        S->CFRelease(s);
        ane_set_err(err, errlen, "ANE driver: IOSurface of %zu bytes unusable", bytes);
        return ANEC_EDRIVER;
    }
    uint8_t *base = S->IOSurfaceGetBaseAddress(s);
    if (base)
        memset(base, 0, bytes); /* fresh memory is not promised to be zero */
    S->IOSurfaceUnlock(s, 0, NULL);
    if (!base) {
        S->CFRelease(s);
        ane_set_err(err, errlen, "ANE driver: IOSurface has no base address");
        return ANEC_EDRIVER;
    }
    out->handle = s;
    out->bytes = bytes;
    return ANEC_OK;
}

void ane_surface_free(void *vctx, anec_surface *s)
{
    ane_ctx *c = vctx;
    if (!s || !s->handle)
        return;
    c->S->CFRelease(s->handle);
    memset(s, 0, sizeof *s);
}

/* kIOSurfaceLockReadOnly: the CPU only reads while it holds the lock. */
#define ANE_LOCK_READ_ONLY 1u

int ane_surface_lock(void *vctx, anec_surface *s, int read_only, char *err, size_t errlen)
{
    ane_ctx *c = vctx;
    if (!s || !s->handle) {
        ane_set_err(err, errlen, "ANE driver: lock of a surface that does not exist");
        return ANEC_EINVAL;
    }
    if (c->S->IOSurfaceLock(s->handle, read_only ? ANE_LOCK_READ_ONLY : 0u, NULL) != 0) {
        ane_set_err(err, errlen, "ANE driver: IOSurfaceLock failed");
        return ANEC_EDRIVER;
    }
    s->base = c->S->IOSurfaceGetBaseAddress(s->handle);
    if (!s->base) {
        c->S->IOSurfaceUnlock(s->handle, read_only ? ANE_LOCK_READ_ONLY : 0u, NULL);
        ane_set_err(err, errlen, "ANE driver: IOSurface has no base address");
        return ANEC_EDRIVER;
    }
    return ANEC_OK;
}

void ane_surface_unlock(void *vctx, anec_surface *s, int read_only)
{
    ane_ctx *c = vctx;
    if (!s || !s->handle)
        return;
    c->S->IOSurfaceUnlock(s->handle, read_only ? ANE_LOCK_READ_ONLY : 0u, NULL);
    s->base = NULL;
}


void ane_drop_request(ane_ctx *c, ane_prog *p)
{
    const ane_syms *S = c->S;
    if (p->request)
        S->CFRelease(p->request);
    for (int i = 0; i < 4; i++)
        if (p->arrays[i])
            S->CFRelease(p->arrays[i]);
    p->request = NULL;
    memset(p->arrays, 0, sizeof p->arrays);
    for (size_t i = 0; p->bound && i < p->n_in + p->n_out; i++)
        if (p->bound[i])
            S->CFRelease(p->bound[i]);
    free(p->bound);
    p->bound = NULL;
    p->n_in = p->n_out = 0;
}

/* +1 NSArray of @0..@(n-1). */
static ane_id index_array(ane_ctx *c, size_t n)
{
    const ane_syms *S = c->S;
    ane_id *nums = calloc(n, sizeof *nums);
    ane_id arr = NULL;
    size_t made = 0;
    if (nums) {
        for (; made < n; made++) {
            int64_t v = (int64_t)made;
            if (!(nums[made] = S->CFNumberCreate(NULL, ANE_CF_NUMBER_SINT64, &v)))
                break;
        }
        if (made == n)
            arr = S->CFArrayCreate(NULL, (const void **)nums, (ane_cfindex)n,
                                   S->kCFTypeArrayCallBacks);
        for (size_t i = 0; i < made; i++)
            S->CFRelease(nums[i]);
    }
    free(nums);
    return arr;
}

/* +1 NSArray of _ANEIOSurfaceObject wrapping each surface. */
static ane_id surface_array(ane_ctx *c, anec_surface *const *s, size_t n)
{
    const ane_syms *S = c->S;
    ane_id *objs = calloc(n, sizeof *objs);
    ane_id arr = NULL;
    size_t i = 0;
    if (objs) {
        for (; i < n; i++)
            if (!(objs[i] = S->msg1(c->cls[C_IOSOBJ], c->sel.object_with_surface,
                                    s[i]->handle)))
                break;
        if (i == n)
            arr = S->CFArrayCreate(NULL, (const void **)objs, (ane_cfindex)n,
                                   S->kCFTypeArrayCallBacks);
    }
    free(objs);
    return arr;
}

/* Reuse the request when the same surfaces are bound in the same order,
   else build it (once) for this set. */
int ane_request_for(ane_ctx *c, ane_prog *p, anec_surface *const *in, size_t n_in,
                       anec_surface *const *out, size_t n_out, char *err, size_t errlen)
{
    const ane_syms *S = c->S;
    if (p->request && p->n_in == n_in && p->n_out == n_out) {
        size_t i = 0;
        for (; i < n_in && p->bound[i] == in[i]->handle; i++)
            ;
        size_t j = 0;
        for (; i == n_in && j < n_out && p->bound[n_in + j] == out[j]->handle; j++)
            ;
        if (i == n_in && j == n_out)
            return ANEC_OK;
    }
    ane_drop_request(c, p);
    p->bound = calloc(n_in + n_out, sizeof *p->bound);
    if (!p->bound) {
        ane_set_err(err, errlen, "out of memory");
        return ANEC_ENOMEM;
    }
    /* Retained while the request exists: a freed surface's address cannot
       come back as a new surface and be mistaken for this set. */
    p->n_in = n_in;
    p->n_out = n_out;
    for (size_t i = 0; i < n_in; i++)
        p->bound[i] = (void *)S->CFRetain(in[i]->handle);
    for (size_t j = 0; j < n_out; j++)
        p->bound[n_in + j] = (void *)S->CFRetain(out[j]->handle);
    p->arrays[0] = surface_array(c, in, n_in);
    p->arrays[1] = index_array(c, n_in);
    p->arrays[2] = surface_array(c, out, n_out);
    p->arrays[3] = index_array(c, n_out);
    ane_id req = NULL;
    if (p->arrays[0] && p->arrays[1] && p->arrays[2] && p->arrays[3])
        req = S->msg7(c->cls[C_REQUEST], c->sel.request, p->arrays[0], p->arrays[1],
                      p->arrays[2], p->arrays[3], NULL, NULL, c->zero);
    if (!req) {
        ane_drop_request(c, p);
        ane_set_err(err, errlen, "ANE driver: could not build the _ANERequest for %zu inputs and "
                             "%zu outputs",
                n_in, n_out);
        return ANEC_EDRIVER;
    }
    p->request = (ane_id)S->CFRetain(req);
    return ANEC_OK;
}
