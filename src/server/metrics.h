// Prometheus text exposition of the server's counters and latency histograms.
#pragma once

#include <array>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "gemma/engine.h"

namespace gemma::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void Observe(double v);
  void Write(const std::string& name, const std::string& help, std::string* out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t n_ = 0;
};

class Metrics {
 public:
  Metrics();
  void CountRequest(const std::string& endpoint, int status);
  void CountRejected() { Add(&rejected_, 1); }
  void CountCancelled() { Add(&cancelled_, 1); }
  // One finished generation: tokens, TTFT, inter-token gaps.
  void ObserveGeneration(const Telemetry& t, size_t completion_tokens);
  // Gauges are read at scrape time by the caller.
  std::string Render(int slots, int busy, int queued) const;

 private:
  void Add(uint64_t* c, uint64_t v) {
    std::lock_guard lock(mu_);
    *c += v;
  }
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t rejected_ = 0, cancelled_ = 0;
  uint64_t prompt_tokens_ = 0, reused_tokens_ = 0, completion_tokens_ = 0;
  uint64_t batched_steps_ = 0;  // decode steps evaluated together with other slots' (batching)
  Histogram ttft_, itl_;
};

// Resident set size of this process in bytes (0 where /proc is missing).
size_t ResidentBytes();

}  // namespace gemma::server
