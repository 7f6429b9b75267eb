/* Hostile thread lifetimes (tests/hostile.rs). usage: hostile_threads MODE
 *   churn    up to 32 concurrent short threads over ROUNDS*32 lifetimes: each mallocs and frees
 *            (sizes 16-800), or never allocates, or only calls free(NULL); some exit through
 *            pthread_exit from a nested frame; every thread has a pthread_key value whose
 *            destructor allocates and frees, and one key's destructor sets a new value (a second
 *            destructor round). Detached threads are still running when main returns.
 * Prints `calls malloc=N free=N` (the calls it made itself, free(NULL) included) and exits 0. */
#pragma GCC diagnostic ignored "-Winfinite-recursion"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_long n_malloc, n_free;
static pthread_key_t k_alloc, k_again;

static void *xmalloc(size_t n)
{
    void *volatile p = malloc(n); /* volatile: the compiler must not elide the pair */
    atomic_fetch_add(&n_malloc, 1);
    if (!p)
        abort();
    memset(p, 1, n);
    return p;
}

static void xfree(void *p)
{
    free(p);
    atomic_fetch_add(&n_free, 1);
}

static void dtor_alloc(void *v)
{
    xfree(v);
    xfree(xmalloc(64));
}

static void dtor_again(void *v)
{
    long round = (long)v;
    xfree(xmalloc(32));
    if (round == 1)
        pthread_setspecific(k_again, (void *)2L); /* a second destructor round */
}

__attribute__((noinline)) static int nested_exit(int depth)
{
    char frame[64];
    memset(frame, depth, sizeof frame);
    if (depth == 0)
        pthread_exit(NULL);
    return nested_exit(depth - 1) + frame[depth]; /* never returns */
}

static void *worker(void *arg)
{
    long i = (long)arg;
    switch (i % 5) {
    case 0: /* never allocates */
        return NULL;
    case 1: /* only free(NULL) */
        free(NULL);
        atomic_fetch_add(&n_free, 1);
        return NULL;
    default:
        break;
    }
    pthread_setspecific(k_alloc, xmalloc(24));
    pthread_setspecific(k_again, (void *)1L);
    unsigned s = (unsigned)i * 2654435761u;
    for (int k = 0; k < 100; k++) {
        s = s * 1103515245u + 12345u;
        xfree(xmalloc(16 + s % 785));
    }
    if (i % 5 == 4)
        nested_exit(5);
    return NULL;
}

static void *detached(void *arg)
{
    (void)arg;
    for (;;) {
        xfree(xmalloc(100));
        usleep(100);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int rounds = argc > 2 ? atoi(argv[2]) : 60;
    if (argc < 2 || strcmp(argv[1], "churn") != 0) {
        fprintf(stderr, "usage: hostile_threads churn [ROUNDS]\n");
        return 2;
    }
    pthread_key_create(&k_alloc, dtor_alloc);
    pthread_key_create(&k_again, dtor_again);
    pthread_attr_t da;
    pthread_attr_init(&da);
    pthread_attr_setdetachstate(&da, PTHREAD_CREATE_DETACHED);
    for (int d = 0; d < 2; d++) {
        pthread_t t;
        pthread_create(&t, &da, detached, NULL);
    }
    long id = 0;
    for (int r = 0; r < rounds; r++) {
        pthread_t t[32];
        int n = 1 + (r * 7) % 32;
        for (int i = 0; i < n; i++)
            if (pthread_create(&t[i], NULL, worker, (void *)id++) != 0)
                return 3;
        for (int i = 0; i < n; i++)
            pthread_join(t[i], NULL);
    }
    printf("calls malloc=%ld free=%ld threads=%ld\n", atomic_load(&n_malloc), atomic_load(&n_free), id);
    fflush(stdout);
    return 0; /* the detached threads still run */
}
