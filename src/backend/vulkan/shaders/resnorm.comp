#version 450
// Residual epilogue and RMSNorm, one workgroup per token:
//   if HAS_T 1: h = (h + rmsnorm(t) * wt [* t_scale]) * scale   (sandwich-norm residual,
//               layer_scalar; t_scale: the audio tower's half-step feed-forward residual)
//   if HAS_T 2: h = (h + t) * scale                              (plain residual)
//   if HAS_A:   a = rmsnorm(h) * wa [then SiLU]                  (next linear's input norm)
// rmsnorm(x) = x * pow(mean(x^2) + eps, -0.5), f32 like transformers. The audio tower's clamps
// (flags 1: t, 2: h as the norm of a reads it) at +-clip are applied as the values are read
// (its ref::Clamp before each norm).
// LN 1 (the audio tower's SSCP): h = max(layernorm(h) * wa, 0) in place (LayerNorm over the row's
// n channels, weight, no bias; mean and variance in double, as ref's ConvBlock), nothing else.
// Rows: workgroup x + y * (groups in x).
#extension GL_KHR_shader_subgroup_arithmetic : enable
#extension GL_KHR_shader_subgroup_basic : enable
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint LN = 0;
// FAST_N = n (the host sets it where the one-token steps' norm prologues take RMS_FAST): the RMS
// factors as those prologues compute them (common.glsl RmsFactorConstN), not RmsFactor.
layout(constant_id = 2) const uint FAST_N = 0;
layout(std430, binding = 0) buffer H { float h[]; };
layout(std430, binding = 1) readonly buffer T { float tin[]; };
layout(std430, binding = 2) readonly buffer WT { float wt[]; };
layout(std430, binding = 3) writeonly buffer A { float a[]; };
layout(std430, binding = 4) readonly buffer WA { float wa[]; };

layout(push_constant) uniform P {
  uint n;
  uint has_t, has_a, has_wa;
  float scale, eps;
  uint h_stride, t_stride, a_stride;
  uint h_row0;  // token row of h for workgroup 0 (head: first output row)
  uint flags;   // 1: clamp t, 2: clamp h for a (both at +-clip), 4: SiLU on a, 8: t_scale
  float clip, t_scale;
} p;

const uint WG = gl_WorkGroupSize.x;
shared double red[128];

double BlockSum(double v) {
  double s = subgroupAdd(v);
  if (subgroupElect()) red[gl_SubgroupID] = s;
  barrier();
  double tot = 0.0LF;
  for (uint i = 0; i < gl_NumSubgroups; ++i) tot += red[i];
  barrier();
  return tot;
}

float Factor(double tot) {
  return FAST_N != 0 && p.n == FAST_N ? RmsFactorConstN(tot, FAST_N, p.eps)
                                      : RmsFactor(tot, p.n, p.eps);
}

float TIn(uint i) {
  const float v = tin[i];
  return (p.flags & 1u) != 0u ? min(max(v, -p.clip), p.clip) : v;
}

