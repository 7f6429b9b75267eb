/* arena_unmap.c: measuring the account while other threads make glibc unmap arena heaps
 * (tests/account_race.rs).
 *
 * Each of THREADS threads (default 2) loops for SECONDS seconds (default 3): it allocates 1,100
 * blocks of 64 KiB in its own arena (below the mmap threshold, so they come from the arena's
 * heaps: 70 MiB, more than one 64 MiB heap, so the arena gets a second heap), writes one byte of
 * each, then frees them newest first: glibc's heap_trim then unmaps the emptied second heap
 * (delete_heap). Meanwhile the main thread asks the shim for dumps as fast as it can
 * (mallocshim_dump, looked up with dlsym: each dump measures the account, which reads every arena
 * heap's header found in /proc/self/maps). Before session 14's fix the header was dereferenced,
 * and a heap unmapped between the read of maps and the load ended the process with SIGSEGV.
 *
 * Usage: arena_unmap [SECONDS [THREADS]]
 * Output (stdout): dump_api=present|absent, then iterations=N dumps=N dump_errors=N.
 * Exit status 0; 1 when a block could not be allocated.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define BLOCKS 1100
#define BLOCK (64 * 1024)

static atomic_int stop;
static atomic_long iterations;

static void *churn(void *arg) {
    (void)arg;
    static __thread char *b[BLOCKS];
    while (!atomic_load(&stop)) {
        for (int i = 0; i < BLOCKS; i++) {
            b[i] = malloc(BLOCK);
            if (!b[i]) {
                fprintf(stderr, "arena_unmap: malloc(%d) failed\n", BLOCK);
                exit(1);
            }
            b[i][0] = (char)i;
        }
        for (int i = BLOCKS - 1; i >= 0; i--) free(b[i]);
        atomic_fetch_add(&iterations, 1);
    }
    return NULL;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 3;
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    if (threads < 1 || threads > 64) threads = 2;
    int (*dump)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "mallocshim_dump");
    printf("dump_api=%s\n", dump ? "present" : "absent");
    fflush(stdout);
    pthread_t t[64];
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, churn, NULL);
    long dumps = 0, errors = 0;
    double end = now() + seconds;
    while (now() < end) {
        if (dump) {
            if (dump() != 0) errors++;
            dumps++;
        }
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    printf("iterations=%ld dumps=%ld dump_errors=%ld\n", atomic_load(&iterations), dumps, errors);
    return 0;
}
