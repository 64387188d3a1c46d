// The Vulkan backend against the CPU reference backend and the transformers goldens
// (tests/goldens/model/*): same greedy tokens, logits within 1e-3 relative L2 (QAT fixtures: or an
// SRQ rounding flip, see IsSrqFlip in golden_util.h), select and chunked prefill agree.
// Skips, with a visible message, only where no Vulkan device exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/backend.h"
#include "backend/vulkan/vulkan_backend.h"
#include "gemma/error.h"
#include "golden_util.h"
#include "model/model.h"

namespace gemma {
namespace {

constexpr double kTol = 1e-3;

// Returns nullptr (after GTEST_SKIP) when the machine has no Vulkan device.
std::unique_ptr<Backend> MakeVulkan(const Model& model, BackendOptions opt) {
  try {
    return CreateVulkanBackend(model, opt);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kDevice) return nullptr;
    throw;
  }
}

#define VULKAN_OR_SKIP(var, model, opt)                                         \
  auto var = MakeVulkan(model, opt);                                            \
  if (!var) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine"; \
  static_assert(true)

class VulkanGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(VulkanGolden, GreedyDecodeMatchesCpuAndTransformers) {
  const Golden g = LoadGolden(GetParam());
  auto model = Model::Load(g.dir);
  VULKAN_OR_SKIP(vk, *model, {.capacity = 256});
  for (size_t i = 0; i < g.prompts.size(); ++i) {
    auto cpu = CreateCpuReferenceBackend(*model, {.capacity = 256});
    vk->Reset();
    const auto ours = GreedyDecode(*vk, g.prompts[i], g.greedy[i].size());
    EXPECT_EQ(ours, GreedyDecode(*cpu, g.prompts[i], g.greedy[i].size()))
        << GetParam() << " prompt " << i;
    EXPECT_EQ(ours, g.greedy[i]) << GetParam() << " prompt " << i;
  }
}

// Logits at every position (prefill in chunks, then single-token decode steps) against the CPU
// reference and against transformers.
TEST_P(VulkanGolden, LogitsMatchCpuReference) {
  const Golden g = LoadGolden(GetParam());
  auto model = Model::Load(g.dir);
  const int V = model->text().vocab_size;
  VULKAN_OR_SKIP(vk, *model, {.capacity = 256});
  for (size_t i = 0; i < g.prompts.size(); ++i) {
    std::vector<int32_t> seq = g.prompts[i];
    seq.insert(seq.end(), g.greedy[i].begin(), g.greedy[i].end() - 1);
    auto cpu = CreateCpuReferenceBackend(*model, {.capacity = 256});
    ForwardResult want;
    cpu->Forward({.tokens = seq, .mode = OutputMode::kLogits, .all_positions = true}, &want);
    // First half as one prefill, the rest token by token (the decode command buffer).
    vk->Reset();
    const size_t half = seq.size() / 2;
    ForwardResult got, step;
    vk->Forward({.tokens = std::span<const int32_t>(seq.data(), half),
                 .mode = OutputMode::kLogits,
                 .all_positions = true},
                &got);
    for (size_t t = half; t < seq.size(); ++t) {
      vk->Forward({.tokens = std::span<const int32_t>(&seq[t], 1), .mode = OutputMode::kLogits},
                  &step);
      got.logits.insert(got.logits.end(), step.logits.begin(), step.logits.end());
    }
    ASSERT_EQ(got.logits.size(), want.logits.size());
    ASSERT_EQ(got.logits.size(), g.logits[i].size());
    double worst = 0;
    int flips = 0;
    for (size_t t = 0; t < seq.size(); ++t) {
      const float* ours = &got.logits[t * V];
      const float* cpu_ref = &want.logits[t * V];
      for (const float* ref : {cpu_ref, &g.logits[i][t * V]}) {
        const double e = RelL2(ours, ref, V);
        worst = std::max(worst, e);
        if (e <= kTol) continue;
        if (IsSrqFlip(*model, ours, ref, V)) {
          ++flips;
          continue;
        }
        ADD_FAILURE() << GetParam() << " prompt " << i << " position " << t << ": rel L2 " << e
                      << (ref == cpu_ref ? " vs CPU" : " vs transformers");
      }
    }
    RecordProperty("worst_rel_l2_prompt" + std::to_string(i), std::to_string(worst));
    RecordProperty("srq_flip_positions_prompt" + std::to_string(i), flips);
  }
}

TEST_P(VulkanGolden, SelectMatchesCpuReference) {
  const Golden g = LoadGolden(GetParam());
  auto model = Model::Load(g.dir);
  const int V = model->text().vocab_size;
  VULKAN_OR_SKIP(vk, *model, {.capacity = 256});
  auto cpu = CreateCpuReferenceBackend(*model, {.capacity = 256});
  const auto& prompt = g.prompts.back();
  std::vector<uint64_t> allowed((V + 63) / 64, 0);
  for (int v = 3; v < V; v += 7) allowed[v >> 6] |= 1ull << (v & 63);
  ForwardResult a, b;
  cpu->Forward({.tokens = prompt, .mode = OutputMode::kSelect, .allowed = &allowed}, &a);
  vk->Forward({.tokens = prompt, .mode = OutputMode::kSelect, .allowed = &allowed}, &b);
  ASSERT_EQ(b.ids.size(), 1u);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_NEAR(a.logprobs[0], b.logprobs[0], 1e-3 * std::max(1.0f, std::fabs(a.logprobs[0])));
  // A decode step through the pre-recorded select command buffer.
  const int32_t tok = b.ids[0];
  cpu->Forward({.tokens = std::span<const int32_t>(&tok, 1),
                .mode = OutputMode::kSelect,
                .allowed = &allowed},
               &a);
  vk->Forward({.tokens = std::span<const int32_t>(&tok, 1),
               .mode = OutputMode::kSelect,
               .allowed = &allowed},
              &b);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_NEAR(a.logprobs[0], b.logprobs[0], 1e-3 * std::max(1.0f, std::fabs(a.logprobs[0])));
  // Nothing allowed: a typed error, like the CPU backend.
  std::fill(allowed.begin(), allowed.end(), 0);
  try {
    vk->Forward({.tokens = std::span<const int32_t>(&tok, 1),
                 .mode = OutputMode::kSelect,
                 .allowed = &allowed},
                &b);
    ADD_FAILURE() << "expected kConstraint";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kConstraint);
  }
}

