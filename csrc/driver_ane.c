/*
 * driver_ane.c - the Apple Neural Engine driver (macOS on Apple silicon):
 * its entry points (the anec_driver table at the end) and the programs they
 * make. The symbols it calls are ane_symbols.c, the Foundation calls
 * ane_foundation.c, the shared hexId directories ane_hexdirs.c, the
 * IOSurfaces and the evaluation request ane_surfaces.c (ane_driver.h).
 *
 * Plain C with no Objective-C syntax and no Apple headers: every Apple symbol
 * is resolved at run time into one ane_syms table (ane_syms.h), so this file
 * builds on any platform. Where AppleNeuralEngine.framework cannot be opened,
 * available() says why and the runtime's "auto" picks the sim.
 *
 * Call protocol (the private API; QoS 21 and `options:@{}` everywhere):
 *
 *   compile  desc  = +[_ANEInMemoryModelDescriptor modelWithMILText:<NSData>
 *                       weights:<NSDictionary, @{} when no blobs> optionsPlist:nil]
 *            model = +[_ANEInMemoryModel inMemoryModelWithDescriptor:desc]
 *            dir   = NSTemporaryDirectory()/[model hexStringIdentifier]
 *                    pre-populated with model.mil and weights/<file>
 *            [model compileWithQoS:21 options:@{} error:&e]
 *            The compiler leaves the compiled form, net.plist + data, in dir
 *            (ANE-BAKED-WEIGHTS; ANE-DATA-IS-BLOBFILE for one tensor). The
 *            program keeps running THIS model (never an uncompiled clone of it).
 *   load     [model loadWithQoS:21 options:@{} error:&e], after making dir hold
 *            this program's compiled form (shared hexId directories: ane_hexdirs.c).
 *   unload   [model unloadWithQoS:21 error:&e]; the request is dropped with it.
 *   evaluate on unlocked surfaces: +[_ANEIOSurfaceObject
 *            objectWithIOSurface:] per surface and ONE +[_ANERequest
 *            requestWithInputs:inputIndices:outputs:outputIndices:
 *            weightsBuffer:nil perfStats:nil procedureIndex:@0] per bound
 *            surface set and load, reused by every [model evaluateWithQoS:21
 *            options:@{} request:req error:&e].
 *   patch    the new BLOBFILE is written as the compiled `data` (byte-identical
 *            to the compiler's for a one-tensor program) and as the weight
 *            file of an unloaded program, which is then loaded: no compile.
 *            On the program's own model this is the core's data-patch reload
 *            (ANE-SAME-OBJECT-PATCH, a hypothesis the selftest settles); on a
 *            clone before its first load, the new-object reload.
 *   clone    (a cache hit: same MIL and weight paths; a new-object reload) a
 *            new descriptor + model with the weights of its program
 *            directory, never compiled; its compiled form is a copy of the
 *            donor's net.plist + data (it computes with the donor's weights
 *            until patched; the core patches or compiles). Patched and loaded
 *            it is the path Orion's delta test shows (ANE-NEW-OBJECT-LOAD).
 *   release  unload if loaded, CFRelease request/arrays/model/descriptor, remove
 *            `dir` when no other live program uses it
 *
 * The weights dictionary maps each MIL path ("@model_path/weights/w.bin") to
 * {offset: @0, data: <NSData of the whole BLOBFILE>}; the MIL offset (64)
 * points at the blob's metadata record, the dictionary offset stays 0.
 *
 * Objects returned by +factory methods are autoreleased; the driver CFRetains
 * what it keeps and runs every entry point inside an autorelease pool.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ane_driver.h"

static int ane_open(void **out, char *err, size_t errlen)
{
    *out = NULL;
    const ane_syms *S = ane_get_syms(err, errlen);
    if (!S)
        return ANEC_EUNAVAIL;
    ane_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        ane_set_err(err, errlen, "out of memory");
        return ANEC_ENOMEM;
    }
    c->S = S;
    int rc = ane_find_classes(S, c->cls, err, errlen);
    if (rc != ANEC_OK) {
        free(c);
        return rc;
    }
    c->sel.model_with_mil = SEL("modelWithMILText:weights:optionsPlist:");
    c->sel.in_memory_model = SEL("inMemoryModelWithDescriptor:");
    c->sel.hex_id = SEL("hexStringIdentifier");
    c->sel.compile = SEL("compileWithQoS:options:error:");
    c->sel.load = SEL("loadWithQoS:options:error:");
    c->sel.unload = SEL("unloadWithQoS:error:");
    c->sel.evaluate = SEL("evaluateWithQoS:options:request:error:");
    c->sel.object_with_surface = SEL("objectWithIOSurface:");
    c->sel.request = SEL("requestWithInputs:inputIndices:outputs:outputIndices:"
                         "weightsBuffer:perfStats:procedureIndex:");
    c->sel.description = SEL("description");
    c->sel.utf8 = SEL("UTF8String");
    c->sel.default_manager = SEL("defaultManager");
    c->sel.mkdir = SEL("createDirectoryAtPath:withIntermediateDirectories:attributes:error:");
    c->sel.remove = SEL("removeItemAtPath:error:");
    c->sel.write = SEL("writeToFile:atomically:");
    c->sel.data_with_file = SEL("dataWithContentsOfFile:");

    int64_t zero = 0;
    c->empty = S->CFDictionaryCreateMutable(NULL, 0, S->kCFTypeDictionaryKeyCallBacks,
                                            S->kCFTypeDictionaryValueCallBacks);
    c->zero = S->CFNumberCreate(NULL, ANE_CF_NUMBER_SINT64, &zero);
    if (!c->empty || !c->zero) {
        if (c->empty)
            S->CFRelease(c->empty);
        if (c->zero)
            S->CFRelease(c->zero);
        free(c);
        ane_set_err(err, errlen, "out of memory");
        return ANEC_ENOMEM;
    }
    *out = c;
    return ANEC_OK;
}

static void ane_close(void *vctx)
{
    ane_ctx *c = vctx;
    if (!c)
        return;
    c->S->CFRelease(c->empty);
    c->S->CFRelease(c->zero);
    free(c);
}

/* "@model_path/weights/w.bin" -> "weights/w.bin"; NULL if not a safe path. */
static const char *relative_blob_path(const char *path)
{
    size_t np = strlen(ANE_MODEL_PATH_PREFIX);
    if (!path || strncmp(path, ANE_MODEL_PATH_PREFIX, np) != 0)
        return NULL;
    const char *rel = path + np;
    if (!*rel || rel[0] == '/' || rel[strlen(rel) - 1] == '/')
        return NULL;
    /* no ".." component */
    for (const char *q = rel; *q;) {
        const char *slash = strchr(q, '/');
        size_t len = slash ? (size_t)(slash - q) : strlen(q);
        if (len == 0 || (len == 2 && q[0] == '.' && q[1] == '.') || (len == 1 && q[0] == '.'))
            return NULL;
        q += len + (slash ? 1 : 0);
    }
    return rel;
}

static void prog_free(ane_ctx *c, ane_prog *p)
{
    const ane_syms *S = c->S;
    ane_drop_request(c, p);
    if (p->model)
        S->CFRelease(p->model);
    if (p->desc)
        S->CFRelease(p->desc);
    if (p->mil)
        S->CFRelease(p->mil);
    ane_dir_release(c, p->dir);
    for (size_t i = 0; i < p->n_rel; i++)
        free(p->rel[i]);
    free(p->rel);
    free(p->src);
    free(p);
}

/* +1 weights dictionary {path: {offset: @0, data: NSData}}; empty, never
   nil, when there are no blobs (a nil dictionary crashes the framework). */
static ane_id weights_dict(ane_ctx *c, const char *const *paths, const ane_id *datas, size_t n,
                           char *err, size_t errlen)
{
    const ane_syms *S = c->S;
    ane_id dict = S->CFDictionaryCreateMutable(NULL, (ane_cfindex)n,
                                               S->kCFTypeDictionaryKeyCallBacks,
                                               S->kCFTypeDictionaryValueCallBacks);
    ane_id k_offset = ane_nsstr(c, "offset"), k_data = ane_nsstr(c, "data");
    int64_t zero = 0;
    ane_id off = S->CFNumberCreate(NULL, ANE_CF_NUMBER_SINT64, &zero);
    int ok = dict && k_offset && k_data && off;
    for (size_t i = 0; ok && i < n; i++) {
        ane_id key = ane_nsstr(c, paths[i]);
        ane_id entry = S->CFDictionaryCreateMutable(NULL, 2, S->kCFTypeDictionaryKeyCallBacks,
                                                    S->kCFTypeDictionaryValueCallBacks);
        ok = key && entry;
        if (ok) {
            S->CFDictionarySetValue(entry, k_offset, off);
            S->CFDictionarySetValue(entry, k_data, datas[i]);
            S->CFDictionarySetValue(dict, key, entry);
        }
        if (key)
            S->CFRelease(key);
        if (entry)
            S->CFRelease(entry);
    }
    if (k_offset)
        S->CFRelease(k_offset);
    if (k_data)
        S->CFRelease(k_data);
    if (off)
        S->CFRelease(off);
    if (!ok) {
        if (dict)
            S->CFRelease(dict);
        ane_set_err(err, errlen, "out of memory building the weights dictionary");
        return NULL;
    }
    return dict;
}

