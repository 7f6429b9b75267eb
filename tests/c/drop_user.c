/* A server that changes its user at start, as mysqld --user=mysql does: starts a thread (the
 * shim's thread starts with it), then with an argument UID sets its real, effective and saved
 * uid and gid to UID (the kernel then makes it non-dumpable: its /proc files become root's),
 * prints "ready" and waits until stdin reaches EOF. tests/ctl_perms.rs. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void *idle(void *a) {
    (void)a;
    for (;;) pause();
    return NULL;
}

int main(int argc, char **argv) {
    pthread_t t;
    pthread_create(&t, NULL, idle, NULL);
    for (int i = 0; i < 100; i++) free(malloc(32 + i));
    if (argc > 1) {
        unsigned id = (unsigned)atoi(argv[1]);
        if (setresgid(id, id, id) || setresuid(id, id, id)) { perror("setresuid"); return 1; }
    }
    puts("ready");
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {}
    return 0;
}
