/* A shared library linked into tests/c/conformance.c as a DT_NEEDED dependency: its constructor
 * runs before the program's and before the preloaded shim's own constructor, so its allocations
 * are among the first of the process; under the shim they are the calls that start its lazy
 * initialisation (the backend is chosen inside the first of them). It keeps every block, with a
 * known pattern, for the conformance rule `early_pointers_recognised`, which frees, reallocs and
 * sizes them from the main program. Prints nothing. */
#include <stdlib.h>
#include <string.h>

#define EARLY_N 8

static void *early[EARLY_N];
static size_t early_size[EARLY_N];

static void pattern(void *p, size_t n, unsigned seed)
{
    unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        c[i] = (unsigned char)(seed + i * 13);
}

__attribute__((constructor)) static void early_init(void)
{
    /* The very first call of the process from this library: a malloc. */
    early_size[0] = 24;
    early[0] = malloc(24);
    early_size[1] = 0;
    early[1] = malloc(0);
    early_size[2] = 1000;
    early[2] = calloc(10, 100);
    early_size[3] = 100000;
    early[3] = malloc(100000);
    early_size[4] = 200;
    void *a = NULL;
    if (posix_memalign(&a, 64, 200) == 0)
        early[4] = a;
    early_size[5] = 4096;
    early[5] = aligned_alloc(4096, 4096);
    early_size[6] = 48;
    char *s = malloc(16);
    if (s) {
        char *t = realloc(s, 48);
        early[6] = t ? t : s;
    }
    early_size[7] = 12;
    early[7] = strdup("early-strdup");
    for (int i = 0; i < EARLY_N; i++)
        if (early[i] && i != 2 && i != 7)
            pattern(early[i], early_size[i], (unsigned)i);
}

int conf_early_count(void) { return EARLY_N; }

/* Block i (ownership stays with the library until conf_early_take). */
void *conf_early_block(int i, size_t *size)
{
    if (i < 0 || i >= EARLY_N)
        return NULL;
    *size = early_size[i];
    return early[i];
}

/* Hands block i to the caller, who frees or reallocs it. */
void *conf_early_take(int i)
{
    void *p = early[i];
    early[i] = NULL;
    return p;
}
