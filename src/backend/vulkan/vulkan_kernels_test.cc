// The Vulkan backend's kernels against the reference ops and against each other: linears of every
// kind and token count, prompt attention, the one-token fusions and staging layouts.
#include "backend/vulkan/vulkan_test_util.h"
#include "core/dtype.h"

namespace gemma {
namespace {

// Per-kernel checks of the linear kernels against the reference ops: every weight kind, with and
// without SRQ, one token (decode matvec), a few tokens (multi-token matvec) and 8+ tokens (tiled
// kernel, partial tiles). Integer (SRQ) paths must be bit-exact; dense paths within f32 rounding.
struct LinearCase {
  const char* fixture;
  const char* what;
  std::function<const Linear&(const Model&)> pick;
};

std::vector<float> RandomInput(int n, int cols, uint32_t seed, float scale) {
  std::vector<float> x(size_t(n) * cols);
  uint32_t s = seed;
  for (float& v : x) {
    s = s * 1664525u + 1013904223u;
    v = scale * (static_cast<float>(s >> 8) / 16777216.0f * 2.0f - 1.0f);
  }
  return x;
}

TEST(VulkanKernels, LinearMatchesReferenceForEveryKindAndTokenCount) {
  const std::vector<LinearCase> cases = {
      {"tiny_qat", "q4 srq (q_proj)",
       [](const Model& m) -> const Linear& { return m.layer_weights()[0].q; }},
      {"tiny_qat", "q2 srq (wide down)",
       [](const Model& m) -> const Linear& { return m.layer_weights()[5].down; }},
      {"tiny_qat", "q8 srq (ple gate)",
       [](const Model& m) -> const Linear& { return m.layer_weights()[1].ple_gate; }},
      {"tiny_qat", "q8 srq (ple proj)",
       [](const Model& m) -> const Linear& { return m.layer_weights()[1].ple_proj; }},
      {"tiny_qat", "q2 srq (lm head)", [](const Model& m) -> const Linear& { return m.lm_head(); }},
      {"tiny_qat", "bf16 (ple model proj)",
       [](const Model& m) -> const Linear& { return m.ple_model_proj(); }},
      {"tiny_dense_f32_noshare", "f32",
       [](const Model& m) -> const Linear& { return m.layer_weights()[0].gate; }},
      {"tiny_e4b_like_f16", "f16",
       [](const Model& m) -> const Linear& { return m.layer_weights()[0].o; }},
      {"tiny_dense_bf16", "bf16",
       [](const Model& m) -> const Linear& { return m.layer_weights()[0].down; }},
  };
  // GEMMA_VULKAN_CM_SPLITK=2: where matrix units run the prefill linears (not on lavapipe), every
  // K tile is its own split (exact int32 partial sums added atomically). One backend per fixture
  // and setting.
  for (const char* splitk : {"1", "2"}) {
    SCOPED_TRACE(std::string("GEMMA_VULKAN_CM_SPLITK=") + splitk);
    std::string loaded;
    std::unique_ptr<Backend> vk;
    std::shared_ptr<Model> model;
    for (const LinearCase& c : cases) {
      if (std::strcmp(splitk, "2") == 0 && std::strcmp(c.fixture, "tiny_qat") != 0) continue;
      if (loaded != c.fixture) {
        vk.reset();
        model = LoadFixture(c.fixture);
        vk = MakeVulkanWith(*model, {{"GEMMA_VULKAN_CM_SPLITK", splitk}}, {.capacity = 128});
        loaded = c.fixture;
      }
      if (!vk) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
      const Linear& lin = c.pick(*model);
      // Inputs spanning a few hundred SRQ steps, so quantization rounds and clamps.
      const float scale = lin.in_scale > 0 ? 200 * lin.in_scale : 1.0f;
      for (int n : {1, 3, 8, 20, 33, 70, 200}) {
        const auto x = RandomInput(n, lin.cols, 7u * n + lin.rows, scale);
        std::vector<float> want(size_t(n) * lin.rows);
        ref::LinearForward(lin, x.data(), n, want.data());
        const auto got = VulkanLinearForTest(*vk, lin, nullptr, x.data(), n, 0);
        ASSERT_EQ(got.size(), want.size());
        const bool exact = IsQuantized(lin.kind) && lin.in_scale > 0;
        if (exact) {
          int diff = 0;
          for (size_t i = 0; i < got.size(); ++i) diff += got[i] != want[i];
          EXPECT_EQ(diff, 0) << c.what << " n=" << n;
        } else {
          EXPECT_LT(RelL2(got.data(), want.data(), static_cast<int>(got.size())), 1e-6)
              << c.what << " n=" << n;
        }
      }
    }
  }
}

TEST(VulkanKernels, GateUpEpilogueMatchesReference) {
  auto model = LoadFixture("tiny_qat");
  auto vk = MakeVulkan(*model);
  if (!vk) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
  for (int layer : {0, 5}) {  // int4 and int2 MLPs
    const LayerWeights& w = model->layer_weights()[layer];
    for (int n : {1, 3, 9, 70, 200}) {
      const auto x = RandomInput(n, w.gate.cols, 11u + n, 150 * w.gate.in_scale);
      std::vector<float> g(size_t(n) * w.gate.rows), u(g.size());
      ref::LinearForward(w.gate, x.data(), n, g.data());
      ref::LinearForward(w.up, x.data(), n, u.data());
      const auto got = VulkanLinearForTest(*vk, w.gate, &w.up, x.data(), n, 1);
      ASSERT_EQ(got.size(), g.size());
      for (size_t i = 0; i < g.size(); ++i) {
        const float want = ref::GeluTanh(g[i]) * u[i];
        EXPECT_NEAR(got[i], want, 2e-6f * std::max(1.0f, std::fabs(want)))
            << "layer " << layer << " n=" << n << " i=" << i;
      }
    }
  }
}

// Dense (bf16 / f16) prompt linears, alone and as the gate/up pair, over token rows whose
// magnitudes span 1e-5 .. 1e5 (where matrix units run them, the inputs are split into two f16
// terms under a per-token power-of-two scale: f16 alone would overflow or lose the small rows):
// within f32 rounding of the reference ops, row by row.
TEST(VulkanKernels, DenseLinearsOverWideInputRangesMatchReference) {
  struct DenseCase {
    const char* fixture;
    int layer;
  };
  for (const DenseCase& c : {DenseCase{"tiny_dense_bf16", 0}, DenseCase{"tiny_e4b_like_f16", 1}}) {
    SCOPED_TRACE(c.fixture);
    auto model = LoadFixture(c.fixture);
    auto vk = MakeVulkan(*model);
    if (!vk) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
    const LayerWeights& w = model->layer_weights()[c.layer];
    for (int n : {8, 37, 200}) {
      auto x = RandomInput(n, w.gate.cols, 29u + n, 1.0f);
      for (int t = 0; t < n; ++t) {
        const float mag = std::pow(10.0f, static_cast<float>(t % 11) - 5.0f);
        for (int k = 0; k < w.gate.cols; ++k) x[size_t(t) * w.gate.cols + k] *= mag;
      }
      const int rows = w.gate.rows;
      std::vector<float> g(size_t(n) * rows), u(g.size());
      ref::LinearForward(w.gate, x.data(), n, g.data());
      ref::LinearForward(w.up, x.data(), n, u.data());
      const auto got = VulkanLinearForTest(*vk, w.gate, nullptr, x.data(), n, 0);
      const auto got2 = VulkanLinearForTest(*vk, w.gate, &w.up, x.data(), n, 1);
      ASSERT_EQ(got.size(), g.size());
      ASSERT_EQ(got2.size(), g.size());
      std::vector<float> want2(g.size());
      for (size_t i = 0; i < g.size(); ++i) want2[i] = ref::GeluTanh(g[i]) * u[i];
      for (int t = 0; t < n; ++t) {
        const size_t o = size_t(t) * rows;
        EXPECT_LT(RelL2(got.data() + o, g.data() + o, rows), 1e-6) << "n=" << n << " t=" << t;
        // gelu(g) * u at 1e5-scale rows: g and u each within f32 rounding
        EXPECT_LT(RelL2(got2.data() + o, want2.data() + o, rows), 4e-6)
            << "gate/up n=" << n << " t=" << t;
      }
    }
  }
}

// The prefill attention on matrix units (attention_cm.comp, where the device offers them) against
// attention computed here in double: E2B's shapes (8 query heads on one K/V head, head dims 256
// with a 512-key sliding window over a wrapped ring and 512 with full attention), the fixtures'
// small ones (head dims 16 / 24 / 32, groups of 1 / 2 / 4, windows shorter than a key block),
// partial workgroups, q rows of very different magnitudes (each is scaled by its own power of
// two). Rows like the model's: q and K normalized times norm weights, V normalized. Every query
// row within twice the relative L2 error of an f32 computation of the same rows (its worst row in
// the case), or 2e-6.
TEST(VulkanKernels, PrefillAttentionOnMatrixUnitsMatchesReference) {
  struct Case {
    int nh, nkv, hd, window, ring, pos0, m;
    float qscale;
  };
  const Case cases[] = {
      {8, 1, 256, 512, 1024, 700, 301, 1.0f}, {8, 1, 512, 0, 1600, 1000, 77, 1.0f},
      {8, 1, 256, 512, 1024, 0, 130, 1e-3f},  {4, 2, 24, 6, 40, 0, 45, 1.0f},
      {4, 1, 32, 8, 64, 13, 20, 30.0f},       {2, 2, 16, 0, 256, 100, 70, 1.0f},
  };
  auto model = LoadFixture("tiny_qat");
  auto vk = MakeVulkan(*model);
  if (!vk) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
  uint32_t r = 12345;
  auto uni = [&r]() {
    r = r * 1664525u + 1013904223u;
    return static_cast<float>(r >> 8) / 16777216.0f * 2.0f - 1.0f;
  };
  // n rows of hd values, each normalized (RMS 1) and multiplied by w and by scale(row).
  auto rows = [&](int n, int hd, const std::vector<float>& w, auto scale) {
    std::vector<float> x(size_t(n) * hd);
    for (int i = 0; i < n; ++i) {
      double ss = 0;
      for (int d = 0; d < hd; ++d)
        ss += double(x[size_t(i) * hd + d] = uni()) * x[size_t(i) * hd + d];
      const float f = static_cast<float>(1.0 / std::sqrt(ss / hd + 1e-6));
      for (int d = 0; d < hd; ++d) x[size_t(i) * hd + d] *= f * w[d] * scale(i);
    }
    return x;
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("nh " + std::to_string(c.nh) + " nkv " + std::to_string(c.nkv) + " hd " +
                 std::to_string(c.hd) + " window " + std::to_string(c.window) + " pos0 " +
                 std::to_string(c.pos0) + " m " + std::to_string(c.m));
    std::vector<float> qw(c.hd), kw(c.hd), ones(c.hd, 1.0f);
    for (int d = 0; d < c.hd; ++d) {
      qw[d] = 1.5f + uni();
      kw[d] = 1.5f + uni();
    }
    // q: every third row 16x smaller, every fifth 8x larger than the case's scale.
    const auto q = rows(c.m * c.nh, c.hd, qw, [&](int i) {
      return c.qscale * (i % 3 == 0 ? 1.0f / 16 : 1.0f) * (i % 5 == 0 ? 8.0f : 1.0f);
    });
    const auto k = rows(c.ring * c.nkv, c.hd, kw, [](int) { return 1.0f; });
    const auto v = rows(c.ring * c.nkv, c.hd, ones, [](int) { return 1.0f; });
    const auto got = VulkanPrefillAttentionForTest(*vk, q.data(), k.data(), v.data(), c.nh, c.nkv,
                                                   c.hd, c.ring, c.window, c.pos0, c.m);
    if (got.empty()) GTEST_SKIP() << "SKIPPED: no prefill attention on matrix units on this device";
    ASSERT_EQ(got.size(), q.size());
    const int group = c.nh / c.nkv;
    // Each row in double (the reference) and in f32 (sequential f32 dot products and sums, f32
    // softmax, as an f32 implementation computes it: the scale of f32 rounding for these rows).
    std::vector<double> rel(size_t(c.m) * c.nh);
    double worst = 0, worst32 = 0;
    for (int t = 0; t < c.m; ++t) {
      const int pos = c.pos0 + t;
      const int first = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
      for (int h = 0; h < c.nh; ++h) {
        const float* qh = &q[(size_t(t) * c.nh + h) * c.hd];
        const int kvh = h / group;
        std::vector<double> s(pos - first + 1), acc(c.hd, 0.0);
        std::vector<float> s32(s.size()), acc32(c.hd, 0.0f);
        double mx = -1e300, sum = 0;
        float mx32 = -1e30f, sum32 = 0;
        for (int j = first; j <= pos; ++j) {
          const float* kj = &k[(size_t(j % c.ring) * c.nkv + kvh) * c.hd];
          double d = 0;
          float d32 = 0;
          for (int i = 0; i < c.hd; ++i) {
            d += double(qh[i]) * kj[i];
            d32 = std::fma(qh[i], kj[i], d32);
          }
          s[j - first] = d;
          s32[j - first] = d32;
          mx = std::max(mx, d);
          mx32 = std::max(mx32, d32);
        }
        for (int j = first; j <= pos; ++j) {
          const double e = std::exp(s[j - first] - mx);
          const float e32 = std::exp(s32[j - first] - mx32);
          sum += e;
          sum32 += e32;
          const float* vj = &v[(size_t(j % c.ring) * c.nkv + kvh) * c.hd];
          for (int i = 0; i < c.hd; ++i) {
            acc[i] += e * vj[i];
            acc32[i] = std::fma(e32, vj[i], acc32[i]);
          }
        }
        std::vector<float> want(c.hd), want32(c.hd);
        for (int i = 0; i < c.hd; ++i) {
          want[i] = static_cast<float>(acc[i] / sum);
          want32[i] = acc32[i] / sum32;
        }
        const size_t row = size_t(t) * c.nh + h;
        rel[row] = RelL2(&got[row * c.hd], want.data(), c.hd);
        worst = std::max(worst, rel[row]);
        worst32 = std::max(worst32, RelL2(want32.data(), want.data(), c.hd));
      }
    }
    // Every row within twice the f32 computation's worst row (and 2e-6 where that is smaller).
    const double bound = std::max(2e-6, 2 * worst32);
    for (size_t row = 0; row < rel.size(); ++row)
      EXPECT_LT(rel[row], bound) << "token " << row / c.nh << " head " << row % c.nh;
    std::printf("nh %d nkv %d hd %d window %d pos0 %d m %d: worst row rel L2 %.3g (f32 %.3g)\n",
                c.nh, c.nkv, c.hd, c.window, c.pos0, c.m, worst, worst32);
  }
}

// Full-size row lengths (the fixtures' rows are a few 16-byte vectors long, so one vector per
// lane): synthetic linears with E2B's widths, where a lane multiplies several vectors of a row
// (LANES 8 / 16 / 32 / 64, clustered and not), one and two tokens, under the multiply-loop knobs
// (MV_WGS 3: many row blocks per workgroup). Integer paths bit-exact against the reference ops,
// bf16 within f32 rounding.
TEST(VulkanKernels, FullWidthRowsMatchReferenceUnderLoopVariants) {
  auto model = LoadFixture("tiny_qat");
  std::vector<SynthLinear> lins;  // (lanes per row as chosen for 32-wide subgroups)
  lins.push_back(MakeSynthLinear(WeightKind::kQ2, 72, 1536, 1));    // gate/up-like: 8 lanes
  lins.push_back(MakeSynthLinear(WeightKind::kQ2, 72, 1536, 2));    // (the second weight set)
  lins.push_back(MakeSynthLinear(WeightKind::kQ4, 56, 1536, 3));    // q/k/v: 16 lanes
  lins.push_back(MakeSynthLinear(WeightKind::kQ4, 40, 2048, 4));    // o: 32 lanes, 2 vectors
  lins.push_back(MakeSynthLinear(WeightKind::kQ2, 20, 12288, 5));   // down (int2): 64 lanes
  lins.push_back(MakeSynthLinear(WeightKind::kQ8, 24, 1536, 6));    // PLE gate: 32 lanes
  lins.push_back(MakeSynthLinear(WeightKind::kBF16, 24, 1536, 7));  // dense, float sums
  const std::vector<Knobs> settings = {
      {},
      {{"GEMMA_VULKAN_MV_WGS", "3"}},
      {{"GEMMA_VULKAN_MV_DUAL_LOOP", "0"}},
      {{"GEMMA_VULKAN_MV_PAIR_LOOP", "1"}},
      {{"GEMMA_VULKAN_MV_PAIR_LOOP", "3"}, {"GEMMA_VULKAN_MV_DUAL_LOOP", "2"}},
      {{"GEMMA_VULKAN_MV_PAIR_LOOP", "4"}, {"GEMMA_VULKAN_MV_WGS", "3"}},
      {{"GEMMA_VULKAN_MV_XCM", "0"}},
      {{"GEMMA_VULKAN_MV_XCM", "3"}, {"GEMMA_VULKAN_MV_DUAL_LOOP", "0"}}};
  for (const Knobs& env : settings) {
    std::string what;
    for (const auto& [k, v] : env) {
      SetKnob(k, v);
      what += std::string(k) + "=" + v + " ";
    }
    auto vk = MakeVulkan(*model);
    for (const auto& [k, v] : env) ClearKnob(k);
    if (!vk) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
    SCOPED_TRACE(what);
    for (size_t li = 0; li < lins.size(); ++li) {
      const Linear& lin = lins[li].lin;
      const bool dual = li == 0;
      if (li == 1) continue;  // (only as the second set)
      const float scale = lin.in_scale > 0 ? 150 * lin.in_scale : 1.0f;
      for (int n : {1, 2}) {
        const auto x = RandomInput(n, lin.cols, 13u * n + lin.cols + li, scale);
        std::vector<float> want(size_t(n) * lin.rows);
        ref::LinearForward(lin, x.data(), n, want.data());
        if (dual) {
          std::vector<float> u(want.size());
          ref::LinearForward(lins[1].lin, x.data(), n, u.data());
          for (size_t i = 0; i < want.size(); ++i) want[i] = ref::GeluTanh(want[i]) * u[i];
        }
        const auto got =
            VulkanLinearForTest(*vk, lin, dual ? &lins[1].lin : nullptr, x.data(), n, dual ? 1 : 0);
        ASSERT_EQ(got.size(), want.size());
        if (IsQuantized(lin.kind) && !dual) {
          int diff = 0;
          for (size_t i = 0; i < got.size(); ++i) diff += got[i] != want[i];
          EXPECT_EQ(diff, 0) << "linear " << li << " " << lin.rows << "x" << lin.cols << " n=" << n;
        } else if (dual) {
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(got[i], want[i], 2e-6f * std::max(1.0f, std::fabs(want[i])))
                << "gate/up n=" << n << " i=" << i;
        } else {
          EXPECT_LT(RelL2(got.data(), want.data(), static_cast<int>(got.size())), 1e-6)
              << "linear " << li << " n=" << n;
        }
      }
    }
  }
}

// A 200-token prompt in chunks of 64 (the last one 8 tokens: every chunk takes the prefill
// attention, on matrix units where the device runs them), the sliding windows wrapping their rings,
// every position's logits against the CPU reference; two fixtures (query heads per K/V head 4 and
// 2, head dims 32 and 24).
TEST(VulkanKernels, PromptInSeveralChunksMatchesReference) {
  for (const char* fixture : {"tiny_dense_bf16", "tiny_e4b_like_f16"}) {
    SCOPED_TRACE(fixture);
    auto model = LoadFixture(fixture);
    const BackendOptions opt = {.capacity = 256, .slack = 64};
    auto vk = MakeVulkan(*model, opt);
    if (!vk) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
    ASSERT_EQ(vk->capabilities().max_chunk, 64);
    ExpectMatrixUnitAttentionWhereOffered(*vk, model->text().vocab_size, 64);
    ExpectPromptLogitsMatchReference(*model, *vk, opt, 200, 31, 5);
  }
}

// A prompt whose last position's logits are returned runs the trailing KV-shared layers for that
// position only (GEMMA_VULKAN_SKIP_TAIL, on by default); chunks without output skip them. Logits
// and the next decode steps against the CPU reference, and against the same backend without the
// skip, for fixtures with trailing shared layers, in one chunk and in chunks of 7.
TEST(VulkanKernels, PromptSkipsTrailingSharedLayersExactly) {
  for (const char* fixture : {"tiny_dense_bf16", "tiny_e4b_like_f16"}) {
    for (int slack : {64, 7}) {
      SCOPED_TRACE(std::string(fixture) + " slack " + std::to_string(slack));
      auto model = LoadFixture(fixture);
      const int V = model->text().vocab_size;
      SetKnob("GEMMA_VULKAN_SKIP_TAIL", "0");
      auto full = MakeVulkan(*model, {.capacity = 128, .slack = slack});
      ClearKnob("GEMMA_VULKAN_SKIP_TAIL");
      auto vk = MakeVulkan(*model, {.capacity = 128, .slack = slack});
      if (!vk || !full) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
      auto cpu = CreateCpuReferenceBackend(*model, {.capacity = 128, .slack = slack});
      std::vector<int32_t> tokens(40);
      for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 29 + 3) % V);
      const std::span<const int32_t> prompt(tokens.data(), 33);
      ForwardResult a, b, c;
      cpu->Forward({.tokens = prompt, .mode = OutputMode::kLogits}, &a);
      vk->Forward({.tokens = prompt, .mode = OutputMode::kLogits}, &b);
      full->Forward({.tokens = prompt, .mode = OutputMode::kLogits}, &c);
      ASSERT_EQ(b.logits.size(), size_t(V));
      EXPECT_LT(RelL2(b.logits.data(), a.logits.data(), V), 1e-4);
      EXPECT_LT(RelL2(b.logits.data(), c.logits.data(), V), 1e-4);
      for (size_t t = 33; t < tokens.size(); ++t) {
        const std::span<const int32_t> one(&tokens[t], 1);
        cpu->Forward({.tokens = one, .mode = OutputMode::kLogits}, &a);
        vk->Forward({.tokens = one, .mode = OutputMode::kLogits}, &b);
        EXPECT_LT(RelL2(b.logits.data(), a.logits.data(), V), 1e-4) << "position " << t;
      }
    }
  }
}

