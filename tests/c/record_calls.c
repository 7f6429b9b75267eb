/* Known allocator calls for tests/record.rs (issue 24), recorded with MALLOCSHIM_RECORD.
 * Modes:
 *   calls   main: 100 malloc(1000+i), 10 calloc(7, 111+i), a realloc chain 3000 -> 3001..3010,
 *           5 posix_memalign(64, 3100+i), 5 aligned_alloc(256, 4096), memalign(128, 5000),
 *           valloc(6000), pvalloc(7000), all freed; a thread mallocs 50 blocks of 2000+i that
 *           main frees (cross-thread frees). Prints "tid main=T worker=W".
 *   exit    allocates for ever in a loop, exit(0) after 200 ms (mid-window).
 *   fork    allocates, forks mid-window: the child allocates 1000 blocks of 8888 and exits;
 *           the parent waits, then 100 malloc(7777).
 *   churn N N short threads, each malloc(4321)/free, created and joined in waves of 16.
 *   busy MS allocates and frees (and reallocs one block per 1000 calls) for MS ms on 4 threads.
 *   burst N a thread makes N malloc(64)/free pairs as fast as it can (its ring fills far faster
 *           than the drain reads it); once it has made a tenth of them (its start, and under
 *           heap profiles the first samples' unwinder set-up, behind it), main sends it SIGUSR2
 *           every 200 us, whose handler calls free(NULL) (a traced call that touches no
 *           allocator state: malloc itself is not async-signal-safe, and jemalloc alone
 *           crashes when a handler's malloc interrupts its own); prints "tid burst=T handled=H".
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void *blocks[50];
/* Every block passes through here, so that the compiler keeps each malloc/free pair. */
static void *volatile sink;
static void *keep(void *p) {
    sink = p;
    return sink;
}
static int worker_tid;

static void *worker(void *arg) {
    (void)arg;
    worker_tid = (int)syscall(SYS_gettid);
    for (int i = 0; i < 50; i++) {
        blocks[i] = malloc(2000 + i);
        memset(blocks[i], 1, 2000 + i);
    }
    return NULL;
}

static void calls(void) {
    void *p[100];
    for (int i = 0; i < 100; i++) p[i] = keep(malloc(1000 + i));
    for (int i = 0; i < 100; i++) free(p[i]);
    for (int i = 0; i < 10; i++) free(keep(calloc(7, 111 + i)));
    void *r = keep(malloc(3000));
    for (int i = 1; i <= 10; i++) r = keep(realloc(r, 3000 + i));
    free(r);
    for (int i = 0; i < 5; i++) {
        void *q = NULL;
        if (posix_memalign(&q, 64, 3100 + i) != 0) abort();
        free(keep(q));
        free(keep(aligned_alloc(256, 4096)));
    }
    free(keep(memalign(128, 5000)));
    free(keep(valloc(6000)));
    free(keep(pvalloc(7000)));
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    for (int i = 0; i < 50; i++) free(blocks[i]);
    printf("tid main=%d worker=%d\n", (int)syscall(SYS_gettid), worker_tid);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *spin(void *arg) {
    double end = *(double *)arg;
    void *keep[64] = {0};
    unsigned i = 0;
    void *held = NULL;
    while (now_ms() < end) {
        /* One realloc per batch: the first in a window takes the block of the one before it. */
        held = realloc(held, 3100 + i % 50);
        sink = held;
        for (int k = 0; k < 1000; k++, i++) {
            free(keep[i % 64]);
            keep[i % 64] = malloc(16 + (i * 37) % 3000);
            sink = keep[i % 64];
        }
    }
    for (int k = 0; k < 64; k++) free(keep[k]);
    free(held);
    return NULL;
}

static void *short_thread(void *arg) {
    (void)arg;
    free(keep(malloc(4321)));
    return NULL;
}

static long burst_pairs;
static volatile int burst_done;
static volatile long handled;
static volatile pid_t burst_tid;
static volatile long burst_made;
static volatile int signals_stopped;

static void *volatile nothing; /* NULL, read at run time: gcc drops a literal free(NULL) */

static void on_usr2(int sig) {
    (void)sig;
    free(nothing);
    handled++;
}

static void *burst(void *arg) {
    (void)arg;
    burst_tid = (pid_t)syscall(SYS_gettid);
    for (long i = 0; i < burst_pairs; i++) {
        free(keep(malloc(64)));
        burst_made = i + 1;
    }
    burst_done = 1;
    /* Stays until main has sent its last signal: one landing in the thread's exit, where the
     * shim releases its slot, is not recorded. */
    struct timespec step = {0, 100000};
    while (!signals_stopped) nanosleep(&step, NULL);
    return NULL;
}

static void burst_mode(long n) {
    burst_pairs = n;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr2;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR2, &sa, NULL);
    pthread_t t;
    pthread_create(&t, NULL, burst, NULL);
    struct timespec step = {0, 200000};
    while (burst_made < burst_pairs / 10) nanosleep(&step, NULL);
    while (!burst_done) {
        pthread_kill(t, SIGUSR2);
        nanosleep(&step, NULL);
    }
    signals_stopped = 1;
    pthread_join(t, NULL);
    printf("tid burst=%d handled=%ld\n", (int)burst_tid, handled);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "calls";
    if (!strcmp(mode, "calls")) {
        calls();
    } else if (!strcmp(mode, "exit")) {
        double end = now_ms() + 200;
        void *keep[16] = {0};
        for (unsigned i = 0;; i++) {
            free(keep[i % 16]);
            keep[i % 16] = malloc(100 + i % 500);
            sink = keep[i % 16];
            if (i % 1000 == 0 && now_ms() > end) exit(0);
        }
    } else if (!strcmp(mode, "fork")) {
        for (int i = 0; i < 100; i++) free(keep(malloc(6666)));
        pid_t c = fork();
        if (c == 0) {
            for (int i = 0; i < 1000; i++) free(keep(malloc(8888)));
            exit(0);
        }
        int st = 0;
        waitpid(c, &st, 0);
        for (int i = 0; i < 100; i++) free(keep(malloc(7777)));
        printf("child status %d\n", st);
        return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
    } else if (!strcmp(mode, "churn")) {
        int n = argc > 2 ? atoi(argv[2]) : 2000;
        for (int done = 0; done < n; done += 16) {
            pthread_t t[16];
            for (int k = 0; k < 16; k++) pthread_create(&t[k], NULL, short_thread, NULL);
            for (int k = 0; k < 16; k++) pthread_join(t[k], NULL);
        }
    } else if (!strcmp(mode, "burst")) {
        burst_mode(argc > 2 ? atol(argv[2]) : 1000000);
    } else if (!strcmp(mode, "busy")) {
        double end = now_ms() + (argc > 2 ? atof(argv[2]) : 500);
        pthread_t t[4];
        for (int k = 0; k < 4; k++) pthread_create(&t[k], NULL, spin, &end);
        for (int k = 0; k < 4; k++) pthread_join(t[k], NULL);
    }
    return 0;
}
