/*
 * driver_ane.c - the Apple Neural Engine driver (macOS on Apple silicon).
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
 *            this program's compiled form (see "shared hexId directories").
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
 * Shared hexId directories. The framework names the directory after
 * hexStringIdentifier: by Orion's account a function of the MIL text and the
 * weight paths only, by maderix's (test_qos_sweep) also of the weight values.
 * Either way two live programs can share one (identical programs, or a clone
 * under Orion's reading) while their compiled data differ. So each directory
 * records its owner, whose compiled form it holds; a program that loads while
 * another owns the directory copies its own compiled form in (after the owner
 * saved a copy of its own into its program directory, the core's, which
 * stays the source of truth for model.mil and weights/). A per-directory
 * lock makes "put the files in place, then compile/load" atomic. Directories
 * are reference-counted process-wide and removed with their last program.
 *
 * IOSurfaces are flat byte buffers (Width = bytes, Height = 1, BytesPerElement
 * = 1, BytesPerRow = bytes, AllocSize = bytes, PixelFormat = 0). The CPU
 * locks one only while it reads or writes it (ANE-SURFACE-LOCK: maderix and
 * Orion lock around their copies only): surface_lock/surface_unlock, with
 * kIOSurfaceLockReadOnly for reads; `base` is valid only under a lock, and
 * evaluate refuses a surface the core still holds.
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

#include "anec_driver.h"
#include "anec_rt.h"
#include "ane_syms.h"

#define ANE_FRAMEWORK \
    "/System/Library/PrivateFrameworks/AppleNeuralEngine.framework/AppleNeuralEngine"
#define ANE_QOS 21u
#define ANE_MODEL_PATH_PREFIX "@model_path/"
#define ANE_WHY_MAX 512

/* ------------------------------------------------------------------------ */
/* errors                                                                    */

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* malloc'd printf; NULL on allocation failure. */
static char *str_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *str_printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

static char *str_dup(const char *s)
{
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d)
        memcpy(d, s, n + 1);
    return d;
}

/* ------------------------------------------------------------------------ */
/* the symbol table (process-wide, resolved once)                            */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_state;             /* 0: unresolved, 1: resolved, -1: unavailable */
static ane_syms g_syms;
static char g_why[ANE_WHY_MAX];

/* The Objective-C classes the driver talks to; all must exist. */
static const char *const k_classes[] = {
    "_ANEInMemoryModelDescriptor", "_ANEInMemoryModel", "_ANERequest",
    "_ANEIOSurfaceObject", "NSFileManager", "NSData",
};
#define N_CLASSES (sizeof k_classes / sizeof k_classes[0])
enum { C_DESC, C_MODEL, C_REQUEST, C_IOSOBJ, C_FILEMANAGER, C_DATA };

#if defined(__APPLE__) && (defined(__arm64__) || defined(__aarch64__))
#define ANE_CAN_RESOLVE 1
#else
#define ANE_CAN_RESOLVE 0
#endif

#if ANE_CAN_RESOLVE
static void *sym(void *lib, const char *name, int *missing, char *why, size_t n)
{
    void *p = dlsym(lib, name);
    if (!p && !*missing) {
        *missing = 1;
        snprintf(why, n, "AppleNeuralEngine driver: symbol %s not found", name);
    }
    return p;
}

/* dlsym a `const CFStringRef name` (or any pointer-sized constant) and read it. */
static ane_id sym_value(void *lib, const char *name, int *missing, char *why, size_t n)
{
    ane_id *p = sym(lib, name, missing, why, n);
    return p ? *p : NULL;
}
#endif

