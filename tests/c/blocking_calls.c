/* blocking_calls.c: a program whose threads sit in blocking calls that any caught signal would
 * cut short (EINTR, or an early return), for tests/ctl_quiet.rs: the control channel's clients
 * must not signal a process whose shim thread listens.
 * Usage: blocking_calls SECONDS. One thread each in sleep, nanosleep, poll (no fds), select (no
 * fds), read (a pipe nobody writes to before the end) and pause, and the main thread in sleep;
 * prints "ready pid=N" once they are started, then after SECONDS one line per call:
 * "<call> ok" (it blocked the whole time) or "<call> interrupted" (it returned early), and
 * "done". pause returns only on a signal, so it is "ok" when it has not returned. Exits 0. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

static int seconds;
static int pipefd[2];
static atomic_int early[7];
static const char *names[7] = {"sleep", "nanosleep", "poll", "select", "read", "pause", "main-sleep"};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

/* Returned before its time (a small slack for the clock). */
static void check(int i, double start, double want) {
  if (now() - start < want - 0.05) atomic_store(&early[i], 1);
}

static void *run(void *arg) {
  int i = (int)(long)arg;
  double s = now();
  switch (i) {
  case 0:
    sleep((unsigned)seconds);
    check(i, s, seconds);
    break;
  case 1: {
    struct timespec t = {seconds, 0};
    if (nanosleep(&t, NULL) != 0) atomic_store(&early[i], 1);
    check(i, s, seconds);
    break;
  }
  case 2:
    if (poll(NULL, 0, seconds * 1000) != 0) atomic_store(&early[i], 1);
    check(i, s, seconds);
    break;
  case 3: {
    struct timeval tv = {seconds, 0};
    if (select(0, NULL, NULL, NULL, &tv) != 0) atomic_store(&early[i], 1);
    check(i, s, seconds);
    break;
  }
  case 4: {
    char c;
    /* The main thread writes one byte after SECONDS: anything before that is early. */
    if (read(pipefd[0], &c, 1) != 1) atomic_store(&early[i], 1);
    check(i, s, seconds);
    break;
  }
  case 5:
    pause();
    atomic_store(&early[i], 1);
    break;
  }
  return NULL;
}

int main(int argc, char **argv) {
  seconds = argc > 1 ? atoi(argv[1]) : 5;
  if (pipe(pipefd) != 0) return 1;
  pthread_t t[6];
  for (long i = 0; i < 6; i++)
    if (pthread_create(&t[i], NULL, run, (void *)i) != 0) return 1;
  /* Some allocation, so that the shim's counters and heap profile have something to show. */
  for (int i = 0; i < 1000; i++) free(malloc(64 + (size_t)i));
  printf("ready pid=%d\n", (int)getpid());
  fflush(stdout);
  double s = now();
  sleep((unsigned)seconds);
  check(6, s, seconds);
  /* Whatever is left of the time, if the main sleep was cut short. */
  while (now() - s < seconds) usleep(10000);
  if (write(pipefd[1], "x", 1) != 1) return 1;
  for (int i = 0; i < 5; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 7; i++) printf("%s %s\n", names[i], atomic_load(&early[i]) ? "interrupted" : "ok");
  printf("done\n");
  fflush(stdout);
  return 0;
}
