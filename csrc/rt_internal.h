/*
 * rt_internal.h - the runtime core's shared structures (internal).
 *
 * The core owns every decision that must not differ between the sim and the
 * device, and hands drivers only device calls (anec_driver.h). It names no
 * driver: it reaches them through the driver table (rt_drivers.c).
 *
 *   rt_drivers.c      the driver table ("auto" order, lookup, resets)
 *   rt_runtime.c      runtimes: open, shutdown, close; program struct refs
 *   rt_compile.c      anec_compile: describe, directory, cache hit or compile
 *   rt_describe.c     I/O binding tables and weight consts from the MIL
 *   rt_cache.c        cache keys, weight content hashes, cache entries
 *   rt_budget.c       compile budget per process and driver, runtime caps
 *   rt_surfaces.c     surfaces: sizing, CPU locks, host <-> surface copies (whole, rows)
 *   rt_program.c      load, unload, close, free, introspection
 *   rt_eval.c         evaluation: anec_run, anec_call, anec_evaluate, anec_write_input_slice
 *   rt_input_views.c  fp16 conversions and anec_reload_input_views
 *   rt_stats.c        counters, anec_stats, anec_program_stats
 *   rt_status.c       rt_fail / anec_last_error, status names, the clock
 *   rt_dir.c          program directories (refcounted, shared by identical programs)
 *   rt_reload.c       delta reload and the choice of a reload strategy
 *
 * Locking: every program has a mutex that serializes every call on it; the
 * runtime has `lock` for its structures (directories, cache, program list)
 * and `st_lock` for its counters. Order: a program's lock before the
 * runtime's; the runtime's lock is never held while waiting for a program.
 * `lock` is held across driver compiles (compiles in one runtime are
 * serialized, like the device's compiler service), never across evaluations.
 */
#ifndef ANEC_RT_INTERNAL_H
#define ANEC_RT_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "anec_driver.h"
#include "anec_rt.h"

#define RT_ERR_LEN 4096
/* Upper bound of any weight file the core reads back from its own
   directories (hostile-input defence; far above any ANE program). */
#define RT_MAX_FILE_BYTES (1ull << 36)

typedef struct rt_dir {
    struct rt_dir *next;
    char *path;
    uint8_t key[32];
    uint8_t content[32];         /* hash of the weight bytes it holds */
    int shareable;               /* 0 once a reload changed its files */
    int refs;
    char **files;                /* relative paths of the files we wrote */
    size_t n_files;
} rt_dir;

typedef struct cache_entry {
    struct cache_entry *next;
    uint8_t key[32];
    struct anec_program *donor;  /* an open program whose compiled form clones copy, or NULL */
    void *tmpl;                  /* a closed donor's driver program, kept (unloaded) for clones */
    rt_dir *tmpl_dir;            /* its directory (a reference) */
    uint8_t content[32];         /* the weight content of that compiled form */
    int stale;                   /* content not computed yet: the donor's (rt_cache_content) */
    int patchable;               /* its compiled data equals its one BLOBFILE */
    int mixed;                   /* this runtime compiled other weights under this key too: a
                                    never-compiled clone might get theirs where the framework
                                    keeps weights per identifier, so a clone needs new-object
                                    verified (ANE-NEW-OBJECT-LOAD) */
} cache_entry;

typedef struct io_desc {
    char *name;
    int dtype;
    int rank;
    int64_t shape[ANEC_MAX_RANK];
    size_t numel;
    size_t bytes;
    size_t decl;
} io_desc;

typedef struct blob_ref {
    char *path;                  /* "@model_path/weights/w.bin" */
    char *const_name;
    uint64_t offset;
    uint32_t dtype;              /* BLOB_DT_* */
    uint64_t bytes;
    int line;
} blob_ref;

struct anec_runtime {
    pthread_mutex_t lock;        /* dirs, cache, progs, closed, refs */
    pthread_mutex_t st_lock;     /* st */
    int refs;                    /* the caller's handle + one per program struct */
    int closed;
    pid_t pid;                   /* the process that opened it */
    const anec_driver *drv;
    void *ctx;
    char *root;
    int own_root;
    int cap;                     /* this runtime's compile cap (0: none) */
    unsigned verified;           /* ANEC_RELOAD_* verified for this runtime */
    struct anec_stats st;
    rt_dir *dirs;
    cache_entry *cache;
    struct anec_program *progs;  /* open programs */
};

