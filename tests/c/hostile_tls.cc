// Hostile C++ thread_local objects (tests/hostile.rs): each short thread owns thread_local
// objects whose destructors allocate (a std::string and a vector grown in the destructor), over
// many thread lifetimes, 16 at a time. Prints `threads=N` and exits 0.
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

struct Noisy {
    std::vector<std::string> v;
    ~Noisy()
    {
        std::vector<std::string> tmp;
        for (int i = 0; i < 16; i++)
            tmp.emplace_back(std::string(40 + i, 'x'));
        v.swap(tmp);
    }
};

static thread_local Noisy noisy;
static thread_local std::string name;

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? std::atoi(argv[1]) : 60;
    long n = 0;
    for (int r = 0; r < rounds; r++) {
        std::vector<std::thread> ts;
        for (int i = 0; i < 16; i++, n++)
            ts.emplace_back([i] {
                if (i % 4 == 0)
                    return; // never touches its thread_locals
                name = std::string(64, 'a' + i % 26);
                noisy.v.emplace_back(name);
            });
        for (auto &t : ts)
            t.join();
    }
    std::printf("threads=%ld\n", n);
    return 0;
}
