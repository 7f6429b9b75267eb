/* Run setuid-root by another user (secure execution): prints `pid=N`, asks for a dump with
 * SIGUSR1 to itself, then allocates on this thread and on a second one (so a pending request
 * would be written by either the requesting thread or the shim's worker), and prints `ok`. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void *volatile sink;

static void churn(long n)
{
    for (long i = 0; i < n; i++) {
        sink = malloc(16 + (size_t)(i % 512));
        free(sink);
    }
}

static void *thread_main(void *arg)
{
    (void)arg;
    churn(200000);
    return NULL;
}

int main(void)
{
    printf("pid=%d\n", (int)getpid());
    fflush(stdout);
    kill(getpid(), SIGUSR1);
    churn(200000);
    pthread_t t;
    if (pthread_create(&t, NULL, thread_main, NULL) != 0)
        return 3;
    pthread_join(t, NULL);
    kill(getpid(), SIGUSR1);
    churn(200000);
    puts("ok");
    return 0;
}
