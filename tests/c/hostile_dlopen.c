/* Hostile dlopen (tests/hostile.rs). usage: hostile_dlopen LIB.so N
 * Three threads churn malloc/free while the main thread dlopens and dlcloses LIB N times (the
 * library allocates in its constructor and destructor). Exits 0 when every load worked. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static atomic_int stop;

static void *churn(void *a)
{
    unsigned s = (unsigned)(long)a;
    while (!atomic_load(&stop)) {
        s = s * 1103515245u + 12345u;
        void *volatile p = malloc(16 + s % 3000);
        free(p);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    int n = atoi(argv[2]);
    pthread_t th[3];
    for (long i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, churn, (void *)i);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "dlopen: %s\n", dlerror());
            bad++;
            continue;
        }
        int (*f)(void) = (int (*)(void))dlsym(h, "hostile_lib_value");
        if (!f || f() != 1)
            bad++;
        dlclose(h);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    printf("loads=%d bad=%d\n", n, bad);
    return bad ? 1 : 0;
}
