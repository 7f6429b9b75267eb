/* heap_sites.cpp: known allocation sites for tests/heap_profile.rs (built with g++, and as C
 * with -x c: the `new` site then uses malloc). Built with -fno-omit-frame-pointer.
 *   site_a: holds 48 MiB live in 1 KiB blocks (malloc)
 *   site_b: holds 16 MiB live in 64 KiB blocks (operator new[] in C++, malloc in C)
 *   site_c: allocates and frees 1 GiB in total, 64 KiB at a time (nothing live)
 * Then writes one dump through mallocshim_dump() (dlsym) and prints api_rc=N. */
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

int main(void) {
  site_a();
  site_b();
  site_c();
  int (*dump)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "mallocshim_dump");
  printf("api_rc=%d\n", dump ? dump() : -1);
  for (int i = 0; i < NA; i++) free(a[i]);
#ifdef __cplusplus
  for (int i = 0; i < NB; i++) delete[] b[i];
#else
  for (int i = 0; i < NB; i++) free(b[i]);
#endif
  return 0;
}
