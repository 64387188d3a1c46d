// The vision and audio towers on a Vulkan device.
//
// Images: the whole tower is resident. The patches go up once, one command buffer runs every
// layer, then embed_vision, and the soft tokens come back once. Kernels: the clippable linears with
// their clamps on matrix units for dense weights (split_f16.comp + linear_cm.comp) where the
// device has them, else tower_gemm.comp; resnorm.comp for the sandwich norms and residual adds;
// tower_qkv.comp for the per-head norms and 2D RoPE; the bidirectional attention on matrix units
// (split_f16.comp + attention_cm.comp, BIDIR) or tower_attn.comp; tower_ew.comp for the position
// rows and the GELU; tower_pool.comp for the pooling.
// Audio: the whole tower is resident too (vulkan_audio_tower.cc). The mel frames go up once; the
// SSCP convolutions run as tower_gemm.comp (CONV: im2col read in place) with resnorm.comp's
// LayerNorm (LN); the conformer layers as the image path's linears, resnorm.comp (with the audio
// clamps, the half-step residual, SiLU), tower_ew.comp (SiLU, GLU + causal depthwise conv, the
// bias) and audio_attn.comp (local attention with relative positions); then output_proj and
// embed_audio; the soft tokens come back once. Towers the resident path does not take fall back
// to the linears on the device (tower_gemm.comp) and the rest on the host (the reference's
// arithmetic, with the fast CPU backend's kernels on a thread pool); each linear then uploads its
// input and reads its output back.
// Weights, norm vectors and the like are uploaded at their first use and kept.
//
// Towers with SRQ linears (input or output activation scales) run wholly on the host, as the fast
// CPU backend runs them: their int8 roundings turn f32 ordering differences into flips (on the
// H200, the transformers QAT fixture's logits moved 6.7e-3 with the device's linears and attention
// around its SRQ layer, against 6.6e-4 on the CPU).
#pragma once

