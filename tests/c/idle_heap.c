/* Holds N GiB of heap (argv[1], default 1) in 16 KiB blocks, every page touched, then idles with
 * one extra thread (so the shim's thread runs) until stdin closes: the idle server of
 * docs/history.md's CPU measurement (scripts/history-cpu.sh). Prints "ready" once it holds it all. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *idle(void *a) {
    (void)a;
    for (;;) pause();
    return NULL;
}

int main(int argc, char **argv) {
    double gib = argc > 1 ? atof(argv[1]) : 1.0;
    size_t block = 16 << 10, n = (size_t)(gib * (1u << 30)) / block;
    char **p = malloc(n * sizeof *p);
    if (!p) return 1;
    for (size_t i = 0; i < n; i++) {
        p[i] = malloc(block);
        if (!p[i]) { perror("malloc"); return 1; }
        memset(p[i], 1, block);
    }
    pthread_t t;
    pthread_create(&t, NULL, idle, NULL);
    printf("ready %zu blocks\n", n);
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {}
    return 0;
}
