// The resident audio tower (VulkanTower::EncodeAudioResident) against the CPU reference
// (ref::AudioTowerForward + ref::EmbedAudio) on random small towers: layer counts, widths, heads,
// SSCP channels, attention context, light-conv kernel, clamp bounds, weight kinds (f32, bf16,
// f16, int8 / int4 / int2 with row scales), clip lengths (very short ones, ones not a multiple of
// 4) with and without padding frames. Bound: every soft token within rel. L2 1e-4 (f32 dot
// products on the device against the reference's double ones; ~1e-6 seen).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/audio_ops.h"
#include "backend/vulkan/vk_device.h"
#include "backend/vulkan/vulkan_test_util.h"
#include "backend/vulkan/vulkan_tower.h"
#include "core/thread_pool.h"
#include "gemma/error.h"
#include "golden_util.h"  // RelL2
#include "model/model.h"

namespace gemma {
namespace {

// A random audio tower whose weights it holds.
class RandomAudioTower {
 public:
  RandomAudioTower(uint32_t seed, bool qat) : rng_(seed), qat_(qat) {
    AudioConfig& c = t_.config;
    const int heads_hd[][2] = {{1, 16}, {2, 8},  {2, 16}, {4, 8},
                               {3, 16}, {1, 64}, {2, 24}, {2, 128}};
    const auto& hh = heads_hd[Int(0, 7)];
    c.num_heads = hh[0];
    c.hidden_size = hh[0] * hh[1];
    c.num_layers = Pick({0, 1, 2, 2, 3});
    c.sscp_channels0 = Pick({4, 8, 12});
    c.sscp_channels1 = Pick({2, 4, 6});
    c.conv_kernel_size = Int(1, 6);
    c.context_left = Pick({2, 5, 13, 13, 20, 65});
    c.chunk_size = c.context_left - 1;
    c.logit_cap = Pick({50.0f, 50.0f, 3.0f});
    c.gradient_clipping = Pick({1e10f, 1e10f, 4.0f, 0.75f});
    c.output_proj_dims = Pick({16, 40});
    const int D = c.hidden_size, C0 = c.sscp_channels0, C1 = c.sscp_channels1;
    t_.conv0 = Floats(size_t(C0) * 9, 1.0f / 3);
    t_.conv1 = Floats(size_t(C1) * C0 * 9, 1.0f / std::sqrt(9.0f * C0));
    t_.norm0 = Norm(C0);
    t_.norm1 = Norm(C1);
    t_.input_proj = Lin(D, 32 * C1);
    for (int l = 0; l < c.num_layers; ++l) {
      AudioLayerWeights w;
      for (AudioLayerWeights::FeedForward* ff : {&w.ff1, &w.ff2}) {
        ff->pre_norm = Norm(D);
        ff->post_norm = Norm(D);
        ff->up = Clipped(4 * D, D);
        ff->down = Clipped(D, 4 * D);
      }
      w.norm_pre_attn = Norm(D);
      w.norm_post_attn = Norm(D);
      w.norm_out = Norm(D);
      w.q = Clipped(D, D);
      w.k = Clipped(D, D);
      w.v = Clipped(D, D);
      w.post = Clipped(D, D);
      w.relative_k = Lin(D, D);
      w.per_dim_scale = Floats(size_t(c.head_dim()), 1.0f);
      w.lconv_pre_norm = Norm(D);
      w.lconv_conv_norm = Norm(D);
      w.lconv_start = Clipped(2 * D, D);
      w.lconv_end = Clipped(D, D);
      w.dwconv = Floats(size_t(D) * c.conv_kernel_size, 1.0f / c.conv_kernel_size);
      t_.layers.push_back(std::move(w));
    }
    t_.output_proj = Lin(c.output_proj_dims, D);
    t_.output_bias = Floats(size_t(c.output_proj_dims), 0.1f);
    t_.embed_proj = Lin(Pick({24, 64}), c.output_proj_dims);
  }

