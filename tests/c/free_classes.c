/* free_classes.c: frees blocks of known usable sizes, on the allocating thread and on another
 * thread, so that tests/free_classes.rs can check how the shim classes frees: by the block's
 * usable size (malloc_usable_size), whichever way the backend path gets it (a usable-size
 * lookup, or jemalloc's per-thread freed-bytes counter read around the free).
 * Prints one line per size class it fills:
 *   class max_bytes=M count=N bytes=B exact=0|1
 * exact=1 for classes nothing else in the process frees into (blocks of 8 MiB and more), where
 * the dump must hold exactly N frees and B bytes; exact=0 where it must hold at least that. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLASSES 24

static uint64_t want_count[CLASSES], want_bytes[CLASSES];

/* The shim's size classes: <=16, then (2^k, 2^(k+1)] up to 64 MiB, then >64 MiB. */
static int class_of(size_t size) {
  int c = 0;
  while (c < CLASSES - 1 && size > ((size_t)16 << c)) c++;
  return c;
}

static uint64_t class_max(int c) { return c == CLASSES - 1 ? UINT64_MAX : (uint64_t)16 << c; }

struct batch {
  void **p;
  size_t n;
};

/* Allocates n blocks of `size` (aligned to `align` when non-zero) and notes their usable sizes. */
static struct batch alloc_batch(size_t n, size_t size, size_t align) {
  struct batch b = {calloc(n, sizeof(void *)), n};
  if (!b.p) abort();
  for (size_t i = 0; i < n; i++) {
    void *q = NULL;
    if (align) {
      if (posix_memalign(&q, align, size)) abort();
    } else {
      q = malloc(size);
    }
    if (!q) abort();
    memset(q, 1, size < 64 ? size : 64);
    size_t u = malloc_usable_size(q);
    want_count[class_of(u)]++;
    want_bytes[class_of(u)] += u;
    b.p[i] = q;
  }
  return b;
}

static void free_batch(struct batch *b) {
  for (size_t i = 0; i < b->n; i++) free(b->p[i]);
}

static void *freer(void *arg) {
  free_batch(arg);
  return NULL;
}

int main(void) {
  static const struct {
    size_t n, size, align;
  } plan[] = {
      {2000, 1, 0},         {2000, 48, 0},           {2000, 1000, 0},        {500, 5000, 0},
      {200, 100000, 0},     {50, 1 << 20, 0},        {6, 10 << 20, 0},       {2, 100 << 20, 0},
      {500, 100, 4096},     {300, 3000, 64},         {4, 9 << 20, 1 << 16},
  };
  size_t np = sizeof plan / sizeof plan[0];
  struct batch own[sizeof plan / sizeof plan[0]], other[sizeof plan / sizeof plan[0]];
  for (size_t i = 0; i < np; i++) {
    own[i] = alloc_batch(plan[i].n, plan[i].size, plan[i].align);
    other[i] = alloc_batch(plan[i].n, plan[i].size, plan[i].align);
  }
  /* Half freed here, half by another thread (a cross-thread free). */
  for (size_t i = 0; i < np; i++) free_batch(&own[i]);
  pthread_t t;
  for (size_t i = 0; i < np; i++) {
    if (pthread_create(&t, NULL, freer, &other[i]) || pthread_join(t, NULL)) abort();
  }
  for (int c = 0; c < CLASSES; c++) {
    if (!want_count[c]) continue;
    printf("class max_bytes=%llu count=%llu bytes=%llu exact=%d\n", (unsigned long long)class_max(c),
           (unsigned long long)want_count[c], (unsigned long long)want_bytes[c], class_max(c) > (8u << 20));
  }
  return 0;
}
