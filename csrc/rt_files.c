/* rt_files.c - the runtime's file helpers (see rt_files.h). */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700
#define _DEFAULT_SOURCE
#define _DARWIN_C_SOURCE
#include "rt_files.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif

const char *rt_rel_path(const char *mil_path)
{
    static const char prefix[] = "@model_path/";
    if (!mil_path || strncmp(mil_path, prefix, sizeof prefix - 1) != 0)
        return NULL;
    const char *r = mil_path + sizeof prefix - 1;
    if (!*r || strchr(r, '\\'))
        return NULL;
    for (const char *c = r;;) {
        const char *e = strchr(c, '/');
        size_t n = e ? (size_t)(e - c) : strlen(c);
        if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            return NULL;
        if (!e)
            return r;
        c = e + 1;
    }
}

const char *rt_weight_path(const char *mil_path)
{
    static const char dir[] = "weights/";
    const char *r = rt_rel_path(mil_path);
    return r && strncmp(r, dir, sizeof dir - 1) == 0 && r[sizeof dir - 1] ? r : NULL;
}

char *rt_join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *r = malloc(n);
    if (r)
        snprintf(r, n, "%s/%s", a, b);
    return r;
}

/* Open dir/rel for reading, walking components with O_NOFOLLOW; -1 + errno. */
static int open_beneath(const char *dir, const char *rel)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char comp[256];
    const char *c = rel;
    for (;;) {
        const char *e = strchr(c, '/');
        size_t n = e ? (size_t)(e - c) : strlen(c);
        if (n == 0 || n >= sizeof comp || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.')) {
            close(fd);
            errno = EINVAL;
            return -1;
        }
        memcpy(comp, c, n);
        comp[n] = 0;
        /* O_NONBLOCK: a FIFO must not block the open; it is rejected below */
        int flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (e ? O_DIRECTORY : O_NONBLOCK);
        int next = openat(fd, comp, flags);
        int saved = errno;
        close(fd);
        if (next < 0) {
            errno = saved;
            return -1;
        }
        fd = next;
        if (!e)
            return fd;
        c = e + 1;
    }
}

/* dir/rel opened as in rt_read_beneath, a regular file of at most max_bytes (*size set);
   the fd, or -1 and why. */
static int open_bounded(const char *dir, const char *rel, uint64_t max_bytes, size_t *size, char *why, size_t whylen)
{
    int fd = open_beneath(dir, rel);
    if (fd < 0) {
        if (errno == ELOOP || errno == ENOTDIR)
            snprintf(why, whylen, "%s is a symbolic link or passes through one (not followed)", rel);
        else
            snprintf(why, whylen, "cannot open %s: %s", rel, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(why, whylen, "%s is not a regular file", rel);
        close(fd);
        return -1;
    }
    if ((uint64_t)st.st_size > max_bytes || (uint64_t)st.st_size > (uint64_t)SIZE_MAX - 1) {
        snprintf(why, whylen, "%s is %lld bytes, more than the %llu this program can hold", rel,
                 (long long)st.st_size, (unsigned long long)max_bytes);
        close(fd);
        return -1;
    }
    *size = (size_t)st.st_size;
    return fd;
}

int rt_read_beneath(const char *dir, const char *rel, uint64_t max_bytes, uint8_t **out, size_t *len,
                    char *why, size_t whylen)
{
    *out = NULL;
    *len = 0;
    size_t n;
    int fd = open_bounded(dir, rel, max_bytes, &n, why, whylen);
    if (fd < 0)
        return -1;
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        snprintf(why, whylen, "out of memory reading %s (%zu bytes)", rel, n);
        close(fd);
        return -1;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, buf + got, n - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            snprintf(why, whylen, "read error on %s: %s", rel, k < 0 ? strerror(errno) : "file shrank");
            free(buf);
            close(fd);
            return -1;
        }
        got += (size_t)k;
    }
    close(fd);
    *out = buf;
    *len = n;
    return 0;
}

int rt_map_beneath(const char *dir, const char *rel, uint64_t max_bytes, const uint8_t **out, size_t *len,
                   char *why, size_t whylen)
{
    *out = NULL;
    *len = 0;
    size_t n;
    int fd = open_bounded(dir, rel, max_bytes, &n, why, whylen);
    if (fd < 0)
        return -1;
    void *m = n ? mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) {
        snprintf(why, whylen, "cannot map %s: %s", rel, strerror(e));
        return -1;
    }
    *out = m;
    *len = n;
    return 0;
}

void rt_unmap(const uint8_t *data, size_t len)
{
    if (data && len)
        munmap((void *)data, len);
}

int rt_open_beneath(const char *dir, const char *rel) { return open_beneath(dir, rel); }

