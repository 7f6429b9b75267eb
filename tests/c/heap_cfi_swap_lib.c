/* Built twice for tests/heap_cfi.rs (`module_replaced_at_the_same_address`): as libA
 * (a_outer -> a_inner -> malloc, a small frame) and with -DSIDE_B as libB (b_outer -> b_inner,
 * a 4 KiB frame). The two have the same size, so libB is mapped where libA was after its
 * dlclose, but libA's unwind rules would read libB's frames at the wrong offsets. */
#include <stdlib.h>
#include <string.h>

#ifdef SIDE_B
#define INNER b_inner
#define OUTER b_outer
#define PAD 4096
#else
#define INNER a_inner
#define OUTER a_outer
#define PAD 8
#endif

__attribute__((noinline)) void *INNER(size_t n)
{
    char pad[PAD];
    memset(pad, (int)n, sizeof pad);
    asm volatile("" : : "r"(pad) : "memory");
    void *p = malloc(n);
    asm volatile("" : : "r"(p) : "memory");
    return p;
}

__attribute__((noinline)) void *OUTER(size_t n)
{
    void *p = INNER(n);
    asm volatile("" : : "r"(p) : "memory");
    return p;
}
