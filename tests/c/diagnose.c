/* One situation per mode, for `mallocshim diagnose` (tests/diagnose.rs):
 *   retained: allocate 200 MiB in 1 KiB blocks, free 90% scattered (keep every 10th), idle 5 s:
 *             the plateau must be most of the history's window. Where the rows miss the peak
 *             (profiling off: live bytes only at full measurements), the rows show one step up,
 *             and a line fitted to a step at a share p of the window explains 3p(1-p) of the
 *             variance: 0.73 at p = 0.4, seen once under load after an allocation phase of 1.3 s
 *             and a 2.5 s idle, read as growth (R² >= 0.6); under 0.6 while p < 0.28;
 *   growth:   every 50 ms allocate and hold 4 MiB more in 4 KiB blocks (in hold_more), for 3 s;
 *   outside:  every 50 ms mmap and touch 4 MiB more of anonymous memory, for 3 s;
 *   steady:   hold 8 MiB, malloc/free 1 KiB blocks in a loop for 2.5 s;
 *   arenas:   glibc arena retention (tests/diagnose_actions.rs): one malloc/free of 30 MiB (an
 *             mmap'ed chunk: glibc raises its mmap threshold to 30 MiB and its trim threshold to
 *             60 MiB), then 6 threads, each in an arena of its own, fill 32 MiB of 16 KiB blocks
 *             and free them all: each arena's top chunk keeps ~32 MiB, under the trim threshold,
 *             which malloc_trim never shrinks outside the main arena; the main thread fills 48
 *             MiB of 64 KiB blocks and frees 7 of every 8: free chunks whose whole pages
 *             malloc_trim returns (~42 MiB); then idle 5 s.
 * An idle thread starts first: the shim's worker (memlog) starts with the program's first thread.
 * With DIAGNOSE_WAIT set, the program prints "done MODE" and then waits for EOF on stdin, holding
 * what it made, so that `mallocshim diagnose PID` can ask it for its memory history. Each line
 * "touch" on stdin starts 6 threads that each malloc one 64 KiB block, wait until all six have
 * one, and free it (glibc gives a new thread an arena an exited thread left: the arenas mode's
 * six, whose tops the block is carved from and freed back to, where glibc's heap_trim runs),
 * joins them, then prints "touched". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static void nap_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *idle(void *a) {
    (void)a;
    for (;;) pause();
    return NULL;
}

static char *volatile sink;

/* One malloc/free of 64 KiB in the thread's arena (above the thread cache's sizes). The six
 * threads hold their blocks until all have one, so that each holds an arena of its own: a thread
 * that exited first would hand its arena back to glibc's free list for the next one. */
static pthread_barrier_t touching;

static void *touch(void *a) {
    (void)a;
    char *volatile p = malloc(64u << 10);
    p[0] = 1;
    pthread_barrier_wait(&touching);
    free(p);
    return NULL;
}

/* One arena's worth: 32 MiB of 16 KiB blocks, touched, then all freed (into the top chunk). */
static void *arena_fill(void *a) {
    (void)a;
    enum { N = (32 << 20) / (16 << 10) };
    static __thread char *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = malloc(16 << 10);
        memset(p[i], 1, 16 << 10);
    }
    for (int i = N - 1; i >= 0; i--) free(p[i]);
    return NULL;
}

/* The growth's call site, named in heap profiles (tests/diagnose.rs). */
__attribute__((noinline)) void hold_more(void) {
    for (int i = 0; i < 1024; i++) {
        char *b = malloc(4096);
        memset(b, 1, 4096);
    }
}

int main(int argc, char **argv) {
    pthread_t t;
    pthread_create(&t, NULL, idle, NULL);
    const char *mode = argc > 1 ? argv[1] : "";
    nap_ms(300);
    if (!strcmp(mode, "retained")) {
        size_t n = (200u << 20) / 1024;
        char **p = malloc(n * sizeof *p);
        for (size_t i = 0; i < n; i++) {
            p[i] = malloc(1024);
            memset(p[i], 1, 1024);
        }
        for (size_t i = 0; i < n; i++)
            if (i % 10) { free(p[i]); p[i] = NULL; }
        nap_ms(5000);
    } else if (!strcmp(mode, "growth")) {
        for (int step = 0; step < 60; step++) {
            hold_more();
            nap_ms(50);
        }
        nap_ms(300);
    } else if (!strcmp(mode, "outside")) {
        for (int step = 0; step < 60; step++) {
            char *m = mmap(NULL, 4u << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (m == MAP_FAILED) { perror("mmap"); return 1; }
            memset(m, 1, 4u << 20);
            nap_ms(50);
        }
        nap_ms(300);
    } else if (!strcmp(mode, "arenas")) {
        sink = malloc(30u << 20);
        free(sink);
        pthread_t w[6];
        for (int i = 0; i < 6; i++) pthread_create(&w[i], NULL, arena_fill, NULL);
        for (int i = 0; i < 6; i++) pthread_join(w[i], NULL);
        size_t n = (48u << 20) / (64u << 10);
        char **p = malloc(n * sizeof *p);
        for (size_t i = 0; i < n; i++) {
            p[i] = malloc(64u << 10);
            memset(p[i], 1, 64u << 10);
        }
        for (size_t i = 0; i < n; i++)
            if (i % 8) { free(p[i]); p[i] = NULL; }
        nap_ms(5000);
    } else if (!strcmp(mode, "steady")) {
        char *hold = malloc(8u << 20);
        memset(hold, 1, 8u << 20);
        double end = now_s() + 2.5;
        while (now_s() < end) {
            for (int i = 0; i < 1000; i++) {
                sink = malloc(1024);
                sink[0] = (char)i;
                free(sink);
            }
            nap_ms(5);
        }
        free(hold);
    } else {
        fprintf(stderr, "usage: diagnose retained|growth|outside|steady|arenas\n");
        return 2;
    }
    printf("done %s\n", mode);
    if (getenv("DIAGNOSE_WAIT")) {
        fflush(stdout);
        char buf[64];
        while (fgets(buf, sizeof buf, stdin)) {
            if (strncmp(buf, "touch", 5)) continue;
            pthread_t w[6];
            pthread_barrier_init(&touching, NULL, 6);
            for (int i = 0; i < 6; i++) pthread_create(&w[i], NULL, touch, NULL);
            for (int i = 0; i < 6; i++) pthread_join(w[i], NULL);
            pthread_barrier_destroy(&touching);
            printf("touched\n");
            fflush(stdout);
        }
    }
    return 0;
}
