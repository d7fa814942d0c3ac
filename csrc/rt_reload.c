/*
 * rt_reload.c - delta reload: new weights for a compiled program.
 *
 * Weights are baked at compile time (ANE-BAKED-WEIGHTS: rewriting weights/
 * and loading again changes nothing), so a reload must use a strategy that
 * reaches the device, never "rewrite weights/ and load again". Which of the
 * no-compile strategies a device honours is not settled by public evidence
 * (see `anec constraints` for each id), so each is used only where this
 * machine verified it (anec_runtime.verified: the sim by its own device
 * model, a Mac by `python -m anec.selftest`):
 *
 *   data-patch  the program's weights are one BLOBFILE and its compiled data
 *               was observed (right after the compile) to be byte-identical
 *               to it (ANE-DATA-IS-BLOBFILE): unload the SAME model object,
 *               write the new BLOBFILE as its compiled data, load it again.
 *               No public test covers this (ANE-SAME-OBJECT-PATCH).
 *   new-object  the same precondition; a NEW model object built from the
 *               same MIL and the new weights, never compiled, gets the
 *               compiled network and the new BLOBFILE as its data (a clone,
 *               then patch_data, before its first load), is loaded, and the
 *               program switches to it; the old object is released. The
 *               path Orion's delta test exercises (ANE-NEW-OBJECT-LOAD).
 *   recompile   compile the program again with the new files (one compile
 *               of the process budget), then switch the program to it.
 *   inputs      weights compiled as program inputs: anec_reload_inputs
 *               (rt_eval.c) writes the surfaces; nothing here.
 *
 * In auto mode a program uses data-patch if verified (it keeps its object and
 * directory), else new-object if verified, else recompile; a strategy that is
 * not verified is used only when forced (anec_reload_weights_using, for the
 * probes that verify them).
 *
 * Every reload validates all blobs first; files whose bytes do not change are
 * skipped (a reload that changes nothing costs nothing); on any failure the
 * old weights stay in use.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt_files.h"
#include "rt_internal.h"

static int validate(const anec_program *p, const anec_blob *blobs, size_t n);

int rt_reload_strategy(const anec_program *p, char *why, size_t whylen)
{
    unsigned v = p->rt->verified;
    if (p->patchable && (v & ANEC_RELOAD_DATA_PATCH)) {
        snprintf(why, whylen, "data patch: the weights are one BLOBFILE that the compiled data equals, and "
                 "patching the same model object is verified for the %s driver", p->rt->drv->name);
        return ANEC_RELOAD_DATA_PATCH;
    }
    if (p->patchable && (v & ANEC_RELOAD_NEW_OBJECT)) {
        snprintf(why, whylen, "new object: the weights are one BLOBFILE that the compiled data equals, and "
                 "loading a new model object with the new data is verified for the %s driver (patching the "
                 "same object is not)", p->rt->drv->name);
        return ANEC_RELOAD_NEW_OBJECT;
    }
    if (p->patchable)
        snprintf(why, whylen, "recompile: data patching and new model objects are not verified on this "
                 "machine (run `python -m anec.selftest` on it)");
    else if (p->n_files == 0)
        snprintf(why, whylen, "recompile: the program has no weight files");
    else if (p->n_files > 1)
        snprintf(why, whylen, "recompile: the weights are %zu BLOBFILEs and a data patch needs one (compile with "
                 "--pack-weights), or compile the weights as program inputs", p->n_files);
    else
        snprintf(why, whylen, "recompile: the compiled data is not the program's BLOBFILE (the device keeps "
                 "several tensors in an opaque form); compile the weights as program inputs to reload without "
                 "compiles");
    return ANEC_RELOAD_RECOMPILE;
}

int anec_program_reload_info(const anec_program *p, anec_reload_info *out)
{
    if (!out)
        return rt_fail(ANEC_EINVAL, "NULL argument");
    int rc = rt_enter((anec_program *)p);
    if (rc != ANEC_OK)
        return rc;
    memset(out, 0, sizeof *out);
    out->strategy = rt_reload_strategy(p, out->why, sizeof out->why);
    out->data_patchable = p->patchable;
    out->verified = p->rt->verified;
    pthread_mutex_unlock((pthread_mutex_t *)&p->lock);
    return ANEC_OK;
}

int rt_reload_validate(const anec_program *p, const anec_blob *blobs, size_t n) { return validate(p, blobs, n); }

size_t rt_reload_changes(const anec_program *p, const anec_blob *blobs, size_t n)
{
    size_t changed = 0;
    for (size_t i = 0; i < n; i++)
        changed += !rt_file_equals(p->dir->path, rt_rel_path(blobs[i].path), blobs[i].data, blobs[i].len);
    return changed;
}

/* Validate every blob against the program before anything is touched. */
static int validate(const anec_program *p, const anec_blob *blobs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!blobs[i].path || (!blobs[i].data && blobs[i].len))
            return rt_fail(ANEC_EINVAL, "reload: blob %zu has no path or data", i);
        int known = 0;
        for (size_t k = 0; k < p->n_files; k++)
            known |= strcmp(p->files[k], blobs[i].path) == 0;
        if (!known) {
            char list[1024] = "";
            for (size_t k = 0; k < p->n_files && strlen(list) < sizeof list - 200; k++) {
                strncat(list, k ? ", " : "", sizeof list - strlen(list) - 1);
                strncat(list, p->files[k], sizeof list - strlen(list) - 1);
            }
            return rt_fail(ANEC_EWEIGHTS, "reload: %s is not a weight file of this program (its files: %s)",
                           blobs[i].path, p->n_files ? list : "none");
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(blobs[i].path, blobs[j].path) == 0)
                return rt_fail(ANEC_EINVAL, "reload: weight file %s is given twice", blobs[i].path);
        int rc = rt_check_blob(p, &blobs[i], 1, "reload");
        if (rc != ANEC_OK)
            return rc;
    }
    return ANEC_OK;
}

