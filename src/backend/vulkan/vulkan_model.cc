// The Vulkan backend's engine-level object: one device, its pipelines and the uploaded weights,
// shared by every context (session). The device and weights are made at creation, so a missing
// device fails at engine load and a new session adds only its caches and working buffers.
#include "backend/vulkan/vulkan_backend_impl.h"

namespace gemma {
namespace {

using vulkan_internal::DeviceWeights;
using vulkan_internal::VulkanBackend;
using vulkan_internal::VulkanShared;

class VulkanModel : public BackendModel {
 public:
  VulkanModel(const Model& model, const VulkanOptions& vulkan)
      : shared_(std::make_shared<VulkanShared>(model, vulkan)) {
    const auto w = shared_->Acquire();
    device_ = w->dev->name();
    software_ = w->dev->is_cpu();
  }
  std::string name() const override { return "vulkan"; }
  std::unique_ptr<Backend> NewContext(const BackendOptions& options) override {
    return std::make_unique<VulkanBackend>(shared_, options);
  }
  // (Between a device failure and the next step's rebuild there is no current device: the last
  // one's name stays.)
  size_t shared_bytes() const override {
    const auto w = shared_->Current();
    return w ? w->dev->committed_bytes(vk::Pool::kDevice) : 0;
  }
  std::string device() const override { return device_; }
  bool software_device() const override { return software_; }
  size_t device_memory_bytes() const override {
    const auto w = shared_->Current();
    return w ? w->dev->device_memory_in_use() : 0;
  }
  bool InjectDeviceFault(DeviceFault fault) override {
    const auto w = shared_->Acquire();
    if (fault == DeviceFault::kDeviceLoss) {
      w->dev->FailNextSubmit();
    } else {
      w->dev->FailNextAllocation();
    }
    return true;
  }

 private:
  std::shared_ptr<VulkanShared> shared_;
  std::string device_;
  bool software_ = false;
};

}  // namespace

std::shared_ptr<BackendModel> CreateVulkanModel(const Model& model, const VulkanOptions& vulkan) {
  return std::make_shared<VulkanModel>(model, vulkan);
}

}  // namespace gemma
