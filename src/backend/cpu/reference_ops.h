// Reference kernels: plain C++, written for clarity and exactness against transformers (float32).
//
// Exactness contract: dense dot products accumulate in double and round once; quantized (QAT)
// linears with an SRQ input scale quantize x to int8 exactly as transformers' apply_srq (divide,
// round half to even, clamp [-128, 127]) and accumulate v*q in int64, then scale once; RMSNorm,
// RoPE, softmax and GELU follow the f32 formulas of transformers' modeling_gemma4.
#pragma once

#include <cmath>

#include <cstdint>
#include <span>
#include <vector>

#include "model/model.h"

namespace gemma::ref {

// y[t][o] for t in [0, n): x is [n, lin.cols], y is [n, lin.rows].
void LinearForward(const Linear& lin, const float* x, int n, float* y);
// Diagnostics for tests: while an instance lives on this thread, LinearForward sums products of
// f32 values (dense kinds, quantized kinds without an SRQ input) in f32 instead of double: a plain
// f32 implementation, whose distance from the double reference measures how sensitive a model is
// to f32 rounding (the randomized differential tests' dense criterion, tests/decode_diff_util.h).
class ScopedF32Sums {
 public:
  ScopedF32Sums();
  ~ScopedF32Sums();
  ScopedF32Sums(const ScopedF32Sums&) = delete;
  ScopedF32Sums& operator=(const ScopedF32Sums&) = delete;

 private:
  bool prev_;
};
// Decodes row r of a weight matrix into f32 (dequantized: v * scale for quantized kinds).
void DecodeRow(const Linear& lin, int r, float* out);
// Decodes row r into its integer values (quantized kinds only).
void DecodeRowInt(WeightKind kind, const uint8_t* row, int cols, int8_t* out);
// Embedding row lookup with the embedding's scale: out has e.cols floats.
void EmbeddingRow(const Embedding& e, int32_t id, float* out);
// EmbeddingRow's values (the same f32 operations per element, so the same bits) for per-token
// callers (the Vulkan backend's per-step upload): int2 / int4 rows through a table of each scale
// block's products, no division per element; out is only written (it may be uncached memory).
void EmbeddingRowFast(const Embedding& e, int32_t id, float* out);

// transformers' apply_srq on one value (s > 0).
float Srq(float z, float s);
int8_t QuantizeSrq(float z, float s);

// y = x * pow(mean(x^2) + eps, -0.5) * w (w may be empty: no weight), in place allowed.
void RmsNorm(const float* x, int n, std::span<const float> w, float eps, float* y);
// tanh correctly rounded to f32 (a double evaluation, rounded once): the same value on every
// platform and backend (the Vulkan shaders' TanhF). The C library's tanhf is not correctly
// rounded (glibc's differs in ~20% of inputs by an ulp), which moved SRQ roundings after the GELU
// between the CPU reference and Vulkan now and then (issue 34).
inline float TanhF(float x) { return static_cast<float>(std::tanh(static_cast<double>(x))); }
float GeluTanh(float x);

// RoPE tables for one layer type: inv_freq of head_dim / 2 entries, as transformers computes them.
std::vector<float> RopeInvFreq(const RopeParams& rope, int head_dim);
// Rotates one head vector (half-split pairing i <-> i + d/2) at position pos, in place.
void ApplyRope(float* x, int head_dim, std::span<const float> inv_freq, int pos);

}  // namespace gemma::ref
