// SIMD kernels of the fast CPU backend (Highway, runtime dispatch: AVX-512 VNNI, AVX-512, AVX2,
// SSE4, NEON, scalar).
//
// Quantized (QAT) linears. Activations are SRQ-quantized to int8 exactly as the reference
// (divide, round half to even, clamp [-128, 127]) and stored per token in a block-permuted order
// that matches how packed weights unpack: weights are read as their unsigned offset-binary codes u
// (u = v + 2 for int2, v + 8 for int4, v + 128 for int8), so
//   sum_i v_i q_i = sum_i u_i q_i - offset * sum_i q_i,
// an exact integer dot product of u8 x s8 (vpdpbusd on VNNI). A block is 64 packed bytes:
//   int8: 64 elements, identity order;
//   int4: 128 elements; low nibbles are elements 0, 2, ..., 126, high nibbles 1, 3, ..., 127, so
//         the permuted block is [q0 q2 ... q126 | q1 q3 ... q127];
//   int2: 256 elements; bits 2k..2k+1 of byte j are element 4j + k, so the permuted block is
//         [q(4j) | q(4j+1) | q(4j+2) | q(4j+3)] for j = 0..63.
// Rows whose byte length is not a multiple of 64 finish with a scalar tail (tiny models only).
// The epilogue is the reference's: f32(double(dot) * in_scale * row_scale), then SRQ of the
// output. Results are bit-identical to ref::LinearForward.
//
// Dense (f32/bf16/f16) linears and attention dot products accumulate in f64 like the reference, so
// their f32 results differ from it only when an f64 sum lands within an f64 rounding of an f32
// rounding boundary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "model/model.h"