float HIn(uint i) {
  const float v = h[i];
  return (p.flags & 2u) != 0u ? min(max(v, -p.clip), p.clip) : v;
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  const uint hb = (row + p.h_row0) * p.h_stride;
  if (LN == 1) {
    double s = 0.0LF;
    for (uint i = tid; i < p.n; i += WG) s += double(h[hb + i]);
    const double mean = BlockSum(s) / double(p.n);
    double ss = 0.0LF;
    for (uint i = tid; i < p.n; i += WG) {
      const double d = double(h[hb + i]) - mean;
      ss = fma(d, d, ss);
    }
    const double inv = 1.0LF / sqrt(BlockSum(ss) / double(p.n) + double(p.eps));
    for (uint i = tid; i < p.n; i += WG) {
      precise float y = float((double(h[hb + i]) - mean) * inv) * wa[i];
      h[hb + i] = max(y, 0.0);
    }
    return;
  }
  if (p.n <= 8 * WG) {
    // Rows of up to 8 WG values: every operand loaded into registers at once (one memory round
    // trip instead of one per pass), then the passes below on the registers: the same operations
    // in the same order, the same results.
    const uint tb = row * p.t_stride, ab = row * p.a_stride;
    float tv[8], hv[8], wtv[8], wav[8];
    [[unroll]] for (uint u = 0; u < 8; ++u) {
      const uint i = tid + u * WG;
      tv[u] = 0.0;
      hv[u] = 0.0;
      wtv[u] = 0.0;
      wav[u] = 0.0;
      if (i < p.n) {
        if (p.has_t != 0) tv[u] = p.has_t == 1 ? TIn(tb + i) : tin[tb + i];
        if (p.has_t == 1) wtv[u] = wt[i];
        hv[u] = h[hb + i];
        if (p.has_a != 0 && p.has_wa != 0) wav[u] = wa[i];
      }
    }
    if (p.has_t != 0) {
      float r = 1.0;
      if (p.has_t == 1) {
        double ss = 0.0LF;
        [[unroll]] for (uint u = 0; u < 8; ++u)
          if (tid + u * WG < p.n) ss = fma(double(tv[u]), double(tv[u]), ss);
        r = Factor(BlockSum(ss));
      }
      [[unroll]] for (uint u = 0; u < 8; ++u) {
        const uint i = tid + u * WG;
        if (i >= p.n) continue;
        precise float v = p.has_t == 1 ? (tv[u] * r) * wtv[u] : tv[u];
        if ((p.flags & 8u) != 0u) v = v * p.t_scale;
        precise float o = (hv[u] + v) * p.scale;
        hv[u] = o;
        h[hb + i] = o;
      }
    }
    if (p.has_a != 0) {
      float hc[8];
      double ss = 0.0LF;
      [[unroll]] for (uint u = 0; u < 8; ++u) {
        hc[u] = (p.flags & 2u) != 0u ? min(max(hv[u], -p.clip), p.clip) : hv[u];
        if (tid + u * WG < p.n) ss = fma(double(hc[u]), double(hc[u]), ss);
      }
      const float r = Factor(BlockSum(ss));
      [[unroll]] for (uint u = 0; u < 8; ++u) {
        const uint i = tid + u * WG;
        if (i >= p.n) continue;
        precise float v = hc[u] * r;
        precise float o = p.has_wa != 0 ? v * wav[u] : v;
        if ((p.flags & 4u) != 0u) {
          precise float s = o / (1.0 + exp(-o));
          o = s;
        }
        a[ab + i] = o;
      }
    }
    return;
  }
  if (p.has_t != 0) {
    const uint tb = row * p.t_stride;
    float r = 1.0;
    if (p.has_t == 1) {
      double ss = 0.0LF;
      for (uint i = tid; i < p.n; i += WG) ss = fma(double(TIn(tb + i)), double(TIn(tb + i)), ss);
      r = Factor(BlockSum(ss));
    }
    for (uint i = tid; i < p.n; i += WG) {
      precise float v = p.has_t == 1 ? (TIn(tb + i) * r) * wt[i] : tin[tb + i];
      if ((p.flags & 8u) != 0u) v = v * p.t_scale;
      precise float o = (h[hb + i] + v) * p.scale;
      h[hb + i] = o;
    }
  }
  if (p.has_a != 0) {
    double ss = 0.0LF;
    for (uint i = tid; i < p.n; i += WG) ss = fma(double(HIn(hb + i)), double(HIn(hb + i)), ss);
    const float r = Factor(BlockSum(ss));
    const uint ab = row * p.a_stride;
    for (uint i = tid; i < p.n; i += WG) {
      precise float v = HIn(hb + i) * r;
      precise float o = p.has_wa != 0 ? v * wa[i] : v;
      if ((p.flags & 4u) != 0u) {
        precise float s = o / (1.0 + exp(-o));
        o = s;
      }
      a[ab + i] = o;
    }
  }
}
