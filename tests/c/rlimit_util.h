/* rlimit_util.h: the address-space limit shared by the hostile programs that run memory out
 * (tests/hostile.rs: hostile_rlimit.c, hostile_oom_dump.c). */
#ifndef RLIMIT_UTIL_H
#define RLIMIT_UTIL_H
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

/* Sets RLIMIT_AS (soft and hard) to the process's current size (/proc/self/statm) plus `extra`
 * bytes; returns setrlimit's result (0, or -1 with errno). */
static int limit_address_space(long extra)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0;
    if (f) {
        if (fscanf(f, "%ld", &pages) != 1)
            pages = 0;
        fclose(f);
    }
    struct rlimit r;
    r.rlim_cur = r.rlim_max = (rlim_t)(pages * sysconf(_SC_PAGESIZE) + extra);
    return setrlimit(RLIMIT_AS, &r);
}

/* Appends `p` to the growing array `*keep` (`*n` used, `*cap` allocated, `first` the first
 * capacity); 0, or -1 when the array cannot grow (p not kept). `*cap` grows only with the array:
 * after a failed realloc the next call finds n == cap and asks again (the programs once grew it
 * first and then wrote through NULL). */
static inline int keep_block(void ***keep, size_t *n, size_t *cap, size_t first, void *p)
{
    if (*n == *cap) {
        size_t want = *cap ? *cap * 2 : first;
        void **k = realloc(*keep, want * sizeof **keep);
        if (!k)
            return -1;
        *keep = k;
        *cap = want;
    }
    (*keep)[(*n)++] = p;
    return 0;
}
#endif
