/* stderr_null_exec PROG ARGS...: points fd 2 at /dev/null, then execs PROG. Built static (the
 * preloaded shim does not load into it), so the only stderr the shim in PROG sees at start is
 * /dev/null: a start-up line reaches a server's error log only when written again after the
 * server reopens fd 2 onto it. */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    int fd = open("/dev/null", O_WRONLY);
    if (fd < 0 || dup2(fd, 2) < 0)
        return 3;
    close(fd);
    execv(argv[1], argv + 1);
    perror("execv");
    return 4;
}
