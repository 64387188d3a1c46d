// The benchmark harness behind `gemma-engine bench`: workloads, cold and warm runs per backend,
// median/p95 statistics, a check of every row's tokens against the CPU reference backend, the
// machine's memory bandwidth measured in the same run, and reports (JSON, Markdown, CSV, HTML).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"

namespace gemma::bench {

enum class WorkloadKind {
  kGenerate,   // prefill `prompt` tokens, then greedy-decode `gen` tokens
  kMultiTurn,  // generate, then append `turn2` new tokens to the cached context (prefix reuse)
               // and generate again; TTFT and prefill are the second turn's
  kSelect,     // as kGenerate, but decoding picks among an allowed-id mask (constrained decoding's
               // backend path: OutputMode::kSelect)
  kSpeculative,  // as kGenerate, through an engine session: plain decoding, then speculative
                 // decoding with each of BenchOptions::drafts (rows per draft source)
};

struct Workload {
  WorkloadKind kind = WorkloadKind::kGenerate;
  int prompt = 0;
  int gen = 0;
  int turn2 = 0;
  std::string Name() const;
};

// Parses "pp128+tg32", "mt128+32+tg16" (multi-turn: first prompt, second-turn tokens),
// "sel64+tg16", "spec64+tg64".
Workload ParseWorkload(const std::string& spec);

struct BenchOptions {
  std::string model;
  std::vector<std::string> backends = {"cpu-fast"};  // see AvailableBackends()
  std::vector<Workload> workloads;
  bool cold = true;
  bool warm = true;
  int warmup = 1;
  int reps = 3;
  int threads = 0;  // cpu-fast threads (0 = hardware)
  int capacity = 4096;
  int verify_max_tokens = 1 << 30;  // skip the reference check for longer workloads
  uint64_t seed = 1;
  // Reference tokens per workload are read from / written to this JSON file when set, keyed by the
  // checkpoint's path, size and modification time and the prompt seed (the reference backend is
  // deterministic), so reruns skip the slow reference runs.
  std::string reference_cache;
  size_t bandwidth_bytes = size_t{1} << 30;
  // Speculative workloads (specN+tgM): tokens drafted per verification step (1..6) and the draft
  // sources, each a row beside plain decoding's: "right" (the plain run's own continuation, every
  // draft accepted), "wrong" (each drafted token off by one id, none accepted: what the adaptive
  // policy costs), "half" (the first ceil(max_draft / 2) tokens of each draft right),
  // "prompt-lookup" (the product's n-gram drafts; on random prompt ids they rarely find
  // anything).
  int max_draft = 4;
  std::vector<std::string> drafts = {"right", "wrong", "half", "prompt-lookup"};
};

struct Bandwidth {
  double read_gbps = 0;  // best of several passes, all threads streaming reads
  double copy_gbps = 0;  // memcpy, bytes read + written per second
  // Streaming reads per thread CPU time, summed over threads: what the threads reach while they
  // run; above read_gbps when other work on the machine preempts them.
  double read_gbps_cpu = 0;
  int threads = 0;
};

// Streams `bytes` (split across `threads`) several times; returns the best rates.
Bandwidth MeasureBandwidth(int threads, size_t bytes);

struct Row {
  std::string backend, workload, mode;  // mode: "cold" or "warm"
  int prompt = 0, gen = 0, prefill_tokens = 0;
  int reps = 0;
  double load_ms = 0;
  double ttft_ms = 0, ttft_p95_ms = 0;  // median over reps (cold: one run)
  double prefill_tok_s = 0;
  double itl_ms = 0, itl_p95_ms = 0;  // inter-token latency over all decode steps of all reps
  double decode_tok_s = 0;            // 1000 / median per-rep mean ITL
  double decode_ms_per_token = 0;     // median over reps of the mean inter-token latency
  double floor_ratio = 0;             // bandwidth floor per token / decode_ms_per_token
  // Process CPU time / (wall time x threads) over the measured decode steps: near 1 when this
  // process had its cores; well below 1 when other work on the machine took them.
  double cpu_share = 0;
  size_t resident_bytes = 0, peak_rss_bytes = 0;
  std::vector<double> itl_series_ms;    // per decode step, from the median rep
  std::vector<int32_t> tokens;          // generated ids (last rep)
  std::optional<bool> matched;          // vs cpu-reference; nullopt: not verified
  std::optional<double> logits_rel_l2;  // last prompt position's logits vs cpu-reference
  std::string note;
  // Speculative workloads: the draft source ("off" for plain decoding), the last rep's
  // verification steps and drafted / accepted tokens, and decode tok/s over the same backend's
  // plain decoding in the same run.
  std::string draft;
  int verify_steps = 0, drafted = 0, accepted = 0;
  double speedup_vs_plain = 0;
};

struct Report {
  std::string model, date, cpu, simd_target, command;
  std::string loadavg_start, loadavg_end;  // /proc/loadavg: other load on the machine
  int hardware_threads = 0, threads = 0;
  size_t bytes_per_token = 0;
  Bandwidth bandwidth;  // the best of all probes in the run (the strictest floor)
  std::vector<double> bandwidth_probes_gbps;  // read GB/s: at the start and before each warm row
  double floor_ms = 0;                        // bytes_per_token / read bandwidth
  double floor_cpu_ms = 0;                    // bytes_per_token / read_gbps_cpu
  BenchOptions options;
  std::vector<Row> rows;
};

using Log = std::function<void(const std::string&)>;

// "cpu-fast, cpu-reference[, vulkan]": the backends this build can benchmark.
std::string AvailableBackends();
std::unique_ptr<Backend> MakeBackend(const std::string& name, const Model& model,
                                     const BackendOptions& options, int threads);

// Deterministic prompt ids in [3, vocab) (no special tokens below 3).
std::vector<int32_t> PromptIds(int n, int vocab, uint64_t seed);

Report RunBench(const BenchOptions& options, const Log& log);

std::string ToJson(const Report& report);
std::string ToMarkdown(const Report& report);
std::string ToCsv(const Report& report);
std::string ToHtml(const Report& report);

// Median and nearest-rank 95th percentile (0 for empty input).
double Median(std::vector<double> v);
double P95(std::vector<double> v);

}  // namespace gemma::bench
