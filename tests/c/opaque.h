/* Hides values from the optimizer, so that no size or pointer is known at compile time and no
 * call is folded away (tests/c/semantics.c, tests/c/conformance.c). */
#ifndef MALLOCSHIM_TEST_OPAQUE_H
#define MALLOCSHIM_TEST_OPAQUE_H

#include <stddef.h>

static inline size_t opq(size_t x)
{
    __asm__ volatile("" : "+r"(x));
    return x;
}

static inline void *opqp(void *x)
{
    __asm__ volatile("" : "+r"(x));
    return x;
}

#endif