int rt_file_equals(const char *dir, const char *rel, const uint8_t *data, size_t len)
{
    int fd = open_beneath(dir, rel);
    if (fd < 0)
        return 0;
    struct stat st;
    int eq = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == (uint64_t)len;
    if (eq) {
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0)
            fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    }
    uint8_t buf[65536];
    size_t off = 0;
    while (eq && off < len) {
        ssize_t k = read(fd, buf, sizeof buf);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0 || (size_t)k > len - off || memcmp(buf, data + off, (size_t)k) != 0)
            eq = 0;
        else
            off += (size_t)k;
    }
    close(fd);
    return eq;
}

int rt_make_parents(const char *dir, const char *rel)
{
    char *p = rt_join(dir, rel);
    if (!p)
        return -1;
    size_t base = strlen(dir) + 1;
    for (char *s = p + base; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, 0755) && errno != EEXIST) {
                free(p);
                return -1;
            }
            *s = '/';
        }
    free(p);
    return 0;
}

int rt_fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

char *rt_temp_name(const char *target)
{
    static atomic_ulong counter;
    size_t n = strlen(target) + 48;
    char *t = malloc(n);
    if (t)
        snprintf(t, n, "%s.tmp.%ld.%lu", target, (long)getpid(), (unsigned long)atomic_fetch_add(&counter, 1) + 1);
    return t;
}

int rt_write_all(int fd, const void *data, size_t n)
{
    const uint8_t *b = data;
    while (n) {
        ssize_t k = write(fd, b, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

int rt_pread_all(int fd, void *buf, size_t n, uint64_t off)
{
    uint8_t *b = buf;
    while (n) {
        ssize_t k = pread(fd, b, n, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        b += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

int rt_open_for_write(const char *tmp, uint64_t len, int spare)
{
    if (spare) {
        int fd = open(tmp, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 &&
            (uint64_t)st.st_size == len)
            return fd; /* its pages are written over: nothing allocated, nothing freed */
        if (fd >= 0)
            close(fd);
        unlink(tmp);
    }
    return open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
}

int rt_write_temp_parts(const char *tmp, const rt_part *parts, size_t n, int spare, char *why, size_t whylen)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        if (rt_add_size(len, parts[i].len, &len)) {
            snprintf(why, whylen, "%s would be too large", tmp);
            return -1;
        }
    int fd = rt_open_for_write(tmp, len, spare);
    if (fd < 0) {
        snprintf(why, whylen, "cannot create %s: %s", tmp, strerror(errno));
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (rt_write_all(fd, parts[i].data, parts[i].len)) {
            snprintf(why, whylen, "write to %s failed: %s", tmp, strerror(errno));
            close(fd);
            unlink(tmp);
            return -1;
        }
    if (fsync(fd) || close(fd)) {
        snprintf(why, whylen, "fsync/close of %s failed: %s", tmp, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

int rt_write_temp(const char *tmp, const void *data, size_t len, int spare, char *why, size_t whylen)
{
    rt_part part = {data, len};
    return rt_write_temp_parts(tmp, &part, 1, spare, why, whylen);
}

int rt_write_atomic_parts(const char *path, const rt_part *parts, size_t n, char *why, size_t whylen)
{
    char *tmp = rt_temp_name(path);
    if (!tmp) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    if (rt_write_temp_parts(tmp, parts, n, 0, why, whylen)) {
        free(tmp);
        return -1;
    }
    if (rename(tmp, path)) {
        snprintf(why, whylen, "rename to %s failed: %s", path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}

int rt_write_atomic(const char *path, const void *data, size_t len, char *why, size_t whylen)
{
    rt_part part = {data, len};
    return rt_write_atomic_parts(path, &part, 1, why, whylen);
}

int rt_link_or_copy(const char *from, const char *to, char *why, size_t whylen)
{
    struct stat a, b;
    if (lstat(from, &a) != 0 || !S_ISREG(a.st_mode)) {
        snprintf(why, whylen, "%s is not a regular file", from);
        return -1;
    }
    if (lstat(to, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return 0; /* already the same file */
    /* link under a temp name, then rename: `to` is replaced atomically */
    char *tmp = rt_temp_name(to);
    if (!tmp) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    if (link(from, tmp) == 0) {
        if (rename(tmp, to) == 0) {
            free(tmp);
            return 0;
        }
        unlink(tmp);
    }
    free(tmp);
    /* no hard links here (another file system): copy the bytes */
    const char *slash = strrchr(from, '/');
    char *dir = slash ? strndup(from, (size_t)(slash - from)) : strdup(".");
    uint8_t *buf = NULL;
    size_t n = 0;
    int rc = dir ? rt_read_beneath(dir, slash ? slash + 1 : from, (uint64_t)a.st_size, &buf, &n, why, whylen) : -1;
    free(dir);
    if (rc == 0)
        rc = rt_write_atomic(to, buf, n, why, whylen);
    free(buf);
    return rc;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (flag == FTW_DP || flag == FTW_D)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

void rt_rm_tree(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }
