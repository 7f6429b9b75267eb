/* stress_common.h: what the stress programs (tests/c/stress_*.c, driven by tests/stress.rs) share.
 *
 * - Counted wrappers s_malloc, s_free, s_calloc, ... : every call a program makes to the malloc
 *   family goes through one of them, which bumps a per-thread counter for that entry point (and the
 *   requested bytes per op, as the shim records them) and calls the real function through a
 *   volatile function pointer, so gcc can neither elide a malloc/free pair nor turn malloc+memset
 *   into calloc. Per-thread counters are added into the process totals under a mutex when the
 *   thread ends (st_thread_end) and printed by st_print as `calls.<entry>=N` and `bytes.<op>=N`.
 * - Threads run on stacks the program mmap()s itself (pthread_attr_setstack), so glibc never
 *   caches or frees thread stacks on its own schedule: its own allocations per thread (the DTV,
 *   one calloc at pthread_create and one free at join) are then the same in every run, which the
 *   baseline method of tests/stress.rs relies on. Every thread starts with one counted
 *   malloc(32)/free pair (st_thread_begin) so that any lazy per-thread set-up of the backend happens
 *   in the zero-work baseline run too.
 * - Content patterns derived from an object id: st_fill / st_check (byte k of object `id` is a
 *   function of id and k, so a realloc'd prefix can be checked); a mismatch, a NULL return or a
 *   misaligned block prints `CORRUPTION: ...` on stderr and aborts.
 * - argv[1] is the work scale: 0 for the baseline run (same threads, same stdio, no work), 1 for
 *   the real run. main prints `ready` (flushed) before starting threads; the harness starts
 *   sending SIGUSR1 only after reading it (before the shim's constructor a SIGUSR1 would kill).
 */
#ifndef STRESS_COMMON_H
#define STRESS_COMMON_H
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define U __attribute__((unused))

/* Entry points, in the order and with the names of the shim's exit summary. */
enum { E_MALLOC, E_FREE, E_CALLOC, E_REALLOC, E_REALLOCARRAY, E_POSIX_MEMALIGN, E_ALIGNED_ALLOC,
       E_MEMALIGN, E_VALLOC, E_PVALLOC, E_USABLE, E_FREE_SIZED, E_FREE_ALIGNED_SIZED, NENT };
static const char *const entry_names[NENT] = {
    "malloc", "free", "calloc", "realloc", "reallocarray", "posix_memalign", "aligned_alloc",
    "memalign", "valloc", "pvalloc", "malloc_usable_size", "free_sized", "free_aligned_sized"};
/* Ops as in the JSON dump (bytes are recorded for the allocating ones). */
enum { O_MALLOC, O_CALLOC, O_REALLOC, O_FREE, O_MEMALIGN, NOPS };
static const char *const op_names[NOPS] = {"malloc", "calloc", "realloc", "free", "memalign"};

struct st_counts {
  uint64_t calls[NENT];
  uint64_t bytes[NOPS];
  uint64_t objects;  /* objects whose content was verified */
  uint64_t checked;  /* bytes verified */
};

static __thread struct st_counts tc;
static struct st_counts st_total;
static pthread_mutex_t st_lock = PTHREAD_MUTEX_INITIALIZER;
static int st_work = 1;

static void *(*volatile v_malloc)(size_t) = malloc;
static void (*volatile v_free)(void *) = free;
static void *(*volatile v_calloc)(size_t, size_t) = calloc;
static void *(*volatile v_realloc)(void *, size_t) = realloc;
static void *(*volatile v_reallocarray)(void *, size_t, size_t) = reallocarray;
static int (*volatile v_posix_memalign)(void **, size_t, size_t) = posix_memalign;
static void *(*volatile v_aligned_alloc)(size_t, size_t) = aligned_alloc;
static void *(*volatile v_memalign)(size_t, size_t) = memalign;
static void *(*volatile v_valloc)(size_t) = valloc;
static void *(*volatile v_pvalloc)(size_t) = pvalloc;
static size_t (*volatile v_usable)(void *) = malloc_usable_size;
/* glibc 2.43 names, exported by the shim; NULL without it (then st_free_sized uses free). */
static void (*volatile v_free_sized)(void *, size_t);
static void (*volatile v_free_aligned_sized)(void *, size_t, size_t);

