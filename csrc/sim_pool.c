/* sim_pool.c - the sim kernels' process-wide worker pool (sk_parallel, see sim_kernels.h):
   workers started on first use and kept, parts of a call handed out as threads come free, a
   short spin before sleeping (a futex wake-up costs as much as a decode step's product on a
   virtual machine), and fork() leaving the child a pool with no workers. */
#define _POSIX_C_SOURCE 200809L
#include "sim_kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

static struct {
    pthread_mutex_t owner;      /* held by the call whose parts the workers run */
    pthread_mutex_t lock;       /* guards the fields below */
    pthread_cond_t wake, done;
    int workers;                /* started */
    unsigned long job;          /* bumped for each call */
    void (*fn)(void *, int, int);
    void *arg;
    int parts, next;            /* parts handed out so far */
    atomic_int pending;         /* parts not yet finished (changed under lock, read spinning) */
    atomic_ulong posted;        /* = job, for workers spinning without the lock */
    int helpers;                /* workers the call may use (its threads - 1), and ... */
    int joined;                 /* ... how many have joined it */
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
          PTHREAD_COND_INITIALIZER, 0, 0, NULL, NULL, 0, 0, 0, 0, 0, 0};

/* A thread about to sleep on a condition first polls it for up to SPIN_NS: a futex wake-up
   costs tens of microseconds on a virtual machine, as much as a decode step's GEMM. */
#define SPIN_NS 100000L

static long elapsed_ns(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000000000L + (t.tv_nsec - t0->tv_nsec);
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int job_posted(const void *seen)
{
    return atomic_load_explicit(&pool.posted, memory_order_acquire) != *(const unsigned long *)seen;
}

static int parts_done(const void *unused)
{
    (void)unused;
    return atomic_load_explicit(&pool.pending, memory_order_acquire) == 0;
}

/* Poll done(arg), without the lock, until it holds or SPIN_NS pass. */
static void spin_until(int (*done)(const void *), const void *arg)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 1; !done(arg); i++) {
        cpu_relax();
        if (i % 64 == 0 && elapsed_ns(&t0) > SPIN_NS)
            return;
    }
}

static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

/* fork() copies only the calling thread: the child has no workers, and no call in flight
   (the parent's pool is quiet while it forks) */
static void pool_prepare(void)
{
    pthread_mutex_lock(&pool.owner);
    pthread_mutex_lock(&pool.lock);
}

static void pool_parent(void)
{
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.owner);
}

static void pool_child(void)
{
    pool.workers = 0;
    pool_parent();
}

static void pool_init(void)
{
    pthread_atfork(pool_prepare, pool_parent, pool_child);
}

/* Under pool.lock: run the parts not yet taken. */
static void take_parts(void)
{
    while (pool.next < pool.parts) {
        int part = pool.next++;
        void (*fn)(void *, int, int) = pool.fn;
        void *arg = pool.arg;
        int parts = pool.parts;
        pthread_mutex_unlock(&pool.lock);
        fn(arg, part, parts);
        pthread_mutex_lock(&pool.lock);
        if (atomic_fetch_sub_explicit(&pool.pending, 1, memory_order_acq_rel) == 1)
            pthread_cond_broadcast(&pool.done);
    }
}

static void *pool_worker(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&pool.lock);
    unsigned long seen = 0; /* a job already finished has no part left to take */
    for (;;) {
        if (pool.job == seen) {
            pthread_mutex_unlock(&pool.lock);
            spin_until(job_posted, &seen);
            pthread_mutex_lock(&pool.lock);
        }
        while (pool.job == seen)
            pthread_cond_wait(&pool.wake, &pool.lock);
        seen = pool.job;
        if (pool.joined < pool.helpers) {
            pool.joined++;
            take_parts();
        }
    }
    return NULL;
}

void sk_parallel(int threads, int parts, void (*fn)(void *arg, int part, int parts), void *arg)
{
    if (threads > 1 && parts > 1 && pthread_once(&pool_once, pool_init) == 0 && pthread_mutex_trylock(&pool.owner) == 0) {
        pthread_mutex_lock(&pool.lock);
        int want = threads - 1 < parts - 1 ? threads - 1 : parts - 1;
        if (want > SK_POOL_MAX)
            want = SK_POOL_MAX;
        while (pool.workers < want) {
            pthread_t t;
            pthread_attr_t at;
            int ok = pthread_attr_init(&at) == 0;
            if (ok) {
                pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
                ok = pthread_create(&t, &at, pool_worker, NULL) == 0;
                pthread_attr_destroy(&at);
            }
            if (!ok)
                break; /* fewer workers: the caller takes their parts */
            pool.workers++;
        }
        pool.fn = fn;
        pool.arg = arg;
        pool.parts = parts;
        pool.next = 1;
        atomic_store_explicit(&pool.pending, parts - 1, memory_order_relaxed);
        pool.helpers = want;
        pool.joined = 0;
        pool.job++;
        atomic_store_explicit(&pool.posted, pool.job, memory_order_release);
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.lock);
        fn(arg, 0, parts);
        pthread_mutex_lock(&pool.lock);
        take_parts();
        if (atomic_load_explicit(&pool.pending, memory_order_acquire) > 0) {
            pthread_mutex_unlock(&pool.lock);
            spin_until(parts_done, NULL);
            pthread_mutex_lock(&pool.lock);
        }
        while (atomic_load_explicit(&pool.pending, memory_order_acquire) > 0)
            pthread_cond_wait(&pool.done, &pool.lock);
        pool.fn = NULL;
        pool.arg = NULL;
        pthread_mutex_unlock(&pool.lock);
        pthread_mutex_unlock(&pool.owner);
        return;
    }
    for (int part = 0; part < parts; part++)
        fn(arg, part, parts);
}

