/* exec_later.c: a wrapper that execs another program in the same process, as numactl, nohup or
 * setsid do. Usage: exec_later MICROSECONDS PROGRAM [ARGS...]: sleeps that long, then
 * execv(PROGRAM, ARGS). Started with the shim preloaded, it catches the dump signal (the shim's
 * handler) until the exec; the new image catches it again only once its shim has started. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: exec_later MICROSECONDS PROGRAM [ARGS...]\n");
    return 2;
  }
  usleep((useconds_t)atoi(argv[1]));
  execv(argv[2], argv + 2);
  perror("exec_later: execv");
  return 127;
}