// The one-token dense linears' vec4-staged input (linear.comp FXW, the default) takes the same
// FMAs in the same order as the general float path: bit-identical logits.
TEST(VulkanKernels, DenseStagedInputMatchesGeneralPathBitExactly) {
  for (const char* fixture : {"tiny_dense_bf16", "tiny_e4b_like_f16"}) {
    SCOPED_TRACE(fixture);
    auto model = LoadFixture(fixture);
    const int V = model->text().vocab_size;
    const BackendOptions opt{.capacity = 64, .slack = 16};
    auto staged = MakeVulkan(*model, opt);
    auto general = MakeVulkanWith(*model, {{"GEMMA_VULKAN_DENSE_VEC4", "0"}}, opt);
    if (!staged || !general) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
    ExpectIdenticalSteps(*staged, *general, V, 30, 29, 5);
    // Workgroups looping over several row blocks (a capped grid) load the next block's vectors
    // early (PFB, GEMMA_VULKAN_DENSE_PREFETCH): the same FMAs in the same order.
    for (const char* wgs : {"1", "2", "3"}) {
      SCOPED_TRACE(std::string("workgroups ") + wgs);
      auto early = MakeVulkanWith(*model, {{"GEMMA_VULKAN_MV_WGS", wgs}}, opt);
      auto late = MakeVulkanWith(
          *model, {{"GEMMA_VULKAN_MV_WGS", wgs}, {"GEMMA_VULKAN_DENSE_PREFETCH", "0"}}, opt);
      ASSERT_TRUE(early && late);
      ExpectIdenticalSteps(*early, *late, V, 30, 29, 5);
    }
  }
}