/* Descriptor + model for (p->mil, weights); acquires the hexId directory. */
static int make_model(ane_ctx *c, ane_prog *p, const char *const *paths, const ane_id *datas,
                      size_t n, char *err, size_t errlen)
{
    const ane_syms *S = c->S;
    ane_id weights = weights_dict(c, paths, datas, n, err, errlen);
    if (!weights)
        return ANEC_ENOMEM;
    ane_id desc = S->msg3(c->cls[C_DESC], c->sel.model_with_mil, p->mil, weights, NULL);
    S->CFRelease(weights);
    if (!desc) {
        ane_set_err(err, errlen,
                "ANE compile failed: _ANEInMemoryModelDescriptor rejected the MIL text and "
                "weights (modelWithMILText:weights:optionsPlist: returned nil)");
        return ANEC_ECOMPILE;
    }
    p->desc = (ane_id)S->CFRetain(desc);
    ane_id model = S->msg1(c->cls[C_MODEL], c->sel.in_memory_model, p->desc);
    if (!model) {
        ane_set_err(err, errlen, "ANE compile failed: inMemoryModelWithDescriptor: returned nil");
        return ANEC_ECOMPILE;
    }
    p->model = (ane_id)S->CFRetain(model);

    const char *hex = ane_cstr(c, S->msg0(p->model, c->sel.hex_id));
    if (!hex || !*hex) {
        ane_set_err(err, errlen, "ANE driver: the model has no hexStringIdentifier");
        return ANEC_EDRIVER;
    }
    const char *tmp = ane_cstr(c, S->NSTemporaryDirectory());
    if (!tmp || !*tmp) {
        ane_set_err(err, errlen, "ANE driver: NSTemporaryDirectory() is empty");
        return ANEC_EDRIVER;
    }
    size_t tl = strlen(tmp);
    char *path = ane_str_printf("%s%s%s", tmp, tmp[tl - 1] == '/' ? "" : "/", hex);
    if (!path || !(p->dir = ane_dir_acquire(path))) {
        free(path);
        ane_set_err(err, errlen, "out of memory");
        return ANEC_ENOMEM;
    }
    free(path);
    return ANEC_OK;
}

