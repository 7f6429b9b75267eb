/* Fork canary 1 (issue 6): fork while other threads use stdio. Under LD_PRELOAD jemalloc or
 * tcmalloc this deadlocks: the allocator's fork handler takes its locks before glibc's fork takes
 * the stdio list lock, while a thread in fflush(NULL) holds that list lock waiting for a FILE
 * whose owner (in getline) waits for the allocator. Under glibc it passes.
 *
 * usage: fork_stdio            supervisor: runs `fork_stdio --run`; a hang is 15 s without a
 *                              completed fork, or the 120 s alarm() watchdog (canary_util.h)
 *        fork_stdio --run      the canary itself
 *
 * The canary starts four threads: a getline reader of a regular file with lines of up to 1 MiB
 * (reopened over and over, each time with a fresh buffer, so getline mallocs and reallocs
 * outside the allocators' thread caches while it holds the FILE lock), a fprintf writer to a pipe plus a getline reader of that pipe, and a
 * flusher calling fflush(NULL) and open_memstream. The main thread forks FORK_STDIO_FORKS times
 * (default 400, stopped early after 20 s); each child uses stdio (fopen, fprintf, fflush, fclose,
 * open_memstream) and malloc/realloc/free, then _exit(0). A child still running after 5 s is a
 * hang (its backtrace printed with FORK_CANARY_GDB=1) and is killed.
 * Under the shim (mallocshim_dump found with dlsym) one last child also checks its dump path:
 * it sends itself SIGUSR1, calls mallocshim_dump() and reports which dump files it wrote.
 *
 * Prints `canary=fork_stdio result=pass|fail|hang|crash detail=...` (one line; the supervisor
 * prints it for hang/crash), then for the shim a `probe ...` line; exits 0 only on pass. */
#include "canary_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

static atomic_int stop;
static atomic_long ops[4];
static char path[64];
static FILE *pipe_w, *pipe_r;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void *file_reader(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        char *line = NULL; /* fresh buffer: getline mallocs and reallocs it under the FILE lock */
        size_t cap = 0;
        while (getline(&line, &cap, f) > 0)
            atomic_fetch_add(&ops[0], 1);
        free(line);
        fclose(f);
    }
    return NULL;
}

static void *pipe_writer(void *arg)
{
    (void)arg;
    unsigned long i = 0;
    while (!atomic_load(&stop)) {
        fprintf(pipe_w, "line %lu %*s\n", i, (int)(i % 300), "x");
        i++;
        if (i % 8 == 0)
            fflush(pipe_w);
        atomic_fetch_add(&ops[1], 1);
    }
    /* No fclose here: fclose takes the stdio list lock, which fflush(NULL) may hold while it
     * waits for pipe_r, whose reader sleeps in read(): the reader must see "end" first. */
    fprintf(pipe_w, "end\n");
    fflush(pipe_w);
    return NULL;
}

static void *pipe_reader(void *arg)
{
    (void)arg;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, pipe_r) > 0) {
        if (strcmp(line, "end\n") == 0)
            break;
        atomic_fetch_add(&ops[2], 1);
        if (cap > 4096) { /* keep reallocating */
            free(line);
            line = NULL;
            cap = 0;
        }
    }
    free(line);
    return NULL;
}

static void *flusher(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        fflush(NULL); /* takes the stdio list lock, then every FILE's lock */
        char *buf = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&buf, &len);
        if (m) {
            fprintf(m, "memstream %ld", atomic_load(&ops[3]));
            fclose(m);
            free(buf);
        }
        atomic_fetch_add(&ops[3], 1);
    }
    return NULL;
}

/* What every forked child does: stdio and malloc, then _exit. */
static int child_work(int i)
{
    int bad = 0;
    FILE *f = fopen("/dev/null", "w");
    if (!f)
        return 3;
    for (int k = 0; k < 50; k++)
        fprintf(f, "child %d line %d %s\n", i, k, "some text to format");
    fflush(f);
    fclose(f);
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m)
        return 4;
    fprintf(m, "%d", i);
    fclose(m);
    if (!buf || strtol(buf, NULL, 10) != i)
        bad = 1;
    free(buf);
    void *p[64];
    for (int k = 0; k < 64; k++) {
        p[k] = malloc((size_t)k * 97 + 1);
        if (!p[k])
            bad = 1;
        else
            memset(p[k], k, (size_t)k * 97 + 1);
    }
    for (int k = 0; k < 64; k++) {
        void *r = realloc(p[k], (size_t)k * 300 + 8);
        free(r ? r : p[k]);
    }
    return bad ? 5 : 0;
}

static int count_dumps(const char *dir, pid_t pid)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "mallocshim.%d.", (int)pid);
    DIR *d = opendir(dir);
    int n = 0;
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            n++;
    closedir(d);
    return n;
}

