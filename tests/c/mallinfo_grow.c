/* mallinfo_grow.c: glibc's tst-mallinfo2 behaviour (tests/counters.rs), in a fresh process.
 * Step 1: 256 blocks of 64 KiB (below glibc's mmap threshold, above jemalloc's thread-cache
 * limit), allocated and written: mallinfo2().uordblks grows by at least 16 MiB, and falls once
 * they are freed. Step 2 is glibc's tst-mallinfo2: 19 blocks of 160*i bytes held, and uordblks
 * must have grown by at least their 30,400 bytes. (In this order because jemalloc's
 * stats.allocated counts small blocks sitting in its thread caches as allocated until the
 * cache is flushed, which would move step 1's baseline.) argv[1], if given, is a slack in
 * bytes allowed below each growth (jemalloc: small blocks cached by its threads and flushed
 * meanwhile leave its figure). Prints the figures; exits 1 on a violation. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check(const char *what, int ok, size_t total, size_t before, size_t held, size_t after) {
  printf("%s %s total=%zu before=%zu held=%zu after=%zu\n", ok ? "ok" : "FAIL", what, total, before,
         held, after);
  return ok;
}

int main(int argc, char **argv) {
  size_t slack = argc > 1 ? strtoul(argv[1], NULL, 10) : 0;
  static void *q[256];
  size_t total = 256u * (64u << 10);
  struct mallinfo2 mi1 = mallinfo2();
  for (int i = 0; i < 256; i++) {
    q[i] = malloc(64u << 10);
    if (!q[i]) abort();
    memset(q[i], 1, 64u << 10);
  }
  struct mallinfo2 mi2 = mallinfo2();
  for (int i = 0; i < 256; i++) free(q[i]);
  struct mallinfo2 mi3 = mallinfo2();
  int ok = check("grow-fall", mi2.uordblks + slack >= mi1.uordblks + total && mi3.uordblks < mi2.uordblks,
                 total, mi1.uordblks, mi2.uordblks, mi3.uordblks);

  void *p[20];
  total = 0;
  mi1 = mallinfo2();
  for (int i = 1; i < 20; i++) {
    p[i] = malloc(160 * (size_t)i);
    if (!p[i]) abort();
    total += 160 * (size_t)i;
  }
  mi2 = mallinfo2();
  ok &= check("tst-mallinfo2", mi2.uordblks + slack >= mi1.uordblks + total, total,
              mi1.uordblks, mi2.uordblks, 0);
  for (int i = 1; i < 20; i++) free(p[i]);
  return ok ? 0 : 1;
}
