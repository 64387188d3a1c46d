// The Vulkan backend's engine-level object. Not yet shared: each context still creates its own
// device state and uploads the weights (the split of VulkanBackend into a shared device/weights
// part and per-session caches is open work, see bench/journal/2026-12-02.md); the first context is
// made at creation so a missing device fails at engine load.
#include <mutex>
#include <utility>

#include "backend/vulkan/vulkan_backend.h"

namespace gemma {
namespace {

class VulkanModel : public BackendModel {
 public:
  VulkanModel(const Model& model, const VulkanOptions& vulkan) : model_(model), vulkan_(vulkan) {}
  std::string name() const override { return "vulkan"; }
  std::unique_ptr<Backend> NewContext(const BackendOptions& options) override {
    std::unique_ptr<Backend> b = CreateVulkanBackend(model_, options, vulkan_);
    VulkanStats s;
    if (GetVulkanStats(*b, &s)) {
      std::lock_guard<std::mutex> lock(mutex_);
      device_ = s.device;
      software_ = s.cpu_device;
    }
    return b;
  }
  size_t shared_bytes() const override { return 0; }
  std::string device() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return device_;
  }
  bool software_device() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return software_;
  }

 private:
  const Model& model_;
  VulkanOptions vulkan_;
  mutable std::mutex mutex_;
  std::string device_;
  bool software_ = false;
};

}  // namespace

std::shared_ptr<BackendModel> CreateVulkanModel(const Model& model, const VulkanOptions& vulkan) {
  return std::make_shared<VulkanModel>(model, vulkan);
}

}  // namespace gemma
