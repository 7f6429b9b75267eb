/* stress_calloc.c: calloc zeroing under reuse of dirty memory. 4 threads; each step either
 * - dirties memory first: malloc (or memalign) a block of the size about to be calloc'd, fills it
 *   with non-zero bytes, frees it, then calloc's the same size (the backend likely hands the same
 *   dirty block back), or
 * - calloc's directly, with nmemb x size from 1 x 1 to 512 x 16 (1 in 256 up to 1 MiB, glibc's
 *   mmap path), calloc(0, n) and calloc(n, 0) included;
 * every calloc'd block is checked all-zero, then filled with its id's pattern and kept in a ring of
 * 16 per thread; the evicted block is verified and freed, or (1 in 4) handed to the next thread
 * through a shared slot array, which verifies and frees it. Prints (tests/stress.rs reads them)
 * calls.<entry>=N, bytes.<op>=N, objects_verified, bytes_verified.
 * Argument: work scale (0 = baseline: threads only). */
#include "stress_common.h"

#define THREADS 4
#define STEPS 80000
#define RING 16

static struct st_pool pool;

static void *worker(void *arg) {
  long me = (long)arg;
  uint64_t rng = 0x5151515151ULL * (me + 7);
  struct st_obj ring[RING];
  memset(ring, 0, sizeof ring);
  st_thread_begin();
  long steps = st_work ? STEPS : 0;
  for (long s = 0; s < steps; s++) {
    uint64_t r = st_rand(&rng);
    size_t nmemb = 1 + (r >> 8) % 512, size = 1 + (r >> 24) % 16;
    if ((r >> 30) % 256 == 0) nmemb = 1 + (r >> 8) % 65536;
    if ((r >> 36) % 512 == 0) nmemb = 0;
    else if ((r >> 36) % 512 == 1) size = 0;
    size_t n = nmemb * size;
    if ((r >> 45) % 4 == 0 && n) {
      /* Dirty a block of the same size and free it first. */
      void *d = (r >> 47) % 2 ? s_malloc(n) : s_memalign(64, n);
      memset(d, 0xA5, n);
      s_free(d);
    }
    uint64_t id = ((uint64_t)me << 40) | s;
    struct st_obj o = {.p = s_calloc(nmemb, size), .id = id, .size = n, .align = 0};
    st_check_zero(o.p, n, "calloc");
    st_fill(o.p, id, 0, n);
    struct st_obj *slot = &ring[s % RING];
    if (slot->p) {
      if ((r >> 50) % 4 == 0) {
        struct st_obj out;
        /* Give it to another thread; free what was there (usually another thread's). */
        if (st_pool_swap(&pool, (r >> 52) % 64, slot, &out)) st_release(&out, r >> 5, "calloc block from another thread");
      } else {
        st_release(slot, r >> 5, "own calloc block");
      }
    }
    *slot = o;
  }
  for (int i = 0; i < RING; i++)
    if (ring[i].p) st_release(&ring[i], i, "own calloc block at the end");
  st_thread_end();
  return NULL;
}

int main(int argc, char **argv) {
  st_init(argc, argv);
  st_pool_init(&pool, 64);
  struct st_thread t[THREADS];
  for (long i = 0; i < THREADS; i++) st_start(&t[i], worker, (void *)i);
  for (int i = 0; i < THREADS; i++) st_join(&t[i]);
  st_pool_drain(&pool);
  st_print("calloc");
  return 0;
}
