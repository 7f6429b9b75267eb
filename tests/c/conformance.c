/* Conformance of the malloc family with glibc's C contract (issue 6), one named rule at a time,
 * whatever allocator serves the process: plain glibc, an allocator preloaded directly
 * (LD_PRELOAD=libjemalloc.so.2 or libtcmalloc_minimal.so.4) or libmallocshim.so over any backend.
 *
 * usage: conformance [rule-id ...]      (no argument: every rule)
 *
 * Each rule runs in its own forked child, so a rule that crashes the allocator (Debian's jemalloc
 * freeing a pvalloc() block it never handed out) or hangs is reported and the next rule still
 * runs. Prints first
 *   config malloc=<object that defines malloc> glibc=<version> page=<page size> shim_backend=<name|none>
 * then exactly one line per rule:
 *   rule=<id> result=pass detail=<N checks>
 *   rule=<id> result=fail detail=<first failed check> (+<K> more)
 *   rule=<id> result=crash detail=<signal name, e.g. SIGSEGV, or SIGALRM for a 30 s timeout>
 * and a last line `conformance: <P> pass, <F> fail, <C> crash`. Exits 0 when the program ran
 * (whatever the verdicts: the caller compares them with what it expects), 2 on bad usage.
 *
 * Expectations are glibc's on x86-64, except aligned_alloc_einval, which is glibc 2.38's rule
 * (a non-power-of-two alignment gives NULL + EINVAL; Debian 12's glibc 2.36 rounds it up).
 * Boundary values: sizes 0, 1, 8, 16, page, SIZE_MAX, SIZE_MAX - page; alignments 0, 3, 8, 65,
 * 4096, 2^27. Linked against conf_early_lib.so, whose constructor allocates before the program
 * (and the shim's own constructor) runs; `early_pointers_recognised` reports in its detail how
 * many of those blocks lie in the shim's bootstrap pool and the pool's bytes (-1 without the
 * shim). Compile with -fno-builtin and -I shim/include. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <gnu/libc-version.h>
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mallocshim.h"
#include "opaque.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

/* from conf_early_lib.c */
int conf_early_count(void);
void *conf_early_block(int i, size_t *size);
void *conf_early_take(int i);

#define SENT 12345
#define MiB ((size_t)1 << 20)
#define ALIGNED(p, a) ((((uintptr_t)(p)) & ((uintptr_t)(a) - 1)) == 0)
#define N_OF(a) (sizeof(a) / sizeof *(a))

static size_t page;
static int checks, nfail;
static char detail[400];

/* One check: the first failure's message becomes the rule's detail. */
#define EXPECT(cond, ...)                                                 \
    do {                                                                  \
        checks++;                                                         \
        if (!(cond)) {                                                    \
            if (nfail++ == 0)                                             \
                snprintf(detail, sizeof detail, __VA_ARGS__);             \
        }                                                                 \
    } while (0)


static void fill(void *p, size_t n, unsigned seed)
{
    unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        c[i] = (unsigned char)(seed + i * 13);
}

static int intact(const void *p, size_t n, unsigned seed)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != (unsigned char)(seed + i * 13))
            return 0;
    return 1;
}

static size_t max16(size_t a) { return a > 16 ? a : 16; }

/* ------------------------------------------------------------------ alignment */

static void r_align16_malloc(void)
{
    static void *live[400];
    int n = 0;
    const size_t fixed[] = {0, 1, 8, 16, page, page + 1};
    for (size_t i = 0; i < N_OF(fixed); i++) {
        void *p = malloc(opq(fixed[i]));
        EXPECT(p && ALIGNED(p, 16), "malloc(%zu)=%p not 16-aligned", fixed[i], p);
        live[n++] = p;
    }
    for (size_t s = 0; s <= 256; s++) {
        void *p = malloc(opq(s));
        EXPECT(p && ALIGNED(p, 16), "malloc(%zu)=%p not 16-aligned", s, p);
        live[n++] = p;
    }
    for (int i = 0; i < n; i++)
        free(live[i]);
}

static void r_align16_calloc(void)
{
    static void *live[200];
    int n = 0;
    for (size_t s = 0; s <= 64; s++) {
        void *p = calloc(opq(1), opq(s));
        EXPECT(p && ALIGNED(p, 16), "calloc(1, %zu)=%p not 16-aligned", s, p);
        live[n++] = p;
        p = calloc(opq(s), opq(1));
        EXPECT(p && ALIGNED(p, 16), "calloc(%zu, 1)=%p not 16-aligned", s, p);
        live[n++] = p;
    }
    void *p = calloc(opq(1), opq(page));
    EXPECT(p && ALIGNED(p, 16), "calloc(1, page)=%p not 16-aligned", p);
    live[n++] = p;
    for (int i = 0; i < n; i++)
        free(live[i]);
}

