// Randomized differential decode test of the Vulkan backend against the CPU reference (issue 34):
// see tests/decode_diff_util.h. GEMMA_DIFF_CONFIGS=N runs N configurations of each format
// (bench/vulkan/diff_h200.sh runs hundreds on the H200).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backend/vulkan/vulkan_backend.h"
#include "decode_diff_util.h"
#include "gemma/error.h"

namespace gemma {
namespace {

// Dense logits against the reference: the contract of vulkan_golden_test (docs/vulkan.md, Numerics:
// f32 sums).
constexpr double kDenseTol = 1e-3;

std::unique_ptr<Backend> MakeVulkan(const Model& model, const BackendOptions& opt) {
  try {
    return CreateVulkanBackend(model, opt);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kDevice) return nullptr;
    throw;
  }
}

// Issue 34's layout (tests/decode_diff_util.h IssueSynthShape), 200 one-token steps each:
// - seed 1 (a 1-token prompt, slack 12): at position 94 layer 3's gate input is -42.5000018 of its
//   quantum, which the reference's f32 quotient rounds to -42.5 and then to -42; SRQ quantization
//   through ExactDivR, whose fma lavapipe evaluates unfused, gave -43 (11 head quanta on 577 of 640
//   logits);
// - seed 2 (a 12-token prompt, slack 1): at position 142 the KV-shared layer 5's attention output
//   element 60 is -10.4999982 of o_proj's input quantum; attn_fused.comp's f32 softmax and sums
//   moved it past -10.5 (2 head quanta on 377 logits: within the SRQ allowance at that step, so
//   these cases ask for exactness: the decode path now computes what the reference computes).
TEST(VulkanDecodeDiff, IssueLayoutDecodesLikeTheReference) {
  struct Case {
    uint64_t seed;
    int prompt, slack;
  };
  std::vector<Case> cases = {{1, 0, -1}, {2, 12, 1}};
  if (const int s = DiffEnvInt("GEMMA_DIFF_SEED", 0); s > 0) cases = {{uint64_t(s), 0, -1}};
  for (const Case& c : cases) {
    SCOPED_TRACE("seed " + std::to_string(c.seed));
    const std::string dir = (std::filesystem::temp_directory_path() /
                             ("gemma_diff_issue_" + std::to_string(::getpid())))
                                .string();
    Synthesize({.out_dir = dir, .seed = c.seed, .shape = IssueSynthShape()});
    auto model = Model::Load(dir);
    const DiffOutcome o = RunDecodeDiff(
        *model, c.seed, DiffEnvInt("GEMMA_DIFF_STEPS", 200), kDenseTol,
        [&](const BackendOptions& opt) { return MakeVulkan(*model, opt); }, c.prompt, c.slack,
        /*exact_qat=*/true);
    std::filesystem::remove_all(dir);
    if (o.steps == 0 && !HasFailure()) GTEST_SKIP() << "SKIPPED: no usable Vulkan device";
    std::printf("seed %d: worst rel L2 %.3g, SRQ-flip positions %d, first inexact %d\n",
                static_cast<int>(c.seed), o.worst, o.srq_flips, o.first_inexact);
    if (HasFailure()) return;
  }
}

// Random seed 1001's QAT model (bf16 embedding tied as the head, so no allowance: every step
// exact): at position 107 a GELU in an inner layer rounded differently (the CPU backends used
// glibc's tanhf, not correctly rounded in ~20% of inputs; the shaders' TanhF is), which flipped a
// down-projection SRQ rounding: all 512 logits moved, rel L2 0.033, on lavapipe as on the H200.
TEST(VulkanDecodeDiff, TanhRoundingCaseDecodesExactly) {
  DiffModel m(1001, /*qat=*/true);
  const DiffOutcome o = RunDecodeDiff(
      *m.model, 1001, 120, kDenseTol,
      [&](const BackendOptions& opt) { return MakeVulkan(*m.model, opt); }, 0, -1,
      /*exact_qat=*/true);
  if (o.steps == 0 && !HasFailure()) GTEST_SKIP() << "SKIPPED: no usable Vulkan device";
  EXPECT_EQ(o.first_inexact, -1);
}

TEST(VulkanDecodeDiff, RandomConfigsDecodeLikeTheReference) {
  RunDiffConfigs(/*configs=*/1, /*first_seed=*/100, /*steps=*/200, kDenseTol, MakeVulkan);
}

}  // namespace
}  // namespace gemma
