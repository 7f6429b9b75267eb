/* failed_huge.c: failed huge requests of every allocating entry point (tests/counters.rs).
 * Round r (0..ROUNDS-1): the main thread and one short-lived thread each make every failing
 * call once — malloc(SIZE_MAX - 4096), an overflowing calloc, realloc and reallocarray (of a
 * live block: it must be kept), posix_memalign(SIZE_MAX - 100), aligned_alloc, memalign,
 * valloc and pvalloc of SIZE_MAX - 4096 — and one successful 96 MiB malloc/free (the open size
 * class, counted with its bytes); then the program asks for a dump (SIGUSR1) and waits for it,
 * so dump r holds exactly rounds 0..r. Prints "failed malloc=N calloc=N realloc=N memalign=N"
 * (the failing calls of all rounds, by op). Exits 1 on any call that did not fail as glibc's do. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dump_util.h"

#define ROUNDS 3
#define HUGE (SIZE_MAX - 4096)

static int bad;

static void expect_null(void *p, const char *what) {
  if (p != NULL) {
    fprintf(stderr, "failed_huge: %s returned %p\n", what, p);
    bad = 1;
  }
}

/* One of each failing call: 1 malloc, 1 calloc, 2 realloc, 5 memalign. */
static void *fail_all(void *arg) {
  (void)arg;
  expect_null(malloc(HUGE), "malloc");
  expect_null(calloc(SIZE_MAX / 2, 3), "calloc overflow");
  void *live = malloc(100);
  if (!live) abort();
  memset(live, 7, 100);
  expect_null(realloc(live, HUGE), "realloc");
  expect_null(reallocarray(live, SIZE_MAX / 4, 8), "reallocarray overflow");
  free(live); /* kept by both failures */
  void *p = NULL;
  int rc = posix_memalign(&p, 64, SIZE_MAX - 100);
  if (rc != ENOMEM) {
    fprintf(stderr, "failed_huge: posix_memalign returned %d\n", rc);
    bad = 1;
  }
  expect_null(aligned_alloc(64, HUGE & ~(size_t)63), "aligned_alloc");
  expect_null(memalign(64, HUGE), "memalign");
  expect_null(valloc(HUGE), "valloc");
  expect_null(pvalloc(HUGE), "pvalloc");
  /* A served request of the open class (> 64 MiB): counted with its bytes. */
  void *big = malloc(96u << 20);
  if (!big) abort();
  ((volatile char *)big)[0] = 1;
  free(big);
  return NULL;
}

int main(void) {
  for (int r = 0; r < ROUNDS; r++) {
    fail_all(NULL);
    pthread_t t;
    if (pthread_create(&t, NULL, fail_all, NULL) != 0 || pthread_join(t, NULL) != 0) abort();
    if (getenv("FAILED_HUGE_DUMPS")) {
      kill(getpid(), SIGUSR1);
      if (wait_dumps(r + 1, 20000) < r + 1) {
        fprintf(stderr, "failed_huge: dump %d did not appear\n", r);
        return 1;
      }
    }
  }
  long per = 2L * ROUNDS; /* two threads per round */
  printf("failed malloc=%ld calloc=%ld realloc=%ld memalign=%ld\n", per, per, 2 * per, 5 * per);
  return bad;
}
