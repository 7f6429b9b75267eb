/* stress_prodcons.c: producer/consumer across 4 threads. Thread i allocates objects (malloc 55%,
 * calloc 15% with its zeroing checked, posix_memalign / aligned_alloc / memalign 20% with the
 * alignment checked, realloc(NULL, n) 10%; 1 B to 4 KiB, 1 in 64 up to 256 KiB), fills each with
 * the pattern of its id and hands it to thread (i+1)%4 through a bounded queue; every object is
 * verified and freed by the thread that did not allocate it (free, or free_sized /
 * free_aligned_sized for 1 in 8; 1 in 8 is first realloc'd to another size and its prefix
 * verified). A thread whose target queue is full consumes its own queue meanwhile; when all
 * objects are produced, the threads drain their queues until every object has been consumed.
 * Prints (tests/stress.rs reads them) calls.<entry>=N, bytes.<op>=N, objects_verified,
 * bytes_verified. Argument: work scale (0 = baseline: threads only). */
#include "stress_common.h"
#include <sched.h>
#include <stdatomic.h>

#define THREADS 4
#define PER_THREAD 80000
#define QCAP 512

struct obj {
  void *p;
  uint64_t id;
  uint32_t size, align;
  uint8_t kind; /* 0 plain, 1 aligned */
};

struct queue {
  pthread_mutex_t m;
  unsigned head, n;
  struct obj q[QCAP];
};

static struct queue queues[THREADS];
static atomic_long consumed;
static long total;

static int try_push(struct queue *q, const struct obj *o) {
  pthread_mutex_lock(&q->m);
  int ok = q->n < QCAP;
  if (ok) q->q[(q->head + q->n++) % QCAP] = *o;
  pthread_mutex_unlock(&q->m);
  return ok;
}

static int try_pop(struct queue *q, struct obj *o) {
  pthread_mutex_lock(&q->m);
  int ok = q->n > 0;
  if (ok) {
    *o = q->q[q->head];
    q->head = (q->head + 1) % QCAP, q->n--;
  }
  pthread_mutex_unlock(&q->m);
  return ok;
}

static void consume(const struct obj *o, uint64_t *rng) {
  if (o->align && (uintptr_t)o->p % o->align) st_die("consumer: misaligned object", (uintptr_t)o->p, o->align);
  st_check(o->p, o->id, 0, o->size, "consumer before free");
  tc.objects++;
  uint64_t r = st_rand(rng);
  if (r % 8 == 0) {
    size_t n = 1 + (r >> 8) % 8192;
    void *q = s_realloc(o->p, n);
    size_t keep = n < o->size ? n : o->size;
    st_check(q, o->id, 0, keep, "consumer after realloc");
    s_free(q);
  } else if (r % 8 == 1) {
    if (o->kind) s_free_aligned_sized(o->p, o->align, o->size);
    else s_free_sized(o->p, o->size);
  } else {
    s_free(o->p);
  }
  atomic_fetch_add(&consumed, 1);
}

static void *worker(void *arg) {
  long me = (long)arg;
  uint64_t rng = 0x1234567ULL * (me + 1);
  st_thread_begin();
  struct queue *mine = &queues[me], *next = &queues[(me + 1) % THREADS];
  struct obj o;
  long n = st_work ? PER_THREAD : 0;
  for (long i = 0; i < n; i++) {
    uint64_t r = st_rand(&rng);
    size_t size = 1 + (r >> 16) % 4096;
    if ((r >> 40) % 64 == 0) size = 1 + (r >> 16) % (256 * 1024);
    o = (struct obj){.id = ((uint64_t)me << 40) | i, .size = size, .align = 0, .kind = 0};
    unsigned pick = (r >> 8) % 100;
    if (pick < 55) {
      o.p = s_malloc(size);
    } else if (pick < 70) {
      o.p = s_calloc(1, size);
      st_check_zero(o.p, size, "calloc in producer");
    } else if (pick < 90) {
      o.align = 16u << ((r >> 50) % 9); /* 16 .. 4096 */
      o.kind = 1;
      if (pick < 77) o.p = s_posix_memalign(o.align, size);
      else if (pick < 84) {
        o.size = size = (size + o.align - 1) / o.align * o.align; /* a multiple, for C11 */
        o.p = s_aligned_alloc(o.align, size);
      } else o.p = s_memalign(o.align, size);
    } else {
      o.p = s_realloc(NULL, size);
    }
    st_fill(o.p, o.id, 0, o.size);
    while (!try_push(next, &o)) {
      struct obj c;
      if (try_pop(mine, &c)) consume(&c, &rng);
      else sched_yield();
    }
    if (r % 4 == 0) {
      struct obj c;
      if (try_pop(mine, &c)) consume(&c, &rng);
    }
  }
  while (atomic_load(&consumed) < total) {
    if (try_pop(mine, &o)) consume(&o, &rng);
    else sched_yield();
  }
  st_thread_end();
  return NULL;
}

int main(int argc, char **argv) {
  st_init(argc, argv);
  total = st_work ? (long)THREADS * PER_THREAD : 0;
  struct st_thread t[THREADS];
  for (int i = 0; i < THREADS; i++) pthread_mutex_init(&queues[i].m, NULL);
  for (long i = 0; i < THREADS; i++) st_start(&t[i], worker, (void *)i);
  for (int i = 0; i < THREADS; i++) st_join(&t[i]);
  if (atomic_load(&consumed) != total) st_die("objects produced but not consumed", total, atomic_load(&consumed));
  st_print("prodcons");
  return 0;
}