// The matrix-unit linears' input quantization: f16 values (linear_cm) and int8 bytes (I8,
// linear_cm2's integer tiles) both hold the reference's clamp(round_half_even(x / s), -128, 127)
// for every column, zeros in the padding to 64 columns, and nothing past a row's span. Inputs
// include exact half-integer quotients (ties to even) and values past the int8 range.
TEST(VulkanKernels, SrqQuantBytesAndHalvesHoldTheReferenceCodes) {
  auto model = LoadFixture("tiny_qat");
  auto vk = MakeVulkan(*model, {.capacity = 16});
  if (!vk) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
  const int n = 5, cols = 200;  // (padded to 256 columns: 32 16-byte groups a row)
  const float s = 0.25f;
  std::vector<float> x(size_t(n) * cols);
  uint32_t r = 7;
  for (size_t i = 0; i < x.size(); ++i) {
    r = r * 1664525u + 1013904223u;
    const int kind = static_cast<int>(i % 4);
    const float u = static_cast<float>(r >> 8) / 16777216.0f;        // [0, 1)
    x[i] = kind == 0   ? (std::floor(u * 64.0f) - 32.0f + 0.5f) * s  // x / s exactly k + 0.5
           : kind == 1 ? (u - 0.5f) * 80.0f                          // beyond +-128 quanta
                       : (u - 0.5f) * 40.0f;
  }
  const std::vector<uint8_t> halves = VulkanSrqQuantForTest(*vk, x.data(), n, cols, s, false);
  const std::vector<uint8_t> bytes = VulkanSrqQuantForTest(*vk, x.data(), n, cols, s, true);
  const size_t ld = 256 / 8, row16 = ld * 16, row8 = ld * 8;
  ASSERT_EQ(halves.size(), size_t(n) * row16);
  ASSERT_EQ(bytes.size(), halves.size());
  int bad = 0;
  for (int t = 0; t < n; ++t) {
    for (size_t c = 0; c < 256; ++c) {
      const int want = c < size_t(cols) ? ref::QuantizeSrq(x[size_t(t) * cols + c], s) : 0;
      uint16_t h;
      std::memcpy(&h, &halves[t * row16 + 2 * c], 2);
      const float hv = F16ToF32(h);
      const int8_t b = static_cast<int8_t>(bytes[t * row8 + c]);
      if (hv != static_cast<float>(want) || b != want) {
        if (++bad <= 5)
          ADD_FAILURE() << "token " << t << " column " << c << ": want " << want << ", f16 " << hv
                        << ", int8 " << int(b);
      }
    }
  }
  EXPECT_EQ(bad, 0);
  for (size_t i = size_t(n) * row8; i < bytes.size(); ++i)
    ASSERT_EQ(bytes[i], 0xAB) << "byte " << i << " past the int8 rows was written";
}

