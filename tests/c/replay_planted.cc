// Planted behaviour for tests/replay.rs (issue 24), run once recorded (MALLOCSHIM_RECORD) and
// once not, then replayed:
//   phase 1: 8 threads each allocate 20,000 blocks (16 B - 4 KiB, seeded), then each frees the
//            blocks of the next thread but one in four (many threads freeing each other's
//            blocks: glibc's arenas fragment);
//   phase 2: three 80 MB transient heaps (like InnoDB FULLTEXT's), each built by a thread of
//            its own from blocks of 8 KiB doubling to 1 MiB, every page written, then freed,
//            250 ms apart.
// Prints "baseline_rss=B peak_rss=P end_rss=E kept_bytes=K" (bytes; RSS from /proc/self/statm
// and VmHWM, baseline at the start of main) and exits with the kept blocks still live.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <unistd.h>

static long rss_bytes() {
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
    if (f) fclose(f);
    return rss * sysconf(_SC_PAGESIZE);
}

static long peak_rss_bytes() {
    char line[256];
    long kb = 0;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb * 1024;
}

static const int THREADS = 8, PER = 20000;
static char **blocks[THREADS];
static size_t *sizes[THREADS];
static std::atomic<long> kept{0};

static void alloc_phase(int t) {
    unsigned s = 12345u + t;
    for (int i = 0; i < PER; i++) {
        s = s * 1103515245u + 12345u;
        size_t n = 16 + (s >> 8) % 4081;
        blocks[t][i] = static_cast<char *>(malloc(n));
        memset(blocks[t][i], 1, n);
        sizes[t][i] = n;
    }
}

static void free_phase(int t) {
    int v = (t + 1) % THREADS;
    long k = 0;
    for (int i = 0; i < PER; i++) {
        if (i % 4 == 0) {
            k += sizes[v][i];
            continue;
        }
        free(blocks[v][i]);
    }
    kept += k;
}

static void transient_heap() {
    std::vector<char *> heap;
    size_t total = 0, n = 8192;
    while (total < 80u << 20) {
        char *p = static_cast<char *>(malloc(n));
        for (size_t o = 0; o < n; o += 4096) p[o] = 1;
        heap.push_back(p);
        total += n;
        if (n < (1u << 20)) n *= 2;
    }
    for (char *p : heap) free(p);
}

int main() {
    long baseline = rss_bytes();
    for (int t = 0; t < THREADS; t++) {
        blocks[t] = static_cast<char **>(malloc(PER * sizeof(char *)));
        sizes[t] = static_cast<size_t *>(malloc(PER * sizeof(size_t)));
    }
    std::vector<std::thread> ts;
    for (int t = 0; t < THREADS; t++) ts.emplace_back(alloc_phase, t);
    for (auto &t : ts) t.join();
    ts.clear();
    for (int t = 0; t < THREADS; t++) ts.emplace_back(free_phase, t);
    for (auto &t : ts) t.join();
    for (int r = 0; r < 3; r++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
        std::thread(transient_heap).join();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    printf("baseline_rss=%ld peak_rss=%ld end_rss=%ld kept_bytes=%ld\n", baseline, peak_rss_bytes(), rss_bytes(),
           kept.load());
    return 0;
}
