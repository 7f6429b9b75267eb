/* Allocation under an RLIMIT_AS that runs out (tests/hostile.rs): a forked child limits its
 * address space to 256 MiB above its current size (mimalloc maps its 32 MiB segments 32 MiB-
 * aligned: its first one alone takes 64 MiB of address space), starts a thread (its first allocation happens
 * there) and allocates 1 MiB and 1 KiB blocks until malloc returns NULL, then frees them all
 * and allocates again. With an argument N, N such children one after the other (each a fresh
 * start of the shim's worker thread racing the child's own thread to the limit). Prints
 * `blocks=N` from each child and `child_status=...` from the parent (the first child that did
 * not exit 0, else the last); exits 0 when every child exited 0 (no crash: malloc returned NULL
 * with errno ENOMEM). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rlimit_util.h"

static void *hog(void *a)
{
    long *blocks = a;
    void **keep = NULL;
    size_t n = 0, cap = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (;;) {
            size_t sz = (n % 2) ? 1024 : (1 << 20);
            void *p = malloc(sz);
            if (!p) {
                if (errno != ENOMEM)
                    exit(6);
                break;
            }
            memset(p, 1, 64);
            if (keep_block(&keep, &n, &cap, 256, p) != 0) {
                free(p);
                break;
            }
        }
        *blocks += (long)n;
        for (size_t i = 0; i < n; i++)
            free(keep[i]);
        n = 0;
    }
    free(keep);
    return NULL;
}

static int one_child(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (limit_address_space(256L << 20) != 0)
            _exit(7);
        long blocks = 0;
        pthread_t t;
        if (pthread_create(&t, NULL, hog, &blocks) != 0) {
            hog(&blocks); /* not even a thread stack fits */
        } else {
            pthread_join(t, NULL);
        }
        printf("blocks=%ld\n", blocks);
        fflush(stdout);
        _exit(blocks > 0 ? 0 : 8);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return st;
}

int main(int argc, char **argv)
{
    int children = argc > 1 ? atoi(argv[1]) : 1;
    usleep(100 * 1000); /* long enough for the test's SIGUSR1 storm to reach the parent */
    int st = 0;
    for (int i = 0; i < children; i++) {
        st = one_child();
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            break;
    }
    printf("child_status=%s%d\n", WIFSIGNALED(st) ? "signal " : "exit ", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
