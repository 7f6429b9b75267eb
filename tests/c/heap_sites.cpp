/* heap_sites.cpp: known allocation sites for tests/heap_profile.rs (built with g++, and as C
 * with -x c: the `new` site then uses malloc). Built with -fno-omit-frame-pointer.
 *   site_a: holds 48 MiB live in 1 KiB blocks (malloc)
 *   site_b: holds 16 MiB live in 64 KiB blocks (operator new[] in C++, malloc in C)
 *   site_c: allocates and frees 1 GiB in total, 64 KiB at a time (nothing live)
 * Then writes one dump through mallocshim_dump() (dlsym) and prints api_rc=N.
 * argv[1] = "toggle": sampling starts off (MALLOCSHIM_PROF_SAMPLE_BYTES=0); site_a runs, a dump,
 * then mallocshim_heap_profile_set(65536) (prints set_rc=N), then site_b, site_c and a second
 * dump.
 * argv[1] = "cycle": heap profiles turned on, off and on again through the C API, from whatever
 * MALLOCSHIM_PROF_SAMPLE_BYTES gave at start: set(65536), site_b, set(0), site_b's blocks freed,
 * site_a, a dump (site_b's samples must have left the profile although sampling was off; site_a
 * was never sampled), set(65536), site_b, site_c and a second dump. Prints set_rc=N for each set
 * and api_rc=N for each dump.
 * argv[1] = "grow": site_a and site_c, a dump, then site_b and a second dump (prints
 * api_rc=N for each): site_b is what grew between the two.
 * argv[1] = "cxx" (C++ only): operator new's C++ semantics through the shim, then exit; prints
 * one ok line per check. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NA (48 * 1024)
#define NB (16 * 1024 / 64)
static void *a[NA];
static char *b[NB];

#ifdef __cplusplus
#define NOINLINE __attribute__((noinline))
extern "C" {
#else
#define NOINLINE __attribute__((noinline))
#endif

NOINLINE void site_a(void) {
  for (int i = 0; i < NA; i++) {
    a[i] = malloc(1024);
    memset(a[i], 1, 16);
  }
}

NOINLINE void site_b(void) {
  for (int i = 0; i < NB; i++) {
#ifdef __cplusplus
    b[i] = new char[64 * 1024];
#else
    b[i] = (char *)malloc(64 * 1024);
#endif
    b[i][0] = 1;
  }
}

NOINLINE void free_b(void) {
  for (int i = 0; i < NB; i++) {
#ifdef __cplusplus
    delete[] b[i];
#else
    free(b[i]);
#endif
  }
}

NOINLINE void site_c(void) {
  for (int i = 0; i < 16 * 1024; i++) {
    volatile char *p = (volatile char *)malloc(64 * 1024);
    p[0] = 1;
    free((void *)p);
  }
}

#ifdef __cplusplus
}
#endif

#ifdef __cplusplus
#include <new>
#include <stdint.h>
static int handler_calls;
static void handler(void) {
  handler_calls++;
  std::set_new_handler(nullptr);
}
static int cxx_semantics(void) {
  size_t huge = SIZE_MAX / 4;
  try {
    char *volatile p = new char[huge];
    (void)p;
    printf("no bad_alloc\n");
    return 1;
  } catch (const std::bad_alloc &) {
    printf("ok bad_alloc\n");
  }
  char *q = new (std::nothrow) char[huge];
  printf(q ? "nothrow returned a block\n" : "ok nothrow_null\n");
  std::set_new_handler(handler);
  try {
    char *volatile p = new char[huge];
    (void)p;
  } catch (const std::bad_alloc &) {
    printf(handler_calls == 1 ? "ok new_handler\n" : "new_handler calls %d\n", handler_calls);
  }
  struct alignas(4096) Page { char c[8192]; };
  Page *pg = new Page;
  printf(((uintptr_t)pg & 4095) == 0 ? "ok aligned\n" : "misaligned %p\n", (void *)pg);
  delete pg;
  Page *arr = new (std::nothrow) Page[3];
  printf(arr && ((uintptr_t)arr & 4095) == 0 ? "ok aligned_nothrow_array\n" : "bad aligned array\n");
  delete[] arr;
  int *z = new int[0];
  printf(z ? "ok zero\n" : "zero-size new returned NULL\n");
  delete[] z;
  return 0;
}
#endif

int main(int argc, char **argv) {
#ifdef __cplusplus
  if (argc > 1 && !strcmp(argv[1], "cxx")) return cxx_semantics();
#endif
  if (argc > 1 && !strcmp(argv[1], "toggle")) {
    int (*dump)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "mallocshim_dump");
    site_a();
    printf("api_rc=%d\n", dump ? dump() : -1);
    int (*set)(unsigned long) = (int (*)(unsigned long))dlsym(RTLD_DEFAULT, "mallocshim_heap_profile_set");
    printf("set_rc=%d\n", set ? set(65536) : -1);
    site_b();
    site_c();
    printf("api_rc=%d\n", dump ? dump() : -1);
    return 0;
  }
  int (*dump)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "mallocshim_dump");
  if (argc > 1 && !strcmp(argv[1], "cycle")) {
    int (*set)(unsigned long) = (int (*)(unsigned long))dlsym(RTLD_DEFAULT, "mallocshim_heap_profile_set");
    printf("set_rc=%d\n", set ? set(65536) : -1);
    site_b();
    printf("set_rc=%d\n", set ? set(0) : -1);
    free_b();
    site_a();
    printf("api_rc=%d\n", dump ? dump() : -1);
    printf("set_rc=%d\n", set ? set(65536) : -1);
    site_b();
    site_c();
    printf("api_rc=%d\n", dump ? dump() : -1);
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "grow")) {
    site_a();
    site_c();
    printf("api_rc=%d\n", dump ? dump() : -1);
    site_b();
    printf("api_rc=%d\n", dump ? dump() : -1);
    return 0;
  }
  site_a();
  site_b();
  site_c();
  printf("api_rc=%d\n", dump ? dump() : -1);
  for (int i = 0; i < NA; i++) free(a[i]);
  free_b();
  return 0;
}
