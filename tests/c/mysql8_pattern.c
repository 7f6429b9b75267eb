/* mysql8_pattern.c: MySQL 8's signal handling. main blocks SIGUSR1 before creating threads; a
 * signal thread loops taking it with sigwaitinfo (or, with argv[1] = "sigwait" / "sigtimedwait",
 * with those) and prints "got=<sig> code=<si_code>" (sigwait: "got=<sig> rc=<rc>") per signal.
 * main sends kill(getpid(), SIGUSR1) (process-directed: one dump), joins the thread, waits up
 * to 5 s for the dump and prints "dumps=N".
 * With argv[2] = "tkill", main first sends the signal thread pthread_kill(SIGUSR1)
 * (thread-directed: must not dump), waits for it to be taken, waits 300 ms more and prints
 * "dumps_after_tkill=N" before the kill(getpid()). */
#include "dump_util.h"
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

static sigset_t set;
static const char *mode = "sigwaitinfo";
static atomic_int taken;
static int want = 1;

static void *sigthread(void *arg) {
  (void)arg;
  while (atomic_load(&taken) < want) {
    int sig = -1, code = -100, r;
    if (!strcmp(mode, "sigwait")) {
      r = sigwait(&set, &sig);
      code = 0;
      if (r != 0) sig = -r;
      printf("got=%d rc=%d\n", sig, r);
    } else {
      siginfo_t info;
      memset(&info, 0, sizeof info);
      if (!strcmp(mode, "sigtimedwait")) {
        struct timespec ts = {10, 0};
        sig = sigtimedwait(&set, &info, &ts);
      } else {
        sig = sigwaitinfo(&set, &info);
      }
      code = info.si_code;
      printf("got=%d code=%d\n", sig, code);
    }
    fflush(stdout);
    if (sig < 0) return NULL;
    atomic_fetch_add(&taken, 1);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc > 1) mode = argv[1];
  int tkill = argc > 2 && !strcmp(argv[2], "tkill");
  want = tkill ? 2 : 1;
  alloc_pairs(1000, 48);
  printf("pid=%d\n", (int)getpid()); /* stdout's buffer exists before any dump */
  fflush(stdout);
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0) return 2;
  pthread_t t;
  if (pthread_create(&t, NULL, sigthread, NULL) != 0) return 2;
  if (tkill) {
    pthread_kill(t, SIGUSR1);
    for (int i = 0; i < 5000 && atomic_load(&taken) < 1; i++) sleep_ms(1);
    sleep_ms(300);
    printf("dumps_after_tkill=%d\n", count_dumps(dump_last_ext()));
    fflush(stdout);
  }
  kill(getpid(), SIGUSR1);
  pthread_join(t, NULL);
  int n = wait_dumps(1, 5000);
  sleep_ms(200);
  n = count_dumps(dump_last_ext());
  printf("dumps=%d\n", n);
  return 0;
}
