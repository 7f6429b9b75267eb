/* A module replaced at the same address (tests/heap_cfi.rs): dlopens argv[1] (libA), makes
 * 20,000 malloc/free pairs through a_outer -> a_inner (the unwinder learns libA), dlcloses it,
 * dlopens libB (argv[1] with "_a.so" replaced by "_b.so"), prints same_address=1 when libB
 * was mapped where libA was, keeps 4,000 blocks of 1 KiB from b_outer -> b_inner, dumps and
 * prints api_rc=N; exits 3 when libB was mapped elsewhere (the case is not made). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *(*alloc_fn)(size_t);

static alloc_fn open_lib(const char *path, const char *sym, void **base)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        exit(2);
    }
    alloc_fn f = (alloc_fn)dlsym(h, sym);
    Dl_info i;
    if (!f || !dladdr((void *)f, &i)) {
        fprintf(stderr, "no %s in %s\n", sym, path);
        exit(2);
    }
    *base = i.dli_fbase;
    return f;
}

int main(int argc, char **argv)
{
    if (argc < 2 || strlen(argv[1]) < 5 || strlen(argv[1]) > 4000)
        return 2;
    char b[4096];
    strcpy(b, argv[1]);
    strcpy(b + strlen(b) - 5, "_b.so");
    void *base_a, *base_b;
    alloc_fn fa = open_lib(argv[1], "a_outer", &base_a);
    for (int i = 0; i < 20000; i++)
        free(fa(64));
    void *ha = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD);
    dlclose(ha);  /* the NOLOAD reference */
    dlclose(ha);  /* open_lib's: unmapped now */
    alloc_fn fb = open_lib(b, "b_outer", &base_b);
    printf("same_address=%d\n", base_a == base_b);
    static void *keep[4000];
    for (int i = 0; i < 4000; i++)
        keep[i] = fb(1024);
    int (*d)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "mallocshim_dump");
    printf("api_rc=%d\n", d ? d() : -1);
    for (int i = 0; i < 4000; i++)
        free(keep[i]);
    return base_a == base_b ? 0 : 3;
}
