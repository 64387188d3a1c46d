#version 450
// Per-head q/k/v post-processing, workgroup (head slot, token):
//   slots [0, nh): q = rope(rmsnorm(q) * q_norm), in place
//   slots [nh, nh + nkv): k = rope(rmsnorm(k) * k_norm) -> K cache ring row (pos % ring)
//   slots [nh + nkv, nh + 2 nkv): v = rmsnorm(v) (no weight) -> V cache ring row
// RoPE: half-split pairs (i, i + hd/2); cos/sin come from a host-computed table [pos][rot] of the
// rotated frequencies (rot = hd/2 for default RoPE, fewer for proportional; the rest pass through).
#extension GL_KHR_shader_subgroup_arithmetic : enable
#extension GL_KHR_shader_subgroup_basic : enable
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(std430, binding = 0) buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer KT { float kt[]; };
layout(std430, binding = 2) readonly buffer VT { float vt[]; };
layout(std430, binding = 3) readonly buffer QN { float qn[]; };
layout(std430, binding = 4) readonly buffer KN { float kn[]; };
layout(std430, binding = 5) writeonly buffer KC { float kc[]; };
layout(std430, binding = 6) writeonly buffer VC { float vc[]; };
layout(std430, binding = 7) readonly buffer Rope { vec2 rope[]; };

layout(push_constant) uniform P {
  uint nh, nkv, hd, ring, rot;
  float eps;
  uint q_stride, kv_stride;
} p;

const uint WG = gl_WorkGroupSize.x;
shared double red[128];
shared float xs[512];

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
  const uint slot = gl_WorkGroupID.x;
  const uint t = gl_WorkGroupID.y;
  const uint pos = step.pos0 + t;
  const uint hd = p.hd;
  uint kind;  // 0 q, 1 k, 2 v
  uint head;
  if (slot < p.nh) { kind = 0; head = slot; }
  else if (slot < p.nh + p.nkv) { kind = 1; head = slot - p.nh; }
  else { kind = 2; head = slot - p.nh - p.nkv; }
  double ss = 0.0LF;
  for (uint i = tid; i < hd; i += WG) {
    float v = kind == 0 ? q[t * p.q_stride + head * hd + i]
            : kind == 1 ? kt[t * p.kv_stride + head * hd + i]
                        : vt[t * p.kv_stride + head * hd + i];
    xs[i] = v;
    ss = fma(double(v), double(v), ss);
  }
  const float r = RmsFactor(BlockSum(ss), hd, p.eps);
  barrier();
  for (uint i = tid; i < hd; i += WG) {
    precise float v = xs[i] * r;
    if (kind == 0) v = v * qn[i];
    if (kind == 1) v = v * kn[i];
    xs[i] = v;
  }
  barrier();
  const uint half_d = hd / 2;
  const uint crow = (pos % p.ring) * (p.nkv * hd) + head * hd;
  for (uint i = tid; i < hd; i += WG) {
    precise float o = xs[i];
    if (kind != 2) {
      const uint k = i < half_d ? i : i - half_d;
      if (k < p.rot) {
        const vec2 cs = rope[pos * p.rot + k];
        if (i < half_d) {
          o = xs[i] * cs.x + (-xs[i + half_d]) * cs.y;
        } else {
          o = xs[i] * cs.x + xs[i - half_d] * cs.y;
        }
      }
    }
    if (kind == 0) q[t * p.q_stride + head * hd + i] = o;
    else if (kind == 1) kc[crow + i] = o;
    else vc[crow + i] = o;
  }
}
