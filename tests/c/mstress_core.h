/* mstress_core.h: the stress loop shared by mstress.c and test_stress.c: mimalloc's
 * test/test-stress.c (Daan Leijen, MIT licence) as mimalloc-bench runs it, REWRITTEN FROM
 * MEMORY (the originals could not be fetched here; behaviour as remembered, see each file's
 * header). Objects are calloc'd, filled with a cookie pattern and checked at every free
 * (CORRUPTION and abort on a mismatch). */
#ifndef MSTRESS_CORE_H
#define MSTRESS_CORE_H
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRANSFERS 1000
#define COOKIE 0xbf58476d1ce4e5b9ULL

static int THREADS = 32, SCALE = 10, ITER = 50;
static void *_Atomic transfer[TRANSFERS];
static _Atomic unsigned long long allocated, freed;

static uint64_t pick(uint64_t *r)
{
    uint64_t x = *r;
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    *r = x;
    return x;
}

static int chance(unsigned perc, uint64_t *r) { return pick(r) % 100 <= perc; }

static void *alloc_items(size_t items, uint64_t *r)
{
    if (chance(1, r)) {
        if (chance(1, r))
            items *= 10000; /* giant */
        else if (chance(10, r))
            items *= 1000; /* huge */
        else
            items *= 100; /* large */
    }
    if (items == 40)
        items++;
    uint64_t *p = calloc(items, sizeof(uint64_t));
    if (!p) {
        fprintf(stderr, "mstress: calloc(%zu) failed\n", items);
        abort();
    }
    for (size_t i = 0; i < items; i++) {
        if (p[i] != 0) {
            fprintf(stderr, "CORRUPTION: calloc not zero at %p[%zu]\n", (void *)p, i);
            abort();
        }
        p[i] = (items - i) ^ COOKIE;
    }
    allocated++;
    return p;
}

static void free_items(void *p)
{
    if (p) {
        uint64_t *q = p, items = q[0] ^ COOKIE;
        for (uint64_t i = 0; i < items; i++)
            if ((q[i] ^ COOKIE) != items - i) {
                fprintf(stderr, "CORRUPTION: block %p at %llu\n", p, (unsigned long long)i);
                abort();
            }
        freed++;
    }
    free(p);
}

static void *stress(void *arg)
{
    intptr_t tid = (intptr_t)arg;
    uint64_t r = (uint64_t)(tid + 1) * 43;
    const unsigned max_shift = 5, max_retained_shift = max_shift + 2;
    size_t allocs = 100 * (size_t)SCALE * (tid % 8 + 1), retain = allocs / 2;
    void **data = NULL, **retained = calloc(retain ? retain : 1, sizeof(void *));
    size_t data_size = 0, data_top = 0, retain_top = 0;
    while (allocs > 0 || retain > 0) {
        if (retain == 0 || (chance(50, &r) && allocs > 0)) {
            allocs--;
            if (data_top >= data_size) {
                data_size += 100000;
                data = realloc(data, data_size * sizeof(void *));
                if (!data)
                    abort();
            }
            data[data_top++] = alloc_items(1ULL << (pick(&r) % max_shift), &r);
        } else {
            retained[retain_top++] = alloc_items(1ULL << (pick(&r) % max_retained_shift), &r);
            retain--;
        }
        if (chance(66, &r) && data_top > 0) {
            size_t i = pick(&r) % data_top;
            free_items(data[i]);
            data[i] = NULL;
        }
        if (chance(25, &r) && data_top > 0) {
            size_t i = pick(&r) % data_top, t = pick(&r) % TRANSFERS;
            data[i] = __atomic_exchange_n((void **)&transfer[t], data[i], __ATOMIC_ACQ_REL);
        }
    }
    for (size_t i = 0; i < retain_top; i++)
        free_items(retained[i]);
    for (size_t i = 0; i < data_top; i++)
        free_items(data[i]);
    free(retained);
    free(data);
    return NULL;
}


/* A short-lived thread (test-stress's "leak" phase): one object, swapped with a random transfer
 * slot half of the time, the object it gets back freed. */
__attribute__((unused)) static void *leak(void *arg)
{
    uint64_t r = (uint64_t)((intptr_t)arg + 7) * 0x9e3779b97f4a7c15ULL;
    void *p = alloc_items(1 + pick(&r) % 16, &r);
    if (chance(50, &r))
        p = __atomic_exchange_n((void **)&transfer[pick(&r) % TRANSFERS], p, __ATOMIC_ACQ_REL);
    free_items(p);
    return NULL;
}

/* Runs `n` threads of `fn` and joins them; 0, or -1 when one cannot be created. */
static int run_threads(int n, void *(*fn)(void *))
{
    pthread_t th[n];
    for (intptr_t i = 0; i < n; i++)
        if (pthread_create(&th[i], NULL, fn, (void *)i) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return -1;
        }
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    return 0;
}

/* Frees half the transfer slots (all with `all`). */
static void drain_transfers(uint64_t *r, int all)
{
    for (int i = 0; i < TRANSFERS; i++)
        if (all || chance(50, r))
            free_items(__atomic_exchange_n((void **)&transfer[i], NULL, __ATOMIC_ACQ_REL));
}

/* Parses [THREADS] [SCALE] [ITER]; 0, or 2 after a usage line. */
static int parse_args(int argc, char **argv, const char *name)
{
    if (argc > 1)
        THREADS = atoi(argv[1]);
    if (argc > 2)
        SCALE = atoi(argv[2]);
    if (argc > 3)
        ITER = atoi(argv[3]);
    if (THREADS < 1 || THREADS > 1024 || SCALE < 0 || ITER < 1) {
        fprintf(stderr, "usage: %s [THREADS] [SCALE] [ITER]\n", name);
        return 2;
    }
    return 0;
}
#endif