/* Stop being the cache's donor: the compiled form is about to change. Another
   open program with the donor's weights takes the role. */
static void leave_cache(anec_program *p)
{
    anec_runtime *rt = p->rt;
    pthread_mutex_lock(&rt->lock);
    cache_entry *e = rt_cache_find(rt, p->key);
    if (e && e->donor == p) {
        e->donor = NULL;
        /* (an identity not computed yet is not computed now: the entry just loses its donor) */
        for (anec_program *q = rt->progs; q && !e->donor && !e->stale; q = q->next)
            if (q != p && !q->closed && q->content_known == 1 && memcmp(q->key, e->key, 32) == 0 &&
                memcmp(q->content, e->content, 32) == 0)
                e->donor = q;
    }
    pthread_mutex_unlock(&rt->lock);
}

/* After a reload: p serves later cache hits with its new weights when no one else does. */
static void rejoin_cache(anec_program *p)
{
    anec_runtime *rt = p->rt;
    pthread_mutex_lock(&rt->lock);
    cache_entry *e = rt_cache_find(rt, p->key);
    if (e && !e->donor && !e->tmpl && p->content_known >= 0) {
        e->donor = p;
        memcpy(e->content, p->content, 32);
        e->stale = p->content_known == 0;
        e->patchable = p->patchable;
    }
    pthread_mutex_unlock(&rt->lock);
}

/* p's weights change (a data patch, or a recompile into a private
   directory): their identity (the cache's SHA-256 of the weight bytes) is
   computed from its files only if a cache lookup needs it (rt_cache_content),
   not on every reload. `coherent` 0: its files may not be
   what the device holds, so it never serves the cache again. p->lock held;
   rt->lock guards readers. */
static void forget_content(anec_program *p, int coherent)
{
    pthread_mutex_lock(&p->rt->lock);
    p->content_known = coherent ? 0 : -1;
    pthread_mutex_unlock(&p->rt->lock);
}

/* p->dir shared with other programs: move p onto a private copy (same
   compiled form, hard links) before anything in it changes. */
