/* Allocates a little, prints `pid=N`, then waits until stdin reaches EOF (the test plants files
 * or sends signals meanwhile) and exits 0. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(void)
{
    for (int i = 0; i < 100; i++)
        free(malloc(32 + i));
    printf("pid=%d\n", (int)getpid());
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    puts("ok");
    return 0;
}