/* Record the program directory and the blobs' relative paths (validated). */
static int keep_paths(ane_prog *p, const anec_compile_args *a, char *err, size_t errlen)
{
    if (!a->dir || !*a->dir) {
        ane_set_err(err, errlen, "ANE driver: compile needs the program directory");
        return ANEC_EINVAL;
    }
    if (a->n_blobs && !a->blobs) {
        ane_set_err(err, errlen, "ANE driver: %zu blobs but no blob array", a->n_blobs);
        return ANEC_EINVAL;
    }
    for (size_t i = 0; i < a->n_blobs; i++) {
        if (!relative_blob_path(a->blobs[i].path)) {
            ane_set_err(err, errlen,
                    "ANE driver: weight path '%s' must be '@model_path/<relative path>' "
                    "without '..'",
                    a->blobs[i].path ? a->blobs[i].path : "(null)");
            return ANEC_EINVAL;
        }
        if (a->blobs[i].len && !a->blobs[i].data) {
            ane_set_err(err, errlen, "ANE driver: weight '%s' has no data", a->blobs[i].path);
            return ANEC_EINVAL;
        }
    }
    p->src = ane_str_dup(a->dir);
    p->rel = calloc(a->n_blobs ? a->n_blobs : 1, sizeof *p->rel);
    if (!p->src || !p->rel) {
        ane_set_err(err, errlen, "out of memory");
        return ANEC_ENOMEM;
    }
    for (size_t i = 0; i < a->n_blobs; i++) {
        if (!(p->rel[i] = ane_str_dup(relative_blob_path(a->blobs[i].path)))) {
            ane_set_err(err, errlen, "out of memory");
            return ANEC_ENOMEM;
        }
        p->n_rel++;
    }
    return ANEC_OK;
}

/* Write model.mil and weights/... into the hexId directory (caller holds
   dir->use); datas[i] holds blob i. */
static int populate_dir(ane_ctx *c, ane_prog *p, const ane_id *datas, char *err,
                        size_t errlen)
{
    const char *dir = p->dir->path;
    char *wdir = ane_str_printf("%s/weights", dir);
    char *mil = ane_str_printf("%s/model.mil", dir);
    int rc = (wdir && mil) ? ANEC_OK : ANEC_ENOMEM;
    if (rc == ANEC_OK)
        rc = ane_make_dirs(c, wdir, err, errlen);
    if (rc == ANEC_OK)
        rc = ane_write_data(c, p->mil, mil, err, errlen);
    for (size_t i = 0; rc == ANEC_OK && i < p->n_rel; i++) {
        char *file = ane_str_printf("%s/%s", dir, p->rel[i]);
        if (!file) {
            rc = ANEC_ENOMEM;
            break;
        }
        /* A blob outside weights/ (or in a subdirectory) needs its parent. */
        char *slash = strrchr(file, '/');
        *slash = '\0';
        if (strcmp(file, dir) != 0 && strcmp(file, wdir) != 0)
            rc = ane_make_dirs(c, file, err, errlen);
        *slash = '/';
        if (rc == ANEC_OK)
            rc = ane_write_data(c, datas[i], file, err, errlen);
        free(file);
    }
    free(wdir);
    free(mil);
    if (rc == ANEC_ENOMEM)
        ane_set_err(err, errlen, "out of memory");
    return rc;
}


