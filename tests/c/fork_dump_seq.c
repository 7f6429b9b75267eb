/* A forked child's dump numbering and its thread rows (tests/loader_fork.rs).
 * usage: fork_dump_seq
 * A helper thread allocates and waits; the main thread allocates, writes three dumps with
 * mallocshim_dump(), then forks a child that allocates one block of CHILD_BYTES, writes one dump
 * and exits. Prints `parent=PID child=PID helper=TID rc=R`: the dump files name each process and
 * its own sequence number (the child's first is 0, as a new process's); in the child's dump the
 * forking thread is the one live thread, under the child's pid, and the helper (a thread the
 * child does not have) is folded; its heap profile (when asked for) puts CHILD_BYTES under the
 * child's tid. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHILD_BYTES 777777

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int ready, done;
static pid_t helper_tid;

static void *helper(void *a)
{
    (void)a;
    void *volatile p = malloc(1000);
    pthread_mutex_lock(&mu);
    helper_tid = gettid();
    ready = 1;
    pthread_cond_broadcast(&cv);
    while (!done)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    free(p);
    return NULL;
}

int main(void)
{
    int (*dump)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "mallocshim_dump");
    if (!dump) {
        fprintf(stderr, "mallocshim_dump not found: run under the shim\n");
        return 2;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, helper, NULL))
        return 2;
    pthread_mutex_lock(&mu);
    while (!ready)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    void *volatile q = malloc(500);
    for (int i = 0; i < 3; i++)
        if (dump() != 0)
            return 3;
    pid_t p = fork();
    if (p == 0) {
        char *volatile c = malloc(CHILD_BYTES);
        if (!c)
            _exit(5);
        memset(c, 1, CHILD_BYTES);
        _exit(dump() == 0 ? 0 : 4);
    }
    int st = 0;
    waitpid(p, &st, 0);
    pthread_mutex_lock(&mu);
    done = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(t, NULL);
    free(q);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    printf("parent=%d child=%d helper=%d rc=%d\n", (int)getpid(), (int)p, (int)helper_tid, rc);
    return rc;
}
