/* fragment.c: the fragmentation program of the trim tests (tests/trim.rs) and bench (benches/trim.rs).
 *
 * Checks nothing itself; it makes the memory pattern that leaves glibc's arenas full of free holes
 * and prints what RSS does afterwards. Each of --threads threads (default 4) allocates its share of
 * --mib MiB (default 256) in blocks of 1-64 KiB (uniform, xorshift per thread, every byte touched),
 * waits for the others (a barrier: the whole --mib is allocated at once), then frees 9 of every 10
 * blocks (block i is kept when i % 10 == 0: the kept 10% are spread over the whole heap, so the
 * heap's top cannot shrink). The threads are then joined; the main thread
 * samples RSS (/proc/self/statm) right after the frees and every --sample-ms ms (default 250) for
 * --watch-ms ms (default 3500). Under plain glibc RSS stays ~258 MiB; malloc_trim(0) brings it to
 * ~32 MiB.
 *
 * Options:
 *   --mib N --threads N --watch-ms N --sample-ms N
 *   --cycles N        repeat allocate/free-90%/watch N times (the kept 10% freed between cycles)
 *   --churn           while watching, keep allocating: 16 malloc/touch/free of 1-64 KiB every ms
 *   --malloc-trim     call malloc_trim(0) right after the frees (the program's own baseline)
 *   --api             call mallocshim_trim() (looked up with dlsym) right after the frees
 *   --fork            fork first; the child (no exec) runs everything above, with --churn implied;
 *                     the parent waits for it and prints child_status=
 *
 * Output (stdout, one key=value per line; sample lines hold several):
 *   mode=plain|fork-child  pid=N  trim_api=present|absent
 *   cycle=C rss_start_bytes=N rss_peak_bytes=N rss_after_free_bytes=N
 *   [cycle=C malloc_trim_ret=N] [cycle=C api_ret=N api_rss_before_bytes=N api_rss_after_bytes=N
 *    api_released_bytes=N api_duration_ns=N]
 *   sample cycle=C t_ms=N rss_bytes=N      (t_ms from the end of the frees; t_ms=0 first)
 *   cycle=C rss_final_bytes=N
 *   child_status=N                          (the parent, in --fork mode)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mallocshim.h"

#define MIN_BLOCK 1024u
#define MAX_BLOCK (64u * 1024u)

typedef int (*trim_fn)(struct mallocshim_trim_result *);

static size_t opt_mib = 256;
static int opt_threads = 4;
static long opt_watch_ms = 3500;
static long opt_sample_ms = 250;
static int opt_cycles = 1;
static int opt_churn, opt_malloc_trim, opt_api, opt_fork;

static pthread_barrier_t all_allocated;
static __thread volatile uintptr_t sink; /* per-thread: keeps malloc/free pairs from being elided */

