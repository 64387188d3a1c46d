// Helpers of the Vulkan backend's tests (vulkan_test, vulkan_kernels_test, vulkan_variants_test):
// fixtures, one shared device per model (contexts with their own kernel choices), greedy decoding
// and comparisons against the CPU reference.
#pragma once

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
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/reference_ops.h"
#include "backend/vulkan/vk_device.h"
#include "backend/vulkan/vulkan_backend.h"
#include "backend/vulkan/vulkan_test_hooks.h"
#include "bench/vulkan/vulkan_lab.h"
#include "gemma/error.h"
#include "golden_util.h"  // RelL2, IsSrqFlip
#include "model/model.h"
#include "model/synth.h"

namespace gemma {

// Fixtures are loaded once per process and kept (their backends share a device: BaseContexts).
inline std::map<std::string, std::shared_ptr<Model>>& LoadedFixtures() {
  static std::map<std::string, std::shared_ptr<Model>> loaded;
  return loaded;
}

inline std::shared_ptr<Model> LoadFixture(const char* name) {
  std::shared_ptr<Model>& m = LoadedFixtures()[name];
  if (!m) m = Model::Load(std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/model/" + name);
  return m;
}

// One device per model in a test: the backends a test makes for a model are contexts on the
// device, pipelines and weights of the first (a base context kept here), with their kernel
// choices per context, so a table of kernel variants builds each pipeline and uploads the weights
// once (on lavapipe, pipeline creation was ~90% of a variant test's time).
inline std::map<const Model*, std::unique_ptr<Backend>>& BaseContexts() {
  LoadedFixtures();  // (made first, destroyed after the contexts)
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
inline std::map<std::string, std::string>& KnobTable() {
  static std::map<std::string, std::string> t;
  return t;
}

inline void SyncKnobs() {
  std::string s;
  for (const auto& [k, v] : KnobTable()) s += k + "=" + v + " ";
  if (s.empty())
    unsetenv("GEMMA_VULKAN_KERNELS");
  else
    setenv("GEMMA_VULKAN_KERNELS", s.c_str(), 1);
}

inline void SetKnob(const char* name, const char* value) {
  KnobTable()[name] = value;
  SyncKnobs();
}

inline void ClearKnob(const char* name) {
  KnobTable().erase(name);
  SyncKnobs();
}

using Knobs = std::vector<std::pair<const char*, const char*>>;

// A context for `model` with the kernel choices `env` over the defaults (and GEMMA_VULKAN_KERNELS,
// as SetKnob leaves it), on the model's shared device; nullptr without a usable device. Choices
// the device or weights depend on (DOWN_FUSE_PAIRS: the weights' layout; SPIN_US, PIPE_STATS: the
// device) get a device of their own.
inline std::unique_ptr<Backend> MakeVulkanWith(const Model& model, const Knobs& env,
                                               BackendOptions opt) {
  KernelConfig kc;
  bool own_device = false;
  for (const auto& [k, v] : env) {
    kc.Set(k, std::atoi(v));
    for (const char* d : {"DOWN_FUSE_PAIRS", "SPIN_US", "PIPE_STATS"})
      own_device = own_device || std::string(k).ends_with(d);
  }
  try {
    if (own_device) {
      VulkanOptions vo;
      vo.kernels = kc;
      return CreateVulkanBackend(model, opt, vo);
    }
    std::unique_ptr<Backend>& base = BaseContexts()[&model];
    if (!base) base = CreateVulkanBackend(model, {.capacity = 8});
    return CreateVulkanSibling(*base, opt, kc);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kDevice) return nullptr;
    throw;
  }
}

inline std::unique_ptr<Backend> MakeVulkan(const Model& model,
                                           BackendOptions opt = {.capacity = 128}) {
  return MakeVulkanWith(model, {}, opt);
}

inline std::string KnobsText(const Knobs& env) {
  std::string s;
  for (const auto& [k, v] : env) s += std::string(" ") + k + "=" + v;
  return s;
}

// A Vulkan device, or null where none is usable (Error(kDevice)); other errors propagate.
inline std::unique_ptr<vk::Device> MakeDeviceOrNull() {
  try {
    return std::make_unique<vk::Device>(vk::DeviceOptions{});
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kDevice) return nullptr;
    throw;
  }
}

#define VULKAN_OR_SKIP(var, model)                                              \
  auto var = MakeVulkan(model);                                                 \
  if (!var) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine"; \
  static_assert(true)

// Greedy one-token steps from the last id of `out` until it holds n ids.
inline void ContinueGreedy(Backend& b, std::vector<int32_t>& out, size_t n) {
  ForwardResult r;
  while (out.size() < n) {
    const int32_t t = out.back();
    b.Forward({.tokens = std::span<const int32_t>(&t, 1)}, &r);
    out.push_back(r.ids.back());
  }
}

inline std::vector<int32_t> Decode(Backend& b, std::vector<int32_t> prompt, int n) {
  ForwardResult r;
  b.Forward({.tokens = prompt, .mode = OutputMode::kArgmax}, &r);
  std::vector<int32_t> out = {r.ids.back()};
  ContinueGreedy(b, out, static_cast<size_t>(n));
  return out;
}

// Prefill chunks of 20 tokens: the subgroup-per-query attention
// (GEMMA_VULKAN_ATTN_PF 1 double, 2 f32 dot products, 3 / 4 with four / two queries per subgroup;
// 32-wide subgroups only) and the per-query one
// (GEMMA_VULKAN_ATTN_PF=0), and the tiled
// linears, against the CPU reference.
// Every position's logits of an n-token prompt (ids (i * mul + add) % V) on `vk` against the CPU
// reference backend with the same options (rel L2 < 1e-4: dense fixtures).
inline void ExpectPromptLogitsMatchReference(const Model& model, Backend& vk,
                                             const BackendOptions& opt, int n, int mul, int add) {
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

// Where the backend says its prefill attention runs on matrix units, a `m`-token step's profile
// lists attention_cm (so the tests below cover it there; caches not advanced).
inline void ExpectMatrixUnitAttentionWhereOffered(Backend& vk, int V, int m) {
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

// Step t's tokens when `tokens` is fed as a prompt of `prompt` tokens (step t == prompt), then one
// token a step (step t > prompt: token t - 1).
inline std::span<const int32_t> StepTokens(const std::vector<int32_t>& tokens, size_t prompt,
                                           size_t t) {
  return t == prompt ? std::span<const int32_t>(tokens.data(), prompt)
                     : std::span<const int32_t>(&tokens[t - 1], 1);
}

// The prompt tokens[0, prompt) in one step, then one token at a time: logits against the CPU
// reference's at every step (relative L2 below 1e-4).
inline void ExpectStepsMatchCpu(Backend& vk, Backend& cpu, std::span<const int32_t> tokens,
                                size_t prompt, int V) {
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

// How two logit vectors differ: the count of differing values and the largest relative difference
// (one ulp: an order of operations; large: a wrong value).
inline std::string DiffText(const float* a, const float* b, int n) {
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
inline void ExpectIdenticalSteps(Backend& x, Backend& y, int V, size_t n, int mul, int add,
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

}  // namespace gemma