  const AudioTower& tower() const { return t_; }
  std::mt19937& rng() { return rng_; }
  std::string Describe() const {
    const AudioConfig& c = t_.config;
    char b[300];
    std::snprintf(b, sizeof b,
                  "%d layers of %d, %d heads, sscp %d/%d, context %d, kernel %d, cap %g, clip %g, "
                  "out %d, embed %d, %s",
                  c.num_layers, c.hidden_size, c.num_heads, c.sscp_channels0, c.sscp_channels1,
                  c.context_left, c.conv_kernel_size, c.logit_cap, c.gradient_clipping,
                  c.output_proj_dims, t_.embed_proj.rows, qat_ ? "quantized" : "dense");
    return b;
  }

 private:
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  template <typename T>
  T Pick(std::initializer_list<T> v) {
    return *(v.begin() + Int(0, static_cast<int>(v.size()) - 1));
  }
  float Unit() { return std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng_); }
  std::vector<float> Floats(size_t n, float scale) {
    std::vector<float> v(n);
    for (float& x : v) x = scale * Unit();
    return v;
  }
  std::vector<float> Norm(int n) {
    std::vector<float> v(n);
    for (float& x : v) x = 1.0f + 0.25f * Unit();
    return v;
  }
  // rows x cols of weights ~ U(-1, 1) / sqrt(cols), in a random kind (quantized: the QAT layout's
  // kinds, dense: f32 / bf16 / f16).
  gemma::Linear Lin(int rows, int cols) {
    const WeightKind kind =
        qat_ ? Pick({WeightKind::kQ8, WeightKind::kQ4, WeightKind::kQ2, WeightKind::kBF16})
             : Pick({WeightKind::kF32, WeightKind::kBF16, WeightKind::kF16});
    const int bits = WeightKindBits(kind);
    gemma::Linear lin;
    lin.name = "random";
    lin.kind = kind;
    lin.rows = rows;
    lin.cols = cols;
    lin.row_bytes = size_t(cols) * bits / 8;
    std::vector<uint8_t>& b = bytes_.emplace_back(lin.row_bytes * rows, 0);
    const float amp = 1.0f / std::sqrt(static_cast<float>(cols));
    if (IsQuantized(kind)) {
      const int half = 1 << (bits - 1);  // codes -half .. half - 1
      std::vector<float>& s = scales_.emplace_back(rows);
      for (float& v : s) v = amp * (0.75f + 0.25f * Unit()) / half;
      lin.row_scale = s.data();
      for (int r = 0; r < rows; ++r) {
        uint8_t* row = &b[size_t(r) * lin.row_bytes];
        for (int i = 0; i < cols; ++i) {
          const int code = Int(-half, half - 1);
          if (kind == WeightKind::kQ8) {
            row[i] = static_cast<uint8_t>(static_cast<int8_t>(code));
          } else {
            const int per = 8 / bits;
            row[i / per] |= static_cast<uint8_t>((code + half) << (bits * (i % per)));
          }
        }
      }
    } else {
      for (size_t i = 0; i < size_t(rows) * cols; ++i) {
        const float v = amp * Unit();
        uint32_t u;
        std::memcpy(&u, &v, 4);
        if (kind == WeightKind::kF32) {
          std::memcpy(&b[i * 4], &v, 4);
        } else if (kind == WeightKind::kBF16) {
          const uint16_t h = static_cast<uint16_t>(u >> 16);
          std::memcpy(&b[i * 2], &h, 2);
        } else {
          const uint16_t h = F16(v);
          std::memcpy(&b[i * 2], &h, 2);
        }
      }
    }
    lin.data = b.data();
    return lin;
  }
  // f32 -> f16 bits (normal range only: the weights here are within it), truncated.
  static uint16_t F16(float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const int e = static_cast<int>((u >> 23) & 0xFF) - 127 + 15;
    if (e <= 0) return static_cast<uint16_t>(sign);
    return static_cast<uint16_t>(sign | (uint32_t(e) << 10) | ((u >> 13) & 0x3FFu));
  }
  // A clippable linear, its bounds finite or not at random.
  ClippedLinear Clipped(int rows, int cols) {
    ClippedLinear cl;
    cl.lin = Lin(rows, cols);
    const float inf = std::numeric_limits<float>::infinity();
    if (Int(0, 2) == 0) {
      cl.in_min = -0.5f - 2.0f * (Unit() + 1.0f);
      cl.in_max = 0.5f + 2.0f * (Unit() + 1.0f);
    }
    if (Int(0, 2) == 0) {
      cl.out_min = Int(0, 1) ? -inf : -0.3f - (Unit() + 1.0f);
      cl.out_max = 0.3f + (Unit() + 1.0f);
    }
    return cl;
  }