// A step of several tokens (a batch's rows, a verification step, a short chunk) gives each token
// the one-token step's outputs bit for bit: the integer sums are exact in any order, and dense
// rows take the one-token kernel's lanes (DENSE_LANES), so each token's f32 sums add the same
// products in the same order. E2B's widths (1,536 and 2,048 columns), every token count a short
// step takes. (On lavapipe 32 and 64 lanes happen to give the same sums here; on an H100 they did
// not: bench/journal/2026-12-05-nocontraction.md.)
TEST(VulkanKernels, ShortStepsGiveEachTokenTheOneTokenSums) {
  auto model = LoadFixture("tiny_qat");
  auto vk = MakeVulkan(*model, {.capacity = 64});
  if (!vk) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
  std::vector<SynthLinear> lins;
  lins.push_back(MakeSynthLinear(WeightKind::kBF16, 96, 1536, 11));
  lins.push_back(MakeSynthLinear(WeightKind::kBF16, 96, 1536, 12));  // (the second weight set)
  lins.push_back(MakeSynthLinear(WeightKind::kF16, 40, 2048, 13));
  lins.push_back(MakeSynthLinear(WeightKind::kQ4, 56, 1536, 14));
  struct Case {
    const Linear* lin;
    const Linear* second;
    int epi;
  };
  const std::vector<Case> cases = {{&lins[0].lin, nullptr, 0},
                                   {&lins[0].lin, &lins[1].lin, 1},
                                   {&lins[2].lin, nullptr, 0},
                                   {&lins[3].lin, nullptr, 0}};
  for (const Case& c : cases) {
    const float scale = c.lin->in_scale > 0 ? 200 * c.lin->in_scale : 1.0f;
    for (int n : {2, 3, 5, 7, 9, 16, 32}) {
      SCOPED_TRACE("kind " + std::to_string(static_cast<int>(c.lin->kind)) + " cols " +
                   std::to_string(c.lin->cols) + " epi " + std::to_string(c.epi) + " n " +
                   std::to_string(n));
      const auto x = RandomInput(n, c.lin->cols, 31u * n + c.lin->rows, scale);
      const auto all = VulkanLinearForTest(*vk, *c.lin, c.second, x.data(), n, c.epi);
      ASSERT_EQ(all.size(), size_t(n) * c.lin->rows);
      int diff = 0;
      for (int t = 0; t < n; ++t) {
        const auto one = VulkanLinearForTest(*vk, *c.lin, c.second,
                                             x.data() + size_t(t) * c.lin->cols, 1, c.epi);
        for (int r = 0; r < c.lin->rows; ++r) diff += one[r] != all[size_t(t) * c.lin->rows + r];
      }
      EXPECT_EQ(diff, 0);
    }
  }
}

