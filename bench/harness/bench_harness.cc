#include "bench/harness/bench_harness.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "backend/cpu/fast/cpu_fast_backend.h"
#include "backend/cpu/fast/fast_ops.h"
#include "core/timer.h"
#include "gemma/engine.h"
#if GEMMA_BENCH_VULKAN
#include "backend/vulkan/vulkan_backend.h"
#endif
#include "gemma/error.h"

namespace gemma::bench {
namespace {

std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string CpuModel() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t c = line.find(':');
      return c == std::string::npos ? line : line.substr(c + 2);
    }
  }
  return "unknown";
}

std::string NowUtc() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

double ProcessCpuMs() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

std::string LoadAvg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

struct Measurement {
  std::vector<float> prompt_logits;  // last prompt position's logits (check runs only)
  double decode_cpu_ms = 0, decode_wall_ms = 0;
  double ttft_ms = 0;
  int prefill_tokens = 0;
  std::vector<double> itl_ms;
  std::vector<int32_t> tokens;
  double MeanItl() const {
    if (itl_ms.empty()) return 0;
    double s = 0;
    for (double v : itl_ms) s += v;
    return s / itl_ms.size();
  }
};

std::vector<uint64_t> AllowedMask(int vocab) {
  // A fixed constraint-like mask: every third id plus a block of low ids.
  std::vector<uint64_t> m((vocab + 63) / 64, 0);
  for (int v = 0; v < vocab; ++v) {
    if (v % 3 == 0 || v < 1000) m[v >> 6] |= uint64_t{1} << (v & 63);
  }
  return m;
}

// Greedy generation of `gen` tokens after feeding `input`; appends to m. TTFT and prefill are the
// latest turn's.
void Generate(Backend& b, std::span<const int32_t> input, int gen, OutputMode mode,
              const std::vector<uint64_t>* allowed, Measurement* m, bool want_logits = false) {
  ForwardResult r;
  Timer t;
  want_logits = want_logits && mode == OutputMode::kArgmax;
  b.Forward({.tokens = input, .mode = want_logits ? OutputMode::kLogits : mode, .allowed = allowed},
            &r);
  m->ttft_ms = t.Ms();
  m->prefill_tokens = static_cast<int>(input.size());
  if (want_logits) {
    // The argmax contract: lowest id among the largest logits.
    m->prompt_logits = r.logits;
    r.ids = {static_cast<int32_t>(std::max_element(r.logits.begin(), r.logits.end()) -
                                  r.logits.begin())};
  }
  int32_t next = r.ids.back();
  m->tokens.push_back(next);
  const double cpu0 = ProcessCpuMs();
  Timer wall;
  for (int i = 1; i < gen; ++i) {
    t.Reset();
    b.Forward({.tokens = std::span<const int32_t>(&next, 1), .mode = mode, .allowed = allowed}, &r);
    m->itl_ms.push_back(t.Ms());
    next = r.ids.back();
    m->tokens.push_back(next);
  }
  m->decode_cpu_ms += ProcessCpuMs() - cpu0;
  m->decode_wall_ms += wall.Ms();
}

// check: also return the last prompt position's logits (untimed check runs).
Measurement RunWorkload(Backend& b, const Workload& w, int vocab, uint64_t seed,
                        const std::vector<uint64_t>& allowed, bool check = false) {
  Measurement m;
  const std::vector<int32_t> prompt = PromptIds(w.prompt, vocab, seed);
  const bool select = w.kind == WorkloadKind::kSelect;
  const OutputMode mode = select ? OutputMode::kSelect : OutputMode::kArgmax;
  Generate(b, prompt, w.gen, mode, select ? &allowed : nullptr, &m, check);
  if (w.kind == WorkloadKind::kMultiTurn) {
    // Second turn: the last generated token (not yet evaluated) plus the new user tokens; the
    // cached first turn is reused as the prefix.
    std::vector<int32_t> turn = {m.tokens.back()};
    const std::vector<int32_t> more = PromptIds(w.turn2, vocab, seed + 1);
    turn.insert(turn.end(), more.begin(), more.end());
    Generate(b, turn, w.gen, mode, nullptr, &m);
  }
  return m;
}

int TotalTokens(const Workload& w) {
  return w.prompt + w.gen + (w.kind == WorkloadKind::kMultiTurn ? w.turn2 + 1 + w.gen : 0);
}

Row MakeRow(const std::string& backend, const Workload& w, const std::string& mode,
            const std::vector<Measurement>& runs, double load_ms, size_t resident_bytes,
            double floor_ms, int threads) {
  Row row;
  row.backend = backend;
  row.workload = w.Name();
  row.mode = mode;
  row.prompt = w.prompt;
  row.gen = w.gen;
  row.reps = static_cast<int>(runs.size());
  row.load_ms = load_ms;
  std::vector<double> ttft, means, all_itl;
  for (const Measurement& m : runs) {
    ttft.push_back(m.ttft_ms);
    means.push_back(m.MeanItl());
    all_itl.insert(all_itl.end(), m.itl_ms.begin(), m.itl_ms.end());
  }
  row.prefill_tokens = runs.empty() ? 0 : runs[0].prefill_tokens;
  row.ttft_ms = Median(ttft);
  row.ttft_p95_ms = P95(ttft);
  row.prefill_tok_s = row.ttft_ms > 0 ? row.prefill_tokens * 1000.0 / row.ttft_ms : 0;
  row.itl_ms = Median(all_itl);
  row.itl_p95_ms = P95(all_itl);
  const double mean = Median(means);
  row.decode_tok_s = mean > 0 ? 1000.0 / mean : 0;
  row.decode_ms_per_token = mean;
  row.floor_ratio = mean > 0 ? floor_ms / mean : 0;
  // The rep whose mean ITL is the median one supplies the per-token series.
  size_t pick = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (std::fabs(means[i] - mean) < std::fabs(means[pick] - mean)) pick = i;
  }
  if (!runs.empty()) {
    row.itl_series_ms = runs[pick].itl_ms;
    row.tokens = runs.back().tokens;
  }
  double cpu = 0, wall = 0;
  for (const Measurement& m : runs) {
    cpu += m.decode_cpu_ms;
    wall += m.decode_wall_ms;
  }
  row.cpu_share = wall > 0 ? cpu / (wall * threads) : 0;
  row.resident_bytes = resident_bytes;
  row.peak_rss_bytes = PeakRssBytes();
  return row;
}

