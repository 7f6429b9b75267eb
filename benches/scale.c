/*
 * Scaling microbenchmark for benches/scale.rs (issue 36, item 1): T threads, one per CPU, each
 * doing malloc/free pairs of mariadbd's size mix, some blocks freed out of order and some freed
 * by another thread.
 *
 *   scale <all|small> <threads> <iterations> [nopin]
 *
 * Size mix: the malloc calls per size class that mariadbd 10.11 made under the shim in
 * docs/compare-overhead/report.md ("malloc and free latency per size class", glibc column:
 * oltp_read_only and oltp_point_select, 2 and 8 threads), classes with at least 400 calls; the
 * size is uniform inside its class. `all`: every such class, so about 8% of the pairs are
 * mariadbd's 64 KiB-2 MiB per-query buffers (most of the time per pair, and most heap-profile
 * samples at a 512 KiB mean); `small`: the classes up to 32 KiB only (the common path).
 *
 * Each thread keeps a ring of RING live blocks. Each pair frees a pseudo-randomly chosen slot
 * (neither LIFO nor FIFO) and refills it. One free in XFER_EVERY is not done by the thread that
 * allocated the block: the block goes to the next thread's inbox (a single-producer,
 * single-consumer ring; thread T-1 hands to thread 0; with one thread, to itself), and every
 * DRAIN_EVERY pairs each thread frees what its inbox holds. A full inbox means a local free.
 *
 * Every thread runs `iterations` pairs after a warm-up, pinned (unless `nopin`) to the t-th CPU
 * of the process's affinity mask; only the timed loop is inside the brackets of CLOCK_MONOTONIC
 * (wall) and CLOCK_THREAD_CPUTIME_ID (the thread's CPU time: what it spent running, spinning
 * included, but not time it waited descheduled or asleep on a futex). The inboxes are drained
 * after a barrier that follows every thread's timed loop. Output on stdout:
 *
 *   ns_per_pair=X.XX ns_per_pair_max=Y.YY cpu_ns_per_pair=Z.ZZ xfer_frees=N
 *
 * (the mean over threads of wall ns / iterations, the slowest thread's, the mean over threads of
 * CPU ns / iterations, and how many blocks another thread freed). On stderr: `malloc_lib=<path>` (dladdr of `malloc`), so that the harness
 * can check that the preload took effect.
 *
 * Build: gcc -O2 -pthread -o scale scale.c
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RING 64          /* live blocks per thread (power of two) */
#define SEQ 8192         /* precomputed (slot, size, handoff) sequence (power of two) */
#define XFER_EVERY 8     /* one free in 8 is done by another thread */
#define DRAIN_EVERY 32   /* pairs between two drains of a thread's inbox */
#define INBOX 4096       /* inbox capacity (power of two) */
#define MAX_THREADS 256

/* (lo, hi] bytes and calls: docs/compare-overhead/report.md, glibc malloc calls per size class. */
static const struct { unsigned lo, hi; unsigned long calls; } MIX[] = {
    {16, 32, 438},          {32, 64, 1110},         {64, 128, 2597672},     {128, 256, 165612},
    {256, 512, 827320},     {512, 1024, 249588},    {1024, 2048, 82899},    {2048, 4096, 661685},
    {8192, 16384, 82725},   {16384, 32768, 83362},  {65536, 131072, 165367}, {131072, 262144, 82683},
    {524288, 1048576, 82686}, {1048576, 2097152, 82681},
};
#define NMIX (sizeof MIX / sizeof MIX[0])

struct inbox {
    _Alignas(64) _Atomic unsigned long head; /* consumer's */
    _Alignas(64) _Atomic unsigned long tail; /* producer's */
    _Alignas(64) void *buf[INBOX];
};

struct thread_arg {
    _Alignas(64) int id;
    int cpu;
    double ns, cpu_ns;
    unsigned long xfer;
};

static unsigned g_nmix = NMIX; /* classes in use: all, or up to 32 KiB */
static long g_iters;
static int g_threads;
static pthread_barrier_t g_barrier;
static struct inbox *g_inbox;
static volatile unsigned long g_sink;

static void die(const char *what)
{
    fprintf(stderr, "scale: %s\n", what);
    exit(2);
}