// The head's argmax / pick in one logits_reduce dispatch (LAST: each vocabulary block reduced from
// registers, the row's last block merging) against the two-pass form and the CPU reference, with
// blocks small enough that the fixtures' vocabularies span several (uneven ones: 512 = 4 x 120 +
// 32; one value per invocation and two), in argmax and select modes.
TEST(VulkanKernels, LogitsReduceInOneDispatchMatchesTwoPasses) {
  auto model = LoadFixture("tiny_qat");
  const int V = model->text().vocab_size;
  const BackendOptions opt{.capacity = 64, .slack = 16};
  auto cpu = CreateCpuReferenceBackend(*model, opt);
  std::vector<uint64_t> allowed((V + 63) / 64, 0);
  for (int v = 5; v < V; v += 3) allowed[v >> 6] |= 1ull << (v & 63);
  for (const char* block : {"120", "300", "512", "37"}) {
    SCOPED_TRACE(std::string("vocabulary block ") + block);
    auto one = MakeVulkanWith(*model, {{"GEMMA_VULKAN_VOCAB_BLOCK", block}}, opt);
    if (!one) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
    auto two = MakeVulkanWith(
        *model, {{"GEMMA_VULKAN_VOCAB_BLOCK", block}, {"GEMMA_VULKAN_REDUCE_LAST", "0"}}, opt);
    ASSERT_TRUE(two);
    cpu->Reset();
    std::vector<int32_t> tokens(24);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 53 + 11) % V);
    for (size_t t = 6; t <= tokens.size(); ++t) {
      const std::span<const int32_t> in = StepTokens(tokens, 6, t);
      const OutputMode mode = t % 2 == 0 ? OutputMode::kArgmax : OutputMode::kSelect;
      ForwardRequest req{.tokens = in, .mode = mode};
      if (mode == OutputMode::kSelect) req.allowed = &allowed;
      ForwardResult a, b, c;
      one->Forward(req, &a);
      two->Forward(req, &b);
      cpu->Forward(req, &c);
      ASSERT_EQ(a.ids, b.ids) << "position " << t;
      ASSERT_EQ(a.ids, c.ids) << "position " << t;
      ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
      ASSERT_EQ(a.logprobs.size(), c.logprobs.size());
      for (size_t i = 0; i < a.logprobs.size(); ++i) {
        EXPECT_NEAR(a.logprobs[i], b.logprobs[i], 1e-5 * (1 + std::fabs(b.logprobs[i])));
        EXPECT_NEAR(a.logprobs[i], c.logprobs[i], 1e-3 * (1 + std::fabs(c.logprobs[i])));
      }
    }
  }
}

