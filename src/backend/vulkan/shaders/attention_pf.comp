#version 450
// Prefill attention without key splits or barriers: one subgroup of 32 per (query token, head), four
// heads per workgroup (the heads of a token read the same K/V rows, through L1 when they share a KV
// head). Lanes split the head dimension (dims lane, lane + 32, ...; hd <= 512). Keys go in blocks of
// 32: the scores' partial dot products (double FMAs of f32 values) are summed across the subgroup,
// lane k keeps key k's score, the block's max / exp / sum are one subgroup operation each (online
// softmax in double across blocks), then the V rows are weighted. The result is attn_combine's for
// one split: o = float(sum_j e^(s_j - m) V_j / sum_j e^(s_j - m)). Needs 32-wide subgroups.
// Built twice: with doubles as above (attention_pf), and with -DPF_F32=1 (attention_pf32), where
// the O(hd) work (dot products, their subgroup sums, the weighted V sums) is f32 FMAs as in
// transformers' eager attention, and only the per-block softmax (max, exp, sum) stays double.
// (Staging each K/V block in shared memory for the 8 heads of a KV head measured slower: 41 ms
// per 512-token chunk against 32 ms; the double conversions and FMAs bound it, not L2.)
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "common.glsl"

layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer KC { float kc[]; };
layout(std430, binding = 2) readonly buffer VC { float vc[]; };
layout(std430, binding = 5) writeonly buffer O { float o[]; };

layout(push_constant) uniform P {
  uint nh, nkv, hd, ring, window, splits;
  uint q_stride;  // also the output's row stride
} p;

#ifndef PF_F32
#define PF_F32 0
#endif
#if PF_F32
#define REAL float
#define TOREAL(x) (x)
#else
#define REAL double
#define TOREAL(x) double(x)
#endif
const uint HPW = 4;   // heads (subgroups) per workgroup
const uint MAXD = 16; // dims per lane (hd <= 512)

// Ring slot of key b + k (k < 32) given rb = b % ring.
uint RingSlot(uint rb, uint k) {
  const uint r = rb + k;
  return p.ring >= 32 ? (r >= p.ring ? r - p.ring : r) : r % p.ring;
}

void main() {
  const uint lane = gl_SubgroupInvocationID;
  const uint h = gl_WorkGroupID.x * HPW + gl_SubgroupID, t = gl_WorkGroupID.y;
  if (h >= p.nh) return;
  const uint hd = p.hd, nd = (hd + 31) / 32;
  const uint pos = step.pos0 + t;
  const uint first = (p.window > 0 && pos + 1 > p.window) ? pos + 1 - p.window : 0;
  const uint kbeg = first, kend = pos + 1;
  const uint kvh = h / (p.nh / p.nkv);
  const uint width = p.nkv * hd;
  REAL qv[MAXD];  // converted once
  REAL acc[MAXD];
  [[unroll]] for (uint i = 0; i < MAXD; ++i) {
    const uint d = lane + 32 * i;
    qv[i] = i < nd && d < hd ? TOREAL(q[t * p.q_stride + h * hd + d]) : REAL(0);
    acc[i] = REAL(0);
  }
  const double kNegInf = -1.0LF / 0.0LF;
  double m = kNegInf, l = 0.0LF;
  for (uint b = kbeg; b < kend; b += 32) {
    const uint nb = min(32u, kend - b);
    const uint rb = b % p.ring;  // ring slot of key b (one division per block, not per key)
    double mine = kNegInf;
    // Scores, four keys at a time (independent loads and reductions).
    for (uint k0 = 0; k0 < nb; k0 += 4) {
      REAL s[4];
      [[unroll]] for (uint u = 0; u < 4; ++u) {
        s[u] = REAL(0);
        if (k0 + u < nb) {
          const uint kb = RingSlot(rb, k0 + u) * width + kvh * hd;
          [[unroll]] for (uint i = 0; i < MAXD; ++i) {
            const uint d = lane + 32 * i;
            if (i < nd && d < hd) s[u] = fma(qv[i], TOREAL(kc[kb + d]), s[u]);
          }
        }
      }
      [[unroll]] for (uint u = 0; u < 4; ++u) {
        const double su = double(subgroupAdd(s[u]));
        if (lane == k0 + u) mine = su;
      }
    }
    const double mn = max(m, subgroupMax(mine));
    const double pj = lane < nb ? ExpD(mine - mn) : 0.0LF;
    const double corr = m == kNegInf ? 0.0LF : ExpD(m - mn);
    l = l * corr + subgroupAdd(pj);
    m = mn;
    [[unroll]] for (uint i = 0; i < MAXD; ++i) acc[i] *= REAL(corr);
    for (uint k0 = 0; k0 < nb; k0 += 4) {
      [[unroll]] for (uint u = 0; u < 4; ++u) {
        const REAL w = REAL(subgroupShuffle(pj, k0 + u));
        if (k0 + u < nb) {
          const uint vb = RingSlot(rb, k0 + u) * width + kvh * hd;
          [[unroll]] for (uint i = 0; i < MAXD; ++i) {
            const uint d = lane + 32 * i;
            if (i < nd && d < hd) acc[i] = fma(w, TOREAL(vc[vb + d]), acc[i]);
          }
        }
      }
    }
  }
  [[unroll]] for (uint i = 0; i < MAXD; ++i) {
    const uint d = lane + 32 * i;
    if (i < nd && d < hd) o[t * p.q_stride + h * hd + d] = float(double(acc[i]) / l);
  }
}