std::string Escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') {
      o += "&lt;";
    } else if (c == '>') {
      o += "&gt;";
    } else if (c == '&') {
      o += "&amp;";
    } else {
      o += c;
    }
  }
  return o;
}

std::string MatchText(const Row& r) {
  if (!r.matched) return "unverified";
  std::string s = *r.matched ? "yes" : "NO (flagged)";
  if (r.logits_rel_l2) s += " (logits rel L2 " + Fmt("%.1e", *r.logits_rel_l2) + ")";
  return s;
}

std::string Label(const Row& r) {
  return r.draft.empty() ? r.workload : r.workload + " " + r.draft;
}

// The engine's name for a bench backend.
std::string EngineBackend(const std::string& name) {
  if (name == "cpu-fast") return "cpu";
  if (name == "cpu-reference") return "cpu-ref";
  return name;
}

// One request of a speculative workload on a fresh session: the prompt ids, then `gen` greedy
// tokens with the given speculative settings; the decode timings from the session's telemetry.
Measurement RunSession(Engine& engine, const std::vector<int32_t>& prompt, int gen,
                       const SpeculativeOptions& spec, Telemetry* tel) {
  GenerateOptions g;
  g.max_new_tokens = gen;
  g.ignore_eos = true;
  g.speculative = spec;
  double cpu0 = 0;
  const Result r = engine.NewSession()->Generate(Input::Ids(prompt), g, [&](const TokenEvent& e) {
    if (e.index == 0) cpu0 = ProcessCpuMs();
  });
  Measurement m;
  m.decode_cpu_ms = ProcessCpuMs() - cpu0;
  m.ttft_ms = r.telemetry.ttft_ms;
  m.prefill_tokens = static_cast<int>(prompt.size());
  // (the first token's entry is its choice after the prompt; each later one a step)
  for (size_t i = 1; i < r.telemetry.token_ms.size(); ++i) {
    m.itl_ms.push_back(r.telemetry.token_ms[i]);
    m.decode_wall_ms += r.telemetry.token_ms[i];
  }
  m.tokens = r.tokens;
  *tel = r.telemetry;
  return m;
}

// Speculative settings for a draft source of BenchOptions::drafts. The oracles draft from `want`,
// the plain run's tokens after `prompt` (the model's own greedy continuation): a drafter called
// with the context so far (the prompt, then want[0 .. j-1]) drafts want[j ..], of each draft the
// first `right` tokens as they are and the others one id off.
SpeculativeOptions Drafts(const std::string& kind, int max_draft,
                          const std::vector<int32_t>& prompt, const std::vector<int32_t>& want,
                          int vocab) {
  SpeculativeOptions s;
  s.max_draft = max_draft;
  if (kind == "prompt-lookup") {
    s.mode = SpeculativeOptions::Mode::kPromptLookup;
    return s;
  }
  s.mode = SpeculativeOptions::Mode::kCustom;
  const int right = kind == "right" ? max_draft : kind == "half" ? (max_draft + 1) / 2 : 0;
  s.drafter = [&prompt, &want, vocab, right](std::span<const int32_t> ctx, int k) {
    std::vector<int32_t> d;
    const size_t j = ctx.size() - prompt.size();
    for (int i = 0; i < k && j + i < want.size(); ++i)
      d.push_back(i < right ? want[j + i] : (want[j + i] + 1) % vocab);
    return d;
  };
  return s;
}

}  // namespace

std::string Workload::Name() const {
  switch (kind) {
    case WorkloadKind::kGenerate:
      return "pp" + std::to_string(prompt) + "+tg" + std::to_string(gen);
    case WorkloadKind::kMultiTurn:
      return "mt" + std::to_string(prompt) + "+" + std::to_string(turn2) + "+tg" +
             std::to_string(gen);
    case WorkloadKind::kSelect:
      return "sel" + std::to_string(prompt) + "+tg" + std::to_string(gen);
    case WorkloadKind::kSpeculative:
      return "spec" + std::to_string(prompt) + "+tg" + std::to_string(gen);
  }
  return "?";
}

Workload ParseWorkload(const std::string& spec) {
  auto bad = [&] {
    return Error(ErrorCode::kInvalidArgument,
                 "workload '" + spec +
                     "': expected ppN+tgM, mtN+K+tgM, selN+tgM or specN+tgM (N, K, M > 0)");
  };
  Workload w;
  std::string rest;
  if (spec.rfind("pp", 0) == 0) {
    w.kind = WorkloadKind::kGenerate;
    rest = spec.substr(2);
  } else if (spec.rfind("mt", 0) == 0) {
    w.kind = WorkloadKind::kMultiTurn;
    rest = spec.substr(2);
  } else if (spec.rfind("sel", 0) == 0) {
    w.kind = WorkloadKind::kSelect;
    rest = spec.substr(3);
  } else if (spec.rfind("spec", 0) == 0) {
    w.kind = WorkloadKind::kSpeculative;
    rest = spec.substr(4);
  } else {
    throw bad();
  }
  std::vector<std::string> parts;
  std::stringstream ss(rest);
  std::string p;
  while (std::getline(ss, p, '+')) parts.push_back(p);
  const size_t want = w.kind == WorkloadKind::kMultiTurn ? 3 : 2;
  if (parts.size() != want || parts.back().rfind("tg", 0) != 0) throw bad();
  parts.back() = parts.back().substr(2);
  std::vector<int> v;
  for (const std::string& s : parts) {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 7)
      throw bad();
    v.push_back(std::stoi(s));
    if (v.back() <= 0) throw bad();
  }
  w.prompt = v[0];
  w.gen = v.back();
  if (w.kind == WorkloadKind::kMultiTurn) w.turn2 = v[1];
  return w;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double P95(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(0.95 * v.size()));
  return v[std::max<size_t>(rank, 1) - 1];
}

