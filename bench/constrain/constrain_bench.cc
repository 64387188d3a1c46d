// Constrained-decoding benchmark on the real 262,144-token Gemma vocabulary, one thread:
// schema/regex compile times, per-token mask times over sampled generations, memory per constraint.
//
//   constrain_bench [--schemas N] [--gens G] [--tokens T] [--json out.json] [tokenizer.json]
//
// Each constraint is compiled fresh, then G outputs are sampled (uniform among allowed tokens for T
// tokens, then steered to completion); every AllowedTokens() call is timed. "cold" is the first
// generation of a fresh constraint (every new state pays a trie walk), "all" includes later
// generations that reuse the constraint's mask cache, as a server reusing a compiled schema would.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
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

void Print(const char* name, const Stats& s, const char* unit) {
  std::printf("%-34s n=%-7zu mean %8.2f  p50 %8.2f  p90 %8.2f  p99 %8.2f  max %9.2f %s\n", name, s.n,
              s.mean, s.p50, s.p90, s.p99, s.max, unit);
}

}  // namespace

int main(int argc, char** argv) {
  int num_schemas = 120, gens = 3, tokens = 32;
  std::string json_out;
  std::string path = testing::DefaultGemmaTokenizerPath(GEMMA_SOURCE_DIR);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--schemas" && i + 1 < argc) {
      num_schemas = std::stoi(argv[++i]);
    } else if (a == "--gens" && i + 1 < argc) {
      gens = std::stoi(argv[++i]);
    } else if (a == "--tokens" && i + 1 < argc) {
      tokens = std::stoi(argv[++i]);
    } else if (a == "--json" && i + 1 < argc) {
      json_out = argv[++i];
    } else {
      path = a;
    }
  }
  Timer t;
  auto vocab = testing::LoadGemmaVocab(path);
  if (!vocab) {
    std::fprintf(stderr, "cannot read %s (run tools/setup.sh)\n", path.c_str());
    return 1;
  }
  const double vocab_ms = t.Ms();
  std::printf("vocabulary: %d tokens, trie %zu nodes, max token %d bytes, %.1f MiB; load+trie %.0f ms\n",
              vocab->size(), vocab->trie().nodes(), vocab->trie().max_depth,
              vocab->MemoryBytes() / 1048576.0, vocab_ms);

  struct Item {
    std::string label;
    ConstraintOptions opt;
  };
  std::vector<Item> items;
  auto schemas = testing::SchemaCorpus(std::max(0, num_schemas - 27), 77);
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

  std::vector<double> schema_compile, regex_compile, cold, warm, all_masks, schema_masks, regex_masks;
  std::vector<double> table_kib, mem_kib, states;
  std::vector<std::pair<double, std::string>> slowest;  // (mean mask us, constraint)
  std::mt19937_64 rng(1);
  int compiled = 0, failed = 0;
  for (const auto& it : items) {
    Timer ct;
    std::shared_ptr<const Constraint> c;
    try {
      c = Constraint::Compile(vocab, it.opt);
    } catch (const Error& e) {
      ++failed;
      std::fprintf(stderr, "compile failed (%s): %s\n", it.label.c_str(), e.what());
      continue;
    }
    const double ms = ct.Ms();
    ++compiled;
    (it.label == "regex" ? regex_compile : schema_compile).push_back(ms);
    table_kib.push_back(c->MemoryBytes() / 1024.0);
    states.push_back(static_cast<double>(c->num_states()));
    double sum = 0;
    size_t cnt = 0;
    for (int g = 0; g < gens; ++g) {
      std::vector<double> us;
      testing::Generate(c, &rng, tokens, 0.2, &us);
      (g == 0 ? cold : warm).insert(g == 0 ? cold.end() : warm.end(), us.begin(), us.end());
      all_masks.insert(all_masks.end(), us.begin(), us.end());
      if (it.label == "schema") schema_masks.insert(schema_masks.end(), us.begin(), us.end());
      if (it.label == "regex") regex_masks.insert(regex_masks.end(), us.begin(), us.end());
      for (double x : us) sum += x;
      cnt += us.size();
    }
    std::string what = it.label == "regex" ? it.opt.regex : it.label == "schema" ? it.opt.schema.dump() : it.label;
    slowest.push_back({cnt ? sum / cnt : 0, it.label + " " + what.substr(0, 90)});
    mem_kib.push_back(c->MemoryBytes() / 1024.0);
  }
  std::printf("constraints: %d compiled (%zu schemas, %zu regexes, json, tools), %d failed\n", compiled,
              schema_compile.size() - 2, regex_compile.size(), failed);
  Print("schema compile (ms)", Summarize(schema_compile), "ms");
  Print("regex compile (ms)", Summarize(regex_compile), "ms");
  Print("mask, all generations (us)", Summarize(all_masks), "us");
  Print("mask, first generation (cold, us)", Summarize(cold), "us");
  Print("mask, later generations (us)", Summarize(warm), "us");
  Print("mask, schemas (us)", Summarize(schema_masks), "us");
  Print("mask, regexes (us)", Summarize(regex_masks), "us");
  Print("automaton states", Summarize(states), "");
  Print("memory after compile (KiB)", Summarize(table_kib), "KiB");
  Print("memory after generations (KiB)", Summarize(mem_kib), "KiB");
  std::printf("mask bytes per cached state: %zu\n", vocab->mask_words() * 8);
  std::sort(slowest.rbegin(), slowest.rend());
  std::printf("slowest constraints by mean mask time:\n");
  for (size_t i = 0; i < std::min<size_t>(8, slowest.size()); ++i) {
    std::printf("  %9.1f us  %s\n", slowest[i].first, slowest[i].second.c_str());
  }
  return 0;
}
