/* Reads jemalloc's `opt.narenas` through the `mallctl` the shim exports under the jemalloc
 * backend (looked up at run time, so the program also links without the shim) and prints
 * `narenas=N`, or `no mallctl` when the symbol is absent. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);

int main(void)
{
    free(malloc(64));
    mallctl_fn m = (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
    if (!m) {
        puts("no mallctl");
        return 0;
    }
    unsigned n = 0;
    size_t len = sizeof n;
    int rc = m("opt.narenas", &n, &len, NULL, 0);
    printf("rc=%d narenas=%u\n", rc, n);
    return 0;
}
