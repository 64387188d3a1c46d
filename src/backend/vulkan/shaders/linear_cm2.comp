#version 450
// Prefill linears on workgroup-scope cooperative matrices (VK_NV_cooperative_matrix2): the same
// sums and epilogues as linear_cm.comp, with the staging through shared memory left to the
// driver. A workgroup computes BM rows x BN tokens over K tiles of BK columns; the weights are
// read from their packed words through tensor-addressing loads with a decode function per element.
// Two forms (macros), each module one:
// - CM2_INT (SRQ integer kinds int2 / int4 / int8): the codes decoded to int8 (less their offset),
//   the inputs SRQ-quantized to int8 by srq_quant.comp (I8), int8 x int8 products summed in int32:
//   linear.comp's int32 dot product bit for bit, for any row length.
// - otherwise dense kinds (bf16 converted to f16 as linear_cm does, f16 as stored) and QDENSE
//   (int2 / int4 / int8 codes as f16, a scale per row): inputs as hi and lo f16 terms scaled per
//   token (split_f16.comp), both multiplied by the same weight tile, every DRAIN columns' sums
//   added into f32 running sums (linear_cm's accuracy).
// Epilogues as linear_cm's (0 store, 1 gelu(gate) * up, 2 softcap, 3 gelu * aux; OCLAMP), applied
// per element by coopMatPerElementNV. Compiled only with a glslang that knows
// GL_NV_cooperative_matrix2 (src/backend/vulkan/CMakeLists.txt); used where the device offers it.
#extension GL_KHR_memory_scope_semantics : enable
#extension GL_KHR_cooperative_matrix : enable
#extension GL_NV_cooperative_matrix2 : enable
#extension GL_EXT_shader_explicit_arithmetic_types : enable
#extension GL_EXT_buffer_reference : enable
#extension GL_GOOGLE_include_directive : enable
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 1) const uint KIND = 4;
layout(constant_id = 2) const uint EPI = 0;
layout(constant_id = 3) const uint OCLAMP = 0;
layout(constant_id = 4) const uint QDENSE = 0;

#ifndef MM_DUAL
#define MM_DUAL 1
#endif
const uint DUAL = MM_DUAL;
#ifndef CM2_BM
#define CM2_BM 128
#endif
#ifndef CM2_BN
#define CM2_BN 128
#endif
#ifndef CM2_BK
#ifdef CM2_INT
#define CM2_BK 32
#else
#define CM2_BK 64
#endif
#endif
const uint BM = CM2_BM, BN = CM2_BN, BK = CM2_BK;
const bool DENSE = KIND == 1 || KIND == 2;
const bool QD = QDENSE == 1 && KIND >= 3;
// Columns per f32 running-sum addition (dense forms: linear_cm's 64).
const uint DRAIN = 64;

