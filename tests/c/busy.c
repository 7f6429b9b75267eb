/* busy.c: a long-running program for `mallocshim dump` and `mallocshim top`. Prints "ready pid=N"
 * once its worker thread runs, then the worker makes malloc(48)/free pairs (1,000 every ms) and
 * calloc(4000)/free pairs (10 every ms) until stdin reaches EOF; then it prints
 * "done pairs=N" and exits 0. A second thread exists so the shim's own thread writes dumps. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static volatile int stop;
static volatile unsigned long pairs;

static void *worker(void *arg) {
  (void)arg;
  while (!stop) {
    for (int i = 0; i < 1000; i++) {
      void *volatile p = malloc(48);
      free(p);
    }
    for (int i = 0; i < 10; i++) {
      void *volatile p = calloc(1, 4000);
      free(p);
    }
    pairs += 1010;
    usleep(1000);
  }
  return NULL;
}

int main(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, worker, NULL) != 0) return 1;
  printf("ready pid=%d\n", (int)getpid());
  fflush(stdout);
  char buf[64];
  while (fread(buf, 1, sizeof buf, stdin) > 0) {
  }
  stop = 1;
  pthread_join(t, NULL);
  printf("done pairs=%lu\n", pairs);
  return 0;
}
