/*
 * rt_files.h - the runtime's file helpers (internal; POSIX).
 *
 * Every file the runtime or the sim reads from a program directory goes
 * through rt_read_beneath: the path is walked one component at a time with
 * openat(O_NOFOLLOW), so no symlink (final or intermediate) is followed and
 * nothing outside the directory is opened; the file must be a regular file no
 * larger than the caller's bound. Every file it writes goes through
 * rt_write_atomic (temp file, fsync, rename): a reader sees the old bytes or
 * the new ones, never a mix.
 */
#ifndef ANEC_RT_FILES_H
#define ANEC_RT_FILES_H

#include <stddef.h>
#include <stdint.h>

/* The one check of a MIL weight path: "@model_path/<rel>" with every
   component non-empty and not "." or "..", no backslash, no leading or
   trailing '/'. Returns <rel> (inside mil_path) or NULL. */
const char *rt_rel_path(const char *mil_path);
/* rt_rel_path of a weight file: it must lie under weights/ (the program directory's other
   names, model.mil, net.plist, data, belong to the compiled form), else NULL. */
const char *rt_weight_path(const char *mil_path);

/* A malloc'd "a/b"; NULL when out of memory. */
char *rt_join(const char *a, const char *b);

/* Read dir/rel (rel relative, '/'-separated) without following any symlink,
   as a regular file of at most max_bytes. On success *out is malloc'd (free
   it; non-NULL even for an empty file) and 0 is returned; else -1 and why. */
int rt_read_beneath(const char *dir, const char *rel, uint64_t max_bytes, uint8_t **out, size_t *len,
                    char *why, size_t whylen);

/* As rt_read_beneath, but the file mapped read-only (private) instead of read:
   *out is the mapping (NULL for an empty file), given back with rt_unmap. */
int rt_map_beneath(const char *dir, const char *rel, uint64_t max_bytes, const uint8_t **out, size_t *len,
                   char *why, size_t whylen);
void rt_unmap(const uint8_t *data, size_t len);

/* Open dir/rel read-only without following any symlink (as rt_read_beneath
   walks it); the fd, or -1 with errno. The caller checks the file type. */
int rt_open_beneath(const char *dir, const char *rel);

/* 1 if dir/rel is a regular file (not a symlink) holding exactly
   data[0..len), else 0. */
int rt_file_equals(const char *dir, const char *rel, const uint8_t *data, size_t len);

/* mkdir -p of the parent directories of dir/rel (dir itself must exist). */
int rt_make_parents(const char *dir, const char *rel);

/* All n bytes written to fd / read from fd at offset off (EINTR retried);
   0, or -1 with errno (a short read past the end: -1). */
int rt_write_all(int fd, const void *data, size_t n);
int rt_pread_all(int fd, void *buf, size_t n, uint64_t off);

/* A fresh temp name next to target ("<target>.tmp.<pid>.<n>"); malloc'd. */
char *rt_temp_name(const char *target);
/* Open `tmp` to write len bytes into: when spare is set and tmp is a regular
   file of exactly len bytes that no other name links, that file, to be
   written over in place (its pages are reused: nothing is allocated or
   freed); otherwise a new file created exclusively (a spare that cannot be
   reused is removed first). An fd, or -1 with errno. */
int rt_open_for_write(const char *tmp, uint64_t len, int spare);
/* Bytes written from several places, one after the other. */
typedef struct rt_part {
    const void *data;
    size_t len;
} rt_part;
/* Write data to tmp (rt_open_for_write), fsync, close; removed on failure. */
int rt_write_temp(const char *tmp, const void *data, size_t len, int spare, char *why, size_t whylen);
int rt_write_temp_parts(const char *tmp, const rt_part *parts, size_t n, int spare, char *why, size_t whylen);
/* Atomic write: temp + fsync + rename over path (parts: their bytes in order). */
int rt_write_atomic(const char *path, const void *data, size_t len, char *why, size_t whylen);
int rt_write_atomic_parts(const char *path, const rt_part *parts, size_t n, char *why, size_t whylen);

/* Make `to` hold the bytes of `from` (a hard link when possible, else an
   atomic copy); both must be regular files. */
int rt_link_or_copy(const char *from, const char *to, char *why, size_t whylen);

int rt_fsync_dir(const char *path);
/* rm -rf without following symlinks. */
void rt_rm_tree(const char *path);

/* Checked size arithmetic: 0 and *out set on success, -1 on overflow. */
static inline int rt_add_size(size_t a, size_t b, size_t *out)
{
    if (a > (size_t)-1 - b)
        return -1;
    *out = a + b;
    return 0;
}

static inline int rt_mul_size(size_t a, size_t b, size_t *out)
{
    if (a && b > (size_t)-1 / a)
        return -1;
    *out = a * b;
    return 0;
}

/* Round up to a multiple of align (align 0 or 1: unchanged); -1 on overflow. */
static inline int rt_round_up(size_t v, size_t align, size_t *out)
{
    if (align <= 1) {
        *out = v;
        return 0;
    }
    size_t r = v % align;
    if (r == 0) {
        *out = v;
        return 0;
    }
    return rt_add_size(v, align - r, out);
}

#endif