static void r_align16_realloc(void)
{
    static void *live[200];
    int n = 0;
    for (size_t s = 0; s <= 64; s++) {
        void *p = realloc(NULL, opq(s));
        EXPECT(p && ALIGNED(p, 16), "realloc(NULL, %zu)=%p not 16-aligned", s, p);
        live[n++] = p;
    }
    /* shrinking into the smallest classes */
    for (size_t s = 1; s <= 16; s++) {
        void *p = malloc(opq(100));
        void *q = p ? realloc(p, opq(s)) : NULL;
        EXPECT(q && ALIGNED(q, 16), "realloc(malloc(100), %zu)=%p not 16-aligned", s, q);
        live[n++] = q ? q : p;
    }
    for (int i = 0; i < n; i++)
        free(live[i]);
}

static void r_aligned_family_alignment(void)
{
    /* 256 with a power-of-two size of 256..1024: mimalloc 2.0.9's mi_malloc_aligned serves it
     * with plain malloc from a page that starts 384 bytes in (128-aligned). */
    const size_t aligns[] = {8, 16, 256, 4096, (size_t)1 << 27};
    const size_t sizes[] = {0, 1, 8, 16, 256, 1024, page};
    for (size_t a = 0; a < N_OF(aligns); a++)
        for (size_t s = 0; s < N_OF(sizes); s++) {
            size_t al = aligns[a], sz = sizes[s], want = max16(al);
            void *p = NULL;
            int rc = posix_memalign(&p, opq(al), opq(sz));
            EXPECT(rc == 0 && p && ALIGNED(p, want), "posix_memalign(%zu, %zu)=%d %p not %zu-aligned", al, sz, rc, p, want);
            if (rc == 0) {
                EXPECT(malloc_usable_size(p) >= sz, "posix_memalign(%zu, %zu): usable %zu", al, sz, malloc_usable_size(p));
                free(p);
            }
            p = aligned_alloc(opq(al), opq(sz));
            EXPECT(p && ALIGNED(p, want), "aligned_alloc(%zu, %zu)=%p not %zu-aligned", al, sz, p, want);
            if (p) {
                EXPECT(malloc_usable_size(p) >= sz, "aligned_alloc(%zu, %zu): usable %zu", al, sz, malloc_usable_size(p));
                free(p);
            }
            p = memalign(opq(al), opq(sz));
            EXPECT(p && ALIGNED(p, want), "memalign(%zu, %zu)=%p not %zu-aligned", al, sz, p, want);
            if (p) {
                EXPECT(malloc_usable_size(p) >= sz, "memalign(%zu, %zu): usable %zu", al, sz, malloc_usable_size(p));
                free(p);
            }
        }
}

/* glibc's memalign takes any alignment: 0 acts as malloc, others round up to a power of two. */
static void r_memalign_rounds_alignment(void)
{
    const size_t odd[][2] = {{0, 16}, {3, 16}, {65, 128}, {4097, 8192}};
    for (size_t i = 0; i < N_OF(odd); i++) {
        errno = SENT;
        void *p = memalign(opq(odd[i][0]), opq(10));
        int e = errno;
        EXPECT(p && ALIGNED(p, odd[i][1]), "memalign(%zu, 10)=%p errno=%d, expected a %zu-aligned block", odd[i][0], p, e, odd[i][1]);
        EXPECT(e == SENT, "memalign(%zu, 10) changed errno to %d", odd[i][0], e);
        free(p);
    }
}

static void r_valloc_page_aligned(void)
{
    const size_t sizes[] = {0, 1, 8, 16, page, page + 1};
    for (size_t i = 0; i < N_OF(sizes); i++) {
        void *p = valloc(opq(sizes[i]));
        EXPECT(p && ALIGNED(p, page), "valloc(%zu)=%p not page-aligned", sizes[i], p);
        if (p) {
            EXPECT(malloc_usable_size(p) >= sizes[i], "valloc(%zu): usable %zu", sizes[i], malloc_usable_size(p));
            memset(p, 1, sizes[i]);
        }
        free(p);
    }
}

/* pvalloc rounds up to whole pages; its block must be usable, sizable and freeable. */
static void r_pvalloc_free_ok(void)
{
    const size_t sizes[] = {0, 1, 8, 16, page, page + 1};
    for (size_t i = 0; i < N_OF(sizes); i++) {
        size_t rounded = (sizes[i] + page - 1) & ~(page - 1);
        void *p = pvalloc(opq(sizes[i]));
        EXPECT(p && ALIGNED(p, page), "pvalloc(%zu)=%p not page-aligned", sizes[i], p);
        if (!p)
            continue;
        size_t us = malloc_usable_size(p);
        EXPECT(us >= rounded, "pvalloc(%zu): usable %zu < %zu", sizes[i], us, rounded);
        memset(p, 1, rounded);
        free(p);
    }
}