static int privatize(anec_program *p)
{
    anec_runtime *rt = p->rt;
    int rc = ANEC_OK;
    pthread_mutex_lock(&rt->lock);
    if (p->dir->refs > 1) {
        rt_dir *nd = rt_dir_copy(rt, p->dir);
        void *np = NULL;
        char err[RT_ERR_LEN] = "";
        if (!nd) {
            rc = ANEC_EIO;
        } else if ((rc = rt->drv->clone(rt->ctx, p->dprog, nd->path, &np, err, sizeof err)) != ANEC_OK) {
            rt_fail(rc, "reload: %s", err);
            rt_dir_release(rt, nd);
        } else {
            rt_dir *old = p->dir;
            if ((rc = rt_set_dir(p, nd)) != ANEC_OK) {
                rt->drv->release(rt->ctx, np);
                rt_dir_release(rt, nd);
            } else {
                rt_unload_locked(p);
                rt->drv->release(rt->ctx, p->dprog);
                rt_dir_release(rt, old);
                p->dprog = np;
            }
        }
    }
    if (rc == ANEC_OK)
        p->dir->shareable = 0;
    pthread_mutex_unlock(&rt->lock);
    return rc;
}

/* The spare of a program's weight file: the file it replaced at its last data
   patch, kept to be written over at the next one (writing over existing pages
   allocates and frees nothing, where a new file allocates its pages and the
   replaced one frees them). One per program directory at most (a data patch
   needs one weight file); removed with the directory. */
static char *spare_name(const char *path)
{
    size_t n = strlen(path) + sizeof ".spare";
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s.spare", path);
    return s;
}

/* After a data patch: the replaced file (now only at backup) becomes the
   spare, unless another name still links it (then it is only removed). */
static void keep_spare(const char *path, const char *backup)
{
    struct stat st;
    char *spare = spare_name(path);
    if (!spare || lstat(backup, &st) || !S_ISREG(st.st_mode) || st.st_nlink != 1 || rename(backup, spare))
        unlink(backup);
    free(spare);
}

/* The new weight file is written (and fsynced) at tmp: put it in place of
   path with a backup link, make its bytes the compiled data, load again. On
   failure the old file and compiled data stay. */
static int put_in_place(anec_program *p, const char *path, const char *tmp, const char *rel, const uint8_t *bytes,
                        size_t len, int was_loaded)
{
    anec_runtime *rt = p->rt;
    char *backup = rt_temp_name(path);
    if (!backup) {
        unlink(tmp);
        return rt_fail(ANEC_ENOMEM, "out of memory");
    }
    int rc = ANEC_OK;
    int have_backup = link(path, backup) == 0;
    if (rename(tmp, path)) {
        rc = rt_fail(ANEC_EIO, "reload: rename to %s failed: %s; the old weights stay in use", path, strerror(errno));
        unlink(tmp);
        if (have_backup)
            unlink(backup);
        goto out;
    }
    rt_unload_locked(p);
    char err[RT_ERR_LEN] = "";
    /* the file holds the new bytes: the driver links them as the compiled data */
    rc = rt->drv->patch_data(rt->ctx, p->dprog, rel, bytes, len, 1, err, sizeof err);
    if (rc != ANEC_OK) {
        forget_content(p, have_backup && rename(backup, path) == 0);
        rt_fail(rc, "reload: %s; the old weights stay in use", err);
        if (was_loaded)
            rt_load_locked(p); /* the driver left the old compiled data in place */
        goto out;
    }
    forget_content(p, 1); /* the device holds these weights even if the load fails */
    if (have_backup)
        keep_spare(path, backup);
    rt_fsync_dir(p->dir->path);
    if (was_loaded)
        rc = rt_load_locked(p);
out:
    free(backup);
    return rc;
}

/* Map the written file tmp read-only (*m, *len); on failure tmp is removed and the error set. */
static int map_written(const char *tmp, void **m, size_t *len)
{
    int fd = open(tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    *m = MAP_FAILED;
    *len = 0;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0) {
        *len = (size_t)st.st_size;
        *m = mmap(NULL, *len, PROT_READ, MAP_SHARED, fd, 0);
    }
    int saved = errno;
    if (fd >= 0)
        close(fd);
    if (*m != MAP_FAILED)
        return ANEC_OK;
    unlink(tmp);
    return rt_fail(ANEC_EIO, "reload: cannot map %s: %s; the old weights stay in use", tmp, strerror(saved));
}

/* put_in_place with the bytes of the written file mapped (a driver that
   copies the new compiled data reads them from there). */
