/*
 * ane_symbols.c - the ane driver's symbol table: every Apple symbol it calls
 * (Objective-C runtime, CoreFoundation, IOSurface, Foundation and the
 * framework's classes) resolved once per process with dlopen/dlsym into one
 * ane_syms table (ane_syms.h), or the reason it cannot be (not macOS on
 * Apple silicon, no framework, a missing symbol or class), which
 * available() reports; and the process-wide lock it shares with the hexId
 * directories. Under ANEC_ANE_TESTING the protocol tests install a fake.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ane_driver.h"

pthread_mutex_t ane_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_state;             /* 0: unresolved, 1: resolved, -1: unavailable */
static ane_syms g_syms;
static char g_why[ANE_WHY_MAX];

/* The Objective-C classes the driver talks to; all must exist. */
static const char *const k_classes[] = {
    "_ANEInMemoryModelDescriptor", "_ANEInMemoryModel", "_ANERequest",
    "_ANEIOSurfaceObject", "NSFileManager", "NSData",
};
_Static_assert(sizeof k_classes / sizeof k_classes[0] == ANE_N_CLASSES, "one class per C_* index");

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
const ane_syms *ane_get_syms(char *why, size_t n)
{
    const ane_syms *out = NULL;
    pthread_mutex_lock(&ane_lock);
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
        ane_set_err(why, n, "%s", g_why);
    pthread_mutex_unlock(&ane_lock);
    return out;
}

/* Check the classes exist; fills cls[] when not NULL. */
int ane_find_classes(const ane_syms *S, ane_class *cls, char *why, size_t n)
{
    for (size_t i = 0; i < ANE_N_CLASSES; i++) {
        ane_class c = S->objc_getClass(k_classes[i]);
        if (!c) {
            ane_set_err(why, n,
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

int ane_available(char *why, size_t whylen)
{
    const ane_syms *S = ane_get_syms(why, whylen);
    if (!S)
        return ANEC_EUNAVAIL;
    int rc = ane_find_classes(S, NULL, why, whylen);
    if (rc == ANEC_OK)
        ane_set_err(why, whylen, "AppleNeuralEngine.framework with the in-memory compile API");
    return rc;
}

#ifdef ANEC_ANE_TESTING
void ane_syms_install_fake(const ane_syms *fake)
{
    pthread_mutex_lock(&ane_lock);
    ane_dirs_forget();
    if (fake) {
        g_syms = *fake;
        g_state = 1;
    } else {
        memset(&g_syms, 0, sizeof g_syms);
        g_state = 0;
    }
    g_why[0] = '\0';
    pthread_mutex_unlock(&ane_lock);
}
#endif