/* ------------------------------------------------------------------ malloc(0), realloc(p, 0) */

static void r_malloc0_unique(void)
{
    void *z[16];
    for (int i = 0; i < 16; i++) {
        z[i] = malloc(opq(0));
        EXPECT(z[i] != NULL, "malloc(0) #%d returned NULL", i);
        for (int j = 0; j < i; j++)
            EXPECT(!z[i] || z[i] != z[j], "malloc(0) returned %p twice", z[i]);
    }
    void *r = realloc(NULL, opq(0));
    EXPECT(r != NULL, "realloc(NULL, 0) returned NULL");
    for (int j = 0; j < 16; j++)
        EXPECT(!r || r != z[j], "realloc(NULL, 0) returned a live malloc(0) block %p", r);
    free(r);
    for (int i = 0; i < 16; i++)
        free(z[i]);
}

static long rss_bytes(void)
{
    long pages = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &res) != 2)
            res = 0;
        fclose(f);
    }
    return res * (long)page;
}

/* realloc(p, 0) returns NULL, keeps errno, and really frees p: 100,000 touched 1 KiB blocks
 * "freed" that way must not stay resident (100 MB if they leaked). */
static void r_realloc_zero_frees(void)
{
    void *p = malloc(opq(100));
    errno = SENT;
    void *r = realloc(p, opq(0));
    int e = errno;
    EXPECT(r == NULL, "realloc(p, 0)=%p, expected NULL", r);
    EXPECT(e == SENT, "realloc(p, 0) changed errno to %d", e);
    if (r)
        free(r);
    long before = rss_bytes();
    int nonnull = 0;
    for (int i = 0; i < 100000; i++) {
        void *q = malloc(opq(1024));
        if (!q)
            continue;
        memset(q, 1, 1024);
        void *z = realloc(opqp(q), opq(0));
        if (z) {
            nonnull++;
            free(z);
        }
    }
    long grew = rss_bytes() - before;
    EXPECT(nonnull == 0, "realloc(p, 0) returned non-NULL %d times", nonnull);
    EXPECT(grew < 32L << 20, "100000 realloc(malloc(1024), 0) grew RSS by %ld bytes (not freed)", grew);
}

/* ------------------------------------------------------------------ ENOMEM on failure */

#define EXPECT_ENOMEM(call, fmt, ...)                                                     \
    do {                                                                                  \
        errno = 0;                                                                        \
        void *q_ = (call);                                                                \
        int e_ = errno;                                                                   \
        EXPECT(q_ == NULL && e_ == ENOMEM, fmt "=%p errno=%d, expected NULL/ENOMEM", __VA_ARGS__, q_, e_); \
        if (q_)                                                                           \
            free(q_);                                                                     \
    } while (0)

static void r_malloc_huge_enomem(void)
{
    const size_t huge[] = {SIZE_MAX, SIZE_MAX - page, (size_t)PTRDIFF_MAX + 1};
    for (size_t i = 0; i < N_OF(huge); i++)
        EXPECT_ENOMEM(malloc(opq(huge[i])), "malloc(%zu)", huge[i]);
}

static void r_calloc_overflow_enomem(void)
{
    const size_t bad[][2] = {{SIZE_MAX, 2}, {2, SIZE_MAX}, {2, SIZE_MAX / 2 + 1},
                             {(size_t)1 << 32, (size_t)1 << 32}, {SIZE_MAX / 16 + 1, 16},
                             {page, SIZE_MAX / page + 1}};
    for (size_t i = 0; i < N_OF(bad); i++)
        EXPECT_ENOMEM(calloc(opq(bad[i][0]), opq(bad[i][1])), "calloc(%zu, %zu)", bad[i][0], bad[i][1]);
}

static void r_calloc_huge_enomem(void)
{
    const size_t bad[][2] = {{1, SIZE_MAX}, {SIZE_MAX - page, 1}, {1, (size_t)PTRDIFF_MAX + 1}};
    for (size_t i = 0; i < N_OF(bad); i++)
        EXPECT_ENOMEM(calloc(opq(bad[i][0]), opq(bad[i][1])), "calloc(%zu, %zu)", bad[i][0], bad[i][1]);
}