static int ane_compile(void *vctx, const anec_compile_args *a, void **out, char *err,
                       size_t errlen)
{
    ane_ctx *c = vctx;
    const ane_syms *S = c->S;
    *out = NULL;
    if (!a || (!a->mil && a->mil_len)) {
        ane_set_err(err, errlen, "ANE driver: compile without MIL text");
        return ANEC_EINVAL;
    }
    ane_prog *p = calloc(1, sizeof *p);
    if (!p) {
        ane_set_err(err, errlen, "out of memory");
        return ANEC_ENOMEM;
    }
    int rc = keep_paths(p, a, err, errlen);
    if (rc != ANEC_OK) {
        prog_free(c, p);
        return rc;
    }
    size_t n = a->n_blobs;
    const char **paths = calloc(n ? n : 1, sizeof *paths);
    ane_id *datas = calloc(n ? n : 1, sizeof *datas);
    void *pool = S->objc_autoreleasePoolPush();
    /* The MIL goes in as NSData (an NSString is not accepted). */
    p->mil = S->CFDataCreate(NULL, (const uint8_t *)a->mil, (ane_cfindex)a->mil_len);
    if (!p->mil || !paths || !datas)
        rc = ANEC_ENOMEM;
    for (size_t i = 0; rc == ANEC_OK && i < n; i++) {
        paths[i] = a->blobs[i].path;
        if (!(datas[i] = S->CFDataCreate(NULL, a->blobs[i].data, (ane_cfindex)a->blobs[i].len)))
            rc = ANEC_ENOMEM;
    }
    if (rc == ANEC_ENOMEM)
        ane_set_err(err, errlen, "out of memory");
    if (rc == ANEC_OK)
        rc = make_model(c, p, paths, datas, n, err, errlen);
    if (rc == ANEC_OK) {
        ane_dir *d = p->dir;
        pthread_mutex_lock(&d->use);
        /* The compiler leaves its output in this directory: a previous owner
           (same hexId) keeps a copy of its compiled form first. */
        if (d->owner && !d->owner->own_copy) {
            rc = ane_copy_compiled(c, d->path, d->owner->src, err, errlen);
            if (rc == ANEC_OK)
                d->owner->own_copy = 1;
        }
        d->owner = NULL;
        /* The framework compiles from this directory: it must hold model.mil
           and every weight file before compileWithQoS. */
        if (rc == ANEC_OK)
            rc = populate_dir(c, p, datas, err, errlen);
        if (rc == ANEC_OK) {
            ane_id e = NULL;
            if (!S->msg_qos_opts_err(p->model, c->sel.compile, ANE_QOS, c->empty, &e)) {
                char why[1024];
                ane_error_text(c, e, why, sizeof why);
                ane_set_err(err, errlen,
                        "ANE compile failed (compileWithQoS:options:error:): %s "
                        "[program in %s; `anec check` lists constraint violations]",
                        why, d->path);
                rc = ANEC_ECOMPILE;
            } else {
                d->owner = p; /* the compiled form of THIS model is in the directory */
            }
        }
        pthread_mutex_unlock(&d->use);
    }
    for (size_t i = 0; datas && i < n; i++)
        if (datas[i])
            S->CFRelease(datas[i]);
    free(datas);
    free(paths);
    if (rc != ANEC_OK)
        prog_free(c, p);
    else
        *out = p;
    S->objc_autoreleasePoolPop(pool);
    return rc;
}

static int ane_load(void *vctx, void *vprog, char *err, size_t errlen)
{
    ane_ctx *c = vctx;
    ane_prog *p = vprog;
    const ane_syms *S = c->S;
    if (!p) {
        ane_set_err(err, errlen, "ANE driver: load of a NULL program");
        return ANEC_EINVAL;
    }
    if (p->loaded)
        return ANEC_OK;
    void *pool = S->objc_autoreleasePoolPush();
    pthread_mutex_lock(&p->dir->use);
    /* The device loads the compiled form in the hexId directory: make it this
       program's (another program with the same hexId may have used it). */
    int rc = ane_claim_dir(c, p, err, errlen);
    if (rc == ANEC_OK) {
        ane_id e = NULL;
        if (!S->msg_qos_opts_err(p->model, c->sel.load, ANE_QOS, c->empty, &e)) {
            char why[1024];
            ane_error_text(c, e, why, sizeof why);
            ane_set_err(err, errlen, "ANE load failed (loadWithQoS:options:error:): %s%s", why,
                    p->cloned ? " [this program reuses the network compiled for another program "
                                "with the same MIL and weight paths; `python -m anec.selftest` "
                                "checks that path on this Mac]"
                              : "");
            rc = ANEC_ELOAD;
        } else {
            p->loaded = 1;
        }
    }
    pthread_mutex_unlock(&p->dir->use);
    S->objc_autoreleasePoolPop(pool);
    return rc;
}

static int unload_prog(ane_ctx *c, ane_prog *p, char *err, size_t errlen)
{
    const ane_syms *S = c->S;
    ane_id e = NULL;
    int rc = ANEC_OK;
    if (!S->msg_qos_err(p->model, c->sel.unload, ANE_QOS, &e)) {
        char why[1024];
        ane_error_text(c, e, why, sizeof why);
        ane_set_err(err, errlen, "ANE unload failed (unloadWithQoS:error:): %s", why);
        rc = ANEC_EDRIVER;
    }
    p->loaded = 0;
    /* a request belongs to one load of the model: build a new one after the next load */
    ane_drop_request(c, p);
    return rc;
}

