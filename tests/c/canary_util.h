/* Shared by the fork canaries (fork_stdio.c, fork_signal.c): the supervisor that runs the canary
 * in a fresh process with an alarm() watchdog, and the hang reporter.
 *
 * `canary_supervise` re-executes the program with `--run` (a fresh exec, so whatever threads the
 * preloaded allocator starts at load time exist in the canary process, as in a real server),
 * reads its progress (a byte per completed fork on a pipe), declares a hang after 15 s without
 * progress or when alarm(timeout) fires, and prints one verdict line:
 *   canary=<name> result=pass|fail|hang|crash detail=...
 * A hung process is reported with its threads' backtraces (`gdb -p PID -batch -ex 'thread apply
 * all bt'`, lines prefixed `gdb: `) when FORK_CANARY_GDB=1, then killed. gdb is started with
 * posix_spawn (no fork handlers run), so the reporter itself cannot deadlock on the allocator. */
#ifndef CANARY_UTIL_H
#define CANARY_UTIL_H

#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static volatile sig_atomic_t canary_timed_out;

static void canary_on_alarm(int sig)
{
    (void)sig;
    canary_timed_out = 1;
}

/* Prints the backtraces of every thread of `pid` (when FORK_CANARY_GDB=1), prefixed "gdb: ". */
static void canary_backtrace(pid_t pid)
{
    const char *g = getenv("FORK_CANARY_GDB");
    if (!g || strcmp(g, "1") != 0) {
        printf("gdb: (set FORK_CANARY_GDB=1 for the backtraces of pid %d)\n", (int)pid);
        fflush(stdout);
        return;
    }
    char spid[32];
    snprintf(spid, sizeof spid, "%d", (int)pid);
    char *const argv[] = {"gdb", "-p", spid, "-batch", "-nx", "-ex", "set pagination off",
                          "-ex", "thread apply all bt", NULL};
    int fds[2];
    if (pipe(fds) != 0)
        return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    /* gdb must not inherit an allocator preload */
    static char *env[] = {"PATH=/usr/bin:/bin", "HOME=/tmp", NULL};
    pid_t gp;
    int rc = posix_spawnp(&gp, "gdb", &fa, NULL, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        printf("gdb: cannot start gdb: %s\n", strerror(rc));
        close(fds[0]);
        return;
    }
    FILE *f = fdopen(fds[0], "r");
    char line[1024];
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "[New LWP", 8) != 0)
            printf("gdb: %s", line);
    if (f)
        fclose(f);
    int st;
    waitpid(gp, &st, 0);
    fflush(stdout);
}

/* The canary reports progress (one byte per completed fork) on this descriptor. */
static int canary_progress_fd = -1;

static void canary_progress(void)
{
    if (canary_progress_fd >= 0)
        (void)!write(canary_progress_fd, ".", 1);
}

/* In the canary: picks up the progress descriptor the supervisor passed. */
static void canary_init_run(void)
{
    const char *e = getenv("CANARY_PROGRESS_FD");
    if (e)
        canary_progress_fd = atoi(e);
    unsetenv("CANARY_PROGRESS_FD");
}

/* Runs `self --run` under two watchdogs: no progress for `stall_s` seconds (FORK_CANARY_STALL_S
 * overrides) is a hang, and alarm(`timeout_s`) bounds the whole run. Returns the exit status. */
static int canary_supervise(const char *name, const char *self, unsigned timeout_s)
{
    unsigned stall_s = 15;
    const char *e = getenv("FORK_CANARY_STALL_S");
    if (e && atoi(e) > 0)
        stall_s = (unsigned)atoi(e);
    struct sigaction sa = {.sa_handler = canary_on_alarm};
    sigaction(SIGALRM, &sa, NULL); /* no SA_RESTART: poll and waitpid return EINTR */
    fflush(stdout);
    int fds[2];
    if (pipe(fds) != 0)
        return 1;
    char fdenv[32];
    snprintf(fdenv, sizeof fdenv, "%d", fds[1]);
    setenv("CANARY_PROGRESS_FD", fdenv, 1);
    pid_t pid;
    char *const argv[] = {(char *)self, "--run", NULL};
    int rc = posix_spawn(&pid, self, NULL, NULL, argv, environ);
    close(fds[1]);
    if (rc != 0) {
        printf("canary=%s result=fail detail=cannot start %s: %s\n", name, self, strerror(rc));
        return 1;
    }
    alarm(timeout_s);
    long progress = 0;
    const char *why = NULL;
    for (;;) {
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        int n = poll(&p, 1, (int)stall_s * 1000);
        if (canary_timed_out) {
            why = "the whole-run alarm() watchdog fired";
            break;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0) {
            why = "no progress";
            break;
        }
        char buf[256];
        ssize_t r = read(fds[0], buf, sizeof buf);
        if (r <= 0)
            break; /* EOF: the canary exited (or closed the descriptor) */
        progress += r;
    }
    int st = 0;
    pid_t w = why ? waitpid(pid, &st, WNOHANG) : waitpid(pid, &st, 0);
    alarm(0);
    close(fds[0]);
    if (w != pid) {
        printf("canary=%s result=hang detail=pid %d stuck after %ld forks: %s for %u s (deadlock)\n",
               name, (int)pid, progress, why, why[0] == 'n' ? stall_s : timeout_s);
        fflush(stdout);
        canary_backtrace(pid);
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        return 1;
    }
    if (WIFSIGNALED(st)) {
        printf("canary=%s result=crash detail=killed by SIG%s after %ld forks\n", name,
               sigabbrev_np(WTERMSIG(st)), progress);
        return 1;
    }
    /* the run printed its own verdict line */
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

/* In the canary: waits for child `pid` for at most `ms` milliseconds. Returns 1 and fills *st
 * when it exited; 0 (child left running) on timeout. */
static int canary_wait_child(pid_t pid, int *st, int ms)
{
    for (int i = 0; i < ms; i++) {
        pid_t w = waitpid(pid, st, WNOHANG);
        if (w == pid)
            return 1;
        if (w < 0 && errno != EINTR)
            return 1;
        usleep(1000);
    }
    return 0;
}

/* The canaries' main: `--run` runs the canary itself (`run`), no argument supervises a fresh
 * `--run` of this program. */
static int canary_main(int argc, char **argv, const char *name, int (*run)(void))
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 2 && strcmp(argv[1], "--run") == 0) {
        canary_init_run();
        return run();
    }
    if (argc != 1) {
        fprintf(stderr, "usage: %s [--run]\n", argv[0]);
        return 2;
    }
    return canary_supervise(name, "/proc/self/exe", 120);
}

#endif
