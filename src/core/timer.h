// Monotonic wall-clock timing for telemetry and benchmarks.
#pragma once

#include <chrono>

namespace gemma {

class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  void Reset() { start_ = std::chrono::steady_clock::now(); }
  double Ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
        .count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// Peak and current resident set size of this process in bytes (Linux /proc), 0 if unknown.
size_t PeakRssBytes();
size_t CurrentRssBytes();

}  // namespace gemma
