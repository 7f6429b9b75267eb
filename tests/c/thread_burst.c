/* thread_burst.c: bursts of detached threads, half of which never allocate (tests/hostile.rs).
 *
 * Four creator threads each start 500 detached threads as fast as they can (retrying on EAGAIN);
 * odd ones malloc and free one block of 64-575 bytes, even ones do nothing at all. Many threads
 * start, exit and are reaped while others are being created, so glibc frees dead threads'
 * TLS (`_dl_deallocate_tls`, from the exiting thread that reclaims cached stacks) after every
 * TSD destructor of the freeing thread ran: for a thread that never allocated, that free can
 * be its first contact with the allocator. Under jemalloc, the shim's usable-size lookup on that
 * free once set up the thread's whole jemalloc state (a thread cache linked into an arena) on a
 * stack about to be unmapped, and the next thread to join the arena died of SIGSEGV (3 of 3 runs
 * with profiling on, session 15).
 *
 * Usage: thread_burst [CREATORS [PER_CREATOR]]   Output: done=N (threads finished). Exit 0.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static atomic_long done;
static int per_creator = 500;

static void *allocating(void *a) {
    void *p = malloc(64 + (long)a % 512);
    free(p);
    atomic_fetch_add(&done, 1);
    return NULL;
}

static void *idle(void *a) {
    (void)a;
    atomic_fetch_add(&done, 1);
    return NULL;
}

static void *creator(void *a) {
    long base = (long)a;
    pthread_attr_t da;
    pthread_attr_init(&da);
    pthread_attr_setdetachstate(&da, PTHREAD_CREATE_DETACHED);
    for (int i = 0; i < per_creator; i++) {
        pthread_t t;
        while (pthread_create(&t, &da, (i & 1) ? allocating : idle, (void *)(base + i)) != 0) usleep(100);
    }
    pthread_attr_destroy(&da);
    return NULL;
}

int main(int argc, char **argv) {
    int creators = argc > 1 ? atoi(argv[1]) : 4;
    if (argc > 2) per_creator = atoi(argv[2]);
    if (creators < 1 || creators > 64) creators = 4;
    pthread_t c[64];
    for (long i = 0; i < creators; i++) pthread_create(&c[i], NULL, creator, (void *)(i * 100000));
    for (int i = 0; i < creators; i++) pthread_join(c[i], NULL);
    long want = (long)creators * per_creator;
    while (atomic_load(&done) < want) usleep(1000);
    printf("done=%ld\n", atomic_load(&done));
    return 0;
}
