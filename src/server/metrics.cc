#include "server/metrics.h"

#include <unistd.h>

#include <cstdio>

namespace gemma::server {

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++n_;
}

void Histogram::Write(const std::string& name, const std::string& help, std::string* out) const {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cum = 0;
  char buf[64];
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    std::snprintf(buf, sizeof buf, "%g", bounds_[i]);
    *out += name + "_bucket{le=\"" + buf + "\"} " + std::to_string(cum) + "\n";
  }
  *out += name + "_bucket{le=\"+Inf\"} " + std::to_string(n_) + "\n";
  std::snprintf(buf, sizeof buf, "%.6f", sum_);
  *out += name + "_sum " + buf + "\n" + name + "_count " + std::to_string(n_) + "\n";
}

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1}) {}

void Metrics::CountRequest(const std::string& endpoint, int status) {
  std::lock_guard lock(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::ObserveGeneration(const Telemetry& t, size_t completion_tokens) {
  std::lock_guard lock(mu_);
  prompt_tokens_ += t.prompt_tokens;
  reused_tokens_ += t.reused_tokens;
  completion_tokens_ += completion_tokens;
  batched_steps_ += static_cast<uint64_t>(t.batched_steps);
  if (completion_tokens > 0) ttft_.Observe(t.ttft_ms / 1000);
  for (size_t i = 1; i < t.token_ms.size(); ++i) itl_.Observe(t.token_ms[i] / 1000);
}

std::string Metrics::Render(int slots, int busy, int queued) const {
  std::lock_guard lock(mu_);
  std::string o;
  o += "# HELP gemma_requests_total HTTP requests by endpoint and status.\n"
       "# TYPE gemma_requests_total counter\n";
  for (const auto& [k, v] : requests_) {
    o += "gemma_requests_total{endpoint=\"" + k.first + "\",status=\"" + std::to_string(k.second) +
         "\"} " + std::to_string(v) + "\n";
  }
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name +
         " " + std::to_string(v) + "\n";
  };
  auto gauge = [&](const char* name, const char* help, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.0f", v);
    o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n" + name + " " +
         buf + "\n";
  };
  counter("gemma_rejected_total", "Requests refused with 429 (queue full).", rejected_);
  counter("gemma_cancelled_total", "Generations cancelled (client gone or shutdown).", cancelled_);
  counter("gemma_prompt_tokens_total", "Prompt tokens of finished generations.", prompt_tokens_);
  counter("gemma_prompt_tokens_reused_total", "Prompt tokens served from a slot's cache.",
          reused_tokens_);
  counter("gemma_completion_tokens_total", "Generated tokens.", completion_tokens_);
  counter("gemma_batched_decode_steps_total",
          "Decode steps evaluated in one batch with other slots' steps (batched decode).",
          batched_steps_);
  ttft_.Write("gemma_ttft_seconds", "Time to first token.", &o);
  itl_.Write("gemma_inter_token_seconds", "Time between generated tokens.", &o);
  gauge("gemma_slots", "Slots (sessions).", slots);
  gauge("gemma_slots_busy", "Slots generating now.", busy);
  gauge("gemma_queue_depth", "Requests waiting for a slot.", queued);
  gauge("gemma_resident_memory_bytes", "Resident set size of the server.",
        static_cast<double>(ResidentBytes()));
  return o;
}

size_t ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long size = 0, rss = 0;
  const int got = std::fscanf(f, "%lu %lu", &size, &rss);
  std::fclose(f);
  return got == 2 ? rss * static_cast<size_t>(sysconf(_SC_PAGESIZE)) : 0;
}

}  // namespace gemma::server
