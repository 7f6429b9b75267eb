/* dump_threads.c THREADS DUMPS: the cost of a dump with many live threads, for benches/dump.rs.
 * Starts THREADS threads that each make 64 malloc/free pairs (so each holds a slot) and then
 * wait on a barrier; one more "allocating" thread runs malloc(64)/free pairs throughout, timing
 * each pair with CLOCK_MONOTONIC. The main thread then calls mallocshim_dump() DUMPS times (found
 * with dlsym: the program also runs without the shim, and then says so) and times each.
 * Prints key=value lines:
 *   threads, dump_ms_<i> / dump_cpu_ms_<i> (each dump's wall and thread CPU time; the CPU time is
 *   what a loaded machine does not inflate), dump_ms_mean, dump_cpu_ms_mean, pairs_quiet / max_pair_us_quiet (the allocating
 *   thread before the dumps, same duration as the dump phase), pairs_dumping / max_pair_us_dumping
 *   (during the dumps), live_threads_in_dump (from the last JSON dump, counted by the harness).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_barrier_t ready, done;
static atomic_int phase; /* 0 warm-up, 1 quiet, 2 dumping, 3 stop */
static __thread void *volatile sink;

static uint64_t clock_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
}

static uint64_t now_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

static void *idle_thread(void *arg)
{
    (void)arg;
    for (int i = 0; i < 64; i++) {
        sink = malloc(64);
        free(sink);
    }
    pthread_barrier_wait(&ready);
    pthread_barrier_wait(&done);
    return NULL;
}

static uint64_t max_ns[4], pairs[4];

static void *alloc_thread(void *arg)
{
    (void)arg;
    int p;
    while ((p = atomic_load(&phase)) != 3) {
        uint64_t t0 = now_ns();
        sink = malloc(64);
        free(sink);
        uint64_t d = now_ns() - t0;
        if (d > max_ns[p])
            max_ns[p] = d;
        pairs[p]++;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    int dumps = argc > 2 ? atoi(argv[2]) : 5;
    int (*dump)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "mallocshim_dump");
    if (!dump) {
        printf("error=no mallocshim_dump: run under LD_PRELOAD=libmallocshim.so\n");
        return 1;
    }
    pthread_barrier_init(&ready, NULL, n + 1);
    pthread_barrier_init(&done, NULL, n + 1);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 64 * 1024);
    pthread_t *t = calloc(n, sizeof *t), at;
    for (int i = 0; i < n; i++)
        if (pthread_create(&t[i], &a, idle_thread, NULL) != 0) {
            printf("error=pthread_create %d\n", i);
            return 1;
        }
    pthread_barrier_wait(&ready);
    pthread_create(&at, NULL, alloc_thread, NULL);
    struct timespec warm = {0, 100 * 1000 * 1000};
    nanosleep(&warm, NULL);

    uint64_t t0 = now_ns();
    uint64_t total = 0, cpu_total = 0;
    double ms[64], cpu_ms[64];
    dumps = dumps > 64 ? 64 : dumps;
    atomic_store(&phase, 2);
    for (int i = 0; i < dumps; i++) {
        uint64_t s = now_ns(), c = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        int rc = dump();
        uint64_t w = now_ns() - s, cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID) - c;
        ms[i] = w / 1e6;
        cpu_ms[i] = cpu / 1e6;
        total += w;
        cpu_total += cpu;
        if (rc != 0) {
            printf("error=mallocshim_dump returned %d\n", rc);
            return 1;
        }
    }
    uint64_t span = now_ns() - t0;
    /* The same span without dumps, for the allocating thread's quiet maximum. */
    atomic_store(&phase, 1);
    struct timespec q = {(time_t)(span / 1000000000u), (long)(span % 1000000000u)};
    nanosleep(&q, NULL);
    atomic_store(&phase, 3);
    pthread_join(at, NULL);
    pthread_barrier_wait(&done);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    printf("threads=%d\n", n);
    for (int i = 0; i < dumps; i++)
        printf("dump_ms_%d=%.3f\ndump_cpu_ms_%d=%.3f\n", i, ms[i], i, cpu_ms[i]);
    printf("dump_ms_mean=%.3f\ndump_cpu_ms_mean=%.3f\n", total / 1e6 / dumps, cpu_total / 1e6 / dumps);
    printf("pairs_quiet=%llu\nmax_pair_us_quiet=%.1f\n", (unsigned long long)pairs[1], max_ns[1] / 1e3);
    printf("pairs_dumping=%llu\nmax_pair_us_dumping=%.1f\n", (unsigned long long)pairs[2], max_ns[2] / 1e3);
    return 0;
}