static U void st_die(const char *what, uint64_t a, uint64_t b) {
  fprintf(stderr, "CORRUPTION: %s (%llu, %llu)\n", what, (unsigned long long)a, (unsigned long long)b);
  abort();
}

static U uint64_t mul_sat(size_t a, size_t b) {
  size_t r;
  return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}

static U void *s_malloc(size_t n) {
  tc.calls[E_MALLOC]++, tc.bytes[O_MALLOC] += n;
  void *p = v_malloc(n);
  if (!p) st_die("malloc returned NULL", n, 0);
  return p;
}
static U void s_free(void *p) {
  tc.calls[E_FREE]++;
  v_free(p);
}
static U void *s_calloc(size_t n, size_t sz) {
  tc.calls[E_CALLOC]++, tc.bytes[O_CALLOC] += mul_sat(n, sz);
  void *p = v_calloc(n, sz);
  if (!p) st_die("calloc returned NULL", n, sz);
  return p;
}
/* realloc(p, 0) frees p and returns NULL (glibc); any other NULL is a failure. */
static U void *s_realloc(void *p, size_t n) {
  tc.calls[E_REALLOC]++, tc.bytes[O_REALLOC] += n;
  void *q = v_realloc(p, n);
  if (!q && n) st_die("realloc returned NULL", n, 0);
  return q;
}
static U void *s_reallocarray(void *p, size_t n, size_t sz) {
  tc.calls[E_REALLOCARRAY]++, tc.bytes[O_REALLOC] += mul_sat(n, sz);
  void *q = v_reallocarray(p, n, sz);
  if (!q && n && sz) st_die("reallocarray returned NULL", n, sz);
  return q;
}
static U void st_aligned(void *p, size_t align, const char *fn) {
  if (!p) st_die(fn, align, 0);
  if ((uintptr_t)p % align) st_die("misaligned block", (uintptr_t)p, align);
}
static U void *s_posix_memalign(size_t align, size_t n) {
  tc.calls[E_POSIX_MEMALIGN]++, tc.bytes[O_MEMALIGN] += n;
  void *p = NULL;
  int rc = v_posix_memalign(&p, align, n);
  if (rc) st_die("posix_memalign failed", align, rc);
  st_aligned(p, align, "posix_memalign returned NULL");
  return p;
}
/* posix_memalign with an invalid alignment: must fail with EINVAL and leave *out alone. */
static U void s_posix_memalign_bad(size_t align, size_t n) {
  tc.calls[E_POSIX_MEMALIGN]++, tc.bytes[O_MEMALIGN] += n;
  void *p = (void *)&tc;
  int rc = v_posix_memalign(&p, align, n);
  if (rc != EINVAL || p != (void *)&tc) st_die("posix_memalign with a bad alignment did not fail with EINVAL", align, rc);
}
static U void *s_aligned_alloc(size_t align, size_t n) {
  tc.calls[E_ALIGNED_ALLOC]++, tc.bytes[O_MEMALIGN] += n;
  void *p = v_aligned_alloc(align, n);
  st_aligned(p, align, "aligned_alloc returned NULL");
  return p;
}
static U void *s_memalign(size_t align, size_t n) {
  tc.calls[E_MEMALIGN]++, tc.bytes[O_MEMALIGN] += n;
  void *p = v_memalign(align, n);
  st_aligned(p, align, "memalign returned NULL");
  return p;
}
static U void *s_valloc(size_t n) {
  tc.calls[E_VALLOC]++, tc.bytes[O_MEMALIGN] += n;
  void *p = v_valloc(n);
  st_aligned(p, 4096, "valloc returned NULL");
  return p;
}
static U void *s_pvalloc(size_t n) {
  tc.calls[E_PVALLOC]++, tc.bytes[O_MEMALIGN] += n;
  void *p = v_pvalloc(n);
  st_aligned(p, 4096, "pvalloc returned NULL");
  return p;
}
static U size_t s_usable(void *p, size_t atleast) {
  tc.calls[E_USABLE]++;
  size_t u = v_usable(p);
  if (u < atleast) st_die("malloc_usable_size smaller than the request", u, atleast);
  return u;
}
static U void s_free_sized(void *p, size_t n) {
  if (v_free_sized) {
    tc.calls[E_FREE_SIZED]++;
    v_free_sized(p, n);
  } else {
    s_free(p);
  }
}
static U void s_free_aligned_sized(void *p, size_t align, size_t n) {
  if (v_free_aligned_sized) {
    tc.calls[E_FREE_ALIGNED_SIZED]++;
    v_free_aligned_sized(p, align, n);
  } else {
    s_free(p);
  }
}

