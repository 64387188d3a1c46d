#version 450
// Per-layer inputs, workgroup (layer, token), in place on the projection output y = W_plmp x0:
//   ple = (rmsnorm(y * proj_scale) * w + tok) * input_scale     over each layer's P-chunk.
#extension GL_KHR_shader_subgroup_arithmetic : enable
#extension GL_KHR_shader_subgroup_basic : enable
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(std430, binding = 0) buffer Y { float y[]; };
layout(std430, binding = 1) readonly buffer Tok { float tok[]; };
layout(std430, binding = 2) readonly buffer Wn { float wn[]; };

layout(push_constant) uniform P {
  uint pdim, stride;
  float proj_scale, input_scale, eps;
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
  const uint l = gl_WorkGroupID.x, t = gl_WorkGroupID.y;
  const uint b = t * p.stride + l * p.pdim;
  double ss = 0.0LF;
  for (uint i = tid; i < p.pdim; i += WG) {
    precise float v = y[b + i] * p.proj_scale;
    ss = fma(double(v), double(v), ss);
  }
  const float r = RmsFactor(BlockSum(ss), p.pdim, p.eps);
  barrier();
  for (uint i = tid; i < p.pdim; i += WG) {
    precise float v = ((y[b + i] * p.proj_scale) * r) * wn[i];
    precise float o = (v + tok[b + i]) * p.input_scale;
    y[b + i] = o;
  }
}
