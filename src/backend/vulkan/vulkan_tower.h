// The vision and audio towers on a Vulkan device: their linears (tower_gemm.comp: dense weights and
// quantized codes times the row scale, f32 sums) and the vision tower's bidirectional attention
// (tower_attn.comp: online softmax in f32) run on the device; norms, RoPE, clamps, activations,
// pooling, the audio tower's convolutions and its chunked local attention stay on the host (the
// reference's arithmetic, with the fast CPU backend's kernels on a thread pool). Each operation
// uploads its inputs and reads its output back; the weights are uploaded at their first use and
// kept.
//
// Towers with SRQ linears (input or output activation scales) run wholly on the host, as the fast
// CPU backend runs them: their int8 roundings turn f32 ordering differences into flips (on the
// H200, the transformers QAT fixture's logits moved 6.7e-3 with the device's linears and attention
// around its SRQ layer, against 6.6e-4 on the CPU).
#pragma once

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/vulkan/vk_device.h"
#include "model/model.h"

namespace gemma {

class ThreadPool;

namespace vulkan_internal {

class VulkanTower {
 public:
  // A context of `device` (its pipelines) for the tower's buffers; `pool` runs the host's part.
  VulkanTower(const vk::Device& device, ThreadPool& pool);
  ~VulkanTower();
  VulkanTower(const VulkanTower&) = delete;
  VulkanTower& operator=(const VulkanTower&) = delete;

  void EncodeImage(const Model& model, const VisionPatches& image, std::vector<float>* soft);
  void EncodeAudio(const Model& model, const AudioMel& audio, std::vector<float>* soft);

  // y[n, lin.rows] = x[n, lin.cols] W^T on the device (dense, or quantized without SRQ scales).
  void Linear(const gemma::Linear& lin, const float* x, int n, float* y);
  // Bidirectional attention, scale 1 (ref::VisionKernels::Attention's contract; hd <= 128).
  void Attention(const float* q, const float* k, const float* v, int n, int nh, int nkv, int hd,
                 float* out);
  ThreadPool& pool() { return pool_; }

 private:
  struct Weights {
    vk::BufRange w, s;
    uint32_t wstride = 0;
  };
  // By the weights' storage (the model's, alive as long as it; a caller may describe the same
  // storage with a Linear of its own, as the audio tower's convolutions do).
  using WeightKey = std::tuple<const uint8_t*, const float*, int, int, size_t, WeightKind>;
  const Weights& Upload(const gemma::Linear& lin);
  // Device buffers of at least `in` and `out` floats, and a host buffer of `out` floats.
  void Reserve(size_t in, size_t out);
  void Run(const char* shader, const std::vector<uint32_t>& spec,
           const std::array<vk::BufRange, vk::kBindings>& b, const void* push, size_t push_bytes,
           uint32_t gx, uint32_t gy, size_t out_bytes);

  ThreadPool& pool_;
  std::unique_ptr<vk::Device> wdev_;  // the weights' context
  std::map<WeightKey, Weights> weights_;
  std::unique_ptr<vk::Device> adev_;  // the activations' context (made again to grow)
  size_t in_cap_ = 0, out_cap_ = 0;
  vk::BufRange in_, out_, host_;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
};

// Whether a tower linear can run on the device (VulkanTower::Linear).
bool DeviceTowerLinear(const gemma::Linear& lin);

}  // namespace vulkan_internal
}  // namespace gemma
