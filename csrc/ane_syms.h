/*
 * ane_syms.h - the one table of symbols the ane driver uses (internal).
 *
 * The ane driver is plain C with no Apple headers: every Objective-C runtime,
 * CoreFoundation, IOSurface and Foundation symbol it touches is resolved at
 * run time (dlopen/dlsym) into one ane_syms table, and all calls go through
 * that table. This keeps the file buildable on any platform and lets the
 * Linux protocol tests (tests/ane_protocol/) install a recording fake of the
 * whole Apple side in place of the real symbols.
 *
 * objc_msgSend is never called variadically (on arm64 variadic arguments go on
 * the stack, so a variadic call silently passes garbage). Instead the table
 * holds one slot per call signature the driver uses; on macOS every msg_* slot
 * holds the address of objc_msgSend cast to that signature, and a fake can
 * implement each signature as an ordinary typed C function.
 */
#ifndef ANE_SYMS_H
#define ANE_SYMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef void *ane_id;         /* any Objective-C object; CF objects are toll-free bridged */
typedef void *ane_class;      /* Class */
typedef void *ane_sel;        /* SEL */
typedef long ane_cfindex;     /* CFIndex */
#if defined(__APPLE__) && (defined(__x86_64__) || defined(__i386__))
typedef signed char ane_bool; /* BOOL on Intel */
#else
typedef bool ane_bool;        /* BOOL on arm64 */
#endif

/* Values of CoreFoundation enums the driver passes (stable ABI constants). */
#define ANE_CF_NUMBER_SINT64 4            /* kCFNumberSInt64Type */
#define ANE_CF_STRING_ENCODING_UTF8 0x08000100u /* kCFStringEncodingUTF8 */

typedef struct ane_syms {
    /* ---- libobjc */
    ane_class (*objc_getClass)(const char *name);
    ane_sel (*sel_registerName)(const char *name);
    void *(*objc_autoreleasePoolPush)(void);
    void (*objc_autoreleasePoolPop)(void *pool);

    /* ---- objc_msgSend, one slot per call signature */
    /* -hexStringIdentifier, -description, +defaultManager */
    ane_id (*msg0)(ane_id self, ane_sel op);
    /* -UTF8String */
    const char *(*msg_cstr)(ane_id self, ane_sel op);
    /* +inMemoryModelWithDescriptor:, +objectWithIOSurface:, +dataWithContentsOfFile: */
    ane_id (*msg1)(ane_id self, ane_sel op, ane_id a);
    /* +modelWithMILText:weights:optionsPlist: */
    ane_id (*msg3)(ane_id self, ane_sel op, ane_id a, ane_id b, ane_id c);
    /* +requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:procedureIndex: */
    ane_id (*msg7)(ane_id self, ane_sel op, ane_id a, ane_id b, ane_id c, ane_id d,
                   ane_id e, ane_id f, ane_id g);
    /* -compileWithQoS:options:error:, -loadWithQoS:options:error: */
    ane_bool (*msg_qos_opts_err)(ane_id self, ane_sel op, unsigned int qos, ane_id options,
                                 ane_id *error);
    /* -unloadWithQoS:error: */
    ane_bool (*msg_qos_err)(ane_id self, ane_sel op, unsigned int qos, ane_id *error);
    /* -evaluateWithQoS:options:request:error: */
    ane_bool (*msg_qos_opts_req_err)(ane_id self, ane_sel op, unsigned int qos, ane_id options,
                                     ane_id request, ane_id *error);
    /* -[NSData writeToFile:atomically:] */
    ane_bool (*msg_write)(ane_id self, ane_sel op, ane_id path, ane_bool atomically);
    /* -[NSFileManager removeItemAtPath:error:] */
    ane_bool (*msg_remove)(ane_id self, ane_sel op, ane_id path, ane_id *error);
    /* -[NSFileManager createDirectoryAtPath:withIntermediateDirectories:attributes:error:] */
    ane_bool (*msg_mkdir)(ane_id self, ane_sel op, ane_id path, ane_bool intermediate,
                          ane_id attributes, ane_id *error);

    /* ---- CoreFoundation (CFTypeRef = const void *) */
    const void *kCFTypeDictionaryKeyCallBacks;   /* address of the callbacks struct */
    const void *kCFTypeDictionaryValueCallBacks;
    const void *kCFTypeArrayCallBacks;
    ane_id (*CFDataCreate)(const void *allocator, const uint8_t *bytes, ane_cfindex length);
    ane_cfindex (*CFDataGetLength)(ane_id data);
    const uint8_t *(*CFDataGetBytePtr)(ane_id data);
    ane_id (*CFDictionaryCreateMutable)(const void *allocator, ane_cfindex capacity,
                                        const void *key_callbacks, const void *value_callbacks);
    void (*CFDictionarySetValue)(ane_id dict, const void *key, const void *value);
    ane_id (*CFNumberCreate)(const void *allocator, ane_cfindex type, const void *value);
    ane_id (*CFStringCreateWithCString)(const void *allocator, const char *cstr,
                                        uint32_t encoding);
    ane_id (*CFArrayCreate)(const void *allocator, const void **values, ane_cfindex count,
                            const void *callbacks);
    const void *(*CFRetain)(const void *cf);
    void (*CFRelease)(const void *cf);

    /* ---- IOSurface: property keys (the CFStringRef values) and functions */
    ane_id kIOSurfaceWidth;
    ane_id kIOSurfaceHeight;
    ane_id kIOSurfaceBytesPerElement;
    ane_id kIOSurfaceBytesPerRow;
    ane_id kIOSurfaceAllocSize;
    ane_id kIOSurfacePixelFormat;
    ane_id (*IOSurfaceCreate)(ane_id properties);
    int (*IOSurfaceLock)(ane_id surface, uint32_t options, uint32_t *seed);
    int (*IOSurfaceUnlock)(ane_id surface, uint32_t options, uint32_t *seed);
    void *(*IOSurfaceGetBaseAddress)(ane_id surface);
    size_t (*IOSurfaceGetAllocSize)(ane_id surface);

    /* ---- Foundation */
    ane_id (*NSTemporaryDirectory)(void); /* NSString, ends with '/' */
} ane_syms;

#ifdef ANEC_ANE_TESTING
/* Test hook: make the ane driver use `fake` (copied) instead of resolving the
   real frameworks; NULL goes back to real resolution. Compiled only with
   -DANEC_ANE_TESTING, never into the runtime extension. Also forgets the
   driver's process-wide state (temp-directory registry), so call it only when
   no ane program is alive. */
void ane_syms_install_fake(const ane_syms *fake);
#endif

#endif /* ANE_SYMS_H */