#include <array>
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
  // Where the device has matrix units, the resident image path runs its dense (bf16 / f16)
  // linears on them (linear_cm.comp, `dense_cm`; else tower_gemm.comp) and its attention
  // (attention_cm.comp, `attn_cm`; else tower_attn.comp). `audio_resident` false: EncodeAudio
  // takes the split path (linears on the device, the rest on the host) for every tower.
  // `quant_cm` (with `dense_cm`): the resident paths' quantized linears (int2 / int4 / int8 codes,
  // a scale per row; the QAT towers') on the matrix units too, else on tower_gemm.comp.
  // `cm2`: those linears on workgroup-scope matrices (linear_cm2.comp) where the device has them.
  VulkanTower(const vk::Device& device, ThreadPool& pool, bool dense_cm = true, bool attn_cm = true,
              bool audio_resident = true, bool quant_cm = true, bool cm2 = false);
  ~VulkanTower();
  VulkanTower(const VulkanTower&) = delete;
  VulkanTower& operator=(const VulkanTower&) = delete;

  void EncodeImage(const Model& model, const VisionPatches& image, std::vector<float>* soft);
  void EncodeAudio(const Model& model, const AudioMel& audio, std::vector<float>* soft);

  // y[n, lin.rows] = x[n, lin.cols] W^T on the device (dense, or quantized without SRQ scales).
  void Linear(const gemma::Linear& lin, const float* x, int n, float* y);
  // The image path above, wholly on the device (a tower whose every linear DeviceTowerLinear
  // takes and whose heads fit tower_qkv / tower_attn); false when it is not such a tower.
  bool EncodeImageResident(const VisionTower& t, const VisionPatches& image,
                           std::vector<float>* soft);
  // The audio path above, wholly on the device (vulkan_audio_tower.cc: a tower whose every linear
  // DeviceTowerLinear takes, head dims up to 256 and at most 64 keys per query); false when it is
  // not such a tower. Throws as ref::AudioTowerForward for invalid input.
  bool EncodeAudioResident(const AudioTower& t, const AudioMel& audio, std::vector<float>* soft);
  // Bidirectional attention, scale 1 (ref::VisionKernels::Attention's contract; hd <= 128).
  void Attention(const float* q, const float* k, const float* v, int n, int nh, int nkv, int hd,
                 float* out);
  ThreadPool& pool() { return pool_; }
  // Query tokens per attention_cm dispatch in the resident image path, rounded up to 64 (0, or
  // more than split_f16's grid takes: as many as it takes, 65,535 q rows; tests set fewer to
  // cover the chunking).
  void set_attention_chunk(int tokens) { attn_chunk_ = tokens; }

 private:
  struct Weights {
    vk::BufRange w, s;
    uint32_t wstride = 0;
  };
  // By the weights' storage (the model's, alive as long as it; a caller may describe the same
  // storage with a Linear of its own, as the audio tower's convolutions do).
  using WeightKey = std::tuple<const uint8_t*, const float*, int, int, size_t, WeightKind>;
  // as_f16: bf16 weights converted to f16 (for linear_cm); other kinds as stored.
  const Weights& Upload(const gemma::Linear& lin, bool as_f16 = false);
  // Float vectors (norm weights, standardize vectors) on the device, kept like the weights
  // (floats_, by their storage); empty ones are left out.
  void UploadFloats(const std::vector<const std::vector<float>*>& vs);
  // The inputs of linear_cm (split_f16's output) in the resident paths.
  struct SplitBufs {
    vk::BufRange xh, xl, ts;
  };
  // Records y[rows, lin.rows] = x[rows, lin.cols] W^T (with the clamps when given) into `cmd`:
  // dense weights on matrix units (split_f16 + linear_cm) where coop_, else tower_gemm.
  void RecordLinear(vk::Device& dev, VkCommandBuffer cmd, const gemma::Linear& lin,
                    const ClippedLinear* clamps, const vk::BufRange& x, const vk::BufRange& y,
                    int rows, const SplitBufs& split);
  // Device buffers of at least `in` and `out` floats, and a host buffer of `out` floats.
  void Reserve(size_t in, size_t out);
  void Run(const char* shader, const std::vector<uint32_t>& spec,
           const std::array<vk::BufRange, vk::kBindings>& b, const void* push, size_t push_bytes,
           uint32_t gx, uint32_t gy, size_t out_bytes);

  ThreadPool& pool_;
  std::unique_ptr<vk::Device> wdev_;  // the weights' context
  std::map<WeightKey, Weights> weights_;
  std::map<const float*, vk::BufRange> floats_;
  // The resident image path's activations (made again to grow): capacity in patches.
  struct ImageBufs {
    vk::BufRange pix, pos, cs, h, a, q, k, v, att, tmp, g, u, pooled, normed, out, host;
    // linear_cm's and attention_cm's inputs: hi and lo f16 terms, the rows' scales; the step
    // values attention_cm reads (binding 11: first position 0, tokens n)
    vk::BufRange xh, xl, ts, step;
  };
  bool coop_ = false;     // dense linears on matrix units (linear_cm) in the resident image path
  bool cm2_ = false;      // ... on workgroup-scope matrices (linear_cm2)
  bool quant_cm_ = true;  // ... and quantized ones (linear_cm's QDENSE mode)
  bool attn_cm_ = false;  // its attention on matrix units (attention_cm)
  bool audio_resident_ = true;
  int attn_chunk_ = 0;
  std::unique_ptr<vk::Device> idev_;
  ImageBufs ib_;
  int img_cap_ = 0, img_rows_cap_ = 0;
  VkCommandBuffer icmd_ = VK_NULL_HANDLE;
  // The resident audio path's activations (made again to grow): capacity in mel frames.
  struct AudioBufs {
    vk::BufRange mel, mask, c0, c1, h, h2, a, q, k, v, att, pe, r, u, tmp, out, normed, soft, host;
    vk::BufRange xh, xl, ts;
  };
  std::unique_ptr<vk::Device> audev_;
  AudioBufs ab_;
  int aud_cap_ = 0;
  VkCommandBuffer acmd_ = VK_NULL_HANDLE;
  // softplus(per_dim_scale) per audio layer, by the weights' storage (kept like the weights).
  std::map<const float*, std::vector<float>> audio_dim_scale_;
  std::unique_ptr<vk::Device> adev_;  // the activations' context (made again to grow)
  size_t in_cap_ = 0, out_cap_ = 0;
  vk::BufRange in_, out_, host_;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
};

// Whether a tower linear can run on the device (VulkanTower::Linear).
bool DeviceTowerLinear(const gemma::Linear& lin);

}  // namespace vulkan_internal
}  // namespace gemma
