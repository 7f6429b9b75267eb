/* tcache_leak.c: glibc's malloc/tst-malloc-tcache-leak.c (tests/live_bytes.rs, issue 37): start
 * and join THREADS threads (argv[1], glibc's test: 100,000) one after the other, each mallocs
 * and frees one byte (so its tcache exists); mallinfo2().uordblks after them must not exceed
 * the figure before by more than THREADS bytes (1 byte a thread). The shim's heap profiler
 * sampled on the way, and its tables (1.1-1.4 MB, from the backend) made the test fail under
 * the glibc, jemalloc and tcmalloc backends. Prints both figures; exits 1 on a failure. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static void *worker(void *closure) {
  (void)closure;
  void *p = malloc(1);
  if (!p) abort();
  free(p);
  return NULL;
}

int main(int argc, char **argv) {
  long threads = argc > 1 ? atol(argv[1]) : 100000;
  pthread_t *thread = calloc(1, sizeof(pthread_t));
  if (!thread) abort();
  struct mallinfo2 before = mallinfo2();
  printf("INFO: %zu (bytes) are in use before starting threads.\n", before.uordblks);
  for (long loop = 0; loop < threads; loop++) {
    if (pthread_create(thread, NULL, worker, NULL) != 0) abort();
    void *retval;
    if (pthread_join(*thread, &retval) != 0) abort();
    free(retval);
  }
  struct mallinfo2 after = mallinfo2();
  printf("INFO: %zu (bytes) are in use after all threads joined.\n", after.uordblks);
  free(thread);
  if ((long)(after.uordblks - before.uordblks) > threads) {
    printf("FAIL: memory usage after threads is too high (%ld > %ld)\n",
           (long)(after.uordblks - before.uordblks), threads);
    return 1;
  }
  printf("PASS\n");
  return 0;
}
