// The fast CPU backend's vision and audio towers (internal; the entry points other backends call
// are in cpu_fast_backend.h).
//
// FastVisionKernels: ref::VisionKernels on the thread pool (the linears on the f32 GEMM or the
// integer kernels, the attention on the f32 GEMM); the audio tower and the Vulkan backend's host
// fallbacks run ref's tower code with them.
//
// FastVisionTower: the vision tower and embed_vision with ref::VisionTowerForward's arithmetic and
// data flow, on those kernels, without the reference's per-call costs:
//   - the f32 GEMM's panels (the linears' weights as k-major f32, gemm_f32.cc) packed once per
//     tower, on first use of each linear, and kept (keep_panels);
//   - the activations in buffers kept across images (grown, never shrunk: no allocation, zeroing
//     or first-touch page faults after the largest image so far);
//   - the clipped linears' clamps without copies: an output clamp as the GEMM stores its tile, an
//     input clamp in place where every reader of the buffer has the same bounds (else one clamped
//     copy per reader, written as the producer writes the row);
//   - the per-token norms on fast::RmsNorm, RoPE's cos and sin from a table per image.
// Numerics: the fast kernels' (fast_ops.h): the linears, attention and GELU as FastVisionKernels
// computes them; RMSNorm's f64 sum of squares in another order than ref::RmsNorm, so a norm can
// differ from the reference's in the last bit of its f32 scale. Clamps, residual adds and RoPE are
// the reference's operations.
//
// Memory with keep_panels: 4 bytes per weight of the linears on the f32 GEMM (dense towers: all of
// them; QAT towers: those without SRQ inputs), allocated as each linear is first used. E2B's tower
// (16 layers x 768, MLP 3,072) with its input projection and embed_vision (to 1,536) has 152.8 M
// weights: 611 MB of panels (583 MiB) beside the checkpoint's 306 MB of bf16, which stay mapped.
// Activations, grown to the largest image so far: 48 KiB per patch at E2B's widths plus 9 KiB for
// the attention's packed keys and values (147 MB at 2,520 patches, budget 280).
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/vision_ops.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace gemma::fast {

// The towers' linears and attention on the shared pool (rows / query blocks per task).
class FastVisionKernels : public ref::VisionKernels {
 public:
  // f32_ops: the attention on the f32 GEMM and a vectorized f32 GELU (dense towers); else both
  // as the reference computes them (QAT towers: their SRQ steps turn f32 rounding differences
  // into int8 flips).
  FastVisionKernels(ThreadPool& pool, bool f32_ops) : pool_(pool), f32_ops_(f32_ops) {}
  void GeluMul(float* g, const float* u, size_t n) const override;
  void ForTokens(int n, const std::function<void(int, int)>& fn) const override;
  void Linear(const gemma::Linear& lin, const float* x, int n, float* y) const override;
  void Attention(const float* q, const float* k, const float* v, int n, int nh, int nkv, int hd,
                 float* out) const override;
  bool f32_ops() const { return f32_ops_; }

 private:
  void GemmAttention(const float* q, const float* k, const float* v, int n, int nh, int nkv, int hd,
                     float* out) const;
  ThreadPool& pool_;
  const bool f32_ops_;
  mutable std::vector<std::vector<float>> scratch_;  // DenseGemmRowsF32's, per pool thread
  mutable std::vector<std::vector<float>> scores_;   // GemmAttention's, per pool thread
  mutable std::vector<float> packed_;                // GemmAttention's keys and values
};

// True where a vision tower takes FastVisionKernels' f32_ops: dense towers yes, QAT towers no.
bool VisionF32Ops(const VisionTower& tower);

class FastVisionTower {
 public:
  // keep_panels: pack each linear's f32 panels once and keep them (a backend's model); false:
  // pack them per call into per-thread scratch, as FastVisionKernels does (one-off callers).
  FastVisionTower(const VisionTower& tower, ThreadPool& pool, bool keep_panels);
  ~FastVisionTower();
  FastVisionTower(const FastVisionTower&) = delete;
  FastVisionTower& operator=(const FastVisionTower&) = delete;

  // soft_tokens: [patches / pooling^2, text hidden]. One call at a time (the buffers are the
  // tower's); the panels are packed under a once-flag per linear. Error(kInvalidArgument) for a
  // patch grid the tower cannot take.
  void Encode(const VisionPatches& image, std::vector<float>* soft_tokens);
  // Bytes of the panels packed so far.
  size_t panel_bytes() const { return panel_bytes_.load(std::memory_order_relaxed); }

 private:
  struct Panels;
  // The readers of one activation buffer of `cols` floats per token, and what each reads.
  struct Readers;
  const float* PanelsOf(const gemma::Linear& lin);
  void Linear(const gemma::Linear& lin, const float* x, int n, float* y, float lo, float hi);
  void Clipped(const ClippedLinear& cl, const float* x, int n, float* y);
  Readers PlanReaders(std::initializer_list<const ClippedLinear*> readers, float* x, int n,
                      int cols);
  void ClampRows(const Readers& r, int t0, int t1) const;
  void Forward(const VisionPatches& image);

  const VisionTower& tower_;
  ThreadPool& pool_;
  FastVisionKernels kernels_;
  std::unordered_map<const gemma::Linear*, std::unique_ptr<Panels>> panels_;  // keep_panels
  std::atomic<size_t> panel_bytes_{0};
  std::vector<std::vector<float>> pack_scratch_;  // per pool thread
  // Activations, as ref::VisionTowerForward names them; copies_: clamped inputs of readers whose
  // bounds differ.
  std::vector<float> pix_, h_, a_, tmp_, q_, k_, v_, att_, g_, u_, copies_[3];
  std::vector<double> pooled_d_;
  std::vector<float> pooled_, rope_cos_, rope_sin_;
};

}  // namespace gemma::fast
