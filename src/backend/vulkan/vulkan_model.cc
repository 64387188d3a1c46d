// The Vulkan backend's engine-level object: one device, its pipelines and the uploaded weights,
// shared by every context (session). The device and weights are made at creation, so a missing
// device fails at engine load and a new session adds only its caches and working buffers.
// The vision tower runs wholly on the device, the audio tower's linears on the device and the rest
// on the host (vulkan_tower.h; a thread pool made at the first image or audio); their soft tokens
// enter the text model as f32 rows.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "backend/vulkan/vulkan_backend_impl.h"
#include "backend/vulkan/vulkan_tower.h"
#include "core/thread_pool.h"

namespace gemma {
namespace {

using vulkan_internal::DeviceWeights;
using vulkan_internal::VulkanBackend;
using vulkan_internal::VulkanShared;
using vulkan_internal::VulkanTower;

class VulkanModel : public BackendModel {
 public:
  VulkanModel(const Model& model, const VulkanOptions& vulkan)
      : shared_(std::make_shared<VulkanShared>(model, vulkan)) {
    const auto w = shared_->Acquire();
    device_ = w->dev->name();
    software_ = w->dev->is_cpu();
    warm_wanted_ = vulkan_internal::EffectiveKernels(shared_->options())
                       .Get("BATCH_WARM", software_ ? 0 : 1) != 0;
  }
  ~VulkanModel() override {
    warm_stop_ = true;
    if (warm_.joinable()) warm_.join();
  }
  // Waits until the batch pipelines are built, where their thread has started (tests).
  void WaitBatchWarm() {
    std::unique_lock<std::mutex> lock(warm_mutex_);
    warm_cv_.wait(lock, [&] { return !warm_.joinable() || warm_done_; });
  }
  std::string name() const override { return "vulkan"; }
  std::unique_ptr<Backend> NewContext(const BackendOptions& options) override {
    auto context = std::make_unique<VulkanBackend>(shared_, options);
    if (warm_wanted_ && ++contexts_made_ == 2) StartBatchWarm();
    return context;
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
    WithTower([&](VulkanTower& t) { t.EncodeImage(shared_->model(), image, soft_tokens); });
  }
  void EncodeAudio(const AudioMel& audio, std::vector<float>* soft_tokens) override {
    WithTower([&](VulkanTower& t) { t.EncodeAudio(shared_->model(), audio, soft_tokens); });
  }
  // Steps that can share a recording (BatchReady: one token, or a verification step of a few)
  // run in batches of up to the contexts' rows, a step of k tokens taking k rows; the others (a
  // select step, soft rows, a context to rebuild or replay, a batch of fewer than kMinBatchRows
  // rows) run alone through Forward.
  // (H200, E2B QAT at 512 context, vulkan_batch_bench: 2 rows in one step 4.77 ms against 4.77 ms
  // one after the other, 3 rows 7.26 against 7.19, 4 rows 8.25 against 9.57)
  static constexpr int kMinBatchRows = 4;
  void ForwardBatch(std::span<BatchStep> steps) override {
    std::vector<VulkanBackend*> ctx;
    std::vector<BatchStep*> ready, alone;
    for (BatchStep& s : steps) {
      try {
        auto* c = dynamic_cast<VulkanBackend*>(s.context);
        if (!c || c->shared() != shared_)
          throw Error(ErrorCode::kInvalidArgument, "ForwardBatch: a context of another model");
        if (s.request.tokens.empty() || (s.request.tokens.size() > 1 && !s.request.all_positions))
          throw Error(ErrorCode::kInvalidArgument,
                      "ForwardBatch: a step is one token, or several with every position's "
                      "output (all_positions)");
        for (BatchStep* o : ready)
          if (o->context == c)
            throw Error(ErrorCode::kInvalidArgument, "ForwardBatch: a context twice in one batch");
        for (BatchStep* o : alone)
          if (o->context == c)
            throw Error(ErrorCode::kInvalidArgument, "ForwardBatch: a context twice in one batch");
        ValidateForward(s.request, c->cached(), c->capacity(), shared_->model().text().vocab_size);
        if (c->BatchReady(s.request) && c->batch_rows() > 1) {
          ctx.push_back(c);
          ready.push_back(&s);
        } else {
          alone.push_back(&s);
        }
      } catch (...) {
        s.error = std::current_exception();
      }
    }
    int per = ctx.empty() ? 1 : ctx[0]->batch_rows();
    for (VulkanBackend* c : ctx) per = std::min(per, c->batch_rows());
    // Batches of consecutive steps while their rows fit.
    for (size_t i = 0; i < ready.size();) {
      size_t j = i;
      int rows = 0;
      while (j < ready.size() && rows + static_cast<int>(ready[j]->request.tokens.size()) <= per) {
        rows += static_cast<int>(ready[j]->request.tokens.size());
        ++j;
      }
      if (j == i) {  // (a step longer than another context's rows)
        alone.push_back(ready[i++]);
        continue;
      }
      if (rows < kMinBatchRows) {
        for (size_t k = i; k < j; ++k) alone.push_back(ready[k]);
        i = j;
        continue;
      }
      try {
        ctx[i]->ForwardRows(std::span(ctx).subspan(i, j - i), std::span(ready).subspan(i, j - i));
      } catch (...) {
        for (size_t k = i; k < j; ++k) ready[k]->error = std::current_exception();
      }
      i = j;
    }
    for (BatchStep* s : alone) {
      try {
        s->context->Forward(s->request, s->result);
      } catch (...) {
        s->error = std::current_exception();
      }
    }
  }
  // (lavapipe: a batch of the tiny test models runs slower than its rows one by one)
  bool batches_steps() const override { return !software_; }
  bool batches_multi_token_steps() const override { return !software_; }
  bool InjectDeviceFault(DeviceFault fault) override {
    const auto w = shared_->Acquire();
    switch (fault) {
      case DeviceFault::kDeviceLoss:
        w->dev->FailNextSubmit();
        break;
      case DeviceFault::kOutOfDeviceMemory:
        w->dev->FailNextAllocation();
        break;
      case DeviceFault::kHang:
        w->dev->HangNextSubmit();
        break;
    }
    return true;
  }