// Small slack: many prefill chunks and ring wrap-around; Truncate within the slack is exact.
TEST_P(VulkanGolden, ChunkedPrefillAndTruncateMatchCpu) {
  const Golden g = LoadGolden(GetParam());
  auto model = Model::Load(g.dir);
  const int V = model->text().vocab_size;
  const auto& prompt = g.prompts.back();
  for (int slack : {1, 3}) {
    VULKAN_OR_SKIP(vk, *model, (BackendOptions{.capacity = 256, .slack = slack}));
    auto cpu = CreateCpuReferenceBackend(*model, {.capacity = 256, .slack = slack});
    ForwardResult a, b;
    cpu->Forward({.tokens = prompt, .mode = OutputMode::kLogits, .all_positions = true}, &a);
    vk->Forward({.tokens = prompt, .mode = OutputMode::kLogits, .all_positions = true}, &b);
    ASSERT_EQ(a.logits.size(), b.logits.size());
    for (size_t t = 0; t < prompt.size(); ++t) {
      const double e = RelL2(&b.logits[t * V], &a.logits[t * V], V);
      EXPECT_TRUE(e <= kTol || IsSrqFlip(*model, &b.logits[t * V], &a.logits[t * V], V))
          << GetParam() << " slack " << slack << " position " << t << ": " << e;
    }
    const int n = vk->cached() - slack;
    EXPECT_EQ(cpu->Truncate(n), vk->Truncate(n));
    EXPECT_EQ(vk->cached(), n);
    const int32_t tok = prompt[n];
    cpu->Forward({.tokens = std::span<const int32_t>(&tok, 1), .mode = OutputMode::kLogits}, &a);
    vk->Forward({.tokens = std::span<const int32_t>(&tok, 1), .mode = OutputMode::kLogits}, &b);
    const double e = RelL2(b.logits.data(), a.logits.data(), V);
    EXPECT_TRUE(e <= kTol || IsSrqFlip(*model, b.logits.data(), a.logits.data(), V))
        << GetParam() << " after truncate: " << e;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, VulkanGolden, ::testing::ValuesIn(Fixtures()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace gemma