/* Fill *s with the real symbols; 0 on success, else -1 with the reason in why. */
static int resolve_real(ane_syms *s, char *why, size_t n)
{
#if !ANE_CAN_RESOLVE
    (void)s;
#if defined(__APPLE__)
    snprintf(why, n,
             "AppleNeuralEngine.framework not usable: this driver needs macOS on Apple "
             "silicon (this build is not arm64)");
#else
    snprintf(why, n,
             "AppleNeuralEngine.framework not found: this driver needs macOS on Apple silicon");
#endif
    return -1;
#else
    void *ane = dlopen(ANE_FRAMEWORK, RTLD_NOW | RTLD_LOCAL);
    if (!ane) {
        const char *e = dlerror();
        snprintf(why, n,
                 "AppleNeuralEngine.framework not found: this driver needs macOS on Apple "
                 "silicon (dlopen: %s)",
                 e ? e : "unknown error");
        return -1;
    }
    static const char *const libs[4] = {
        "/usr/lib/libobjc.A.dylib",
        "/System/Library/Frameworks/CoreFoundation.framework/CoreFoundation",
        "/System/Library/Frameworks/IOSurface.framework/IOSurface",
        "/System/Library/Frameworks/Foundation.framework/Foundation",
    };
    void *h[4];
    for (int i = 0; i < 4; i++) {
        h[i] = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
        if (!h[i]) {
            const char *e = dlerror();
            snprintf(why, n, "cannot open %s (%s)", libs[i], e ? e : "unknown error");
            return -1;
        }
    }
    void *objc = h[0], *cf = h[1], *ios = h[2], *fnd = h[3];
    int miss = 0;
#define SYM(lib, field) s->field = (__typeof__(s->field))sym(lib, #field, &miss, why, n)
#define VAL(lib, field) s->field = sym_value(lib, #field, &miss, why, n)
    SYM(objc, objc_getClass);
    SYM(objc, sel_registerName);
    SYM(objc, objc_autoreleasePoolPush);
    SYM(objc, objc_autoreleasePoolPop);
    void *msgsend = sym(objc, "objc_msgSend", &miss, why, n);
    s->msg0 = (__typeof__(s->msg0))msgsend;
    s->msg_cstr = (__typeof__(s->msg_cstr))msgsend;
    s->msg1 = (__typeof__(s->msg1))msgsend;
    s->msg3 = (__typeof__(s->msg3))msgsend;
    s->msg7 = (__typeof__(s->msg7))msgsend;
    s->msg_qos_opts_err = (__typeof__(s->msg_qos_opts_err))msgsend;
    s->msg_qos_err = (__typeof__(s->msg_qos_err))msgsend;
    s->msg_qos_opts_req_err = (__typeof__(s->msg_qos_opts_req_err))msgsend;
    s->msg_write = (__typeof__(s->msg_write))msgsend;
    s->msg_remove = (__typeof__(s->msg_remove))msgsend;
    s->msg_mkdir = (__typeof__(s->msg_mkdir))msgsend;
    s->kCFTypeDictionaryKeyCallBacks = sym(cf, "kCFTypeDictionaryKeyCallBacks", &miss, why, n);
    s->kCFTypeDictionaryValueCallBacks =
        sym(cf, "kCFTypeDictionaryValueCallBacks", &miss, why, n);
    s->kCFTypeArrayCallBacks = sym(cf, "kCFTypeArrayCallBacks", &miss, why, n);
    SYM(cf, CFDataCreate);
    SYM(cf, CFDataGetLength);
    SYM(cf, CFDataGetBytePtr);
    SYM(cf, CFDictionaryCreateMutable);
    SYM(cf, CFDictionarySetValue);
    SYM(cf, CFNumberCreate);
    SYM(cf, CFStringCreateWithCString);
    SYM(cf, CFArrayCreate);
    SYM(cf, CFRetain);
    SYM(cf, CFRelease);
    VAL(ios, kIOSurfaceWidth);
    VAL(ios, kIOSurfaceHeight);
    VAL(ios, kIOSurfaceBytesPerElement);
    VAL(ios, kIOSurfaceBytesPerRow);
    VAL(ios, kIOSurfaceAllocSize);
    VAL(ios, kIOSurfacePixelFormat);
    SYM(ios, IOSurfaceCreate);
    SYM(ios, IOSurfaceLock);
    SYM(ios, IOSurfaceUnlock);
    SYM(ios, IOSurfaceGetBaseAddress);
    SYM(ios, IOSurfaceGetAllocSize);
    SYM(fnd, NSTemporaryDirectory);
#undef SYM
#undef VAL
    return miss ? -1 : 0;
#endif
}

/* The resolved table, or NULL with the reason in why. */
static const ane_syms *get_syms(char *why, size_t n)
{
    const ane_syms *out = NULL;
    pthread_mutex_lock(&g_lock);
    if (g_state == 0) {
        ane_syms s;
        memset(&s, 0, sizeof s);
        if (resolve_real(&s, g_why, sizeof g_why) == 0) {
            g_syms = s;
            g_state = 1;
        } else {
            g_state = -1;
        }
    }
    if (g_state == 1)
        out = &g_syms;
    else
        set_err(why, n, "%s", g_why);
    pthread_mutex_unlock(&g_lock);
    return out;
}

/* Check the classes exist; fills cls[] when not NULL. */
static int find_classes(const ane_syms *S, ane_class *cls, char *why, size_t n)
{
    for (size_t i = 0; i < N_CLASSES; i++) {
        ane_class c = S->objc_getClass(k_classes[i]);
        if (!c) {
            set_err(why, n,
                    "AppleNeuralEngine.framework has no class %s: this macOS version does not "
                    "provide the in-memory compile API",
                    k_classes[i]);
            return ANEC_EUNAVAIL;
        }
        if (cls)
            cls[i] = c;
    }
    return ANEC_OK;
}

