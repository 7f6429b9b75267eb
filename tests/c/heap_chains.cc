// Planted allocation sites behind call chains, for stacks unwound from the CFI (tests/heap_cfi.rs):
// leaf_alloc <- mid_b <- mid_a <- path_one | path_two <- main. path_one keeps 48 MiB and path_two
// 16 MiB, in 1 KiB blocks through my_malloc (a wrapper, as MariaDB's: `mallocshim heap` must name
// leaf_alloc) and operator new[] (the shim's, or libstdc++'s forwarding to malloc); with
// HEAP_CHAINS_GROW set, grow_site keeps 8 MiB more (the planted growth of tests/heap_cmd.rs),
// and a dlopen/dlclose of a library that allocates sits in between. Built with and without
// frame pointers: the empty asm after each call keeps the calls from becoming jumps (tail calls
// would drop the frame under any unwinder).
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static char *keep[64 * 1024];
static int nkeep;

extern "C" __attribute__((noinline)) char *my_malloc(size_t n) {
    char *p = new char[n];
    asm volatile("" : : "r"(p) : "memory");
    return p;
}
extern "C" __attribute__((noinline)) void leaf_alloc(size_t n) {
    keep[nkeep++] = my_malloc(n);
    asm volatile("" ::: "memory");
}
extern "C" __attribute__((noinline)) void mid_b(size_t n) {
    leaf_alloc(n);
    asm volatile("" ::: "memory");
}
extern "C" __attribute__((noinline)) void mid_a(size_t n) {
    mid_b(n);
    asm volatile("" ::: "memory");
}
extern "C" __attribute__((noinline)) void path_one(int k) {
    for (int i = 0; i < k; i++) mid_a(1024);
    asm volatile("" ::: "memory");
}
extern "C" __attribute__((noinline)) void path_two(int k) {
    for (int i = 0; i < k; i++) mid_a(1024);
    asm volatile("" ::: "memory");
}

extern "C" __attribute__((noinline)) void grow_site(void) {
    static char *grown[8 * 1024];
    for (int i = 0; i < 8 * 1024; i++) grown[i] = my_malloc(1024);
    asm volatile("" : : "r"(grown) : "memory");
}

// 60,000 one-byte blocks kept (the sampler's weight of tiny blocks), built with -DTINY.
extern "C" __attribute__((noinline)) void tiny_site(void) {
    static char *tiny[60000];
    for (int i = 0; i < 60000; i++) tiny[i] = (char *)malloc(1);
    asm volatile("" : : "r"(tiny) : "memory");
}

int main(int argc, char **argv) {
#ifdef TINY
    tiny_site();
    int (*d)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "mallocshim_dump");
    printf("api_rc=%d\n", d ? d() : -1);
    return 0;
#endif
    path_one(24 * 1024);
    if (argc > 1) {
        // A library mapped and unmapped between the sites: its module comes and goes.
        for (int i = 0; i < 50; i++) {
            void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
            if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
            dlclose(h);
        }
    }
    path_one(24 * 1024);
    path_two(16 * 1024);
    if (getenv("HEAP_CHAINS_GROW")) grow_site();
    int (*dump)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "mallocshim_dump");
    int rc = dump ? dump() : -1;
    printf("kept=%d api_rc=%d\n", nkeep, rc);
    return 0;
}