std::vector<int32_t> PromptIds(int n, int vocab, uint64_t seed) {
  std::vector<int32_t> ids(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 12345;
  for (int i = 0; i < n; ++i) {
    s += 0x9E3779B97F4A7C15ull;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    ids[i] = 3 + static_cast<int32_t>(z % static_cast<uint64_t>(std::max(1, vocab - 3)));
  }
  return ids;
}

Bandwidth MeasureBandwidth(int threads, size_t bytes) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bytes = std::max<size_t>(bytes / 4096 / threads * 4096 * threads, 4096 * threads);
  std::vector<uint8_t> src(bytes), dst(bytes);
  for (size_t i = 0; i < bytes; i += 64) src[i] = static_cast<uint8_t>(i >> 6);
  std::memset(dst.data(), 1, bytes);  // fault every page in before timing
  const size_t part = bytes / threads;
  Bandwidth bw;
  bw.threads = threads;
  std::vector<uint64_t> sink(threads);
  std::vector<double> cpu_s(threads);
  for (int pass = 0; pass < 5; ++pass) {
    auto run = [&](bool copy) {
      std::vector<std::thread> ts;
      const auto start = std::chrono::steady_clock::now();
      for (int t = 0; t < threads; ++t) {
        ts.emplace_back([&, t] {
          if (copy) {
            std::memcpy(dst.data() + t * part, src.data() + t * part, part);
          } else {
            timespec a, b;
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
            sink[t] ^= fast::XorReduce(src.data() + t * part, part);
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
            cpu_s[t] = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
          }
        });
      }
      for (auto& th : ts) th.join();
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    bw.read_gbps = std::max(bw.read_gbps, bytes / run(false) / 1e9);
    double rate = 0;
    for (int t = 0; t < threads; ++t) rate += cpu_s[t] > 0 ? part / cpu_s[t] / 1e9 : 0;
    bw.read_gbps_cpu = std::max(bw.read_gbps_cpu, rate);
    bw.copy_gbps = std::max(bw.copy_gbps, 2.0 * bytes / run(true) / 1e9);
  }
  volatile uint64_t keep = 0;
  for (uint64_t s : sink) keep = keep ^ s;
  (void)keep;
  return bw;
}

std::string AvailableBackends() {
#if GEMMA_BENCH_VULKAN
  return "cpu-fast, cpu-reference, vulkan";
#else
  return "cpu-fast, cpu-reference";
#endif
}

std::unique_ptr<Backend> MakeBackend(const std::string& name, const Model& model,
                                     const BackendOptions& options, int threads) {
  if (name == "cpu-fast") return CreateCpuFastBackend(model, options, threads);
  if (name == "cpu-reference") return CreateCpuReferenceBackend(model, options);
#if GEMMA_BENCH_VULKAN
  if (name == "vulkan") return CreateVulkanBackend(model, options);
#endif
  throw Error(ErrorCode::kInvalidArgument,
              "unknown backend '" + name + "' (available: " + AvailableBackends() + ")");
}

Report RunBench(const BenchOptions& o, const Log& log) {
  for (const std::string& b : o.backends) {
    const std::string all = ", " + AvailableBackends() + ",";
    if (b.empty() || all.find(", " + b + ",") == std::string::npos) {
      throw Error(ErrorCode::kInvalidArgument,
                  "unknown backend '" + b + "' (available: " + AvailableBackends() + ")");
    }
  }
  if (o.workloads.empty()) throw Error(ErrorCode::kInvalidArgument, "bench: no workloads");
  for (const std::string& d : o.drafts) {
    if (d != "right" && d != "wrong" && d != "half" && d != "prompt-lookup")
      throw Error(ErrorCode::kInvalidArgument,
                  "unknown draft source '" + d + "' (right, wrong, half, prompt-lookup)");
  }
  if (o.max_draft < 1 || o.max_draft > 6)
    throw Error(ErrorCode::kInvalidArgument, "bench: max_draft must be in 1..6");
  Report rep;
  rep.options = o;
  rep.model = o.model;
  rep.date = NowUtc();
  rep.cpu = CpuModel();
  rep.simd_target = fast::TargetName();
  rep.hardware_threads = static_cast<int>(std::thread::hardware_concurrency());
  rep.threads = o.threads > 0 ? o.threads : rep.hardware_threads;
  rep.loadavg_start = LoadAvg();

  log("measuring memory bandwidth (" + std::to_string(o.bandwidth_bytes >> 20) + " MiB, " +
      std::to_string(rep.threads) + " threads)");
  rep.bandwidth = MeasureBandwidth(rep.threads, o.bandwidth_bytes);
  rep.bandwidth_probes_gbps.push_back(rep.bandwidth.read_gbps);
  // Other load on the machine lowers a wall-clock probe more than it lowers decoding, so the probe
  // is repeated before every warm row and the floor uses the best one.
  auto probe = [&] {
    const Bandwidth b =
        MeasureBandwidth(rep.threads, std::max<size_t>(o.bandwidth_bytes / 4, 64 << 20));
    rep.bandwidth_probes_gbps.push_back(b.read_gbps);
    rep.bandwidth.read_gbps = std::max(rep.bandwidth.read_gbps, b.read_gbps);
    rep.bandwidth.copy_gbps = std::max(rep.bandwidth.copy_gbps, b.copy_gbps);
    rep.bandwidth.read_gbps_cpu = std::max(rep.bandwidth.read_gbps_cpu, b.read_gbps_cpu);
  };
  auto model = Model::Load(o.model);
  rep.bytes_per_token = model->BytesPerToken();
  rep.floor_ms = rep.bytes_per_token / (rep.bandwidth.read_gbps * 1e9) * 1e3;
  rep.floor_cpu_ms = rep.bytes_per_token / (rep.bandwidth.read_gbps_cpu * 1e9) * 1e3;
  log("read " + Fmt("%.2f", rep.bandwidth.read_gbps) + " GB/s, copy " +
      Fmt("%.2f", rep.bandwidth.copy_gbps) + " GB/s; " +
      Fmt("%.1f", rep.bytes_per_token / 1048576.0) + " MiB per token: floor " +
      Fmt("%.2f", rep.floor_ms) + " ms/token");
  const int vocab = model->text().vocab_size;
  const std::vector<uint64_t> allowed = AllowedMask(vocab);
  const BackendOptions bo{.capacity = o.capacity};

  // Reference tokens per workload (the oracle every row is checked against).
  std::map<std::string, std::vector<int32_t>> expected;
  std::map<std::string, std::vector<float>> expected_logits;  // last prompt position
  nlohmann::json cache = nlohmann::json::object();
  std::string cache_key;
  if (!o.reference_cache.empty()) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path weights =
        fs::is_directory(o.model, ec) ? fs::path(o.model) / "model.safetensors" : fs::path(o.model);
    const auto size = fs::file_size(weights, ec);
    const auto mtime = fs::last_write_time(weights, ec).time_since_epoch().count();
    cache_key = fs::absolute(o.model, ec).string() + "|" + std::to_string(size) + "|" +
                std::to_string(mtime) + "|seed " + std::to_string(o.seed);
    std::ifstream f(o.reference_cache);
    if (f) cache = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
    if (!cache.is_object()) cache = nlohmann::json::object();
  }
  for (const Workload& w : o.workloads) {
    if (TotalTokens(w) > o.verify_max_tokens) {
      log("reference check skipped for " + w.Name() + " (over --verify-max-tokens)");
      continue;
    }
    if (!cache_key.empty() && cache.contains(cache_key) && cache[cache_key].contains(w.Name())) {
      expected[w.Name()] = cache[cache_key][w.Name()].get<std::vector<int32_t>>();
      if (cache[cache_key].contains(w.Name() + " logits")) {
        expected_logits[w.Name()] =
            cache[cache_key][w.Name() + " logits"].get<std::vector<float>>();
      }
      log("reference tokens for " + w.Name() + " from " + o.reference_cache);
      continue;
    }
    log("reference run: " + w.Name());
    auto ref = CreateCpuReferenceBackend(*model, bo);
    Timer t;
    Measurement m = RunWorkload(*ref, w, vocab, o.seed, allowed, /*check=*/true);
    expected[w.Name()] = m.tokens;
    expected_logits[w.Name()] = m.prompt_logits;
    log("  done in " + Fmt("%.1f", t.Ms() / 1000) + " s");
    if (!cache_key.empty()) {
      cache[cache_key][w.Name()] = expected[w.Name()];
      cache[cache_key][w.Name() + " logits"] = m.prompt_logits;
      std::ofstream f(o.reference_cache);
      f << cache.dump(1) << "\n";
    }
  }
  // A row matches when its tokens equal the reference's and, where both exist, the logits of the
  // last prompt position (from an untimed check run of the same backend) are within 1e-4 relative
  // L2 of the reference's: tokens alone say little on random-weight checkpoints.
  auto verify = [&](Row& row, const Workload& w, const std::vector<float>& logits) {
    auto it = expected.find(w.Name());
    if (it == expected.end()) return;
    row.matched = row.tokens == it->second;
    if (!*row.matched) row.note = "tokens differ from cpu-reference";
    auto lt = expected_logits.find(w.Name());
    if (lt != expected_logits.end() && !lt->second.empty() && logits.size() == lt->second.size()) {
      double num = 0, den = 0;
      for (size_t i = 0; i < logits.size(); ++i) {
        const double d = static_cast<double>(logits[i]) - lt->second[i];
        num += d * d;
        den += static_cast<double>(lt->second[i]) * lt->second[i];
      }
      row.logits_rel_l2 = std::sqrt(num / std::max(den, 1e-30));
      if (*row.logits_rel_l2 > 1e-4) {
        row.matched = false;
        row.note += (row.note.empty() ? "" : "; ") + std::string("prompt logits rel L2 ") +
                    Fmt("%.2e", *row.logits_rel_l2) + " vs cpu-reference";
      }
    }
  };

  // A speculative workload: an engine on the backend, plain decoding's rows then one per draft
  // source, warm only. Plain decoding's tokens are checked against the reference; every draft
  // source's against plain decoding's.
  auto speculative = [&](const std::string& name, const Workload& w) {
    log(name + " " + w.Name() + " speculative (" + std::to_string(o.warmup) + " warm-up, " +
        std::to_string(o.reps) + " reps per draft source)");
    probe();
    EngineOptions eo;
    eo.model_path = o.model;
    eo.backend = EngineBackend(name);
    eo.context_capacity = o.capacity;
    eo.threads = o.threads;
    auto engine = Engine::Load(eo);
    const std::vector<int32_t> prompt = PromptIds(w.prompt, vocab, o.seed);
    Telemetry tel;
    // The continuation the oracles draft from: plain decoding's, computed beforehand (untimed).
    const std::vector<int32_t> want = RunSession(*engine, prompt, w.gen, {}, &tel).tokens;
    std::vector<std::string> kinds = {"off"};
    kinds.insert(kinds.end(), o.drafts.begin(), o.drafts.end());
    std::vector<SpeculativeOptions> specs;
    for (const std::string& kind : kinds) {
      specs.push_back(kind == "off" ? SpeculativeOptions{}
                                    : Drafts(kind, o.max_draft, prompt, want, vocab));
    }
    // Rep by rep through the draft sources, so that the machine's drift (other load, clocks)
    // falls on every row alike and the ratios to plain decoding compare runs close in time.
    const size_t n = kinds.size();
    for (int i = 0; i < o.warmup; ++i)
      for (size_t k = 0; k < n; ++k) RunSession(*engine, prompt, w.gen, specs[k], &tel);
    std::vector<std::vector<Measurement>> runs(n);
    std::vector<Telemetry> last(n);
    for (int i = 0; i < o.reps; ++i)
      for (size_t k = 0; k < n; ++k)
        runs[k].push_back(RunSession(*engine, prompt, w.gen, specs[k], &last[k]));
    double plain_tok_s = 0;
    for (size_t k = 0; k < n; ++k) {
      const std::string& kind = kinds[k];
      Row row = MakeRow(name, w, "warm", runs[k], engine->load_ms(), engine->shared_bytes(),
                        rep.floor_ms, name == "cpu-fast" ? rep.threads : 1);
      row.draft = kind;
      row.verify_steps = last[k].verify_steps;
      row.drafted = last[k].drafted;
      row.accepted = last[k].accepted;
      if (kind == "off") {
        plain_tok_s = row.decode_tok_s;
        verify(row, w, {});
      } else {
        row.matched = row.tokens == want;
        if (!*row.matched) row.note = "tokens differ from plain decoding";
      }
      row.speedup_vs_plain = plain_tok_s > 0 ? row.decode_tok_s / plain_tok_s : 0;
      log("  " + kind + ": decode " + Fmt("%.2f", row.decode_tok_s) + " tok/s (" +
          Fmt("%.2f", row.speedup_vs_plain) + "x plain), " + std::to_string(row.verify_steps) +
          " verification steps, " + std::to_string(row.accepted) + " of " +
          std::to_string(row.drafted) + " drafted accepted, match " + MatchText(row));
      rep.rows.push_back(std::move(row));
    }
  };

  for (const std::string& name : o.backends) {
    try {
      MakeBackend(name, *model, bo, o.threads);
    } catch (const Error& e) {
      // A backend that cannot run here (no device, model too large for it) is reported, not fatal.
      log(name + " unavailable: " + e.what());
      Row row;
      row.backend = name;
      row.mode = "n/a";
      row.note = std::string("unavailable: ") + e.what();
      rep.rows.push_back(std::move(row));
      continue;
    }
    for (const Workload& w : o.workloads) {
      if (w.kind == WorkloadKind::kSpeculative) {
        if (o.warm) speculative(name, w);
        continue;
      }
      if (o.cold) {
        // Cold: a fresh Model::Load (mmap, validation) and backend, first request; the OS page
        // cache is left as found.
        log(name + " " + w.Name() + " cold");
        auto m = Model::Load(o.model);
        auto b = MakeBackend(name, *m, bo, o.threads);
        std::vector<Measurement> runs = {RunWorkload(*b, w, vocab, o.seed, allowed)};
        Row row = MakeRow(name, w, "cold", runs, m->load_ms(), b->resident_bytes(), rep.floor_ms,
                          name == "cpu-fast" ? rep.threads : 1);
        b->Reset();
        verify(row, w, RunWorkload(*b, w, vocab, o.seed, allowed, /*check=*/true).prompt_logits);
        rep.rows.push_back(std::move(row));
      }
      if (o.warm) {
        log(name + " " + w.Name() + " warm (" + std::to_string(o.warmup) + " warm-up, " +
            std::to_string(o.reps) + " reps)");
        probe();
        auto b = MakeBackend(name, *model, bo, o.threads);
        // Untimed check run (logits of the last prompt position), then the warm-up runs.
        const std::vector<float> check =
            RunWorkload(*b, w, vocab, o.seed, allowed, /*check=*/true).prompt_logits;
        for (int i = 0; i < o.warmup; ++i) {
          b->Reset();
          RunWorkload(*b, w, vocab, o.seed, allowed);
        }
        std::vector<Measurement> runs;
        for (int i = 0; i < o.reps; ++i) {
          b->Reset();
          runs.push_back(RunWorkload(*b, w, vocab, o.seed, allowed));
        }
        Row row = MakeRow(name, w, "warm", runs, model->load_ms(), b->resident_bytes(),
                          rep.floor_ms, name == "cpu-fast" ? rep.threads : 1);
        verify(row, w, check);
        log("  ttft " + Fmt("%.1f", row.ttft_ms) + " ms, prefill " +
            Fmt("%.1f", row.prefill_tok_s) + " tok/s, decode " + Fmt("%.2f", row.decode_tok_s) +
            " tok/s (ITL " + Fmt("%.1f", row.itl_ms) + " ms, floor ratio " +
            Fmt("%.2f", row.floor_ratio) + ", cpu share " + Fmt("%.2f", row.cpu_share) +
            "), match " + MatchText(row));
        rep.rows.push_back(std::move(row));
      }
    }
  }
  rep.loadavg_end = LoadAvg();
  rep.floor_ms = rep.bytes_per_token / (rep.bandwidth.read_gbps * 1e9) * 1e3;
  rep.floor_cpu_ms = rep.bytes_per_token / (rep.bandwidth.read_gbps_cpu * 1e9) * 1e3;
  for (Row& row : rep.rows) {
    row.floor_ratio = row.decode_ms_per_token > 0 ? rep.floor_ms / row.decode_ms_per_token : 0;
  }
  log("bandwidth probes (GB/s):" +
      [&] {
        std::string s;
        for (double g : rep.bandwidth_probes_gbps) s += " " + Fmt("%.1f", g);
        return s;
      }() +
      "; floor " + Fmt("%.2f", rep.floor_ms) + " ms/token from the best");
  return rep;
}

