/*
 * ane_foundation.c - the ane driver's plain helpers: error messages into the
 * caller's buffer, malloc'd strings, and the Foundation calls it makes (all
 * inside an autorelease pool): the text of an NSError, NSString <-> C
 * strings, and the file operations of NSFileManager and NSData (create
 * directories, write, read, copy and remove files) on its directories.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ane_driver.h"

void ane_set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}


char *ane_str_printf(const char *fmt, ...)
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

char *ane_str_dup(const char *s)
{
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d)
        memcpy(d, s, n + 1);
    return d;
}

/* The text of an NSError (its -description, which includes the domain, code
   and localized description), or a note that there was none. */
void ane_error_text(ane_ctx *c, ane_id error, char *buf, size_t n)
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
const char *ane_cstr(ane_ctx *c, ane_id str)
{
    return str ? c->S->msg_cstr(str, c->sel.utf8) : NULL;
}

/* +1 NSString from a C string. */
ane_id ane_nsstr(ane_ctx *c, const char *s)
{
    return c->S->CFStringCreateWithCString(NULL, s, ANE_CF_STRING_ENCODING_UTF8);
}

ane_id ane_file_manager(ane_ctx *c)
{
    return c->S->msg0(c->cls[C_FILEMANAGER], c->sel.default_manager);
}

int ane_make_dirs(ane_ctx *c, const char *path, char *err, size_t errlen)
{
    const ane_syms *S = c->S;
    ane_id p = ane_nsstr(c, path), e = NULL;
    ane_id fm = ane_file_manager(c);
    ane_bool ok = p && fm && S->msg_mkdir(fm, c->sel.mkdir, p, 1, NULL, &e);
    if (p)
        S->CFRelease(p);
    if (!ok) {
        char why[512];
        ane_error_text(c, e, why, sizeof why);
        ane_set_err(err, errlen, "cannot create directory %s: %s", path, why);
        return ANEC_EIO;
    }
    return ANEC_OK;
}

int ane_write_data(ane_ctx *c, ane_id data, const char *path, char *err, size_t errlen)
{
    const ane_syms *S = c->S;
    ane_id p = ane_nsstr(c, path);
    ane_bool ok = p && S->msg_write(data, c->sel.write, p, 1);
    if (p)
        S->CFRelease(p);
    if (!ok) {
        ane_set_err(err, errlen, "cannot write %s", path);
        return ANEC_EIO;
    }
    return ANEC_OK;
}

int ane_copy_file(ane_ctx *c, const char *from, const char *to, char *err, size_t errlen)
{
    const ane_syms *S = c->S;
    ane_id p = ane_nsstr(c, from);
    ane_id data = p ? S->msg1(c->cls[C_DATA], c->sel.data_with_file, p) : NULL;
    if (p)
        S->CFRelease(p);
    if (!data) {
        ane_set_err(err, errlen, "cannot read %s", from);
        return ANEC_EIO;
    }
    return ane_write_data(c, data, to, err, errlen);
}

void ane_remove_path(ane_ctx *c, const char *path)
{
    const ane_syms *S = c->S;
    ane_id p = ane_nsstr(c, path), e = NULL;
    ane_id fm = ane_file_manager(c);
    if (p && fm)
        (void)S->msg_remove(fm, c->sel.remove, p, &e);
    if (p)
        S->CFRelease(p);
}


/* NSData of a file (autoreleased), or NULL. */
ane_id ane_read_data(ane_ctx *c, const char *path)
{
    ane_id p = ane_nsstr(c, path);
    ane_id data = p ? c->S->msg1(c->cls[C_DATA], c->sel.data_with_file, p) : NULL;
    if (p)
        c->S->CFRelease(p);
    return data;
}
