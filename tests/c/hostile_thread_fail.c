/* Threads whose first allocations come after the address space ran out (tests/hostile.rs;
 * issue 37 item 7: jemalloc 5.3 dies of SIGSEGV there, in `cache_bin_alloc` when it could not
 * set the thread's cache up, in `tcache_arena_associate` when it could not create the thread's
 * arena). Each forked child limits its address space to 64 MiB above its size, then either
 * starts eight threads that wait (mode "before": started, not yet allocating) or starts them
 * after (mode "after"; their stacks are in .bss, so thread creation needs no mapping, and small
 * blocks freed just before let glibc's `pthread_create` allocate the thread's DTV), exhausts the
 * address space with 64 KiB down to 16-byte blocks, and lets each thread allocate 100 B, 5000 B,
 * 40 KB and 300 KB. Every allocation must give a block or NULL with errno ENOMEM. With an
 * argument N, N children, alternating the modes. Prints one line per child that did not exit 0
 * and `bad=B of N`; exits 0 when every child exited 0. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rlimit_util.h"

#define THREADS 8
#define STACK (256 << 10)

static char stacks[THREADS][STACK] __attribute__((aligned(4096)));
static pthread_barrier_t go;
static int before;

/* A thread's first allocations: the count that got a block, or -1 for a NULL without ENOMEM. */
static void *first(void *a)
{
    long *res = a;
    if (before)
        pthread_barrier_wait(&go);
    static const size_t sizes[] = {100, 5000, 40000, 300000};
    long got = 0;
    for (int i = 0; i < 4; i++) {
        errno = 0;
        void *p = malloc(sizes[i]);
        if (p) {
            got++;
            free(p);
        } else if (errno != ENOMEM) {
            *res = -1;
            return NULL;
        }
    }
    *res = got;
    return NULL;
}

static int child(void)
{
    pthread_t t[THREADS];
    long res[THREADS] = {0};
    int made = 0;
    static void *spare[16][64];
    if (before)
        pthread_barrier_init(&go, NULL, THREADS + 1);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 64; j++)
            spare[i][j] = malloc(64 * (i + 1));
    if (limit_address_space(64L << 20) != 0)
        return 7;
    for (int i = 0; before && i < THREADS; i++) {
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setstack(&at, stacks[i], STACK);
        if (pthread_create(&t[i], &at, first, &res[i]) != 0)
            return 9;
        made++;
    }
    void **keep = NULL;
    size_t n = 0, cap = 0;
    for (size_t sz = 64 << 10; sz >= 16; sz /= 4) {
        for (;;) {
            void *p = malloc(sz);
            if (!p)
                break;
            if (keep_block(&keep, &n, &cap, 4096, p) != 0) {
                free(p);
                break;
            }
        }
    }
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 64; j++)
            free(spare[i][j]);
    if (before)
        pthread_barrier_wait(&go);
    for (int i = 0; !before && i < THREADS; i++) {
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setstack(&at, stacks[i], STACK);
        if (pthread_create(&t[i], &at, first, &res[i]) != 0)
            break; /* no memory for the thread's DTV: not the case under test, not a failure */
        made++;
    }
    for (int i = 0; i < made; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < made; i++)
        if (res[i] < 0)
            return 6;
    return 0;
}

int main(int argc, char **argv)
{
    int children = argc > 1 ? atoi(argv[1]) : 2;
    usleep(100 * 1000); /* long enough for the test's SIGUSR1 storm to reach the parent */
    int bad = 0;
    for (int i = 0; i < children; i++) {
        before = i % 2 == 0;
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0)
            _exit(child());
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            bad++;
            printf("child %d (%s): %s %d\n", i, before ? "before" : "after", WIFSIGNALED(st) ? "signal" : "exit",
                   WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
        }
    }
    printf("bad=%d of %d\n", bad, children);
    return bad != 0;
}