namespace gemma::fast {

// Activation elements per 64-byte weight block (64 int8, 128 int4, 256 int2).
int BlockElems(WeightKind kind);
// Length of a permuted activation row for `cols` inputs: whole blocks, zero padded.
int PaddedCols(WeightKind kind, int cols);
// Offset between stored codes and signed values.
int CodeOffset(WeightKind kind);

// SRQ-quantizes x[0, cols) with scale s > 0 into q[0, PaddedCols) in the permuted order of `kind`,
// zero padded. Returns sum of q.
int32_t QuantizeActs(WeightKind kind, const float* x, int cols, float s, int8_t* q);

// Rows [r0, r1) of a quantized linear with an SRQ input scale, for n tokens whose permuted
// activations are q + t * q_stride (sums in q_sum[t]): y[t * y_stride + r], with the reference's
// epilogue (scales, output SRQ).
void QuantLinearRows(const Linear& lin, const int8_t* q, size_t q_stride, const int32_t* q_sum,
                     int n, int r0, int r1, float* y, size_t y_stride);

// Rows [r0, r1) of a quantized linear without an SRQ input scale (f32 inputs): the reference's
// f64 loop in the reference's order (bit-identical), without its allocations.
void QuantFloatLinearRows(const Linear& lin, const float* x, size_t x_stride, int n, int r0, int r1,
                          float* y, size_t y_stride);

// Rows [r0, r1) of a dense linear: y[t * y_stride + r] = f32(sum_i f64(w[r][i]) * x[t][i]).
void DenseLinearRows(const Linear& lin, const float* x, size_t x_stride, int n, int r0, int r1,
                     float* y, size_t y_stride);

// Rows [r0, r1) of a dense (f32 / bf16 / f16) linear for many tokens with f32 accumulation (the
// towers: design §4 computes bf16 weights in f32): y[t * y_stride + r] = the f32 FMA chain of
// f32(w[r][i]) * x[t][i], i ascending: the same values whatever the threads or row ranges.
// A quantized (QAT) `lin` gives the sums over its integer codes, without row scales or SRQ.
// `scratch`: GemmScratchFloats(lin.cols) floats of the calling thread (gemm_f32.cc).
void DenseGemmRowsF32(const Linear& lin, const float* x, size_t x_stride, int n, int r0, int r1,
                      float* y, size_t y_stride, float* scratch);
size_t GemmScratchFloats(int cols);
// Rows per packed panel (a task of DenseGemmRowsF32 should cover whole panels).
int GemmPanelRows();
// DenseGemmRowsF32 in two steps, for a matrix that many token blocks share (the towers'
// attention: keys and values once per head, not once per block of queries; the vision tower's
// linears: once per model). PackPanelsF32 packs panels [first, first + count) of `lin` into
// `packed` (PackedPanelsFloats(lin.rows, lin.cols) floats for all; `scratch`:
// GemmScratchFloats(lin.cols)); PackedGemmRowsF32 then gives DenseGemmRowsF32's values for rows
// [r0, r1) (r0 a multiple of GemmPanelRows()), each clamped to [out_min, out_max] as it is stored
// (std::min(std::max(y, out_min), out_max) for every y that is not NaN; infinite bounds: none).
size_t PackedPanelsFloats(int rows, int cols);
void PackPanelsF32(const Linear& lin, int first, int count, float* packed, float* scratch);
void PackedGemmRowsF32(const float* packed, int rows, int cols, const float* x, size_t x_stride,
                       int n, int r0, int r1, float* y, size_t y_stride,
                       float out_min = -std::numeric_limits<float>::infinity(),
                       float out_max = std::numeric_limits<float>::infinity());
// x = softmax(x) in f32 (Highway's Exp, a few ulp; the sum in f64 across lanes' f32 partials).
void SoftmaxF32(float* x, int n);
// g[i] = gelu_tanh(g[i]) * u[i] in f32 (Highway's Tanh, a few ulp from the reference's).
void GeluTanhMulF32(float* g, const float* u, size_t n);
// sum_i f64(a_i) * b_i.
double DotF64(const float* a, const float* b, int n);
// Attention for a group of query heads sharing one key/value head (MQA/GQA), f64 like the
// reference. q: nq <= 8 heads of hd doubles, contiguous; keys/values j at base + j * stride.
// out[h * ld + j] = sum_i q[h][i] * f64(k_j[i]).
void QueryKeyDotsF64(const double* q, int nq, int hd, const float* k, size_t k_stride, int nk,
                     double* out, size_t ld);
// acc[h * hd + i] += p[h * ld + j] * f64(v_j[i]), j ascending (the reference's order per i).
void WeightedValuesF64(const double* p, size_t ld, int nq, const float* v, size_t v_stride, int nk,
                       int hd, double* acc);
// x[0..n) = softmax(x) in double: a vector exp within 1 ulp of exp's, the sum in a fixed order for
// a given n (not the reference's order: the fast backend is within its tolerance of the
// reference; a row's scores are the same array in chunked, batched and solo steps, so their bits
// agree).
void SoftmaxF64(double* x, int n);
// The reference RMSNorm (f64 sum of squares, f32 scaling): y = x * (mean(x^2) + eps)^-0.5 [* w].
void RmsNorm(const float* x, int n, const float* w, float eps, float* y);
// y[i] = a[i] * b[i] (f32).
void MulF32(const float* a, const float* b, int n, float* y);
// x[i] += y[i] (f32).
void AddF32(const float* y, int n, float* x);
// x[i] *= s (f32).
void ScaleF32(float s, int n, float* x);
// y[i] = std::min(std::max(x[i], lo), hi) for x[i] not NaN; y may be x.
void ClampF32(const float* x, size_t n, float lo, float hi, float* y);

// Lookup of SRQ outputs in a 256-entry table of a function of them: x = k * s, k in [-128, 127]
// found as the backend's Level (k = clamp(trunc(x / s + (x / s >= 0 ? 0.5 : -0.5)))), all in f32,
// so results equal the scalar lookup bit for bit.
// y[i] = table[k(x[i]) + 128] * m[i] (GELU of a gate times up); m = nullptr: no multiply.
void TableLookupMul(const float* x, int n, float s, const float* table, const float* m, float* y);
// x[i] = table[k(x[i]) + 128] in place and level[i] = k(x[i]) + 128.
void TableLookupLevels(float* x, int n, float s, const float* table, uint8_t* level);
// x[i] = table[k(x[i]) + 128] in place; returns the lowest index of the largest result.
int TableLookupArgmax(float* x, int n, float s, const float* table);

// XOR of all 8-byte words in [p, p + bytes) (bytes a multiple of 8): a streaming read at full SIMD
// width, for memory-bandwidth measurement.
uint64_t XorReduce(const uint8_t* p, size_t bytes);

// Name of the SIMD target chosen at runtime, e.g. "AVX3_DL".
const char* TargetName();

}  // namespace gemma::fast