std::string ToJson(const Report& r) {
  nlohmann::json j;
  j["model"] = r.model;
  j["date"] = r.date;
  j["command"] = r.command;
  j["machine"] = {{"cpu", r.cpu},
                  {"simd_target", r.simd_target},
                  {"hardware_threads", r.hardware_threads},
                  {"threads", r.threads},
                  {"read_bandwidth_gbps", r.bandwidth.read_gbps},
                  {"copy_bandwidth_gbps", r.bandwidth.copy_gbps},
                  {"read_bandwidth_cpu_time_gbps", r.bandwidth.read_gbps_cpu},
                  {"loadavg_start", r.loadavg_start},
                  {"loadavg_end", r.loadavg_end}};
  j["bytes_per_token"] = r.bytes_per_token;
  j["floor_ms_per_token"] = r.floor_ms;
  j["bandwidth_probes_gbps"] = r.bandwidth_probes_gbps;
  j["floor_cpu_time_ms_per_token"] = r.floor_cpu_ms;
  j["options"] = {{"backends", r.options.backends}, {"warmup", r.options.warmup},
                  {"reps", r.options.reps},         {"cold", r.options.cold},
                  {"warm", r.options.warm},         {"capacity", r.options.capacity},
                  {"seed", r.options.seed},         {"max_draft", r.options.max_draft},
                  {"drafts", r.options.drafts}};
  j["rows"] = nlohmann::json::array();
  for (const Row& w : r.rows) {
    nlohmann::json row = {{"backend", w.backend},
                          {"workload", w.workload},
                          {"mode", w.mode},
                          {"prompt_tokens", w.prompt},
                          {"generated_tokens", w.gen},
                          {"prefill_tokens", w.prefill_tokens},
                          {"reps", w.reps},
                          {"load_ms", w.load_ms},
                          {"ttft_ms", w.ttft_ms},
                          {"ttft_p95_ms", w.ttft_p95_ms},
                          {"prefill_tok_s", w.prefill_tok_s},
                          {"itl_median_ms", w.itl_ms},
                          {"itl_p95_ms", w.itl_p95_ms},
                          {"decode_tok_s", w.decode_tok_s},
                          {"decode_ms_per_token", w.decode_ms_per_token},
                          {"floor_ratio", w.floor_ratio},
                          {"cpu_share", w.cpu_share},
                          {"resident_bytes", w.resident_bytes},
                          {"peak_rss_bytes", w.peak_rss_bytes},
                          {"itl_series_ms", w.itl_series_ms},
                          {"tokens", w.tokens},
                          {"note", w.note}};
    if (!w.draft.empty()) {
      row["draft"] = w.draft;
      row["verify_steps"] = w.verify_steps;
      row["drafted"] = w.drafted;
      row["accepted"] = w.accepted;
      row["speedup_vs_plain"] = w.speedup_vs_plain;
    }
    row["matched_reference"] = w.matched ? nlohmann::json(*w.matched) : nlohmann::json(nullptr);
    row["prompt_logits_rel_l2"] =
        w.logits_rel_l2 ? nlohmann::json(*w.logits_rel_l2) : nlohmann::json(nullptr);
    j["rows"].push_back(row);
  }
  return j.dump(1) + "\n";
}