/* xorshift64*: per-thread, seeded by the caller. */
static inline uint64_t st_rand(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1DULL;
}

/* Byte k of object `id`. */
static inline uint8_t st_byte(uint64_t id, size_t k) {
  uint64_t h = (id + 1) * 0x9E3779B97F4A7C15ULL;
  return (uint8_t)((h >> 29) + k * 131 + (k >> 8) * 7);
}
static U void st_fill(void *p, uint64_t id, size_t from, size_t to) {
  uint8_t *b = p;
  for (size_t k = from; k < to; k++) b[k] = st_byte(id, k);
}
static U void st_check(const void *p, uint64_t id, size_t from, size_t to, const char *what) {
  const uint8_t *b = p;
  for (size_t k = from; k < to; k++)
    if (b[k] != st_byte(id, k)) {
      fprintf(stderr, "CORRUPTION: %s: object %llu byte %zu of [%zu,%zu) is %u, expected %u\n", what,
              (unsigned long long)id, k, from, to, b[k], st_byte(id, k));
      abort();
    }
  tc.checked += to - from;
}
static U void st_check_zero(const void *p, size_t n, const char *what) {
  const uint8_t *b = p;
  size_t k = 0;
  for (; k + 8 <= n; k += 8)
    if (*(const uint64_t *)(b + k)) break;
  for (; k < n; k++)
    if (b[k]) {
      fprintf(stderr, "CORRUPTION: %s: byte %zu of %zu is %u, not 0\n", what, k, n, b[k]);
      abort();
    }
  tc.checked += n;
}

/* ---- objects: allocated by one entry point, verified and freed by another thread ---- */
struct st_obj {
  void *p;
  uint64_t id;
  uint32_t size, align; /* align 0: not from the aligned family */
};

/* Allocates o->size bytes for object `id` by an entry point chosen with r (malloc 45%, calloc 15%
 * with zeroing checked, posix_memalign / aligned_alloc / memalign 10% each at 16 B .. 4 KiB,
 * realloc(NULL) 5%, valloc 3%, pvalloc 2%) and fills it with the object's pattern. */
static U void st_alloc_mixed(struct st_obj *o, uint64_t id, size_t size, uint64_t r) {
  unsigned pick = (r >> 8) % 100;
  size_t align = (size_t)16 << ((r >> 50) % 9);
  o->id = id, o->size = size, o->align = 0;
  if (pick < 45) o->p = s_malloc(size);
  else if (pick < 60) {
    o->p = s_calloc(1, size);
    st_check_zero(o->p, size, "calloc");
  } else if (pick < 70) o->p = s_posix_memalign(align, size), o->align = align;
  else if (pick < 80) {
    o->size = size = (size + align - 1) / align * align;
    o->p = s_aligned_alloc(align, size), o->align = align;
  } else if (pick < 90) o->p = s_memalign(align, size), o->align = align;
  else if (pick < 95) o->p = s_realloc(NULL, size);
  else if (pick < 98) o->p = s_valloc(size), o->align = 4096;
  else o->p = s_pvalloc(size), o->align = 4096;
  st_fill(o->p, o->id, 0, o->size);
}

/* Verifies alignment and content, then frees with free, free_sized or free_aligned_sized. */
static U void st_release(const struct st_obj *o, uint64_t r, const char *what) {
  if (o->align && (uintptr_t)o->p % o->align) st_die("misaligned object before free", (uintptr_t)o->p, o->align);
  st_check(o->p, o->id, 0, o->size, what);
  tc.objects++;
  if (r % 8 == 1) {
    if (o->align) s_free_aligned_sized(o->p, o->align, o->size);
    else s_free_sized(o->p, o->size);
  } else {
    s_free(o->p);
  }
}

