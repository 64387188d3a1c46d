#version 450
#extension GL_EXT_control_flow_attributes : require
// The vision tower's per-head steps after the q/k/v linears (vulkan_tower.cc's resident image
// path), in place: q heads RMSNorm with q_norm's weight, k heads with k_norm's, v heads without a
// weight (ref::VisionTowerForward); then 2D RoPE on q and k: the first half of a head rotates by
// the patch's column, the second by its row, each half pairing i with i + HD / 4. cos / sin come
// from the host (cs[pos][i], computed as ref::ApplyRope computes them), so only the rotation's
// products and sums are the device's.
// A head row (token, slot: slots 0 .. NH - 1 are q's heads, then NKV of k, then NKV of v) is HD
// invocations, one per dimension; a workgroup holds ROWS of them (local size HD x ROWS). The sum of
// squares is in double, in dimension order (one invocation adds the row's squares, as the
// reference's loop does).
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint HD = 64;   // head dim (a multiple of 4, at most 128)
layout(constant_id = 2) const uint ROWS = 4;  // head rows per workgroup

layout(std430, binding = 0) buffer Q { float q[]; };
layout(std430, binding = 1) buffer K { float k[]; };
layout(std430, binding = 2) buffer V { float v[]; };
layout(std430, binding = 3) readonly buffer QN { float qn[]; };
layout(std430, binding = 4) readonly buffer KN { float kn[]; };
layout(std430, binding = 5) readonly buffer CS { vec2 cs[]; };  // [position][HD / 4]

layout(push_constant) uniform P {
  uint n;    // tokens
  uint nh;   // q heads
  uint nkv;  // k / v heads
  uint pw;   // patches per row (token t is at column t % pw, row t / pw)
  float eps;
  uint has_qn, has_kn;  // (a missing norm weight is the identity)
} p;

shared double sq[ROWS * HD];
shared float xs[ROWS * HD];
shared float factor[ROWS];

void main() {
  const uint r = gl_LocalInvocationID.x / HD, d = gl_LocalInvocationID.x % HD;
  const uint slots = p.nh + 2u * p.nkv;
  const uint row = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * ROWS + r;
  const bool live = row < p.n * slots;
  const uint t = live ? row / slots : 0u, s = live ? row % slots : 0u;
  const uint kind = s < p.nh ? 0u : s < p.nh + p.nkv ? 1u : 2u;  // q, k, v
  const uint base = kind == 0u ? (t * p.nh + s) * HD
                  : kind == 1u ? (t * p.nkv + s - p.nh) * HD
                               : (t * p.nkv + s - p.nh - p.nkv) * HD;
  float x = 0.0;
  if (live) x = kind == 0u ? q[base + d] : kind == 1u ? k[base + d] : v[base + d];
  sq[r * HD + d] = double(x) * double(x);
  barrier();
  if (d == 0u) {
    double ss = 0.0LF;
    for (uint i = 0; i < HD; ++i) ss += sq[r * HD + i];
    factor[r] = RmsFactor(ss, HD, p.eps);
  }
  barrier();
  const bool weighted = kind == 0u ? p.has_qn != 0u : kind == 1u ? p.has_kn != 0u : false;
  precise float y = x * factor[r];
  if (weighted) y = y * (kind == 0u ? qn[d] : kn[d]);
  xs[r * HD + d] = y;
  barrier();
  if (kind != 2u) {
    const uint Q4 = HD / 4u, half_ = d / (HD / 2u), i = d % (HD / 2u);
    const uint pos = half_ == 0u ? t % p.pw : t / p.pw;
    const vec2 c = cs[pos * Q4 + i % Q4];
    const uint off = r * HD + half_ * (HD / 2u);
    if (i < Q4) {
      const float a = xs[off + i], b = xs[off + i + Q4];
      precise float o = a * c.x + (-b) * c.y;
      y = o;
    } else {
      const float a = xs[off + i - Q4], b = xs[off + i];
      precise float o = b * c.x + a * c.y;
      y = o;
    }
  }
  if (!live) return;
  if (kind == 0u) q[base + d] = y;
  else if (kind == 1u) k[base + d] = y;
  else v[base + d] = y;
}
