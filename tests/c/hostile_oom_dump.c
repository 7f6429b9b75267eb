/* A dump asked for when memory has run out (tests/hostile.rs): the process limits RLIMIT_AS to
 * 256 MiB above its size, starts an idle thread (the shim's worker starts with it), allocates
 * 64 KiB and then 1 KiB blocks until malloc returns NULL and holds them, sends itself SIGUSR1
 * twice (kill: a process-directed signal) and waits: the shim must write the dump from its
 * thread's own heap, or skip it with one line where it has no memory, never abort the process.
 * Then it frees everything and sends SIGUSR1 again: that dump must be written. Prints
 * `exhausted blocks=N bytes=B` (B: the bytes the program asked for and holds) and `freed`; exits
 * 0. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "rlimit_util.h"

static void *idle(void *a)
{
    pause();
    return a;
}

int main(void)
{
    if (limit_address_space(256L << 20) != 0)
        return 7;
    pthread_t t;
    if (pthread_create(&t, NULL, idle, NULL) != 0)
        return 8;
    pthread_detach(t);
    /* Each held block points to the previous one: no other memory is needed to hold them. */
    void **head = NULL;
    long n = 0, bytes = 0;
    for (size_t sz = 64 << 10; sz >= 1024; sz /= 64) {
        for (;;) {
            void **b = malloc(sz);
            if (!b) {
                if (errno != ENOMEM)
                    return 6;
                break;
            }
            *b = head;
            head = b;
            n++;
            bytes += (long)sz;
        }
    }
    for (int i = 0; i < 2; i++) {
        kill(getpid(), SIGUSR1);
        usleep(300 * 1000);
    }
    printf("exhausted blocks=%ld bytes=%ld\n", n, bytes);
    fflush(stdout);
    while (head) {
        void **prev = *head;
        free(head);
        head = prev;
    }
    kill(getpid(), SIGUSR1);
    usleep(300 * 1000);
    printf("freed\n");
    return n > 0 ? 0 : 9;
}
