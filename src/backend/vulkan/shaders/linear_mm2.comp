#version 450
// Prefill linears as a register-tiled matrix product: a workgroup of 16 x 16 invocations computes
// 128 rows x BN tokens (BN = 128, or 64 for the fused gate/up pair), each invocation an 8-row x
// TN-token block held in registers, over K tiles of 16 columns staged in shared memory as f32
// (weights decoded, inputs SRQ-quantized when the linear has an input scale). Operands are read from
// shared memory as vec4 (3 loads per 32 FMAs).
// Exactness: quantized weights times int8 inputs are small integers. For int2/int4 every partial
// sum of a row is bounded by max|w| * 128 * cols < 2^24 (the host uses this kernel only then), so
// the f32 sum is exact and converts to the int32 dot product bit for bit. int8 weights (products up
// to 2^14) move the f32 partial sums into int32 accumulators every 32 K tiles (|sum| < 2^23).
// Dense kinds accumulate in f32. Epilogues as linear.comp (0 store, 1 gelu(gate) * up, 2 softcap,
// 3 gelu * aux).
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

// DUAL (1, or 2 for the fused gate/up pair, EPI 1) is a compile-time constant, not derived from the
// EPI specialization constant, so glslc unrolls every register-tile loop and the accumulators stay
// in registers (spec-constant loop bounds left them as indexed arrays: 2x slower than linear_mm).
#ifndef MM_DUAL
#define MM_DUAL 1
#endif
const uint DUAL = MM_DUAL;
const uint TN = 8 / DUAL;        // tokens per invocation
const uint BM = 128, BN = 16 * TN, BK = 16;
const uint WLD = BM / 4;         // vec4 per K row of weights
const uint XLD = BN / 4 + 1;     // vec4 per K row of inputs (padded against bank conflicts)
const uint FLUSH = 32;           // int8: K tiles per f32 partial sum
shared vec4 ws[DUAL * BK * WLD];
shared vec4 xs[DUAL * BK * XLD];

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

void StoreW(uint d, uint k, uint rr, float v) {
  const uint i = (d * BK + k) * WLD + rr / 4;
  ws[i][rr & 3] = v;
}
void StoreX(uint d, uint k, uint tt, float v) {
  const uint i = (d * BK + k) * XLD + tt / 4;
  xs[i][tt & 3] = v;
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

  float acc[DUAL][8][TN];
  int acci[DUAL][8][TN];
  [[unroll]] for (uint d = 0; d < DUAL; ++d)
    [[unroll]] for (uint i = 0; i < 8; ++i)
      [[unroll]] for (uint j = 0; j < TN; ++j) {
        acc[d][i][j] = 0.0;
        acci[d][i][j] = 0;
      }

  const uint ktiles = (p.cols + BK - 1) / BK;
  for (uint kt = 0; kt < ktiles; ++kt) {
    const uint k0 = kt * BK;
    [[unroll]] for (uint d = 0; d < DUAL; ++d) {
      // Weights: BM rows x wpr words; consecutive invocations take consecutive rows.
      for (uint i = tid; i < BM * wpr; i += 256) {
        const uint rr = i % BM, wj = i / BM;
        const uint row = r0 + rr;
        const uint wi = k0 / epw + wj;
        uint w = 0;
        const bool ok = row < p.rows && wi < p.wstride;
        if (ok) w = d == 0 ? w0[row * p.wstride + wi] : w1[row * p.wstride + wi];
        [[unroll]] for (uint k = 0; k < epw; ++k) {
          const uint c = k0 + wj * epw + k;
          StoreW(d, wj * epw + k, rr, (ok && c < p.cols) ? Elem(w, k) : 0.0);
        }
      }
      // Inputs: BN tokens x BK columns (columns fastest for coalesced reads).
      [[unroll]] for (uint u = 0; u < BN * BK / 256; ++u) {
        const uint i = tid + 256 * u;
        const uint kk = i % BK, tt = i / BK;
        const uint t = t0 + tt, c = k0 + kk;
        float v = 0.0;
        if (t < p.ntok && c < p.cols) {
          v = x[(t + p.x_row0) * p.x_stride + c];
          if (int_path[d]) v = float(QuantizeSrq(v, in_s[d]));
        }
        StoreX(d, kk, tt, v);
      }
    }
    barrier();
    [[unroll]] for (uint d = 0; d < DUAL; ++d) {
      [[unroll]] for (uint k = 0; k < BK; ++k) {
        const uint wb = (d * BK + k) * WLD, xb = (d * BK + k) * XLD;
        const vec4 a0 = ws[wb + tr], a1 = ws[wb + 16 + tr];
        const vec4 b0 = xs[xb + tc];
        float a[8] = float[8](a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w);
        float b[TN];
        b[0] = b0.x; b[1] = b0.y; b[2] = b0.z; b[3] = b0.w;
#if MM_DUAL == 1
        const vec4 b1 = xs[xb + 16 + tc];
        b[4] = b1.x; b[5] = b1.y; b[6] = b1.z; b[7] = b1.w;
#endif
        [[unroll]] for (uint i = 0; i < 8; ++i)
          [[unroll]] for (uint j = 0; j < TN; ++j) acc[d][i][j] = fma(a[i], b[j], acc[d][i][j]);
      }
      if (KIND == 5 && int_path[d] && ((kt % FLUSH) == FLUSH - 1 || kt + 1 == ktiles)) {
        [[unroll]] for (uint i = 0; i < 8; ++i)
          [[unroll]] for (uint j = 0; j < TN; ++j) {
            acci[d][i][j] += int(acc[d][i][j]);
            acc[d][i][j] = 0.0;
          }
      }
    }
    barrier();
  }

  // Epilogue: one non-unrolled loop over the invocation's 8 x TN outputs (its GELU / tanh code once,
  // not 8 x TN times); each accumulator is picked by a constant-index select chain so the arrays
  // are never indexed dynamically and stay in registers.
  float out_s[2] = float[2](p.out_s0, p.out_s1);
  [[dont_unroll]] for (uint e = 0; e < 8 * TN; ++e) {
    const uint i = e / TN, j = e % TN;
    const uint row = r0 + (i < 4 ? 4 * tr + i : 64 + 4 * tr + (i - 4));
    const uint t = t0 + (j < 4 ? 4 * tc + j : 64 + 4 * tc + (j - 4));
    if (row >= p.rows || t >= p.ntok) continue;
    float v[2];
    [[unroll]] for (uint d = 0; d < DUAL; ++d) {
      float fa = 0.0;
      int ia = 0;
      [[unroll]] for (uint q = 0; q < 8 * TN; ++q) {
        if (q == e) {
          fa = acc[d][q / TN][q % TN];
          ia = acci[d][q / TN][q % TN];
        }
      }
      const float rs = quant ? (d == 0 ? s0[row] : s1[row]) : 1.0;
      float r;
      if (int_path[d]) {
        const int ti = KIND == 5 ? ia : int(fa);
        r = float(double(ti) * double(in_s[d]) * double(rs));
      } else {
        r = quant ? fa * rs : fa;
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
