/* alloc_some.c: allocates a little through several entry points and prints the backend the
 * shim reports (via dlsym, so it also runs without the shim) and "ok". */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  for (int i = 0; i < 200; i++) {
    char *p = malloc(32 + i);
    memset(p, 'x', 32 + i);
    p = realloc(p, 4096 + i);
    free(p);
    free(calloc(4, 16));
  }
  const char *(*name)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "mallocshim_backend_name");
  printf("backend=%s\nok\n", name ? name() : "none");
  return 0;
}
