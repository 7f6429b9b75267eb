/* early_kill_lib.c: a library whose constructor sends the process SIGUSR1 (kill(getpid())).
 * Preloaded after libmallocshim.so (LD_PRELOAD="libmallocshim.so early_kill_lib.so"), the
 * loader runs this constructor before the shim's, before anything has allocated: the signal
 * comes before the shim's first call (tests/dump_signal.rs). */
#include <signal.h>
#include <unistd.h>

__attribute__((constructor)) static void early_kill(void) { kill(getpid(), SIGUSR1); }
