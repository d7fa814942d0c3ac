/*
 * ane_hexdirs.c - the ane driver's shared hexId directories and the compiled
 * form (net.plist + data) each holds.
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
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ane_driver.h"

static ane_dir *g_dirs;

ane_dir *ane_dir_acquire(const char *path)
{
    ane_dir *d;
    pthread_mutex_lock(&ane_lock);
    for (d = g_dirs; d; d = d->next)
        if (strcmp(d->path, path) == 0)
            break;
    if (d) {
        d->refs++;
    } else if ((d = calloc(1, sizeof *d)) && (d->path = ane_str_dup(path))) {
        d->refs = 1;
        pthread_mutex_init(&d->use, NULL);
        d->next = g_dirs;
        g_dirs = d;
    } else {
        free(d);
        d = NULL;
    }
    pthread_mutex_unlock(&ane_lock);
    return d;
}

/* Drop one reference; the last one removes the directory from disk. */
void ane_dir_release(ane_ctx *c, ane_dir *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&ane_lock);
    if (--d->refs > 0) {
        pthread_mutex_unlock(&ane_lock);
        return;
    }
    ane_dir **pp = &g_dirs;
    while (*pp && *pp != d)
        pp = &(*pp)->next;
    if (*pp)
        *pp = d->next;
    /* Removed under the lock: a program acquiring the same path meanwhile
       gets a fresh entry only after the old directory is gone. */
    ane_remove_path(c, d->path);
    pthread_mutex_unlock(&ane_lock);
    pthread_mutex_destroy(&d->use);
    free(d->path);
    free(d);
}

#ifdef ANEC_ANE_TESTING
void ane_dirs_forget(void)
{
    while (g_dirs) {
        ane_dir *d = g_dirs;
        g_dirs = d->next;
        pthread_mutex_destroy(&d->use);
        free(d->path);
        free(d);
    }
}
#endif

/* ---- the compiled form: net.plist + data --------------------------------- */

static const char *const k_compiled[2] = {"net.plist", "data"};

/* Copy file `name` from directory `from` to directory `to`. */
int ane_copy_named(ane_ctx *c, const char *from, const char *to, const char *name, char *err,
                      size_t errlen)
{
    char *a = ane_str_printf("%s/%s", from, name), *b = ane_str_printf("%s/%s", to, name);
    int rc = (a && b) ? ane_copy_file(c, a, b, err, errlen) : ANEC_ENOMEM;
    if (rc == ANEC_ENOMEM)
        ane_set_err(err, errlen, "out of memory");
    free(a);
    free(b);
    return rc;
}

/* Copy the compiled form (net.plist, data) between directories. */
int ane_copy_compiled(ane_ctx *c, const char *from, const char *to, char *err, size_t errlen)
{
    int rc = ANEC_OK;
    for (int i = 0; i < 2 && rc == ANEC_OK; i++)
        rc = ane_copy_named(c, from, to, k_compiled[i], err, errlen);
    return rc;
}

/* Where p's compiled form is now (caller holds p->dir->use): the hexId
   directory while p owns it, else p's own copy in its program directory. */
const char *ane_compiled_home(const ane_prog *p)
{
    return p->dir->owner == p ? p->dir->path : p->src;
}

/* Make the hexId directory hold p's compiled form and weight files (caller
   holds p->dir->use). A previous owner without its own copy keeps one first. */
int ane_claim_dir(ane_ctx *c, ane_prog *p, char *err, size_t errlen)
{
    ane_dir *d = p->dir;
    if (d->owner == p)
        return ANEC_OK;
    ane_prog *o = d->owner;
    int rc = ANEC_OK;
    if (o && !o->own_copy) {
        rc = ane_copy_compiled(c, d->path, o->src, err, errlen);
        if (rc != ANEC_OK)
            return rc;
        o->own_copy = 1;
    }
    d->owner = NULL;
    /* a directory the framework named but nothing compiled in (a clone whose
       hexId covers its weight values) gets the program's files first */
    char *wdir = ane_str_printf("%s/weights", d->path), *mil = ane_str_printf("%s/model.mil", d->path);
    rc = wdir && mil ? ane_make_dirs(c, wdir, err, errlen) : ANEC_ENOMEM;
    if (rc == ANEC_OK)
        rc = ane_write_data(c, p->mil, mil, err, errlen);
    free(wdir);
    free(mil);
    if (rc == ANEC_OK)
        rc = ane_copy_compiled(c, p->src, d->path, err, errlen);
    /* the weight files too: a device that re-reads weights/ at load sees the same weights */
    for (size_t i = 0; rc == ANEC_OK && i < p->n_rel; i++)
        rc = ane_copy_named(c, p->src, d->path, p->rel[i], err, errlen);
    if (rc == ANEC_OK)
        d->owner = p;
    return rc;
}
