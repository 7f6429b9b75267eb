/* Fork canary 2 (issue 6): fork() from a signal handler that interrupted malloc. A program whose
 * single thread spends its time in malloc/free loops takes SIGALRM from setitimer every 2 ms; the
 * handler forks (fork is async-signal-safe per POSIX); the child makes a few small mallocs and
 * frees (formally not async-signal-safe, but what crash reporters and `system()`-from-a-handler
 * code do in practice before exec) and _exits. Under glibc a single-threaded process takes no malloc lock, so this
 * passes; an allocator whose fork handler takes its own locks self-deadlocks when the interrupted
 * code holds one of them (jemalloc, tcmalloc), and so would any lock the shim took in fork.
 *
 * usage: fork_signal           supervisor: runs `fork_signal --run`; a hang is 15 s without a
 *                              completed child, or the 120 s alarm() watchdog (canary_util.h)
 *        fork_signal --run     the canary itself
 *
 * FORK_SIGNAL_FORKS (default 200) children, stopped early after 20 s. The handler forks only when
 * the previous child has been reaped; the main loop reaps it (waitpid WNOHANG with SIGALRM
 * blocked) and declares a child still running after 5 s hung (backtrace with FORK_CANARY_GDB=1).
 * The handler records where it interrupted the program: `in_alloc` counts signals whose
 * interrupted instruction lies outside the program's own text (libc, the allocator, the shim).
 * Prints `canary=fork_signal result=pass|fail|hang|crash detail=forks=N ok=N failed=N hung=N
 * in_alloc=N threads=N ...`; `threads` is the canary's thread count (from /proc/self/status), since
 * glibc's fork takes its malloc locks only in a multi-threaded process. Exits 0 only on pass.
 * Link with -Wl,-z,now: a lazy PLT binding interrupted in the parent must not be what the child
 * trips over. */
#include "canary_util.h"

#include <stdatomic.h>
#include <stdint.h>
#include <sys/time.h>
#include <time.h>
#include <ucontext.h>

extern char __executable_start, etext;

static volatile sig_atomic_t pending_pid; /* the live child, 0 when none */
static volatile long forked, fork_errors, in_alloc, signals;
static int hung_children;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* What the child does: a few small allocations (building a message or an argv, as a crash
 * reporter does before exec), served under glibc from the thread cache for 32-byte chunks, a
 * size the interrupted loop never uses; then _exit. */
static int child_work(void)
{
    int bad = 0;
    char *s[4];
    for (int k = 0; k < 4; k++) {
        s[k] = malloc(24);
        if (!s[k])
            bad = 1;
        else
            for (int c = 0; c < 8; c++) /* no stdio, no first-time PLT call in the child */
                s[k][c] = "child 0"[c] + (c == 6 ? k : 0);
    }
    for (int k = 0; k < 4; k++) {
        if (s[k] && s[k][6] != (char)('0' + k))
            bad = 1;
        free(s[k]);
    }
    return bad ? 3 : 0;
}

static void on_alarm(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)si;
    int saved = errno;
    signals++;
    if (pending_pid == 0) {
        uintptr_t pc = (uintptr_t)((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RIP];
        if (pc < (uintptr_t)&__executable_start || pc >= (uintptr_t)&etext)
            in_alloc++;
        pid_t pid = fork();
        if (pid == 0) {
            struct itimerval off = {{0, 0}, {0, 0}};
            setitimer(ITIMER_REAL, &off, NULL);
            _exit(child_work());
        }
        if (pid > 0) {
            pending_pid = pid;
            forked++;
        } else {
            fork_errors++;
        }
    }
    errno = saved;
}

static int thread_count(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1)
            break;
    if (f)
        fclose(f);
    return n;
}

static int run(void)
{
    long forks = 200;
    const char *e = getenv("FORK_SIGNAL_FORKS");
    if (e && atol(e) > 0)
        forks = atol(e);
    int threads = thread_count();
    sigset_t alrm;
    sigemptyset(&alrm);
    sigaddset(&alrm, SIGALRM);
    struct sigaction sa = {.sa_sigaction = on_alarm, .sa_flags = SA_SIGINFO | SA_RESTART};
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 2000}, {0, 2000}};
    setitimer(ITIMER_REAL, &it, NULL);

    /* fill the 24-byte thread cache the child will use */
    void *warm[7];
    for (int k = 0; k < 7; k++)
        warm[k] = malloc(24);
    for (int k = 0; k < 7; k++)
        free(warm[k]);
    long ok = 0, failed = 0;
    char first[128] = "";
    void *ring[64] = {0};
    unsigned x = 12345;
    double t0 = now_s(), child_start = 0;
    long reaped = 0;
    while (reaped < forks && now_s() - t0 < 20 && hung_children < 2) {
        /* the allocator work the signal interrupts */
        for (int k = 0; k < 300; k++) {
            x = x * 1103515245u + 12345u;
            int s = (int)(x >> 26);
            free(ring[s]);
            size_t n = (x >> 7) % ((x & 0x300) ? 512 : 70000) + 100; /* never 24 */
            ring[s] = (x & 1) ? malloc(n) : calloc(1, n);
            if (ring[s])
                ((char *)ring[s])[0] = 1;
            if ((x & 0xf0) == 0x30) {
                void *r = realloc(ring[s], n * 3);
                if (r)
                    ring[s] = r;
            }
        }
        /* reap the child, with the handler held off */
        sigprocmask(SIG_BLOCK, &alrm, NULL);
        pid_t pid = pending_pid;
        if (pid) {
            int st = 0;
            pid_t w = waitpid(pid, &st, WNOHANG);
            if (w == pid) {
                reaped++;
                canary_progress();
                if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
                    ok++;
                } else {
                    failed++;
                    if (!first[0])
                        snprintf(first, sizeof first, "; first failed child: %s%s %d",
                                 WIFSIGNALED(st) ? "signal SIG" : "exit", WIFSIGNALED(st) ? sigabbrev_np(WTERMSIG(st)) : "",
                                 WIFSIGNALED(st) ? 0 : WEXITSTATUS(st));
                }
                pending_pid = 0;
                child_start = 0;
            } else if (child_start == 0) {
                child_start = now_s();
            } else if (now_s() - child_start > 5) {
                hung_children++;
                printf("child hang: pid %d still running after 5 s\n", (int)pid);
                fflush(stdout);
                canary_backtrace(pid);
                kill(pid, SIGKILL);
                waitpid(pid, &st, 0);
                pending_pid = 0;
                child_start = 0;
            }
        }
        sigprocmask(SIG_UNBLOCK, &alrm, NULL);
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    sigprocmask(SIG_BLOCK, &alrm, NULL);
    if (pending_pid) {
        int st = 0;
        if (canary_wait_child(pending_pid, &st, 5000)) {
            reaped++;
            if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
                ok++;
            else
                failed++;
        } else {
            hung_children++;
            kill(pending_pid, SIGKILL);
        }
    }
    for (int i = 0; i < 64; i++)
        free(ring[i]);
    int pass = failed == 0 && hung_children == 0 && fork_errors == 0 && ok >= 50;
    printf("canary=fork_signal result=%s detail=forks=%ld ok=%ld failed=%ld hung=%d fork_errors=%ld in_alloc=%ld signals=%ld threads=%d seconds=%.1f%s\n",
           pass ? "pass" : hung_children ? "hang" : "fail", (long)forked, ok, failed, hung_children, (long)fork_errors,
           (long)in_alloc, (long)signals, threads, now_s() - t0, first);
    return pass ? 0 : 1;
}

int main(int argc, char **argv)
{
    return canary_main(argc, argv, "fork_signal", run);
}
