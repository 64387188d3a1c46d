// The sampling chain against transformers' processors and warpers.
//
// Goldens: tests/goldens/sampling/sampling_goldens.json, made on the GPU machine by
//   python3 tools/fixtures/sampling_goldens.py --out tests/goldens/sampling
// (format and logits recipe documented in that script). GEMMA_SAMPLING_GOLDENS overrides the path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "decode/sampler.h"
#include "decode/sampling_recipe.h"

namespace gemma::decode {
namespace {

using golden::FloatsFnv;
using golden::HexToFloat;
using golden::OptionsFrom;
using golden::RecipeLogits;

constexpr float kInfinity = std::numeric_limits<float>::infinity();

TEST(SamplingGolden, RecipeMatchesThePythonReference) {
  // Hashes printed by `python3 tools/fixtures/sampling_goldens.py --self-test` (pure Python).
  EXPECT_EQ(FloatsFnv(RecipeLogits(
                nlohmann::json::parse(R"({"kind":"uniform","seed":1,"shift":21,"vocab":16})"))),
            "7dd5676e5f383488");
  EXPECT_EQ(
      FloatsFnv(RecipeLogits(nlohmann::json::parse(
          R"({"kind":"levels","levels":9,"neg_inf_mod":5,"seed":5,"shift":1,"vocab":1000})"))),
      "a18fa3119794b575");
  EXPECT_EQ(FloatsFnv(RecipeLogits(nlohmann::json::parse(
                R"({"kind":"uniform","seed":9,"set":[[3,"41400000"]],"shift":22,"vocab":100})"))),
            "c0d9e57b05054b58");
  const auto first =
      RecipeLogits(nlohmann::json::parse(R"({"kind":"uniform","seed":1,"shift":21,"vocab":4})"));
  EXPECT_EQ(first[0], -2.591899871826172f);
  EXPECT_EQ(first[3], -1.1214251518249512f);
}


// Our top log-probs against torch.log_softmax + topk's. Positions may hold different ids only
// where the golden value ties with another listed value or sits last (ties with unlisted ones).
void ExpectTopLogprobs(const SampleResult& r, const nlohmann::json& golden, const char* which) {
  SCOPED_TRACE(which);
  ASSERT_EQ(r.num_top, static_cast<int32_t>(golden.size()));
  for (int32_t j = 0; j < r.num_top; ++j) {
    const int32_t id = golden[j].at(0).get<int32_t>();
    const double value = golden[j].at(1).get<double>();
    EXPECT_NEAR(r.top[j].logprob, value, 2e-5 + 2e-6 * std::fabs(value)) << "rank " << j;
    if (r.top[j].token != id) {
      bool tie = j + 1 == r.num_top;
      for (const auto& g : golden)
        tie |= g.at(0).get<int32_t>() != id && g.at(1).get<double>() == value;
      EXPECT_TRUE(tie) << "rank " << j << ": ours id " << r.top[j].token << ", torch " << id;
    }
  }
}

bool WithinOneUlp(float a, float b) {
  return a == b || std::nextafter(a, kInfinity) == b || std::nextafter(a, -kInfinity) == b;
}

TEST(SamplingGolden, MatchesTransformers) {
  std::string path = GEMMA_SOURCE_DIR "/tests/goldens/sampling/sampling_goldens.json";
  if (const char* env = std::getenv("GEMMA_SAMPLING_GOLDENS")) path = env;
  std::ifstream in(path);
  if (!in) {
    GTEST_SKIP() << "no sampling goldens at " << path
                 << "; generate them on the GPU machine with: python3 "
                    "tools/fixtures/sampling_goldens.py --out tests/goldens/sampling";
  }
  const nlohmann::json doc = nlohmann::json::parse(in);
  ASSERT_EQ(doc.at("format").get<int>(), 1);
  int exact = 0, tie_swaps = 0, tie_boundary = 0, boundary = 0, max_ulp_cases = 0;
  for (const auto& c : doc.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(name);
    const std::vector<float> logits = RecipeLogits(c.at("logits"));
    ASSERT_EQ(FloatsFnv(logits), c.at("input_fnv").get<std::string>()) << "recipe mismatch";
    const std::vector<int32_t> ids = c.at("input_ids").get<std::vector<int32_t>>();
    const SamplingOptions options = OptionsFrom(c.at("options"));

    Sampler sampler(options);
    sampler.SetPrompt(ids);
    const auto span = sampler.Process(logits);
    const std::vector<float> out(span.begin(), span.end());

    // Kept set.
    const std::string bits = c.at("kept_bits").get<std::string>();
    ASSERT_EQ(bits.size(), (logits.size() + 7) / 8 * 2);
    std::vector<size_t> diff;
    size_t n_kept = 0, golden_kept = 0, only_ours = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      const int byte = std::stoi(bits.substr(i / 8 * 2, 2), nullptr, 16);
      const bool golden = (byte >> (i % 8)) & 1;
      const bool ours = out[i] != -kInfinity;
      n_kept += ours;
      golden_kept += golden;
      if (golden != ours) {
        diff.push_back(i);
        only_ours += ours;
      }
    }
    ASSERT_EQ(golden_kept, c.at("n_kept").get<size_t>());
    if (!diff.empty()) {
      // The logits entering the filters decide whether the differences are interchangeable ties.
      SamplingOptions unfiltered = options;
      unfiltered.top_k = 0;
      unfiltered.top_p = 1.0;
      unfiltered.typical_p = 1.0;
      unfiltered.min_p = 0.0;
      Sampler pre(unfiltered);
      pre.SetPrompt(ids);
      const auto scaled = pre.Process(logits);
      bool same_value = true;
      for (size_t i : diff) same_value &= scaled[i] == scaled[diff[0]];
      // A swap: as many ids kept only by us as only by transformers, all with one value.
      const bool mass_cut = options.top_p < 1.0 || options.typical_p < 1.0;
      const size_t only_golden = diff.size() - only_ours;
      if (options.top_p < 1.0 && same_value && only_ours == only_golden) {
        ++tie_swaps;
      } else if (mass_cut && same_value &&
                 (only_ours > only_golden ? only_ours - only_golden : only_golden - only_ours) <=
                     1) {
        // A cut whose mass lands exactly on a group of equal probabilities (e.g. 1742 of 3484
        // equal tokens at top_p 0.5): rounding decides whether one more token of the group counts,
        // and (top-p) transformers' unstable sort decides which members of the group it keeps.
        ++tie_boundary;
      } else if (!c.at("f64_agrees").get<bool>() &&
                 diff.size() <= std::max<size_t>(4, golden_kept / 10000)) {
        // transformers' float32 and an exact float64 evaluation disagree here (the script checks),
        // so the cut sits within float32 rounding: a few ids next to it may go either way.
        ++boundary;
        std::printf("  %s: %zu ids differ at a cut within float32 rounding\n", name.c_str(),
                    diff.size());
      } else {
        ADD_FAILURE() << diff.size() << " ids differ from transformers, e.g. id " << diff[0]
                      << " (golden kept " << c.at("n_kept") << ", ours " << n_kept << ")";
        continue;
      }
    } else {
      ++exact;
    }

    // Values at probe ids.
    bool one_ulp = false;
    for (const auto& p : c.at("probe")) {
      const size_t id = p.at(0).get<size_t>();
      if (std::find(diff.begin(), diff.end(), id) != diff.end()) continue;
      const float golden = HexToFloat(p.at(1).get<std::string>());
      if (golden == -kInfinity) {
        EXPECT_EQ(out[id], -kInfinity) << "id " << id;
      } else {
        EXPECT_TRUE(WithinOneUlp(out[id], golden))
            << "id " << id << ": ours " << out[id] << ", transformers " << golden;
        one_ulp |= out[id] != golden;
      }
    }
    // Every survivor's value, when the goldens list them (ids ascending, by the golden bitmap).
    if (c.contains("kept_values") && c.at("kept_values").is_string()) {
      const std::string values = c.at("kept_values").get<std::string>();
      ASSERT_EQ(values.size(), golden_kept * 8);
      size_t k = 0;
      for (size_t i = 0; i < logits.size(); ++i) {
        const int byte = std::stoi(bits.substr(i / 8 * 2, 2), nullptr, 16);
        if (!((byte >> (i % 8)) & 1)) continue;
        const float golden = HexToFloat(values.substr(8 * k++, 8));
        if (std::find(diff.begin(), diff.end(), i) != diff.end()) continue;
        EXPECT_TRUE(WithinOneUlp(out[i], golden))
            << "id " << i << ": ours " << out[i] << ", transformers " << golden;
        one_ulp |= out[i] != golden;
      }
    }
    max_ulp_cases += one_ulp;

    // Log-probs of the raw and of the processed distribution.
    if (c.contains("raw_top") && diff.empty()) {
      for (const LogprobSource source : {LogprobSource::kRaw, LogprobSource::kFinal}) {
        SamplingOptions lp = options;
        lp.logprobs = true;
        lp.top_logprobs = 5;
        lp.logprob_source = source;
        Sampler ls(lp);
        ls.SetPrompt(ids);
        const SampleResult r = ls.Sample(logits);
        ExpectTopLogprobs(r, c.at(source == LogprobSource::kRaw ? "raw_top" : "final_top"),
                          source == LogprobSource::kRaw ? "raw" : "final");
      }
    }
  }
  std::printf(
      "sampling goldens (transformers %s): %d cases exact, %d with tie swaps at a top-p cut, %d "
      "with a mass cut on a tie group, %d within float32 rounding of a cutoff; %d with 1-ulp value "
      "differences\n",
      doc.value("transformers", std::string("?")).c_str(), exact, tie_swaps, tie_boundary, boundary,
      max_ulp_cases);
}

}  // namespace
}  // namespace gemma::decode