static int ane_unload(void *vctx, void *vprog, char *err, size_t errlen)
{
    ane_ctx *c = vctx;
    ane_prog *p = vprog;
    if (!p) {
        ane_set_err(err, errlen, "ANE driver: unload of a NULL program");
        return ANEC_EINVAL;
    }
    if (!p->loaded)
        return ANEC_OK;
    void *pool = c->S->objc_autoreleasePoolPush();
    int rc = unload_prog(c, p, err, errlen);
    c->S->objc_autoreleasePoolPop(pool);
    return rc;
}

static void ane_release(void *vctx, void *vprog)
{
    ane_ctx *c = vctx;
    ane_prog *p = vprog;
    if (!p)
        return;
    void *pool = c->S->objc_autoreleasePoolPush();
    if (p->loaded)
        (void)unload_prog(c, p, NULL, 0);
    if (p->dir) {
        pthread_mutex_lock(&p->dir->use);
        if (p->dir->owner == p)
            p->dir->owner = NULL;
        pthread_mutex_unlock(&p->dir->use);
    }
    prog_free(c, p);
    c->S->objc_autoreleasePoolPop(pool);
}

/* A program sharing `donor`'s compiled network (same MIL, same weight paths)
   for the program directory `dir`: a new descriptor + model with the weights
   in `dir`, never compiled. Its compiled form is the one already in `dir`
   (a program with the same weights left it there), else a copy of the
   donor's: net.plist AND data, so it computes with the donor's weights until
   patch_data. Whatever hexStringIdentifier the framework gives the new model
   (the same as the donor's, or another when the identifier covers the weight
   values), load puts this compiled form into that directory first. */
