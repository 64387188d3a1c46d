// The Vulkan backend's engine-level object: one device, its pipelines and the uploaded weights,
// shared by every context (session). The device and weights are made at creation, so a missing
// device fails at engine load and a new session adds only its caches and working buffers.
// The vision and audio towers run on the host with the fast CPU backend's kernels (a thread pool
// made at the first image or audio); their soft tokens enter the GPU's text model as f32 rows.
#include "backend/cpu/fast/cpu_fast_backend.h"
#include "backend/vulkan/vulkan_backend_impl.h"
#include "core/thread_pool.h"

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
  void EncodeImage(const VisionPatches& image, std::vector<float>* soft_tokens) override {
    std::lock_guard<std::mutex> lock(tower_mutex_);  // one tower job on the pool at a time
    FastEncodeImage(shared_->model(), TowerPool(), image, soft_tokens);
  }
  void EncodeAudio(const AudioMel& audio, std::vector<float>* soft_tokens) override {
    std::lock_guard<std::mutex> lock(tower_mutex_);
    FastEncodeAudio(shared_->model(), TowerPool(), audio, soft_tokens);
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
  ThreadPool& TowerPool() {
    if (!tower_pool_)
      tower_pool_ = std::make_unique<ThreadPool>(
          static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    return *tower_pool_;
  }

  std::shared_ptr<VulkanShared> shared_;
  std::string device_;
  bool software_ = false;
  std::mutex tower_mutex_;
  std::unique_ptr<ThreadPool> tower_pool_;  // under tower_mutex_
};

}  // namespace

std::shared_ptr<BackendModel> CreateVulkanModel(const Model& model, const VulkanOptions& vulkan) {
  return std::make_shared<VulkanModel>(model, vulkan);
}

}  // namespace gemma
