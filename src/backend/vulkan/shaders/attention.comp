#version 450
// Causal (optionally sliding) attention over the ring caches, split over the keys:
// workgroup (head, token, split) computes, for its share of keys j in [first, pos],
//   m = max_j s_j, l = sum_j exp(s_j - m), o = sum_j exp(s_j - m) V_j,   s_j = q . K_j (scale 1)
// (attn_split.glsl); attn_combine.comp merges the splits (or, COMBINE 1, the last split workgroup
// of each head).
// Scores, weights and sums are double, as in the CPU reference. K/V rows live at (j % ring);
// KV-shared layers bind their owner's caches.
#extension GL_KHR_shader_subgroup_shuffle : enable
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
// ROPE 1 (attention_rope, one-token steps, GEMMA_VULKAN_FUSE_ROPE=1): qkrope.comp's work done here
// instead of a dispatch before: binding 0 holds the raw q; every workgroup normalizes and rotates
// its head's q into shared memory; the workgroups whose split holds the new position first write
// that position's normalized, rotated K and normalized V rows (raw at bindings 5, 6) into the
// caches (all query heads of a K/V head write the same values). Same arithmetic as qkrope.comp.
#ifndef ROPE
#define ROPE 0
#endif
#include "common.glsl"
#define PROBE_BINDING 10
#include "probe.glsl"

layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
#if ROPE
layout(std430, binding = 1) coherent buffer KC { float kc[]; };
layout(std430, binding = 2) coherent buffer VC { float vc[]; };
layout(std430, binding = 5) readonly buffer KT { float kt[]; };
layout(std430, binding = 6) readonly buffer VT { float vt[]; };
layout(std430, binding = 7) readonly buffer QN { float qn[]; };
layout(std430, binding = 8) readonly buffer KN { float kn[]; };
layout(std430, binding = 9) readonly buffer Rope { vec2 rope[]; };
#else
layout(std430, binding = 1) readonly buffer KC { float kc[]; };
layout(std430, binding = 2) readonly buffer VC { float vc[]; };
#endif
layout(std430, binding = 3) coherent buffer PO { double po[]; };   // [t][h][split][hd]
layout(std430, binding = 4) coherent buffer PML { dvec2 pml[]; };  // [t][h][split]
// COMBINE 1 (not with ROPE): the last split workgroup of each (token, head) to finish merges the
// splits (attn_combine.comp's arithmetic) into binding 5, counting arrivals in binding 6 (zero
// between steps; the merging workgroup resets its counter), instead of a dispatch after.
layout(constant_id = 1) const uint COMBINE = 0;
#if !ROPE
layout(std430, binding = 5) writeonly buffer O { float o[]; };
layout(std430, binding = 6) coherent buffer Cnt { uint cnt[]; };
#endif

layout(push_constant) uniform P {
  uint nh, nkv, hd, ring, window, splits;
  uint q_stride;
  uint rot, kv_stride, has_kn, kv_new;  // ROPE; kv_new 0: a KV-shared layer (no new K/V)
  float eps;
} p;

const uint WG = gl_WorkGroupSize.x;
shared float qs[512];
shared bool last_split;
#define ATT_QS(i) qs[i]
#define ATT_K(i) kc[i]
#define ATT_V(i) vc[i]
#define ATT_PROBES
uint att_qbase;  // q's index (ROPE: staged before AttnSplit, by NormRope)
#if ROPE
#define ATT_STAGE_Q()
#else
#define ATT_STAGE_Q()                                                        \
  for (uint i = gl_LocalInvocationID.x; i < hd; i += WG) qs[i] = q[att_qbase + i]; \
  barrier()
#endif
layout(constant_id = 2) const uint DBG = 0;
// ADAPT 1 (GEMMA_VULKAN_SPLITS_ADAPT=1): each split's key count is a multiple of the block size
// (whole blocks), so at short contexts only the leading splits have keys and at long contexts
// every split runs as few blocks as the grid allows.
layout(constant_id = 3) const uint ADAPT = 0;
#define ATT_DBG DBG
#include "attn_split.glsl"
#if !ROPE
#include "combine.glsl"
#endif
#if ROPE
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

// qkrope.comp's work for one head: kind 0 (q -> qs), 1 (k -> K cache row), 2 (v -> V row).
uint nr_head, nr_crow;
#define NR_LOAD(kind, i)                                                     \
  ((kind) == 0 ? q[nr_head * p.hd + (i)] : (kind) == 1 ? kt[nr_head * p.hd + (i)] \
                                                       : vt[nr_head * p.hd + (i)])
#define NR_WEIGHT(kind, i, v) \
  ((kind) == 0 ? (v) * qn[i] : (kind) == 1 && p.has_kn != 0 ? (v) * kn[i] : (v))
#define NR_STORE(kind, i, o)                  \
  if ((kind) == 0) qs[i] = (o);               \
  else if ((kind) == 1) kc[nr_crow + (i)] = (o); \
  else vc[nr_crow + (i)] = (o)
#include "norm_rope.glsl"

void NormRope(uint kind, uint head, uint pos) {
  nr_head = head;
  nr_crow = (pos % p.ring) * (p.nkv * p.hd) + head * p.hd;
  NormRopeHead(kind, p.hd, p.rot, p.eps, pos);
  barrier();
}
#endif

void main() {
  Probe(0);
  const uint tid = gl_LocalInvocationID.x;
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, sp = gl_WorkGroupID.z;
  const uint hd = p.hd;
  const uint pos = step.pos0 + t;
  const uint first = (p.window > 0 && pos + 1 > p.window) ? pos + 1 - p.window : 0;
  const uint nkeys = pos + 1 - first;
  const uint per = ADAPT != 0 ? ATT_KPB * ((nkeys + ATT_KPB * p.splits - 1) / (ATT_KPB * p.splits))
                             : (nkeys + p.splits - 1) / p.splits;
  const uint jb = first + sp * per;
  const uint je = min(pos + 1, jb + per);
  const uint kvh = h / (p.nh / p.nkv);
  const uint width = p.nkv * hd;
#if ROPE
  // One token (t = 0): this head's q; the new K/V row where this split reads it.
  NormRope(0, h, pos);
  if (p.kv_new != 0 && je == pos + 1 && jb < je) {
    NormRope(1, kvh, pos);
    NormRope(2, kvh, pos);
    memoryBarrierBuffer();
    barrier();
  }
#else
  att_qbase = t * p.q_stride + h * hd;  // staged inside AttnSplit, after the first loads
#endif
  Probe(1);
  double m, l, acc0, acc1;
  AttnSplit(kvh * hd, kvh * hd, jb, je, p.ring, width, hd, m, l, acc0, acc1);
  Probe(5);  // every block
  const uint ob = ((t * p.nh + h) * p.splits + sp);
  if (tid < hd) po[ob * hd + tid] = acc0;
  if (tid + WG < hd) po[ob * hd + tid + WG] = acc1;
  if (tid == 0) pml[ob] = dvec2(m, l);
  Probe(6);
#if !ROPE
  if (COMBINE != 0) {
    memoryBarrierBuffer();
    barrier();
    if (tid == 0) last_split = atomicAdd(cnt[t * p.nh + h], 1u) == p.splits - 1;
    barrier();
    if (last_split) {
      memoryBarrierBuffer();
      CombineHead((t * p.nh + h) * p.splits, p.splits, hd, t * p.q_stride + h * hd);
      if (tid == 0) cnt[t * p.nh + h] = 0;
    }
  }
#endif
  Probe(7);
}