/* A shared array of object slots with striped locks. */
#define POOL_LOCKS 16
struct st_pool {
  pthread_mutex_t m[POOL_LOCKS];
  size_t n;
  struct st_obj *slot; /* mmap()ed: the pool itself is no allocation */
};
static U void st_pool_init(struct st_pool *pl, size_t n) {
  for (int i = 0; i < POOL_LOCKS; i++) pthread_mutex_init(&pl->m[i], NULL);
  pl->n = n;
  pl->slot = mmap(NULL, n * sizeof *pl->slot, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (pl->slot == MAP_FAILED) st_die("mmap of the pool failed", errno, 0);
}
/* Puts *in (or empties the slot when in is NULL) into slot i; returns the previous occupant in
 * *out and 1, or 0 when the slot was empty. */
static U int st_pool_swap(struct st_pool *pl, size_t i, const struct st_obj *in, struct st_obj *out) {
  i %= pl->n;
  pthread_mutex_t *m = &pl->m[i % POOL_LOCKS];
  pthread_mutex_lock(m);
  *out = pl->slot[i];
  if (in) pl->slot[i] = *in;
  else memset(&pl->slot[i], 0, sizeof pl->slot[i]);
  pthread_mutex_unlock(m);
  return out->p != NULL;
}
/* Verifies and frees whatever is left (main, at the end). */
static U void st_pool_drain(struct st_pool *pl) {
  struct st_obj o;
  for (size_t i = 0; i < pl->n; i++)
    if (st_pool_swap(pl, i, NULL, &o)) st_release(&o, i, "pool drain");
}

/* ---- threads on the program's own stacks ---- */
#define ST_STACK (256 * 1024)

struct st_thread {
  pthread_t t;
  void *stack;
};

static U void *st_stack_new(void) {
  void *s = mmap(NULL, ST_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (s == MAP_FAILED) st_die("mmap of a thread stack failed", errno, 0);
  return s;
}

/* Starts fn(arg) on `stack` (from st_stack_new). */
static U void st_start_on(pthread_t *t, void *stack, void *(*fn)(void *), void *arg) {
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setstack(&a, stack, ST_STACK);
  int rc = pthread_create(t, &a, fn, arg);
  pthread_attr_destroy(&a);
  if (rc) st_die("pthread_create failed", rc, 0);
}
static U void st_start(struct st_thread *th, void *(*fn)(void *), void *arg) {
  th->stack = st_stack_new();
  st_start_on(&th->t, th->stack, fn, arg);
}
static U void st_join(struct st_thread *th) {
  int rc = pthread_join(th->t, NULL);
  if (rc) st_die("pthread_join failed", rc, 0);
  munmap(th->stack, ST_STACK);
}

/* Every thread's first allocation, in the baseline run too. */
static U void st_thread_begin(void) { s_free(s_malloc(32)); }

/* Adds this thread's counters to the process totals. */
static U void st_thread_end(void) {
  pthread_mutex_lock(&st_lock);
  for (int i = 0; i < NENT; i++) st_total.calls[i] += tc.calls[i];
  for (int i = 0; i < NOPS; i++) st_total.bytes[i] += tc.bytes[i];
  st_total.objects += tc.objects, st_total.checked += tc.checked;
  pthread_mutex_unlock(&st_lock);
  memset(&tc, 0, sizeof tc);
}

/* Parses the work scale, resolves the glibc 2.43 names, prints `ready`. */
static U void st_init(int argc, char **argv) {
  st_work = argc > 1 ? atoi(argv[1]) : 1;
  v_free_sized = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "free_sized");
  v_free_aligned_sized = (void (*)(void *, size_t, size_t))dlsym(RTLD_DEFAULT, "free_aligned_sized");
  printf("ready\n");
  fflush(stdout);
}

/* The program's own calls, per entry point and per op, as key=value lines. */
static U void st_print(const char *name) {
  st_thread_end();
  printf("program=%s\nwork=%d\n", name, st_work);
  for (int i = 0; i < NENT; i++) printf("calls.%s=%llu\n", entry_names[i], (unsigned long long)st_total.calls[i]);
  for (int i = 0; i < NOPS; i++)
    if (i != O_FREE) printf("bytes.%s=%llu\n", op_names[i], (unsigned long long)st_total.bytes[i]);
  printf("objects_verified=%llu\nbytes_verified=%llu\n", (unsigned long long)st_total.objects,
         (unsigned long long)st_total.checked);
  fflush(stdout);
}

#endif
