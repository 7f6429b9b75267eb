/*
 * stats_example.c: read mallocshim's figures from inside a program.
 *
 *   gcc -O2 -I shim/include -o stats_example shim/examples/stats_example.c -ldl
 *   LD_PRELOAD=$PWD/target/release/libmallocshim.so MALLOCSHIM_BACKEND=jemalloc ./stats_example
 *
 * The API is looked up with dlsym, so the program still runs (and says so) without the shim.
 * Output: `backend=NAME`, then `key=value` lines for calls and backend bytes.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mallocshim.h"

int main(void) {
  const char *(*name)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "mallocshim_backend_name");
  int (*get)(struct mallocshim_stats *) =
      (int (*)(struct mallocshim_stats *))dlsym(RTLD_DEFAULT, "mallocshim_get_stats");
  if (!name || !get) {
    printf("mallocshim not loaded\n");
    return 2;
  }
  struct mallocshim_stats before, after;
  if (get(&before) != 0) return 1;

  /* 1000 blocks of 64 KiB, kept alive while we look. */
  enum { N = 1000, SZ = 64 * 1024 };
  static void *blocks[N];
  for (int i = 0; i < N; i++) {
    blocks[i] = malloc(SZ);
    memset(blocks[i], 1, SZ);
  }
  if (get(&after) != 0) return 1;
  printf("backend=%s\n", name());
  printf("malloc_calls=%" PRIu64 "\n", after.calls.malloc - before.calls.malloc);
  printf("allocated_growth=%" PRId64 "\n",
         (int64_t)(after.backend_allocated_bytes - before.backend_allocated_bytes));
  printf("allocated_bytes=%" PRIu64 "\n", after.backend_allocated_bytes);
  printf("resident_bytes=%" PRIu64 "\n", after.backend_resident_bytes);
  printf("free_bytes=%" PRIu64 "\n", after.backend_free_bytes);
  printf("get_stats_null=%d\n", get(NULL));
  for (int i = 0; i < N; i++) free(blocks[i]);
  return 0;
}
