// A main() for the fuzz targets without libFuzzer (any compiler): runs every input file given
// (directories: every file inside), then, with --mutate-seconds N, mutates those inputs at random
// (byte flips, inserts, erases, splices; seeded, so a failure reproduces) for N seconds. The
// normal build registers one ctest per target over its committed corpus (label "fuzz"): the
// corpus and every past finding stay regression tests, in the suite's own compiler and flags.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

std::string Read(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// The input being run, written out by the crash handler (a mutated input exists nowhere else).
const std::string* g_current = nullptr;
char g_crash_path[512] = "fuzz-crash-input";

extern "C" void OnCrash(int sig) {
  if (g_current) {
    const int fd = open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      (void)!write(fd, g_current->data(), g_current->size());
      close(fd);
      (void)!write(2, "crashing input written to ", 26);
      (void)!write(2, g_crash_path, strlen(g_crash_path));
      (void)!write(2, "\n", 1);
    }
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void Run(const std::string& s) {
  g_current = &s;
  // A copy in its own allocation, so reads past the end are caught where a sanitizer runs.
  std::vector<uint8_t> buf(s.begin(), s.end());
  LLVMFuzzerTestOneInput(buf.data(), buf.size());
  g_current = nullptr;
}

std::string Mutate(std::string s, const std::vector<std::string>& pool, std::mt19937_64& rng) {
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 5) {
      case 0:  // flip a bit
        if (!s.empty()) s[std::min(pos, s.size() - 1)] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:  // insert an interesting byte
        s.insert(s.begin() + pos, "\0\xff{}[]\"\\:,<|>0-9"[rng() % 17]);
        break;
      case 2:  // erase a run
        if (!s.empty()) s.erase(std::min(pos, s.size() - 1), 1 + rng() % 8);
        break;
      case 3: {  // splice a piece of another input
        const std::string& o = pool[rng() % pool.size()];
        if (!o.empty()) {
          const size_t b = rng() % o.size();
          s.insert(pos, o.substr(b, 1 + rng() % 32));
        }
        break;
      }
      case 4:  // duplicate a run
        if (!s.empty()) s.insert(pos, s.substr(std::min(pos, s.size() - 1), 1 + rng() % 16));
        break;
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  std::snprintf(g_crash_path, sizeof(g_crash_path), "%s.crash-input",
                std::filesystem::path(argv[0]).filename().c_str());
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) signal(sig, OnCrash);
  double mutate_seconds = 0;
  uint64_t seed = 1;
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mutate-seconds" && i + 1 < argc) {
      mutate_seconds = std::atof(argv[++i]);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (std::filesystem::is_directory(a)) {
      for (const auto& e : std::filesystem::directory_iterator(a))
        if (e.is_regular_file()) files.push_back(e.path());
    } else {
      files.push_back(a);
    }
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> pool;
  for (const auto& f : files) {
    pool.push_back(Read(f));
    Run(pool.back());
  }
  std::printf("replayed %zu inputs\n", pool.size());
  if (mutate_seconds > 0 && !pool.empty()) {
    std::mt19937_64 rng(seed);
    const auto end =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(mutate_seconds);
    long n = 0;
    while (std::chrono::steady_clock::now() < end) {
      const std::string s = Mutate(pool[rng() % pool.size()], pool, rng);
      Run(s);
      ++n;
    }
    std::printf("mutated %ld inputs in %.0f s (seed %llu)\n", n, mutate_seconds,
                static_cast<unsigned long long>(seed));
  }
  return 0;
}
