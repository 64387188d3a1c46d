// Vulkan backend behaviour beyond the goldens: device-loss recovery, typed errors, stats.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "backend/cpu/reference_ops.h"
#include "backend/vulkan/vulkan_backend.h"
#include "gemma/error.h"
#include "golden_util.h"  // RelL2, IsSrqFlip
#include "model/model.h"
#include "model/synth.h"

namespace gemma {
namespace {

// Fixtures are loaded once per process and kept (their backends share a device: BaseContexts).
std::map<std::string, std::shared_ptr<Model>>& Fixtures() {
  static std::map<std::string, std::shared_ptr<Model>> loaded;
  return loaded;
}
std::shared_ptr<Model> LoadFixture(const char* name) {
  std::shared_ptr<Model>& m = Fixtures()[name];
  if (!m) m = Model::Load(std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/model/" + name);
  return m;
}

// One device per model in a test: the backends a test makes for a model are contexts on the
// device, pipelines and weights of the first (a base context kept here), with their kernel
// choices per context, so a table of kernel variants builds each pipeline and uploads the weights
// once (on lavapipe, pipeline creation was ~90% of a variant test's time).
std::map<const Model*, std::unique_ptr<Backend>>& BaseContexts() {
  Fixtures();  // (made first, destroyed after the contexts)
  static std::map<const Model*, std::unique_ptr<Backend>> m;
  return m;
}

// A synthesized checkpoint in a temporary directory (removed with this object), loaded.
struct SynthModel {
  explicit SynthModel(SynthOptions o) : dir(o.out_dir) {
    Synthesize(o);
    model = Model::Load(dir);
  }
  ~SynthModel() {
    BaseContexts().erase(model.get());
    std::filesystem::remove_all(dir);
  }
  std::string dir;
  std::unique_ptr<Model> model;
};

// Kernel choices (kernel_config.h) for the backends created while they are set: kept in
// GEMMA_VULKAN_KERNELS, the backend's developer override, so that every backend a test makes
// (directly or through the runtime) takes them.
std::map<std::string, std::string>& KnobTable() {
  static std::map<std::string, std::string> t;
  return t;
}
void SyncKnobs() {
  std::string s;
  for (const auto& [k, v] : KnobTable()) s += k + "=" + v + " ";
  if (s.empty())
    unsetenv("GEMMA_VULKAN_KERNELS");
  else
    setenv("GEMMA_VULKAN_KERNELS", s.c_str(), 1);
}
void SetKnob(const char* name, const char* value) {
  KnobTable()[name] = value;
  SyncKnobs();
}
void ClearKnob(const char* name) {
  KnobTable().erase(name);
  SyncKnobs();
}

using Knobs = std::vector<std::pair<const char*, const char*>>;

// A context for `model` with the kernel choices `env` over the defaults (and GEMMA_VULKAN_KERNELS,
// as SetKnob leaves it), on the model's shared device; nullptr without a usable device. Choices
// the device or weights depend on (DOWN_FUSE_PAIRS: the weights' layout; SPIN_US, PIPE_STATS: the
// device) get a device of their own.
std::unique_ptr<Backend> MakeVulkanWith(const Model& model, const Knobs& env, BackendOptions opt) {
  KernelConfig kc;
  bool own_device = false;
  for (const auto& [k, v] : env) {
    kc.Set(k, std::atoi(v));
    for (const char* d : {"DOWN_FUSE_PAIRS", "SPIN_US", "PIPE_STATS"})
      own_device = own_device || std::string(k).ends_with(d);
  }
  try {
    if (own_device) return CreateVulkanBackend(model, opt, {.kernels = kc});
    std::unique_ptr<Backend>& base = BaseContexts()[&model];
    if (!base) base = CreateVulkanBackend(model, {.capacity = 8});
    return CreateVulkanSibling(*base, opt, kc);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kDevice) return nullptr;
    throw;
  }
}

std::unique_ptr<Backend> MakeVulkan(const Model& model, BackendOptions opt = {.capacity = 128}) {
  return MakeVulkanWith(model, {}, opt);
}

std::string KnobsText(const Knobs& env) {
  std::string s;
  for (const auto& [k, v] : env) s += std::string(" ") + k + "=" + v;
  return s;
}

#define VULKAN_OR_SKIP(var, model)                                              \
  auto var = MakeVulkan(model);                                                 \
  if (!var) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine"; \
  static_assert(true)

// Greedy one-token steps from the last id of `out` until it holds n ids.
void ContinueGreedy(Backend& b, std::vector<int32_t>& out, size_t n) {
  ForwardResult r;
  while (out.size() < n) {
    const int32_t t = out.back();
    b.Forward({.tokens = std::span<const int32_t>(&t, 1)}, &r);
    out.push_back(r.ids.back());
  }
}

std::vector<int32_t> Decode(Backend& b, std::vector<int32_t> prompt, int n) {
  ForwardResult r;
  b.Forward({.tokens = prompt, .mode = OutputMode::kArgmax}, &r);
  std::vector<int32_t> out = {r.ids.back()};
  ContinueGreedy(b, out, static_cast<size_t>(n));
  return out;
}

TEST(VulkanBackend, ReportsDeviceAndDecodeWork) {
  auto model = LoadFixture("tiny_qat");
  VULKAN_OR_SKIP(vk, *model);
  VulkanStats s;
  ASSERT_TRUE(GetVulkanStats(*vk, &s));
  std::printf("vulkan device: %s, %zu device bytes, %d dispatches / token\n", s.device.c_str(),
              s.device_bytes, s.dispatches_per_token);
  EXPECT_FALSE(s.device.empty());
  EXPECT_GT(s.weight_bytes, 0u);
  EXPECT_GT(s.dispatches_per_token, model->text().num_layers);
  EXPECT_EQ(vk->name(), "vulkan");
}

// The measuring tools: a per-kernel profile, a kernel probe and the empty-dispatch cost, none of
// which may disturb the conversation (the next tokens equal the CPU reference's).
TEST(VulkanBackend, ProfilesAndProbesLeaveTheConversationIntact) {
  auto model = LoadFixture("tiny_qat");
  VULKAN_OR_SKIP(vk, *model);
  auto ref = CreateCpuReferenceBackend(*model, {.capacity = 128});
  const std::vector<int32_t> prompt = {2, 17, 93, 5, 211, 48, 7, 300, 12};
  const auto want = Decode(*ref, prompt, 6);
  ForwardResult r;
  vk->Forward({.tokens = prompt}, &r);
  ASSERT_EQ(r.ids.back(), want[0]);
  const int cached = vk->cached();
  const int32_t next = r.ids.back();
  const auto prof = ProfileVulkanStep(*vk, std::span<const int32_t>(&next, 1));
  const VulkanDispatchCost dc = MeasureVulkanDispatchCost(*vk, 16);
  if (!prof.empty()) {
    EXPECT_GT(dc.dependent_us, 0.0);
    EXPECT_GT(dc.dependent_wide_us, 0.0);
    std::string label;
    for (const auto& [k, ns] : prof) {
      EXPECT_GE(ns, 0.0) << k;
      if (label.empty() && k.rfind("linear_dp ", 0) == 0) label = k;
    }
    if (!label.empty()) {
      const std::string t = ProbeVulkanKernel(*vk, std::span<const int32_t>(&next, 1), label);
      if (t.find("no shader device clock") == std::string::npos) {
        EXPECT_NE(t.find("| probe: " + label + " #0 |"), std::string::npos) << t;
        EXPECT_NE(t.find("probe 0 -> 1: mean / max"), std::string::npos) << t;
        // The finer set: a linear without a norm prologue writes only its last point.
        const std::string t2 =
            ProbeVulkanKernel(*vk, std::span<const int32_t>(&next, 1), "2:" + label);
        EXPECT_NE(t2.find("| probe: 2:" + label + " #0 |"), std::string::npos) << t2;
        // Spans are measured between written points (one small dispatch: well under 50 ms).
        for (const std::string& out : {t, t2}) {
          const std::string key = "| first start to last end | ";
          const size_t at = out.find(key);
          ASSERT_NE(at, std::string::npos) << out;
          const double span_us = std::stod(out.substr(at + key.size()));
          EXPECT_GE(span_us, 0.0) << out;
          EXPECT_LT(span_us, 5e4) << out;
        }
        // Stages come from the cycle counter converted at the clock the spans give: a stage of
        // one workgroup fits in the kernel's span (with slack for the device clock's ticks).
        const std::string clock_key = "| compute-unit clock during the probe | ";
        const size_t ck = t.find(clock_key);
        if (ck != std::string::npos) {
          EXPECT_GT(std::stod(t.substr(ck + clock_key.size())), 0.0) << t;
          const double span_us =
              std::stod(t.substr(t.find("| first start to last end | ") + 28));
          for (size_t p = t.find("workgroups | "); p != std::string::npos;
               p = t.find("workgroups | ", p + 1)) {
            const std::string rest = t.substr(p + 13);
            const double mean = std::stod(rest);
            const double mx = std::stod(rest.substr(rest.find('/') + 1));
            EXPECT_GE(mean, 0.0) << t;
            EXPECT_LE(mean, mx + 1e-9) << t;
            EXPECT_LE(mx, 1.5 * span_us + 1.0) << t;
          }
        }
      }
      EXPECT_NE(ProbeVulkanKernel(*vk, std::span<const int32_t>(&next, 1), "no such kernel")
                    .find("no dispatch labelled"),
                std::string::npos);
    }
  }
  EXPECT_EQ(vk->cached(), cached);
  std::vector<int32_t> got = {next};
  ContinueGreedy(*vk, got, want.size());
  EXPECT_EQ(got, want);
}

TEST(VulkanBackend, DeviceLossFailsTheRequestAndKeepsTheConversation) {
  auto model = LoadFixture("tiny_qat");
  VULKAN_OR_SKIP(vk, *model);
  auto ref = CreateCpuReferenceBackend(*model, {.capacity = 128});
  const std::vector<int32_t> prompt = {2, 17, 93, 5, 211, 48, 7, 300, 12};
  const auto want = Decode(*ref, prompt, 12);

  ForwardResult r;
  vk->Forward({.tokens = prompt}, &r);
  std::vector<int32_t> got = {r.ids.back()};
  ContinueGreedy(*vk, got, 5);
  const int committed = vk->cached();
  ASSERT_TRUE(SimulateVulkanDeviceLoss(*vk));
  const int32_t t = got.back();
  try {
    vk->Forward({.tokens = std::span<const int32_t>(&t, 1)}, &r);
    FAIL() << "expected a device error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDevice);
    EXPECT_NE(std::string(e.what()).find("VK_ERROR_DEVICE_LOST"), std::string::npos) << e.what();
  }
  EXPECT_EQ(vk->cached(), committed);
  // The next request rebuilds the device and continues the same conversation.
  ContinueGreedy(*vk, got, want.size());
  EXPECT_EQ(got, want);
  VulkanStats s;
  GetVulkanStats(*vk, &s);
  EXPECT_EQ(s.rebuilds, 1);

  // A loss during a multi-token prefill also leaves cached() where it was.
  const int before = vk->cached();
  SimulateVulkanDeviceLoss(*vk);
  EXPECT_THROW(vk->Forward({.tokens = prompt, .mode = OutputMode::kNone}, &r), Error);
  EXPECT_EQ(vk->cached(), before);
  vk->Forward({.tokens = prompt, .mode = OutputMode::kNone}, &r);
  EXPECT_EQ(vk->cached(), before + static_cast<int>(prompt.size()));
}

TEST(VulkanBackend, TypedErrorsForBadRequests) {
  auto model = LoadFixture("tiny_dense_bf16");
  VULKAN_OR_SKIP(vk, *model);
  ForwardResult r;
  const std::vector<int32_t> bad = {2, model->text().vocab_size};
  try {
    vk->Forward({.tokens = bad}, &r);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  std::vector<int32_t> many(129, 5);
  try {
    vk->Forward({.tokens = many}, &r);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCapacity);
  }
  EXPECT_EQ(vk->cached(), 0);
  try {
    vk->Forward({.tokens = bad, .mode = OutputMode::kSelect}, &r);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

TEST(VulkanBackend, EnvironmentOverrideThatMatchesNothingIsADeviceError) {
  auto model = LoadFixture("tiny_dense_bf16");
  VULKAN_OR_SKIP(vk, *model);
  setenv("GEMMA_VULKAN_DEVICE", "no-such-device-name", 1);
  try {
    CreateVulkanBackend(*model, {.capacity = 64});
    ADD_FAILURE() << "expected kDevice";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDevice);
  }
  unsetenv("GEMMA_VULKAN_DEVICE");
}

}  // namespace
}  // namespace gemma

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
  // K tile is its own split (exact int32 partial sums added atomically); GEMMA_VULKAN_CM_BM: 128- or
  // 64-row tiles.
  // One backend per fixture and setting (the NVIDIA driver refuses new instances after a few
  // dozen in one process).
  const std::pair<const char*, const char*> settings[] = {{"1", "128"}, {"2", "128"}, {"2", "64"}};
  for (const auto& [splitk, bm] : settings) {
  SCOPED_TRACE(std::string("GEMMA_VULKAN_CM_SPLITK=") + splitk + " GEMMA_VULKAN_CM_BM=" + bm);
  std::string loaded;
  std::unique_ptr<Backend> vk;
  std::shared_ptr<Model> model;
  for (const LinearCase& c : cases) {
    if (std::strcmp(splitk, "2") == 0 && std::strcmp(c.fixture, "tiny_qat") != 0) continue;
    if (loaded != c.fixture) {
      vk.reset();
      model = LoadFixture(c.fixture);
      SetKnob("GEMMA_VULKAN_CM_SPLITK", splitk);
      SetKnob("GEMMA_VULKAN_CM_BM", bm);
      vk = MakeVulkan(*model);
      ClearKnob("GEMMA_VULKAN_CM_SPLITK");
      ClearKnob("GEMMA_VULKAN_CM_BM");
      loaded = c.fixture;
    }
    if (!vk) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
    const Linear& lin = c.pick(*model);
    // Inputs spanning a few hundred SRQ steps, so quantization rounds and clamps.
    const float scale = lin.in_scale > 0 ? 200 * lin.in_scale : 1.0f;
    for (int n : {1, 3, 8, 70, 200}) {
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
struct SynthLinear {
  std::vector<uint8_t> bytes;
  std::vector<float> scales;
  Linear lin;
};

SynthLinear MakeSynthLinear(WeightKind kind, int rows, int cols, uint32_t seed) {
  SynthLinear s;
  const int bits = WeightKindBits(kind);
  const size_t row_bytes = size_t(cols) * bits / 8;
  s.bytes.resize(row_bytes * rows);
  uint32_t r = seed;
  for (size_t i = 0; i < s.bytes.size(); ++i) {
    r = r * 1664525u + 1013904223u;
    s.bytes[i] = static_cast<uint8_t>(r >> 24);
    // bf16 high bytes: sign and a small exponent (finite values of modest size)
    if (bits == 16 && (i & 1))
      s.bytes[i] = static_cast<uint8_t>(0x3C + ((r >> 20) & 3) + ((r >> 31) << 7));
  }
  s.lin.name = "synthetic";
  s.lin.kind = kind;
  s.lin.rows = rows;
  s.lin.cols = cols;
  s.lin.data = s.bytes.data();
  s.lin.row_bytes = row_bytes;
  if (IsQuantized(kind)) {
    s.scales.resize(rows);
    for (float& v : s.scales) {
      r = r * 1664525u + 1013904223u;
      v = 0.002f * (0.5f + static_cast<float>(r >> 8) / 16777216.0f);
    }
    s.lin.row_scale = s.scales.data();
    s.lin.in_scale = 0.01f;
  }
  return s;
}

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

}  // namespace
}  // namespace gemma

namespace gemma {
namespace {

// Matrices beyond maxStorageBufferRange are split by rows into several dispatches; a tiny part
// limit exercises that on the small fixture (every linear and the head split), decode and prefill.
TEST(VulkanBackend, WeightsSplitByRowsGiveTheSameLogits) {
  auto model = LoadFixture("tiny_qat");
  std::unique_ptr<Backend> whole, split;
  try {
    whole = CreateVulkanBackend(*model, {.capacity = 64});
    split = CreateVulkanBackend(*model, {.capacity = 64}, {.max_weight_part_bytes = 1024});
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kDevice) throw;
    GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
  }
  const std::vector<int32_t> prompt = {2, 40, 41, 300, 7, 8, 9, 10, 11, 500};
  ForwardResult a, b;
  for (int step = 0; step < 3; ++step) {
    const std::span<const int32_t> toks =
        step == 0 ? std::span<const int32_t>(prompt) : std::span<const int32_t>(&prompt[step], 1);
    whole->Forward({.tokens = toks, .mode = OutputMode::kLogits}, &a);
    split->Forward({.tokens = toks, .mode = OutputMode::kLogits}, &b);
    ASSERT_EQ(a.logits.size(), b.logits.size());
    EXPECT_EQ(a.logits, b.logits) << "step " << step;
  }
}

}  // namespace
}  // namespace gemma

namespace gemma {
namespace {

// Prefill chunks of 20 tokens: the subgroup-per-query attention
// (GEMMA_VULKAN_ATTN_PF 1 double, 2 f32 dot products, 3 / 4 with four / two queries per subgroup;
// 32-wide subgroups only) and the per-query one
// (GEMMA_VULKAN_ATTN_PF=0), and the tiled
// linears, against the CPU reference.
// Every position's logits of an n-token prompt (ids (i * mul + add) % V) on `vk` against the CPU
// reference backend with the same options (rel L2 < 1e-4: dense fixtures).
void ExpectPromptLogitsMatchReference(const Model& model, Backend& vk, const BackendOptions& opt,
                                      int n, int mul, int add) {
  const int V = model.text().vocab_size;
  auto cpu = CreateCpuReferenceBackend(model, opt);
  std::vector<int32_t> prompt(n);
  for (int i = 0; i < n; ++i) prompt[i] = static_cast<int32_t>((i * mul + add) % V);
  ForwardResult a, b;
  cpu->Forward({.tokens = prompt, .mode = OutputMode::kLogits, .all_positions = true}, &a);
  vk.Forward({.tokens = prompt, .mode = OutputMode::kLogits, .all_positions = true}, &b);
  ASSERT_EQ(a.logits.size(), b.logits.size());
  for (int t = 0; t < n; ++t) {
    EXPECT_LT(RelL2(&b.logits[size_t(t) * V], &a.logits[size_t(t) * V], V), 1e-4)
        << "position " << t;
  }
}

// A prompt (9 tokens), then one-token steps each fed the previous step's argmax, through the CPU
// reference: the inputs and the reference's logits of every step.
void FullWidthReferenceSteps(const Model& model, const BackendOptions& opt, int steps,
                             std::vector<std::vector<int32_t>>* inputs,
                             std::vector<std::vector<float>>* want) {
  const int V = model.text().vocab_size;
  inputs->assign(steps, {});
  want->assign(steps, {});
  auto cpu = CreateCpuReferenceBackend(model, opt);
  (*inputs)[0].resize(9);
  for (int i = 0; i < 9; ++i)
    (*inputs)[0][i] = i == 0 ? 2 : static_cast<int32_t>((i * 7919 + 13) % V);
  ForwardResult a;
  for (int step = 0; step < steps; ++step) {
    if (step > 0) {
      const std::vector<float>& prev = (*want)[step - 1];
      (*inputs)[step] = {
          static_cast<int32_t>(std::max_element(prev.begin(), prev.end()) - prev.begin())};
    }
    cpu->Forward({.tokens = (*inputs)[step], .mode = OutputMode::kLogits}, &a);
    ASSERT_EQ(a.logits.size(), size_t(V));
    (*want)[step] = a.logits;
  }
}

// Each setting's Vulkan backend over the reference's steps: logits within `tol` relative L2 of the
// reference's or an SRQ flip of the head's output (tests/golden_util.h), the same argmax.
void ExpectFullWidthSteps(const Model& model, const BackendOptions& opt, double tol,
                          const std::vector<Knobs>& settings,
                          const std::vector<std::vector<int32_t>>& inputs,
                          const std::vector<std::vector<float>>& want) {
  const int V = model.text().vocab_size;
  auto argmax = [](const float* l, int n) {
    return static_cast<int32_t>(std::max_element(l, l + n) - l);
  };
  for (const Knobs& env : settings) {
    SCOPED_TRACE(KnobsText(env));
    auto vk = MakeVulkanWith(model, env, opt);
    if (!vk) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
    ForwardResult b;
    int flips = 0;
    for (size_t step = 0; step < inputs.size(); ++step) {
      vk->Forward({.tokens = inputs[step], .mode = OutputMode::kLogits}, &b);
      ASSERT_EQ(b.logits.size(), size_t(V));
      const float* ref = want[step].data();
      const double rel = RelL2(b.logits.data(), ref, V);
      const bool flip = rel >= tol && IsSrqFlip(model, b.logits.data(), ref, V);
      flips += flip;
      EXPECT_TRUE(rel < tol || flip) << "step " << step << ": rel L2 " << rel;
      EXPECT_EQ(argmax(b.logits.data(), V), argmax(ref, V)) << "step " << step;
      std::printf("%s step %zu: rel L2 %.3g%s\n", KnobsText(env).c_str(), step, rel,
                  flip ? " (SRQ flip)" : "");
    }
    testing::Test::RecordProperty("srq_flips" + KnobsText(env), flips);
  }
}

// The decode step at E2B's widths, which the tiny fixtures never reach: the packed-dot multiply
// behind the norm prologue (16-byte weight vectors, several per lane, the chunk-major shared
// input), gate/up with the down projection and the PLE gate with its projection summed by their
// workgroups over full-width rows, both attention head dims with 512-key windows, the LM head's
// capped grid with its next block prefetched. A prompt, then one-token steps fed the CPU
// reference's argmax, against the CPU reference: every step's logits within 1e-4 relative L2 or
// an SRQ flip of the head's output (tests/golden_util.h), the same argmax. The second setting
// gives 1,536-column int2 rows 4 lanes (a lane multiplies 6 vectors), so devices with 8-wide
// subgroups (lavapipe) take the packed-dot path on them too, with the chunk-major input on int4,
// and caps the grid at 64 workgroups, so the LM head loops over blocks with the next one
// prefetched. The third runs the prologues on their first form (PRO_VEC 0: columns tid + u WG,
// read one float at a time, two shuffles per byte), with the RMS factors by the double division
// and square root (RMS_FAST 0) and gate/up's input quantized per set (SHARE_X 0; the synthetic
// scales are equal, so the default shares it). The fourth loads every FAST single-set linear's
// first block early (PFE), the PLE gate's and the looping head's too, at the kernel's start
// (PFE_LATE 0; the default issues them after a prologue's operand loads). The prompt's rows are
// decoded on the device (embed_rows.comp: E2B's int2 embedding rows, int4 PLE rows with a scale
// block per layer, rows longer than a workgroup's pass).
TEST(VulkanBackend, FullWidthModelMatchesReference) {
  const SynthModel synth({.preset = "e2b-qat-mini",
                          .out_dir = testing::TempDir() + "/gemma_vulkan_e2b_qat_mini_" +
                                     std::to_string(getpid()),
                          .seed = 5});
  const Model* model = synth.model.get();
  const BackendOptions opt = {.capacity = 64};
  std::vector<std::vector<int32_t>> inputs;
  std::vector<std::vector<float>> want;
  ASSERT_NO_FATAL_FAILURE(FullWidthReferenceSteps(*model, opt, 5, &inputs, &want));
  const std::vector<Knobs> settings = {{},
                                       {{"GEMMA_VULKAN_MV_LANES_VEC", "6"},
                                        {"GEMMA_VULKAN_MV_XCM", "3"},
                                        {"GEMMA_VULKAN_MV_WGS", "64"}},
                                       {{"GEMMA_VULKAN_PRO_VEC", "0"},
                                        {"GEMMA_VULKAN_RMS_FAST", "0"},
                                        {"GEMMA_VULKAN_SHARE_X", "0"},
                                        {"GEMMA_VULKAN_MV_LANES_VEC", "6"},
                                        {"GEMMA_VULKAN_MV_XCM", "3"}},
                                       {{"GEMMA_VULKAN_MV_PREFETCH_EARLY", "100000"},
                                        {"GEMMA_VULKAN_MV_PREFETCH_EARLY_SET", "7"},
                                        {"GEMMA_VULKAN_MV_PREFETCH_EARLY_LATE", "0"},
                                        {"GEMMA_VULKAN_MV_LANES_VEC", "6"},
                                        {"GEMMA_VULKAN_MV_XCM", "3"},
                                        {"GEMMA_VULKAN_MV_WGS", "64"}}};
  ExpectFullWidthSteps(*model, opt, 1e-4, settings, inputs, want);
}

void ExpectIdenticalSteps(Backend& x, Backend& y, int V, size_t n, int mul, int add,
                          bool argmax_too);  // (below)

// The bf16 checkpoint at E2B's widths (e2b-bf16-mini), whose one-token linears the tiny dense
// fixtures do not reach: 16-byte weight vectors on the vec4-staged input (FXW) behind the norm
// prologues (q/k/v, gate/up's two weight sets, the PLE gate, the tied head) and without one (o,
// the PLE projection), the down projections' input read from global memory (FXG), 32 lanes per
// 1,536-column row. Against the CPU reference, by default and with a 64-workgroup cap (the head
// and the longer linears loop over blocks), within the backend contract's 1e-3 relative L2 (the
// dense sums are f32 in their own order: 6e-5 to 6e-4 here, moved by that order (32 lanes per row
// instead of 64: 5.5e-4 against 9.6e-5 at the first step on lavapipe) in this random-weight model,
// which amplifies rounding; with the prologues' first form, PRO_VEC 0, whose sums of squares run
// in another order, 1.4e-3 by the fourth step on the H200); then bit-identical
// logits against the general float path (DENSE_VEC4 0: the same FMAs in the same order), argmax
// steps between, with the capped grid and with the prologues' first form (the head's form).
TEST(VulkanBackend, FullWidthBf16ModelMatchesReference) {
  const SynthModel synth(
      {.preset = "e2b-bf16-mini",
       .out_dir = testing::TempDir() + "/gemma_vulkan_e2b_bf16_mini_" + std::to_string(getpid()),
       .seed = 7});
  const Model* model = synth.model.get();
  const BackendOptions opt = {.capacity = 64};
  std::vector<std::vector<int32_t>> inputs;
  std::vector<std::vector<float>> want;
  ASSERT_NO_FATAL_FAILURE(FullWidthReferenceSteps(*model, opt, 4, &inputs, &want));
  ExpectFullWidthSteps(*model, opt, 1e-3, {{}, {{"GEMMA_VULKAN_MV_WGS", "64"}}}, inputs, want);
  if (IsSkipped()) return;  // (no Vulkan device: the helper skipped)
  for (const Knobs& env :
       std::vector<Knobs>{{{"GEMMA_VULKAN_MV_WGS", "64"}}, {{"GEMMA_VULKAN_PRO_VEC", "0"}}}) {
    SCOPED_TRACE(KnobsText(env));
    Knobs general_env = env;
    general_env.push_back({"GEMMA_VULKAN_DENSE_VEC4", "0"});
    auto staged = MakeVulkanWith(*model, env, opt);
    auto general = MakeVulkanWith(*model, general_env, opt);
    ASSERT_TRUE(staged && general);
    ExpectIdenticalSteps(*staged, *general, model->text().vocab_size, 12, 7919, 13, true);
  }
}

// A 100-token chunk: its embedding rows are gathered on several host threads (64+ tokens), then
// the chunk's logits at every position against the CPU reference (a dense fixture: with SRQ, f32
// rounding differences in attention can move a quantization step, see tests/golden_util.h).
TEST(VulkanKernels, LongPromptChunkMatchesReference) {
  auto model = LoadFixture("tiny_dense_bf16");
  SetKnob("GEMMA_VULKAN_FILL_THREADS", "3");
  auto vk = MakeVulkan(*model, {.capacity = 256, .slack = 128});
  ClearKnob("GEMMA_VULKAN_FILL_THREADS");
  if (!vk) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
  ASSERT_GE(vk->capabilities().max_chunk, 100);
  ExpectPromptLogitsMatchReference(*model, *vk, {.capacity = 256, .slack = 128}, 100, 101, 7);
}

// VulkanOptions::max_chunk with the slack left to the backend: the sliding rings grow to window +
// chunk, a 150-token prompt runs in chunks of 48 (the window of 8 wrapping its ring), every
// position's logits against the CPU reference; a rewind of the slack's length is exact (the next
// step against a reference with the same rings, rewound alike). Without the option a fixture whose
// window is below 512 keeps chunks of one window.
TEST(VulkanKernels, ChunkOptionGrowsTheRings) {
  auto model = LoadFixture("tiny_dense_bf16");
  const int V = model->text().vocab_size, W = model->text().sliding_window;
  auto plain = MakeVulkan(*model, {.capacity = 256});
  if (!plain) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
  EXPECT_EQ(plain->capabilities().max_chunk, std::min(W, 512));
  plain.reset();
  auto vk = CreateVulkanBackend(*model, {.capacity = 256}, {.max_chunk = 48});
  ASSERT_EQ(vk->capabilities().max_chunk, 48);
  ExpectPromptLogitsMatchReference(*model, *vk, {.capacity = 256}, 150, 31, 5);
  // 150 cached in rings of W + 48: a rewind to 101 keeps every key position 101's window needs.
  ASSERT_EQ(vk->cached(), 150);
  ASSERT_TRUE(vk->Truncate(101));
  auto cpu = CreateCpuReferenceBackend(*model, {.capacity = 256, .slack = 48});
  std::vector<int32_t> prompt(150);
  for (int i = 0; i < 150; ++i) prompt[i] = static_cast<int32_t>((i * 31 + 5) % V);
  ForwardResult a, b;
  cpu->Forward({.tokens = prompt, .mode = OutputMode::kNone}, &a);
  ASSERT_TRUE(cpu->Truncate(101));
  const int32_t next[1] = {17};
  cpu->Forward({.tokens = next, .mode = OutputMode::kLogits}, &a);
  vk->Forward({.tokens = next, .mode = OutputMode::kLogits}, &b);
  ASSERT_EQ(b.logits.size(), size_t(V));
  EXPECT_LT(RelL2(b.logits.data(), a.logits.data(), V), 1e-4);
  // A rewind past the slack: the rings no longer hold that window, the backend resets.
  EXPECT_FALSE(vk->Truncate(vk->cached() - 50));
  EXPECT_EQ(vk->cached(), 0);
}

// Prompt chunks' embedding and PLE rows decoded on the device from the stored rows
// (embed_rows.comp, the default where the kernel knows both tables' kinds) against the host's
// decode into f32 rows (GEMMA_VULKAN_GPU_ROWS=0): every position's logits of a prompt in chunks
// (the last one shorter), bit for bit, for int2 / int4 tables with scale blocks (tiny_qat), bf16
// and f16 tables; f32 tables stay on the host. The stats say which path ran. (E2B's widths, rows
// longer than a workgroup's pass: FullWidthModelMatchesReference's prompt against the CPU
// reference.)
TEST(VulkanBackend, PromptRowsDecodedOnTheDeviceMatchTheHostBitExactly) {
  for (const auto& [name, gpu_expected] :
       std::vector<std::pair<const char*, bool>>{{"tiny_qat", true},
                                                 {"tiny_dense_bf16", true},
                                                 {"tiny_e4b_like_f16", true},
                                                 {"tiny_dense_f32_noshare", false}}) {
    SCOPED_TRACE(name);
    auto model = LoadFixture(name);
    const int V = model->text().vocab_size;
    const BackendOptions opt = {.capacity = 96, .slack = 24};
    auto gpu = MakeVulkan(*model, opt);
    if (!gpu) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
    auto host = MakeVulkanWith(*model, {{"GEMMA_VULKAN_GPU_ROWS", "0"}}, opt);
    VulkanStats sg, sh;
    ASSERT_TRUE(GetVulkanStats(*gpu, &sg) && GetVulkanStats(*host, &sh));
    const std::string tag = "prompt rows decoded on the device";
    EXPECT_EQ(sg.kernels.find(tag) != std::string::npos, gpu_expected) << sg.kernels;
    EXPECT_EQ(sh.kernels.find(tag), std::string::npos);
    const int n = 57;
    std::vector<int32_t> prompt(n);
    for (int i = 0; i < n; ++i) prompt[i] = static_cast<int32_t>((i * 37 + 11) % V);
    ForwardResult a, b;
    gpu->Forward({.tokens = prompt, .mode = OutputMode::kLogits, .all_positions = true}, &a);
    host->Forward({.tokens = prompt, .mode = OutputMode::kLogits, .all_positions = true}, &b);
    ASSERT_EQ(a.logits.size(), size_t(n) * V);
    ASSERT_EQ(b.logits.size(), a.logits.size());
    EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * 4), 0);
  }
}

// Recorded prompt chunks are replayed for the next chunk of the same length, outputs and mode
// (GEMMA_VULKAN_CHUNK_CACHE): chunks of 20 tokens returning their last position's logits (the
// trailing shared layers run for that position alone, at a position the replayed commands read
// from the staging buffer) at three positions, and all-positions chunks, bit for bit against a
// backend that records every chunk anew (and one keeping a single entry, re-recorded at every
// change of shape), and (dense fixtures: with SRQ, f32 rounding differences
// in attention can move a quantization step, tests/golden_util.h) against the CPU reference; a
// rewind between them.
TEST(VulkanBackend, ReplayedPromptChunksMatchFreshRecordings) {
  for (const char* fixture : {"tiny_dense_bf16", "tiny_e4b_like_f16", "tiny_qat"}) {
    SCOPED_TRACE(fixture);
    const bool dense = std::string(fixture) != "tiny_qat";
    auto model = LoadFixture(fixture);
    const int V = model->text().vocab_size;
    const BackendOptions opt = {.capacity = 128, .slack = 24};
    auto vk = MakeVulkan(*model, opt);
    if (!vk) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
    auto fresh = MakeVulkanWith(*model, {{"GEMMA_VULKAN_CHUNK_CACHE", "0"}}, opt);
    // one entry: every change of shape records over the least recently used one
    auto evicting = MakeVulkanWith(*model, {{"GEMMA_VULKAN_CHUNK_CACHE", "1"}}, opt);
    auto cpu = CreateCpuReferenceBackend(*model, opt);
    std::vector<int32_t> tokens(100);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 53 + 7) % V);
    auto step = [&](int begin, int n, bool all) {
      const std::span<const int32_t> in(tokens.data() + begin, n);
      const ForwardRequest req{.tokens = in, .mode = OutputMode::kLogits, .all_positions = all};
      ForwardResult a, b, c, d;
      vk->Forward(req, &a);
      fresh->Forward(req, &b);
      cpu->Forward(req, &c);
      evicting->Forward(req, &d);
      ASSERT_EQ(d.logits.size(), a.logits.size());
      EXPECT_EQ(std::memcmp(d.logits.data(), b.logits.data(), d.logits.size() * 4), 0)
          << "chunk at " << begin << " (one entry)";
      ASSERT_EQ(a.logits.size(), size_t(all ? n : 1) * V);
      ASSERT_EQ(b.logits.size(), a.logits.size());
      EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * 4), 0)
          << "chunk at " << begin;
      for (size_t t = 0; dense && t < a.logits.size() / V; ++t)
        EXPECT_LT(RelL2(&a.logits[t * V], &c.logits[t * V], V), 1e-4) << "chunk at " << begin;
    };
    step(0, 20, false);
    step(20, 20, false);  // replayed
    step(40, 20, true);
    step(60, 20, true);  // replayed
    ASSERT_TRUE(vk->Truncate(60) && fresh->Truncate(60) && cpu->Truncate(60) &&
                evicting->Truncate(60));
    step(60, 20, false);  // replayed, after a rewind
  }
}

