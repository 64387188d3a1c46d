#version 450
#extension GL_EXT_control_flow_attributes : require
// The vision tower's per-head steps after the q/k/v linears (vulkan_tower.cc's resident image
// path), in place: q heads RMSNorm with q_norm's weight, k heads with k_norm's, v heads without a
// weight (ref::VisionTowerForward); then 2D RoPE on q and k: the first half of a head rotates by
// the patch's column, the second by its row, each half pairing i with i + HD / 4. cos / sin come
// from the host (cs[pos][i], computed as ref::ApplyRope computes them), so only the rotation's
// products and sums are the device's. One invocation per (token, head slot): slots 0 .. NH - 1
// are q's heads, then NKV of k, then NKV of v.
#include "common.glsl"

layout(local_size_x = 64) in;
layout(constant_id = 1) const uint HD = 64;  // head dim (a multiple of 4, at most 128)

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

void main() {
  const uint slots = p.nh + 2u * p.nkv;
  const uint gid = gl_GlobalInvocationID.x;
  if (gid >= p.n * slots) return;
  const uint t = gid / slots, s = gid % slots;
  const uint kind = s < p.nh ? 0u : s < p.nh + p.nkv ? 1u : 2u;  // q, k, v
  const uint base = kind == 0u ? (t * p.nh + s) * HD
                  : kind == 1u ? (t * p.nkv + s - p.nh) * HD
                               : (t * p.nkv + s - p.nh - p.nkv) * HD;
  float x[HD];
  [[unroll]] for (uint d = 0; d < HD; ++d)
    x[d] = kind == 0u ? q[base + d] : kind == 1u ? k[base + d] : v[base + d];
  double ss = 0.0LF;
  [[unroll]] for (uint d = 0; d < HD; ++d) ss = fma(double(x[d]), double(x[d]), ss);
  const float r = RmsFactor(ss, HD, p.eps);
  const bool weighted = kind == 0u ? p.has_qn != 0u : kind == 1u ? p.has_kn != 0u : false;
  [[unroll]] for (uint d = 0; d < HD; ++d) {
    precise float y = x[d] * r;
    if (weighted) y = y * (kind == 0u ? qn[d] : kn[d]);
    x[d] = y;
  }
  if (kind != 2u) {
    const uint Q4 = HD / 4u;
    [[unroll]] for (uint half_ = 0; half_ < 2u; ++half_) {
      const uint pos = half_ == 0u ? t % p.pw : t / p.pw;
      const uint off = half_ * (HD / 2u);
      [[unroll]] for (uint i = 0; i < Q4; ++i) {
        const vec2 c = cs[pos * Q4 + i];
        const float a = x[off + i], b = x[off + i + Q4];
        precise float o1 = a * c.x + (-b) * c.y;
        precise float o2 = b * c.x + a * c.y;
        x[off + i] = o1;
        x[off + i + Q4] = o2;
      }
    }
  }
  [[unroll]] for (uint d = 0; d < HD; ++d) {
    if (kind == 0u) q[base + d] = x[d];
    else if (kind == 1u) k[base + d] = x[d];
    else v[base + d] = x[d];
  }
}
