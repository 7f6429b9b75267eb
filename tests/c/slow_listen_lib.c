/* slow_listen_lib.c: preloaded ahead of the shim by tests/ctl_quiet.rs, it makes every listen(2)
 * of the process wait 300 ms first, so that a socket bound but not yet listening stays so long
 * enough for a client to find it. listen is looked up (RTLD_NEXT) in the constructor. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sys/socket.h>
#include <unistd.h>

static int (*real_listen)(int, int);

__attribute__((constructor)) static void init(void)
{
    real_listen = (int (*)(int, int))dlsym(RTLD_NEXT, "listen");
}

int listen(int fd, int backlog)
{
    usleep(300 * 1000);
    return real_listen(fd, backlog);
}
