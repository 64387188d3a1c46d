// One device for many sessions: the contexts of a Vulkan model share its device, pipelines and
// weights (uploaded once), decode independently (interleaved and on several threads) exactly as
// the CPU reference does, and a device failure in one context rebuilds the shared device while
// every conversation is kept.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "backend/vulkan/vulkan_backend.h"
#include "backend/vulkan/vulkan_test_hooks.h"
#include "gemma/error.h"
#include "model/model.h"

namespace gemma {
namespace {

std::unique_ptr<Model> LoadFixture(const char* name) {
  return Model::Load(std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/model/" + name);
}

std::shared_ptr<BackendModel> MakeVulkanModel(const Model& model,
                                              const VulkanOptions& options = {}) {
  try {
    return CreateVulkanModel(model, options);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kDevice) return nullptr;
    throw;
  }
}

// Greedy decoding: the prompt, then one-token steps until `out` holds n ids.
std::vector<int32_t> Decode(Backend& b, const std::vector<int32_t>& prompt, size_t n) {
  ForwardResult r;
  b.Forward({.tokens = prompt}, &r);
  std::vector<int32_t> out = {r.ids.back()};
  while (out.size() < n) {
    const int32_t t = out.back();
    b.Forward({.tokens = std::span<const int32_t>(&t, 1)}, &r);
    out.push_back(r.ids.back());
  }
  return out;
}

// One greedy step from the last id of `out`.
void Step(Backend& b, std::vector<int32_t>& out) {
  ForwardResult r;
  const int32_t t = out.back();
  b.Forward({.tokens = std::span<const int32_t>(&t, 1)}, &r);
  out.push_back(r.ids.back());
}

const std::vector<int32_t> kPromptA = {2, 17, 93, 5, 211, 48, 7, 300, 12};
const std::vector<int32_t> kPromptB = {2, 105, 44, 9, 61, 250, 3};

TEST(VulkanSessions, ContextsShareTheWeightsAndDecodeIndependently) {
  auto model = LoadFixture("tiny_qat");
  auto vm = MakeVulkanModel(*model);
  if (!vm) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
  auto ref = CreateCpuReferenceBackend(*model, {.capacity = 128});
  const auto want_a = Decode(*ref, kPromptA, 10);
  ref->Reset();
  const auto want_b = Decode(*ref, kPromptB, 10);

  const size_t shared = vm->shared_bytes();
  ASSERT_GT(shared, 0u);
  std::vector<std::unique_ptr<Backend>> ctx;
  for (int i = 0; i < 3; ++i) ctx.push_back(vm->NewContext({.capacity = 128}));
  EXPECT_EQ(vm->shared_bytes(), shared) << "new contexts upload no weights";
  VulkanStats s0, s1;
  ASSERT_TRUE(GetVulkanStats(*ctx[0], &s0));
  ASSERT_TRUE(GetVulkanStats(*ctx[1], &s1));
  EXPECT_EQ(s0.weight_bytes, s1.weight_bytes);
  EXPECT_EQ(s0.device, vm->device());
  EXPECT_GE(s1.device_bytes, shared);

  // Interleaved: A's prompt, B's prompt, then alternating steps; each equals its own run.
  ForwardResult r;
  ctx[0]->Forward({.tokens = kPromptA}, &r);
  std::vector<int32_t> got_a = {r.ids.back()};
  ctx[1]->Forward({.tokens = kPromptB}, &r);
  std::vector<int32_t> got_b = {r.ids.back()};
  while (got_a.size() < want_a.size()) {
    Step(*ctx[0], got_a);
    Step(*ctx[1], got_b);
  }
  EXPECT_EQ(got_a, want_a);
  EXPECT_EQ(got_b, want_b);

  // Concurrent: three contexts on three threads.
  std::vector<std::vector<int32_t>> out(3);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      ctx[i]->Reset();
      out[i] = Decode(*ctx[i], i == 1 ? kPromptB : kPromptA, 10);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(out[0], want_a);
  EXPECT_EQ(out[1], want_b);
  EXPECT_EQ(out[2], want_a);
}

// A sibling context takes its own kernel choices on the shared device and weights.
TEST(VulkanSessions, SiblingContextsTakeTheirOwnKernelChoices) {
  auto model = LoadFixture("tiny_qat");
  std::unique_ptr<Backend> base;
  try {
    base = CreateVulkanBackend(*model, {.capacity = 64});
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kDevice) GTEST_SKIP() << "SKIPPED: no usable Vulkan device";
    throw;
  }
  auto capped = CreateVulkanSibling(*base, {.capacity = 64}, KernelConfig().Set("MV_WGS", 64));
  ASSERT_TRUE(capped);
  EXPECT_EQ(CreateVulkanSibling(*CreateCpuReferenceBackend(*model, {.capacity = 64}), {}), nullptr);
  VulkanStats a, b;
  ASSERT_TRUE(GetVulkanStats(*base, &a) && GetVulkanStats(*capped, &b));
  EXPECT_EQ(a.kernels.find("matvec grid <= 64"), std::string::npos) << a.kernels;
  EXPECT_NE(b.kernels.find("matvec grid <= 64"), std::string::npos) << b.kernels;
  EXPECT_EQ(a.weight_bytes, b.weight_bytes);
  auto ref = CreateCpuReferenceBackend(*model, {.capacity = 64});
  EXPECT_EQ(Decode(*capped, kPromptA, 8), Decode(*ref, kPromptA, 8));
}

// Prompt chunks longer than a context's own activations (16 rows) run on the engine's shared set,
// one context at a time: two contexts prefilling 60-token prompts (one chunk each) on two threads
// give every position's logits as the CPU reference does, and decode on after it.
// The batched steps' pipelines are built on the model's own thread once a second context exists
// (on GPUs by default; BATCH_WARM=1 here, lavapipe being a CPU device): the first batch builds
// none, and its rows decode as the contexts alone do.
TEST(VulkanSessions, BatchPipelinesAreBuiltBeforeTheFirstBatch) {
  auto model = LoadFixture("tiny_qat");
  VulkanOptions opt;
  opt.kernels = KernelConfig::Parse("BATCH_WARM=1");
  auto vm = MakeVulkanModel(*model, opt);
  if (!vm) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
  std::vector<std::unique_ptr<Backend>> ctx;
  std::vector<std::vector<int32_t>> out(4);
  ForwardResult r;
  for (int i = 0; i < 4; ++i) {
    ctx.push_back(vm->NewContext({.capacity = 64, .slack = 8}));
    ctx.back()->Forward({.tokens = i % 2 ? kPromptA : kPromptB}, &r);
    out[i] = {r.ids.back()};
  }
  ASSERT_TRUE(WaitForVulkanBatchPipelines(*vm));
  VulkanStats before, after;
  ASSERT_TRUE(GetVulkanStats(*ctx[0], &before));
  // Four one-token rows, then two of them with a verification step of three tokens (logits).
  std::vector<ForwardResult> res(4);
  std::vector<BatchStep> steps;
  for (int i = 0; i < 4; ++i)
    steps.push_back({ctx[i].get(), {.tokens = std::span(&out[i].back(), 1)}, &res[i]});
  vm->ForwardBatch(steps);
  for (int i = 0; i < 4; ++i) {
    ASSERT_FALSE(steps[i].error);
    out[i].push_back(res[i].ids.at(0));
  }
  const std::vector<int32_t> draft = {out[2].back(), 5, 9};
  steps.clear();
  steps.push_back({ctx[0].get(), {.tokens = std::span(&out[0].back(), 1)}, &res[0]});
  steps.push_back({ctx[2].get(),
                   {.tokens = draft, .mode = OutputMode::kLogits, .all_positions = true},
                   &res[2]});
  vm->ForwardBatch(steps);
  ASSERT_FALSE(steps[0].error);
  ASSERT_FALSE(steps[1].error);
  ASSERT_TRUE(GetVulkanStats(*ctx[0], &after));
  EXPECT_EQ(after.pipelines, before.pipelines) << "the batches built pipelines";
  EXPECT_EQ(res[2].logits.size(), 3 * static_cast<size_t>(model->text().vocab_size));
  // Contexts that ran alone give the same tokens.
  auto solo = vm->NewContext({.capacity = 64});
  for (int i : {1, 3}) {
    solo->Reset();
    solo->Forward({.tokens = i % 2 ? kPromptA : kPromptB}, &r);
    const int32_t t = r.ids.back();
    EXPECT_EQ(t, out[i][0]);
    solo->Forward({.tokens = std::span(&t, 1)}, &r);
    EXPECT_EQ(r.ids.back(), out[i][1]) << i;
  }
}

TEST(VulkanSessions, LongPromptChunksShareTheEnginesActivations) {
  auto model = LoadFixture("tiny_dense_bf16");
  auto vm = MakeVulkanModel(*model);
  if (!vm) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
  const BackendOptions opt = {.capacity = 128, .slack = 64};
  const int V = model->text().vocab_size, n = 60;
  std::vector<std::vector<int32_t>> prompts(2, std::vector<int32_t>(n));
  for (int i = 0; i < n; ++i) {
    prompts[0][i] = static_cast<int32_t>((i * 37 + 11) % V);
    prompts[1][i] = static_cast<int32_t>((i * 53 + 5) % V);
  }
  std::vector<ForwardResult> want(2);
  for (int c = 0; c < 2; ++c) {
    auto ref = CreateCpuReferenceBackend(*model, opt);
    ref->Forward({.tokens = prompts[c], .mode = OutputMode::kLogits, .all_positions = true},
                 &want[c]);
  }
  std::vector<std::unique_ptr<Backend>> ctx;
  for (int c = 0; c < 2; ++c) ctx.push_back(vm->NewContext(opt));
  ASSERT_GE(ctx[0]->capabilities().max_chunk, n);
  for (int round = 0; round < 2; ++round) {
    std::vector<ForwardResult> got(2);
    std::vector<std::thread> threads;
    for (int c = 0; c < 2; ++c) {
      threads.emplace_back([&, c] {
        ctx[c]->Reset();
        ctx[c]->Forward(
            {.tokens = prompts[c], .mode = OutputMode::kLogits, .all_positions = true}, &got[c]);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int c = 0; c < 2; ++c) {
      ASSERT_EQ(got[c].logits.size(), want[c].logits.size());
      for (int t = 0; t < n; ++t) {
        double num = 0, den = 0;
        for (int v = 0; v < V; ++v) {
          const double d = got[c].logits[size_t(t) * V + v] - want[c].logits[size_t(t) * V + v];
          num += d * d;
          den += double(want[c].logits[size_t(t) * V + v]) * want[c].logits[size_t(t) * V + v];
        }
        EXPECT_LT(std::sqrt(num / den), 1e-4) << "context " << c << " position " << t;
      }
    }
  }
  // Decoding on from the shared chunk's caches (one-token steps on the context's own set).
  auto ref = CreateCpuReferenceBackend(*model, opt);
  ForwardResult r;
  ref->Forward({.tokens = prompts[1]}, &r);
  std::vector<int32_t> want_ids = {r.ids.back()};
  for (int i = 0; i < 6; ++i) Step(*ref, want_ids);
  ctx[1]->Reset();
  ctx[1]->Forward({.tokens = prompts[1]}, &r);
  std::vector<int32_t> got_ids = {r.ids.back()};
  for (int i = 0; i < 6; ++i) Step(*ctx[1], got_ids);
  EXPECT_EQ(got_ids, want_ids);
}

// A device fault during one context's step (`fault`, injected at the model): the request fails with
// kDevice (its message containing `message`) and commits nothing; the failing context's next step
// builds a new device and replays its conversation, and the other context, still on the old
// device, moves over at its next step and replays its own.
void ExpectFaultKeepsEveryConversation(DeviceFault fault, const std::string& message) {
  auto model = LoadFixture("tiny_qat");
  auto vm = MakeVulkanModel(*model);
  if (!vm) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
  auto ref = CreateCpuReferenceBackend(*model, {.capacity = 128});
  const auto want_a = Decode(*ref, kPromptA, 12);
  ref->Reset();
  const auto want_b = Decode(*ref, kPromptB, 12);

  auto a = vm->NewContext({.capacity = 128});
  auto b = vm->NewContext({.capacity = 128});
  std::vector<int32_t> got_a = Decode(*a, kPromptA, 6);
  std::vector<int32_t> got_b = Decode(*b, kPromptB, 6);
  ASSERT_TRUE(vm->InjectDeviceFault(fault));
  const int committed = a->cached();
  std::vector<int32_t> tried = got_a;
  try {
    Step(*a, tried);
    FAIL() << "expected a device error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDevice);
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
  EXPECT_EQ(a->cached(), committed);
  while (got_a.size() < want_a.size()) {
    Step(*a, got_a);
    Step(*b, got_b);
  }
  EXPECT_EQ(got_a, want_a);
  EXPECT_EQ(got_b, want_b);
  VulkanStats sa, sb;
  GetVulkanStats(*a, &sa);
  GetVulkanStats(*b, &sb);
  EXPECT_EQ(sa.rebuilds, 1);
  EXPECT_EQ(sb.rebuilds, 1);
  // A context made after the fault runs on the new device.
  auto c = vm->NewContext({.capacity = 128});
  EXPECT_EQ(Decode(*c, kPromptB, 12), want_b);
}

TEST(VulkanSessions, DeviceLossInOneContextKeepsEveryConversation) {
  ExpectFaultKeepsEveryConversation(DeviceFault::kDeviceLoss, "VK_ERROR_DEVICE_LOST");
}

// A submission that does not finish within the step timeout (a hung device; injected: the work
// completes, the wait gives up first): the device is given up, its handles destroyed on threads
// of their own once its queue is idle.
TEST(VulkanSessions, HungSubmissionGivesTheDeviceUpAndKeepsEveryConversation) {
  ExpectFaultKeepsEveryConversation(DeviceFault::kHang, "did not finish within");
}

TEST(VulkanSessions, OutOfDeviceMemoryIsACapacityErrorAndLosesNothing) {
  auto model = LoadFixture("tiny_qat");
  // Prompt chunks of 32 rows take the engine's activations, made by the first one.
  auto vm = MakeVulkanModel(*model, {.max_chunk = 32});
  if (!vm) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
  auto ref = CreateCpuReferenceBackend(*model, {.capacity = 256});
  std::vector<int32_t> long_prompt;
  for (int i = 0; i < 40; ++i) long_prompt.push_back(3 + (i * 37) % 500);
  std::vector<int32_t> want = Decode(*ref, kPromptA, 6);
  {
    ForwardResult r;
    ref->Forward({.tokens = long_prompt}, &r);
    want.push_back(r.ids.back());
    while (want.size() < 14) Step(*ref, want);
  }

  auto a = vm->NewContext({.capacity = 256});
  std::vector<int32_t> got = Decode(*a, kPromptA, 6);
  const size_t held = vm->device_memory_bytes();
  EXPECT_GT(held, 0u);

  // A new session whose caches cannot be allocated.
  ASSERT_TRUE(vm->InjectDeviceFault(DeviceFault::kOutOfDeviceMemory));
  try {
    vm->NewContext({.capacity = 256});
    FAIL() << "expected a capacity error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCapacity) << e.what();
    EXPECT_NE(std::string(e.what()).find("out of device memory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(vm->device_memory_bytes(), held);

  // The first long prompt chunk's activations cannot be allocated: the request fails, the
  // conversation stays as it was, and the same request then succeeds.
  const int committed = a->cached();
  ASSERT_TRUE(vm->InjectDeviceFault(DeviceFault::kOutOfDeviceMemory));
  ForwardResult r;
  try {
    a->Forward({.tokens = long_prompt}, &r);
    FAIL() << "expected a capacity error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCapacity) << e.what();
  }
  EXPECT_EQ(a->cached(), committed);
  a->Forward({.tokens = long_prompt}, &r);
  got.push_back(r.ids.back());
  while (got.size() < want.size()) Step(*a, got);
  EXPECT_EQ(got, want);
  auto b = vm->NewContext({.capacity = 256});
  EXPECT_EQ(Decode(*b, kPromptA, 6), std::vector<int32_t>(want.begin(), want.begin() + 6));
}

TEST(VulkanSessions, TooLittleDeviceMemoryIsSaidBeforeAllocating) {
  auto model = LoadFixture("tiny_qat");
  auto vm = MakeVulkanModel(*model);
  if (!vm) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
  const size_t weights = vm->device_memory_bytes();
  ASSERT_GT(weights, 0u);
  try {
    CreateVulkanModel(*model, {.device_memory_limit = weights / 2});
    FAIL() << "expected a capacity error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCapacity) << e.what();
    EXPECT_NE(std::string(e.what()).find("the weights need"), std::string::npos) << e.what();
  }
  // Room for the weights but not for a session's caches.
  auto small = CreateVulkanModel(*model, {.device_memory_limit = weights + 4096});
  try {
    small->NewContext({.capacity = 256});
    FAIL() << "expected a capacity error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCapacity) << e.what();
    EXPECT_NE(std::string(e.what()).find("a session's caches"), std::string::npos) << e.what();
  }
  EXPECT_EQ(small->device_memory_bytes(), weights);
}

TEST(VulkanSessions, AFailedMultiChunkPromptReplaysTheConversation) {
  // Chunks of 16 over sliding rings of 8 + 16 entries: a request that fails in its last chunk has
  // overwritten ring entries the committed tokens need; nothing of it is committed and the next
  // request evaluates the conversation again (on the same device).
  auto model = LoadFixture("tiny_qat");
  auto vm = MakeVulkanModel(*model, {.max_chunk = 16});
  if (!vm) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
  auto ref = CreateCpuReferenceBackend(*model, {.capacity = 256});
  std::vector<int32_t> long_prompt;
  for (int i = 0; i < 70; ++i) long_prompt.push_back(3 + (i * 53) % 500);
  std::vector<int32_t> want = Decode(*ref, kPromptA, 12);
  auto a = vm->NewContext({.capacity = 256});
  std::vector<int32_t> got = Decode(*a, kPromptA, 6);
  const int committed = a->cached();
  const std::vector<uint64_t> none((model->text().vocab_size + 63) / 64, 0);
  ForwardResult r;
  EXPECT_THROW(a->Forward({.tokens = long_prompt, .mode = OutputMode::kSelect, .allowed = &none}, &r),
               Error);
  EXPECT_EQ(a->cached(), committed);
  while (got.size() < want.size()) Step(*a, got);
  EXPECT_EQ(got, want);
  VulkanStats s;
  GetVulkanStats(*a, &s);
  EXPECT_EQ(s.rebuilds, 0);
}

}  // namespace
}  // namespace gemma
