#include "format/module_pattern.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "format/config.h"
#include "gemma/error.h"

namespace gemma {
namespace {

using nlohmann::json;

json Goldens() {
  std::ifstream in(std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/format/module_patterns.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

// Python's re (tools/fixtures/module_pattern_goldens.py): which patterns compile, and for each
// name re.search's start and whether re.match matches.
TEST(ModulePattern, AgreesWithPythonRe) {
  const json g = Goldens();
  int compared = 0;
  for (const json& p : g["patterns"]) {
    const std::string pattern = p["pattern"];
    if (p.contains("error")) {
      try {
        ModulePattern m(pattern);
        ADD_FAILURE() << "accepted \"" << pattern << "\"; Python: " << p["error"];
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kConfig) << pattern;
      }
      continue;
    }
    ModulePattern m(pattern);
    for (const json& r : p["results"]) {
      const std::string name = r[0];
      const int64_t start = r[1];
      const size_t got = m.Search(name);
      EXPECT_EQ(got == ModulePattern::kNoMatch ? -1 : static_cast<int64_t>(got), start)
          << "re.search(\"" << pattern << "\", \"" << name << "\")";
      EXPECT_EQ(m.MatchesAtStart(name), r[2].get<bool>())
          << "re.match(\"" << pattern << "\", \"" << name << "\")";
      ++compared;
    }
  }
  EXPECT_GT(compared, 5000);
}

TEST(ModulePattern, WhatPythonAcceptsButThisRefusesIsAConfigError) {
  const json g = Goldens();  // (iterating Goldens()["unsupported"] would outlive the temporary)
  for (const json& p : g["unsupported"]) {
    try {
      ModulePattern m(p.get<std::string>());
      ADD_FAILURE() << "accepted " << p;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kConfig) << p;
    }
  }
  EXPECT_THROW(ModulePattern(std::string(1025, 'a')), Error);
  EXPECT_THROW(ModulePattern(std::string(101, '(') + std::string(101, ')')), Error);
  EXPECT_NO_THROW(ModulePattern(std::string(100, '(') + std::string(100, ')')));
  // A lookbehind over alternations nested 99 deep: its width is computed in linear time.
  std::string deep = "a";
  for (int i = 0; i < 99; ++i) deep = "(" + deep + "|b)";
  EXPECT_EQ(ModulePattern("(?<=" + deep + ")c").Search("xbc"), 2u);
}

// transformers' procedure (joined alternation + re.search; should_convert_module) on the
// published E2B quantization_config, for every kind of module it names.
TEST(ModulePattern, E2bRulesGiveTransformersBitWidths) {
  const json e2b = Goldens()["e2b"];
  std::string config = R"({"model_type":"gemma4_text","hidden_size":8,"intermediate_size":8,
      "num_hidden_layers":5,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":4,
      "quantization_config":{"quant_method":"gemma","num_bits":4,"quantize_embeddings":true,
      "modules_to_not_convert":)" + e2b["skip"].dump() + R"(,"module_quant_configs":{)";
  bool first = true;
  for (const json& r : e2b["rules"]) {  // declaration order matters: written by hand
    config += (first ? "" : ",") + json(r[0]).dump() + ":{\"num_bits\":" + r[1].dump() + "}";
    first = false;
  }
  config += "}}}";
  const ModelConfig c = ParseModelConfig(config, "config.json");
  ASSERT_EQ(c.quant.rules.size(), e2b["rules"].size());
  for (const json& m : e2b["modules"]) {
    const std::optional<int> want =
        m[1].is_null() ? std::nullopt : std::optional<int>(m[1].get<int>());
    EXPECT_EQ(c.quant.BitsFor(m[0], /*is_embedding=*/false), want) << m[0];
  }
}

// fuzz/fuzz_config.cc's timeout (build-fuzz/artifacts/config/timeout-09ff8c7d...): a
// 110-byte pattern of stacked stars took libstdc++'s std::regex seconds. Python refuses it
// ("multiple repeat"); so does this. The work bound holds on patterns that are valid too.
TEST(ModulePattern, PathologicalPatternsAreBoundedInTime) {
  EXPECT_THROW(ModulePattern("mo" + std::string(43, '*') + R"(del\.layers\.\d+\.self1attn\.)"),
               Error);
  const auto t0 = std::chrono::steady_clock::now();
  // Exponential for a backtracking engine (Python included) on a name that almost matches.
  // (Answers checked with Python on 12 a's; its time doubles with each further one.)
  const std::string name = std::string(1000, 'a') + "!";
  for (const char* p : {"(a|a)*b", "(a+)+(?!x)b", "((a*)*)*c$", "(.*.*)*="}) {
    EXPECT_EQ(ModulePattern(p).Search(name), ModulePattern::kNoMatch) << p;
  }
  EXPECT_EQ(ModulePattern("(a*)*$").Search(name), 1001u);
  EXPECT_EQ(ModulePattern("(?:a?){30}a{30}").Search(name), 0u);
  // Nested lookaheads in a loop: polynomial, and the work bound answers before it is slow.
  ModulePattern nested("(?:(?=(?:a(?=(?:a(?=a*)*)*)*)*)a)*b");
  try {
    (void)nested.Search(std::string(1000, 'a'));
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kConfig);
  }
  EXPECT_THROW(ModulePattern("a").Search(std::string(1024, 'a')), Error);  // name bound
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 1.0);
}

}  // namespace
}  // namespace gemma