// Where the backend says its prefill attention runs on matrix units, a `m`-token step's profile
// lists attention_cm (so the tests below cover it there; caches not advanced).
void ExpectMatrixUnitAttentionWhereOffered(Backend& vk, int V, int m) {
  VulkanStats st;
  ASSERT_TRUE(GetVulkanStats(vk, &st));
  if (st.kernels.find("prefill attention matrix units") == std::string::npos) return;
  std::vector<int32_t> tokens(m);
  for (int i = 0; i < m; ++i) tokens[i] = (i * 13 + 1) % V;
  const auto prof = ProfileVulkanStep(vk, tokens);
  if (prof.empty()) return;  // (no timestamps)
  bool found = false;
  for (const auto& [k, us] : prof) found = found || k.rfind("attention_cm", 0) == 0;
  EXPECT_TRUE(found) << "the prefill attention did not run on matrix units";
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

// Step t's tokens when `tokens` is fed as a prompt of `prompt` tokens (step t == prompt), then one
// token a step (step t > prompt: token t - 1).
std::span<const int32_t> StepTokens(const std::vector<int32_t>& tokens, size_t prompt, size_t t) {
  return t == prompt ? std::span<const int32_t>(tokens.data(), prompt)
                     : std::span<const int32_t>(&tokens[t - 1], 1);
}

// The prompt tokens[0, prompt) in one step, then one token at a time: logits against the CPU
// reference's at every step (relative L2 below 1e-4).
void ExpectStepsMatchCpu(Backend& vk, Backend& cpu, std::span<const int32_t> tokens, size_t prompt,
                         int V) {
  ForwardResult a, b;
  cpu.Forward({.tokens = tokens.first(prompt), .mode = OutputMode::kLogits}, &a);
  vk.Forward({.tokens = tokens.first(prompt), .mode = OutputMode::kLogits}, &b);
  for (size_t t = prompt; t < tokens.size(); ++t) {
    cpu.Forward({.tokens = tokens.subspan(t, 1), .mode = OutputMode::kLogits}, &a);
    vk.Forward({.tokens = tokens.subspan(t, 1), .mode = OutputMode::kLogits}, &b);
    ASSERT_EQ(a.logits.size(), b.logits.size());
    ASSERT_LT(RelL2(b.logits.data(), a.logits.data(), V), 1e-4) << "position " << t;
  }
}

// One-token steps past the sliding window (ring wrap, several key splits), logits against the CPU
// reference at every step: the fused one-token attention (attn_fused.comp, opt-in since issue 34:
// GEMMA_VULKAN_ATTN_FUSED=1) with its
// q/k norm + RoPE inside or in qkrope's dispatch, one or several key blocks per split, merged by
// the last split (the default: arrival by one acquire-release atomic, partials read through the
// non-coherent alias; or full barriers, coherent loads) or by a second dispatch (MODE 1), scalar
// or 16-byte cache loads; the three-kernel path (the default: qkrope +
// attention.comp + attn_combine) and the opt-in subgroup-per-split kernel (GEMMA_VULKAN_ATTN_DEC=1,
// 32-wide subgroups only; elsewhere the three-kernel path). Slack 8 gives the sliding layers a
// ring shorter than a key block (rows by division), slack 40 one that holds attention.comp's
// 32-key block (rows by one wrap from the block's first row). Fixtures: one K/V head of dim 32,
// two of dim 24 (KV sharing in both).
const std::vector<Knobs> kDecodeAttentionKnobs = {
    {},
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"}},
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_KW", "1"}},  // several splits hold keys: the merge runs
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_KW", "1"},
     {"GEMMA_VULKAN_SPLITS", "2"}},  // several blocks a split
    // ... with the next block's V rows loaded after this block's sums (VPF off; the default
    // loads them with the next block's K rows), and the default with scalar loads
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_KW", "1"},
     {"GEMMA_VULKAN_SPLITS", "2"},
     {"GEMMA_VULKAN_ATTN_VPF", "0"}},
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_KW", "1"},
     {"GEMMA_VULKAN_SPLITS", "2"},
     {"GEMMA_VULKAN_ATTN_VEC", "0"}},
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_KW", "1"},
     {"GEMMA_VULKAN_ATTN_FUSED_MODE", "1"}},  // merge dispatch
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_KW", "2"},
     {"GEMMA_VULKAN_ATTN_FUSED_ROPE", "0"}},
    // 16-byte loads (a lane holds 8 of dim 32's values on 4 lanes per row) and scalar ones
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_VEC", "1"},
     {"GEMMA_VULKAN_ATTN_RL", "4"}},
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_VEC", "1"},
     {"GEMMA_VULKAN_ATTN_RL", "4"},
     {"GEMMA_VULKAN_ATTN_KW", "1"}},
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_RL", "4"},
     {"GEMMA_VULKAN_ATTN_KW", "1"},
     {"GEMMA_VULKAN_ATTN_FUSED_MODE", "1"}},
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_VEC", "0"},
     {"GEMMA_VULKAN_ATTN_RL", "4"}},
    // the last split merges after full memory barriers around a relaxed arrival count, reading
    // the partials through the coherent binding
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_KW", "1"},
     {"GEMMA_VULKAN_ATTN_FENCE", "0"},
     {"GEMMA_VULKAN_ATTN_NC_MERGE", "0"}},
    // ... after the acquire-release atomic, coherent loads
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_RL", "4"},
     {"GEMMA_VULKAN_ATTN_KW", "1"},
     {"GEMMA_VULKAN_ATTN_NC_MERGE", "0"}},
    // ... after the full barriers, the non-coherent alias
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_KW", "1"},
     {"GEMMA_VULKAN_ATTN_FENCE", "0"}},
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_RL", "4"},
     {"GEMMA_VULKAN_ATTN_KW", "1"}},
    {{"GEMMA_VULKAN_ATTN_DEC", "1"}},
    // two query heads per workgroup in the full-attention layers (HPW) from position 40 (the
    // one-token steps switch command buffers there), and from the start with several blocks a
    // split
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"}, {"GEMMA_VULKAN_ATTN_HPW_FROM", "40"}},
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_KW", "1"},
     {"GEMMA_VULKAN_SPLITS", "2"},
     {"GEMMA_VULKAN_ATTN_HPW_FROM", "0"}},
};

