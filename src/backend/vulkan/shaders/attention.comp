#version 450
// Causal (optionally sliding) attention over the ring caches, split over the keys:
// workgroup (head, token, split) computes, for its share of keys j in [first, pos],
//   m = max_j s_j, l = sum_j exp(s_j - m), o = sum_j exp(s_j - m) V_j,   s_j = q . K_j (scale 1)
// (attn_split.glsl); attn_combine.comp merges the splits.
// Scores, weights and sums are double, as in the CPU reference. K/V rows live at (j % ring);
// KV-shared layers bind their owner's caches.
#extension GL_KHR_shader_subgroup_shuffle : enable
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
#include "common.glsl"
#define PROBE_BINDING 10
#include "probe.glsl"

layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
#ifdef ROWS
// A batched step's rows (ROWS, as qkrope.comp's): token t's K / V caches are set 1's t-th entries,
// its position and ring length in its row record (binding 12).
layout(std430, set = 1, binding = 0) readonly buffer KCA { float kc[]; } kca[ROWS];
layout(std430, set = 1, binding = 1) readonly buffer VCA { float vc[]; } vca[ROWS];
layout(std430, binding = 12) readonly buffer RowSteps { uint rsteps[]; };
uint att_row;
#else
layout(std430, binding = 1) readonly buffer KC { float kc[]; };
layout(std430, binding = 2) readonly buffer VC { float vc[]; };
#endif
layout(std430, binding = 3) writeonly buffer PO { double po[]; };   // [t][h][split][hd]
layout(std430, binding = 4) writeonly buffer PML { dvec2 pml[]; };  // [t][h][split]

layout(push_constant) uniform P {
  uint nh, nkv, hd, ring, window, splits;
  uint q_stride;
  uint rot, kv_stride, has_kn, kv_new;  // (unused here: AttnPush's attn_fused fields)
  float eps;
} p;

const uint WG = gl_WorkGroupSize.x;
shared float qs[512];
#define ATT_QS(i) qs[i]
#ifdef ROWS
#define ATT_K(i) kca[att_row].kc[i]
#define ATT_V(i) vca[att_row].vc[i]
#else
#define ATT_K(i) kc[i]
#define ATT_V(i) vc[i]
#endif
#define ATT_PROBES
uint att_qbase;  // q's index
#define ATT_STAGE_Q()                                                        \
  for (uint i = gl_LocalInvocationID.x; i < hd; i += WG) qs[i] = q[att_qbase + i]; \
  barrier()
// (constant 2 is unused: timing-only variants, removed)
// ADAPT 1 (GEMMA_VULKAN_SPLITS_ADAPT=1): each split's key count is a multiple of the block size
// (whole blocks), so at short contexts only the leading splits have keys and at long contexts
// every split runs as few blocks as the grid allows.
layout(constant_id = 3) const uint ADAPT = 0;
#include "attn_split.glsl"

void main() {
  Probe(0);
  const uint tid = gl_LocalInvocationID.x;
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, sp = gl_WorkGroupID.z;
  const uint hd = p.hd;
#ifdef ROWS
  att_row = t;
  const uint pos = rsteps[t * 64];
  const uint ring = rsteps[t * 64 + (p.ring == 0 ? 4 : 5)];
#else
  const uint pos = step.pos0 + t;
  const uint ring = p.ring;
#endif
  const uint first = (p.window > 0 && pos + 1 > p.window) ? pos + 1 - p.window : 0;
  const uint nkeys = pos + 1 - first;
  const uint per = ADAPT != 0 ? ATT_KPB * ((nkeys + ATT_KPB * p.splits - 1) / (ATT_KPB * p.splits))
                             : (nkeys + p.splits - 1) / p.splits;
  const uint jb = first + sp * per;
  const uint je = min(pos + 1, jb + per);
  const uint kvh = h / (p.nh / p.nkv);
  const uint width = p.nkv * hd;
  att_qbase = t * p.q_stride + h * hd;  // staged inside AttnSplit, after the first loads
  Probe(1);
  double m, l, acc0, acc1;
  AttnSplit(kvh * hd, kvh * hd, jb, je, ring, width, hd, m, l, acc0, acc1);
  Probe(5);  // every block
  const uint ob = ((t * p.nh + h) * p.splits + sp);
  if (tid < hd) po[ob * hd + tid] = acc0;
  if (tid + WG < hd) po[ob * hd + tid + WG] = acc1;
  if (tid == 0) pml[ob] = dvec2(m, l);
  Probe(6);
}