/* Under the shim: does a forked child still dump? (reported, not judged here) */
static void probe_child_dump(void)
{
    int (*dump)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "mallocshim_dump");
    const char *dir = getenv("MALLOCSHIM_DUMP_DIR");
    if (!dump || !dir)
        return;
    fflush(stdout);
    int fds[2];
    if (pipe(fds) != 0)
        return;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        alarm(20);
        void *p = malloc(1000);
        kill(getpid(), SIGUSR1); /* process-directed, as `kill -USR1 PID` */
        usleep(1000 * 1000);
        int after_signal = count_dumps(dir, getpid());
        int rc = dump();
        int after_capi = count_dumps(dir, getpid());
        free(p);
        char msg[200];
        int n = snprintf(msg, sizeof msg,
                         "probe child_alive_after_sigusr1=1 child_dump_files_after_sigusr1=%d mallocshim_dump_rc=%d child_dump_files_after_capi=%d\n",
                         after_signal, rc, after_capi);
        write(fds[1], msg, (size_t)n);
        _exit(0);
    }
    close(fds[1]);
    char buf[256];
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    if (n > 0) {
        buf[n] = 0;
        fputs(buf, stdout);
    } else {
        printf("probe child_alive_after_sigusr1=0 status=%s%s\n", WIFSIGNALED(st) ? "SIG" : "exit ",
               WIFSIGNALED(st) ? sigabbrev_np(WTERMSIG(st)) : "");
    }
}

static int run(void)
{
    int forks = 400;
    const char *e = getenv("FORK_STDIO_FORKS");
    if (e && atoi(e) > 0)
        forks = atoi(e);
    snprintf(path, sizeof path, "/tmp/fork_stdio.%d.txt", (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f) {
        printf("canary=fork_stdio result=fail detail=cannot create %s\n", path);
        return 1;
    }
    /* Short lines, and long ones (64 KiB to 1 MiB) so that getline's realloc leaves the
     * allocators' thread caches and takes their locks, as reading a big row or log line does. */
    for (int i = 0; i < 48; i++) {
        fprintf(f, "%d short line\n", i);
        if (i % 3 == 0) {
            size_t n = (size_t)(i / 3 + 1) * 64 * 1024;
            for (size_t k = 0; k < n; k++)
                fputc('a' + (int)(k % 26), f);
            fputc('\n', f);
        }
    }
    fclose(f);
    /* keep it open and unlink it now, so a killed (hung) run leaves nothing behind; the reader
     * reopens it through /proc/self/fd */
    int keep = open(path, O_RDONLY);
    unlink(path);
    if (keep < 0) {
        printf("canary=fork_stdio result=fail detail=cannot reopen %s\n", path);
        return 1;
    }
    snprintf(path, sizeof path, "/proc/self/fd/%d", keep);
    int pfd[2];
    if (pipe(pfd) != 0)
        return 1;
    pipe_w = fdopen(pfd[1], "w");
    pipe_r = fdopen(pfd[0], "r");
    pthread_t th[4];
    void *(*fns[4])(void *) = {file_reader, pipe_writer, pipe_reader, flusher};
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, fns[i], NULL);
    while (atomic_load(&ops[0]) < 200 || atomic_load(&ops[2]) < 1000 || atomic_load(&ops[3]) < 100)
        usleep(1000);

    int done = 0, failed = 0, hung = 0;
    char first[160] = "";
    double t0 = now_s();
    for (int i = 0; i < forks && now_s() - t0 < 20; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            signal(SIGALRM, SIG_DFL);
            alarm(30);
            _exit(child_work(i));
        }
        if (pid < 0) {
            failed++;
            continue;
        }
        int st = 0;
        if (!canary_wait_child(pid, &st, 5000)) {
            hung++;
            printf("child hang: fork #%d, pid %d still running after 5 s\n", i, (int)pid);
            fflush(stdout);
            canary_backtrace(pid);
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            if (hung >= 2)
                break;
            continue;
        }
        done++;
        canary_progress();
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            failed++;
            if (!first[0])
                snprintf(first, sizeof first, "; child #%d: %s%s %d", i,
                         WIFSIGNALED(st) ? "signal SIG" : "exit", WIFSIGNALED(st) ? sigabbrev_np(WTERMSIG(st)) : "",
                         WIFSIGNALED(st) ? 0 : WEXITSTATUS(st));
        }
    }
    double secs = now_s() - t0;
    atomic_store(&stop, 1);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    fclose(pipe_w);
    fclose(pipe_r);
    close(keep);
    int pass = hung == 0 && failed == 0 && done >= 50;
    printf("canary=fork_stdio result=%s detail=forks=%d ok=%d failed=%d hung=%d seconds=%.1f getline_lines=%ld pipe_lines=%ld flushes=%ld%s\n",
           pass ? "pass" : hung ? "hang" : "fail", done + hung, done - failed, failed, hung, secs,
           atomic_load(&ops[0]), atomic_load(&ops[2]), atomic_load(&ops[3]), first);
    fflush(stdout);
    probe_child_dump();
    return pass ? 0 : 1;
}

int main(int argc, char **argv)
{
    return canary_main(argc, argv, "fork_stdio", run);
}
