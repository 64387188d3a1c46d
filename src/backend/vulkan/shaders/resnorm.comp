#version 450
// Residual epilogue and RMSNorm, one workgroup per token:
//   if HAS_T: h = (h + rmsnorm(t) * wt) * scale      (sandwich-norm residual, layer_scalar)
//   if HAS_A: a = rmsnorm(h) * wa                      (next linear's input norm)
// rmsnorm(x) = x * pow(mean(x^2) + eps, -0.5), f32 like transformers.
#extension GL_KHR_shader_subgroup_arithmetic : enable
#extension GL_KHR_shader_subgroup_basic : enable
#include "common.glsl"

layout(local_size_x_id = 0) in;
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

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint row = gl_WorkGroupID.x;
  const uint hb = (row + p.h_row0) * p.h_stride;
  if (p.has_t != 0) {
    const uint tb = row * p.t_stride;
    double ss = 0.0LF;
    for (uint i = tid; i < p.n; i += WG) ss = fma(double(tin[tb + i]), double(tin[tb + i]), ss);
    const float r = RmsFactor(BlockSum(ss), p.n, p.eps);
    for (uint i = tid; i < p.n; i += WG) {
      precise float v = (tin[tb + i] * r) * wt[i];
      precise float o = (h[hb + i] + v) * p.scale;
      h[hb + i] = o;
    }
  }
  if (p.has_a != 0) {
    double ss = 0.0LF;
    for (uint i = tid; i < p.n; i += WG) ss = fma(double(h[hb + i]), double(h[hb + i]), ss);
    const float r = RmsFactor(BlockSum(ss), p.n, p.eps);
    const uint ab = row * p.a_stride;
    for (uint i = tid; i < p.n; i += WG) {
      precise float v = h[hb + i] * r;
      precise float o = p.has_wa != 0 ? v * wa[i] : v;
      a[ab + i] = o;
    }
  }
}
