// The Gemma 4 vision tower on the CPU, written for exactness against transformers (float32):
// patch embedding (2 * (pixels - 0.5), input_proj, learned x/y position rows), encoder layers
// (sandwich RMSNorms, clippable linears, q/k RMSNorm with weights, v RMSNorm without, 2D RoPE
// over each half of a head, bidirectional attention over the image's real patches, gelu-tanh MLP),
// 3x3 average pooling by position, * sqrt(hidden), optional standardize, then embed_vision
// (RMSNorm without weight, projection to the text width).
//
// Padding patches never enter: transformers masks their keys (exactly zero weight) and drops
// their rows after pooling. Dot products accumulate in double (reference_ops' contract).
#pragma once

#include <functional>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"

namespace gemma::ref {

// The tower's two heavy operations; the defaults are the reference kernels (one thread, f64
// sums). A faster backend overrides them and keeps the rest of the tower's arithmetic.
class VisionKernels {
 public:
  virtual ~VisionKernels() = default;
  // y[n, lin.rows] = x[n, lin.cols] W^T.
  virtual void Linear(const gemma::Linear& lin, const float* x, int n, float* y) const;
  // Bidirectional attention of n tokens, scale 1: q [n, nh * hd], k and v [n, nkv * hd],
  // out [n, nh * hd]; query head h reads key/value head h / (nh / nkv).
  virtual void Attention(const float* q, const float* k, const float* v, int n, int nh, int nkv,
                         int hd, float* out) const;
  // g[i] = GeluTanh(g[i]) * u[i] for i < n (the MLP's gate times its up projection).
  virtual void GeluMul(float* g, const float* u, size_t n) const;
  // fn(begin, end) over token ranges covering [0, n): per-token work (norms, RoPE, clamps,
  // residual adds) that does not depend on other tokens, so any split gives the same numbers.
  // Here: one call, in order; a backend may run ranges on threads.
  virtual void ForTokens(int n, const std::function<void(int, int)>& fn) const { fn(0, n); }
};

// y[n, lin.rows] = clamp(lin(clamp(x))) with a clipped linear's bounds (the towers'
// ClippableLinear).
void ClippedForward(const VisionKernels& kernels, const ClippedLinear& cl, const float* x, int n,
                    float* y);

// Error(kInvalidArgument) for a patch grid the tower cannot take (not a positive multiple of the
// pooling kernel, or more patches per side than the position table has rows).
void CheckVisionInput(const VisionConfig& config, const VisionPatches& image);

// The tower's output before embed_vision: [patches / pooling^2, vision hidden].
std::vector<float> VisionTowerForward(const VisionTower& tower, const VisionPatches& image,
                                      const VisionKernels& kernels = VisionKernels());
// embed_vision on n rows: [n, text hidden].
std::vector<float> EmbedVision(const VisionTower& tower, const std::vector<float>& pooled, int n,
                               const VisionKernels& kernels = VisionKernels());

}  // namespace gemma::ref