static int ane_clone(void *vctx, void *vdonor, const char *dir, void **out, char *err,
                     size_t errlen)
{
    ane_ctx *c = vctx;
    ane_prog *donor = vdonor;
    const ane_syms *S = c->S;
    *out = NULL;
    if (!donor || !dir || !*dir) {
        ane_set_err(err, errlen, "ANE driver: clone needs a program and a directory");
        return ANEC_EINVAL;
    }
    size_t n = donor->n_rel;
    ane_prog *p = calloc(1, sizeof *p);
    char **paths = calloc(n ? n : 1, sizeof *paths);
    ane_id *datas = calloc(n ? n : 1, sizeof *datas);
    if (p) {
        p->src = ane_str_dup(dir);
        p->rel = calloc(n ? n : 1, sizeof *p->rel);
    }
    if (!p || !paths || !datas || !p->src || !p->rel) {
        if (p)
            prog_free(c, p);
        free(paths);
        free(datas);
        ane_set_err(err, errlen, "out of memory");
        return ANEC_ENOMEM;
    }
    void *pool = S->objc_autoreleasePoolPush();
    int rc = ANEC_OK;
    p->mil = (ane_id)S->CFRetain(donor->mil);
    p->cloned = 1;
    /* The descriptor gets the new program's own weight bytes. */
    for (size_t i = 0; rc == ANEC_OK && i < n; i++) {
        char *file = ane_str_printf("%s/%s", dir, donor->rel[i]);
        paths[i] = ane_str_printf(ANE_MODEL_PATH_PREFIX "%s", donor->rel[i]);
        if ((p->rel[i] = ane_str_dup(donor->rel[i])))
            p->n_rel++;
        if (!file || !paths[i] || !p->rel[i]) {
            ane_set_err(err, errlen, "out of memory");
            rc = ANEC_ENOMEM;
        } else if (!(datas[i] = ane_read_data(c, file))) {
            ane_set_err(err, errlen, "ANE driver: cannot read %s", file);
            rc = ANEC_EIO;
        }
        free(file);
    }
    if (rc == ANEC_OK)
        rc = make_model(c, p, (const char *const *)paths, datas, n, err, errlen);
    if (rc == ANEC_OK) {
        char *net = ane_str_printf("%s/net.plist", dir);
        int has_own = net && ane_read_data(c, net) != NULL;
        free(net);
        if (!has_own && strcmp(dir, donor->src) != 0) {
            pthread_mutex_lock(&donor->dir->use);
            rc = ane_copy_compiled(c, ane_compiled_home(donor), dir, err, errlen);
            pthread_mutex_unlock(&donor->dir->use);
        }
        p->own_copy = rc == ANEC_OK;
    }
    for (size_t i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
    free(datas); /* autoreleased NSData: owned by the pool */
    if (rc != ANEC_OK)
        prog_free(c, p);
    else
        *out = p;
    S->objc_autoreleasePoolPop(pool);
    return rc;
}

static int ane_data_equals(void *vctx, void *vprog, const uint8_t *bytes, size_t len, char *err,
                           size_t errlen)
{
    ane_ctx *c = vctx;
    ane_prog *p = vprog;
    const ane_syms *S = c->S;
    void *pool = S->objc_autoreleasePoolPush();
    pthread_mutex_lock(&p->dir->use);
    char *path = ane_str_printf("%s/data", ane_compiled_home(p));
    ane_id data = path ? ane_read_data(c, path) : NULL;
    int eq;
    if (!data) {
        ane_set_err(err, errlen, "ANE driver: no compiled data at %s", path ? path : "(out of memory)");
        eq = -1;
    } else {
        size_t n = (size_t)S->CFDataGetLength(data);
        const uint8_t *b = S->CFDataGetBytePtr(data);
        eq = n == len && (len == 0 || (b && memcmp(b, bytes, len) == 0));
    }
    free(path);
    pthread_mutex_unlock(&p->dir->use);
    S->objc_autoreleasePoolPop(pool);
    return eq;
}

/* The new BLOBFILE becomes the compiled `data` of an unloaded program (for a
   one-tensor program the compiler's data is that BLOBFILE,
   ANE-DATA-IS-BLOBFILE); the next load is meant to use it (on the same model:
   ANE-SAME-OBJECT-PATCH; on a never-loaded clone: ANE-NEW-OBJECT-LOAD). The
   weight file is rewritten too, so the directory stays coherent. */
static int ane_patch_data(void *vctx, void *vprog, const char *rel, const uint8_t *bytes,
                          size_t len, int written, char *err, size_t errlen)
{
    (void)written; /* the framework writes the data through NSData either way */
    ane_ctx *c = vctx;
    ane_prog *p = vprog;
    const ane_syms *S = c->S;
    if (p->loaded) {
        ane_set_err(err, errlen, "ANE driver: patch_data of a loaded program");
        return ANEC_ESTATE;
    }
    char *mp = ane_str_printf(ANE_MODEL_PATH_PREFIX "%s", rel ? rel : "");
    int safe = mp && relative_blob_path(mp) != NULL;
    free(mp);
    if (!safe) {
        ane_set_err(err, errlen, "ANE driver: weight path '%s' is not a relative program path", rel ? rel : "");
        return ANEC_EINVAL;
    }
    void *pool = S->objc_autoreleasePoolPush();
    pthread_mutex_lock(&p->dir->use);
    int owner = p->dir->owner == p;
    const char *home = owner ? p->dir->path : p->src;
    ane_id data = S->CFDataCreate(NULL, bytes, (ane_cfindex)len);
    char *dp = ane_str_printf("%s/data", home), *fp = ane_str_printf("%s/%s", p->dir->path, rel);
    int rc = (data && dp && fp) ? ANEC_OK : ANEC_ENOMEM;
    if (rc == ANEC_ENOMEM)
        ane_set_err(err, errlen, "out of memory");
    if (rc == ANEC_OK)
        rc = ane_write_data(c, data, dp, err, errlen);
    if (rc == ANEC_OK && owner) {
        rc = ane_write_data(c, data, fp, err, errlen);
        p->own_copy = 0; /* the directory holds the truth now */
    }
    if (data)
        S->CFRelease(data);
    free(dp);
    free(fp);
    pthread_mutex_unlock(&p->dir->use);
    S->objc_autoreleasePoolPop(pool);
    return rc;
}

static int ane_set_option(void *vctx, const char *key, const char *value, char *err,
                          size_t errlen)
{
    (void)vctx;
    if (strcmp(key, "threads") == 0)
        return ANEC_OK; /* the device has no CPU kernel threads */
    if (strcmp(key, "compile_budget") == 0)
        return ANEC_OK; /* the device enforces its own; the core refuses before it */
    ane_set_err(err, errlen, "ANE driver: no option %s (= %s)", key, value);
    return ANEC_EINVAL;
}

/* Nothing is verified by the driver itself: `python -m anec.selftest` probes
   on each Mac which reload strategies really change outputs. */
static unsigned ane_self_verified(void *vctx)
{
    (void)vctx;
    return 0;
}

static int ane_evaluate(void *vctx, void *vprog, anec_surface *const *in, size_t n_in,
                        anec_surface *const *out, size_t n_out, char *err, size_t errlen)
{
    ane_ctx *c = vctx;
    ane_prog *p = vprog;
    const ane_syms *S = c->S;
    if (!p || !p->loaded) {
        ane_set_err(err, errlen, "ANE driver: evaluate of a program that is not loaded");
        return ANEC_ESTATE;
    }
    if (n_in == 0 || n_out == 0 || !in || !out) {
        ane_set_err(err, errlen, "ANE driver: evaluate needs inputs and outputs (%zu, %zu)", n_in,
                n_out);
        return ANEC_EINVAL;
    }
    /* The surfaces must be unlocked (the core locks them only while the CPU
       touches them, ANE-SURFACE-LOCK): then they are wrapped and evaluated. */
    for (size_t k = 0; k < n_in + n_out; k++) {
        anec_surface *s = k < n_in ? in[k] : out[k - n_in];
        if (!s || !s->handle) {
            ane_set_err(err, errlen, "ANE driver: %s %zu is not an ANE surface",
                    k < n_in ? "input" : "output", k < n_in ? k : k - n_in);
            return ANEC_EINVAL;
        }
        if (s->cpu_locks) {
            ane_set_err(err, errlen, "ANE driver: evaluate with a surface still CPU-locked");
            return ANEC_ESTATE;
        }
    }
    void *pool = S->objc_autoreleasePoolPush();
    int rc = ane_request_for(c, p, in, n_in, out, n_out, err, errlen);
    if (rc == ANEC_OK) {
        ane_id e = NULL;
        if (!S->msg_qos_opts_req_err(p->model, c->sel.evaluate, ANE_QOS, c->empty, p->request, &e)) {
            char why[1024];
            ane_error_text(c, e, why, sizeof why);
            ane_set_err(err, errlen, "ANE evaluate failed (evaluateWithQoS:options:request:error:): %s%s", why,
                    strstr(why, "0x1d") ? " (status 0x1d: a surface below the minimum size, ANE-MIN-SURFACE, "
                                          "or surfaces of unequal sizes, ANE-UNIFORM-SURFACES)"
                                        : "");
            rc = ANEC_EEVAL;
        }
    }
    S->objc_autoreleasePoolPop(pool);
    return rc;
}

/* ------------------------------------------------------------------------ */

const anec_driver anec_driver_ane = {
    .name = "ane",
    .available = ane_available,
    .open = ane_open,
    .close = ane_close,
    .compile = ane_compile,
    .load = ane_load,
    .unload = ane_unload,
    .surface_create = ane_surface_create,
    .surface_free = ane_surface_free,
    .surface_lock = ane_surface_lock,
    .surface_unlock = ane_surface_unlock,
    .evaluate = ane_evaluate,
    .release = ane_release,
    .clone = ane_clone,
    .set_option = ane_set_option,
    .self_verified = ane_self_verified,
    .data_equals = ane_data_equals,
    .patch_data = ane_patch_data,
};