// A step's inputs staged in device-local mappable memory or host memory (GEMMA_VULKAN_UPLOAD_LOCAL)
// with one-token steps' PLE rows and mask in host memory copied after the first barrier or not
// (GEMMA_VULKAN_UPLOAD_SPLIT): the same kernels on the
// same inputs, so the same logits, ids and log-probs in every output mode (and steps without an
// output), prompt chunks and one-token steps, and the ids of the CPU reference.
TEST(VulkanKernels, StepInputStagingLayoutsGiveIdenticalSteps) {
  auto model = LoadFixture("tiny_qat");
  const int V = model->text().vocab_size;
  const BackendOptions opt{.capacity = 64, .slack = 16};
  auto base = MakeVulkan(*model, opt);
  if (!base) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
  std::vector<uint64_t> allowed((V + 63) / 64, 0);
  for (int v = 2; v < V; v += 5) allowed[v >> 6] |= 1ull << (v & 63);
  const std::vector<Knobs> variants = {
      {{"GEMMA_VULKAN_UPLOAD_SPLIT", "0"}},
      {{"GEMMA_VULKAN_UPLOAD_LOCAL", "0"}},
      {{"GEMMA_VULKAN_UPLOAD_LOCAL", "0"}, {"GEMMA_VULKAN_UPLOAD_SPLIT", "0"}}};
  for (const Knobs& env : variants) {
    SCOPED_TRACE("knobs:" + KnobsText(env));
    base->Reset();
    auto other = MakeVulkanWith(*model, env, opt);
    ASSERT_TRUE(other);
    auto cpu = CreateCpuReferenceBackend(*model, opt);
    std::vector<int32_t> tokens(26);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 29 + 7) % V);
    for (size_t t = 7; t <= tokens.size(); ++t) {
      const std::span<const int32_t> in = StepTokens(tokens, 7, t);
      const OutputMode mode = t % 7 == 0   ? OutputMode::kNone
                              : t % 3 == 0 ? OutputMode::kLogits
                              : t % 3 == 1 ? OutputMode::kArgmax
                                           : OutputMode::kSelect;
      ForwardRequest req{.tokens = in, .mode = mode};
      if (mode == OutputMode::kSelect) req.allowed = &allowed;
      ForwardResult a, b, c;
      base->Forward(req, &a);
      other->Forward(req, &b);
      cpu->Forward(req, &c);
      ASSERT_EQ(a.logits.size(), b.logits.size());
      if (!a.logits.empty()) {
        EXPECT_EQ(0, std::memcmp(a.logits.data(), b.logits.data(), sizeof(float) * V))
            << "position " << t;
      }
      ASSERT_EQ(a.ids, b.ids) << "position " << t;
      ASSERT_EQ(a.ids, c.ids) << "position " << t;
      ASSERT_EQ(a.logprobs, b.logprobs) << "position " << t;
    }
  }
}