static int ane_available(char *why, size_t whylen)
{
    const ane_syms *S = get_syms(why, whylen);
    if (!S)
        return ANEC_EUNAVAIL;
    int rc = find_classes(S, NULL, why, whylen);
    if (rc == ANEC_OK)
        set_err(why, whylen, "AppleNeuralEngine.framework with the in-memory compile API");
    return rc;
}

/* ------------------------------------------------------------------------ */
/* hexId directories: reference-counted, process-wide                        */

struct ane_prog;

typedef struct ane_dir {
    char *path;                 /* NSTemporaryDirectory()/<hexId> */
    int refs;                   /* live programs using it */
    pthread_mutex_t use;        /* held while a program writes it and compiles/loads */
    struct ane_prog *owner;     /* whose compiled form (net.plist, data) it holds now */
    struct ane_dir *next;
} ane_dir;

static ane_dir *g_dirs;

static ane_dir *dir_acquire(const char *path)
{
    ane_dir *d;
    pthread_mutex_lock(&g_lock);
    for (d = g_dirs; d; d = d->next)
        if (strcmp(d->path, path) == 0)
            break;
    if (d) {
        d->refs++;
    } else if ((d = calloc(1, sizeof *d)) && (d->path = str_dup(path))) {
        d->refs = 1;
        pthread_mutex_init(&d->use, NULL);
        d->next = g_dirs;
        g_dirs = d;
    } else {
        free(d);
        d = NULL;
    }
    pthread_mutex_unlock(&g_lock);
    return d;
}

#ifdef ANEC_ANE_TESTING
void ane_syms_install_fake(const ane_syms *fake)
{
    pthread_mutex_lock(&g_lock);
    while (g_dirs) {
        ane_dir *d = g_dirs;
        g_dirs = d->next;
        pthread_mutex_destroy(&d->use);
        free(d->path);
        free(d);
    }
    if (fake) {
        g_syms = *fake;
        g_state = 1;
    } else {
        memset(&g_syms, 0, sizeof g_syms);
        g_state = 0;
    }
    g_why[0] = '\0';
    pthread_mutex_unlock(&g_lock);
}
#endif

/* ------------------------------------------------------------------------ */
/* context                                                                   */

typedef struct ane_ctx {
    const ane_syms *S;
    ane_class cls[N_CLASSES];
    struct {
        ane_sel model_with_mil, in_memory_model, hex_id, compile, load, unload, evaluate;
        ane_sel object_with_surface, request, description, utf8;
        ane_sel default_manager, mkdir, remove, write, data_with_file;
    } sel;
    ane_id empty;               /* @{} passed as every options: argument */
    ane_id zero;                /* @0, the procedureIndex */
} ane_ctx;

typedef struct ane_prog {
    ane_id mil;                 /* NSData of the MIL text */
    ane_id desc;                /* _ANEInMemoryModelDescriptor */
    ane_id model;               /* _ANEInMemoryModel */
    ane_dir *dir;               /* NSTemporaryDirectory()/<hexId> */
    char *src;                  /* the core's program directory (weights source) */
    char **rel;                 /* blob paths relative to the program dir ("weights/w.bin") */
    size_t n_rel;
    int loaded;
    int cloned;                 /* made by clone: loads a network compiled for another */
    int own_copy;               /* src holds this program's compiled form (net.plist, data) */
    /* the request, built once per bound surface set */
    ane_id request;
    ane_id arrays[4];           /* inputs, input indices, outputs, output indices */
    void **bound;               /* IOSurfaceRefs of the request: n_in inputs, then outputs */
    size_t n_in, n_out;
} ane_prog;

#define SEL(name) S->sel_registerName(name)

static int ane_open(void **out, char *err, size_t errlen)
{
    *out = NULL;
    const ane_syms *S = get_syms(err, errlen);
    if (!S)
        return ANEC_EUNAVAIL;
    ane_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        set_err(err, errlen, "out of memory");
        return ANEC_ENOMEM;
    }
    c->S = S;
    int rc = find_classes(S, c->cls, err, errlen);
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
        set_err(err, errlen, "out of memory");
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

/* ------------------------------------------------------------------------ */
/* Foundation helpers (all called inside an autorelease pool)                */

/* The text of an NSError (its -description, which includes the domain, code
   and localized description), or a note that there was none. */
static void error_text(ane_ctx *c, ane_id error, char *buf, size_t n)
{
    const ane_syms *S = c->S;
    const char *s = NULL;
    if (error) {
        ane_id d = S->msg0(error, c->sel.description);
        s = d ? S->msg_cstr(d, c->sel.utf8) : NULL;
        if (!s)
            s = "NSError without a description";
    } else {
        s = "no NSError returned";
    }
    snprintf(buf, n, "%s", s);
}

