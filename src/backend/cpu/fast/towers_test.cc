// The fast vision tower (kept panels, buffers kept across images, fused clamps) against the
// reference tower, and against itself: per-call panels, other images in between.
#include "backend/cpu/fast/towers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/cpu/vision_ops.h"
#include "core/thread_pool.h"
#include "golden_util.h"
#include "model/model.h"
#include "model/synth.h"

namespace gemma {
namespace {

std::vector<float> Pixels(const VisionConfig& c, int ph, int pw, uint32_t seed) {
  std::vector<float> px(static_cast<size_t>(ph) * pw * 3 * c.patch_size * c.patch_size);
  for (size_t i = 0; i < px.size(); ++i)
    px[i] = static_cast<float>(((i + seed) * 2654435761u) >> 20 & 255) / 255.0f;
  return px;
}

// ref::VisionTowerForward and ref::EmbedVision on `kernels`.
std::vector<float> Reference(const VisionTower& t, int ph, int pw, const std::vector<float>& px,
                             const ref::VisionKernels& kernels) {
  const int k = t.config.pooling_kernel_size;
  const std::vector<float> pooled = ref::VisionTowerForward(t, {ph, pw, px.data()}, kernels);
  return ref::EmbedVision(t, pooled, ph * pw / (k * k), kernels);
}

// Per preset: the dense tower (panels, the attention on the f32 GEMM from 64 patches) and the
// QAT one (integer kernels for SRQ inputs, panels of codes for the rest, f64 attention).
class FastVisionTowerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FastVisionTowerTest, MatchesReferenceAndRepeatsAcrossImagesBitForBit) {
  const std::string dir = ::testing::TempDir() + "/fast_towers_" + GetParam();
  Synthesize({.preset = GetParam(), .out_dir = dir, .seed = 5, .vocab_size = 1024});
  auto model = Model::Load(dir);
  ASSERT_NE(model->vision(), nullptr) << model->vision_error();
  // Bounds that clip: q, k and v with different input bounds (a clamped copy each, v none), gate
  // and up with the same (clamped in place), o's input and outputs, down's input.
  VisionTower t = *model->vision();
  for (VisionLayerWeights& w : t.layers) {
    w.q.in_min = -0.5f, w.q.in_max = 0.5f;
    w.k.in_min = -1.0f, w.k.in_max = 0.25f;
    w.v.in_min = -INFINITY, w.v.in_max = INFINITY;
    w.gate.in_min = w.up.in_min = -0.3f;
    w.gate.in_max = w.up.in_max = 0.4f;
    w.o.in_min = -0.3f, w.o.in_max = 0.2f;
    w.q.out_min = -0.2f, w.o.out_max = 0.01f, w.up.out_min = -0.05f;
    w.down.in_min = -0.05f, w.down.in_max = 0.08f;
  }
  const VisionConfig& c = t.config;
  const int k = c.pooling_kernel_size;
  ThreadPool pool(2);
  fast::FastVisionTower kept(t, pool, /*keep_panels=*/true);
  EXPECT_EQ(kept.panel_bytes(), 0u);  // packed on first use
  // 9 x 9 pooling blocks (the attention on the f32 GEMM), then 2 x 3 (its f64 path), then again.
  struct Case {
    int ph, pw;
    uint32_t seed;
  };
  std::vector<std::vector<float>> first;
  for (int round = 0; round < 2; ++round) {
    int i = 0;
    for (const Case& cs : {Case{9 * k, 9 * k, 1}, Case{2 * k, 3 * k, 2}}) {
      SCOPED_TRACE(::testing::Message() << cs.ph << " x " << cs.pw << " patches, round " << round);
      const std::vector<float> px = Pixels(c, cs.ph, cs.pw, cs.seed);
      std::vector<float> got, once;
      kept.Encode({cs.ph, cs.pw, px.data()}, &got);
      fast::FastVisionTower(t, pool, /*keep_panels=*/false)
          .Encode({cs.ph, cs.pw, px.data()}, &once);
      ASSERT_EQ(got.size(), once.size());
      EXPECT_EQ(got, once) << "kept panels and per-call panels";
      if (round == 0) {
        // The reference's data flow on the same kernels (the path this tower replaces): equal
        // but for RMSNorm's f64 summation order.
        const fast::FastVisionKernels kern(pool, fast::VisionF32Ops(t));
        const std::vector<float> flow = Reference(t, cs.ph, cs.pw, px, kern);
        const std::vector<float> want = Reference(t, cs.ph, cs.pw, px, ref::VisionKernels());
        ASSERT_EQ(got.size(), want.size());
        const double e_flow = RelL2(got.data(), flow.data(), flow.size());
        const double e_ref = RelL2(got.data(), want.data(), want.size());
        std::printf(
            "%s, %d x %d patches: rel L2 %.2e vs the reference's data flow on the fast "
            "kernels, %.2e vs the reference (that flow: %.2e)\n",
            GetParam().c_str(), cs.ph, cs.pw, e_flow, e_ref,
            RelL2(flow.data(), want.data(), want.size()));
        EXPECT_LE(e_flow, 1e-6);
        // (Tighter o / down input bounds, where almost every input saturates, leave sums that
        // cancel ahead of a norm: ~5e-4 then, for the data flow above as much.)
        EXPECT_LE(e_ref, 1e-4);
        first.push_back(got);
      } else {
        EXPECT_EQ(got, first[i]) << "the same image after another one";
      }
      ++i;
    }
  }
  EXPECT_GT(kept.panel_bytes(), 0u);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Presets, FastVisionTowerTest, ::testing::Values("tiny", "tiny-qat"));

}  // namespace
}  // namespace gemma