// One test per variant (the NVIDIA driver refuses Vulkan instances after ~30 in a process).
class DecodeAttentionVariants : public ::testing::TestWithParam<size_t> {};
INSTANTIATE_TEST_SUITE_P(Knobs, DecodeAttentionVariants,
                         ::testing::Range(size_t(0), kDecodeAttentionKnobs.size()));

TEST_P(DecodeAttentionVariants, MatchReference) {
  const Knobs& env = kDecodeAttentionKnobs[GetParam()];
  for (const char* fixture : {"tiny_dense_bf16", "tiny_e4b_like_f16"})
    for (const int slack : {8, 40}) {
      SCOPED_TRACE(std::string(fixture) + " slack " + std::to_string(slack) + KnobsText(env));
      auto model = LoadFixture(fixture);
      const int V = model->text().vocab_size;
      auto vk = MakeVulkanWith(*model, env, {.capacity = 128, .slack = slack});
      if (!vk) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
      auto cpu = CreateCpuReferenceBackend(*model, {.capacity = 128, .slack = slack});
      std::vector<int32_t> tokens(100);
      for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 53 + 5) % V);
      ASSERT_NO_FATAL_FAILURE(ExpectStepsMatchCpu(*vk, *cpu, tokens, 8, V));
    }
}

// A sliding window longer than a key block (tiny's structure, window 100, a ring of 108): with
// one or two key splits (ATTN_KW=1: 16- or 32-key blocks) a split's keys span several blocks
// whose ring rows wrap (attn_fused advances a block's ring row by a compare), and the new key is
// taken before the key loop; logits against the CPU reference at every one-token step past the
// wrap.
TEST(VulkanKernels, FusedAttentionSlidingWindowOverSeveralBlocks) {
  const SynthModel synth(
      {.preset = "tiny",
       .out_dir = testing::TempDir() + "/gemma_vulkan_tiny_window_" + std::to_string(getpid()),
       .seed = 3,
       .sliding_window = 100});
  const Model* model = synth.model.get();
  ASSERT_EQ(model->text().sliding_window, 100);
  const int V = model->text().vocab_size;
  const BackendOptions opt = {.capacity = 160, .slack = 8};
  std::vector<int32_t> tokens(132);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7919 + 3) % V);
  for (const Knobs& env :
       std::vector<Knobs>{{{"GEMMA_VULKAN_ATTN_FUSED", "1"},
                           {"GEMMA_VULKAN_ATTN_KW", "1"},
                           {"GEMMA_VULKAN_ATTN_FUSED_SPLITS", "1"}},
                          {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
                           {"GEMMA_VULKAN_ATTN_KW", "1"},
                           {"GEMMA_VULKAN_ATTN_FUSED_SPLITS", "2"}},
                          {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
                           {"GEMMA_VULKAN_ATTN_KW", "1"},
                           {"GEMMA_VULKAN_ATTN_FUSED_SPLITS", "2"},
                           {"GEMMA_VULKAN_ATTN_VPF", "0"}}}) {
    SCOPED_TRACE(KnobsText(env));
    auto vk = MakeVulkanWith(*model, env, opt);
    if (!vk) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
    auto cpu = CreateCpuReferenceBackend(*model, opt);
    ASSERT_NO_FATAL_FAILURE(ExpectStepsMatchCpu(*vk, *cpu, tokens, 96, V));
  }
}

