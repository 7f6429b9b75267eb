/* stuck_main.c SECONDS: holds its main thread in one system call for SECONDS, as a starting
 * mariadbd's can be (tests/dump_signal.rs). A second thread, which blocks SIGUSR1, starts first
 * (so the shim's own thread runs). Then the main thread vfork()s a child that sleeps SECONDS
 * before it exits: the parent's main thread waits in the kernel (killable only), and the kernel
 * gives a process-directed SIGUSR1 to the main thread first, so such a signal stays pending
 * (/proc/PID/status ShdPnd) until the child has exited, and another SIGUSR1 sent meanwhile is
 * merged into it. Prints "stuck pid=N" just before the vfork, "free" after it; then waits for
 * EOF on stdin and exits 0. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void *idle(void *arg) {
  (void)arg;
  pause();
  return NULL;
}

int main(int argc, char **argv) {
  double secs = argc > 1 ? atof(argv[1]) : 3.0;
  sigset_t usr1, old;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &usr1, &old);
  pthread_t t;
  if (pthread_create(&t, NULL, idle, NULL) != 0) return 1;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  usleep(100000); /* the shim's thread has started with the first thread; let it settle */
  printf("stuck pid=%d\n", (int)getpid());
  fflush(stdout);
  struct timespec ts = {(time_t)secs, (long)((secs - (time_t)secs) * 1e9)};
  pid_t c = vfork();
  if (c == 0) {
    /* The vfork child: system calls only, then _exit. */
    syscall(SYS_nanosleep, &ts, NULL);
    _exit(0);
  }
  if (c < 0) return 1;
  printf("free\n");
  fflush(stdout);
  char buf[64];
  while (fread(buf, 1, sizeof buf, stdin) > 0) {
  }
  return 0;
}
