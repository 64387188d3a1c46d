// Vulkan backend behaviour beyond the goldens: device-loss recovery, typed errors, stats.
#include <gtest/gtest.h>

#include "backend/vulkan/vulkan_backend.h"
#include "gemma/error.h"
#include "model/model.h"

namespace gemma {
namespace {

std::unique_ptr<Model> LoadFixture(const char* name) {
  return Model::Load(std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/model/" + name);
}

std::unique_ptr<Backend> MakeVulkan(const Model& model, BackendOptions opt = {.capacity = 128}) {
  try {
    return CreateVulkanBackend(model, opt);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kDevice) return nullptr;
    throw;
  }
}

#define VULKAN_OR_SKIP(var, model)                                              \
  auto var = MakeVulkan(model);                                                 \
  if (!var) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine"; \
  static_assert(true)

std::vector<int32_t> Decode(Backend& b, std::vector<int32_t> prompt, int n) {
  ForwardResult r;
  b.Forward({.tokens = prompt, .mode = OutputMode::kArgmax}, &r);
  std::vector<int32_t> out = {r.ids.back()};
  while (static_cast<int>(out.size()) < n) {
    const int32_t t = out.back();
    b.Forward({.tokens = std::span<const int32_t>(&t, 1)}, &r);
    out.push_back(r.ids.back());
  }
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

TEST(VulkanBackend, DeviceLossFailsTheRequestAndKeepsTheConversation) {
  auto model = LoadFixture("tiny_qat");
  VULKAN_OR_SKIP(vk, *model);
  auto ref = CreateCpuReferenceBackend(*model, {.capacity = 128});
  const std::vector<int32_t> prompt = {2, 17, 93, 5, 211, 48, 7, 300, 12};
  const auto want = Decode(*ref, prompt, 12);

  ForwardResult r;
  vk->Forward({.tokens = prompt}, &r);
  std::vector<int32_t> got = {r.ids.back()};
  for (int i = 0; i < 4; ++i) {
    const int32_t t = got.back();
    vk->Forward({.tokens = std::span<const int32_t>(&t, 1)}, &r);
    got.push_back(r.ids.back());
  }
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
  while (got.size() < want.size()) {
    const int32_t u = got.back();
    vk->Forward({.tokens = std::span<const int32_t>(&u, 1)}, &r);
    got.push_back(r.ids.back());
  }
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
