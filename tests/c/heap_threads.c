/* heap_threads.c: one thread allocates, another frees half of it (tests/heap_by_thread.rs).
 * Thread A ("heap_alloc_a") allocates argv[1] MiB in 64 KiB blocks (each written, so none is
 * elided); then thread B ("heap_free_b") frees every other block, allocating nothing itself.
 * While both threads are still alive (their names readable), main asks the shim for one dump
 * (mallocshim_dump, looked up with dlsym: the program also runs without the shim), then lets
 * them end and prints `tid_a=N tid_b=N rc=N`. A keeps half of what it allocated; B holds none. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK (64 << 10)

static void **blocks;
static long nblocks;
static int tid_a, tid_b;
static sem_t a_done, b_done;
static pthread_barrier_t end;

static void *alloc_a(void *arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "heap_alloc_a");
  tid_a = gettid();
  for (long i = 0; i < nblocks; i++) {
    blocks[i] = malloc(BLOCK);
    if (!blocks[i]) abort();
    memset(blocks[i], (int)i, BLOCK);
  }
  sem_post(&a_done);
  pthread_barrier_wait(&end);
  return NULL;
}

static void *free_b(void *arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "heap_free_b");
  tid_b = gettid();
  sem_wait(&a_done);
  for (long i = 0; i < nblocks; i += 2) {
    free(blocks[i]);
    blocks[i] = NULL;
  }
  sem_post(&b_done);
  pthread_barrier_wait(&end);
  return NULL;
}

int main(int argc, char **argv) {
  long mib = argc > 1 ? atol(argv[1]) : 64;
  nblocks = mib * (1 << 20) / BLOCK;
  blocks = calloc((size_t)nblocks, sizeof *blocks);
  if (!blocks) abort();
  sem_init(&a_done, 0, 0);
  sem_init(&b_done, 0, 0);
  pthread_barrier_init(&end, NULL, 3);
  pthread_t a, b;
  if (pthread_create(&a, NULL, alloc_a, NULL) || pthread_create(&b, NULL, free_b, NULL)) abort();
  sem_wait(&b_done);
  int (*dump)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "mallocshim_dump");
  int rc = dump ? dump() : -1;
  pthread_barrier_wait(&end);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  printf("tid_a=%d tid_b=%d rc=%d\n", tid_a, tid_b, rc);
  return 0;
}