static uint64_t xorshift64(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

static double now_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

struct state {
    void *ring[RING];
    uint32_t size[SEQ];
    uint16_t slot[SEQ];
    uint8_t handoff[SEQ];
    struct inbox *out, *in;
    unsigned long xfer;
};

static unsigned pick_size(uint64_t r)
{
    unsigned long total = 0, x;
    for (unsigned i = 0; i < g_nmix; i++)
        total += MIX[i].calls;
    x = (unsigned long)(r % total);
    for (unsigned i = 0; i < g_nmix; i++) {
        if (x < MIX[i].calls)
            return MIX[i].lo + 1 + (unsigned)((r >> 32) % (MIX[i].hi - MIX[i].lo));
        x -= MIX[i].calls;
    }
    return 64;
}

static void state_init(struct state *st, int id)
{
    uint64_t seed = 0x9E3779B97F4A7C15ull ^ (uint64_t)(id + 1) * 0xD1B54A32D192ED03ull;
    for (int k = 0; k < 8; k++)
        xorshift64(&seed);
    for (int i = 0; i < SEQ; i++) {
        uint64_t r = xorshift64(&seed);
        st->size[i] = pick_size(r);
        r = xorshift64(&seed);
        st->slot[i] = (uint16_t)(r % RING);
        st->handoff[i] = (r >> 32) % XFER_EVERY == 0;
    }
    st->out = &g_inbox[(id + 1) % g_threads];
    st->in = &g_inbox[id];
    st->xfer = 0;
    for (int k = 0; k < RING; k++)
        if (!(st->ring[k] = malloc(st->size[k])))
            die("malloc returned NULL");
}

/* Hands p to the next thread; returns 0 when its inbox is full. */
static int give(struct inbox *b, void *p)
{
    unsigned long t = atomic_load_explicit(&b->tail, memory_order_relaxed);
    if (t - atomic_load_explicit(&b->head, memory_order_acquire) >= INBOX)
        return 0;
    b->buf[t & (INBOX - 1)] = p;
    atomic_store_explicit(&b->tail, t + 1, memory_order_release);
    return 1;
}

/* Frees every block in this thread's inbox; returns how many. */
static unsigned long drain(struct inbox *b)
{
    unsigned long h = atomic_load_explicit(&b->head, memory_order_relaxed);
    unsigned long t = atomic_load_explicit(&b->tail, memory_order_acquire), n = t - h;
    for (; h != t; h++)
        free(b->buf[h & (INBOX - 1)]);
    atomic_store_explicit(&b->head, h, memory_order_release);
    return n;
}

static unsigned long loop(struct state *st, long n)
{
    unsigned long acc = 0;
    for (long i = 0; i < n; i++) {
        unsigned j = (unsigned)i & (SEQ - 1);
        unsigned k = st->slot[j];
        if (!st->handoff[j] || !give(st->out, st->ring[k]))
            free(st->ring[k]);
        volatile char *p = malloc(st->size[j]);
        if (!p)
            die("malloc returned NULL");
        p[0] = (char)i;
        acc += (unsigned char)p[0];
        st->ring[k] = (void *)p;
        if ((i & (DRAIN_EVERY - 1)) == DRAIN_EVERY - 1)
            st->xfer += drain(st->in);
    }
    return acc;
}

static void *worker(void *vp)
{
    struct thread_arg *a = vp;
    if (a->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(a->cpu, &set);
        if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0)
            die("pthread_setaffinity_np failed");
    }
    long warm = g_iters / 10 < 1000 ? 1000 : g_iters / 10 > 200000 ? 200000 : g_iters / 10;
    struct state *st = malloc(sizeof *st);
    if (!st)
        die("malloc(state) returned NULL");
    state_init(st, a->id);
    unsigned long acc = loop(st, warm);
    pthread_barrier_wait(&g_barrier);
    st->xfer = 0;
    double c0 = now_ns(CLOCK_THREAD_CPUTIME_ID), t0 = now_ns(CLOCK_MONOTONIC);
    acc += loop(st, g_iters);
    double t1 = now_ns(CLOCK_MONOTONIC), c1 = now_ns(CLOCK_THREAD_CPUTIME_ID);
    pthread_barrier_wait(&g_barrier); /* nobody hands a block over after this */
    drain(st->in);
    for (int k = 0; k < RING; k++)
        free(st->ring[k]);
    a->xfer = st->xfer;
    free(st);
    g_sink += acc;
    a->ns = t1 - t0;
    a->cpu_ns = c1 - c0;
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

/* The CPUs of the process's affinity mask, in order, into cpus[]; returns how many. */
static int allowed_cpus(int *cpus)
{
    cpu_set_t set;
    int n = 0;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return 0;
    for (int c = 0; c < CPU_SETSIZE && n < MAX_THREADS; c++)
        if (CPU_ISSET(c, &set))
            cpus[n++] = c;
    return n;
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 5 || (argc == 5 && strcmp(argv[4], "nopin") != 0))
        die("usage: scale <all|small> <threads> <iterations> [nopin]");
    if (strcmp(argv[1], "small") == 0)
        while (g_nmix > 0 && MIX[g_nmix - 1].hi > 32768)
            g_nmix--;
    else if (strcmp(argv[1], "all") != 0)
        die("the mix must be all or small");
    g_threads = atoi(argv[2]);
    g_iters = atol(argv[3]);
    if (g_threads < 1 || g_threads > MAX_THREADS)
        die("threads must be 1..256");
    if (g_iters < 1)
        die("iterations must be >= 1");
    report_malloc_lib();
    static int cpus[MAX_THREADS];
    int ncpu = argc == 5 ? 0 : allowed_cpus(cpus);
    static struct thread_arg args[MAX_THREADS];
    static pthread_t tids[MAX_THREADS];
    if (posix_memalign((void **)&g_inbox, 64, sizeof(struct inbox) * (size_t)g_threads) != 0)
        die("posix_memalign(inboxes) failed");
    memset(g_inbox, 0, sizeof(struct inbox) * (size_t)g_threads);
    pthread_barrier_init(&g_barrier, NULL, (unsigned)g_threads);
    for (int t = 0; t < g_threads; t++) {
        args[t].id = t;
        args[t].cpu = ncpu > 0 ? cpus[t % ncpu] : -1;
        if (pthread_create(&tids[t], NULL, worker, &args[t]) != 0)
            die("pthread_create failed");
    }
    double sum = 0, max = 0, cpu = 0;
    unsigned long xfer = 0;
    for (int t = 0; t < g_threads; t++) {
        pthread_join(tids[t], NULL);
        double ns = args[t].ns / (double)g_iters;
        sum += ns;
        max = ns > max ? ns : max;
        cpu += args[t].cpu_ns / (double)g_iters;
        xfer += args[t].xfer;
    }
    pthread_barrier_destroy(&g_barrier);
    free(g_inbox);
    printf("ns_per_pair=%.2f ns_per_pair_max=%.2f cpu_ns_per_pair=%.2f xfer_frees=%lu\n", sum / g_threads, max,
           cpu / g_threads, xfer);
    return 0;
}
