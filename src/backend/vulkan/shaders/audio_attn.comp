#version 450
// The audio tower's local self-attention (vulkan_tower's resident audio path; ref's audio_ops.cc
// Attention): query i of head h sees the keys i - d for 0 <= d < min(W, i + 1), logit
// s = q'.k'[i - d] + q'.R[d] with q' = (q q_scale) softplus(per_dim_scale) and k' = k k_scale
// (f32, element by element), R the relative-position keys [W + 1][D]; TanhF(s / cap) cap, then
// the softmax in double (ExpD), weights rounded to f32, values summed in double. The dot products
// are f32 sums in element order (the reference's are double). q, k, v, out [n][D], D = heads * HD.
// One workgroup of 64 per (head, query): invocation d the logit of key d (W <= 64), then
// invocation e the output elements e, e + 64, ... Grid: (heads, queries).
#include "common.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };
layout(std430, binding = 4) readonly buffer R { float rk[]; };
layout(std430, binding = 5) readonly buffer SP { float sp[]; };  // softplus(per_dim_scale) [HD]

layout(push_constant) uniform P {
  uint D, hd, W;
  float q_scale, k_scale, cap;
} p;

const uint HDMAX = 256, WMAX = 64;
shared float qs[HDMAX];
shared float pw[WMAX];
shared double ex[WMAX];
shared double tot;

void main() {
  const uint tid = gl_LocalInvocationID.x, h = gl_WorkGroupID.x, i = gl_WorkGroupID.y;
  const uint keys = min(p.W, i + 1u), base = h * p.hd;
  for (uint e = tid; e < p.hd; e += 64u) {
    precise float s = (q[i * p.D + base + e] * p.q_scale) * sp[e];
    qs[e] = s;
  }
  barrier();
  float logit = 0.0;
  if (tid < keys) {
    const uint kb = (i - tid) * p.D + base, rb = tid * p.D + base;
    float ac = 0.0, bd = 0.0;
    for (uint e = 0; e < p.hd; ++e) {
      precise float kv = k[kb + e] * p.k_scale;
      ac = fma(qs[e], kv, ac);
      bd = fma(qs[e], rk[rb + e], bd);
    }
    precise float s = ac + bd;
    precise float c = TanhF(s / p.cap) * p.cap;
    logit = c;
    pw[tid] = c;
  }
  barrier();
  if (tid < keys) {
    float mx = pw[0];
    for (uint d = 1; d < keys; ++d) mx = max(mx, pw[d]);
    ex[tid] = ExpD(double(logit) - double(mx));
  }
  barrier();
  if (tid == 0) {
    double s = 0.0LF;
    for (uint d = 0; d < keys; ++d) s += ex[d];
    tot = s;
  }
  barrier();
  if (tid < keys) pw[tid] = float(ex[tid] / tot);
  barrier();
  for (uint e = tid; e < p.hd; e += 64u) {
    double acc = 0.0LF;
    for (uint d = 0; d < keys; ++d) acc += double(pw[d]) * double(v[(i - d) * p.D + base + e]);
    o[i * p.D + base + e] = float(acc);
  }
}
