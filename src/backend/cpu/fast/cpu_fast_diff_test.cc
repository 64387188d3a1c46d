// Randomized differential decode test of the fast CPU backend against the CPU reference (issue
// 34): see tests/decode_diff_util.h. GEMMA_DIFF_CONFIGS=N runs N configurations of each format.
#include <gtest/gtest.h>

#include <memory>

#include "backend/cpu/fast/cpu_fast_backend.h"
#include "decode_diff_util.h"

namespace gemma {
namespace {

// Dense logits against the reference: design.md section 4's target.
constexpr double kDenseTol = 1e-4;

std::unique_ptr<Backend> MakeFast(const Model& model, const BackendOptions& opt) {
  return CreateCpuFastBackend(model, opt, /*threads=*/2);
}

TEST(CpuFastDecodeDiff, IssueLayoutDecodesLikeTheReference) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("gemma_fast_diff_issue_" + std::to_string(::getpid())))
                              .string();
  Synthesize({.out_dir = dir, .seed = 1, .shape = IssueSynthShape()});
  auto model = Model::Load(dir);
  const DiffOutcome o =
      RunDecodeDiff(*model, 1, DiffEnvInt("GEMMA_DIFF_STEPS", 300), kDenseTol,
                    [&](const BackendOptions& opt) { return MakeFast(*model, opt); });
  std::filesystem::remove_all(dir);
  std::printf("worst rel L2 %.3g, SRQ-flip positions %d, first inexact %d\n", o.worst, o.srq_flips,
              o.first_inexact);
}

TEST(CpuFastDecodeDiff, RandomConfigsDecodeLikeTheReference) {
  RunDiffConfigs(/*configs=*/6, /*first_seed=*/100, /*steps=*/250, kDenseTol, MakeFast);
}

}  // namespace
}  // namespace gemma
