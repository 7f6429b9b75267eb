/* Library for hostile_dlopen.c: allocates in its constructor, frees and allocates in its
 * destructor. */
#include <stdlib.h>
#include <string.h>

static char *buf;

__attribute__((constructor)) static void lib_init(void)
{
    buf = malloc(4096);
    memset(buf, 1, 4096);
}

__attribute__((destructor)) static void lib_fini(void)
{
    free(buf);
    void *volatile p = malloc(123);
    free(p);
}

int hostile_lib_value(void)
{
    return buf[7];
}