static void r_realloc_huge_enomem(void)
{
    const size_t sizes[] = {1, 16, page};
    const size_t huge[] = {SIZE_MAX, SIZE_MAX - page, (size_t)PTRDIFF_MAX + 1};
    for (size_t s = 0; s < N_OF(sizes); s++)
        for (size_t i = 0; i < N_OF(huge); i++) {
            void *p = malloc(opq(sizes[s]));
            if (!p)
                continue;
            fill(p, sizes[s], 7);
            EXPECT_ENOMEM(realloc(opqp(p), opq(huge[i])), "realloc(malloc(%zu), %zu)", sizes[s], huge[i]);
            EXPECT(intact(p, sizes[s], 7), "failed realloc(p, %zu) damaged the old block", huge[i]);
            free(p);
        }
    EXPECT_ENOMEM(realloc(NULL, opq(SIZE_MAX)), "realloc(NULL, %zu)", SIZE_MAX);
}

static void r_reallocarray_overflow_enomem(void)
{
    const size_t bad[][2] = {{SIZE_MAX, 2}, {2, SIZE_MAX / 2 + 1}, {(size_t)1 << 33, (size_t)1 << 31}, {page, SIZE_MAX / page + 1}};
    for (size_t i = 0; i < N_OF(bad); i++) {
        void *p = malloc(opq(64));
        if (!p)
            continue;
        fill(p, 64, 3);
        EXPECT_ENOMEM(reallocarray(opqp(p), opq(bad[i][0]), opq(bad[i][1])), "reallocarray(p, %zu, %zu)", bad[i][0], bad[i][1]);
        EXPECT(intact(p, 64, 3), "failed reallocarray(p, %zu, %zu) damaged the old block", bad[i][0], bad[i][1]);
        free(p);
        EXPECT_ENOMEM(reallocarray(NULL, opq(bad[i][0]), opq(bad[i][1])), "reallocarray(NULL, %zu, %zu)", bad[i][0], bad[i][1]);
    }
}

static void r_reallocarray_huge_enomem(void)
{
    const size_t bad[][2] = {{1, SIZE_MAX}, {SIZE_MAX - page, 1}, {1, (size_t)PTRDIFF_MAX + 1}};
    for (size_t i = 0; i < N_OF(bad); i++) {
        void *p = malloc(opq(64));
        if (!p)
            continue;
        fill(p, 64, 3);
        EXPECT_ENOMEM(reallocarray(opqp(p), opq(bad[i][0]), opq(bad[i][1])), "reallocarray(p, %zu, %zu)", bad[i][0], bad[i][1]);
        EXPECT(intact(p, 64, 3), "failed reallocarray(p, %zu, %zu) damaged the old block", bad[i][0], bad[i][1]);
        free(p);
    }
}

static void *pm(size_t al, size_t sz, int *rc)
{
    void *p = NULL;
    *rc = posix_memalign(&p, al, sz);
    return *rc == 0 ? p : NULL;
}

static void r_posix_memalign_huge_enomem(void)
{
    const size_t bad[][2] = {{16, SIZE_MAX}, {8, SIZE_MAX - page}, {4096, SIZE_MAX - page},
                             {(size_t)1 << 27, SIZE_MAX - page}, {(size_t)1 << 27, SIZE_MAX / 2}};
    for (size_t i = 0; i < N_OF(bad); i++) {
        int rc = -1;
        void *p = pm(opq(bad[i][0]), opq(bad[i][1]), &rc);
        EXPECT(rc == ENOMEM, "posix_memalign(%zu, %zu)=%d %p, expected ENOMEM", bad[i][0], bad[i][1], rc, p);
        free(p);
    }
}

static void r_aligned_alloc_huge_enomem(void)
{
    const size_t bad[][2] = {{16, SIZE_MAX}, {8, SIZE_MAX - page}, {4096, SIZE_MAX - page},
                             {(size_t)1 << 27, SIZE_MAX - page}, {(size_t)1 << 27, SIZE_MAX / 2}};
    for (size_t i = 0; i < N_OF(bad); i++)
        EXPECT_ENOMEM(aligned_alloc(opq(bad[i][0]), opq(bad[i][1])), "aligned_alloc(%zu, %zu)", bad[i][0], bad[i][1]);
}

static void r_memalign_huge_enomem(void)
{
    const size_t bad[][2] = {{16, SIZE_MAX}, {8, SIZE_MAX - page}, {4096, SIZE_MAX - page},
                             {65, SIZE_MAX - page}, {(size_t)1 << 27, SIZE_MAX - page},
                             {(size_t)1 << 27, SIZE_MAX / 2}, {SIZE_MAX / 2 + 1, 1}};
    for (size_t i = 0; i < N_OF(bad); i++)
        EXPECT_ENOMEM(memalign(opq(bad[i][0]), opq(bad[i][1])), "memalign(%zu, %zu)", bad[i][0], bad[i][1]);
}

