/* The cost of one sampled stack (benches/sampled_stack.rs): recurses DEPTH frames (built
 * without frame pointers, each frame kept by an empty asm after the call), then times ITERS
 * malloc(64)/free pairs there and prints ns_per_pair=N. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long iters;

__attribute__((noinline)) static void work(void) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < iters; i++) {
        void *p = malloc(64);
        asm volatile("" : : "r"(p) : "memory");
        free(p);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
    printf("ns_per_pair=%.1f\n", ns / iters);
}

__attribute__((noinline)) static void rec(int d) {
    if (d > 0)
        rec(d - 1);
    else
        work();
    asm volatile("" ::: "memory");
}

int main(int argc, char **argv) {
    int depth = argc > 1 ? atoi(argv[1]) : 0;
    iters = argc > 2 ? atol(argv[2]) : 1000000;
    rec(depth);
    return 0;
}
