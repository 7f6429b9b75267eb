/* mariadb_pattern.c: MariaDB's thr_alarm use of SIGUSR1. After start the program installs its
 * own SIGUSR1 handler with sigaction (counting invocations), starts 3 threads blocked in read()
 * on pipes, sends them 1,000 pthread_kill(thread, SIGUSR1) (one at a time, waiting for each to
 * be handled, since a pending standard signal does not queue), then one kill(getpid(), SIGUSR1),
 * waits 2 s and prints "handler_calls=N lost=L old_is_ours=B dumps=M". */
#include "dump_util.h"
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sched.h>

static atomic_int calls;
static int pipes[3][2];

static void on_usr1(int sig) {
  (void)sig;
  atomic_fetch_add(&calls, 1);
}

static void *reader(void *arg) {
  long i = (long)arg;
  char c;
  ssize_t r;
  do
    r = read(pipes[i][0], &c, 1);
  while (r < 0 && errno == EINTR);
  return NULL;
}

/* Waits until the handler count exceeds `before` (up to ~1 s); 0 on timeout. */
static int wait_calls(int before) {
  for (long spins = 0; spins < 1000000; spins++) {
    if (atomic_load(&calls) > before) return 1;
    if (spins > 1000) sched_yield();
    if (spins > 100000) sleep_ms(1);
  }
  return 0;
}

int main(void) {
  alloc_pairs(1000, 48);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  if (sigaction(SIGUSR1, &sa, NULL) != 0) return 2;
  struct sigaction cur;
  memset(&cur, 0, sizeof cur);
  sigaction(SIGUSR1, NULL, &cur);
  int old_is_ours = cur.sa_handler == on_usr1;

  pthread_t t[3];
  for (long i = 0; i < 3; i++) {
    if (pipe(pipes[i]) != 0) return 2;
    if (pthread_create(&t[i], NULL, reader, (void *)i) != 0) return 2;
  }
  sleep_ms(50); /* let the readers block in read() */
  int lost = 0;
  for (int k = 0; k < 1000; k++) {
    int before = atomic_load(&calls);
    pthread_kill(t[k % 3], SIGUSR1);
    if (!wait_calls(before)) lost++;
  }
  kill(getpid(), SIGUSR1);
  sleep_ms(2000);
  int dumps = count_dumps(dump_last_ext());
  for (int i = 0; i < 3; i++) close(pipes[i][1]);
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  printf("handler_calls=%d lost=%d old_is_ours=%d dumps=%d\n", atomic_load(&calls), lost, old_is_ours, dumps);
  return 0;
}