struct Word { uint w; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer WordRef { Word b; };
layout(std430, binding = 0) readonly buffer W0 { Word w0[]; };
layout(std430, binding = 1) readonly buffer S0 { float s0[]; };
layout(std430, binding = 3) buffer Y { float y[]; };
layout(std430, binding = 4) readonly buffer W1 { Word w1[]; };
layout(std430, binding = 5) readonly buffer S1 { float s1[]; };
layout(std430, binding = 6) readonly buffer Aux { float aux[]; };
#ifdef CM2_INT
#define ET int8_t
#define ST int
#else
#define ET float16_t
#define ST float
#endif
layout(std430, binding = 7) readonly buffer XQ0 { ET xq0[]; };
layout(std430, binding = 8) readonly buffer XQ1 { ET xq1[]; };
layout(std430, binding = 9) buffer Part { int part[]; };  // dense: the token's scale as float bits

layout(push_constant) uniform P {
  uint rows, cols, wstride, x_stride, y_stride, y_off;
  float in_s0, out_s0, in_s1, out_s1;
  float cap;
  uint aux_stride, aux_off, x_row0, ntok;
  uint n, has_a, has_wa;
  float scale, eps, next_in_s;
  uint xq_ld;  // uvec4 (8 halves) per token row of xq0 / xq1
  uint kper;
  layout(offset = 116) float out_lo;
  float out_hi;
} p;

uint ElemsPerWord() { return KIND == 3 ? 16 : KIND == 4 ? 8 : KIND == 5 ? 4 : 2; }

// Element c of a word: int8 codes less their offset (CM2_INT), or f16 (bf16 / f16 halves, codes
// as exact small integers).
ET DecodeW(const in WordRef r, const in uint32_t blk[2], const in uint32_t c[2]) {
  const uint w = r.b.w;
  const uint j = c[1];
  int code;
  if (KIND == 3) {
    code = int((w >> (2 * j)) & 3u) - 2;
  } else if (KIND == 4) {
    code = int((w >> (4 * j)) & 15u) - 8;
  } else if (KIND == 5) {
    code = int(w << (24 - 8 * j)) >> 24;
  } else {
#ifndef CM2_INT
    if (KIND == 1) return float16_t(uintBitsToFloat(j == 0 ? w << 16 : w & 0xFFFF0000u));
    return unpackFloat2x16(w)[j];
#endif
    code = 0;
  }
  return ET(code);
}

#define ACC coopmat<ST, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>
#define MA coopmat<ET, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>
#define MB coopmat<ET, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB>

// One weight set's value for (row, token) from its sums, before the epilogue (linear_cm's).
float SetValue(uint d, uint row, uint t, float v, int vi) {
  float r;
  if (DENSE) {
    r = v * intBitsToFloat(part[t]);  // a power of two: exact
  } else if (QD) {
    const float rs = d == 0 ? s0[row] : s1[row];
    r = float(double(v * intBitsToFloat(part[t])) * double(rs));
  } else {
    const float rs = d == 0 ? s0[row] : s1[row];
    r = float(double(vi) * double(d == 0 ? p.in_s0 : p.in_s1) * double(rs));
  }
  const float os = d == 0 ? p.out_s0 : p.out_s1;
  if (os > 0.0) r = Srq(r, os);
  return r;
}

float Finish(uint row, uint t, float v0, float v1) {
  float outv = v0;
  if (EPI == 1) outv = GeluTanh(v0) * v1;
  if (EPI == 2 && p.cap > 0.0) outv = TanhClamped(ExactDiv(v0, p.cap)) * p.cap;
  if (EPI == 3) outv = GeluTanh(v0) * aux[t * p.aux_stride + p.aux_off + row];
  if (OCLAMP == 1) outv = min(max(outv, p.out_lo), p.out_hi);
  return outv;
}

// Per-element epilogues (row / col within the tile; r0 / t0 its origin). Rows or tokens past the
// end are clamped away by the store.
float EpiF(const in uint32_t i, const in uint32_t j, const in float v, const in uint r0,
           const in uint t0) {
  const uint row = r0 + i, t = t0 + j;
  if (row >= p.rows || t >= p.ntok) return 0.0;
  return Finish(row, t, SetValue(0, row, t, v, int(v)), 0.0);
}
float EpiF2(const in uint32_t i, const in uint32_t j, const in float v, const in float v1,
            const in uint r0, const in uint t0) {
  const uint row = r0 + i, t = t0 + j;
  if (row >= p.rows || t >= p.ntok) return 0.0;
  return Finish(row, t, SetValue(0, row, t, v, int(v)), SetValue(1, row, t, v1, int(v1)));
}
int EpiI(const in uint32_t i, const in uint32_t j, const in int v, const in uint r0,
         const in uint t0) {
  const uint row = r0 + i, t = t0 + j;
  if (row >= p.rows || t >= p.ntok) return 0;
  return floatBitsToInt(Finish(row, t, SetValue(0, row, t, float(v), v), 0.0));
}
int EpiI2(const in uint32_t i, const in uint32_t j, const in int v, const in int v1,
          const in uint r0, const in uint t0) {
  const uint row = r0 + i, t = t0 + j;
  if (row >= p.rows || t >= p.ntok) return 0;
  return floatBitsToInt(Finish(row, t, SetValue(0, row, t, float(v), v),
                               SetValue(1, row, t, float(v1), v1)));
}

layout(std430, binding = 3) buffer YI { int yi[]; };

void main() {
  const uint r0 = gl_WorkGroupID.y * BM, t0 = gl_WorkGroupID.x * BN;
  const uint epw = ElemsPerWord();
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> la =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  la = setTensorLayoutBlockSizeNV(la, 1, epw);
  la = setTensorLayoutDimensionNV(la, p.rows, p.cols);
  la = setTensorLayoutStrideNV(la, p.wstride, 1);  // (in blocks: words)
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lb =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  lb = setTensorLayoutDimensionNV(lb, p.ntok, p.cols);
  lb = setTensorLayoutStrideNV(lb, p.xq_ld * 8, 1);
  tensorViewNV<2, false, 1, 0> tr = createTensorViewNV(2, false, 1, 0);

  ACC acc0 = ACC(ST(0));
#if MM_DUAL == 2
  ACC acc1 = ACC(ST(0));
#endif
#ifndef CM2_INT
  ACC tot0 = ACC(0.0);
#if MM_DUAL == 2
  ACC tot1 = ACC(0.0);
#endif
  const uint kt_drain = DRAIN / BK;
#endif
  const uint ktiles = (p.cols + BK - 1) / BK;
  for (uint kt = 0; kt < ktiles; ++kt) {
    const uint k = kt * BK;
    MB xb0;
    coopMatLoadTensorNV(xb0, xq0, 0, sliceTensorLayoutNV(lb, t0, BN, k, BK), tr);
#if MM_DUAL == 2 || !defined(CM2_INT)
    MB xb1;
    coopMatLoadTensorNV(xb1, xq1, 0, sliceTensorLayoutNV(lb, t0, BN, k, BK), tr);
#endif
    MA wa;
    coopMatLoadTensorNV(wa, w0, 0, sliceTensorLayoutNV(la, r0, BM, k, BK), DecodeW);
#ifdef CM2_INT
    acc0 = coopMatMulAdd(wa, xb0, acc0);
#else
    acc0 = coopMatMulAdd(wa, xb0, acc0);
    acc0 = coopMatMulAdd(wa, xb1, acc0);
#endif
#if MM_DUAL == 2
    MA wb;
    coopMatLoadTensorNV(wb, w1, 0, sliceTensorLayoutNV(la, r0, BM, k, BK), DecodeW);
#ifdef CM2_INT
    acc1 = coopMatMulAdd(wb, xb1, acc1);
#else
    acc1 = coopMatMulAdd(wb, xb0, acc1);
    acc1 = coopMatMulAdd(wb, xb1, acc1);
#endif
#endif
#ifndef CM2_INT
    if (kt % kt_drain == kt_drain - 1 || kt + 1 == ktiles) {
      tot0 = tot0 + acc0;
      acc0 = ACC(0.0);
#if MM_DUAL == 2
      tot1 = tot1 + acc1;
      acc1 = ACC(0.0);
#endif
    }
#endif
  }

  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> ly =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  ly = setTensorLayoutDimensionNV(ly, p.ntok, p.y_off + p.rows);
  ly = setTensorLayoutStrideNV(ly, p.y_stride, 1);
  ACC o;
#if defined(CM2_NOEPI)
  // (the lab's probe build: the first set's raw sums stored, no epilogue; results meaningless)
#ifdef CM2_INT
  coopMatStoreTensorNV(acc0, yi, 0, sliceTensorLayoutNV(ly, t0, BN, p.y_off + r0, BM), tr);
#else
  coopMatStoreTensorNV(tot0, y, 0, sliceTensorLayoutNV(ly, t0, BN, p.y_off + r0, BM), tr);
#endif
#elif defined(CM2_INT)
#if MM_DUAL == 2
  coopMatPerElementNV(o, acc0, EpiI2, acc1, r0, t0);
#else
  coopMatPerElementNV(o, acc0, EpiI, r0, t0);
#endif
  coopMatStoreTensorNV(o, yi, 0, sliceTensorLayoutNV(ly, t0, BN, p.y_off + r0, BM), tr);
#else
#if MM_DUAL == 2
  coopMatPerElementNV(o, tot0, EpiF2, tot1, r0, t0);
#else
  coopMatPerElementNV(o, tot0, EpiF, r0, t0);
#endif
  coopMatStoreTensorNV(o, y, 0, sliceTensorLayoutNV(ly, t0, BN, p.y_off + r0, BM), tr);
#endif
}
