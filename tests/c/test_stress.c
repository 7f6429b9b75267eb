/* test_stress.c: mimalloc's test/test-stress.c (Daan Leijen, MIT licence), which mimalloc-bench
 * also runs, REWRITTEN FROM MEMORY: the originals could not be fetched here. Each of ITER rounds
 * runs the stress phase of mstress (THREADS threads of the loop in mstress_core.h: allocate,
 * retain, free at random, swap objects through the shared transfer array), then the "leak"
 * phase: THREADS*4 short-lived threads that each allocate one object and swap it into the
 * transfer array (thread churn: objects freed by threads other than their allocator, after it
 * exited), then frees half the transfer slots (all after the last round).
 * Usage: test_stress [THREADS=32] [SCALE=10] [ITER=50]; prints `test-stress: ok ...`. */
#include "mstress_core.h"

int main(int argc, char **argv)
{
    if (parse_args(argc, argv, "test_stress"))
        return 2;
    uint64_t r = 54321;
    for (int n = 0; n < ITER; n++) {
        if (run_threads(THREADS, stress) || run_threads(THREADS * 4, leak))
            return 1;
        drain_transfers(&r, n + 1 == ITER);
    }
    printf("test-stress: ok threads=%d scale=%d iter=%d allocated=%llu freed=%llu\n", THREADS, SCALE, ITER,
           (unsigned long long)allocated, (unsigned long long)freed);
    return allocated == freed ? 0 : 1;
}