// The down projection summed by gate/up's workgroups (linear.comp DJ, the default where packed
// dot products exist) adds the same int32 sums as the down kernel, and the consumer's prologue
// applies the same epilogue: bit-identical logits, with one workgroup per row block and with
// workgroups looping over several (GEMMA_VULKAN_DOWN_FUSE_WGS: their sums kept over blocks; 2:
// on the fixture's 3-block gate/up one workgroup takes blocks 0 and 2, the other block 1), the
// down words from the pair-major copy or the matrix, loaded before or after the multiply, the
// sums in one or several copies.
TEST(VulkanKernels, DownFusionMatchesDownKernelBitExactly) {
  auto model = LoadFixture("tiny_qat");
  const int V = model->text().vocab_size, L = model->text().num_layers;
  const BackendOptions opt{.capacity = 64, .slack = 16};
  const Knobs plain_form = {{"GEMMA_VULKAN_DOWN_FUSE_PAIRS", "0"},
                            {"GEMMA_VULKAN_DOWN_FUSE_LATE", "0"},
                            {"GEMMA_VULKAN_DOWN_FUSE_COPIES", "1"}};
  std::vector<Knobs> variants = {
      {}, {{"GEMMA_VULKAN_DOWN_FUSE_WGS", "1"}}, {{"GEMMA_VULKAN_DOWN_FUSE_WGS", "2"}}, plain_form};
  for (const char* wgs : {"1", "2"}) {
    Knobs k = plain_form;
    k.push_back({"GEMMA_VULKAN_DOWN_FUSE_WGS", wgs});
    variants.push_back(k);
  }
  variants.push_back({{"GEMMA_VULKAN_DOWN_FUSE_COPIES", "3"}, {"GEMMA_VULKAN_DOWN_FUSE_WGS", "2"}});
  // gate/up's two weight sets in a loop each (the default: one loop, linear.comp DUAL_LOOP), or
  // 2 / 3 vectors of each set an iteration: the same sums
  variants.push_back({{"GEMMA_VULKAN_MV_DUAL_LOOP", "0"}});
  variants.push_back({{"GEMMA_VULKAN_MV_DUAL_LOOP", "0"}, {"GEMMA_VULKAN_DOWN_FUSE_WGS", "2"}});
  variants.push_back({{"GEMMA_VULKAN_MV_DUAL_LOOP", "2"}});
  variants.push_back({{"GEMMA_VULKAN_MV_DUAL_LOOP", "3"}, {"GEMMA_VULKAN_DOWN_FUSE_WGS", "2"}});
  for (const Knobs& env : variants) {
    SCOPED_TRACE("knobs:" + KnobsText(env));
    auto plain = MakeVulkanWith(*model, {{"GEMMA_VULKAN_DOWN_FUSE", "0"}}, opt);
    if (!plain) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
    auto fused = MakeVulkanWith(*model, env, opt);
    ASSERT_TRUE(fused);
    VulkanStats sp, sf;
    ASSERT_TRUE(GetVulkanStats(*plain, &sp));
    ASSERT_TRUE(GetVulkanStats(*fused, &sf));
    // (the fusion needs packed integer dot products; where the device has them it must run)
    if (sf.kernels.find("packed int dot") == std::string::npos) {
      GTEST_SKIP() << "SKIPPED: the down projection is not fused on this device (it needs packed "
                      "integer dot products)";
    }
    // the SRQ down projections' dispatches gone (the PLE gate's prologue takes the sums; one of
    // the fixture's layers has no SRQ scales and keeps its down kernel)
    EXPECT_LT(sf.dispatches_per_token, sp.dispatches_per_token);
    EXPECT_GT(sf.dispatches_per_token, sp.dispatches_per_token - L);
    ExpectIdenticalSteps(*fused, *plain, V, 30, 31, 7);
  }
}

