/* guest_preload.c: preloaded into valgrind's launchers so that a library reaches only the guest.
 *
 * Heaptrack's preload removes LD_PRELOAD from the environment of the first process that loads it
 * (so that children are not traced). Given to valgrind, that first process is valgrind's own
 * launcher (Debian's /usr/bin/valgrind script, then the dynamically linked valgrind.bin), and the
 * guest starts without it. This library, preloaded instead, wraps execve: when a launcher execs
 * the tool itself (a path under valgrind's directory ending in "-linux", e.g.
 * /usr/libexec/valgrind/callgrind-amd64-linux, which is static and loads no preload), the tool's
 * environment gets LD_PRELOAD=$GUEST_LD_PRELOAD in place of this library; valgrind then loads it
 * into the guest. Every other execve passes through unchanged. Built by the MariaDB harness
 * (mallocshim_mariadb::callgrind); measurement only. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

typedef int (*execve_fn)(const char *, char *const[], char *const[]);

static int is_valgrind_tool(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    return strstr(path, "valgrind") != NULL && n > 6 && strcmp(base + n - 6, "-linux") == 0;
}

int execve(const char *path, char *const argv[], char *const envp[])
{
    execve_fn real = (execve_fn)dlsym(RTLD_NEXT, "execve");
    const char *guest = getenv("GUEST_LD_PRELOAD");
    if (guest == NULL || !is_valgrind_tool(path))
        return real(path, argv, envp);
    size_t n = 0;
    while (envp[n] != NULL)
        n++;
    char **env = malloc((n + 2) * sizeof *env);
    char *var = malloc(strlen(guest) + sizeof "LD_PRELOAD=");
    if (env == NULL || var == NULL)
        return real(path, argv, envp);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(envp[i], "LD_PRELOAD=", 11) != 0)
            env[k++] = envp[i];
    strcpy(var, "LD_PRELOAD=");
    strcat(var, guest);
    env[k++] = var;
    env[k] = NULL;
    return real(path, argv, env);
}
