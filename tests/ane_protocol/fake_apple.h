/*
 * fake_apple.h - a recording fake of the Apple side of the ane driver
 * (Objective-C runtime, AppleNeuralEngine classes, CoreFoundation, IOSurface,
 * Foundation file calls), for the protocol tests on Linux. Test-only.
 *
 * The fake fills an ane_syms table with typed C functions (one per call
 * signature, like the casts of objc_msgSend the real table holds) and installs
 * it with ane_syms_install_fake(). It
 *   - returns tagged fake objects with CF retain counts and an autorelease
 *     pool, and flags leaks, over-releases and messages to dead objects;
 *   - records every call as a line of text, e.g.
 *       +_ANEInMemoryModelDescriptor modelWithMILText:weights:optionsPlist: NSData[120] NSDictionary{0} nil
 *       -_ANEInMemoryModel compileWithQoS:options:error: 21 NSDictionary{0} &error
 *     (paths under the fake temporary directory are shown as $TMP);
 *   - behaves like a strict device: compile reads model.mil and the weight
 *     files from NSTemporaryDirectory()/<hexId> and leaves its output there,
 *     net.plist and `data` (the BLOBFILE's bytes for a program with one
 *     BLOBFILE tensor, ANE-DATA-IS-BLOBFILE; an opaque container otherwise);
 *     evaluate refuses CPU-locked surfaces and writes outputs computed from
 *     the bound inputs and the loaded weights (see fk_expected_output).
 *     IOSurfaces hold their bytes for the CPU only while locked
 *     (ANE-SURFACE-LOCK): unlocked, the CPU-visible bytes are a poison
 *     pattern (FK_POISON) and writes to them are lost; a write under a
 *     read-only lock is a violation.
 *     What a load reads is one of the readings of the public evidence
 *     (fk_set_device; the ids are the constraint catalog's, `anec
 *     constraints`). maderix's test_weight_reload shows only that rewriting
 *     weights/ and loading the same object again changes nothing
 *     (ANE-BAKED-WEIGHTS); Orion's test_delta_compile shows that a new,
 *     never-compiled object whose hexId directory holds the donor's net.plist
 *     and new `data` loads the new weights (ANE-NEW-OBJECT-LOAD); Orion's
 *     paper claims load re-reads weights/ (ANE-LOAD-REREADS-WEIGHTS, no test
 *     backs it). Whether a rewrite of `data` reaches the SAME object
 *     (ANE-SAME-OBJECT-PATCH) no public test shows. So:
 *       FK_LOAD_DATA           every load reads net.plist + data;
 *       FK_LOAD_WEIGHTS        every load re-reads weights/ ("optimistic");
 *       FK_LOAD_MEMORY         an object keeps the weights of its compile (or
 *                              of its first load, when never compiled) and
 *                              later loads read no file; a never-compiled
 *                              object loads its hexId directory's data;
 *       FK_LOAD_MEMORY_SHARED  as FK_LOAD_MEMORY, and the framework caches
 *                              compiled weights per hexStringIdentifier
 *                              process-wide: a never-compiled object whose
 *                              hexId was compiled gets those (stale unless
 *                              the hexId covers the weight values).
 *     A second switch makes the hexStringIdentifier cover the weight values
 *     (maderix's reading) or only the MIL and weight paths (Orion's);
 *   - records a violation (instead of crashing like the device) for protocol
 *     errors: MIL passed as NSString, nil weights dictionary, a selector sent
 *     through the wrong signature slot, wrong request arguments, ...;
 *   - can fail any selector with an NSError whose description it provides.
 */
#ifndef FAKE_APPLE_H
#define FAKE_APPLE_H

#include <stddef.h>
#include <stdint.h>

#include "ane_syms.h"

typedef enum {
    FK_CLASS, FK_STRING, FK_DATA, FK_NUMBER, FK_DICT, FK_ARRAY, FK_SURFACE,
    FK_DESC, FK_MODEL, FK_IOSOBJ, FK_REQUEST, FK_ERROR, FK_FILEMANAGER,
} fk_kind;