static int put_in_place_mapped(anec_program *p, const char *path, const char *tmp, const char *rel, int was_loaded)
{
    void *m;
    size_t len;
    if (map_written(tmp, &m, &len) != ANEC_OK)
        return ANEC_EIO;
    int rc = put_in_place(p, path, tmp, rel, m, len, was_loaded);
    munmap(m, len);
    return rc;
}

static int data_patch(anec_program *p, const anec_blob *b, int was_loaded)
{
    int rc = privatize(p);
    if (rc != ANEC_OK)
        return rc;
    const char *rel = rt_rel_path(b->path);
    char *path = rt_join(p->dir->path, rel);
    char *tmp = path ? spare_name(path) : NULL; /* written over when it can be */
    char why[1024];
    if (!path || !tmp)
        rc = rt_fail(ANEC_ENOMEM, "out of memory");
    else if (rt_write_temp(tmp, b->data, b->len, 1, why, sizeof why)) /* the core's copy of the file first */
        rc = rt_fail(ANEC_EIO, "reload: %s; the old weights stay in use", why);
    else
        rc = put_in_place(p, path, tmp, rel, b->data, b->len, was_loaded);
    free(path);
    free(tmp);
    return rc;
}

/* new-object: a NEW model object for the new weights, never compiled, in a
   private copy of p's directory holding the new weight file: the driver
   clones p's compiled network for it and patches its data before its first
   load; once it is loaded (if p was), p switches to it and the old object is
   released. On any failure the old object and directory stay. */
static int new_object(anec_program *p, const anec_blob *b, int was_loaded)
{
    anec_runtime *rt = p->rt;
    const char *rel = rt_rel_path(b->path);
    char err[RT_ERR_LEN] = "";
    char why[1024];
    void *np = NULL;
    pthread_mutex_lock(&rt->lock);
    rt_dir *nd = rt_dir_copy(rt, p->dir);
    pthread_mutex_unlock(&rt->lock);
    if (!nd)
        return ANEC_EIO; /* (message set) */
    char *path = rt_join(nd->path, rel);
    int rc = ANEC_OK;
    uint64_t t0 = rt_now_ns();
    if (!path)
        rc = rt_fail(ANEC_ENOMEM, "out of memory");
    else if (rt_write_atomic(path, b->data, b->len, why, sizeof why)) /* replaces the link to the old file */
        rc = rt_fail(ANEC_EIO, "reload: %s; the old weights stay in use", why);
    else if ((rc = rt->drv->clone(rt->ctx, p->dprog, nd->path, &np, err, sizeof err)) != ANEC_OK)
        rt_fail(rc, "reload (new object): %s; the old weights stay in use", err);
    else if ((rc = rt->drv->patch_data(rt->ctx, np, rel, b->data, b->len, 1, err, sizeof err)) != ANEC_OK)
        rt_fail(rc, "reload (new object): %s; the old weights stay in use", err);
    else if (was_loaded && (rc = rt->drv->load(rt->ctx, np, err, sizeof err)) != ANEC_OK)
        rt_fail(rc, "reload (new object): %s; the old weights stay in use", err);
    free(path);
    if (rc == ANEC_OK && was_loaded)
        rt_count_load(p, t0);
    pthread_mutex_lock(&rt->lock);
    rt_dir *old = p->dir;
    if (rc == ANEC_OK && (rc = rt_set_dir(p, nd)) == ANEC_OK) {
        rt_unload_locked(p); /* the old object */
        rt->drv->release(rt->ctx, p->dprog);
        rt_dir_release(rt, old);
        p->dprog = np;
        p->loaded = was_loaded;
    } else {
        if (np)
            rt->drv->release(rt->ctx, np);
        rt_dir_release(rt, nd);
    }
    pthread_mutex_unlock(&rt->lock);
    if (rc == ANEC_OK)
        forget_content(p, 1); /* the new directory holds exactly what the new object computes with */
    return rc;
}

/* new_object with the bytes of the written file tmp (removed after). */
static int new_object_mapped(anec_program *p, const char *tmp, int was_loaded)
{
    void *m;
    size_t len;
    if (map_written(tmp, &m, &len) != ANEC_OK)
        return ANEC_EIO;
    unlink(tmp);
    anec_blob b = {p->files[0], m, len};
    int rc = new_object(p, &b, was_loaded);
    munmap(m, len);
    return rc;
}