  std::mt19937 rng_;
  bool qat_;
  AudioTower t_;
  std::deque<std::vector<uint8_t>> bytes_;
  std::deque<std::vector<float>> scales_;
};

TEST(VulkanAudioTower, RandomTowersMatchReference) {
  const std::unique_ptr<vk::Device> dev = MakeDeviceOrNull();
  if (!dev) GTEST_SKIP() << "SKIPPED: no usable Vulkan device";
  ThreadPool pool(2);
  // One tower object for every model (its buffers regrow and its kept weights pile up, as a
  // process serving several models does); the random towers stay alive until the end.
  vulkan_internal::VulkanTower tower(*dev, pool);
  std::deque<RandomAudioTower> towers;
  double worst_all = 0;
  for (uint32_t seed = 1; seed <= 24; ++seed) {
    RandomAudioTower& rt = towers.emplace_back(seed * 7919u, seed % 2 == 0);
    const AudioTower& t = rt.tower();
    SCOPED_TRACE(rt.Describe());
    // Clip lengths: very short ones, ones not a multiple of 4, a few valid frames at the end
    // (n = 0: no soft tokens), with and without padding frames.
    std::mt19937& rng = rt.rng();
    const std::vector<int> lengths = {1, 2, 3, 6, 13, 37, 50, 64, 81, 101, 203, 290};
    // (long attention contexts get clips long enough to fill them)
    const int frames =
        t.config.context_left > 13
            ? 290
            : lengths[std::uniform_int_distribution<size_t>(0, lengths.size() - 1)(rng)];
    for (int pad : {0, 1}) {
      const int valid =
          pad ? std::uniform_int_distribution<int>(0, frames)(rng) : frames;  // (a prefix)
      std::vector<float> mel(size_t(frames) * 128);
      std::uniform_real_distribution<float> u(-6.0f, 2.0f);
      for (float& m : mel) m = u(rng);
      std::vector<uint8_t> mask(frames, 0);
      std::fill(mask.begin(), mask.begin() + valid, 1);
      const AudioMel in{frames, mel.data(), mask.data()};
      std::vector<float> got;
      ASSERT_TRUE(tower.EncodeAudioResident(t, in, &got));
      const std::vector<float> out = ref::AudioTowerForward(t, in);
      const int n = static_cast<int>(out.size() / t.config.output_proj_dims);
      const std::vector<float> want = ref::EmbedAudio(t, out, n);
      ASSERT_EQ(got.size(), want.size()) << frames << " frames, " << valid << " valid";
      const int E = t.embed_proj.rows;
      double worst = 0;
      for (int i = 0; i < n; ++i)
        worst = std::max(worst, RelL2(&got[size_t(i) * E], &want[size_t(i) * E], E));
      std::printf("%s; %d frames (%d valid): %d soft tokens, worst rel L2 %.2e\n",
                  rt.Describe().c_str(), frames, valid, n, worst);
      EXPECT_LE(worst, 1e-4) << frames << " frames, " << valid << " valid";
      worst_all = std::max(worst_all, worst);
    }
  }
  std::printf("worst soft token over every tower: rel L2 %.2e\n", worst_all);
}

// The reference's input errors, raised the same way.
TEST(VulkanAudioTower, RejectsWhatTheReferenceRejects) {
  const std::unique_ptr<vk::Device> dev = MakeDeviceOrNull();
  if (!dev) GTEST_SKIP() << "SKIPPED: no usable Vulkan device";
  ThreadPool pool(2);
  vulkan_internal::VulkanTower tower(*dev, pool);
  RandomAudioTower rt(5, false);
  std::vector<float> mel(size_t(16) * 128, 0.5f);
  std::vector<uint8_t> mask(16, 1);
  mask[4] = 0;  // post-SSCP frame 1 invalid, frame 2 valid: not a prefix
  std::vector<float> soft;
  for (const AudioMel& in :
       {AudioMel{0, mel.data(), mask.data()}, AudioMel{16, mel.data(), mask.data()}}) {
    try {
      tower.EncodeAudioResident(rt.tower(), in, &soft);
      ADD_FAILURE() << "no error for " << in.frames << " frames";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    }
  }
}

}  // namespace
}  // namespace gemma