static void r_valloc_huge_enomem(void)
{
    const size_t bad[] = {SIZE_MAX, SIZE_MAX - page, SIZE_MAX - page + 1, SIZE_MAX / 2 + 1};
    for (size_t i = 0; i < N_OF(bad); i++)
        EXPECT_ENOMEM(valloc(opq(bad[i])), "valloc(%zu)", bad[i]);
}

/* Rounding SIZE_MAX - k up to a page overflows: NULL + ENOMEM, never a small block. */
static void r_pvalloc_overflow_enomem(void)
{
    const size_t bad[] = {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - page + 2, SIZE_MAX - page + 1,
                          SIZE_MAX - page, SIZE_MAX - 2 * page, SIZE_MAX / 2 + 1};
    for (size_t i = 0; i < N_OF(bad); i++)
        EXPECT_ENOMEM(pvalloc(opq(bad[i])), "pvalloc(%zu)", bad[i]);
}

/* ------------------------------------------------------------------ EINVAL */

static void r_posix_memalign_einval(void)
{
    const size_t bad[] = {0, 3, 4, 24, 65, 4097, SIZE_MAX};
    for (size_t i = 0; i < N_OF(bad); i++) {
        void *marker = (void *)0x1230;
        void *p = marker;
        errno = SENT;
        int rc = posix_memalign(&p, opq(bad[i]), opq(16));
        int e = errno;
        EXPECT(rc == EINVAL, "posix_memalign(%zu, 16)=%d, expected EINVAL", bad[i], rc);
        EXPECT(e == SENT, "posix_memalign(%zu, 16) changed errno to %d", bad[i], e);
        EXPECT(p == marker || p == NULL, "posix_memalign(%zu, 16) stored %p on failure", bad[i], p);
        if (rc == 0)
            free(p);
    }
}

/* glibc 2.38's rule (the shim's on every backend); glibc 2.36 rounds these up and succeeds. */
static void r_aligned_alloc_einval(void)
{
    const size_t bad[] = {0, 3, 24, 65, 4097};
    for (size_t i = 0; i < N_OF(bad); i++) {
        errno = 0;
        void *p = aligned_alloc(opq(bad[i]), opq(64));
        int e = errno;
        EXPECT(p == NULL && e == EINVAL, "aligned_alloc(%zu, 64)=%p errno=%d, expected NULL/EINVAL", bad[i], p, e);
        free(p);
    }
}

static void r_memalign_einval(void)
{
    const size_t bad[] = {SIZE_MAX / 2 + 2, SIZE_MAX - page, SIZE_MAX};
    for (size_t i = 0; i < N_OF(bad); i++) {
        errno = 0;
        void *p = memalign(opq(bad[i]), opq(16));
        int e = errno;
        EXPECT(p == NULL && e == EINVAL, "memalign(%zu, 16)=%p errno=%d, expected NULL/EINVAL", bad[i], p, e);
        free(p);
    }
}

/* ------------------------------------------------------------------ errno kept, usable size */

static void r_free_keeps_errno(void)
{
    void *blocks[16];
    int n = 0;
    const size_t sizes[] = {1, 16, 100, page, MiB, 64 * MiB};
    for (size_t i = 0; i < N_OF(sizes); i++) {
        blocks[n] = malloc(opq(sizes[i]));
        if (blocks[n])
            memset(blocks[n], 1, sizes[i]);
        n++;
    }
    blocks[n++] = calloc(opq(1000), opq(10));
    blocks[n++] = aligned_alloc(opq(4096), opq(100));
    blocks[n++] = aligned_alloc(opq((size_t)1 << 27), opq(16));
    blocks[n++] = memalign(opq(64), opq(1000));
    blocks[n++] = valloc(opq(page));
    int rc;
    blocks[n++] = pm(opq(256), opq(3000), &rc);
    void *r = malloc(opq(10));
    blocks[n++] = r ? realloc(r, opq(100000)) : NULL;
    for (int i = 0; i < n; i++) {
        errno = SENT;
        free(blocks[i]);
        EXPECT(errno == SENT, "free of block %d (%p) changed errno to %d", i, blocks[i], errno);
    }
    errno = SENT;
    free(NULL);
    EXPECT(errno == SENT, "free(NULL) changed errno to %d", errno);
    errno = 0;
    free(malloc(opq(64 * MiB)));
    EXPECT(errno == 0, "free of a 64 MiB block changed errno 0 to %d", errno);
}