/* C string of an NSString (valid until the enclosing pool pops), or NULL. */
static const char *cstr(ane_ctx *c, ane_id str)
{
    return str ? c->S->msg_cstr(str, c->sel.utf8) : NULL;
}

/* +1 NSString from a C string. */
static ane_id nsstr(ane_ctx *c, const char *s)
{
    return c->S->CFStringCreateWithCString(NULL, s, ANE_CF_STRING_ENCODING_UTF8);
}

static ane_id file_manager(ane_ctx *c)
{
    return c->S->msg0(c->cls[C_FILEMANAGER], c->sel.default_manager);
}

static int make_dirs(ane_ctx *c, const char *path, char *err, size_t errlen)
{
    const ane_syms *S = c->S;
    ane_id p = nsstr(c, path), e = NULL;
    ane_id fm = file_manager(c);
    ane_bool ok = p && fm && S->msg_mkdir(fm, c->sel.mkdir, p, 1, NULL, &e);
    if (p)
        S->CFRelease(p);
    if (!ok) {
        char why[512];
        error_text(c, e, why, sizeof why);
        set_err(err, errlen, "cannot create directory %s: %s", path, why);
        return ANEC_EIO;
    }
    return ANEC_OK;
}

static int write_data(ane_ctx *c, ane_id data, const char *path, char *err, size_t errlen)
{
    const ane_syms *S = c->S;
    ane_id p = nsstr(c, path);
    ane_bool ok = p && S->msg_write(data, c->sel.write, p, 1);
    if (p)
        S->CFRelease(p);
    if (!ok) {
        set_err(err, errlen, "cannot write %s", path);
        return ANEC_EIO;
    }
    return ANEC_OK;
}

static int copy_file(ane_ctx *c, const char *from, const char *to, char *err, size_t errlen)
{
    const ane_syms *S = c->S;
    ane_id p = nsstr(c, from);
    ane_id data = p ? S->msg1(c->cls[C_DATA], c->sel.data_with_file, p) : NULL;
    if (p)
        S->CFRelease(p);
    if (!data) {
        set_err(err, errlen, "cannot read %s", from);
        return ANEC_EIO;
    }
    return write_data(c, data, to, err, errlen);
}

static void remove_path(ane_ctx *c, const char *path)
{
    const ane_syms *S = c->S;
    ane_id p = nsstr(c, path), e = NULL;
    ane_id fm = file_manager(c);
    if (p && fm)
        (void)S->msg_remove(fm, c->sel.remove, p, &e);
    if (p)
        S->CFRelease(p);
}

/* Drop one reference; the last one removes the directory from disk. */
static void dir_release(ane_ctx *c, ane_dir *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&g_lock);
    if (--d->refs > 0) {
        pthread_mutex_unlock(&g_lock);
        return;
    }
    ane_dir **pp = &g_dirs;
    while (*pp && *pp != d)
        pp = &(*pp)->next;
    if (*pp)
        *pp = d->next;
    /* Removed under the lock: a program acquiring the same path meanwhile
       gets a fresh entry only after the old directory is gone. */
    remove_path(c, d->path);
    pthread_mutex_unlock(&g_lock);
    pthread_mutex_destroy(&d->use);
    free(d->path);
    free(d);
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

/* ------------------------------------------------------------------------ */
/* programs                                                                  */

static void drop_request(ane_ctx *c, ane_prog *p)
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

static void prog_free(ane_ctx *c, ane_prog *p)
{
    const ane_syms *S = c->S;
    drop_request(c, p);
    if (p->model)
        S->CFRelease(p->model);
    if (p->desc)
        S->CFRelease(p->desc);
    if (p->mil)
        S->CFRelease(p->mil);
    dir_release(c, p->dir);
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
    ane_id k_offset = nsstr(c, "offset"), k_data = nsstr(c, "data");
    int64_t zero = 0;
    ane_id off = S->CFNumberCreate(NULL, ANE_CF_NUMBER_SINT64, &zero);
    int ok = dict && k_offset && k_data && off;
    for (size_t i = 0; ok && i < n; i++) {
        ane_id key = nsstr(c, paths[i]);
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
        set_err(err, errlen, "out of memory building the weights dictionary");
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
        set_err(err, errlen,
                "ANE compile failed: _ANEInMemoryModelDescriptor rejected the MIL text and "
                "weights (modelWithMILText:weights:optionsPlist: returned nil)");
        return ANEC_ECOMPILE;
    }
    p->desc = (ane_id)S->CFRetain(desc);
    ane_id model = S->msg1(c->cls[C_MODEL], c->sel.in_memory_model, p->desc);
    if (!model) {
        set_err(err, errlen, "ANE compile failed: inMemoryModelWithDescriptor: returned nil");
        return ANEC_ECOMPILE;
    }
    p->model = (ane_id)S->CFRetain(model);

    const char *hex = cstr(c, S->msg0(p->model, c->sel.hex_id));
    if (!hex || !*hex) {
        set_err(err, errlen, "ANE driver: the model has no hexStringIdentifier");
        return ANEC_EDRIVER;
    }
    const char *tmp = cstr(c, S->NSTemporaryDirectory());
    if (!tmp || !*tmp) {
        set_err(err, errlen, "ANE driver: NSTemporaryDirectory() is empty");
        return ANEC_EDRIVER;
    }
    size_t tl = strlen(tmp);
    char *path = str_printf("%s%s%s", tmp, tmp[tl - 1] == '/' ? "" : "/", hex);
    if (!path || !(p->dir = dir_acquire(path))) {
        free(path);
        set_err(err, errlen, "out of memory");
        return ANEC_ENOMEM;
    }
    free(path);
    return ANEC_OK;
}