struct worker {
    int idx;
    int cycle;
    size_t bytes;   /* this thread's share */
    void **blocks;  /* kept blocks (every 10th) stay here between the phases */
    size_t nblocks;
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, res = 0;
    if (!f || fscanf(f, "%lu %lu", &size, &res) != 2) {
        perror("statm");
        exit(3);
    }
    fclose(f);
    return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

static uint32_t xorshift(uint32_t *s)
{
    uint32_t x = *s;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *s = x;
}

static size_t block_size(uint32_t *s)
{
    return MIN_BLOCK + xorshift(s) % (MAX_BLOCK - MIN_BLOCK + 1);
}

/* Allocates the thread's share, then frees 9 of every 10 blocks; keeps the rest in w->blocks. */
static void *fragment_thread(void *arg)
{
    struct worker *w = arg;
    uint32_t seed = 0x9e3779b9u ^ (uint32_t)(w->idx * 7919 + w->cycle * 104729 + 1);
    size_t cap = w->bytes / MIN_BLOCK + 1, n = 0, total = 0;
    void **all = malloc(cap * sizeof *all);
    if (!all) {
        perror("malloc index");
        exit(3);
    }
    while (total < w->bytes && n < cap) {
        size_t sz = block_size(&seed);
        char *p = malloc(sz);
        if (!p) {
            perror("malloc block");
            exit(3);
        }
        memset(p, (int)(n & 0xff) | 1, sz);
        all[n++] = p;
        total += sz;
    }
    pthread_barrier_wait(&all_allocated);
    size_t kept = 0;
    w->blocks = malloc((n / 10 + 1) * sizeof *w->blocks);
    if (!w->blocks) {
        perror("malloc kept");
        exit(3);
    }
    for (size_t i = 0; i < n; i++) {
        if (i % 10 == 0)
            w->blocks[kept++] = all[i];
        else
            free(all[i]);
    }
    free(all);
    w->nblocks = kept;
    return NULL;
}

static void churn_for(long ms, uint32_t *seed)
{
    uint64_t end = now_ms() + (uint64_t)ms;
    while (now_ms() < end) {
        for (int i = 0; i < 16; i++) {
            size_t sz = block_size(seed);
            char *p = malloc(sz);
            if (!p) {
                perror("churn malloc");
                exit(3);
            }
            memset(p, 0x5a, sz);
            sink = (uintptr_t)p;
            free(p);
        }
        usleep(1000);
    }
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void run_cycles(trim_fn api)
{
    uint32_t churn_seed = 12345u;
    struct worker *ws = calloc((size_t)opt_threads, sizeof *ws);
    pthread_t *tids = calloc((size_t)opt_threads, sizeof *tids);
    if (!ws || !tids) {
        perror("calloc");
        exit(3);
    }
    for (int c = 0; c < opt_cycles; c++) {
        printf("cycle=%d rss_start_bytes=%" PRIu64 "\n", c, rss_bytes());
        uint64_t peak = 0;
        pthread_barrier_init(&all_allocated, NULL, (unsigned)opt_threads);
        for (int t = 0; t < opt_threads; t++) {
            ws[t] = (struct worker){.idx = t, .cycle = c, .bytes = (opt_mib << 20) / (size_t)opt_threads};
            if (pthread_create(&tids[t], NULL, fragment_thread, &ws[t]) != 0) {
                perror("pthread_create");
                exit(3);
            }
        }
        for (int t = 0; t < opt_threads; t++)
            pthread_join(tids[t], NULL);
        pthread_barrier_destroy(&all_allocated);
        /* The peak is not observable after the frees; report what was allocated plus what is
         * left, from statm's view of the whole run (VmHWM). */
        FILE *st = fopen("/proc/self/status", "r");
        char line[256];
        while (st && fgets(line, sizeof line, st))
            if (sscanf(line, "VmHWM: %" SCNu64, &peak) == 1)
                peak *= 1024;
        if (st)
            fclose(st);
        uint64_t t0 = now_ms();
        printf("cycle=%d rss_peak_bytes=%" PRIu64 "\n", c, peak);
        printf("cycle=%d rss_after_free_bytes=%" PRIu64 "\n", c, rss_bytes());
        if (opt_malloc_trim)
            printf("cycle=%d malloc_trim_ret=%d\n", c, malloc_trim(0));
        if (opt_api) {
            if (!api) {
                printf("cycle=%d api_ret=absent\n", c);
            } else {
                struct mallocshim_trim_result r;
                memset(&r, 0xff, sizeof r);
                int rc = api(&r);
                printf("cycle=%d api_ret=%d api_rss_before_bytes=%" PRIu64 " api_rss_after_bytes=%" PRIu64
                       " api_released_bytes=%" PRIu64 " api_duration_ns=%" PRIu64 " api_null_ret=%d\n",
                       c, rc, r.rss_before_bytes, r.rss_after_bytes, r.released_bytes, r.duration_ns, api(NULL));
            }
        }
        fflush(stdout);
        long next = 0;
        for (;;) {
            long t = (long)(now_ms() - t0);
            if (t >= next) {
                printf("sample cycle=%d t_ms=%ld rss_bytes=%" PRIu64 "\n", c, t, rss_bytes());
                fflush(stdout);
                while (next <= t)
                    next += opt_sample_ms;
            }
            if (t >= opt_watch_ms)
                break;
            long wait = next - t;
            if (opt_churn)
                churn_for(wait, &churn_seed);
            else
                sleep_ms(wait);
        }
        printf("cycle=%d rss_final_bytes=%" PRIu64 "\n", c, rss_bytes());
        fflush(stdout);
        for (int t = 0; t < opt_threads; t++) {
            for (size_t i = 0; i < ws[t].nblocks; i++) {
                sink = (uintptr_t)ws[t].blocks[i];
                free(ws[t].blocks[i]);
            }
            free(ws[t].blocks);
        }
    }
    free(ws);
    free(tids);
}

static long num_arg(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s needs a value\n", argv[*i]);
        exit(2);
    }
    char *end;
    long v = strtol(argv[++*i], &end, 10);
    if (*end || v < 0) {
        fprintf(stderr, "bad value %s\n", argv[*i]);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    /* Line-buffered even into a pipe: a test can act on each line as it is printed. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--mib"))
            opt_mib = (size_t)num_arg(argc, argv, &i);
        else if (!strcmp(a, "--threads"))
            opt_threads = (int)num_arg(argc, argv, &i);
        else if (!strcmp(a, "--watch-ms"))
            opt_watch_ms = num_arg(argc, argv, &i);
        else if (!strcmp(a, "--sample-ms"))
            opt_sample_ms = num_arg(argc, argv, &i);
        else if (!strcmp(a, "--cycles"))
            opt_cycles = (int)num_arg(argc, argv, &i);
        else if (!strcmp(a, "--churn"))
            opt_churn = 1;
        else if (!strcmp(a, "--malloc-trim"))
            opt_malloc_trim = 1;
        else if (!strcmp(a, "--api"))
            opt_api = 1;
        else if (!strcmp(a, "--fork"))
            opt_fork = 1;
        else {
            fprintf(stderr, "unknown option %s\n", a);
            return 2;
        }
    }
    if (opt_threads < 1 || opt_sample_ms < 1 || opt_cycles < 1) {
        fprintf(stderr, "--threads, --sample-ms and --cycles must be >= 1\n");
        return 2;
    }
    trim_fn api = (trim_fn)dlsym(RTLD_DEFAULT, "mallocshim_trim");
    if (opt_fork) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 3;
        }
        if (pid == 0) {
            opt_churn = 1;
            printf("mode=fork-child\npid=%d\ntrim_api=%s\n", (int)getpid(), api ? "present" : "absent");
            run_cycles(api);
            fflush(stdout);
            exit(0); /* exit(), not _exit(): the shim's at-exit dump runs in the child too */
        }
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
        }
        printf("child_status=%d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
        return 0;
    }
    printf("mode=plain\npid=%d\ntrim_api=%s\n", (int)getpid(), api ? "present" : "absent");
    run_cycles(api);
    return 0;
}
