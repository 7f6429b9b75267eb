/* dump_util.h: helpers shared by the dump tests' C programs (tests/dump.rs).
 * Finds this process's dump files in the directory the shim writes to (MALLOCSHIM_DUMP_DIR,
 * else $TMPDIR, else /tmp) and waits for them. A dump is complete when the file of the last
 * configured format (json < prom < hdr < text, the shim's file order) has been renamed into place.
 * wait_dumps() polls with stat() on the predicted names (seq 0..63), so the waiting thread does
 * not allocate while the shim takes its snapshot: the dump sees a quiescent process.
 * Also: alloc_pairs(), which keeps gcc from eliding malloc/free pairs by storing each pointer
 * through a thread-local volatile. */
#ifndef DUMP_UTIL_H
#define DUMP_UTIL_H
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static __thread void *volatile dump_util_sink;

/* n malloc(size)/free pairs; aborts on NULL. */
static __attribute__((unused)) void alloc_pairs(long n, size_t size) {
  for (long i = 0; i < n; i++) {
    dump_util_sink = malloc(size);
    if (!dump_util_sink) abort();
    free(dump_util_sink);
  }
}

static __attribute__((unused)) const char *dump_dir(void) {
  const char *d = getenv("MALLOCSHIM_DUMP_DIR");
  if (!d || !*d) d = getenv("TMPDIR");
  if (!d || !*d) d = "/tmp";
  return d;
}

/* The extension written last for the configured formats. */
static __attribute__((unused)) const char *dump_last_ext(void) {
  const char *f = getenv("MALLOCSHIM_DUMP_FORMATS");
  if (!f || !*f) f = "json,prom";
  static const char *order[] = {"text", "hdr", "prom", "json"};
  for (int i = 0; i < 4; i++)
    if (strstr(f, order[i])) return order[i];
  return "json";
}

/* Number of final (renamed) dump files of this process with extension `ext`. */
static __attribute__((unused)) int count_dumps(const char *ext) {
  char prefix[64];
  snprintf(prefix, sizeof prefix, "mallocshim.%d.", (int)getpid());
  size_t pl = strlen(prefix), el = strlen(ext);
  DIR *d = opendir(dump_dir());
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l > pl + el + 1 && !strncmp(e->d_name, prefix, pl) && e->d_name[l - el - 1] == '.' &&
        !strcmp(e->d_name + l - el, ext))
      n++;
  }
  closedir(d);
  return n;
}

static __attribute__((unused)) void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* Complete dumps of this process among seq 0..63, found with stat() only (no allocation). */
static __attribute__((unused)) int stat_dumps(const char *ext) {
  char path[1024];
  struct stat st;
  int n = 0;
  for (int seq = 0; seq < 64; seq++) {
    snprintf(path, sizeof path, "%s/mallocshim.%d.%d.%s", dump_dir(), (int)getpid(), seq, ext);
    if (stat(path, &st) == 0) n++;
  }
  return n;
}

/* Waits up to timeout_ms for at least `want` complete dumps; returns how many there are. */
static __attribute__((unused)) int wait_dumps(int want, long timeout_ms) {
  const char *ext = dump_last_ext();
  int n = 0;
  for (long t = 0; t <= timeout_ms; t += 10) {
    n = stat_dumps(ext);
    if (n >= want) break;
    sleep_ms(10);
  }
  return n;
}
#endif
