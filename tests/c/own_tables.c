/* own_tables.c: a program that allocates and then frees everything, from its main thread and
 * four threads (tests/live_bytes.rs, issue 37): each allocates 16 MiB in blocks of 16 B to
 * 256 KiB (so the heap profiler samples and registers modules on every thread), keeping up to
 * 256 at a time, and frees all. Prints `live=N` (mallinfo2 uordblks + hblkhd) once everything
 * is freed and the threads joined: with the shim's tables in its own memory, the same as
 * without heap profiles. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *churn(void *seedp) {
  unsigned seed = (unsigned)(size_t)seedp;
  static __thread void *held[256];
  size_t total = 0;
  for (int i = 0; total < (16u << 20); i++) {
    size_t n = (size_t)16 << (rand_r(&seed) % 15);
    int k = i % 256;
    free(held[k]);
    held[k] = malloc(n);
    if (!held[k]) abort();
    memset(held[k], 1, n < 64 ? n : 64);
    total += n;
  }
  for (int k = 0; k < 256; k++) free(held[k]), held[k] = NULL;
  return NULL;
}

int main(void) {
  pthread_t t[4];
  printf("own_tables\n");
  fflush(stdout);
  for (size_t i = 0; i < 4; i++)
    if (pthread_create(&t[i], NULL, churn, (void *)(i + 1)) != 0) abort();
  churn((void *)7);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  struct mallinfo2 m = mallinfo2();
  printf("live=%zu\n", m.uordblks + m.hblkhd);
  return 0;
}