// The fused attention's merge in several rounds (each invocation loads the first ATTN_MB partials
// before the split weights are known, the rest ATTN_MB a round after), in the last split's
// workgroup (MODE 0: the default, arrival by one acquire-release atomic and the partials read
// through the non-coherent alias; full barriers and coherent loads) and in the merge dispatch
// (MODE 1): 64 splits of one key block (ATTN_KW=1: 32 keys on 8-wide subgroups, 16 on 32-wide)
// and 4 partials a round give a full-attention layer 3 to 8 rounds at 300-500 positions.
TEST(VulkanKernels, FusedAttentionMergesManySplits) {
  const std::vector<Knobs> merges = {
      {},
      {{"GEMMA_VULKAN_ATTN_FENCE", "0"}},
      {{"GEMMA_VULKAN_ATTN_NC_MERGE", "0"}},
      {{"GEMMA_VULKAN_ATTN_FENCE", "0"}, {"GEMMA_VULKAN_ATTN_NC_MERGE", "0"}},
      {{"GEMMA_VULKAN_ATTN_FUSED_MODE", "1"}},
      {{"GEMMA_VULKAN_ATTN_HPW_FROM", "0"}}};  // the last split merges both of its heads
  for (const Knobs& merge : merges) {
    Knobs env = {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
                 {"GEMMA_VULKAN_ATTN_KW", "1"},
                 {"GEMMA_VULKAN_ATTN_MB", "4"},
                 {"GEMMA_VULKAN_SPLITS", "64"}};
    env.insert(env.end(), merge.begin(), merge.end());
    SCOPED_TRACE(KnobsText(env));
    auto model = LoadFixture("tiny_dense_bf16");
    const int V = model->text().vocab_size;
    auto vk = MakeVulkanWith(*model, env, {.capacity = 512});
    if (!vk) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
    auto cpu = CreateCpuReferenceBackend(*model, {.capacity = 512});
    std::vector<int32_t> tokens(500);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37 + 11) % V);
    ASSERT_NO_FATAL_FAILURE(ExpectStepsMatchCpu(*vk, *cpu, tokens, 300, V));
  }
}

