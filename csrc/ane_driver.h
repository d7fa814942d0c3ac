/*
 * ane_driver.h - what the ane driver's files share (internal): its limits
 * and constants, the context, program and hexId directory structures, and
 * the functions each file gives the others. The entry points are
 * driver_ane.c; symbols ane_symbols.c; Foundation calls ane_foundation.c;
 * hexId directories ane_hexdirs.c; surfaces and requests ane_surfaces.c.
 */
#ifndef ANEC_ANE_DRIVER_H
#define ANEC_ANE_DRIVER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "anec_driver.h"
#include "anec_rt.h"
#include "ane_syms.h"

#define ANE_FRAMEWORK \
    "/System/Library/PrivateFrameworks/AppleNeuralEngine.framework/AppleNeuralEngine"
#define ANE_QOS 21u
#define ANE_MODEL_PATH_PREFIX "@model_path/"
#define ANE_WHY_MAX 512

/* The Objective-C classes the driver talks to (ane_symbols.c), by index. */
enum { C_DESC, C_MODEL, C_REQUEST, C_IOSOBJ, C_FILEMANAGER, C_DATA, ANE_N_CLASSES };

struct ane_prog;

typedef struct ane_dir {
    char *path;                 /* NSTemporaryDirectory()/<hexId> */
    int refs;                   /* live programs using it */
    pthread_mutex_t use;        /* held while a program writes it and compiles/loads */
    struct ane_prog *owner;     /* whose compiled form (net.plist, data) it holds now */
    struct ane_dir *next;
} ane_dir;

typedef struct ane_ctx {
    const ane_syms *S;
    ane_class cls[ANE_N_CLASSES];
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

/* ---- ane_symbols.c ---- */

/* Guards the symbol table and the hexId directory list. */
extern pthread_mutex_t ane_lock;
/* The resolved table, or NULL with the reason in why. */
const ane_syms *ane_get_syms(char *why, size_t n);
/* Check the classes exist; fills cls[] when not NULL. */
int ane_find_classes(const ane_syms *S, ane_class *cls, char *why, size_t n);
int ane_available(char *why, size_t whylen);

/* ---- ane_foundation.c ---- */

void ane_set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* malloc'd printf; NULL on allocation failure. */
char *ane_str_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *ane_str_dup(const char *s);
/* The text of an NSError, or a note that there was none. */
void ane_error_text(ane_ctx *c, ane_id error, char *buf, size_t n);
/* C string of an NSString (valid until the enclosing pool pops), or NULL. */
const char *ane_cstr(ane_ctx *c, ane_id str);
/* +1 NSString from a C string. */
ane_id ane_nsstr(ane_ctx *c, const char *s);
ane_id ane_file_manager(ane_ctx *c);
int ane_make_dirs(ane_ctx *c, const char *path, char *err, size_t errlen);
int ane_write_data(ane_ctx *c, ane_id data, const char *path, char *err, size_t errlen);
int ane_copy_file(ane_ctx *c, const char *from, const char *to, char *err, size_t errlen);
void ane_remove_path(ane_ctx *c, const char *path);
/* NSData of a file (autoreleased), or NULL. */
ane_id ane_read_data(ane_ctx *c, const char *path);

/* ---- ane_hexdirs.c ---- */

/* The directory of this path with a new reference (created on first use), or NULL. */
ane_dir *ane_dir_acquire(const char *path);
/* Drop one reference; the last one removes the directory from disk. */
void ane_dir_release(ane_ctx *c, ane_dir *d);
#ifdef ANEC_ANE_TESTING
/* Forget every directory (ane_lock held): a new process, for the protocol tests. */
void ane_dirs_forget(void);
#endif
/* Copy file `name` from directory `from` to directory `to`. */
int ane_copy_named(ane_ctx *c, const char *from, const char *to, const char *name, char *err, size_t errlen);
/* Copy the compiled form (net.plist, data) between directories. */
int ane_copy_compiled(ane_ctx *c, const char *from, const char *to, char *err, size_t errlen);
/* Where p's compiled form is now (caller holds p->dir->use). */
const char *ane_compiled_home(const ane_prog *p);
/* Make the hexId directory hold p's compiled form and weight files (caller holds p->dir->use). */
int ane_claim_dir(ane_ctx *c, ane_prog *p, char *err, size_t errlen);

/* ---- ane_surfaces.c ---- */

int ane_surface_create(void *vctx, size_t bytes, anec_surface *out, char *err, size_t errlen);
void ane_surface_free(void *vctx, anec_surface *s);
int ane_surface_lock(void *vctx, anec_surface *s, int read_only, char *err, size_t errlen);
void ane_surface_unlock(void *vctx, anec_surface *s, int read_only);
/* Release p's request and the surfaces it holds. */
void ane_drop_request(ane_ctx *c, ane_prog *p);
/* p->request for these surfaces: reused when the same are bound in the same order, else built. */
int ane_request_for(ane_ctx *c, ane_prog *p, anec_surface *const *in, size_t n_in, anec_surface *const *out,
                    size_t n_out, char *err, size_t errlen);

#endif /* ANEC_ANE_DRIVER_H */
