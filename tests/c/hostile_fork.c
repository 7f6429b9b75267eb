/* Hostile forks (tests/hostile.rs). usage: hostile_fork MODE [N]
 *   exec    three threads churn malloc/free while the main thread forks N times: odd children
 *           exec /bin/true, even ones malloc, free and _exit(0).
 *   signal  single-threaded: a 1 ms SIGALRM timer's handler forks (its child _exits at once and
 *           the handler reaps it) while the main loop forks N children that malloc and _exit,
 *           and mallocs itself: the handler's fork interrupts fork and malloc.
 *   stdio   one thread calls fflush(NULL) and open_memstream in a loop, two others fopen, read
 *           with getline (fresh buffers) and fclose, while the main thread forks N children
 *           that use stdio and malloc, then _exit(0).
 *   threads three threads churn while a fourth (not the main thread) forks N children that start
 *           threads before anything settles the forking thread's slot (`slots::fold`): even
 *           children start four that allocate and exit (two joined, two detached), allocate and
 *           dump (mallocshim_dump, when present); odd ones start a thread that forks a
 *           grandchild (which allocates, dumps, exits), and the survivor pthread_exit()s first.
 * Exits 0 when every child exited 0; prints `forks=N handler_forks=N`. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static atomic_int stop;
static volatile sig_atomic_t handler_forks;

static void *churn(void *a)
{
    unsigned s = (unsigned)(long)a;
    void *keep[64] = {0};
    while (!atomic_load(&stop)) {
        s = s * 1103515245u + 12345u;
        int i = s % 64;
        free(keep[i]);
        keep[i] = malloc(16 + s % 5000);
    }
    for (int i = 0; i < 64; i++)
        free(keep[i]);
    return NULL;
}

static void *flusher(void *a)
{
    (void)a;
    while (!atomic_load(&stop)) {
        fflush(NULL);
        char *buf = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&buf, &len);
        if (m) {
            fprintf(m, "%d", 42);
            fclose(m);
        }
        free(buf);
    }
    return NULL;
}

static void *opener(void *a)
{
    (void)a;
    while (!atomic_load(&stop)) {
        FILE *f = fopen("/proc/self/status", "r");
        if (!f)
            continue;
        char *line = NULL;
        size_t cap = 0;
        while (getline(&line, &cap, f) > 0)
            ;
        free(line);
        fclose(f);
    }
    return NULL;
}

static int child_work(void)
{
    FILE *f = fopen("/dev/null", "w");
    if (f) {
        fprintf(f, "child %d\n", (int)getpid());
        fclose(f);
    }
    for (int i = 0; i < 32; i++) {
        void *volatile p = malloc(16 + i * 100);
        if (!p)
            return 4;
        free(p);
    }
    return 0;
}

static int (*shim_dump)(void);

static void *small(void *a)
{
    (void)a;
    for (int i = 0; i < 200; i++)
        free(malloc(i * 13 + 1));
    return NULL;
}

static void *grandchild_forker(void *a)
{
    (void)a;
    pid_t g = fork();
    if (g == 0) {
        free(malloc(12345));
        if (shim_dump)
            shim_dump();
        _exit(0);
    }
    int st = 0;
    while (waitpid(g, &st, 0) < 0)
        ;
    _exit(WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 7);
}

/* A child of the `threads` mode (see the usage). */
static int child_threads(int i)
{
    void *p = malloc(777);
    if (i % 2 == 0) {
        pthread_t t[4];
        pthread_attr_t det;
        pthread_attr_init(&det);
        pthread_attr_setdetachstate(&det, PTHREAD_CREATE_DETACHED);
        for (int k = 0; k < 4; k++)
            if (pthread_create(&t[k], k < 2 ? NULL : &det, small, NULL))
                return 2;
        pthread_join(t[0], NULL);
        pthread_join(t[1], NULL);
        free(p);
        if (shim_dump && shim_dump() != 0)
            return 6;
        return 0;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, grandchild_forker, NULL))
        return 3;
    free(p);
    pthread_exit(NULL);
}

static void on_alarm(int sig)
{
    (void)sig;
    pid_t p = fork();
    if (p == 0)
        _exit(0);
    if (p > 0) {
        int st;
        waitpid(p, &st, 0);
        handler_forks++;
    }
}

static int wait_ok(pid_t p)
{
    int st;
    while (waitpid(p, &st, 0) < 0)
        ; /* EINTR from the timer */
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static const char *mode;
static int threads;

static void *fork_loop(void *a)
{
    int n = (int)(long)a, bad = 0;
    for (int i = 0; i < n; i++) {
        void *volatile q = malloc(100 + i);
        pid_t p = fork();
        if (p == 0) {
            if (threads)
                _exit(child_threads(i));
            if (strcmp(mode, "exec") == 0 && i % 2) {
                execl("/bin/true", "true", (char *)NULL);
                _exit(5);
            }
            _exit(child_work());
        }
        free(q);
        if (p < 0 || !wait_ok(p))
            bad++;
    }
    return (void *)(long)bad;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: hostile_fork exec|signal|stdio|threads [N]\n");
        return 2;
    }
    mode = argv[1];
    shim_dump = (int (*)(void))dlsym(RTLD_DEFAULT, "mallocshim_dump");
    int n = argc > 2 ? atoi(argv[2]) : 100;
    pthread_t th[3];
    int nth = 0;
    threads = strcmp(mode, "threads") == 0;
    if (strcmp(mode, "exec") == 0 || threads) {
        for (long i = 0; i < 3; i++)
            pthread_create(&th[nth++], NULL, churn, (void *)i);
    } else if (strcmp(mode, "stdio") == 0) {
        pthread_create(&th[nth++], NULL, flusher, NULL);
        pthread_create(&th[nth++], NULL, opener, NULL);
        pthread_create(&th[nth++], NULL, opener, NULL);
    } else if (strcmp(mode, "signal") == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_alarm;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGALRM, &sa, NULL);
        struct itimerval it = {{0, 1000}, {0, 1000}};
        setitimer(ITIMER_REAL, &it, NULL);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    int bad = 0;
    if (threads) {
        /* Forked from a thread that is not the main one. */
        pthread_t f;
        void *r = NULL;
        if (pthread_create(&f, NULL, fork_loop, (void *)(long)n) || pthread_join(f, &r))
            return 2;
        bad = (int)(long)r;
    } else {
        bad = (int)(long)fork_loop((void *)(long)n);
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    atomic_store(&stop, 1);
    for (int i = 0; i < nth; i++)
        pthread_join(th[i], NULL);
    printf("forks=%d bad=%d handler_forks=%d\n", n, bad, (int)handler_forks);
    return bad ? 1 : 0;
}
