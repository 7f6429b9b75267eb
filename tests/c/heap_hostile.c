/* heap_hostile.c: every allocation sampled (run with MALLOCSHIM_PROF_SAMPLE_BYTES=1) while
 * threads exit by the thousand, others dlopen/dlclose a library, the main thread forks children
 * that allocate and exit, and SIGUSR1 asks the shim for dumps. Then:
 *   - keep_site: each of the 4000 short threads keeps one 256-byte block (KEEP live blocks);
 *   - churn_site: each thread also makes 50 malloc/free pairs (nothing live);
 * prints keep=N forks=N dlopens=N and api_rc=N from a final mallocshim_dump(); exits 0. */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 4000
#define WAVE 50
static void *kept[THREADS];
static atomic_int stop;
static const char *lib;

__attribute__((noinline)) void keep_site(int i) {
  kept[i] = malloc(256);
  memset(kept[i], 7, 256);
}

__attribute__((noinline)) void churn_site(void) {
  for (int k = 0; k < 50; k++) {
    volatile char *p = (volatile char *)malloc(64 + k * 8);
    p[0] = 1;
    free((void *)p);
  }
}

static void *worker(void *arg) {
  int i = (int)(long)arg;
  churn_site();
  keep_site(i);
  return NULL;
}

static void *dlopener(void *arg) {
  long *n = (long *)arg;
  while (!atomic_load(&stop)) {
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      fprintf(stderr, "dlopen %s: %s\n", lib, dlerror());
      exit(3);
    }
    dlclose(h);
    (*n)++;
  }
  return NULL;
}

int main(int argc, char **argv) {
  lib = argc > 1 ? argv[1] : "libm.so.6";
  long dlopens = 0;
  pthread_t d;
  pthread_create(&d, NULL, dlopener, &dlopens);
  int forks = 0;
  for (int w = 0; w < THREADS / WAVE; w++) {
    pthread_t t[WAVE];
    for (int j = 0; j < WAVE; j++) pthread_create(&t[j], NULL, worker, (void *)(long)(w * WAVE + j));
    if (w % 10 == 0) kill(getpid(), SIGUSR1);
    if (w % 8 == 0) {
      pid_t c = fork();
      if (c == 0) {
        churn_site();
        void *p = malloc(1000);
        free(p);
        _exit(0);
      }
      int st = 0;
      waitpid(c, &st, 0);
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "child status %d\n", st);
        return 4;
      }
      forks++;
    }
    for (int j = 0; j < WAVE; j++) pthread_join(t[j], NULL);
  }
  atomic_store(&stop, 1);
  pthread_join(d, NULL);
  int keep = 0;
  for (int i = 0; i < THREADS; i++) keep += kept[i] != NULL;
  int (*dump)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "mallocshim_dump");
  printf("keep=%d forks=%d dlopens=%ld api_rc=%d\n", keep, forks, dlopens, dump ? dump() : -1);
  for (int i = 0; i < THREADS; i++) free(kept[i]);
  return 0;
}
