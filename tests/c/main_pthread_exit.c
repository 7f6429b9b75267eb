/* The main thread ends with pthread_exit after its threads (joined, then detached ones still
 * running) : glibc ends the process when the last thread exits, with exit(0), so the atexit
 * handler runs and the status is 0. With "fork", a child does it and the parent waits for it
 * (at most 10 s, then SIGKILL and "child hung"). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void said(void) { printf("atexit ran in %d\n", (int)getpid()); fflush(stdout); }

static void *joined(void *a) {
  for (int i = 0; i < 1000; i++) free(malloc(16 + i));
  return a;
}

static void *detached(void *a) {
  struct timespec ts = {0, 200 * 1000 * 1000};
  nanosleep(&ts, 0);
  free(malloc(100));
  return a;
}

static void run(void) {
  atexit(said);
  pthread_t th[4];
  for (int i = 0; i < 4; i++) pthread_create(&th[i], 0, joined, 0);
  for (int i = 0; i < 4; i++) pthread_join(th[i], 0);
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_t d;
  for (int i = 0; i < 2; i++) pthread_create(&d, &at, detached, 0);
  pthread_exit(0);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "fork") == 0) {
    /* A thread first, so the parent is multi-threaded too (the shim's thread runs). */
    pthread_t t;
    pthread_create(&t, 0, joined, 0);
    pthread_join(t, 0);
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) run();
    for (int i = 0; i < 1000; i++) {
      int st;
      if (waitpid(p, &st, WNOHANG) == p) {
        printf("child status %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
        return 0;
      }
      struct timespec ts = {0, 10 * 1000 * 1000};
      nanosleep(&ts, 0);
    }
    kill(p, SIGKILL);
    waitpid(p, 0, 0);
    printf("child hung\n");
    return 1;
  }
  run();
  return 2;
}