// One-token-step fusions against the default step and the CPU reference: the residual norms
// applied in the next linear's prologue (GEMMA_VULKAN_CNORM=1, linear.comp PRO; the residual
// stream alternates between two buffers), q/k norm + RoPE inside the decode attention
// (GEMMA_VULKAN_FUSE_ROPE=1, attention_rope: the split holding the new position writes its K/V
// rows), and both (these two with the three-kernel attention, GEMMA_VULKAN_ATTN_FUSED=0, which
// they modify). Logits of every decoded position past the sliding window (two key splits on
// lavapipe), with weights whole and split by rows (several dispatches per linear, one writes the
// residual), and the prompt's trailing-layer pass (which ends on a one-token body).
// Opt-in one-token variants, each against the default step and the CPU reference. MV_WGS 3: the
// one-token linears on three workgroups, each looping over many row blocks. One test per variant
// (the NVIDIA driver refuses Vulkan instances after ~30 in a process).
const std::vector<Knobs> kOneTokenKnobs = {
    {{"GEMMA_VULKAN_CNORM", "1"}},
    {{"GEMMA_VULKAN_FUSE_ROPE", "1"}, {"GEMMA_VULKAN_ATTN_FUSED", "0"}},
    {{"GEMMA_VULKAN_CNORM", "1"},
     {"GEMMA_VULKAN_FUSE_ROPE", "1"},
     {"GEMMA_VULKAN_ATTN_FUSED", "0"}},
    {{"GEMMA_VULKAN_MV_WGS", "3"}},
    {{"GEMMA_VULKAN_MV_WGS", "3"}, {"GEMMA_VULKAN_CNORM", "1"}},
    {{"GEMMA_VULKAN_MV_WGS", "3"},
     {"GEMMA_VULKAN_MV_MAX_ROWS", "64"},
     {"GEMMA_VULKAN_MV_WGS_LONG", "2"}},
    {{"GEMMA_VULKAN_ATTN_COMBINE", "1"}, {"GEMMA_VULKAN_ATTN_FUSED", "0"}},
    {{"GEMMA_VULKAN_ATTN_COMBINE", "1"},
     {"GEMMA_VULKAN_MV_WGS", "3"},
     {"GEMMA_VULKAN_CNORM", "1"},
     {"GEMMA_VULKAN_ATTN_FUSED", "0"}},
    {{"GEMMA_VULKAN_MV_LANES", "4"}},
    {{"GEMMA_VULKAN_MV_LANES", "8"},
     {"GEMMA_VULKAN_MV_LANES_VEC", "1"},
     {"GEMMA_VULKAN_MV_WGS", "3"}},
    {{"GEMMA_VULKAN_XQ_PERM", "0"}},
    {{"GEMMA_VULKAN_XQ_PERM", "0"}, {"GEMMA_VULKAN_CNORM", "0"}},
    {{"GEMMA_VULKAN_SPLITS_ADAPT", "1"},
     {"GEMMA_VULKAN_SPLITS", "64"},
     {"GEMMA_VULKAN_ATTN_FUSED", "0"}},
    {{"GEMMA_VULKAN_SPLITS", "64"},
     {"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_KW", "1"}},  // fused attention, merged splits
    {{"GEMMA_VULKAN_PACK_ATOMIC", "1"}},
    {{"GEMMA_VULKAN_RMS_ALL", "1"}},
    {{"GEMMA_VULKAN_RMS_ALL", "1"}, {"GEMMA_VULKAN_MV_WGS", "3"}},
    {{"GEMMA_VULKAN_PRO_VEC", "0"}},
    {{"GEMMA_VULKAN_PRO_VEC", "0"}, {"GEMMA_VULKAN_MV_WGS", "3"}},
    // the first block's weights loaded at every FAST single-set linear's start (PFE), with a
    // loop over blocks too, and nowhere
    {{"GEMMA_VULKAN_MV_PREFETCH_EARLY", "100000"}, {"GEMMA_VULKAN_MV_PREFETCH_EARLY_SET", "7"}},
    {{"GEMMA_VULKAN_MV_PREFETCH_EARLY", "100000"},
     {"GEMMA_VULKAN_MV_PREFETCH_EARLY_SET", "7"},
     {"GEMMA_VULKAN_MV_WGS", "3"}},
    {{"GEMMA_VULKAN_MV_PREFETCH_EARLY", "0"}},
    // the early loads before the prologues' operand loads (the default: after them, PFE_LATE)
    {{"GEMMA_VULKAN_MV_PREFETCH_EARLY", "100000"},
     {"GEMMA_VULKAN_MV_PREFETCH_EARLY_SET", "7"},
     {"GEMMA_VULKAN_MV_PREFETCH_EARLY_LATE", "0"}},
    // the prologues' RMS factors by the double division and square root (the default: Newton
    // steps), gate/up's input quantized for each set (the default: once where the scales agree)
    {{"GEMMA_VULKAN_RMS_FAST", "0"}, {"GEMMA_VULKAN_SHARE_X", "0"}},
    // the PLE projection as its own dispatch (the default: summed by the gate's workgroups, EPI
    // 4, in 4-row blocks: one projection word per row, loaded before the gate's multiply); the
    // gate's general lane choice (64-row blocks on the fixtures: the words loaded after the
    // multiply) and 16-row blocks (four words)
    {{"GEMMA_VULKAN_PLE_FUSE", "0"}},
    {{"GEMMA_VULKAN_PLE_LANES", "0"}},
    {{"GEMMA_VULKAN_PLE_LANES", "16"}},
    // the down projection as its own dispatch (the default: summed by gate/up's workgroups, DJ),
    // summed by three workgroups looping over gate/up's row blocks, and with its words read
    // from the matrix before the multiply into one copy of the sums
    {{"GEMMA_VULKAN_DOWN_FUSE", "0"}},
    {{"GEMMA_VULKAN_DOWN_FUSE_WGS", "3"}},
    {{"GEMMA_VULKAN_DOWN_FUSE_PAIRS", "0"},
     {"GEMMA_VULKAN_DOWN_FUSE_LATE", "0"},
     {"GEMMA_VULKAN_DOWN_FUSE_COPIES", "1"}},
    // the next row block's weights loaded before a block's multiply where workgroups loop over
    // several (the default; the LM head on three workgroups), and not
    {{"GEMMA_VULKAN_MV_WGS", "3"}, {"GEMMA_VULKAN_MV_PREFETCH_BLOCK", "1"}},
    {{"GEMMA_VULKAN_MV_WGS", "3"}, {"GEMMA_VULKAN_MV_PREFETCH_BLOCK", "0"}}};

