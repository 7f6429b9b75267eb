/* dump_storm.c: a program that sends itself the dump signal N times (argv[2], default 20,000),
 * as glibc's tst-mallocfork2 does: its own SIGUSR1 handler counts the signals (the shim chains
 * to it), and between two signals it allocates (a malloc/free pair of 32..4 KiB), so a pending
 * dump request is seen by the next sampled call.
 *   argv[1] = single    one thread: the shim's thread never starts; requests are answered by the
 *                       program's own thread (or at exit)
 *   argv[1] = threaded  an idle second thread first, so the shim's thread answers them
 * Prints "sent=N handled=M" and exits 0 when the handler saw every signal, 1 otherwise. */
#include "dump_util.h"
#include <pthread.h>
#include <signal.h>

static volatile sig_atomic_t handled;
static void on_usr1(int sig) {
  (void)sig;
  handled++;
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int done;

static void *idle(void *arg) {
  (void)arg;
  pthread_mutex_lock(&mu);
  while (!done) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  return NULL;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "single";
  long n = argc > 2 ? atol(argv[2]) : 20000;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGUSR1, &sa, NULL) != 0) return 2;
  pthread_t t;
  int threaded = !strcmp(mode, "threaded");
  if (threaded && pthread_create(&t, NULL, idle, NULL) != 0) return 2;
  for (long i = 0; i < n; i++) {
    kill(getpid(), SIGUSR1);
    alloc_pairs(1, 32 + (size_t)(i % 128) * 32);
  }
  if (threaded) {
    pthread_mutex_lock(&mu);
    done = 1;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(t, NULL);
  }
  printf("sent=%ld handled=%ld\n", n, (long)handled);
  return handled == n ? 0 : 1;
}
