/* A shared library that allocates in its constructor (i.e. during dlopen, under the
 * loader lock) and keeps the memory. The semantics test dlopens it, checks the blocks
 * survived intact, frees one of them from the main program and lets the destructor
 * free the rest at dlclose. */
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

#define CTOR_SIZE 100000

static char *ctor_block;    /* malloc'd, filled with a pattern */
static char *ctor_zeroed;   /* calloc'd, must stay zero */
static char *ctor_string;   /* strdup'd */
static int ctor_ran;

__attribute__((constructor)) static void ctor_lib_init(void)
{
    ctor_block = malloc(CTOR_SIZE);
    if (ctor_block)
        for (size_t i = 0; i < CTOR_SIZE; i++)
            ctor_block[i] = (char)(i * 7 + 3);
    ctor_zeroed = calloc(1000, 16);
    /* a realloc chain during the constructor as well */
    char *s = malloc(4);
    if (s) {
        memcpy(s, "ctr", 4);
        char *t = realloc(s, 64);
        if (t) {
            strcat(t, "-lib-constructor");
            ctor_string = strdup(t);
            free(t);
        } else {
            free(s);
        }
    }
    ctor_ran = 1;
}

__attribute__((destructor)) static void ctor_lib_fini(void)
{
    free(ctor_zeroed);
    free(ctor_string);
    ctor_zeroed = NULL;
    ctor_string = NULL;
}

int ctor_lib_ran(void) { return ctor_ran; }
size_t ctor_lib_size(void) { return CTOR_SIZE; }
const char *ctor_lib_string(void) { return ctor_string; }
const char *ctor_lib_zeroed(void) { return ctor_zeroed; }

/* Hands the big block to the caller, who owns (and frees) it from now on. */
char *ctor_lib_take_block(void)
{
    char *b = ctor_block;
    ctor_block = NULL;
    return b;
}

/* Allocation from inside the library, freed by the caller (and vice versa). */
void *ctor_lib_alloc(size_t n) { return malloc(n); }
void ctor_lib_free(void *p) { free(p); }
