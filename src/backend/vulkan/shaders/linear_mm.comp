#version 450
// Prefill linears as a tiled matrix product: a workgroup computes 64 rows x 64 tokens, each
// invocation a 4 x 4 block, over K tiles of 32 columns staged in shared memory as f32 (weights
// decoded, inputs SRQ-quantized when the linear has an input scale).
// Exactness: quantized weights times int8 inputs are small integers, so the f32 products and their
// sums over 4 K tiles (128 columns, |sum| < 2^24) are exact; they are then moved into int32
// accumulators, so the result equals linear.comp's integer dot product bit for bit. Dense kinds
// accumulate in f32. Epilogues as linear.comp (0 store, 1 gelu(gate) * up, 2 softcap, 3 gelu * aux).
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 1) const uint KIND = 0;
layout(constant_id = 2) const uint EPI = 0;

layout(std430, binding = 0) readonly buffer W0 { uint w0[]; };
layout(std430, binding = 1) readonly buffer S0 { float s0[]; };
layout(std430, binding = 2) readonly buffer X { float x[]; };
layout(std430, binding = 3) buffer Y { float y[]; };
layout(std430, binding = 4) readonly buffer W1 { uint w1[]; };
layout(std430, binding = 5) readonly buffer S1 { float s1[]; };
layout(std430, binding = 6) readonly buffer Aux { float aux[]; };

layout(push_constant) uniform P {
  uint rows, cols, wstride, x_stride, y_stride, y_off;
  float in_s0, out_s0, in_s1, out_s1;
  float cap;
  uint aux_stride, aux_off, x_row0, ntok;
} p;

const uint DUAL = (EPI == 1) ? 2 : 1;
const uint BM = 64, BN = 64, BK = 32;
shared float ws[DUAL][BK][BM];
shared float xs[DUAL][BK][BN];

uint ElemsPerWord() {
  return KIND == 0 ? 1 : KIND == 1 || KIND == 2 ? 2 : KIND == 3 ? 16 : KIND == 4 ? 8 : 4;
}
float Elem(uint w, uint k) {
  if (KIND == 3) return float(int((w >> (2 * k)) & 3u) - 2);
  if (KIND == 4) return float(int((w >> (4 * k)) & 15u) - 8);
  if (KIND == 5) return float(bitfieldExtract(int(w), int(8 * k), 8));
  if (KIND == 0) return uintBitsToFloat(w);
  const uint h = (w >> (16 * k)) & 0xFFFFu;
  if (KIND == 1) return uintBitsToFloat(h << 16);
  return unpackHalf2x16(h).x;
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint tr = tid % 16, tc = tid / 16;
  const uint t0 = gl_WorkGroupID.x * BN, r0 = gl_WorkGroupID.y * BM;
  const bool quant = KIND >= 3;
  float in_s[2] = float[2](p.in_s0, p.in_s1);
  bool int_path[2];
  int_path[0] = quant && p.in_s0 > 0.0;
  int_path[1] = quant && p.in_s1 > 0.0;
  const uint epw = ElemsPerWord();
  const uint wpr = BK / epw;  // words per row per K tile

  float acc[DUAL][4][4];
  int acci[DUAL][4][4];
  [[unroll]] for (uint d = 0; d < DUAL; ++d)
    [[unroll]] for (uint i = 0; i < 4; ++i)
      [[unroll]] for (uint j = 0; j < 4; ++j) {
        acc[d][i][j] = 0.0;
        acci[d][i][j] = 0;
      }

  const uint ktiles = (p.cols + BK - 1) / BK;
  for (uint kt = 0; kt < ktiles; ++kt) {
    const uint k0 = kt * BK;
    for (uint d = 0; d < DUAL; ++d) {
      // Weights: BM rows x wpr words.
      for (uint i = tid; i < BM * wpr; i += 256) {
        const uint rr = i / wpr, wj = i % wpr;
        const uint row = r0 + rr;
        const uint wi = k0 / epw + wj;
        uint w = 0;
        const bool ok = row < p.rows && wi < p.wstride;
        if (ok) w = d == 0 ? w0[row * p.wstride + wi] : w1[row * p.wstride + wi];
        for (uint k = 0; k < epw; ++k) {
          const uint c = k0 + wj * epw + k;
          ws[d][wj * epw + k][rr] = (ok && c < p.cols) ? Elem(w, k) : 0.0;
        }
      }
      // Inputs: BN tokens x BK columns.
      for (uint i = tid; i < BN * BK; i += 256) {
        const uint tt = i / BK, kk = i % BK;
        const uint t = t0 + tt, c = k0 + kk;
        float v = 0.0;
        if (t < p.ntok && c < p.cols) {
          v = x[(t + p.x_row0) * p.x_stride + c];
          if (int_path[d]) v = float(QuantizeSrq(v, in_s[d]));
        }
        xs[d][kk][tt] = v;
      }
    }
    barrier();
    [[unroll]] for (uint d = 0; d < DUAL; ++d) {
      for (uint k = 0; k < BK; ++k) {
        float a[4], b[4];
        [[unroll]] for (uint i = 0; i < 4; ++i) a[i] = ws[d][k][tr + 16 * i];
        [[unroll]] for (uint j = 0; j < 4; ++j) b[j] = xs[d][k][tc + 16 * j];
        [[unroll]] for (uint i = 0; i < 4; ++i)
          [[unroll]] for (uint j = 0; j < 4; ++j) acc[d][i][j] = fma(a[i], b[j], acc[d][i][j]);
      }
      if (int_path[d] && ((kt & 3) == 3 || kt + 1 == ktiles)) {
        [[unroll]] for (uint i = 0; i < 4; ++i)
          [[unroll]] for (uint j = 0; j < 4; ++j) {
            acci[d][i][j] += int(acc[d][i][j]);
            acc[d][i][j] = 0.0;
          }
      }
    }
    barrier();
  }

  float out_s[2] = float[2](p.out_s0, p.out_s1);
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    const uint row = r0 + tr + 16 * i;
    if (row >= p.rows) continue;
    [[unroll]] for (uint j = 0; j < 4; ++j) {
      const uint t = t0 + tc + 16 * j;
      if (t >= p.ntok) continue;
      float v[2];
      [[unroll]] for (uint d = 0; d < DUAL; ++d) {
        const float rs = quant ? (d == 0 ? s0[row] : s1[row]) : 1.0;
        float r;
        if (int_path[d]) {
          r = float(double(acci[d][i][j]) * double(in_s[d]) * double(rs));
        } else {
          r = quant ? acc[d][i][j] * rs : acc[d][i][j];
        }
        if (out_s[d] > 0.0) r = Srq(r, out_s[d]);
        v[d] = r;
      }
      float outv = v[0];
      if (EPI == 1) outv = GeluTanh(v[0]) * v[1];
      if (EPI == 2 && p.cap > 0.0) outv = TanhClamped(ExactDiv(v[0], p.cap)) * p.cap;
      if (EPI == 3) outv = GeluTanh(v[0]) * aux[t * p.aux_stride + p.aux_off + row];
      y[t * p.y_stride + p.y_off + row] = outv;
    }
  }
}
