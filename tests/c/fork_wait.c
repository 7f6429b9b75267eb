/* fork+wait latency, and fork from a fast SIGALRM handler (tests/loader_fork.rs,
 * benches/fork.rs). usage: fork_wait N [THREADS] [ALARM_US] [MALLOC]
 *   N         fork()s of a child that _exit(0)s at once, each reaped with waitpid before the next
 *   THREADS   threads started first that sleep until the end (1: the process is multi-threaded,
 *             so under the shim its worker thread exists); default 0 (single-threaded)
 *   ALARM_US  a SIGALRM timer of this period (µs) whose handler forks and reaps a child of its own:
 *             the handler can interrupt fork() itself, which the kernel then restarts; a handler
 *             slower than the period starves the main loop; default 0 (no timer)
 *   MALLOC    1: the main loop also mallocs and frees a block around each fork; default 0
 * Prints `forks=N bad=B handler_forks=H ns_per_fork=X cpu_ns_per_fork=C faults_per_fork=F` (X:
 * wall time of the main loop / N; C: CPU time of the process and its children over the loop / N;
 * F: minor page faults of the process and its children over the loop / N). Exits 0 when every
 * child exited 0. */
#define _GNU_SOURCE
#include <pthread.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static atomic_int stop;
static volatile sig_atomic_t handler_forks;
static volatile sig_atomic_t handler_bad;

static void *sleeper(void *a)
{
    (void)a;
    while (!atomic_load(&stop)) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void on_alarm(int sig)
{
    (void)sig;
    int saved = errno;
    pid_t p = fork();
    if (p == 0)
        _exit(0);
    if (p > 0) {
        int st;
        while (waitpid(p, &st, 0) < 0)
            ;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            handler_bad++;
        handler_forks++;
    }
    errno = saved;
}

/* Minor page faults of this process and its reaped children. */
static double faults(void)
{
    struct rusage a, b;
    getrusage(RUSAGE_SELF, &a);
    getrusage(RUSAGE_CHILDREN, &b);
    return (double)a.ru_minflt + (double)b.ru_minflt;
}

/* CPU time of this process and its reaped children, ns. */
static double cpu_ns(void)
{
    struct rusage a, b;
    getrusage(RUSAGE_SELF, &a);
    getrusage(RUSAGE_CHILDREN, &b);
    double s = a.ru_utime.tv_sec + a.ru_stime.tv_sec + b.ru_utime.tv_sec + b.ru_stime.tv_sec;
    double us = a.ru_utime.tv_usec + a.ru_stime.tv_usec + b.ru_utime.tv_usec + b.ru_stime.tv_usec;
    return s * 1e9 + us * 1e3;
}

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: fork_wait N [THREADS] [ALARM_US] [MALLOC]\n");
        return 2;
    }
    int n = atoi(argv[1]);
    int nth = argc > 2 ? atoi(argv[2]) : 0;
    int alarm_us = argc > 3 ? atoi(argv[3]) : 0;
    int use_malloc = argc > 4 ? atoi(argv[4]) : 0;
    pthread_t th[16];
    if (nth > 16)
        nth = 16;
    for (int i = 0; i < nth; i++)
        pthread_create(&th[i], NULL, sleeper, NULL);
    if (alarm_us > 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_alarm;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGALRM, &sa, NULL);
        struct itimerval it = {{0, alarm_us}, {0, alarm_us}};
        setitimer(ITIMER_REAL, &it, NULL);
    }
    int bad = 0;
    double t0 = now_ns(), c0 = cpu_ns(), f0 = faults();
    for (int i = 0; i < n; i++) {
        void *volatile q = use_malloc ? malloc(100 + i % 1000) : NULL;
        pid_t p = fork();
        if (p == 0)
            _exit(0);
        free(q);
        int st;
        if (p < 0) {
            bad++;
            continue;
        }
        while (waitpid(p, &st, 0) < 0)
            ; /* EINTR from the timer */
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            bad++;
    }
    double t1 = now_ns(), c1 = cpu_ns(), f1 = faults();
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    atomic_store(&stop, 1);
    for (int i = 0; i < nth; i++)
        pthread_join(th[i], NULL);
    bad += handler_bad;
    printf("forks=%d bad=%d handler_forks=%d ns_per_fork=%.0f cpu_ns_per_fork=%.0f "
           "faults_per_fork=%.1f\n",
           n, bad, (int)handler_forks, n ? (t1 - t0) / n : 0.0, n ? (c1 - c0) / n : 0.0,
           n ? (f1 - f0) / n : 0.0);
    return bad ? 1 : 0;
}
