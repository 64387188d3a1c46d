#include "core/timer.h"

#include <cstdio>
#include <cstring>

namespace gemma {
namespace {

size_t ReadStatusKb(const char* key) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  size_t kb = 0;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, key, n) == 0) {
      std::sscanf(line + n, "%zu", &kb);
      break;
    }
  }
  std::fclose(f);
  return kb * 1024;
}

}  // namespace

size_t PeakRssBytes() { return ReadStatusKb("VmHWM:"); }
size_t CurrentRssBytes() { return ReadStatusKb("VmRSS:"); }

}  // namespace gemma
