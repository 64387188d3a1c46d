#include "core/memory.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace gemma {
namespace {

// The first number in a file (memory.max holds "max" when unlimited: then nothing).
bool ReadNumber(const std::string& path, size_t* out) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s.empty() || s[0] < '0' || s[0] > '9') return false;
  *out = std::stoull(s);
  return true;
}

}  // namespace

size_t AvailableMemoryBytes() {
  size_t available = 0;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") {
      available = kib * 1024;
      break;
    }
  }
  // cgroup v2: this process's group is named in /proc/self/cgroup ("0::/path").
  std::ifstream cg("/proc/self/cgroup");
  std::string line;
  while (std::getline(cg, line)) {
    if (line.rfind("0::", 0) != 0) continue;
    const std::string dir = "/sys/fs/cgroup" + line.substr(3);
    size_t max = 0, current = 0;
    if (ReadNumber(dir + "/memory.max", &max) && ReadNumber(dir + "/memory.current", &current)) {
      const size_t left = max > current ? max - current : 0;
      available = available ? std::min(available, left) : left;
    }
  }
  return available;
}

std::string FormatBytes(double bytes) {
  static const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024 && u < 5) bytes /= 1024, ++u;
  char buf[64];
  std::snprintf(buf, sizeof(buf), u ? "%.1f %s" : "%.0f %s", bytes, kUnits[u]);
  return buf;
}

}  // namespace gemma