std::string ToMarkdown(const Report& r) {
  std::ostringstream o;
  o << "# gemma-engine bench\n\n";
  o << "- model: `" << r.model << "`, " << r.date << "\n";
  if (!r.command.empty()) o << "- command: `" << r.command << "`\n";
  o << "- machine: " << r.cpu << ", " << r.hardware_threads << " hardware threads, " << r.threads
    << " used, SIMD " << r.simd_target << "\n";
  o << "- load average (1/5/15 min) at start: " << r.loadavg_start << ", at end: " << r.loadavg_end
    << " (other work on the machine; compare with cpu share)\n";
  o << "- bandwidth probes in this run (read GB/s, start then before each warm row):";
  for (double g : r.bandwidth_probes_gbps) o << " " << Fmt("%.1f", g);
  o << "\n";
  o << "- memory bandwidth (best probe): read " << Fmt("%.2f", r.bandwidth.read_gbps)
    << " GB/s, memcpy " << Fmt("%.2f", r.bandwidth.copy_gbps) << " GB/s\n";
  o << "- weights read per token: " << Fmt("%.1f", r.bytes_per_token / 1048576.0)
    << " MiB; bandwidth floor " << Fmt("%.2f", r.floor_ms)
    << " ms/token (floor ratio = floor / measured decode time per token)\n";
  o << "- read bandwidth per thread CPU time: " << Fmt("%.2f", r.bandwidth.read_gbps_cpu)
    << " GB/s, floor " << Fmt("%.2f", r.floor_cpu_ms)
    << " ms/token (what an unshared machine would allow; the floor ratio above uses wall time "
       "like the decode timings)\n\n";
  o << "| backend | workload | mode | reps | TTFT ms (p95) | prefill tok/s | ITL ms median (p95) | "
       "decode tok/s | floor ratio | prefill/decode per-token speedup | cpu share | resident MiB | "
       "matched reference |\n";
  o << "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Row& w : r.rows) {
    const double speedup =
        w.decode_tok_s > 0 && w.prefill_tok_s > 0 ? w.prefill_tok_s / w.decode_tok_s : 0;
    o << "| " << w.backend << " | " << Label(w) << " | " << w.mode << " | " << w.reps << " | "
      << Fmt("%.1f", w.ttft_ms) << " (" << Fmt("%.1f", w.ttft_p95_ms) << ") | "
      << Fmt("%.1f", w.prefill_tok_s) << " | " << Fmt("%.2f", w.itl_ms) << " ("
      << Fmt("%.2f", w.itl_p95_ms) << ") | " << Fmt("%.2f", w.decode_tok_s) << " | "
      << Fmt("%.2f", w.floor_ratio) << " | " << Fmt("%.1f", speedup) << "x | "
      << Fmt("%.2f", w.cpu_share) << " | " << Fmt("%.1f", w.resident_bytes / 1048576.0) << " | "
      << MatchText(w) << (w.note.empty() ? "" : " — " + w.note) << " |\n";
  }
  bool speculative = false;
  for (const Row& w : r.rows) speculative = speculative || !w.draft.empty();
  if (speculative) {
    o << "\nSpeculative decoding (drafts of up to " << r.options.max_draft
      << " tokens; right / wrong / half: drafts right, wrong, or right for their first half of "
         "that, by construction from "
         "plain decoding's own tokens):\n\n";
    o << "| backend | workload | drafts | decode tok/s | vs plain | verification steps | drafted | "
         "accepted | matched |\n|---|---|---|---|---|---|---|---|---|\n";
    for (const Row& w : r.rows) {
      if (w.draft.empty()) continue;
      o << "| " << w.backend << " | " << w.workload << " | " << w.draft << " | "
        << Fmt("%.2f", w.decode_tok_s) << " | " << Fmt("%.3f", w.speedup_vs_plain) << "x | "
        << w.verify_steps << " | " << w.drafted << " | " << w.accepted << " | " << MatchText(w)
        << " |\n";
    }
  }
  // Summary per backend over warm rows; rows that did not match the reference are never included,
  // nor speculative rows with drafts.
  std::map<std::string, std::vector<double>> dec, pre;
  int flagged = 0;
  for (const Row& w : r.rows) {
    if (w.matched && !*w.matched) {
      ++flagged;
      continue;
    }
    if (w.mode != "warm" || (!w.draft.empty() && w.draft != "off")) continue;
    dec[w.backend].push_back(w.decode_tok_s);
    pre[w.backend].push_back(w.prefill_tok_s);
  }
  o << "\nSummary (warm rows, median across workloads; " << flagged
    << " flagged row(s) excluded):\n\n";
  for (const auto& [b, v] : dec) {
    o << "- " << b << ": decode " << Fmt("%.2f", Median(v)) << " tok/s, prefill "
      << Fmt("%.1f", Median(pre[b])) << " tok/s\n";
  }
  return o.str();
}