typedef struct fk_obj fk_obj;
struct fk_obj {
    uint32_t magic;             /* FK_ALIVE, or FK_DEAD once freed (kept to catch use after free) */
    fk_kind kind;
    const char *cls;            /* class name used in the call log */
    int rc;                     /* CF retain count */
    int immortal;               /* classes, singletons, constant strings */
    int serial;                 /* creation order */
    char *str;                  /* FK_STRING text, FK_ERROR description */
    uint8_t *bytes;             /* FK_DATA bytes, FK_SURFACE memory */
    size_t len;
    int64_t num;                /* FK_NUMBER */
    fk_obj **keys, **vals;      /* FK_DICT keys/values, FK_ARRAY values */
    size_t n, cap;
    fk_obj *refs[4];            /* retained members: DESC {mil, weights}, MODEL {desc},
                                   IOSOBJ {surface}, REQUEST {in, in_idx, out, out_idx} */
    int n_refs;
    /* FK_SURFACE: `bytes` is what the CPU sees, `shadow` what the device
       uses. While unlocked the CPU sees only a poison pattern (the real bytes
       are in the shadow); a lock copies them in, an unlock copies them back
       (after a read-only lock: checks that nothing was written). */
    int locks;
    int lock_ro;                /* the outermost lock is kIOSurfaceLockReadOnly */
    uint8_t *shadow;
    int64_t props[6];           /* Width, Height, BytesPerElement, BytesPerRow, AllocSize, PixelFormat */
    /* FK_MODEL */
    char hex[17];
    int compiled, loaded;
    uint64_t wsum;              /* hash of the weights the loaded model computes with */
    int has_mem;                /* FK_LOAD_MEMORY*: the object keeps mem_wsum in memory */
    uint64_t mem_wsum;
    fk_obj *next_all;
};

/* Reset everything (objects, log, failures) and install the fake into the
   driver. root: an existing directory, returned by NSTemporaryDirectory(). */
void fk_init(const char *root);
/* Free every fake object and uninstall (the driver goes back to real symbols). */
void fk_shutdown(void);
const ane_syms *fk_syms(void);
const char *fk_root(void);

/* The call log. */
size_t fk_ncalls(void);
const char *fk_call(size_t i);
void fk_clear_calls(void);

/* Protocol violations seen so far. */
size_t fk_nviolations(void);
const char *fk_violation(size_t i);
/* Forget the violations so far (after a test provoked one on purpose). */
void fk_clear_violations(void);

/* Fail `selector` (every later call) with an NSError whose -description is
   `description` (NULL: fail without an NSError); selector NULL clears. For
   factory selectors the call returns nil. */
void fk_fail(const char *selector, const char *description);
/* objc_getClass(name) returns nil. */
void fk_hide_class(const char *name);

/* Inspection. */
fk_obj *fk_last(fk_kind kind);                         /* most recently created */
fk_obj *fk_dict_get(const fk_obj *dict, const char *key);
size_t fk_live(void);                                  /* live non-immortal objects */
int fk_pool_depth(void);
int fk_alive(const fk_obj *o);
/* The byte the fake device writes at position k of output j, given the
   bound input surfaces' memory and the loaded weight hash. */
uint8_t fk_expected_output(const uint8_t *const *inputs, const size_t *in_len, size_t n_in,
                           uint64_t wsum, size_t j, size_t k);
/* The hash load computes over weight file contents in key order. */
uint64_t fk_weights_hash(const char *const *contents, const size_t *lens, size_t n);
/* The weight hash a freshly compiled and loaded model with these weights has
   (in the current device mode). */
uint64_t fk_compiled_hash(const char *mil, const char *const *paths, const uint8_t *const *datas,
                          const size_t *lens, size_t n);
/* What the CPU sees in an unlocked IOSurface. */
#define FK_POISON 0x5Au

/* What a load reads, one reading of the evidence each (see the top). */
typedef enum {
    FK_LOAD_DATA = 0,           /* baked: net.plist + data (the default after fk_init) */
    FK_LOAD_WEIGHTS,            /* optimistic: the weight files */
    FK_LOAD_MEMORY,             /* in memory, per model object */
    FK_LOAD_MEMORY_SHARED,      /* in memory, and cached per hexStringIdentifier */
} fk_reading;
#define FK_N_READINGS 4
/* Device switches (FK_LOAD_DATA, 0 after fk_init): the reading, and whether
   the hexStringIdentifier covers the weight values (else MIL + weight paths). */
void fk_set_device(fk_reading reading, int hex_content);
const char *fk_reading_name(fk_reading reading);

#endif /* FAKE_APPLE_H */