class OneTokenVariants : public ::testing::TestWithParam<size_t> {};
INSTANTIATE_TEST_SUITE_P(Knobs, OneTokenVariants,
                         ::testing::Range(size_t(0), kOneTokenKnobs.size()));

TEST_P(OneTokenVariants, MatchDefaultStep) {
  const Knobs& env = kOneTokenKnobs[GetParam()];
  for (const char* fixture : {"tiny_qat", "tiny_dense_bf16", "tiny_e4b_like_f16"}) {
    for (size_t part : {size_t(0), size_t(1024)}) {
      std::string trace = std::string(fixture) + " part " + std::to_string(part);
      for (const auto& [k, v] : env) trace += std::string(" ") + k + "=" + v;
      SCOPED_TRACE(trace);
      auto model = LoadFixture(fixture);
      const int V = model->text().vocab_size;
      const BackendOptions opt{.capacity = 96, .slack = 16};
      std::unique_ptr<Backend> tails, cnorm;
      try {
        SetKnob("GEMMA_VULKAN_CNORM", "0");  // the baseline: norm tails, a workgroup per block
        SetKnob("GEMMA_VULKAN_MV_WGS", "0");
        tails = CreateVulkanBackend(*model, opt, {.max_weight_part_bytes = part});
        ClearKnob("GEMMA_VULKAN_CNORM");
        ClearKnob("GEMMA_VULKAN_MV_WGS");
        for (const auto& [k, v] : env) SetKnob(k, v);
        cnorm = CreateVulkanBackend(*model, opt, {.max_weight_part_bytes = part});
        for (const auto& [k, v] : env) ClearKnob(k);
      } catch (const Error& e) {
        for (const auto& [k, v] : env) ClearKnob(k);
        if (e.code() != ErrorCode::kDevice) throw;
        GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
      }
      auto cpu = CreateCpuReferenceBackend(*model, opt);
      std::vector<int32_t> tokens(part ? 30 : 50);
      for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37 + 11) % V);
      const std::span<const int32_t> prompt(tokens.data(), 12);
      ForwardResult a, b, c;
      for (size_t t = 12; t <= tokens.size(); ++t) {
        const std::span<const int32_t> in =
            t == 12 ? prompt : std::span<const int32_t>(&tokens[t - 1], 1);
        tails->Forward({.tokens = in, .mode = OutputMode::kLogits}, &a);
        cnorm->Forward({.tokens = in, .mode = OutputMode::kLogits}, &b);
        cpu->Forward({.tokens = in, .mode = OutputMode::kLogits}, &c);
        ASSERT_EQ(b.logits.size(), size_t(V));
        EXPECT_LT(RelL2(b.logits.data(), c.logits.data(), V), 1e-4) << "position " << t;
        EXPECT_LT(RelL2(b.logits.data(), a.logits.data(), V), 1e-4) << "position " << t;
      }
    }
  }
}