std::string ToCsv(const Report& r) {
  std::ostringstream o;
  o << "backend,workload,mode,reps,prompt_tokens,generated_tokens,load_ms,ttft_ms,ttft_p95_ms,"
       "prefill_tok_s,itl_median_ms,itl_p95_ms,decode_tok_s,floor_ratio,floor_ms,read_gbps,"
       "cpu_share,resident_bytes,peak_rss_bytes,matched_reference,prompt_logits_rel_l2,draft,"
       "verify_steps,drafted,accepted,speedup_vs_plain\n";
  for (const Row& w : r.rows) {
    o << w.backend << "," << w.workload << "," << w.mode << "," << w.reps << "," << w.prompt << ","
      << w.gen << "," << Fmt("%.3f", w.load_ms) << "," << Fmt("%.3f", w.ttft_ms) << ","
      << Fmt("%.3f", w.ttft_p95_ms) << "," << Fmt("%.3f", w.prefill_tok_s) << ","
      << Fmt("%.4f", w.itl_ms) << "," << Fmt("%.4f", w.itl_p95_ms) << ","
      << Fmt("%.4f", w.decode_tok_s) << "," << Fmt("%.4f", w.floor_ratio) << ","
      << Fmt("%.4f", r.floor_ms) << "," << Fmt("%.3f", r.bandwidth.read_gbps) << ","
      << Fmt("%.3f", w.cpu_share) << "," << w.resident_bytes << "," << w.peak_rss_bytes << ","
      << (w.matched ? (*w.matched ? "true" : "false") : "") << ","
      << (w.logits_rel_l2 ? Fmt("%.3e", *w.logits_rel_l2) : "") << "," << w.draft << ","
      << w.verify_steps << "," << w.drafted << "," << w.accepted << ","
      << Fmt("%.4f", w.speedup_vs_plain) << "\n";
  }
  return o.str();
}

