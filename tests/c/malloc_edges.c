/* malloc_edges.c: malloc/free pairs at both edges of every size class, so that
 * tests/size_classes.rs can check the shim's size-class arithmetic through the dump: for each
 * k, requests of exactly 16 << k bytes belong to class k and requests of (16 << k) + 1 bytes to
 * class k + 1 (the last class, above 64 MiB, takes everything larger). Sizes 0 and 1 belong to
 * class 0. Small sizes are repeated EDGE_N times, sizes of 1 MiB and more BIG_N times.
 * Prints one line per class:  class max_bytes=M count=N exact=0|1
 * (exact=1 from 8 MiB up, where nothing else in the process allocates). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CLASSES 24
#define EDGE_N 5000
#define BIG_N 40

static __thread void *volatile sink;
static uint64_t want[CLASSES];

static void pairs(size_t size, int cls, long n) {
  for (long i = 0; i < n; i++) {
    sink = malloc(size);
    if (!sink) abort();
    free(sink);
  }
  want[cls] += n;
}

int main(void) {
  pairs(0, 0, EDGE_N);
  pairs(1, 0, EDGE_N);
  for (int k = 0; k < CLASSES - 1; k++) {
    size_t top = (size_t)16 << k;
    long n = top >= (1u << 20) ? BIG_N : EDGE_N;
    pairs(top, k, n);         /* the largest request of class k */
    pairs(top + 1, k + 1, n); /* the smallest of class k + 1 */
  }
  for (int c = 0; c < CLASSES; c++) {
    unsigned long long max = c == CLASSES - 1 ? UINT64_MAX : (unsigned long long)16 << c;
    printf("class max_bytes=%llu count=%llu exact=%d\n", max, (unsigned long long)want[c], max > (8u << 20));
  }
  return 0;
}
