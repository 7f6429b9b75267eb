/* mstress.c: mimalloc-bench's `mstress` (the stress test of mimalloc's test/test-stress.c, by
 * Daan Leijen, MIT licence), REWRITTEN FROM MEMORY: the originals could not be fetched here.
 * Behaviour kept: THREADS threads run in ITER rounds (created and joined each round); each
 * thread makes 100*SCALE*(tid%8+1) allocations of 1..16 words (1% of them 100x, and of those
 * some 1,000x and 10,000x), calloc'd and filled with a cookie pattern; it retains half in a
 * private array, frees 66% of the rest at random, and 25% of the time exchanges one of its
 * objects with a random slot of a shared 1,000-entry transfer array (so objects are freed by
 * other threads, in other rounds). Between rounds half the transfer slots are freed; after the
 * last, all. Every free checks the pattern (abort with CORRUPTION on a mismatch).
 * The loop is in mstress_core.h.
 * Usage: mstress [THREADS=32] [SCALE=10] [ITER=50]; prints `mstress: ok ...` at the end. */
#include "mstress_core.h"

int main(int argc, char **argv)
{
    if (parse_args(argc, argv, "mstress"))
        return 2;
    uint64_t r = 12345;
    for (int n = 0; n < ITER; n++) {
        if (run_threads(THREADS, stress))
            return 1;
        drain_transfers(&r, n + 1 == ITER);
    }
    printf("mstress: ok threads=%d scale=%d iter=%d allocated=%llu freed=%llu\n", THREADS, SCALE, ITER,
           (unsigned long long)allocated, (unsigned long long)freed);
    return allocated == freed ? 0 : 1;
}
