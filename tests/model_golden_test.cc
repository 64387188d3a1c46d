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
#include "golden_util.h"
#include "model/model.h"

namespace gemma {
namespace {

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
    EXPECT_EQ(GreedyDecode(*backend, g.prompts[i], g.greedy[i].size()), g.greedy[i])
        << GetParam() << " prompt " << i;
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

INSTANTIATE_TEST_SUITE_P(Transformers, ModelGolden, ::testing::ValuesIn(Fixtures()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace gemma
