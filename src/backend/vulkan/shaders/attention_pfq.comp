#version 450
// Prefill attention, QPS consecutive query tokens of one head per subgroup of 32 (four heads per
// workgroup): each K/V row is loaded once (16-byte loads, lanes over the head dimension: dims
// 4 lane + 128 i .. + 3) for QPS queries. Keys go in blocks of 32 over the union of the queries'
// ranges (a query masks the keys outside its own causal / sliding range). Dot products and the
// weighted V sums are f32 FMAs, as in transformers' eager attention; each query's softmax (block
// max, exp, sum; online across blocks) is double. The result is attn_combine's for one split:
// o = float(sum_j e^(s_j - m) V_j / sum_j e^(s_j - m)). Needs 32-wide subgroups, hd % 4 == 0,
// hd <= 128 MAXV. Built as attention_pfq{QPS}v{MAXV}: q4v2, q2v2 (hd <= 256), q2v4 (hd <= 512); the
// per-lane arrays are compile-time sized (four queries with room for hd 512 spilled: 41 ms per
// 512-token chunk against 22 ms with two).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "common.glsl"

layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer Q { vec4 q4[]; };
layout(std430, binding = 1) readonly buffer KC { vec4 kc4[]; };
layout(std430, binding = 2) readonly buffer VC { vec4 vc4[]; };
layout(std430, binding = 5) writeonly buffer O { vec4 o4[]; };

layout(push_constant) uniform P {
  uint nh, nkv, hd, ring, window, splits;
  uint q_stride;  // also the output's row stride (floats)
} p;

#ifndef QPS
#define QPS 4
#endif
const uint HPW = 4;   // heads (subgroups) per workgroup
#ifndef MAXV
#define MAXV 4  // 16-byte vectors per lane (hd <= 128 MAXV)
#endif

// Ring slot of key b + k (k < 32) given rb = b % ring.
uint RingSlot(uint rb, uint k) {
  const uint r = rb + k;
  return p.ring >= 32 ? (r >= p.ring ? r - p.ring : r) : r % p.ring;
}

void main() {
  const uint lane = gl_SubgroupInvocationID;
  const uint h = gl_WorkGroupID.x * HPW + gl_SubgroupID;
  if (h >= p.nh) return;
  const uint t0 = gl_WorkGroupID.y * QPS;
  const uint hd = p.hd, nv = (hd + 127) / 128;
  const uint kvh = h / (p.nh / p.nkv);
  const uint width = p.nkv * hd;
  uint pos[QPS], first[QPS];
  bool valid[QPS];
  uint hi = 0;
  [[unroll]] for (uint qi = 0; qi < QPS; ++qi) {
    valid[qi] = t0 + qi < step.m;
    pos[qi] = step.pos0 + t0 + qi;
    first[qi] = (p.window > 0 && pos[qi] + 1 > p.window) ? pos[qi] + 1 - p.window : 0;
    if (valid[qi]) hi = pos[qi];
  }
  vec4 qv[QPS][MAXV], acc[QPS][MAXV];
  [[unroll]] for (uint qi = 0; qi < QPS; ++qi) {
    [[unroll]] for (uint i = 0; i < MAXV; ++i) {
      const bool ok = valid[qi] && i < nv && 4 * lane + 128 * i < hd;
      qv[qi][i] = ok ? q4[((t0 + qi) * p.q_stride + h * hd) / 4 + lane + 32 * i] : vec4(0.0);
      acc[qi][i] = vec4(0.0);
    }
  }
  const double kNegInf = -1.0LF / 0.0LF;
  double m[QPS], l[QPS];
  [[unroll]] for (uint qi = 0; qi < QPS; ++qi) {
    m[qi] = kNegInf;
    l[qi] = 0.0LF;
  }
  for (uint b = first[0]; b <= hi; b += 32) {
    const uint nb = min(32u, hi + 1 - b);
    const uint rb = b % p.ring;
    double mine[QPS];
    [[unroll]] for (uint qi = 0; qi < QPS; ++qi) mine[qi] = kNegInf;
    for (uint k0 = 0; k0 < nb; k0 += 2) {
      float s[2][QPS];
      [[unroll]] for (uint u = 0; u < 2; ++u) {
        [[unroll]] for (uint qi = 0; qi < QPS; ++qi) s[u][qi] = 0.0;
        if (k0 + u < nb) {
          const uint kb = (RingSlot(rb, k0 + u) * width + kvh * hd) / 4;
          [[unroll]] for (uint i = 0; i < MAXV; ++i) {
            if (i < nv && 4 * lane + 128 * i < hd) {
              const vec4 k = kc4[kb + lane + 32 * i];
              [[unroll]] for (uint qi = 0; qi < QPS; ++qi) {
                const vec4 a = qv[qi][i];
                s[u][qi] = fma(a.w, k.w, fma(a.z, k.z, fma(a.y, k.y, fma(a.x, k.x, s[u][qi]))));
              }
            }
          }
        }
      }
      [[unroll]] for (uint u = 0; u < 2; ++u) {
        [[unroll]] for (uint qi = 0; qi < QPS; ++qi) {
          const float su = subgroupAdd(s[u][qi]);
          if (lane == k0 + u) mine[qi] = double(su);
        }
      }
    }
    // Lane k holds key b + k's score for every query; keys outside a query's range drop out.
    const uint j = b + lane;
    double pj[QPS];
    [[unroll]] for (uint qi = 0; qi < QPS; ++qi) {
      if (!(lane < nb && j >= first[qi] && j <= pos[qi])) mine[qi] = kNegInf;
      const double mn = max(m[qi], subgroupMax(mine[qi]));
      if (mn == kNegInf) {  // no key of this query yet
        pj[qi] = 0.0LF;
        continue;
      }
      pj[qi] = mine[qi] == kNegInf ? 0.0LF : ExpD(mine[qi] - mn);
      const double corr = m[qi] == kNegInf ? 0.0LF : ExpD(m[qi] - mn);
      l[qi] = l[qi] * corr + subgroupAdd(pj[qi]);
      m[qi] = mn;
      const float c = float(corr);
      [[unroll]] for (uint i = 0; i < MAXV; ++i) acc[qi][i] *= c;
    }
    for (uint k0 = 0; k0 < nb; k0 += 2) {
      [[unroll]] for (uint u = 0; u < 2; ++u) {
        float w[QPS];
        [[unroll]] for (uint qi = 0; qi < QPS; ++qi)
          w[qi] = float(subgroupShuffle(pj[qi], k0 + u));
        if (k0 + u < nb) {
          const uint vb = (RingSlot(rb, k0 + u) * width + kvh * hd) / 4;
          [[unroll]] for (uint i = 0; i < MAXV; ++i) {
            if (i < nv && 4 * lane + 128 * i < hd) {
              const vec4 v = vc4[vb + lane + 32 * i];
              [[unroll]] for (uint qi = 0; qi < QPS; ++qi) acc[qi][i] = fma(vec4(w[qi]), v, acc[qi][i]);
            }
          }
        }
      }
    }
  }
  [[unroll]] for (uint qi = 0; qi < QPS; ++qi) {
    if (!valid[qi]) continue;
    [[unroll]] for (uint i = 0; i < MAXV; ++i) {
      if (i < nv && 4 * lane + 128 * i < hd) {
        const vec4 a = acc[qi][i];
        o4[((t0 + qi) * p.q_stride + h * hd) / 4 + lane + 32 * i] =
            vec4(float(double(a.x) / l[qi]), float(double(a.y) / l[qi]), float(double(a.z) / l[qi]),
                 float(double(a.w) / l[qi]));
      }
    }
  }
}
