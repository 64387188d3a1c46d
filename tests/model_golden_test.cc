// The CPU reference backend against transformers (float32) goldens: tests/goldens/model/*, made by
// tools/fixtures/model_goldens.py on the GPU machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "model/model.h"

namespace gemma {
namespace {

namespace fs = std::filesystem;

struct Golden {
  std::string dir;
  std::vector<std::vector<int32_t>> prompts, greedy;
  std::vector<std::vector<float>> logits;  // [prompt][T * V]
};

Golden LoadGolden(const std::string& name) {
  Golden g;
  g.dir = std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/model/" + name;
  std::ifstream f(g.dir + "/goldens.json");
  nlohmann::json j = nlohmann::json::parse(f);
  g.prompts = j["prompts"].get<std::vector<std::vector<int32_t>>>();
  g.greedy = j["greedy"].get<std::vector<std::vector<int32_t>>>();
  for (size_t i = 0; i < g.prompts.size(); ++i) {
    std::ifstream lf(g.dir + "/logits_" + std::to_string(i) + ".f32",
                     std::ios::binary | std::ios::ate);
    const size_t bytes = static_cast<size_t>(lf.tellg());
    lf.seekg(0);
    std::vector<float> out(bytes / 4);
    lf.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(bytes));
    g.logits.push_back(std::move(out));
  }
  return g;
}

double RelL2(const float* a, const float* b, int n) {
  double num = 0, den = 0;
  for (int i = 0; i < n; ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// With SRQ on the head's output, every logit is a multiple of the head's output quantum (before the
// softcap). Where an exact value sits within f32 rounding noise of a rounding boundary,
// transformers' float32 sums (order unknown) and our exact integer accumulation may round it
// differently; once such a flip lands in a cached key or a residual, later positions carry a small
// perturbation that moves some logits across the head's rounding boundaries. Such positions are
// accepted only if every logit is within two head quanta of transformers' (about 2% of a typical
// logit here) and at most half of them moved, and only after the first kExactPrefix positions of a
// prompt, which must match to 1e-4 like the dense fixtures. The count of such positions is recorded
// as a test property.
constexpr size_t kExactPrefix = 8;

bool IsSrqFlip(const Model& model, const float* ours, const float* ref, int V) {
  const float q = model.lm_head().out_scale;
  if (!(q > 0)) return false;
  const float cap = model.text().final_logit_softcapping.value_or(0.0f);
  auto uncap = [&](float l) {
    return cap > 0 ? cap * std::atanh(static_cast<double>(l) / cap) : l;
  };
  int flipped = 0;
  for (int v = 0; v < V; ++v) {
    if (cap > 0 && (std::fabs(ours[v]) > 0.95f * cap || std::fabs(ref[v]) > 0.95f * cap))
      return false;
    const double d = (uncap(ours[v]) - uncap(ref[v])) / q;
    const double k = std::nearbyint(d);
    if (std::fabs(d - k) > 1e-2 || std::fabs(k) > 2) return false;
    flipped += k != 0;
  }
  return flipped <= V / 2;
}

class ModelGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelGolden, LogitsAtEveryPositionMatchTransformers) {
  const Golden g = LoadGolden(GetParam());
  auto model = Model::Load(g.dir);
  const int V = model->text().vocab_size;
  for (size_t i = 0; i < g.prompts.size(); ++i) {
    std::vector<int32_t> seq = g.prompts[i];
    seq.insert(seq.end(), g.greedy[i].begin(), g.greedy[i].end() - 1);
    ASSERT_EQ(g.logits[i].size(), seq.size() * V);
    auto backend = CreateCpuReferenceBackend(*model, {.capacity = 1024});
    ForwardResult r;
    backend->Forward({.tokens = seq, .mode = OutputMode::kLogits, .all_positions = true}, &r);
    ASSERT_EQ(r.logits.size(), seq.size() * V);
    double worst = 0;
    int flipped_positions = 0;
    for (size_t t = 0; t < seq.size(); ++t) {
      const float* ours = &r.logits[t * V];
      const float* ref = &g.logits[i][t * V];
      const double e = RelL2(ours, ref, V);
      worst = std::max(worst, e);
      if (e <= 1e-4) continue;
      if (t >= kExactPrefix && IsSrqFlip(*model, ours, ref, V)) {
        ++flipped_positions;
        continue;
      }
      ADD_FAILURE() << GetParam() << " prompt " << i << " position " << t << ": rel L2 " << e;
    }
    RecordProperty("worst_rel_l2_prompt" + std::to_string(i), std::to_string(worst));
    RecordProperty("srq_flip_positions_prompt" + std::to_string(i), flipped_positions);
  }
}

TEST_P(ModelGolden, GreedyDecodeMatchesTransformers) {
  const Golden g = LoadGolden(GetParam());
  auto model = Model::Load(g.dir);
  for (size_t i = 0; i < g.prompts.size(); ++i) {
    auto backend = CreateCpuReferenceBackend(*model, {.capacity = 1024});
    ForwardResult r;
    backend->Forward({.tokens = g.prompts[i], .mode = OutputMode::kArgmax}, &r);
    std::vector<int32_t> got = {r.ids.back()};
    while (got.size() < g.greedy[i].size()) {
      const int32_t tok = got.back();
      backend->Forward({.tokens = std::span<const int32_t>(&tok, 1), .mode = OutputMode::kArgmax},
                       &r);
      got.push_back(r.ids.back());
    }
    EXPECT_EQ(got, g.greedy[i]) << GetParam() << " prompt " << i;
  }
}

TEST_P(ModelGolden, ChunkedPrefillAndRepeatRunsAreBitIdentical) {
  const Golden g = LoadGolden(GetParam());
  auto model = Model::Load(g.dir);
  const auto& prompt = g.prompts.back();
  std::vector<float> first;
  for (int slack : {1, 3, 0, 0}) {
    auto backend = CreateCpuReferenceBackend(*model, {.capacity = 1024, .slack = slack});
    ForwardResult r;
    backend->Forward({.tokens = prompt, .mode = OutputMode::kLogits, .all_positions = true}, &r);
    if (first.empty()) {
      first = r.logits;
    } else {
      ASSERT_EQ(r.logits.size(), first.size());
      EXPECT_EQ(0, std::memcmp(r.logits.data(), first.data(), first.size() * 4))
          << "slack " << slack;
    }
  }
}

std::vector<std::string> Fixtures() {
  std::vector<std::string> names;
  for (const auto& e :
       fs::directory_iterator(std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/model")) {
    if (fs::exists(e.path() / "goldens.json")) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

INSTANTIATE_TEST_SUITE_P(Transformers, ModelGolden, ::testing::ValuesIn(Fixtures()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace gemma
