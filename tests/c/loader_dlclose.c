/* dlclose of a library whose destructor joins its threads (tests/loader_fork.rs).
 * usage: loader_dlclose LIB.so N
 * N times: dlopen LIB (its constructor starts two allocating threads), let them run about
 * 0.5 ms, dlclose it (its destructor joins them while dlclose holds the loader's lock). A dump
 * that waits for the loader's lock while an exiting thread waits for the dump deadlocks here.
 * Prints `loads=N bad=B`; exits 0 when every load started both threads. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    int n = atoi(argv[2]);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "dlopen: %s\n", dlerror());
            bad++;
            continue;
        }
        int (*f)(void) = (int (*)(void))dlsym(h, "loader_lib_threads");
        if (!f || f() != 2)
            bad++;
        struct timespec ts = {0, 500 * 1000};
        nanosleep(&ts, NULL);
        dlclose(h);
    }
    printf("loads=%d bad=%d\n", n, bad);
    return bad ? 1 : 0;
}
