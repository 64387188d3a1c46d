#version 450
// Per-head q/k/v post-processing, workgroup (head slot, token):
//   slots [0, nh): q = rope(rmsnorm(q) * q_norm), in place
//   slots [nh, nh + nkv): k = rope(rmsnorm(k) * k_norm) -> K cache ring row (pos % ring)
//   (ROWS: ring 0 in the push constants takes the row's sliding ring, else its capacity)
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
#ifdef ROWS
// A batched step's rows (ROWS): token t is row t of its own context, whose K / V caches are
// set 1's t-th entries and whose position and ring lengths are its row record (binding 12, 64
// words each: position, 1, 0, 0, the sliding ring, the capacity).
layout(std430, set = 1, binding = 0) writeonly buffer KCA { float kc[]; } kca[ROWS];
layout(std430, set = 1, binding = 1) writeonly buffer VCA { float vc[]; } vca[ROWS];
layout(std430, binding = 12) readonly buffer RowSteps { uint rsteps[]; };
#define KC_AT(i) kca[t_].kc[i]
#define VC_AT(i) vca[t_].vc[i]
#else
layout(std430, binding = 5) writeonly buffer KC { float kc[]; };
layout(std430, binding = 6) writeonly buffer VC { float vc[]; };
#define KC_AT(i) kc[i]
#define VC_AT(i) vc[i]
#endif
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

uint t_, head_, crow_;  // the workgroup's token, head and cache row offset (for the macros)
#define NR_LOAD(kind, i)                                                        \
  ((kind) == 0   ? q[t_ * p.q_stride + head_ * p.hd + (i)]                      \
   : (kind) == 1 ? kt[t_ * p.kv_stride + head_ * p.hd + (i)]                    \
                 : vt[t_ * p.kv_stride + head_ * p.hd + (i)])
#define NR_WEIGHT(kind, i, v) ((kind) == 0 ? (v) * qn[i] : (kind) == 1 ? (v) * kn[i] : (v))
#define NR_STORE(kind, i, o)                                              \
  if ((kind) == 0) q[t_ * p.q_stride + head_ * p.hd + (i)] = (o);          \
  else if ((kind) == 1) KC_AT(crow_ + (i)) = (o);                          \
  else VC_AT(crow_ + (i)) = (o)
#include "norm_rope.glsl"

void main() {
  const uint slot = gl_WorkGroupID.x;
  t_ = gl_WorkGroupID.y;
#ifdef ROWS
  const uint pos = rsteps[t_ * 64];
  const uint ring = rsteps[t_ * 64 + (p.ring == 0 ? 4 : 5)];
#else
  const uint pos = step.pos0 + t_;
  const uint ring = p.ring;
#endif
  uint kind;  // 0 q, 1 k, 2 v
  if (slot < p.nh) { kind = 0; head_ = slot; }
  else if (slot < p.nh + p.nkv) { kind = 1; head_ = slot - p.nh; }
  else { kind = 2; head_ = slot - p.nh - p.nkv; }
  crow_ = (pos % ring) * (p.nkv * p.hd) + head_ * p.hd;
  NormRopeHead(kind, p.hd, p.rot, p.eps, pos);
}