#define KEEPS(call, what)                                                             \
    do {                                                                              \
        errno = SENT;                                                                 \
        void *q_ = (call);                                                            \
        int e_ = errno;                                                               \
        EXPECT(q_ != NULL, "%s returned NULL", what);                                 \
        EXPECT(e_ == SENT, "successful %s changed errno to %d", what, e_);            \
        keep[nk++] = q_;                                                              \
    } while (0)

static void r_success_keeps_errno(void)
{
    void *keep[64];
    int nk = 0;
    char what[96];
    const size_t sizes[] = {0, 1, 8, 16, page, MiB, 64 * MiB};
    for (size_t i = 0; i < N_OF(sizes); i++) {
        size_t s = sizes[i];
        snprintf(what, sizeof what, "malloc(%zu)", s);
        KEEPS(malloc(opq(s)), what);
        snprintf(what, sizeof what, "calloc(1, %zu)", s);
        KEEPS(calloc(opq(1), opq(s)), what);
        snprintf(what, sizeof what, "aligned_alloc(4096, %zu)", s);
        KEEPS(aligned_alloc(opq(4096), opq(s)), what);
        snprintf(what, sizeof what, "memalign(65, %zu)", s);
        KEEPS(memalign(opq(65), opq(s)), what);
        snprintf(what, sizeof what, "valloc(%zu)", s);
        KEEPS(valloc(opq(s)), what);
    }
    /* realloc grow (in place and moving), shrink */
    void *p = malloc(opq(100));
    const size_t chain[] = {200, 5000, 2 * MiB, 70 * MiB, 50, 1};
    for (size_t i = 0; p && i < N_OF(chain); i++) {
        errno = SENT;
        void *q = realloc(p, opq(chain[i]));
        int e = errno;
        EXPECT(q != NULL, "realloc(p, %zu) returned NULL", chain[i]);
        EXPECT(e == SENT, "successful realloc(p, %zu) changed errno to %d", chain[i], e);
        if (q)
            p = q;
    }
    free(p);
    for (size_t i = 0; i < 3; i++) {
        errno = SENT;
        int rc = 0;
        void *q = pm(opq((size_t)8 << (i * 6)), opq(100), &rc);
        EXPECT(rc == 0 && errno == SENT, "posix_memalign(%zu, 100)=%d errno=%d", (size_t)8 << (i * 6), rc, errno);
        free(q);
    }
    errno = SENT;
    size_t us = malloc_usable_size(keep[0]);
    EXPECT(errno == SENT, "malloc_usable_size changed errno to %d", errno);
    (void)us;
    for (int i = 0; i < nk; i++)
        free(keep[i]);
}

static void r_usable_size_ge_request(void)
{
    const size_t sizes[] = {0, 1, 8, 15, 16, 17, page - 1, page, page + 1, MiB};
    EXPECT(malloc_usable_size(NULL) == 0, "malloc_usable_size(NULL)=%zu", malloc_usable_size(NULL));
    for (size_t i = 0; i < N_OF(sizes); i++) {
        size_t s = sizes[i];
        void *p[6] = {malloc(opq(s)), calloc(opq(1), opq(s)), realloc(NULL, opq(s)),
                      aligned_alloc(opq(4096), opq(s)), memalign(opq(65), opq(s)), valloc(opq(s))};
        static const char *names[6] = {"malloc", "calloc", "realloc(NULL)", "aligned_alloc(4096)", "memalign(65)", "valloc"};
        for (int k = 0; k < 6; k++) {
            size_t us = p[k] ? malloc_usable_size(p[k]) : 0;
            EXPECT(p[k] && us >= s, "%s(%zu): usable size %zu", names[k], s, us);
            if (p[k])
                memset(p[k], 2, us); /* the whole usable size is the caller's */
        }
        /* grown by realloc */
        void *g = p[2] ? realloc(p[2], opq(s * 2 + 1)) : NULL;
        EXPECT(g && malloc_usable_size(g) >= s * 2 + 1, "realloc to %zu: usable size %zu", s * 2 + 1, g ? malloc_usable_size(g) : 0);
        if (g)
            p[2] = g;
        for (int k = 0; k < 6; k++)
            free(p[k]);
    }
}

/* ------------------------------------------------------------------ introspection */

#define SMALL_BLOCKS 40960 /* 10 MiB in 256-byte blocks */

static void **alloc_small(void)
{
    void **b = malloc(opq(SMALL_BLOCKS * sizeof *b));
    if (!b)
        return NULL;
    for (int i = 0; i < SMALL_BLOCKS; i++) {
        b[i] = malloc(opq(256));
        if (b[i])
            memset(b[i], 3, 256);
    }
    return b;
}

