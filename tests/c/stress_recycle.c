/* stress_recycle.c: thread recycling. 4 worker threads each start 5,000 short-lived child threads
 * (20,000 in all, two in flight per worker, on stacks the program owns). Each child takes 16 random
 * slots of a shared pool of 2,048 objects: it verifies and frees what another, usually long-gone,
 * thread left there, and leaves 16 objects of its own (mixed entry points, 1 B - 2 KiB, 1 in 32 up
 * to 64 KiB, filled with their id's pattern) that outlive it and are freed by later children or,
 * at the end, by main. Prints (tests/stress.rs reads them) calls.<entry>=N, bytes.<op>=N,
 * objects_verified, bytes_verified, threads_created. Argument: work scale (0 = baseline: the same
 * 20,000 threads, each with only its first malloc/free pair). Optional second argument: children
 * in flight per worker (default 2, at most 32). */
#include "stress_common.h"

#define WORKERS 4
#define CHILDREN 5000
#define PER_CHILD 16
#define POOL 2048
#define MAX_INFLIGHT 32

static struct st_pool pool;
static long created;

static void *child(void *arg) {
  uint64_t id0 = (uint64_t)(uintptr_t)arg;
  uint64_t rng = id0 * 0x9E3779B97F4A7C15ULL + 1;
  st_thread_begin();
  if (st_work) {
    for (int k = 0; k < PER_CHILD; k++) {
      uint64_t r = st_rand(&rng);
      size_t size = 1 + (r >> 20) % 2048;
      if ((r >> 44) % 32 == 0) size = 1 + (r >> 20) % 65536;
      struct st_obj in, out;
      st_alloc_mixed(&in, (id0 << 8) | k, size, r);
      if (st_pool_swap(&pool, (r >> 32), &in, &out)) st_release(&out, r >> 3, "object left by an exited thread");
    }
  }
  st_thread_end();
  return NULL;
}

static int inflight = 2;

static void *worker(void *arg) {
  long me = (long)arg;
  st_thread_begin();
  void *stack[MAX_INFLIGHT];
  pthread_t t[MAX_INFLIGHT];
  int live[MAX_INFLIGHT] = {0};
  for (int s = 0; s < inflight; s++) stack[s] = st_stack_new();
  for (long i = 0; i < CHILDREN; i++) {
    int s = i % inflight;
    if (live[s] && pthread_join(t[s], NULL)) st_die("pthread_join failed", i, 0);
    st_start_on(&t[s], stack[s], child, (void *)(uintptr_t)(me * CHILDREN + i + 1));
    live[s] = 1;
    __atomic_fetch_add(&created, 1, __ATOMIC_RELAXED);
  }
  for (int s = 0; s < inflight; s++) {
    if (live[s] && pthread_join(t[s], NULL)) st_die("pthread_join failed", s, 0);
    munmap(stack[s], ST_STACK);
  }
  st_thread_end();
  return NULL;
}

int main(int argc, char **argv) {
  st_init(argc, argv);
  if (argc > 2) inflight = atoi(argv[2]);
  if (inflight < 1 || inflight > MAX_INFLIGHT) st_die("in-flight children per worker out of range", inflight, MAX_INFLIGHT);
  st_pool_init(&pool, POOL);
  struct st_thread w[WORKERS];
  for (long i = 0; i < WORKERS; i++) st_start(&w[i], worker, (void *)i);
  for (int i = 0; i < WORKERS; i++) st_join(&w[i]);
  st_pool_drain(&pool);
  st_print("recycle");
  printf("threads_created=%ld\n", created);
  return 0;
}
