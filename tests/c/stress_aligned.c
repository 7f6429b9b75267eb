/* stress_aligned.c: the aligned family mixed with plain allocations. 4 threads; each step
 * allocates with posix_memalign (alignment 8 B .. 64 KiB), aligned_alloc (size a multiple of the
 * alignment), memalign (any power of two up to 64 KiB), valloc, pvalloc, malloc or calloc; checks
 * the alignment and malloc_usable_size >= the request; fills the block with its id's pattern; 1 in
 * 8 is realloc'd (content kept, no alignment promised beyond 16). 1 in 256 steps calls
 * posix_memalign with an invalid alignment (24, 4, 48 or 0), which must fail with EINVAL and leave
 * its output alone (a call that counts). Blocks go into a shared pool of 256 slots; whatever they
 * replace (usually another thread's block) is verified and freed with free, free_sized or
 * free_aligned_sized. Prints (tests/stress.rs reads them) calls.<entry>=N, bytes.<op>=N,
 * objects_verified, bytes_verified. Argument: work scale (0 = baseline: threads only). */
#include "stress_common.h"

#define THREADS 4
#define STEPS 120000
#define POOL 256

static struct st_pool pool;

static void *worker(void *arg) {
  long me = (long)arg;
  uint64_t rng = 0x77777ULL * (me + 11);
  st_thread_begin();
  long steps = st_work ? STEPS : 0;
  for (long s = 0; s < steps; s++) {
    uint64_t r = st_rand(&rng);
    size_t size = 1 + (r >> 8) % 2048;
    if ((r >> 20) % 32 == 0) size = 1 + (r >> 8) % (128 * 1024);
    size_t align = (size_t)8 << ((r >> 40) % 14); /* 8 .. 64 KiB */
    struct st_obj o = {.id = ((uint64_t)me << 40) | s, .size = size, .align = align};
    unsigned pick = (r >> 28) % 100;
    if ((r >> 48) % 256 == 0) {
      static const size_t bad[4] = {24, 4, 48, 0};
      s_posix_memalign_bad(bad[(r >> 56) % 4], size);
    }
    if (pick < 25) o.p = s_posix_memalign(align, size);
    else if (pick < 45) {
      o.size = size = (size + align - 1) / align * align;
      o.p = s_aligned_alloc(align, size);
    } else if (pick < 65) o.p = s_memalign(align, size);
    else if (pick < 72) o.p = s_valloc(size), o.align = 4096;
    else if (pick < 77) o.p = s_pvalloc(size), o.align = 4096;
    else if (pick < 92) o.p = s_malloc(size), o.align = 16;
    else {
      o.p = s_calloc(size, 1), o.align = 16;
      st_check_zero(o.p, size, "calloc");
    }
    s_usable(o.p, size);
    st_fill(o.p, o.id, 0, o.size);
    if ((r >> 60) % 8 == 0) {
      size_t n = 1 + (r >> 12) % 4096;
      o.p = s_realloc(o.p, n);
      size_t keep = n < o.size ? n : o.size;
      st_check(o.p, o.id, 0, keep, "realloc of an aligned block");
      st_fill(o.p, o.id, keep, n);
      o.size = n, o.align = 0;
    }
    struct st_obj out;
    if (st_pool_swap(&pool, r >> 32, &o, &out)) st_release(&out, r >> 3, "aligned block from the pool");
  }
  st_thread_end();
  return NULL;
}

int main(int argc, char **argv) {
  st_init(argc, argv);
  st_pool_init(&pool, POOL);
  struct st_thread t[THREADS];
  for (long i = 0; i < THREADS; i++) st_start(&t[i], worker, (void *)i);
  for (int i = 0; i < THREADS; i++) st_join(&t[i]);
  st_pool_drain(&pool);
  st_print("aligned");
  return 0;
}