struct anec_program {
    pthread_mutex_t lock;        /* serializes every call on this program */
    anec_runtime *rt;
    struct anec_program *next, *prev; /* rt->progs while open */
    int refs;                    /* the caller's handle + pins (under rt->lock) */
    int closed;
    void *dprog;
    rt_dir *dir;                 /* changed under rt->lock (and p->lock once published) */
    const char *dir_path;        /* dir->path as anec_program_dir returns it: one of dir_paths */
    char **dir_paths;            /* every directory path it had, kept until the program is freed */
    size_t n_dir_paths;
    int loaded;
    int patchable;               /* one BLOBFILE, and the compiled data equals it */
    uint8_t key[32];
    uint8_t content[32];         /* the weight content it computes with, when content_known */
    int content_known;           /* 0 after a data patch, until the cache needs it (under rt->lock) */
    char *mil;                   /* kept for RECOMPILE */
    size_t mil_len;
    io_desc *in, *out;           /* binding (alphabetical) order */
    size_t n_in, n_out;
    blob_ref *refs_tab;
    size_t n_refs;
    char **files;                /* distinct BLOBFILE paths referenced by the MIL, sorted */
    size_t n_files;
    anec_surface *in_s, *out_s;
    size_t in_bytes, out_bytes;
    int exposed;                 /* the caller has the raw surface pointers: they stay CPU-locked
                                    except while the device evaluates (anec_program_input_surface) */
    anec_limits limits;
    struct anec_stats st;
};

/* ---- rt_status.c ---- */

/* Record a failure for anec_last_error (this thread) and return code. */
int rt_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
uint64_t rt_now_ns(void);

/* ---- rt_drivers.c: the driver table ---- */

#define RT_MAX_DRIVERS 4
/* The driver's row in the table (0 .. RT_MAX_DRIVERS - 1), -1 for an unknown name. */
int rt_driver_index(const char *name);
/* The driver named `name`, or NULL with *code (ANEC_EINVAL: unknown,
   ANEC_EUNAVAIL: not in this build) and why. */
const anec_driver *rt_driver_find(const char *name, int *code, char *why, size_t whylen);
/* The first available driver in the order "auto" tries them. */
const anec_driver *rt_driver_auto(void);
/* Does d take the sim's device model from $ANEC_SIM_DEVICE when none is given? */
int rt_driver_env_device(const anec_driver *d);
/* Reset the per-process state of the driver in row `index` (a new process, for
   tests): ANEC_OK, or ANEC_EINVAL (message set) where the process owns it. */
int rt_driver_reset_process(int index);

/* ---- rt_budget.c ---- */

/* Reserve one compile of the process budget and the runtime's cap, or fail
   with ANEC_EBUDGET (message set). rt_budget_release undoes a reservation
   whose compile failed. */
int rt_budget_reserve(anec_runtime *rt);
void rt_budget_release(anec_runtime *rt);
/* Take `budget` as d's compiles per process (the smallest given wins); returns the value in force. */
int rt_budget_set_process(const anec_driver *d, int budget);
/* The compile budget fields of out; `mine` is the runtime's own compiles. */
void rt_budget_view(const anec_runtime *rt, struct anec_stats *out, uint64_t mine);

/* ---- rt_stats.c ---- */

/* Add to the runtime's counters (st_lock). */
void rt_count(anec_runtime *rt, const struct anec_stats *delta);
/* Count one load of p that took since t0, in the runtime's and the program's stats. */
void rt_count_load(anec_program *p, uint64_t t0);
/* Count one reload of p by input-surface writes that took since t0. */
void rt_count_inputs_reload(anec_program *p, uint64_t t0);
/* Count bytes the CPU moved for p (p->lock held): written into its input surfaces from
   host memory, read from its output surfaces, copied into its input surfaces from others. */
void rt_count_bytes(anec_program *p, uint64_t in, uint64_t out, uint64_t copied);

/* ---- rt_runtime.c ---- */

