/* ctl_target.c: a process for the control channel's tests (tests/ctl.rs). Every mode starts a
 * second thread first (the shim's own thread, which serves the channel, starts with it), prints
 * "ready pid=N" and runs until stdin reaches EOF, then prints "done" and exits 0.
 *   hold MIB  : before "ready", allocates MIB MiB in 4000-byte blocks on the main thread and
 *               frees all but the last (which pins the heap's top): free memory only a trim
 *               (malloc_trim(0), purge, release, collect) gives back.
 *   churn     : two threads that create and join short-lived threads, and fork children that
 *               allocate and exit, in a loop (the hostile matrix's thread churn and fork).
 *   selfattach: queues its own dump signal (SIGUSR1) with the attach value three times, waits
 *               300 ms and prints "socket=yes" or "socket=no" for ARGV[2]/<pid>.sock (the
 *               setuid test: a secure-execution process never listens). */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define ATTACH_MAGIC 0x6d616c6c63746c31ULL

static volatile int stop;

static void *idle_main(void *arg) {
  (void)arg;
  while (!stop) usleep(10000);
  return NULL;
}

static void *short_main(void *arg) {
  (void)arg;
  for (int i = 0; i < 100; i++) {
    void *volatile p = malloc(16 + (size_t)i * 8);
    free(p);
  }
  return NULL;
}

static void *churn_main(void *arg) {
  int forks = arg != NULL;
  while (!stop) {
    pthread_t t;
    if (pthread_create(&t, NULL, short_main, NULL) == 0) pthread_join(t, NULL);
    if (forks) {
      pid_t p = fork();
      if (p == 0) {
        void *volatile q = malloc(1000);
        free(q);
        _exit(0);
      }
      if (p > 0) waitpid(p, NULL, 0);
      usleep(2000);
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "hold";
  pthread_t idle, c1, c2;
  if (strcmp(mode, "hold") == 0) {
    long mib = argc > 2 ? atol(argv[2]) : 64;
    long n = mib * 1048576 / 4000;
    void **v = malloc(sizeof(void *) * (size_t)n);
    for (long i = 0; i < n; i++) {
      v[i] = malloc(4000);
      memset(v[i], 1, 4000);
    }
    for (long i = 0; i + 1 < n; i++) free(v[i]);
  }
  if (pthread_create(&idle, NULL, idle_main, NULL) != 0) return 1;
  int churn = strcmp(mode, "churn") == 0;
  if (churn && (pthread_create(&c1, NULL, churn_main, NULL) != 0 ||
                pthread_create(&c2, NULL, churn_main, (void *)1) != 0))
    return 1;
  if (strcmp(mode, "selfattach") == 0) {
    union sigval v;
    v.sival_ptr = (void *)(uintptr_t)ATTACH_MAGIC;
    usleep(100000);
    for (int i = 0; i < 3; i++) sigqueue(getpid(), SIGUSR1, v);
    usleep(300000);
    char path[600];
    snprintf(path, sizeof path, "%s/%d.sock", argc > 2 ? argv[2] : "/run/mallocshim", (int)getpid());
    printf("socket=%s\n", access(path, F_OK) == 0 ? "yes" : "no");
  }
  printf("ready pid=%d\n", (int)getpid());
  fflush(stdout);
  char buf[64];
  while (fread(buf, 1, sizeof buf, stdin) > 0) {
  }
  stop = 1;
  pthread_join(idle, NULL);
  if (churn) {
    pthread_join(c1, NULL);
    pthread_join(c2, NULL);
  }
  printf("done\n");
  return 0;
}
