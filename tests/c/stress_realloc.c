/* stress_realloc.c: realloc chains. 4 threads each keep 32 chains; a step picks one and
 * - starts it if empty (malloc, realloc(NULL), calloc with zeroing checked, posix_memalign,
 *   aligned_alloc or memalign at 16 B .. 4 KiB alignment), 1 B .. 1 KiB,
 * - ends it 1 time in 40 (free, free_sized, or realloc(p, 0), which frees and returns NULL),
 * - else resizes it with realloc or reallocarray(p, n/8, 8): grow x2..x4 or shrink /2../4 or by
 *   +-1..64 bytes, up to 64 KiB (1 in 16 chains may grow to 1 MiB, across glibc's mmap threshold),
 *   checking that the old prefix survived byte for byte and filling the new tail with the chain's
 *   pattern (byte k of chain `id` is a function of id and k only).
 * Every 64 steps a thread swaps one of its chains with a shared exchange slot, so chains continue
 * (are realloc'd and freed) on threads that did not start them. Prints (tests/stress.rs reads
 * them) calls.<entry>=N, bytes.<op>=N, objects_verified (chains ended), bytes_verified.
 * Argument: work scale (0 = baseline: threads only). */
#include "stress_common.h"

#define THREADS 4
#define CHAINS 32
#define STEPS 100000
#define XSLOTS 8

struct chain {
  void *p;
  uint64_t id;
  size_t size, cap;
  int started;
};

static struct chain xslot[XSLOTS];
static pthread_mutex_t xlock = PTHREAD_MUTEX_INITIALIZER;

static void start(struct chain *c, uint64_t id, uint64_t r) {
  size_t n = 1 + (r >> 20) % 1024;
  size_t align = (size_t)16 << ((r >> 50) % 9);
  unsigned pick = (r >> 8) % 6;
  c->id = id, c->started = 1;
  c->cap = (r >> 40) % 16 == 0 ? (1 << 20) : (64 << 10);
  if (pick == 0) c->p = s_malloc(n);
  else if (pick == 1) c->p = s_realloc(NULL, n);
  else if (pick == 2) {
    c->p = s_calloc(n, 1);
    st_check_zero(c->p, n, "calloc starting a chain");
  } else if (pick == 3) c->p = s_posix_memalign(align, n);
  else if (pick == 4) {
    n = (n + align - 1) / align * align;
    c->p = s_aligned_alloc(align, n);
  } else c->p = s_memalign(align, n);
  c->size = n;
  st_fill(c->p, c->id, 0, n);
}

static void end(struct chain *c, uint64_t r) {
  st_check(c->p, c->id, 0, c->size, "chain before its end");
  tc.objects++;
  unsigned pick = r % 3;
  if (pick == 0) s_free(c->p);
  else if (pick == 1) s_free_sized(c->p, c->size);
  else if (s_realloc(c->p, 0) != NULL) st_die("realloc(p, 0) did not return NULL", c->size, 0);
  memset(c, 0, sizeof *c);
}

static void resize(struct chain *c, uint64_t r) {
  size_t n = c->size;
  unsigned how = (r >> 8) % 6, f = 2 + (r >> 12) % 3;
  if (how < 2) n *= f;
  else if (how < 4) n /= f;
  else if (how == 4) n += 1 + (r >> 16) % 64;
  else n = n > 64 ? n - 1 - (r >> 16) % 64 : n + 1;
  if (n == 0) n = 1;
  if (n > c->cap) n = c->cap / 2 + (r >> 24) % 1024;
  void *q;
  if ((r >> 32) % 4 == 0) {
    n = (n + 7) & ~(size_t)7;
    q = s_reallocarray(c->p, n / 8, 8);
  } else {
    q = s_realloc(c->p, n);
  }
  size_t keep = n < c->size ? n : c->size;
  st_check(q, c->id, 0, keep, "realloc'd prefix");
  st_fill(q, c->id, keep, n);
  c->p = q, c->size = n;
}

static void *worker(void *arg) {
  long me = (long)arg;
  uint64_t rng = 0xABCDEF12345ULL * (me + 3), next_id = (uint64_t)me << 40;
  struct chain ch[CHAINS];
  memset(ch, 0, sizeof ch);
  st_thread_begin();
  long steps = st_work ? STEPS : 0;
  for (long s = 0; s < steps; s++) {
    uint64_t r = st_rand(&rng);
    struct chain *c = &ch[(r >> 56) % CHAINS];
    if (!c->started) start(c, next_id++, r);
    else if ((r >> 4) % 40 == 0) end(c, r >> 6);
    else resize(c, r);
    if (s % 64 == 63) {
      pthread_mutex_lock(&xlock);
      struct chain *x = &xslot[(r >> 3) % XSLOTS], t = *x;
      *x = *c, *c = t;
      pthread_mutex_unlock(&xlock);
    }
  }
  for (int i = 0; i < CHAINS; i++)
    if (ch[i].started) end(&ch[i], i);
  st_thread_end();
  return NULL;
}

int main(int argc, char **argv) {
  st_init(argc, argv);
  struct st_thread t[THREADS];
  for (long i = 0; i < THREADS; i++) st_start(&t[i], worker, (void *)i);
  for (int i = 0; i < THREADS; i++) st_join(&t[i]);
  for (int i = 0; i < XSLOTS; i++)
    if (xslot[i].started) end(&xslot[i], i);
  st_print("realloc");
  return 0;
}
