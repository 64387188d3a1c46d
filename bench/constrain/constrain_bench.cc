// Constrained-decoding benchmark on the real 262,144-token Gemma vocabulary, one thread:
// schema/regex compile times, per-token mask times over sampled generations, memory per constraint.
//
//   constrain_bench [--schemas N] [--gens G] [--tokens T] [tokenizer.json]
//
// Each constraint is compiled fresh, then G outputs are sampled (uniform among allowed tokens for T
// tokens, then steered to completion); every AllowedTokens() call is timed, in wall time and in
// thread CPU time (the machine is shared: CPU time is the figure that does not depend on the
// neighbours' load). "cold" is the first generation of a fresh constraint (every new state pays a
// trie walk), "later" reuses the constraint's mask cache, as a server reusing a compiled schema.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "constrain/constraint.h"
#include "constrain/test_corpus.h"
#include "constrain/test_vocab.h"
#include "core/timer.h"
#include "gemma/error.h"

using namespace gemma;
using namespace gemma::constrain;

namespace {

struct Stats {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
  size_t n = 0;
};

Stats Summarize(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.n = v.size();
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  auto q = [&](double p) { return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))]; };
  s.p50 = q(0.5);
  s.p90 = q(0.9);
  s.p99 = q(0.99);
  s.max = v.back();
  return s;
}

void Print(const std::string& name, const std::vector<double>& v) {
  Stats s = Summarize(v);
  std::printf("| %-40s | %7zu | %9.2f | %9.2f | %9.2f | %9.2f | %10.2f |\n", name.c_str(), s.n,
              s.mean, s.p50, s.p90, s.p99, s.max);
}

double CpuMs() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

struct Series {
  std::vector<double> wall, cpu;
};

}  // namespace

