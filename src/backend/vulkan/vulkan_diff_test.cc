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

TEST(VulkanDecodeDiff, IssueLayoutDecodesLikeTheReference) {
  std::vector<uint64_t> seeds = {1, 2};
  if (const int s = DiffEnvInt("GEMMA_DIFF_SEED", 0); s > 0) seeds = {static_cast<uint64_t>(s)};
  for (const uint64_t seed : seeds) {
    const std::string dir = (std::filesystem::temp_directory_path() /
                             ("gemma_diff_issue_" + std::to_string(::getpid())))
                                .string();
    Synthesize({.out_dir = dir, .seed = seed, .shape = IssueSynthShape()});
    auto model = Model::Load(dir);
    const DiffOutcome o =
        RunDecodeDiff(*model, seed, DiffEnvInt("GEMMA_DIFF_STEPS", 200), kDenseTol,
                      [&](const BackendOptions& opt) { return MakeVulkan(*model, opt); });
    std::filesystem::remove_all(dir);
    if (o.steps == 0 && !HasFailure()) GTEST_SKIP() << "SKIPPED: no usable Vulkan device";
    std::printf("seed %d: worst rel L2 %.3g, SRQ-flip positions %d, first inexact %d\n",
                static_cast<int>(seed), o.worst, o.srq_flips, o.first_inexact);
    if (HasFailure()) return;
  }
}

TEST(VulkanDecodeDiff, RandomConfigsDecodeLikeTheReference) {
  RunDiffConfigs(/*configs=*/2, /*first_seed=*/100, /*steps=*/200, kDenseTol, MakeVulkan);
}

}  // namespace
}  // namespace gemma