/* A runtime used in a process other than the one that opened it (fork), and its error. */
int rt_forked(const anec_runtime *rt);
int rt_forked_error(const anec_runtime *rt);
void rt_runtime_destroy(anec_runtime *rt);
/* Free a program struct's tables (I/O, weight consts, files, directory paths, MIL). */
void rt_program_free_tables(anec_program *p);
/* Drop a reference on a program struct (rt->lock held); 1 if the runtime's
   last reference went with it (the caller destroys the runtime after unlocking). */
int rt_program_unref_locked(anec_program *p);
/* A reference that keeps p's struct (and its runtime) alive, e.g. for a pipeline. */
void rt_program_pin(anec_program *p);
void rt_program_unpin(anec_program *p);

/* ---- rt_describe.c ---- */

/* Light parse shared by every driver: p's I/O tables (binding order), BLOBFILE
   consts and weight files. Only syntax errors fail here. */
int rt_describe(anec_program *p, const char *mil, size_t mil_len);
/* After the driver accepted the program: every returned name is a tensor. */
int rt_check_outputs(const anec_program *p);
/* Check one blob against every const of p that reads it. */
int rt_check_blob(const anec_program *p, const anec_blob *b, int check_finite, const char *what);

/* ---- rt_cache.c ---- */

/* sha256(sha256(MIL) || sorted weight paths). */
void rt_cache_key(const char *mil, size_t mil_len, const anec_blob *blobs, size_t n, uint8_t key[32]);
/* sha256 over sorted (path, sha256(bytes)) of the blobs. */
void rt_content_hash(const anec_blob *blobs, size_t n, uint8_t out[32]);
/* The cache entry of key (rt->lock held), or NULL. */
cache_entry *rt_cache_find(anec_runtime *rt, const uint8_t key[32]);
/* rt->lock held. 0 when e->content is the content of its compiled form,
   computing a stale donor's content from its weight files first (a donor is
   never mid-reload: a reload leaves the cache before it writes); -1 when they
   cannot be read (the entry then has no donor). */
int rt_cache_content(anec_runtime *rt, cache_entry *e);
/* Does the compiled data of dprog equal the one blob? (the observation that
   makes DATA_PATCH applicable). */
int rt_observe_patchable(anec_runtime *rt, void *dprog, const anec_blob *blobs, size_t n_blobs, size_t n_files);

/* ---- rt_surfaces.c ---- */

/* CPU access to a surface (ANE-SURFACE-LOCK): lock it right before the core
   reads (read_only) or writes s->base, unlock right after; nested locks are
   counted, and evaluate needs none held. */
int rt_surface_lock(anec_runtime *rt, anec_surface *s, int read_only);
void rt_surface_unlock(anec_runtime *rt, anec_surface *s);
/* Host tensor -> surface (to_host 0) or surface -> host tensor (to_host 1), converting
   fp32 <-> fp16 where the program is fp16; side is "input" or "output" for messages. */
int rt_transfer(const io_desc *d, const anec_io *io, uint8_t *surface, int to_host, const char *side);
/* rt_transfer on surface s of p (p->lock held), locked for just that copy (read-only to the
   host), counted in p's host_in_bytes / host_out_bytes. */
int rt_transfer_surface(anec_program *p, const io_desc *d, const anec_io *io, anec_surface *s, int to_host,
                        const char *side);
/* A write of rows of input d (anec_write_input_slice): rt_slice_check checks the view,
   range, dtype and byte count and writes nothing; rt_slice_write (checked first) writes
   the rows into surface s of p (p->lock held), locked for the copy, and counts them.
   *written (may be NULL) gets the bytes written. */
int rt_slice_check(const io_desc *d, const anec_slice *sl, const anec_io *io);
int rt_slice_write(anec_program *p, const io_desc *d, const anec_slice *sl, const anec_io *io, anec_surface *s,
                   uint64_t *written);
/* Copy bytes from surface `from` to surface `to`, each locked for the copy. */
int rt_surface_copy(anec_runtime *rt, anec_surface *to, anec_surface *from, size_t bytes);
/* p's surfaces, uniform per direction (>= min_surface_bytes, aligned); freed unlocked. */
int rt_make_surfaces(anec_program *p);
void rt_free_surfaces(anec_program *p);
/* The caller holds the raw pointers: every surface of p locked for writing
   (rt_expose), unlocked around evaluations (rt_unexpose). */