int main(int argc, char** argv) {
  int num_schemas = 120, gens = 3, tokens = 32;
  std::string path = testing::DefaultGemmaTokenizerPath(GEMMA_SOURCE_DIR);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--schemas" && i + 1 < argc) {
      num_schemas = std::stoi(argv[++i]);
    } else if (a == "--gens" && i + 1 < argc) {
      gens = std::stoi(argv[++i]);
    } else if (a == "--tokens" && i + 1 < argc) {
      tokens = std::stoi(argv[++i]);
    } else {
      path = a;
    }
  }
  Timer t;
  const double c0 = CpuMs();
  auto vocab = testing::LoadGemmaVocab(path);
  if (!vocab) {
    std::fprintf(stderr, "cannot read %s (run tools/setup.sh)\n", path.c_str());
    return 1;
  }
  std::printf(
      "vocabulary: %d tokens, trie %zu nodes, longest token %d bytes, %.1f MiB; "
      "tokenizer.json parse + trie + text splits: %.0f ms wall, %.0f ms CPU\n",
      vocab->size(), vocab->trie().nodes(), vocab->trie().max_depth,
      vocab->MemoryBytes() / 1048576.0, t.Ms(), CpuMs() - c0);

  struct Item {
    std::string label;
    ConstraintOptions opt;
  };
  std::vector<Item> items;
  const int hand_written = static_cast<int>(testing::SchemaCorpus(0, 77).size());
  auto schemas = testing::SchemaCorpus(std::max(0, num_schemas - hand_written), 77);
  for (size_t i = 0; i < schemas.size(); ++i) {
    ConstraintOptions o;
    o.kind = ConstraintKind::kJsonSchema;
    o.schema = schemas[i];
    o.whitespace = i % 2 ? Whitespace::kCompact : Whitespace::kNone;
    items.push_back({"schema", o});
  }
  for (const auto& r : testing::RegexCorpus()) {
    ConstraintOptions o;
    o.kind = ConstraintKind::kRegex;
    o.regex = r;
    items.push_back({"regex", o});
  }
  {
    ConstraintOptions o;
    o.kind = ConstraintKind::kJson;
    items.push_back({"json", o});
    o.tools = nlohmann::ordered_json::parse(R"([
      {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
        "properties":{"city":{"type":"string"},"unit":{"enum":["celsius","fahrenheit"]}},"required":["city"]}}},
      {"type":"function","function":{"name":"search","parameters":{"type":"object",
        "properties":{"query":{"type":"string"},"limit":{"type":"integer","minimum":1,"maximum":50}},"required":["query"]}}}])");
    o.kind = ConstraintKind::kToolCalls;
    o.require_tool_call = true;
    o.thinking = true;
    items.push_back({"tools", o});
  }

  Series schema_compile, regex_compile, all, cold, later, schema_masks, regex_masks;
  std::vector<double> kib_compiled, kib_used, states;
  std::vector<std::pair<double, std::string>> slowest;  // (mean CPU us per mask, constraint)
  std::mt19937_64 rng(1);
  int failed = 0;
  for (const auto& it : items) {
    Timer ct;
    const double cc = CpuMs();
    std::shared_ptr<const Constraint> c;
    try {
      c = Constraint::Compile(vocab, it.opt);
    } catch (const Error& e) {
      ++failed;
      std::fprintf(stderr, "compile failed (%s): %s\n", it.label.c_str(), e.what());
      continue;
    }
    Series& comp = it.label == "regex" ? regex_compile : schema_compile;
    comp.wall.push_back(ct.Ms());
    comp.cpu.push_back(CpuMs() - cc);
    kib_compiled.push_back(c->MemoryBytes() / 1024.0);
    states.push_back(static_cast<double>(c->num_states()));
    double sum = 0;
    size_t cnt = 0;
    for (int g = 0; g < gens; ++g) {
      std::vector<double> wall, cpu;
      testing::Generate(c, &rng, tokens, 0.2, &wall, &cpu);
      auto add = [&](Series& s) {
        s.wall.insert(s.wall.end(), wall.begin(), wall.end());
        s.cpu.insert(s.cpu.end(), cpu.begin(), cpu.end());
      };
      add(all);
      add(g == 0 ? cold : later);
      if (it.label == "schema") add(schema_masks);
      if (it.label == "regex") add(regex_masks);
      for (double x : cpu) sum += x;
      cnt += cpu.size();
    }
    kib_used.push_back(c->MemoryBytes() / 1024.0);
    std::string what = it.label == "regex"    ? it.opt.regex
                       : it.label == "schema" ? it.opt.schema.dump()
                                              : it.label;
    slowest.push_back({cnt ? sum / cnt : 0, it.label + " " + what.substr(0, 80)});
  }
  std::printf("constraints: %zu schemas (incl. json, tools), %zu regexes; %d failed to compile\n\n",
              schema_compile.cpu.size(), regex_compile.cpu.size(), failed);
  std::printf("| %-40s | %7s | %9s | %9s | %9s | %9s | %10s |\n", "series", "n", "mean", "p50",
              "p90", "p99", "max");
  std::printf("|%s|---:|---:|---:|---:|---:|---:|\n", std::string(42, '-').c_str());
  Print("schema compile, ms CPU", schema_compile.cpu);
  Print("schema compile, ms wall", schema_compile.wall);
  Print("regex compile, ms CPU", regex_compile.cpu);
  Print("mask, all, us CPU", all.cpu);
  Print("mask, all, us wall", all.wall);
  Print("mask, first generation (cold), us CPU", cold.cpu);
  Print("mask, later generations, us CPU", later.cpu);
  Print("mask, schemas, us CPU", schema_masks.cpu);
  Print("mask, regexes, us CPU", regex_masks.cpu);
  Print("automaton states per constraint", states);
  Print("KiB per constraint after compile", kib_compiled);
  Print("KiB per constraint after its generations", kib_used);
  std::printf("\nmask bytes per cached state: %zu\n", vocab->mask_words() * 8 + 8);
  std::sort(slowest.rbegin(), slowest.rend());
  std::printf("slowest constraints by mean mask CPU time:\n");
  for (size_t i = 0; i < std::min<size_t>(6, slowest.size()); ++i) {
    std::printf("  %9.1f us  %s\n", slowest[i].first, slowest[i].second.c_str());
  }
  return 0;
}
