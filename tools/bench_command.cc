#include "bench_command.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "bench/harness/bench_harness.h"
#include "gemma/error.h"
#include "hub/model_path.h"

namespace gemma::cli {
namespace {

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  if (!f) throw Error(ErrorCode::kIo, "cannot write " + path);
}

}  // namespace

void AddBenchCommand(CLI::App& app) {
  struct Opts {
    bench::BenchOptions bench;
    std::string backends = "cpu-fast";
    std::string workloads = "pp128+tg32,mt128+32+tg16,sel64+tg16";
    std::string out = "bench-report";
    std::string drafts = "right,wrong,half,prompt-lookup";
    bool no_cold = false, no_warm = false;
    int bandwidth_mib = 1024;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Benchmark backends on workloads (cold and warm), check tokens against the CPU reference, "
      "measure memory bandwidth; writes OUT.json, OUT.md, OUT.csv, OUT.html");
  cmd->add_option("--model", o->bench.model, "Checkpoint directory or .safetensors file")
      ->required();
  cmd->add_option("--backends", o->backends,
                  "Comma-separated: cpu-fast, cpu-reference, vulkan (when built)");
  cmd->add_option("--workloads", o->workloads,
                  "Comma-separated: ppN+tgM (prompt N, generate M), mtN+K+tgM (two turns, K new "
                  "tokens reuse the cached prefix), selN+tgM (decode through an allowed-id mask), "
                  "specN+tgM (speculative decoding through a session: plain, then each of "
                  "--drafts; warm only)");
  cmd->add_option("--draft", o->bench.max_draft,
                  "specN+tgM: the most tokens drafted per verification step (1..6)")
      ->check(CLI::Range(1, 6));
  cmd->add_option("--drafts", o->drafts,
                  "specN+tgM: comma-separated draft sources, each a row beside plain decoding: "
                  "right, wrong, half (drafts right, wrong, or right for their first half of "
                  "--draft tokens, built from plain decoding's own tokens: speed as a function of "
                  "acceptance), prompt-lookup");
  cmd->add_option("--reps", o->bench.reps, "Measured warm repetitions")->check(CLI::Range(1, 1000));
  cmd->add_option("--warmup", o->bench.warmup, "Warm-up runs before the measured ones")
      ->check(CLI::Range(0, 1000));
  cmd->add_option("--threads", o->bench.threads, "cpu-fast threads (0 = all hardware threads)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--capacity", o->bench.capacity, "Context capacity")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--verify-max-tokens", o->bench.verify_max_tokens,
                  "Skip the reference check (row marked unverified) for longer workloads");
  cmd->add_option("--reference-cache", o->bench.reference_cache,
                  "JSON file caching the reference backend's tokens per workload (reruns skip the "
                  "slow reference runs; keyed by checkpoint path, size, mtime and seed)");
  cmd->add_option("--bandwidth-mib", o->bandwidth_mib, "Buffer streamed by the bandwidth probe")
      ->check(CLI::Range(16, 1 << 16));
  cmd->add_option("--seed", o->bench.seed, "Prompt ids seed");
  cmd->add_flag("--no-cold", o->no_cold, "Skip cold runs");
  cmd->add_flag("--no-warm", o->no_warm, "Skip warm runs");
  cmd->add_option("--out", o->out, "Report path prefix");
  cmd->callback([o] {
    o->bench.model = hub::ResolveModelPath(o->bench.model);  // ORG/NAME[@REV] -> Hub cache
    o->bench.backends = SplitCommas(o->backends);
    o->bench.drafts = SplitCommas(o->drafts);
    o->bench.workloads.clear();
    for (const std::string& w : SplitCommas(o->workloads))
      o->bench.workloads.push_back(bench::ParseWorkload(w));
    o->bench.cold = !o->no_cold;
    o->bench.warm = !o->no_warm;
    o->bench.bandwidth_bytes = static_cast<size_t>(o->bandwidth_mib) << 20;
    bench::Report report = bench::RunBench(
        o->bench, [](const std::string& s) { std::fprintf(stderr, "bench: %s\n", s.c_str()); });
    const bench::BenchOptions& b = o->bench;
    report.command = "gemma-engine bench --model " + b.model + " --backends " + o->backends +
                     " --workloads " + o->workloads + " --reps " + std::to_string(b.reps) +
                     " --warmup " + std::to_string(b.warmup) + " --threads " +
                     std::to_string(b.threads) + " --capacity " + std::to_string(b.capacity) +
                     " --draft " + std::to_string(b.max_draft) + " --drafts " + o->drafts +
                     (o->no_cold ? " --no-cold" : "") + (o->no_warm ? " --no-warm" : "");
    WriteFile(o->out + ".json", bench::ToJson(report));
    WriteFile(o->out + ".md", bench::ToMarkdown(report));
    WriteFile(o->out + ".csv", bench::ToCsv(report));
    WriteFile(o->out + ".html", bench::ToHtml(report));
    std::printf("%s", bench::ToMarkdown(report).c_str());
    std::fprintf(stderr, "bench: wrote %s.{json,md,csv,html}\n", o->out.c_str());
  });
}

}  // namespace gemma::cli