int rt_expose(anec_program *p);
void rt_unexpose(anec_program *p);
/* "fp16", "fp32", ... for messages. */
const char *rt_dtype_name(int dtype);

/* ---- rt_program.c ---- */

/* Lock p for a call: ANEC_OK with p->lock held, else an error (closed,
   forked) with nothing held. */
int rt_enter(anec_program *p);
int rt_load_locked(anec_program *p);
int rt_unload_locked(anec_program *p);
/* Point p at directory d (rt->lock held); ANEC_ENOMEM with nothing changed. */
int rt_set_dir(anec_program *p, rt_dir *d);

/* ---- rt_pipeline.c ---- */

/* anec_write_input_slice on pipeline input `input`: every stage surface it feeds. */
int rt_pipeline_write_slice(anec_pipeline *pl, size_t input, const anec_slice *sl, const anec_io *io);

/* ---- rt_eval.c ---- */

/* Evaluate p (locked, loaded) on these surfaces; counts the evaluation. */
int rt_eval_locked(anec_program *p, anec_surface *const *in, size_t n_in, anec_surface *const *out, size_t n_out);

/* ---- rt_dir.c (rt->lock held for every call) ---- */

/* A new directory holding mil and blobs; shareable when their content is
   given, private when it is NULL (not computed). */
rt_dir *rt_dir_populate(anec_runtime *rt, const uint8_t key[32], const uint8_t content[32], const char *mil,
                        size_t mil_len, const anec_blob *blobs, size_t n_blobs);
/* A shareable directory with this key and content, with a new reference, or NULL. */
rt_dir *rt_dir_find_shared(anec_runtime *rt, const uint8_t key[32], const uint8_t content[32]);
/* A private copy (hard links where possible). */
rt_dir *rt_dir_copy(anec_runtime *rt, rt_dir *src);
void rt_dir_release(anec_runtime *rt, rt_dir *d);
void rt_dir_free_all(anec_runtime *rt);

/* ---- rt_reload.c ---- */

/* The strategy anec_reload_weights uses for p (p->lock held), why in `why`. */
int rt_reload_strategy(const anec_program *p, char *why, size_t whylen);
/* Validate blobs for a reload of p (nothing changes); ANEC_OK or an error. */
int rt_reload_validate(const anec_program *p, const anec_blob *blobs, size_t n);
/* How many of blobs differ from p's current files. */
size_t rt_reload_changes(const anec_program *p, const anec_blob *blobs, size_t n);

/* ---- rt_patch.c: a weight file with new payloads streamed from arrays ---- */

/* One array of anec_reload_arrays; rt_patch_open fills stored..size. */
typedef struct rt_patch_region {
    uint64_t record;              /* offset of the blob's metadata record */
    const void *data;             /* count elements of src_dtype (ANEC_DTYPE_FP16/FP32) */
    uint64_t count;
    int src_dtype;
    size_t index;                 /* its index in the caller's list */
    uint32_t stored;              /* BLOB_DT_* of the blob */
    uint64_t data_offset, size;   /* the payload in the file */
} rt_patch_region;

/* Open dir/rel (beneath dir, no symlink) and match each region to its
   metadata record: sentinel, a dtype the array converts to, the size of the
   array, payload within the file, no overlap; sorts r by payload offset.
   ANEC_OK with *fd (close it) and the file length, else an error and why. */
int rt_patch_open(const char *dir, const char *rel, rt_patch_region *r, size_t n, int *fd, uint64_t *len,
                  char *why, size_t whylen);
/* *changed: does any region's stored form differ from the file's payload?
   Values met on the way are checked (ANEC_EWEIGHTS with *bad = its index). */
int rt_patch_changes(int fd, const rt_patch_region *r, size_t n, int *changed, size_t *bad, char *why,
                     size_t whylen);
/* Write the new file to tmp (fsynced): the old bytes around the payloads,
   each payload checked and converted on the way. tmp is the spare, written
   over in place if it has len bytes and no other link, else created anew
   (rt_open_for_write). On any error tmp is removed (ANEC_EWEIGHTS with
   *bad = the refused array). */
int rt_patch_write(int fd, uint64_t len, const rt_patch_region *r, size_t n, const char *tmp, size_t *bad,
                   char *why, size_t whylen);

#endif
