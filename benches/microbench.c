/*
 * malloc/free microbenchmark for the routing-cost bench (benches/routing.rs).
 *
 *   microbench <pair64|mixed> <threads> <iterations>
 *
 * pair64: malloc(64) / touch one byte / free, repeated.
 * mixed:  a fixed pseudo-random sequence of sizes 8 B .. 16 KiB (log-uniform, deterministic
 *         seed) over a ring of RING live blocks; each pair frees a pseudo-randomly chosen ring
 *         slot and refills it, so frees are neither LIFO nor FIFO.
 *
 * Every thread runs `iterations` pairs after a warm-up; only the timed loop is inside the
 * clock_gettime(CLOCK_MONOTONIC) bracket. Output on stdout, one line:
 *
 *   ns_per_pair=X.XX        (mean over threads of thread_ns / iterations)
 *
 * On stderr: `malloc_lib=<path>`, the object that the `malloc` symbol resolves to in this
 * process (dladdr), so the harness can check that the preload took effect.
 *
 * Build: gcc -O2 -pthread -o microbench microbench.c
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RING 64      /* live blocks per thread in `mixed` (power of two) */
#define SEQ 4096     /* length of the precomputed (slot, size) sequence (power of two) */
#define MIN_SIZE 8
#define MAX_SIZE 16384

enum workload { PAIR64, MIXED };

static enum workload g_work;
static long g_iters;
static pthread_barrier_t g_barrier;
static volatile unsigned long g_sink; /* defeats dead-code elimination */

struct thread_arg {
    int id;
    double ns;
};

static uint64_t xorshift64(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "microbench: %s\n", what);
    exit(2);
}

/* One malloc(64)/free pair per iteration. The volatile store/load keeps gcc from eliding the
 * malloc/free pair (it may remove an unused malloc+free). */
static unsigned long loop_pair64(long n)
{
    unsigned long acc = 0;
    for (long i = 0; i < n; i++) {
        volatile char *p = malloc(64);
        if (!p)
            die("malloc(64) returned NULL");
        p[0] = (char)i;
        acc += (unsigned char)p[0];
        free((void *)p);
    }
    return acc;
}

struct mixed_state {
    void *ring[RING];
    uint16_t slot[SEQ];
    uint16_t size[SEQ];
};

static void mixed_init(struct mixed_state *st, int id)
{
    uint64_t seed = 0x9E3779B97F4A7C15ull ^ (uint64_t)(id + 1) * 0xD1B54A32D192ED03ull;
    for (int k = 0; k < 8; k++)
        xorshift64(&seed);
    for (int i = 0; i < SEQ; i++) {
        uint64_t r = xorshift64(&seed);
        /* log-uniform: pick a power-of-two class 8..8192, then uniform inside it: 8..16383 B */
        unsigned e = 3 + (unsigned)(r % 11);          /* 3..13 */
        unsigned base = 1u << e;
        unsigned sz = base + (unsigned)((r >> 8) % base); /* [2^e, 2^(e+1)) */
        if (sz > MAX_SIZE)
            sz = MAX_SIZE;
        if (sz < MIN_SIZE)
            sz = MIN_SIZE;
        st->size[i] = (uint16_t)sz;
        st->slot[i] = (uint16_t)((r >> 40) % RING);
    }
    for (int k = 0; k < RING; k++) {
        st->ring[k] = malloc(st->size[k]);
        if (!st->ring[k])
            die("malloc returned NULL");
    }
}

static unsigned long loop_mixed(struct mixed_state *st, long n)
{
    unsigned long acc = 0;
    for (long i = 0; i < n; i++) {
        unsigned j = (unsigned)i & (SEQ - 1);
        unsigned k = st->slot[j];
        free(st->ring[k]);
        volatile char *p = malloc(st->size[j]);
        if (!p)
            die("malloc returned NULL");
        p[0] = (char)i;
        acc += (unsigned char)p[0];
        st->ring[k] = (void *)p;
    }
    return acc;
}

static void mixed_fini(struct mixed_state *st)
{
    for (int k = 0; k < RING; k++)
        free(st->ring[k]);
}

static void *worker(void *vp)
{
    struct thread_arg *a = vp;
    long warm = g_iters / 10;
    if (warm > 200000)
        warm = 200000;
    if (warm < 1000)
        warm = 1000;
    unsigned long acc = 0;
    double t0, t1;

    if (g_work == PAIR64) {
        acc += loop_pair64(warm);
        pthread_barrier_wait(&g_barrier);
        t0 = now_ns();
        acc += loop_pair64(g_iters);
        t1 = now_ns();
    } else {
        /* the state lives on the heap so each thread's tables are its own */
        struct mixed_state *st = malloc(sizeof *st);
        if (!st)
            die("malloc(state) returned NULL");
        mixed_init(st, a->id);
        acc += loop_mixed(st, warm);
        pthread_barrier_wait(&g_barrier);
        t0 = now_ns();
        acc += loop_mixed(st, g_iters);
        t1 = now_ns();
        mixed_fini(st);
        free(st);
    }
    g_sink += acc;
    a->ns = t1 - t0;
    return NULL;
}

static void report_malloc_lib(void)
{
    Dl_info info;
    void *sym = dlsym(RTLD_DEFAULT, "malloc");
    if (sym && dladdr(sym, &info) && info.dli_fname)
        fprintf(stderr, "malloc_lib=%s\n", info.dli_fname);
    else
        fprintf(stderr, "malloc_lib=?\n");
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s <pair64|mixed> <threads> <iterations>\n", argv[0]);
        return 2;
    }
    if (strcmp(argv[1], "pair64") == 0)
        g_work = PAIR64;
    else if (strcmp(argv[1], "mixed") == 0)
        g_work = MIXED;
    else
        die("workload must be pair64 or mixed");
    int threads = atoi(argv[2]);
    g_iters = atol(argv[3]);
    if (threads < 1 || threads > 64)
        die("threads must be 1..64");
    if (g_iters < 1)
        die("iterations must be >= 1");

    report_malloc_lib();

    struct thread_arg args[64];
    pthread_t tids[64];
    pthread_barrier_init(&g_barrier, NULL, (unsigned)threads);
    for (int t = 0; t < threads; t++) {
        args[t].id = t;
        args[t].ns = 0;
        if (pthread_create(&tids[t], NULL, worker, &args[t]) != 0)
            die("pthread_create failed");
    }
    double sum = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tids[t], NULL);
        sum += args[t].ns / (double)g_iters;
    }
    pthread_barrier_destroy(&g_barrier);
    printf("ns_per_pair=%.2f\n", sum / threads);
    return 0;
}
