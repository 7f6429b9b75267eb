/* Library for loader_dlclose.c: its constructor starts two threads that allocate until told to
 * stop; its destructor (run by dlclose, under the loader's lock) stops and joins them. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define THREADS 2
static pthread_t th[THREADS];
static int started;
static atomic_int stop;

static void *lib_worker(void *a)
{
    unsigned s = (unsigned)(long)a;
    while (!atomic_load(&stop)) {
        s = s * 1103515245u + 12345u;
        void *volatile p = malloc(16 + s % 4000);
        free(p);
    }
    return NULL;
}

__attribute__((constructor)) static void lib_init(void)
{
    atomic_store(&stop, 0);
    for (long i = 0; i < THREADS; i++)
        if (pthread_create(&th[i], NULL, lib_worker, (void *)i) == 0)
            started++;
}

__attribute__((destructor)) static void lib_fini(void)
{
    atomic_store(&stop, 1);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
}

int loader_lib_threads(void)
{
    return started;
}