static int recompile(anec_program *p, const anec_blob *blobs, size_t n, int was_loaded)
{
    anec_runtime *rt = p->rt;
    /* the whole new file set: given files, the others as they are now */
    anec_blob *full = calloc(p->n_files + 1, sizeof *full);
    uint8_t **owned = calloc(p->n_files + 1, sizeof *owned);
    int rc = full && owned ? ANEC_OK : rt_fail(ANEC_ENOMEM, "out of memory");
    for (size_t k = 0; rc == ANEC_OK && k < p->n_files; k++) {
        full[k].path = p->files[k];
        for (size_t i = 0; i < n; i++)
            if (strcmp(blobs[i].path, p->files[k]) == 0) {
                full[k].data = blobs[i].data;
                full[k].len = blobs[i].len;
            }
        if (!full[k].data) {
            char why[512];
            if (rt_read_beneath(p->dir->path, rt_rel_path(p->files[k]), RT_MAX_FILE_BYTES, &owned[k], &full[k].len,
                                why, sizeof why))
                rc = rt_fail(ANEC_EIO, "reload: cannot read the program's weight file: %s", why);
            full[k].data = owned[k];
        }
    }
    uint64_t t0 = rt_now_ns();
    int compiled = 0;
    if (rc == ANEC_OK) {
        pthread_mutex_lock(&rt->lock);
        if (rt->closed) {
            rc = rt_fail(ANEC_ESTATE, "the runtime is closed");
        } else if ((rc = rt_budget_reserve(rt)) != ANEC_OK) {
            char why[256];
            rt_reload_strategy(p, why, sizeof why);
            char msg[RT_ERR_LEN];
            snprintf(msg, sizeof msg, "%s", anec_last_error(NULL));
            rt_fail(rc, "%s. This program reloads by compiling again (%s)", msg, why);
        } else {
            /* a private directory: the new weights are not hashed (see forget_content) */
            rt_dir *nd = rt_dir_populate(rt, p->key, NULL, p->mil, p->mil_len, full, p->n_files);
            void *np = NULL;
            char err[RT_ERR_LEN] = "";
            if (!nd) {
                rc = ANEC_EIO;
            } else {
                anec_compile_args args = {p->mil, p->mil_len, full, p->n_files, nd->path, p->limits};
                rc = rt->drv->compile(rt->ctx, &args, &np, err, sizeof err);
                if (rc != ANEC_OK)
                    rt_fail(rc, "reload (recompile): %s; the old weights stay in use", err);
            }
            rt_dir *old = p->dir;
            if (rc != ANEC_OK) {
                rt_budget_release(rt);
                rt_dir_release(rt, nd);
            } else if ((rc = rt_set_dir(p, nd)) != ANEC_OK) {
                rt->drv->release(rt->ctx, np); /* the compile is spent */
                rt_dir_release(rt, nd);
            } else {
                compiled = 1;
                cache_entry *e = rt_cache_find(rt, p->key);
                if (e)
                    e->mixed = 1; /* this key is compiled with other weights now (see cache_entry) */
                rt_unload_locked(p);
                rt->drv->release(rt->ctx, p->dprog);
                rt_dir_release(rt, old);
                p->dprog = np;
                p->patchable = rt_observe_patchable(rt, np, full, p->n_files, p->n_files);
                p->content_known = 0;
            }
        }
        pthread_mutex_unlock(&rt->lock);
    }
    for (size_t k = 0; owned && k < p->n_files; k++)
        free(owned[k]);
    free(owned);
    free(full);
    if (compiled) {
        struct anec_stats d = {0};
        d.compiles = 1;
        d.ns_compile = rt_now_ns() - t0;
        rt_count(rt, &d);
        p->st.compiles++;
        p->st.ns_compile += d.ns_compile;
        if (was_loaded)
            rc = rt_load_locked(p);
    }
    return rc;
}

