/* Where a thread's sampled stack ends (tests/heap_cfi.rs): a thread started with
 * pthread_create keeps 4,000 blocks of 1 KiB from t_leaf <- t_mid <- thread_main (its start
 * routine), the main thread 4,000 from m_leaf <- main; dumps (mallocshim_dump) while both
 * sets are live and prints api_rc=N. Built -O2 -fomit-frame-pointer. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define N 4000
static void *keep_t[N], *keep_m[N];

__attribute__((noipa)) static void *t_leaf(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

__attribute__((noipa)) static void t_mid(void)
{
    for (int i = 0; i < N; i++)
        keep_t[i] = t_leaf(1024);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noipa)) static void *thread_main(void *arg)
{
    t_mid();
    __asm__ volatile("" ::: "memory");
    return arg;
}

__attribute__((noipa)) static void *m_leaf(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

int main(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, thread_main, NULL) != 0 || pthread_join(t, NULL) != 0)
        return 2;
    for (int i = 0; i < N; i++)
        keep_m[i] = m_leaf(1024);
    int (*d)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "mallocshim_dump");
    printf("api_rc=%d\n", d ? d() : -1);
    for (int i = 0; i < N; i++) {
        free(keep_t[i]);
        free(keep_m[i]);
    }
    return 0;
}