/* Record the program directory and the blobs' relative paths (validated). */
static int keep_paths(ane_prog *p, const anec_compile_args *a, char *err, size_t errlen)
{
    if (!a->dir || !*a->dir) {
        set_err(err, errlen, "ANE driver: compile needs the program directory");
        return ANEC_EINVAL;
    }
    if (a->n_blobs && !a->blobs) {
        set_err(err, errlen, "ANE driver: %zu blobs but no blob array", a->n_blobs);
        return ANEC_EINVAL;
    }
    for (size_t i = 0; i < a->n_blobs; i++) {
        if (!relative_blob_path(a->blobs[i].path)) {
            set_err(err, errlen,
                    "ANE driver: weight path '%s' must be '@model_path/<relative path>' "
                    "without '..'",
                    a->blobs[i].path ? a->blobs[i].path : "(null)");
            return ANEC_EINVAL;
        }
        if (a->blobs[i].len && !a->blobs[i].data) {
            set_err(err, errlen, "ANE driver: weight '%s' has no data", a->blobs[i].path);
            return ANEC_EINVAL;
        }
    }
    p->src = str_dup(a->dir);
    p->rel = calloc(a->n_blobs ? a->n_blobs : 1, sizeof *p->rel);
    if (!p->src || !p->rel) {
        set_err(err, errlen, "out of memory");
        return ANEC_ENOMEM;
    }
    for (size_t i = 0; i < a->n_blobs; i++) {
        if (!(p->rel[i] = str_dup(relative_blob_path(a->blobs[i].path)))) {
            set_err(err, errlen, "out of memory");
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
    char *wdir = str_printf("%s/weights", dir);
    char *mil = str_printf("%s/model.mil", dir);
    int rc = (wdir && mil) ? ANEC_OK : ANEC_ENOMEM;
    if (rc == ANEC_OK)
        rc = make_dirs(c, wdir, err, errlen);
    if (rc == ANEC_OK)
        rc = write_data(c, p->mil, mil, err, errlen);
    for (size_t i = 0; rc == ANEC_OK && i < p->n_rel; i++) {
        char *file = str_printf("%s/%s", dir, p->rel[i]);
        if (!file) {
            rc = ANEC_ENOMEM;
            break;
        }
        /* A blob outside weights/ (or in a subdirectory) needs its parent. */
        char *slash = strrchr(file, '/');
        *slash = '\0';
        if (strcmp(file, dir) != 0 && strcmp(file, wdir) != 0)
            rc = make_dirs(c, file, err, errlen);
        *slash = '/';
        if (rc == ANEC_OK)
            rc = write_data(c, datas[i], file, err, errlen);
        free(file);
    }
    free(wdir);
    free(mil);
    if (rc == ANEC_ENOMEM)
        set_err(err, errlen, "out of memory");
    return rc;
}

/* ---- the compiled form: net.plist + data --------------------------------- */

static const char *const k_compiled[2] = {"net.plist", "data"};

/* Copy file `name` from directory `from` to directory `to`. */
static int copy_named(ane_ctx *c, const char *from, const char *to, const char *name, char *err,
                      size_t errlen)
{
    char *a = str_printf("%s/%s", from, name), *b = str_printf("%s/%s", to, name);
    int rc = (a && b) ? copy_file(c, a, b, err, errlen) : ANEC_ENOMEM;
    if (rc == ANEC_ENOMEM)
        set_err(err, errlen, "out of memory");
    free(a);
    free(b);
    return rc;
}

/* Copy the compiled form (net.plist, data) between directories. */
static int copy_compiled(ane_ctx *c, const char *from, const char *to, char *err, size_t errlen)
{
    int rc = ANEC_OK;
    for (int i = 0; i < 2 && rc == ANEC_OK; i++)
        rc = copy_named(c, from, to, k_compiled[i], err, errlen);
    return rc;
}

/* NSData of a file (autoreleased), or NULL. */
static ane_id read_data(ane_ctx *c, const char *path)
{
    ane_id p = nsstr(c, path);
    ane_id data = p ? c->S->msg1(c->cls[C_DATA], c->sel.data_with_file, p) : NULL;
    if (p)
        c->S->CFRelease(p);
    return data;
}

/* Where p's compiled form is now (caller holds p->dir->use): the hexId
   directory while p owns it, else p's own copy in its program directory. */
static const char *compiled_home(const ane_prog *p)
{
    return p->dir->owner == p ? p->dir->path : p->src;
}

/* Make the hexId directory hold p's compiled form and weight files (caller
   holds p->dir->use). A previous owner without its own copy keeps one first. */
static int claim_dir(ane_ctx *c, ane_prog *p, char *err, size_t errlen)
{
    ane_dir *d = p->dir;
    if (d->owner == p)
        return ANEC_OK;
    ane_prog *o = d->owner;
    int rc = ANEC_OK;
    if (o && !o->own_copy) {
        rc = copy_compiled(c, d->path, o->src, err, errlen);
        if (rc != ANEC_OK)
            return rc;
        o->own_copy = 1;
    }
    d->owner = NULL;
    /* a directory the framework named but nothing compiled in (a clone whose
       hexId covers its weight values) gets the program's files first */
    char *wdir = str_printf("%s/weights", d->path), *mil = str_printf("%s/model.mil", d->path);
    rc = wdir && mil ? make_dirs(c, wdir, err, errlen) : ANEC_ENOMEM;
    if (rc == ANEC_OK)
        rc = write_data(c, p->mil, mil, err, errlen);
    free(wdir);
    free(mil);
    if (rc == ANEC_OK)
        rc = copy_compiled(c, p->src, d->path, err, errlen);
    /* the weight files too: a device that re-reads weights/ at load sees the same weights */
    for (size_t i = 0; rc == ANEC_OK && i < p->n_rel; i++)
        rc = copy_named(c, p->src, d->path, p->rel[i], err, errlen);
    if (rc == ANEC_OK)
        d->owner = p;
    return rc;
}

static int ane_compile(void *vctx, const anec_compile_args *a, void **out, char *err,
                       size_t errlen)
{
    ane_ctx *c = vctx;
    const ane_syms *S = c->S;
    *out = NULL;
    if (!a || (!a->mil && a->mil_len)) {
        set_err(err, errlen, "ANE driver: compile without MIL text");
        return ANEC_EINVAL;
    }
    ane_prog *p = calloc(1, sizeof *p);
    if (!p) {
        set_err(err, errlen, "out of memory");
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
        set_err(err, errlen, "out of memory");
    if (rc == ANEC_OK)
        rc = make_model(c, p, paths, datas, n, err, errlen);
    if (rc == ANEC_OK) {
        ane_dir *d = p->dir;
        pthread_mutex_lock(&d->use);
        /* The compiler leaves its output in this directory: a previous owner
           (same hexId) keeps a copy of its compiled form first. */
        if (d->owner && !d->owner->own_copy) {
            rc = copy_compiled(c, d->path, d->owner->src, err, errlen);
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
                error_text(c, e, why, sizeof why);
                set_err(err, errlen,
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
        set_err(err, errlen, "ANE driver: load of a NULL program");
        return ANEC_EINVAL;
    }
    if (p->loaded)
        return ANEC_OK;
    void *pool = S->objc_autoreleasePoolPush();
    pthread_mutex_lock(&p->dir->use);
    /* The device loads the compiled form in the hexId directory: make it this
       program's (another program with the same hexId may have used it). */
    int rc = claim_dir(c, p, err, errlen);
    if (rc == ANEC_OK) {
        ane_id e = NULL;
        if (!S->msg_qos_opts_err(p->model, c->sel.load, ANE_QOS, c->empty, &e)) {
            char why[1024];
            error_text(c, e, why, sizeof why);
            set_err(err, errlen, "ANE load failed (loadWithQoS:options:error:): %s%s", why,
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
        error_text(c, e, why, sizeof why);
        set_err(err, errlen, "ANE unload failed (unloadWithQoS:error:): %s", why);
        rc = ANEC_EDRIVER;
    }
    p->loaded = 0;
    /* a request belongs to one load of the model: build a new one after the next load */
    drop_request(c, p);
    return rc;
}

static int ane_unload(void *vctx, void *vprog, char *err, size_t errlen)
{
    ane_ctx *c = vctx;
    ane_prog *p = vprog;
    if (!p) {
        set_err(err, errlen, "ANE driver: unload of a NULL program");
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
        set_err(err, errlen, "ANE driver: clone needs a program and a directory");
        return ANEC_EINVAL;
    }
    size_t n = donor->n_rel;
    ane_prog *p = calloc(1, sizeof *p);
    char **paths = calloc(n ? n : 1, sizeof *paths);
    ane_id *datas = calloc(n ? n : 1, sizeof *datas);
    if (p) {
        p->src = str_dup(dir);
        p->rel = calloc(n ? n : 1, sizeof *p->rel);
    }
    if (!p || !paths || !datas || !p->src || !p->rel) {
        if (p)
            prog_free(c, p);
        free(paths);
        free(datas);
        set_err(err, errlen, "out of memory");
        return ANEC_ENOMEM;
    }
    void *pool = S->objc_autoreleasePoolPush();
    int rc = ANEC_OK;
    p->mil = (ane_id)S->CFRetain(donor->mil);
    p->cloned = 1;
    /* The descriptor gets the new program's own weight bytes. */
    for (size_t i = 0; rc == ANEC_OK && i < n; i++) {
        char *file = str_printf("%s/%s", dir, donor->rel[i]);
        paths[i] = str_printf(ANE_MODEL_PATH_PREFIX "%s", donor->rel[i]);
        if ((p->rel[i] = str_dup(donor->rel[i])))
            p->n_rel++;
        if (!file || !paths[i] || !p->rel[i]) {
            set_err(err, errlen, "out of memory");
            rc = ANEC_ENOMEM;
        } else if (!(datas[i] = read_data(c, file))) {
            set_err(err, errlen, "ANE driver: cannot read %s", file);
            rc = ANEC_EIO;
        }
        free(file);
    }
    if (rc == ANEC_OK)
        rc = make_model(c, p, (const char *const *)paths, datas, n, err, errlen);
    if (rc == ANEC_OK) {
        char *net = str_printf("%s/net.plist", dir);
        int has_own = net && read_data(c, net) != NULL;
        free(net);
        if (!has_own && strcmp(dir, donor->src) != 0) {
            pthread_mutex_lock(&donor->dir->use);
            rc = copy_compiled(c, compiled_home(donor), dir, err, errlen);
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
    char *path = str_printf("%s/data", compiled_home(p));
    ane_id data = path ? read_data(c, path) : NULL;
    int eq;
    if (!data) {
        set_err(err, errlen, "ANE driver: no compiled data at %s", path ? path : "(out of memory)");
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
        set_err(err, errlen, "ANE driver: patch_data of a loaded program");
        return ANEC_ESTATE;
    }
    char *mp = str_printf(ANE_MODEL_PATH_PREFIX "%s", rel ? rel : "");
    int safe = mp && relative_blob_path(mp) != NULL;
    free(mp);
    if (!safe) {
        set_err(err, errlen, "ANE driver: weight path '%s' is not a relative program path", rel ? rel : "");
        return ANEC_EINVAL;
    }
    void *pool = S->objc_autoreleasePoolPush();
    pthread_mutex_lock(&p->dir->use);
    int owner = p->dir->owner == p;
    const char *home = owner ? p->dir->path : p->src;
    ane_id data = S->CFDataCreate(NULL, bytes, (ane_cfindex)len);
    char *dp = str_printf("%s/data", home), *fp = str_printf("%s/%s", p->dir->path, rel);
    int rc = (data && dp && fp) ? ANEC_OK : ANEC_ENOMEM;
    if (rc == ANEC_ENOMEM)
        set_err(err, errlen, "out of memory");
    if (rc == ANEC_OK)
        rc = write_data(c, data, dp, err, errlen);
    if (rc == ANEC_OK && owner) {
        rc = write_data(c, data, fp, err, errlen);
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
    set_err(err, errlen, "ANE driver: no option %s (= %s)", key, value);
    return ANEC_EINVAL;
}

/* Nothing is verified by the driver itself: `python -m anec.selftest` probes
   on each Mac which reload strategies really change outputs. */
static unsigned ane_self_verified(void *vctx)
{
    (void)vctx;
    return 0;
}

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

static int ane_surface_create(void *vctx, size_t bytes, anec_surface *out, char *err,
                              size_t errlen)
{
    ane_ctx *c = vctx;
    const ane_syms *S = c->S;
    memset(out, 0, sizeof *out);
    if (bytes == 0 || bytes > (size_t)INT64_MAX) {
        set_err(err, errlen, "ANE driver: invalid surface size %zu", bytes);
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
        set_err(err, errlen, "ANE driver: IOSurfaceCreate failed for %zu bytes", bytes);
        return ANEC_ENOMEM;
    }
    if (S->IOSurfaceGetAllocSize(s) < bytes || S->IOSurfaceLock(s, 0, NULL) != 0) {
        S->CFRelease(s);
        set_err(err, errlen, "ANE driver: IOSurface of %zu bytes unusable", bytes);
        return ANEC_EDRIVER;
    }
    uint8_t *base = S->IOSurfaceGetBaseAddress(s);
    if (base)
        memset(base, 0, bytes); /* fresh memory is not promised to be zero */
    S->IOSurfaceUnlock(s, 0, NULL);
    if (!base) {
        S->CFRelease(s);
        set_err(err, errlen, "ANE driver: IOSurface has no base address");
        return ANEC_EDRIVER;
    }
    out->handle = s;
    out->bytes = bytes;
    return ANEC_OK;
}

static void ane_surface_free(void *vctx, anec_surface *s)
{
    ane_ctx *c = vctx;
    if (!s || !s->handle)
        return;
    c->S->CFRelease(s->handle);
    memset(s, 0, sizeof *s);
}

/* kIOSurfaceLockReadOnly: the CPU only reads while it holds the lock. */
#define ANE_LOCK_READ_ONLY 1u

static int ane_surface_lock(void *vctx, anec_surface *s, int read_only, char *err, size_t errlen)
{
    ane_ctx *c = vctx;
    if (!s || !s->handle) {
        set_err(err, errlen, "ANE driver: lock of a surface that does not exist");
        return ANEC_EINVAL;
    }
    if (c->S->IOSurfaceLock(s->handle, read_only ? ANE_LOCK_READ_ONLY : 0u, NULL) != 0) {
        set_err(err, errlen, "ANE driver: IOSurfaceLock failed");
        return ANEC_EDRIVER;
    }
    s->base = c->S->IOSurfaceGetBaseAddress(s->handle);
    if (!s->base) {
        c->S->IOSurfaceUnlock(s->handle, read_only ? ANE_LOCK_READ_ONLY : 0u, NULL);
        set_err(err, errlen, "ANE driver: IOSurface has no base address");
        return ANEC_EDRIVER;
    }
    return ANEC_OK;
}

static void ane_surface_unlock(void *vctx, anec_surface *s, int read_only)
{
    ane_ctx *c = vctx;
    if (!s || !s->handle)
        return;
    c->S->IOSurfaceUnlock(s->handle, read_only ? ANE_LOCK_READ_ONLY : 0u, NULL);
    s->base = NULL;
}

/* ------------------------------------------------------------------------ */
/* evaluate                                                                  */

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
static int request_for(ane_ctx *c, ane_prog *p, anec_surface *const *in, size_t n_in,
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
    drop_request(c, p);
    p->bound = calloc(n_in + n_out, sizeof *p->bound);
    if (!p->bound) {
        set_err(err, errlen, "out of memory");
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
        drop_request(c, p);
        set_err(err, errlen, "ANE driver: could not build the _ANERequest for %zu inputs and "
                             "%zu outputs",
                n_in, n_out);
        return ANEC_EDRIVER;
    }
    p->request = (ane_id)S->CFRetain(req);
    return ANEC_OK;
}

static int ane_evaluate(void *vctx, void *vprog, anec_surface *const *in, size_t n_in,
                        anec_surface *const *out, size_t n_out, char *err, size_t errlen)
{
    ane_ctx *c = vctx;
    ane_prog *p = vprog;
    const ane_syms *S = c->S;
    if (!p || !p->loaded) {
        set_err(err, errlen, "ANE driver: evaluate of a program that is not loaded");
        return ANEC_ESTATE;
    }
    if (n_in == 0 || n_out == 0 || !in || !out) {
        set_err(err, errlen, "ANE driver: evaluate needs inputs and outputs (%zu, %zu)", n_in,
                n_out);
        return ANEC_EINVAL;
    }
    /* The surfaces must be unlocked (the core locks them only while the CPU
       touches them, ANE-SURFACE-LOCK): then they are wrapped and evaluated. */
    for (size_t k = 0; k < n_in + n_out; k++) {
        anec_surface *s = k < n_in ? in[k] : out[k - n_in];
        if (!s || !s->handle) {
            set_err(err, errlen, "ANE driver: %s %zu is not an ANE surface",
                    k < n_in ? "input" : "output", k < n_in ? k : k - n_in);
            return ANEC_EINVAL;
        }
        if (s->cpu_locks) {
            set_err(err, errlen, "ANE driver: evaluate with a surface still CPU-locked");
            return ANEC_ESTATE;
        }
    }
    void *pool = S->objc_autoreleasePoolPush();
    int rc = request_for(c, p, in, n_in, out, n_out, err, errlen);
    if (rc == ANEC_OK) {
        ane_id e = NULL;
        if (!S->msg_qos_opts_req_err(p->model, c->sel.evaluate, ANE_QOS, c->empty, p->request, &e)) {
            char why[1024];
            error_text(c, e, why, sizeof why);
            set_err(err, errlen, "ANE evaluate failed (evaluateWithQoS:options:request:error:): %s%s", why,
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