 private:
  // One tower job at a time, on the current device (made again after a device failure, which
  // also marks the device lost for the contexts).
  template <class F>
  void WithTower(F run) {
    std::lock_guard<std::mutex> lock(tower_mutex_);
    const std::shared_ptr<const DeviceWeights> w = shared_->Acquire();
    if (!tower_ || tower_device_ != w) {
      tower_.reset();
      if (!tower_pool_)
        tower_pool_ = std::make_unique<ThreadPool>(
            static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
      tower_device_ = w;
      // CM_DENSE and ATTN_CM as for the text model's dense prompt linears and prompt attention
      // (matrix units where the device has them); AUDIO_RESIDENT 0: the audio tower's earlier
      // split path (benchmarks compare it); CM_QTOWER 0: the towers' quantized linears on
      // tower_gemm instead of the matrix units.
      const KernelConfig kc = vulkan_internal::EffectiveKernels(shared_->options());
      tower_ = std::make_unique<VulkanTower>(
          *w->dev, *tower_pool_, kc.Get("CM_DENSE", 1) != 0, kc.Get("ATTN_CM", 1) != 0,
          kc.Get("AUDIO_RESIDENT", 1) != 0, kc.Get("CM_QTOWER", 1) != 0, kc.Get("CM2", 0) != 0);
    }
    try {
      run(*tower_);
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kDevice) {
        tower_.reset();
        tower_device_.reset();
        shared_->Lost(w.get());
      }
      throw;
    }
  }

  std::shared_ptr<VulkanShared> shared_;
  std::string device_;
  bool software_ = false;
  // The pipelines of batched steps (kMinBatchRows rows and more), built on a thread of their own
  // once a second context exists (kernel choice BATCH_WARM, on GPUs): built at first use, they
  // stalled the first batch of each size, so every session in it, for 3-5 s on an H100 with a
  // cold driver cache (4,764 ms for the first 4-row steps; 155 ms with them built beforehand). Not
  // from the load: on a cold driver cache one stream decoded at 160 instead of 399 tok/s while
  // the thread built them (bench/journal/2026-12-05-nocontraction.md), and one session never
  // batches. A step that needs a pipeline being built waits for that one only. Not on CPU
  // devices (lavapipe), where the runtime does not batch.
  void StartBatchWarm() {
    std::lock_guard<std::mutex> lock(warm_mutex_);
    warm_ = std::thread([this] {
      try {
        VulkanBackend scratch(shared_, {.capacity = 64, .slack = 16});
        scratch.PrepareBatchPipelines(kMinBatchRows, warm_stop_);
      } catch (...) {
        // (a failure shows again, typed, in the step that needs the pipeline)
      }
      std::lock_guard<std::mutex> lock(warm_mutex_);
      warm_done_ = true;
      warm_cv_.notify_all();
    });
  }
  bool warm_wanted_ = false;
  std::atomic<int> contexts_made_{0};
  // BATCH_WARM's thread: stop asked, done told.
  std::thread warm_;
  std::atomic<bool> warm_stop_{false};
  std::mutex warm_mutex_;
  std::condition_variable warm_cv_;
  bool warm_done_ = false;  // guarded by warm_mutex_
  std::mutex tower_mutex_;  // guards the three below
  std::unique_ptr<ThreadPool> tower_pool_;
  std::shared_ptr<const DeviceWeights> tower_device_;  // (the tower's contexts are of its device)
  std::unique_ptr<VulkanTower> tower_;
};

}  // namespace

std::shared_ptr<BackendModel> CreateVulkanModel(const Model& model, const VulkanOptions& vulkan) {
  return std::make_shared<VulkanModel>(model, vulkan);
}

bool WaitForVulkanBatchPipelines(BackendModel& model) {
  auto* m = dynamic_cast<VulkanModel*>(&model);
  if (!m) return false;
  m->WaitBatchWarm();
  return true;
}

}  // namespace gemma
