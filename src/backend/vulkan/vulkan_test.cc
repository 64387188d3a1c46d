// Vulkan backend behaviour beyond the goldens: device-loss recovery, typed errors, stats, weights
// split by rows, full-width models and prompt chunks against the CPU reference.
#include <random>

#include "backend/cpu/fast/cpu_fast_backend.h"
#include "backend/vulkan/vk_device.h"
#include "backend/vulkan/vulkan_test_util.h"
#include "backend/vulkan/vulkan_tower.h"
#include "core/thread_pool.h"

namespace gemma {
namespace {

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
          const double span_us = std::stod(t.substr(t.find("| first start to last end | ") + 28));
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

// Devices made and destroyed many times in one process (what engine reloads do) keep working. With
// an instance per device, NVIDIA's driver (580, H200) refused the 30th: the loader unloads the
// driver with the last instance, and each load of that driver takes static TLS for good.
TEST(VulkanDevice, ManyDevicesOneAfterAnotherInOneProcess) {
  auto model = LoadFixture("tiny_dense_bf16");
  VULKAN_OR_SKIP(backend, *model);
  const std::string name = vk::Device(vk::DeviceOptions{}).name();
  for (int i = 0; i < 100; ++i) {
    vk::Device d(vk::DeviceOptions{});
    ASSERT_EQ(d.name(), name) << "device " << i;
  }
}

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
// block per layer, rows longer than a workgroup's pass). CI runs the default setting; the others
// are opt-in arms (the slow tier: FullWidthModelVariantsMatchReference).
void FullWidthQat(bool variants) {
  const SynthModel synth(
      {.preset = "e2b-qat-mini",
       .out_dir = testing::TempDir() + "/gemma_vulkan_e2b_qat_mini_" + std::to_string(getpid()),
       .seed = 5});
  const Model* model = synth.model.get();
  const BackendOptions opt = {.capacity = 64};
  std::vector<std::vector<int32_t>> inputs;
  std::vector<std::vector<float>> want;
  ASSERT_NO_FATAL_FAILURE(FullWidthReferenceSteps(*model, opt, 5, &inputs, &want));
  if (!variants) {
    ExpectFullWidthSteps(*model, opt, 1e-4, {{}}, inputs, want);
    return;
  }
  const std::vector<Knobs> settings = {{{"GEMMA_VULKAN_MV_LANES_VEC", "6"},
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

TEST(VulkanBackend, FullWidthModelMatchesReference) { FullWidthQat(false); }
TEST(VulkanBackend, FullWidthModelVariantsMatchReference) { FullWidthQat(true); }

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
// steps between, with the capped grid and with the prologues' first form (the head's form). CI runs
// the default against the reference; the rest is the slow tier (FullWidthBf16ModelVariants...).
void FullWidthBf16(bool variants) {
  const SynthModel synth(
      {.preset = "e2b-bf16-mini",
       .out_dir = testing::TempDir() + "/gemma_vulkan_e2b_bf16_mini_" + std::to_string(getpid()),
       .seed = 7});
  const Model* model = synth.model.get();
  const BackendOptions opt = {.capacity = 64};
  std::vector<std::vector<int32_t>> inputs;
  std::vector<std::vector<float>> want;
  ASSERT_NO_FATAL_FAILURE(FullWidthReferenceSteps(*model, opt, 4, &inputs, &want));
  if (!variants) {
    ExpectFullWidthSteps(*model, opt, 1e-3, {{}}, inputs, want);
    return;
  }
  ExpectFullWidthSteps(*model, opt, 1e-3, {{{"GEMMA_VULKAN_MV_WGS", "64"}}}, inputs, want);
  if (testing::Test::IsSkipped()) return;  // (no Vulkan device: the helper skipped)
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

TEST(VulkanBackend, FullWidthBf16ModelMatchesReference) { FullWidthBf16(false); }
TEST(VulkanBackend, FullWidthBf16ModelVariantsMatchReference) { FullWidthBf16(true); }

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

// Soft tokens (image or audio rows in place of embedding rows: ForwardRequest::soft) at random
// positions: a prompt in chunks of 8 with a run across two chunk boundaries, one-token steps with
// a soft one, a truncation that drops one, and device losses after which the rebuilt context
// replays the conversation with its soft rows. Every position's logits against the CPU
// reference fed the same requests.
TEST(VulkanBackend, SoftTokensMatchReferenceAcrossChunksStepsAndReplay) {
  for (const char* name : {"tiny_dense_bf16", "tiny_qat"}) {
    SCOPED_TRACE(name);
    auto model = LoadFixture(name);
    const BackendOptions opt{.capacity = 128, .slack = 8};
    auto vk = MakeVulkan(*model, opt);
    if (!vk) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
    ASSERT_TRUE(vk->capabilities().soft_tokens);
    auto cpu = CreateCpuReferenceBackend(*model, opt);
    const int V = model->text().vocab_size, H = model->text().hidden_size;
    std::mt19937 rng(std::hash<std::string>()(name) % 1000);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int n = 44;
    std::vector<int32_t> tokens(n);
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % V);
    std::vector<std::vector<float>> rows(n);
    auto make_soft = [&](int pos) {
      rows[pos].resize(H);
      for (float& x : rows[pos]) x = normal(rng);
    };
    for (int pos = 5; pos < 21; ++pos) make_soft(pos);  // across the chunks at 8 and 16
    for (int pos = 30; pos < 33; ++pos) make_soft(pos);
    make_soft(36);  // a one-token step
    auto soft_of = [&](int from, int count) {
      std::vector<const float*> s(count);
      for (int i = 0; i < count; ++i)
        s[i] = rows[from + i].empty() ? nullptr : rows[from + i].data();
      return s;
    };
    // Both backends take the same request; the logits of its positions must agree.
    auto step = [&](int from, int count, const char* what) {
      SCOPED_TRACE(std::string(what) + " at " + std::to_string(from));
      const std::vector<const float*> soft = soft_of(from, count);
      const ForwardRequest req{.tokens = std::span<const int32_t>(&tokens[from], count),
                               .soft = soft,
                               .mode = OutputMode::kLogits,
                               .all_positions = true};
      ForwardResult a, b;
      cpu->Forward(req, &a);
      vk->Forward(req, &b);
      ASSERT_EQ(a.logits.size(), b.logits.size());
      for (int t = 0; t < count; ++t)
        ASSERT_LT(RelL2(&b.logits[size_t(t) * V], &a.logits[size_t(t) * V], V), 1e-4)
            << "position " << from + t;
    };
    step(0, 34, "prompt");
    for (int pos = 34; pos < 40; ++pos) step(pos, 1, "step");
    // Without the soft rows the same ids give other logits (the rows are what the test checks).
    {
      auto plain = CreateCpuReferenceBackend(*model, opt);
      ForwardResult a, b;
      plain->Forward(
          {.tokens = std::span<const int32_t>(tokens.data(), 34), .mode = OutputMode::kLogits}, &a);
      const std::vector<const float*> soft = soft_of(0, 34);
      auto with = CreateCpuReferenceBackend(*model, opt);
      with->Forward({.tokens = std::span<const int32_t>(tokens.data(), 34),
                     .soft = soft,
                     .mode = OutputMode::kLogits},
                    &b);
      ASSERT_GT(RelL2(a.logits.data(), b.logits.data(), V), 1e-2);
    }
    // A truncation drops the soft token at 36; 37 gets one in its place.
    ASSERT_TRUE(cpu->Truncate(36));
    ASSERT_TRUE(vk->Truncate(36));
    rows[36].clear();
    make_soft(37);
    step(36, 4, "after the truncation");
    // A device loss: the failed request keeps the conversation; the next one rebuilds the device
    // and replays the 40 committed tokens with their soft rows.
    ASSERT_TRUE(SimulateVulkanDeviceLoss(*vk));
    ForwardResult r;
    EXPECT_THROW(vk->Forward({.tokens = std::span<const int32_t>(&tokens[40], 1)}, &r), Error);
    EXPECT_EQ(vk->cached(), 40);
    make_soft(41);
    for (int pos = 40; pos < 44; ++pos) step(pos, 1, "after a device loss");
    VulkanStats st;
    ASSERT_TRUE(GetVulkanStats(*vk, &st));
    EXPECT_EQ(st.rebuilds, 1);
  }
}

// The towers on the device (vulkan_tower.h: both towers resident; the audio tower's split path)
// against the CPU reference's towers, per soft token (the second image grows the resident path's
// activations): synthetic checkpoints with both towers, dense (bf16) and in
// the QAT layout (int8 vision, int2 / int4 audio linears, no SRQ: all on the device), random
// pixels at two image sizes (108 and 630 patches: partial 64-row tiles) and a random log-mel clip
// with padding frames.
TEST(VulkanTower, MatchesReferenceTowers) {
  for (const char* preset : {"tiny", "tiny-qat"}) {
    SCOPED_TRACE(preset);
    const SynthModel synth({.preset = preset,
                            .out_dir = testing::TempDir() + "/gemma_vulkan_tower_" + preset + "_" +
                                       std::to_string(getpid()),
                            .seed = 23});
    const Model& model = *synth.model;
    ASSERT_NE(model.vision(), nullptr);
    ASSERT_NE(model.audio(), nullptr);
    std::shared_ptr<BackendModel> vm;
    try {
      vm = CreateVulkanModel(model, {});
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kDevice) GTEST_SKIP() << "SKIPPED: no usable Vulkan device";
      throw;
    }
    const auto ref = CreateCpuReferenceModel(model);
    const int H = model.text().hidden_size;
    auto expect_tokens = [&](const std::vector<float>& got, const std::vector<float>& want,
                             const char* what) {
      ASSERT_EQ(got.size(), want.size()) << what;
      ASSERT_GT(want.size(), 0u) << what;
      double worst = 0;
      for (size_t i = 0; i < want.size() / H; ++i)
        worst = std::max(worst, RelL2(&got[i * H], &want[i * H], H));
      std::printf("%s %s: %zu soft tokens, worst rel L2 %.2e\n", preset, what, want.size() / H,
                  worst);
      EXPECT_LT(worst, 1e-5) << what;
    };
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    const int patch = 3 * 16 * 16;
    for (const auto& [ph, pw] : {std::pair{9, 12}, std::pair{21, 30}}) {
      std::vector<float> pixels(size_t(ph) * pw * patch);
      for (float& p : pixels) p = unit(rng);
      std::vector<float> a, b;
      vm->EncodeImage({ph, pw, pixels.data()}, &a);
      ref->EncodeImage({ph, pw, pixels.data()}, &b);
      expect_tokens(a, b, ph == 9 ? "image 9x12 patches" : "image 21x30 patches");
    }
    const int frames = 200;
    std::vector<float> mel(size_t(frames) * 128);
    for (float& m : mel) m = -6.0f + 8.0f * unit(rng);
    std::vector<uint8_t> mask(frames, 0);
    std::fill(mask.begin(), mask.begin() + 180, 1);
    std::vector<float> a, b;
    vm->EncodeAudio({frames, mel.data(), mask.data()}, &a);
    ref->EncodeAudio({frames, mel.data(), mask.data()}, &b);
    expect_tokens(a, b, "audio 200 frames");
    // The split path (AUDIO_RESIDENT=0; towers the resident path does not take run it).
    VulkanOptions split;
    split.kernels = KernelConfig::Parse("AUDIO_RESIDENT=0");
    CreateVulkanModel(model, split)->EncodeAudio({frames, mel.data(), mask.data()}, &a);
    expect_tokens(a, b, "audio 200 frames, split path");
  }
}

// The resident image path's attention in chunks of queries (64 tokens a chunk here; a large image
// on E2B's tower takes two) against one chunk and against the CPU reference. (Devices without
// matrix units run tower_attn, which does not chunk: the same check, trivially.)
TEST(VulkanTower, AttentionChunksMatchTheWholeImage) {
  const SynthModel synth({.preset = "tiny",
                          .out_dir = testing::TempDir() + "/gemma_vulkan_tower_chunks_" +
                                     std::to_string(getpid()),
                          .seed = 29});
  const VisionTower& t = *synth.model->vision();
  const std::unique_ptr<vk::Device> dev = MakeDeviceOrNull();
  if (!dev) GTEST_SKIP() << "SKIPPED: no usable Vulkan device";
  ThreadPool pool(2);
  vulkan_internal::VulkanTower whole(*dev, pool), chunked(*dev, pool);
  chunked.set_attention_chunk(64);
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const int ph = 15, pw = 21;  // 315 patches: 5 chunks, the last partial
  std::vector<float> pixels(size_t(ph) * pw * 3 * 16 * 16);
  for (float& p : pixels) p = unit(rng);
  std::vector<float> a, b, want;
  ASSERT_TRUE(whole.EncodeImageResident(t, {ph, pw, pixels.data()}, &a));
  ASSERT_TRUE(chunked.EncodeImageResident(t, {ph, pw, pixels.data()}, &b));
  CreateCpuReferenceModel(*synth.model)->EncodeImage({ph, pw, pixels.data()}, &want);
  ASSERT_EQ(a.size(), want.size());
  ASSERT_EQ(b.size(), want.size());
  const int H = synth.model->text().hidden_size;
  double worst_whole = 0, worst_chunked = 0;
  for (size_t i = 0; i < want.size() / H; ++i) {
    worst_whole = std::max(worst_whole, RelL2(&a[i * H], &want[i * H], H));
    worst_chunked = std::max(worst_chunked, RelL2(&b[i * H], &want[i * H], H));
  }
  std::printf("%s: worst soft token whole %.2e, chunked %.2e\n", dev->name().c_str(), worst_whole,
              worst_chunked);
  EXPECT_LT(worst_whole, 1e-5);
  EXPECT_LT(worst_chunked, 1e-5);
}

// A tower with SRQ linears (the transformers-made QAT fixture: activation scales on layer 1) runs
// wholly on the host, as the fast CPU backend runs it: the same soft tokens, bit for bit. (On the
// H200, device linears and attention around the SRQ layer moved that fixture's logits 6.7e-3
// against transformers, ten times the CPU backends' SRQ noise.)
TEST(VulkanTower, SrqTowersRunOnTheHost) {
  const auto model = Model::Load(std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/vision/qat/model");
  ASSERT_NE(model->vision(), nullptr);
  ASSERT_GT(model->vision()->layers[1].q.lin.in_scale, 0.0f);
  std::shared_ptr<BackendModel> vm;
  try {
    vm = CreateVulkanModel(*model, {});
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kDevice) GTEST_SKIP() << "SKIPPED: no usable Vulkan device";
    throw;
  }
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> pixels(size_t(9) * 15 * 3 * 16 * 16);
  for (float& p : pixels) p = unit(rng);
  std::vector<float> a, b;
  vm->EncodeImage({9, 15, pixels.data()}, &a);
  CreateCpuFastModel(*model, 2)->EncodeImage({9, 15, pixels.data()}, &b);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

}  // namespace
}  // namespace gemma
