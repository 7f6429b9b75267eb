/* Which heap does malloc really use? Allocates 64 MiB in 1 MiB blocks (touched) and prints,
 * as key=value lines, the accounting of every heap it can see before and after:
 *   - glibc's own ptmalloc (mallinfo2 resolved on the libc.so.6 handle, so the shim's
 *     exported mallinfo2 does not answer instead),
 *   - gperftools' tcmalloc, if libtcmalloc_minimal.so.4 is already loaded in the process
 *     (RTLD_NOLOAD: this program never loads it itself), else "tcmalloc=absent",
 *   - whatever the default mallinfo2 symbol answers (the shim's, when preloaded).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBLOCKS 64
#define BLOCK ((size_t)1 << 20)

typedef struct mallinfo2 (*mallinfo2_fn)(void);
typedef int (*numprop_fn)(const char *, size_t *);

static mallinfo2_fn libc_mallinfo2;
static numprop_fn tc_numprop;

static void report(const char *when)
{
    struct mallinfo2 g = libc_mallinfo2();
    printf("glibc_mallinfo2_uordblks_%s=%zu\n", when, g.uordblks);
    printf("glibc_mallinfo2_hblkhd_%s=%zu\n", when, g.hblkhd);
    struct mallinfo2 d = mallinfo2();
    printf("default_mallinfo2_uordblks_%s=%zu\n", when, d.uordblks);
    printf("default_mallinfo2_hblkhd_%s=%zu\n", when, d.hblkhd);
    if (tc_numprop) {
        size_t v = 0;
        if (tc_numprop("generic.current_allocated_bytes", &v))
            printf("tcmalloc_allocated_%s=%zu\n", when, v);
        else
            printf("tcmalloc_allocated_%s=error\n", when);
    }
}

static const char *object_of(void *addr)
{
    Dl_info di;
    if (!addr || !dladdr(addr, &di) || !di.dli_fname)
        return "unresolved";
    return di.dli_fname;
}

int main(void)
{
    void *libc = dlopen("libc.so.6", RTLD_NOLOAD | RTLD_LAZY);
    if (!libc) {
        printf("error=libc.so.6 not loaded: %s\n", dlerror());
        return 1;
    }
    libc_mallinfo2 = (mallinfo2_fn)dlsym(libc, "mallinfo2");
    if (!libc_mallinfo2) {
        printf("error=no mallinfo2 in libc.so.6\n");
        return 1;
    }
    printf("malloc_object=%s\n", object_of(dlsym(RTLD_DEFAULT, "malloc")));
    printf("libc_mallinfo2_object=%s\n", object_of((void *)libc_mallinfo2));

    void *tc = dlopen("libtcmalloc_minimal.so.4", RTLD_NOLOAD | RTLD_LAZY);
    if (tc) {
        tc_numprop = (numprop_fn)dlsym(tc, "MallocExtension_GetNumericProperty");
        if (!tc_numprop) {
            printf("error=libtcmalloc loaded but MallocExtension_GetNumericProperty missing\n");
            return 1;
        }
        printf("tcmalloc=loaded\n");
    } else {
        printf("tcmalloc=absent\n");
    }

    report("before");
    void *blocks[NBLOCKS];
    for (int i = 0; i < NBLOCKS; i++) {
        blocks[i] = malloc(BLOCK);
        if (!blocks[i]) {
            printf("error=malloc(1 MiB) #%d failed\n", i);
            return 1;
        }
        memset(blocks[i], i + 1, BLOCK); /* touch every page */
    }
    report("after");
    size_t sum = 0;
    for (int i = 0; i < NBLOCKS; i++) {
        sum += ((unsigned char *)blocks[i])[BLOCK - 1];
        free(blocks[i]);
    }
    printf("touched_checksum=%zu\n", sum);
    return 0;
}