std::string ToHtml(const Report& r) {
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                  "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  std::ostringstream o;
  o << "<!doctype html><html><head><meta charset=\"utf-8\"><title>gemma-engine bench</title>"
       "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
       "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}"
       "tr.bad{background:#fdd}svg{border:1px solid #ddd;margin:1em 0}</style></head><body>\n";
  o << "<h1>gemma-engine bench</h1><p>" << Escape(r.model) << " &middot; " << r.date << " &middot; "
    << Escape(r.cpu) << ", " << r.threads << " threads, SIMD " << r.simd_target
    << "<br>read bandwidth " << Fmt("%.2f", r.bandwidth.read_gbps) << " GB/s (memcpy "
    << Fmt("%.2f", r.bandwidth.copy_gbps) << " GB/s); "
    << Fmt("%.1f", r.bytes_per_token / 1048576.0) << " MiB per token; floor "
    << Fmt("%.2f", r.floor_ms) << " ms/token</p>\n";
  if (!r.command.empty()) o << "<p><code>" << Escape(r.command) << "</code></p>\n";
  o << "<table><tr><th>backend</th><th>workload</th><th>mode</th><th>TTFT ms</th>"
       "<th>prefill tok/s</th><th>ITL ms (p95)</th><th>decode tok/s</th><th>floor ratio</th>"
       "<th>matched reference</th></tr>\n";
  for (const Row& w : r.rows) {
    const bool bad = w.matched && !*w.matched;
    o << "<tr" << (bad ? " class=\"bad\"" : "") << "><td>" << w.backend << "</td><td>" << Label(w)
      << "</td><td>" << w.mode << "</td><td>" << Fmt("%.1f", w.ttft_ms) << "</td><td>"
      << Fmt("%.1f", w.prefill_tok_s) << "</td><td>" << Fmt("%.2f", w.itl_ms) << " ("
      << Fmt("%.2f", w.itl_p95_ms) << ")</td><td>" << Fmt("%.2f", w.decode_tok_s) << "</td><td>"
      << Fmt("%.2f", w.floor_ratio) << "</td><td>" << MatchText(w) << "</td></tr>\n";
  }
  o << "</table>\n";

  // Plot 1: latency per token (warm rows that did not fail the reference check).
  std::vector<const Row*> series;
  double ymax = r.floor_ms;
  size_t xmax = 1;
  for (const Row& w : r.rows) {
    if (w.mode != "warm" || (w.matched && !*w.matched) || w.itl_series_ms.empty()) continue;
    series.push_back(&w);
    for (double v : w.itl_series_ms) ymax = std::max(ymax, v);
    xmax = std::max(xmax, w.itl_series_ms.size());
  }
  const int W = 720, H = 300, L = 60, B = 30;
  ymax = ymax > 0 ? ymax * 1.1 : 1;
  o << "<h2>Latency per decoded token (warm, median rep)</h2><svg width=\"" << W + 180
    << "\" height=\"" << H + B + 10 << "\">\n";
  o << "<line x1=\"" << L << "\" y1=\"" << H << "\" x2=\"" << W << "\" y2=\"" << H
    << "\" stroke=\"black\"/><line x1=\"" << L << "\" y1=\"10\" x2=\"" << L << "\" y2=\"" << H
    << "\" stroke=\"black\"/>\n";
  for (int k = 0; k <= 4; ++k) {
    const double v = ymax * k / 4;
    const double y = H - (H - 10) * (v / ymax);
    o << "<text x=\"" << L - 5 << "\" y=\"" << y + 4 << "\" font-size=\"11\" text-anchor=\"end\">"
      << Fmt("%.1f", v) << "</text>\n";
  }
  o << "<text x=\"" << (L + W) / 2 << "\" y=\"" << H + 25
    << "\" font-size=\"12\" text-anchor=\"middle\">decode step</text>"
    << "<text x=\"12\" y=\"" << H / 2 << "\" font-size=\"12\" transform=\"rotate(-90 12 " << H / 2
    << ")\">ms</text>\n";
  if (r.floor_ms > 0) {
    const double y = H - (H - 10) * (r.floor_ms / ymax);
    o << "<line x1=\"" << L << "\" y1=\"" << y << "\" x2=\"" << W << "\" y2=\"" << y
      << "\" stroke=\"gray\" stroke-dasharray=\"4\"/><text x=\"" << W + 5 << "\" y=\"" << y + 4
      << "\" font-size=\"11\">bandwidth floor</text>\n";
  }
  for (size_t s = 0; s < series.size(); ++s) {
    const Row& w = *series[s];
    o << "<polyline fill=\"none\" stroke=\"" << kColors[s % 8] << "\" points=\"";
    for (size_t i = 0; i < w.itl_series_ms.size(); ++i) {
      const double x = L + (W - L) * (xmax > 1 ? static_cast<double>(i) / (xmax - 1) : 0.0);
      const double y = H - (H - 10) * (w.itl_series_ms[i] / ymax);
      o << Fmt("%.1f", x) << "," << Fmt("%.1f", y) << " ";
    }
    o << "\"/><text x=\"" << W + 5 << "\" y=\"" << 20 + 14 * s << "\" font-size=\"11\" fill=\""
      << kColors[s % 8] << "\">" << w.backend << " " << Label(w) << "</text>\n";
  }
  o << "</svg>\n";

  // Plot 2: throughput per workload (warm rows), prefill and decode bars.
  std::vector<const Row*> bars;
  double tmax = 1;
  for (const Row& w : r.rows) {
    if (w.mode != "warm" || (w.matched && !*w.matched)) continue;
    bars.push_back(&w);
    tmax = std::max({tmax, w.prefill_tok_s, w.decode_tok_s});
  }
  const int bh = 16, gap = 10;
  const int ph = static_cast<int>(bars.size()) * (2 * bh + gap) + 40;
  o << "<h2>Throughput per workload (warm; log scale)</h2><svg width=\"" << W + 180
    << "\" height=\"" << ph << "\">\n";
  const double lmax = std::log10(tmax * 2);
  auto bar_len = [&](double v) { return v > 1 ? (W - 200) * std::log10(v) / lmax : 0.0; };
  for (size_t i = 0; i < bars.size(); ++i) {
    const Row& w = *bars[i];
    const int y = 20 + static_cast<int>(i) * (2 * bh + gap);
    o << "<text x=\"195\" y=\"" << y + bh << "\" font-size=\"11\" text-anchor=\"end\">" << w.backend
      << " " << Label(w) << "</text>";
    o << "<rect x=\"200\" y=\"" << y << "\" width=\"" << Fmt("%.1f", bar_len(w.prefill_tok_s))
      << "\" height=\"" << bh - 2 << "\" fill=\"#1f77b4\"/><text x=\""
      << Fmt("%.1f", 205 + bar_len(w.prefill_tok_s)) << "\" y=\"" << y + 11
      << "\" font-size=\"10\">prefill " << Fmt("%.1f", w.prefill_tok_s) << " tok/s</text>";
    o << "<rect x=\"200\" y=\"" << y + bh << "\" width=\"" << Fmt("%.1f", bar_len(w.decode_tok_s))
      << "\" height=\"" << bh - 2 << "\" fill=\"#ff7f0e\"/><text x=\""
      << Fmt("%.1f", 205 + bar_len(w.decode_tok_s)) << "\" y=\"" << y + bh + 11
      << "\" font-size=\"10\">decode " << Fmt("%.2f", w.decode_tok_s) << " tok/s</text>\n";
  }
  o << "</svg>\n<p>Rows whose tokens differ from the CPU reference backend are shaded, flagged and "
       "left out of both plots and the summary.</p></body></html>\n";
  return o.str();
}

}  // namespace gemma::bench
