/* What a fork copies of the shim (tests/fork.rs, issue 21 part 2). A thread that never allocates
 * is started, the process sleeps SLEEP_MS (the shim's thread starts and takes memory-history
 * rows meanwhile), then /proc/self/smaps is read and one line printed:
 *   wipe=W wipe_kb=K maps=M arenas=A bss_ranges=R zero=Z child=C
 * W: mappings marked wipe-on-fork (VmFlags `wf`: what a fork does not copy), K their KiB;
 * M: mappings (VMAs) in all: each one costs every fork a copy of its descriptor;
 * A: glibc's non-main arena heaps (the idle thread must not have one): an anonymous rw mapping
 *    on a 64 MiB boundary (HEAP_MAX_SIZE) followed by its PROT_NONE reservation, the two ending
 *    exactly 64 MiB after the start. A boundary alone is not enough: since Linux 6.7 anonymous
 *    mappings of 2 MiB or more are placed on 2 MiB boundaries, so the shim's own tables and the
 *    worker's stack start on a 64 MiB boundary about once in 32;
 * R: the 2 MiB ranges (one page-table page each, which every fork copies) holding the resident
 *    pages of the shim's .bss, the anonymous mapping that starts where libmallocshim.so's last
 *    file mapping ends (0 without the shim); read from /proc/self/pagemap's present bits;
 * Z: pages of the process's private writable mappings that are present in /proc/self/pagemap
 *    but not counted in their Rss (smaps): the zero page, mapped where memory never written was
 *    read. Every fork copies those entries too, and a page-table page for each 2 MiB range they
 *    reach; the shim's walks must not read the slots no thread claimed;
 * C: the exit status of a forked child that starts two threads that allocate, joins them,
 *    checks its blocks and exits (0 when all went well).
 * usage: fork_footprint [SLEEP_MS] */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static atomic_int stop;

static void *idle(void *a)
{
    (void)a;
    while (!atomic_load(&stop)) {
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void *worker(void *a)
{
    size_t n = (size_t)a;
    for (int i = 0; i < 1000; i++) {
        unsigned char *p = malloc(n + i);
        if (!p)
            return (void *)1;
        memset(p, 0xab, n + i);
        for (size_t k = 0; k < n + i; k += 97)
            if (p[k] != 0xab)
                return (void *)1;
        free(p);
    }
    return NULL;
}

/* Present pages in [lo, hi) by /proc/self/pagemap, read in blocks; with `ranges`, also the
 * distinct 2 MiB ranges holding them. -1 when pagemap cannot be read. */
static long present_pages(FILE *pm, unsigned long lo, unsigned long hi, int *ranges)
{
    unsigned long long e[512];
    unsigned long last = 0;
    long n = 0;
    for (unsigned long a = lo; a < hi;) {
        size_t want = (hi - a) / 4096 < 512 ? (hi - a) / 4096 : 512;
        if (fseek(pm, (long)(a / 4096 * 8), SEEK_SET) || fread(e, 8, want, pm) != want)
            return -1;
        for (size_t i = 0; i < want; i++, a += 4096)
            if (e[i] >> 63) {
                n++;
                if (ranges && (a >> 21) != last)
                    (*ranges)++, last = a >> 21;
            }
    }
    return n;
}

static int child(void)
{
    pthread_t t[2];
    void *r0 = NULL, *r1 = NULL;
    if (pthread_create(&t[0], NULL, worker, (void *)64) || pthread_create(&t[1], NULL, worker, (void *)5000))
        return 2;
    pthread_join(t[0], &r0);
    pthread_join(t[1], &r1);
    return r0 || r1 ? 3 : 0;
}

int main(int argc, char **argv)
{
    int ms = argc > 1 ? atoi(argv[1]) : 300;
    pthread_t t;
    if (pthread_create(&t, NULL, idle, NULL))
        return 2;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return 2;
    char line[512];
    int wipe = 0, arenas = 0, maps = 0;
    unsigned long wipe_kb = 0, last_kb = 0;
    unsigned long heap = 0, heap_end = 0; /* an aligned rw anon mapping waiting for its reservation */
    unsigned long shim_end = 0, bss_lo = 0, bss_hi = 0;
    /* Private writable mappings up to 256 MiB and their Rss, for the zero-page count. */
    enum { MAX_RW = 256 };
    unsigned long rw_lo[MAX_RW], rw_hi[MAX_RW], rw_kb[MAX_RW];
    int nrw = 0, in_rw = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8];
        unsigned long off, inode;
        char dev[16];
        int name = -1;
        if (sscanf(line, "%lx-%lx %7s %lx %15s %lu %n", &lo, &hi, perms, &off, dev, &inode, &name) >= 6 &&
            name > 0) {
            maps++;
            last_kb = (hi - lo) >> 10;
            in_rw = strcmp(perms, "rw-p") == 0 && hi - lo <= (256UL << 20) && nrw < MAX_RW;
            if (in_rw)
                rw_lo[nrw] = lo, rw_hi[nrw] = hi, rw_kb[nrw] = 0, nrw++;
            int anon = inode == 0 && (line[name] == '\0' || line[name] == '\n');
            if (strstr(line + name, "libmallocshim.so"))
                shim_end = hi;
            else if (anon && shim_end && lo == shim_end && !bss_hi)
                bss_lo = lo, bss_hi = hi;
            if (anon && heap && lo == heap_end && strcmp(perms, "---p") == 0 && hi == heap + (64UL << 20))
                arenas++;
            heap = 0;
            if (anon && lo % (64UL << 20) == 0 && strcmp(perms, "rw-p") == 0)
                heap = lo, heap_end = hi;
        } else if (strncmp(line, "Rss:", 4) == 0 && in_rw) {
            rw_kb[nrw - 1] = strtoul(line + 4, NULL, 10);
        } else if (strncmp(line, "VmFlags:", 8) == 0 && strstr(line, " wf")) {
            wipe++;
            wipe_kb += last_kb;
        }
    }
    fclose(f);
    FILE *pm = fopen("/proc/self/pagemap", "r");
    if (!pm)
        return 2;
    int bss_ranges = 0;
    if (bss_hi && present_pages(pm, bss_lo, bss_hi, &bss_ranges) < 0)
        return 2;
    long zero = 0;
    for (int i = 0; i < nrw; i++) {
        long present = present_pages(pm, rw_lo[i], rw_hi[i], NULL);
        if (present < 0)
            return 2;
        if (present > (long)(rw_kb[i] / 4))
            zero += present - (long)(rw_kb[i] / 4);
    }
    fclose(pm);
    fflush(stdout);
    pid_t p = fork();
    if (p == 0)
        _exit(child());
    int st = 0;
    if (p < 0 || waitpid(p, &st, 0) != p)
        return 2;
    atomic_store(&stop, 1);
    pthread_join(t, NULL);
    printf("wipe=%d wipe_kb=%lu maps=%d arenas=%d bss_ranges=%d zero=%ld child=%d\n", wipe, wipe_kb, maps,
           arenas, bss_ranges, zero, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    return 0;
}