static void free_small(void **b)
{
    if (!b)
        return;
    for (int i = 0; i < SMALL_BLOCKS; i++)
        free(b[i]);
    free(b);
}

static void r_mallinfo2_reflects_backend(void)
{
    struct mallinfo2 a = mallinfo2();
    void **b = alloc_small();
    struct mallinfo2 z = mallinfo2();
    long du = (long)z.uordblks - (long)a.uordblks, da = (long)z.arena - (long)a.arena;
    EXPECT(du >= 9L << 20, "10 MiB in 256 B blocks: mallinfo2 uordblks %zu -> %zu", a.uordblks, z.uordblks);
    EXPECT(da >= 9L << 20, "10 MiB in 256 B blocks: mallinfo2 arena %zu -> %zu", a.arena, z.arena);
    free_small(b);
}

static void r_mallinfo_reflects_backend(void)
{
    struct mallinfo a = mallinfo();
    void **b = alloc_small();
    struct mallinfo z = mallinfo();
    long du = (long)z.uordblks - (long)a.uordblks, da = (long)z.arena - (long)a.arena;
    EXPECT(du >= 9L << 20, "10 MiB in 256 B blocks: mallinfo uordblks %d -> %d", a.uordblks, z.uordblks);
    EXPECT(da >= 9L << 20, "10 MiB in 256 B blocks: mallinfo arena %d -> %d", a.arena, z.arena);
    free_small(b);
}

/* ------------------------------------------------------------------ early pointers */

/* Blocks allocated by a library constructor before the program (and, under the shim, during
 * its lazy initialisation) are recognised by malloc_usable_size, realloc and free. */
static void r_early_pointers_recognised(void)
{
    int n = conf_early_count(), pool = 0;
    for (int i = 0; i < n; i++) {
        size_t sz = 0;
        void *p = conf_early_block(i, &sz);
        EXPECT(p != NULL, "early block %d is NULL", i);
        if (!p)
            continue;
        size_t want = i == 5 ? 4096 : i == 4 ? 64 : 16;
        EXPECT(ALIGNED(p, want), "early block %d = %p not %zu-aligned", i, p, want);
        Dl_info di;
        if (dladdr(p, &di) && di.dli_fname && strstr(di.dli_fname, "mallocshim"))
            pool++; /* inside the shim's image: its static bootstrap pool */
        size_t us = malloc_usable_size(p);
        EXPECT(us >= sz, "early block %d: usable size %zu < %zu", i, us, sz);
        if (i == 2)
            EXPECT(((char *)p)[999] == 0 && ((char *)p)[0] == 0, "early calloc block not zero");
        else if (i == 7)
            EXPECT(strcmp(p, "early-strdup") == 0, "early strdup block reads %.16s", (char *)p);
        else
            EXPECT(intact(p, sz, (unsigned)i), "early block %d contents changed", i);
        p = conf_early_take(i);
        if (i % 2) {
            size_t keep = i == 7 ? 13 : sz;
            char *q = realloc(p, opq(sz * 4 + 100));
            EXPECT(q != NULL, "realloc of early block %d returned NULL", i);
            if (q && i != 7 && i != 2)
                EXPECT(intact(q, sz, (unsigned)i), "realloc of early block %d lost its contents", i);
            if (q && i == 7)
                EXPECT(memcmp(q, "early-strdup", keep) == 0, "realloc of early strdup lost its contents");
            free(q ? q : p);
        } else {
            errno = SENT;
            free(p);
            EXPECT(errno == SENT, "free of early block %d changed errno to %d", i, errno);
        }
    }
    /* dlerror buffers allocated while a backend was being loaded are freed by the next error */
    for (int i = 0; i < 3; i++) {
        void *s = dlsym(RTLD_DEFAULT, "conformance_no_such_symbol");
        EXPECT(s == NULL && dlerror() != NULL, "dlsym of a missing symbol");
    }
    void *after = malloc(opq(1000));
    EXPECT(after != NULL, "malloc after freeing the early blocks");
    free(after);
    /* Under the shim: how much its bootstrap pool served while the backend loaded (libstdc++'s
     * emergency pool under tcmalloc...), all of it still owned by those libraries. */
    long long boot = -1;
    struct mallocshim_stats st;
    int (*get)(struct mallocshim_stats *) = (int (*)(struct mallocshim_stats *))dlsym(RTLD_DEFAULT, "mallocshim_get_stats");
    if (get && get(&st) == 0)
        boot = (long long)st.bootstrap_bytes;
    if (nfail == 0)
        snprintf(detail, sizeof detail, "%d early blocks, %d of them in the bootstrap pool; bootstrap_bytes=%lld", n, pool, boot);
}

/* ------------------------------------------------------------------ driver */

