/* dump_misc.c: small programs for tests/dump.rs, chosen by argv[1]. Each first makes 10,000
 * malloc(48)/free pairs and a few calloc/realloc/memalign calls so every op has data.
 *   untouched  kill(getpid(), SIGUSR1) without touching the signal; wait for one dump
 *   ign        signal(SIGUSR1, SIG_IGN), then the same; prints ign_kept=1 if SIG_IGN is still reported
 *   burst      200 kill(getpid(), SIGUSR1) in a tight loop; wait for a dump, then 500 ms more
 *   churn      10,000 short threads in waves of 100, 10 malloc/free pairs each, joined; then
 *              mallocshim_dump() through dlsym; prints api_rc and vmhwm_kb (peak RSS)
 *   sigfail    kill(getpid(), SIGUSR1), 1 s pause, then mallocshim_dump(); prints api_rc
 *   symlink    umask(0); prints pid=N, waits for a line on stdin, kill(getpid(), SIGUSR1),
 *              1 s pause, then 4 x mallocshim_dump() printing api_rc<i>=rc
 * Prints "dumps=N" (complete dumps of this process found) where it waits for dumps; exits 0.
 * untouched, ign, burst, sigfail and symlink are single-threaded: the shim has no worker thread there (it starts
 * with the program's first thread), so the dump is written by the program's own thread at its
 * next sampled allocator call. They wait the way a working program does: allocating. */
#include "dump_util.h"
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>

static int api_dump(void) {
  int (*f)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "mallocshim_dump");
  return f ? f() : -1;
}

static long vmhwm_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmHWM:", 6)) v = atol(line + 6);
  if (f) fclose(f);
  return v;
}

static void *churner(void *arg) {
  (void)arg;
  alloc_pairs(10, 48);
  return NULL;
}

static void warm(void) {
  alloc_pairs(10000, 48);
  for (int i = 0; i < 100; i++) {
    char *p = calloc(4, 100 + i);
    p = realloc(p, 5000 + i);
    free(p);
    free(memalign(64, 200));
  }
}

static void print_dumps(int n) { printf("dumps=%d\n", n); }

/* Sleeps ms while working (64 pairs every 10 ms), so a pending signal dump gets written. */
static void work_ms(long ms) {
  for (long t = 0; t < ms; t += 10) {
    alloc_pairs(64, 48);
    sleep_ms(10);
  }
}

/* wait_dumps for a single-threaded program that keeps working: 64 pairs between polls. */
static int wait_dumps_working(int want, long timeout_ms) {
  const char *ext = dump_last_ext();
  int n = 0;
  for (long t = 0; t <= timeout_ms; t += 10) {
    n = stat_dumps(ext);
    if (n >= want) break;
    alloc_pairs(64, 48);
    sleep_ms(10);
  }
  return n;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "untouched";
  warm();
  if (!strcmp(mode, "untouched")) {
    kill(getpid(), SIGUSR1);
    print_dumps(wait_dumps_working(1, 5000));
  } else if (!strcmp(mode, "ign")) {
    signal(SIGUSR1, SIG_IGN);
    struct sigaction cur;
    memset(&cur, 0, sizeof cur);
    sigaction(SIGUSR1, NULL, &cur);
    printf("ign_kept=%d\n", cur.sa_handler == SIG_IGN);
    kill(getpid(), SIGUSR1);
    int n = wait_dumps_working(1, 5000);
    sleep_ms(200);
    print_dumps(n > 0 ? count_dumps(dump_last_ext()) : n);
  } else if (!strcmp(mode, "burst")) {
    for (int i = 0; i < 200; i++) kill(getpid(), SIGUSR1);
    wait_dumps_working(1, 5000);
    sleep_ms(500);
    print_dumps(count_dumps(dump_last_ext()));
  } else if (!strcmp(mode, "churn")) {
    enum { WAVE = 100, WAVES = 100 };
    pthread_t t[WAVE];
    int created = 0;
    for (int w = 0; w < WAVES; w++) {
      for (int i = 0; i < WAVE; i++) {
        if (pthread_create(&t[i], NULL, churner, NULL) != 0) return 2;
        created++;
      }
      for (int i = 0; i < WAVE; i++) pthread_join(t[i], NULL);
    }
    int rc = api_dump();
    printf("threads=%d api_rc=%d vmhwm_kb=%ld\n", created, rc, vmhwm_kb());
  } else if (!strcmp(mode, "sigfail")) {
    kill(getpid(), SIGUSR1);
    work_ms(1000);
    printf("api_rc=%d\n", api_dump());
  } else if (!strcmp(mode, "symlink")) {
    umask(0);
    printf("pid=%d\n", (int)getpid());
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin)) return 3;
    kill(getpid(), SIGUSR1);
    work_ms(1000);
    for (int i = 1; i <= 4; i++) printf("api_rc%d=%d\n", i, api_dump());
  } else {
    fprintf(stderr, "dump_misc: unknown mode %s\n", mode);
    return 2;
  }
  return 0;
}