/* A reload that succeeded, in the runtime's and p's counters (p->lock held). */
static void count_reload(anec_program *p, uint64_t t0, size_t n_changed, int strategy)
{
    struct anec_stats d = {0};
    d.reloads = 1;
    d.blobs_patched = n_changed;
    d.ns_reload = rt_now_ns() - t0;
    if (n_changed) {
        d.reloads_data_patch = strategy == ANEC_RELOAD_DATA_PATCH;
        d.reloads_recompile = strategy == ANEC_RELOAD_RECOMPILE;
        d.reloads_new_object = strategy == ANEC_RELOAD_NEW_OBJECT;
    }
    rt_count(p->rt, &d);
    p->st.reloads++;
    p->st.blobs_patched += n_changed;
    p->st.ns_reload += d.ns_reload;
    p->st.reloads_data_patch += d.reloads_data_patch;
    p->st.reloads_recompile += d.reloads_recompile;
    p->st.reloads_new_object += d.reloads_new_object;
}

static int reload(anec_program *p, const anec_blob *blobs, size_t n, int forced)
{
    if (!p)
        return rt_fail(ANEC_EINVAL, "NULL program");
    if (!blobs && n)
        return rt_fail(ANEC_EINVAL, "anec_reload_weights: NULL blob array");
    if (forced != ANEC_RELOAD_AUTO && forced != ANEC_RELOAD_DATA_PATCH && forced != ANEC_RELOAD_RECOMPILE &&
        forced != ANEC_RELOAD_NEW_OBJECT)
        return rt_fail(ANEC_EINVAL, "reload strategy %d is not data-patch (%d), new-object (%d) or recompile (%d)",
                       forced, ANEC_RELOAD_DATA_PATCH, ANEC_RELOAD_NEW_OBJECT, ANEC_RELOAD_RECOMPILE);
    int rc = rt_enter(p);
    if (rc != ANEC_OK)
        return rc;
    uint64_t t0 = rt_now_ns();
    rc = validate(p, blobs, n);
    char why[256];
    int strategy = forced ? forced : rt_reload_strategy(p, why, sizeof why);
    if (rc == ANEC_OK && (strategy == ANEC_RELOAD_DATA_PATCH || strategy == ANEC_RELOAD_NEW_OBJECT) &&
        !p->patchable) {
        rt_reload_strategy(p, why, sizeof why);
        rc = rt_fail(ANEC_EINVAL, "reload: this program cannot be %s (%s)",
                     strategy == ANEC_RELOAD_DATA_PATCH ? "data-patched" : "reloaded by a new object", why);
    }
    size_t n_changed = 0;
    const anec_blob *last = NULL;
    for (size_t i = 0; rc == ANEC_OK && i < n; i++)
        if (!rt_file_equals(p->dir->path, rt_rel_path(blobs[i].path), blobs[i].data, blobs[i].len)) {
            n_changed++;
            last = &blobs[i];
        }
    int was_loaded = p->loaded;
    if (rc == ANEC_OK && n_changed) {
        leave_cache(p);
        rc = strategy == ANEC_RELOAD_DATA_PATCH   ? data_patch(p, last, was_loaded)
             : strategy == ANEC_RELOAD_NEW_OBJECT ? new_object(p, last, was_loaded)
                                                  : recompile(p, blobs, n, was_loaded);
        if (p->dprog)
            rejoin_cache(p);
    }
    if (rc == ANEC_OK)
        count_reload(p, t0, n_changed, strategy);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

int anec_reload_weights(anec_program *p, const anec_blob *blobs, size_t n_blobs)
{
    return reload(p, blobs, n_blobs, ANEC_RELOAD_AUTO);
}

int anec_reload_weights_using(anec_program *p, const anec_blob *blobs, size_t n_blobs, int strategy)
{
    if (strategy == ANEC_RELOAD_AUTO)
        return rt_fail(ANEC_EINVAL, "anec_reload_weights_using: name a strategy (data-patch, new-object or "
                       "recompile)");
    return reload(p, blobs, n_blobs, strategy);
}

/* The data patch from arrays: the new file is built by rt_patch.c straight
   from them, compared first (nothing changes when every payload is the same),
   then written beside the old one and put in place like any data patch. */
int anec_reload_arrays(anec_program *p, const char *path, const anec_weight_array *arrays, size_t n, long long *bad)
{
    if (bad)
        *bad = -1;
    if (!p || !path || (!arrays && n))
        return rt_fail(ANEC_EINVAL, "anec_reload_arrays: NULL argument");
    rt_patch_region stack[16], *r = n <= 16 ? stack : calloc(n, sizeof *r);
    if (!r)
        return rt_fail(ANEC_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        r[i] = (rt_patch_region){.record = arrays[i].record, .data = arrays[i].data, .count = arrays[i].count,
                                 .src_dtype = arrays[i].dtype, .index = i};
        if ((!r[i].data && r[i].count) || (r[i].src_dtype != ANEC_DTYPE_FP16 && r[i].src_dtype != ANEC_DTYPE_FP32)) {
            if (r != stack)
                free(r);
            return rt_fail(ANEC_EINVAL, "anec_reload_arrays: array %zu has no data or is not fp16/fp32", i);
        }
    }
    int rc = rt_enter(p);
    if (rc != ANEC_OK) {
        if (r != stack)
            free(r);
        return rc;
    }
    uint64_t t0 = rt_now_ns();
    char why[1024];
    const char *rel = rt_weight_path(path);
    int fd = -1, changed = 0;
    uint64_t len = 0;
    size_t refused = (size_t)-1;
    int strategy = rt_reload_strategy(p, why, sizeof why);
    if (strategy != ANEC_RELOAD_DATA_PATCH && strategy != ANEC_RELOAD_NEW_OBJECT)
        rc = rt_fail(ANEC_EINVAL, "anec_reload_arrays: this program does not reload by data patch or new object "
                     "(%s); use anec_reload_weights", why);
    else if (!rel || p->n_files != 1 || strcmp(p->files[0], path) != 0)
        rc = rt_fail(ANEC_EWEIGHTS, "reload: %s is not the weight file of this program (%s)", path, p->files[0]);
    for (size_t i = 0; i < n && rc == ANEC_OK; i++) { /* only the blobs the program declares */
        int known = 0;
        for (size_t k = 0; k < p->n_refs && !known; k++)
            known = strcmp(p->refs_tab[k].path, path) == 0 && p->refs_tab[k].offset == r[i].record;
        if (!known)
            rc = rt_fail(ANEC_EWEIGHTS, "reload: no const of this program reads %s at offset %llu", path,
                         (unsigned long long)r[i].record);
    }
    if (rc == ANEC_OK && (rc = rt_patch_open(p->dir->path, rel, r, n, &fd, &len, why, sizeof why)) != ANEC_OK)
        rt_fail(rc, "reload: %s; the old weights stay in use", why);
    if (rc == ANEC_OK && (rc = rt_patch_changes(fd, r, n, &changed, &refused, why, sizeof why)) != ANEC_OK)
        rt_fail(rc, "reload: %s; the old weights stay in use", why);
    int was_loaded = p->loaded;
    if (rc == ANEC_OK && changed) {
        leave_cache(p);
        int patch = strategy == ANEC_RELOAD_DATA_PATCH;
        if (patch)
            rc = privatize(p); /* (the old file is open: a private copy holds the same bytes) */
        char *dest = rc == ANEC_OK ? rt_join(p->dir->path, rel) : NULL;
        /* the spare is written over when it can be; a new object's file goes to its own directory */
        char *tmp = dest ? (patch ? spare_name(dest) : rt_temp_name(dest)) : NULL;
        if (rc == ANEC_OK && !tmp)
            rc = rt_fail(ANEC_ENOMEM, "out of memory");
        if (rc == ANEC_OK && (rc = rt_patch_write(fd, len, r, n, tmp, &refused, why, sizeof why)) != ANEC_OK)
            rt_fail(rc, "reload: %s; the old weights stay in use", why);
        if (rc == ANEC_OK)
            rc = patch ? put_in_place_mapped(p, dest, tmp, rel, was_loaded) : new_object_mapped(p, tmp, was_loaded);
        free(dest);
        free(tmp);
        if (p->dprog)
            rejoin_cache(p);
    }
    if (fd >= 0)
        close(fd);
    if (rc == ANEC_OK)
        count_reload(p, t0, changed, strategy);
    else if (bad && refused != (size_t)-1)
        *bad = (long long)refused;
    pthread_mutex_unlock(&p->lock);
    if (r != stack)
        free(r);
    return rc;
}
