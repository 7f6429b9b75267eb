/* named_threads.c: 4 threads named worker-0..worker-3 each do exactly 100,000 malloc(48)/free
 * pairs and 1,000 malloc(1 MiB)/free pairs, then stay alive at a barrier while main sends the
 * process SIGUSR1 and waits (up to 5 s) for the dump file; then they exit.
 * Prints "pid=N dumps=M"; exits 1 if no dump appeared. */
#include "dump_util.h"
#include <pthread.h>
#include <signal.h>

#define THREADS 4

static pthread_barrier_t worked, may_exit;

static void *worker(void *arg) {
  char name[16];
  snprintf(name, sizeof name, "worker-%ld", (long)arg);
  pthread_setname_np(pthread_self(), name);
  alloc_pairs(100000, 48);
  alloc_pairs(1000, (size_t)1 << 20);
  pthread_barrier_wait(&worked);
  pthread_barrier_wait(&may_exit);
  return NULL;
}

int main(void) {
  pthread_t t[THREADS];
  pthread_barrier_init(&worked, NULL, THREADS + 1);
  pthread_barrier_init(&may_exit, NULL, THREADS + 1);
  for (long i = 0; i < THREADS; i++)
    if (pthread_create(&t[i], NULL, worker, (void *)i) != 0) return 2;
  pthread_barrier_wait(&worked);
  kill(getpid(), SIGUSR1);
  int n = wait_dumps(1, 5000);
  pthread_barrier_wait(&may_exit);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  printf("pid=%d dumps=%d\n", (int)getpid(), n);
  return n >= 1 ? 0 : 1;
}