// How two logit vectors differ: the count of differing values and the largest relative difference
// (one ulp: an order of operations; large: a wrong value).
std::string DiffText(const float* a, const float* b, int n) {
  int count = 0;
  double worst = 0.0;
  for (int i = 0; i < n; ++i) {
    if (std::memcmp(a + i, b + i, sizeof(float)) == 0) continue;
    ++count;
    const double den = std::max({std::fabs(double(a[i])), std::fabs(double(b[i])), 1e-30});
    worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])) / den);
  }
  return std::to_string(count) + " of " + std::to_string(n) + " logits differ, largest relative " +
         std::to_string(worst);
}

// Feeds both backends the same tokens ((i * mul + add) % V: an 8-token prompt, then one token a
// step up to n) and expects byte-identical logits at every position; with `argmax_too` every
// other step asks for the argmax instead (equal ids).
void ExpectIdenticalSteps(Backend& x, Backend& y, int V, size_t n, int mul, int add,
                          bool argmax_too = false) {
  std::vector<int32_t> tokens(n);
  for (size_t i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>((i * mul + add) % V);
  ForwardResult a, b;
  for (size_t t = 8; t <= n; ++t) {
    const std::span<const int32_t> in = StepTokens(tokens, 8, t);
    const OutputMode mode = argmax_too && t % 2 == 0 ? OutputMode::kArgmax : OutputMode::kLogits;
    x.Forward({.tokens = in, .mode = mode}, &a);
    y.Forward({.tokens = in, .mode = mode}, &b);
    ASSERT_EQ(a.ids, b.ids) << "position " << t;
    if (mode != OutputMode::kLogits) continue;
    ASSERT_EQ(a.logits.size(), size_t(V));
    ASSERT_EQ(b.logits.size(), size_t(V));
    EXPECT_EQ(0, std::memcmp(a.logits.data(), b.logits.data(), sizeof(float) * V))
        << "position " << t << ": " << DiffText(a.logits.data(), b.logits.data(), V);
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
// (GEMMA_VULKAN_UPLOAD_SPLIT), written before the submission or after it, the command buffer
// waiting on the host's events (GEMMA_VULKAN_EARLY_SUBMIT, the default): the same kernels on the
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
      {{"GEMMA_VULKAN_UPLOAD_LOCAL", "0"}, {"GEMMA_VULKAN_UPLOAD_SPLIT", "0"}},
      {{"GEMMA_VULKAN_EARLY_SUBMIT", "0"}},
      {{"GEMMA_VULKAN_EARLY_SUBMIT", "0"}, {"GEMMA_VULKAN_UPLOAD_SPLIT", "0"}},
      // the waiting buffers submitted after the inputs are written
      {{"GEMMA_VULKAN_EARLY_SUBMIT", "2"}}};
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