struct rule {
    const char *id;
    void (*fn)(void);
};

static const struct rule RULES[] = {
    {"align16_malloc", r_align16_malloc},
    {"align16_calloc", r_align16_calloc},
    {"align16_realloc", r_align16_realloc},
    {"aligned_family_alignment", r_aligned_family_alignment},
    {"memalign_rounds_alignment", r_memalign_rounds_alignment},
    {"valloc_page_aligned", r_valloc_page_aligned},
    {"pvalloc_free_ok", r_pvalloc_free_ok},
    {"malloc0_unique", r_malloc0_unique},
    {"realloc_zero_frees", r_realloc_zero_frees},
    {"malloc_huge_enomem", r_malloc_huge_enomem},
    {"calloc_overflow_enomem", r_calloc_overflow_enomem},
    {"calloc_huge_enomem", r_calloc_huge_enomem},
    {"realloc_huge_enomem", r_realloc_huge_enomem},
    {"reallocarray_overflow_enomem", r_reallocarray_overflow_enomem},
    {"reallocarray_huge_enomem", r_reallocarray_huge_enomem},
    {"posix_memalign_huge_enomem", r_posix_memalign_huge_enomem},
    {"aligned_alloc_huge_enomem", r_aligned_alloc_huge_enomem},
    {"memalign_huge_enomem", r_memalign_huge_enomem},
    {"valloc_huge_enomem", r_valloc_huge_enomem},
    {"pvalloc_overflow_enomem", r_pvalloc_overflow_enomem},
    {"posix_memalign_einval", r_posix_memalign_einval},
    {"aligned_alloc_einval", r_aligned_alloc_einval},
    {"memalign_einval", r_memalign_einval},
    {"free_keeps_errno", r_free_keeps_errno},
    {"success_keeps_errno", r_success_keeps_errno},
    {"usable_size_ge_request", r_usable_size_ge_request},
    {"mallinfo2_reflects_backend", r_mallinfo2_reflects_backend},
    {"mallinfo_reflects_backend", r_mallinfo_reflects_backend},
    {"early_pointers_recognised", r_early_pointers_recognised},
};

static const char *object_of(const char *sym)
{
    void *a = dlsym(RTLD_DEFAULT, sym);
    Dl_info di;
    if (!a || !dladdr(a, &di) || !di.dli_fname)
        return "(unresolved)";
    return di.dli_fname;
}

/* Runs one rule in a forked child and prints its line. Returns 0 pass, 1 fail, 2 crash. */
static int run_rule(const struct rule *r)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        printf("rule=%s result=crash detail=fork failed errno=%d\n", r->id, errno);
        return 2;
    }
    if (pid == 0) {
        signal(SIGALRM, SIG_DFL);
        alarm(30);
        checks = nfail = 0;
        detail[0] = 0;
        r->fn();
        if (nfail > 1)
            printf("rule=%s result=fail detail=%s (+%d more)\n", r->id, detail, nfail - 1);
        else if (nfail)
            printf("rule=%s result=fail detail=%s\n", r->id, detail);
        else
            printf("rule=%s result=pass detail=%d checks%s%s\n", r->id, checks, detail[0] ? "; " : "", detail);
        fflush(stdout);
        _exit(nfail ? 1 : 0);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (WIFSIGNALED(st)) {
        const char *name = sigabbrev_np(WTERMSIG(st));
        printf("rule=%s result=crash detail=SIG%s%s\n", r->id, name ? name : "?",
               WTERMSIG(st) == SIGALRM ? " (timeout after 30 s)" : "");
        return 2;
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) > 1) {
        printf("rule=%s result=crash detail=exit status %d\n", r->id, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return 2;
    }
    return WEXITSTATUS(st);
}

int main(int argc, char **argv)
{
    page = (size_t)sysconf(_SC_PAGESIZE);
    const char *(*name)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "mallocshim_backend_name");
    printf("config malloc=%s glibc=%s page=%zu shim_backend=%s\n", object_of("malloc"), gnu_get_libc_version(), page,
           name ? name() : "none");
    int counts[3] = {0, 0, 0};
    for (size_t i = 0; i < N_OF(RULES); i++) {
        int want = argc == 1;
        for (int a = 1; a < argc; a++)
            want |= strcmp(argv[a], RULES[i].id) == 0;
        if (want)
            counts[run_rule(&RULES[i])]++;
    }
    if (counts[0] + counts[1] + counts[2] == 0) {
        fprintf(stderr, "conformance: no such rule\n");
        return 2;
    }
    printf("conformance: %d pass, %d fail, %d crash\n", counts[0], counts[1], counts[2]);
    return 0;
}
