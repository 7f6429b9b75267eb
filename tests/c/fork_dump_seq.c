/* A forked child's dump numbering (tests/loader_fork.rs). usage: fork_dump_seq
 * The parent writes three dumps with mallocshim_dump(), then forks a child that writes one and
 * exits. Prints `parent=PID child=PID rc=R`: the dump files name each process and its own
 * sequence number (the child's first is 0, as a new process's). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
    int (*dump)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "mallocshim_dump");
    if (!dump) {
        fprintf(stderr, "mallocshim_dump not found: run under the shim\n");
        return 2;
    }
    for (int i = 0; i < 3; i++)
        if (dump() != 0)
            return 3;
    pid_t p = fork();
    if (p == 0)
        _exit(dump() == 0 ? 0 : 4);
    int st = 0;
    waitpid(p, &st, 0);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    printf("parent=%d child=%d rc=%d\n", (int)getpid(), (int)p, rc);
    return rc;
}
