#version 450
#extension GL_EXT_control_flow_attributes : require
// Inputs of the dense (bf16 / f16) matrix-unit linears (linear_cm.comp, KIND 1 / 2): each token's
// f32 row scaled by a power of two 2^e (its largest magnitude into [2^14, 2^15), so nothing
// overflows f16's 65504 and the small values keep their bits) and split into two f16 terms, hi =
// x 2^e rounded to 11 significant bits and lo = f16(x 2^e - hi) (the difference is exact in f32),
// ~22 significant bits together; xh[t][g] / xl[t][g] hold columns 8g .. 8g + 7 (zero past `cols`,
// up to `ld` vectors) and ts[t] = 2^-e, which linear_cm multiplies into its f32 sums. One
// workgroup per token.
// QROWS 1 (attention_cm.comp's queries): one workgroup per (token, head) row of q, x_stride the
// token stride, cols the head dim; rows written in [K/V head][token][query head of the group]
// order (row ((h / group) m + t) group + h % group), each scaled by its own power of two.
layout(local_size_x = 256) in;
layout(constant_id = 1) const uint QROWS = 0;
// CLAMP 1 (the vision tower's clippable linears, QROWS 0): x clamped to [lo, hi] as it is read.
layout(constant_id = 2) const uint CLAMP = 0;
layout(std430, binding = 2) readonly buffer X { float x[]; };
layout(std430, binding = 3) writeonly buffer XH { uvec4 xh[]; };
layout(std430, binding = 4) writeonly buffer XL { uvec4 xl[]; };
layout(std430, binding = 9) writeonly buffer TS { float ts[]; };

layout(push_constant) uniform P {
  uint cols, x_stride, x_row0, ld;  // ld: uvec4 per token row of xh / xl
  uint nh, group, m;                 // QROWS: heads, query heads per K/V head, tokens
  float lo, hi;                      // CLAMP
} p;

float XIn(uint i) {
  const float v = x[i];
  return CLAMP == 1 ? min(max(v, p.lo), p.hi) : v;
}

shared float red[256];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  uint t = gl_WorkGroupID.y, xb = (t + p.x_row0) * p.x_stride;
  if (QROWS == 1) {
    const uint tok = gl_WorkGroupID.y / p.nh, h = gl_WorkGroupID.y % p.nh;
    xb = tok * p.x_stride + h * p.cols;
    t = ((h / p.group) * p.m + tok) * p.group + h % p.group;
  }
  float m = 0.0;
  for (uint c = tid; c < p.cols; c += 256) m = max(m, abs(XIn(xb + c)));
  red[tid] = m;
  barrier();
  for (uint n = 128; n > 0; n >>= 1) {
    if (tid < n) red[tid] = max(red[tid], red[tid + n]);
    barrier();
  }
  m = red[0];
  // m = f 2^E with f in [0.5, 1): m 2^(15 - E) lies in [2^14, 2^15). Zero, infinite or NaN rows
  // keep e = 0 (they pass through as f16 converts them); the clamp keeps 2^e a normal f32.
  int e = 0;
  if (m > 0.0 && !isinf(m) && !isnan(m)) {
    int E;
    frexp(m, E);
    e = clamp(15 - E, -120, 120);
  }
  const float s = ldexp(1.0, e);
  if (tid == 0) ts[t] = ldexp(1.0, -e);
  for (uint g = tid; g < p.ld; g += 256) {
    uvec4 hv, lv;
    [[unroll]] for (uint q = 0; q < 4; ++q) {
      const uint ca = 8 * g + 2 * q, cb = ca + 1;
      const vec2 v =
          vec2(ca < p.cols ? XIn(xb + ca) * s : 0.0, cb < p.cols ? XIn(xb + cb) * s : 0.0);
      // hi: v rounded to 11 significant bits by integer operations (an f16 value wherever v is
      // in f16's normal range; lo taken as v - unpackHalf2x16(packHalf2x16(v)) contributed
      // nothing on the H200's driver)
      const vec2 hi = uintBitsToFloat((floatBitsToUint(v) + 0x1000u) & 0xFFFFE000u);
      hv[q] = packHalf2x16(hi);
      lv[q] = packHalf2x16(v - hi);
    }
    xh[t * p.ld + g] = hv;
    xl[t * p.ld + g] = lv;
  }
}
