/* account.c: the RSS account's test program (tests/account.rs).
 *
 * Makes memory of three known kinds, then asks the shim for a dump (mallocshim_dump, looked up
 * with dlsym) while nothing moves:
 *   live      --live-mib MiB (default 48) held in 16 KiB blocks by the main thread;
 *   free      --free-mib MiB (default 64) allocated in 1-64 KiB blocks, 9 of 10 freed (block
 *             i kept when i % 10 == 0), so the allocator keeps the holes;
 *   non-heap  --mmap-mib MiB (default 32) of a private anonymous mmap, every page written.
 * Threads: 5 threads of routine `short_lived_routine` each make 1,000 malloc/free pairs and exit
 * (joined before the dump); 2 threads of routine `account_worker_routine` make 1,000 pairs and
 * wait until the dump is written, then exit.
 * Output: pid=N live_bytes=N kept_bytes=N mmap_bytes=N dump_rc=N
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static __thread void *volatile sink;
static pthread_barrier_t ready, done;

static void pairs(int n) {
  for (int i = 0; i < n; i++) {
    sink = malloc(64 + (i % 512));
    free(sink);
  }
}

void *short_lived_routine(void *arg) {
  (void)arg;
  pairs(1000);
  return NULL;
}

void *account_worker_routine(void *arg) {
  (void)arg;
  pairs(1000);
  pthread_barrier_wait(&ready);
  pthread_barrier_wait(&done);
  return NULL;
}

static long arg(int argc, char **argv, const char *k, long d) {
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], k)) return atol(argv[i + 1]);
  return d;
}

int main(int argc, char **argv) {
  size_t live_mib = arg(argc, argv, "--live-mib", 48), free_mib = arg(argc, argv, "--free-mib", 64),
         mmap_mib = arg(argc, argv, "--mmap-mib", 32);
  pthread_t t[7];
  for (int i = 0; i < 5; i++)
    if (pthread_create(&t[i], NULL, short_lived_routine, NULL)) return 2;
  for (int i = 0; i < 5; i++) pthread_join(t[i], NULL);
  pthread_barrier_init(&ready, NULL, 3);
  pthread_barrier_init(&done, NULL, 3);
  for (int i = 5; i < 7; i++)
    if (pthread_create(&t[i], NULL, account_worker_routine, NULL)) return 2;

  size_t nlive = live_mib * 64, live = 0;
  char **lv = malloc(nlive * sizeof *lv);
  for (size_t i = 0; i < nlive; i++) {
    lv[i] = malloc(16384);
    memset(lv[i], 1, 16384);
    live += 16384;
  }
  size_t cap = free_mib * 64, n = 0, kept = 0, total = 0;
  char **fb = malloc(cap * sizeof *fb);
  uint64_t x = 88172645463325252ull;
  while (total < free_mib << 20 && n < cap) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    size_t sz = 1024 + x % (63 * 1024);
    fb[n] = malloc(sz);
    memset(fb[n], 2, sz);
    total += sz;
    n++;
  }
  for (size_t i = 0; i < n; i++) {
    if (i % 10 == 0) { kept++; continue; }
    free(fb[i]);
  }
  size_t mlen = mmap_mib << 20;
  char *m = mmap(NULL, mlen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return 3;
  for (size_t i = 0; i < mlen; i += 4096) m[i] = 3;

  pthread_barrier_wait(&ready);
  int (*dump)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "mallocshim_dump");
  int rc = dump ? dump() : -1;
  printf("pid=%d live_bytes=%zu kept_blocks=%zu mmap_bytes=%zu dump_rc=%d\n", getpid(), live, kept, mlen, rc);
  fflush(stdout);
  pthread_barrier_wait(&done);
  for (int i = 5; i < 7; i++) pthread_join(t[i], NULL);
  return 0;
}