// The last layer's residual norm and the final norm in the LM head's prologue
// (GEMMA_VULKAN_HEAD_NORM=1) compute what the two norm kernels compute: bit-identical logits and
// ids, two dispatches fewer per decoded token.
TEST(VulkanKernels, HeadNormInPrologueMatchesNormKernels) {
  for (const char* fixture : {"tiny_qat", "tiny_dense_bf16"}) {
    SCOPED_TRACE(fixture);
    auto model = LoadFixture(fixture);
    const int V = model->text().vocab_size;
    const BackendOptions opt{.capacity = 64, .slack = 16};
    auto kernels = MakeVulkanWith(*model, {{"GEMMA_VULKAN_HEAD_NORM", "0"}}, opt);
    auto fused = MakeVulkanWith(*model, {{"GEMMA_VULKAN_HEAD_NORM", "1"}}, opt);
    if (!kernels || !fused) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
    VulkanStats sk, sf;
    ASSERT_TRUE(GetVulkanStats(*kernels, &sk));
    ASSERT_TRUE(GetVulkanStats(*fused, &sf));
    EXPECT_EQ(sf.dispatches_per_token, sk.dispatches_per_token - 2);
    ExpectIdenticalSteps(*fused, *kernels, V, 28, 41, 3, /*argmax_too=*/true);
  }
}

// (GEMMA_VULKAN_ATTN_CM=1: the matrix-unit attention where the device runs it, the default; the
// other variants turn it off.)
TEST(VulkanKernels, PrefillAttentionVariantsMatchReference) {
  struct Knob {
    const char *pf, *cm;
  };
  const Knob knobs[] = {{"1", "0"}, {"2", "0"}, {"3", "0"}, {"4", "0"}, {"0", "0"}, {"4", "1"}};
  for (const auto& [pf, cm] : knobs) {
    SCOPED_TRACE(std::string("GEMMA_VULKAN_ATTN_PF=") + pf + " GEMMA_VULKAN_ATTN_CM=" + cm);
    auto model = LoadFixture("tiny_dense_bf16");
    std::unique_ptr<Backend> vk;
    SetKnob("GEMMA_VULKAN_ATTN_PF", pf);
    SetKnob("GEMMA_VULKAN_ATTN_CM", cm);
    auto unset = [] {
      ClearKnob("GEMMA_VULKAN_ATTN_PF");
      ClearKnob("GEMMA_VULKAN_ATTN_CM");
    };
    try {
      vk = CreateVulkanBackend(*model, {.capacity = 128, .slack = 20});
      unset();
    } catch (const Error& e) {
      unset();
      if (e.code() != ErrorCode::kDevice) throw;
      GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine (" << e.what() << ")";
    }
    ASSERT_EQ(vk->capabilities().max_chunk, 20);
    ExpectMatrixUnitAttentionWhereOffered(*vk, model->text().vocab_size, 20);
    ExpectPromptLogitsMatchReference(*model, *vk, {.capacity = 128, .slack = 20}, 45, 37, 2);
  }
}

}  // namespace
}  // namespace gemma
