#version 450
// Decode attention with the query heads of one K/V head in one workgroup (GEMMA_VULKAN_ATTN_GQA=1):
// workgroup (K/V head, token, split) computes attention.comp's partials (m, l, o for every key
// split, double, the same arithmetic per head: attn_split.glsl's scores in the same order, then an
// online softmax over blocks of KPB keys) for its QPK = nh / nkv query heads at once, so every K/V
// row is loaded once per split instead of once per query head. attn_combine.comp merges the
// splits. QPK * hd <= 4096 (the host checks); the invocation layout is attn_split.glsl's.
#extension GL_KHR_shader_subgroup_shuffle : enable
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint QPK = 8;  // query heads per K/V head (<= 8)
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer KC { float kc[]; };
layout(std430, binding = 2) readonly buffer VC { float vc[]; };
layout(std430, binding = 3) writeonly buffer PO { double po[]; };  // [t][h][split][hd]
layout(std430, binding = 4) writeonly buffer PML { dvec2 pml[]; };  // [t][h][split]

layout(push_constant) uniform P {
  uint nh, nkv, hd, ring, window, splits;
  uint q_stride;
} p;

const uint WG = gl_WorkGroupSize.x;
const uint TPK = 8;          // invocations per key
const uint KPB = WG / TPK;   // keys per block
shared float qs[4096];       // [QPK][hd]
shared double sc[QPK][KPB];  // scores
shared double sw[QPK][KPB];  // weights exp(s - m)
shared double hm[QPK], hl[QPK], hcorr[QPK];
shared double gacc[4 * WG];  // one head's key-group sums

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint kvh = gl_WorkGroupID.x, t = gl_WorkGroupID.y, sp = gl_WorkGroupID.z;
  const uint hd = p.hd;
  const uint pos = step.pos0 + t;
  const uint first = (p.window > 0 && pos + 1 > p.window) ? pos + 1 - p.window : 0;
  const uint nkeys = pos + 1 - first;
  const uint per = (nkeys + p.splits - 1) / p.splits;
  const uint jb = first + sp * per;
  const uint je = min(pos + 1, jb + per);
  const uint width = p.nkv * hd;
  const uint kbase = kvh * hd;
  const double kNegInf = -1.0LF / 0.0LF;
  const uint n4 = (hd + 3) / 4;
  const uint krounds = (n4 + 8 * TPK - 1) / (8 * TPK);
  const uint G = WG / n4;
  const uint vg = tid / n4, vq = tid % n4;
  const bool vlane = vg < G;
  const uint vkeys = (KPB + G - 1) / G;
  const uint kl = tid / TPK, part = tid % TPK;
  double a[QPK][4];
  [[unroll]] for (uint h = 0; h < QPK; ++h)
    [[unroll]] for (uint c = 0; c < 4; ++c) a[h][c] = 0.0LF;
  if (tid < QPK) {
    hm[tid] = kNegInf;
    hl[tid] = 0.0LF;
  }
  for (uint b = jb; b < je; b += KPB) {
    const uint j = b + kl;
    const uint nb = min(KPB, je - b);
    const uint kb = kbase + (j % p.ring) * width;
    vec4 kv[8], vv[8];
    [[unroll]] for (uint u = 0; u < 8; ++u) {
      const uint i = 4 * (part + TPK * u);
      [[unroll]] for (uint c = 0; c < 4; ++c) kv[u][c] = j < je && i + c < hd ? kc[kb + i + c] : 0.0;
    }
    [[unroll]] for (uint u = 0; u < 8; ++u) {
      const uint jj = vg + G * u;
      const uint vb = kbase + ((b + jj) % p.ring) * width + 4 * vq;
      [[unroll]] for (uint c = 0; c < 4; ++c)
        vv[u][c] = vlane && jj < nb && 4 * vq + c < hd ? vc[vb + c] : 0.0;
    }
    if (b == jb) {
      // The group's q rows (heads kvh * QPK ...), after the first loads are issued.
      for (uint i = tid; i < QPK * hd; i += WG)
        qs[i] = q[t * p.q_stride + kvh * QPK * hd + i];
      barrier();
    }
    double s[QPK];
    [[unroll]] for (uint h = 0; h < QPK; ++h) s[h] = 0.0LF;
    if (j < je) {
      for (uint r = 0; r < krounds; ++r) {
        if (r > 0) {
          [[unroll]] for (uint u = 0; u < 8; ++u) {
            const uint i = 4 * (part + TPK * (8 * r + u));
            [[unroll]] for (uint c = 0; c < 4; ++c) kv[u][c] = i + c < hd ? kc[kb + i + c] : 0.0;
          }
        }
        [[unroll]] for (uint u = 0; u < 8; ++u) {
          const uint i = 4 * (part + TPK * (8 * r + u));
          [[unroll]] for (uint c = 0; c < 4; ++c) {
            if (i + c < hd) {
              const double kd = double(kv[u][c]);
              [[unroll]] for (uint h = 0; h < QPK; ++h)
                s[h] = fma(double(qs[h * hd + i + c]), kd, s[h]);
            }
          }
        }
      }
    }
    [[unroll]] for (uint h = 0; h < QPK; ++h) {
      double v = s[h];
      v += subgroupShuffleXor(v, 1);
      v += subgroupShuffleXor(v, 2);
      v += subgroupShuffleXor(v, 4);
      if (part == 0) sc[h][kl] = j < je ? v : kNegInf;
    }
    barrier();
    // Softmax bookkeeping: subgroup g takes heads g, g + (subgroups), ... (as attn_split.glsl per
    // head: the block max and sum by subgroup reductions).
    for (uint h = gl_SubgroupID; h < QPK; h += gl_NumSubgroups) {
      double bm = kNegInf;
      for (uint jj = gl_SubgroupInvocationID; jj < nb; jj += gl_SubgroupSize) bm = max(bm, sc[h][jj]);
      const double m = hm[h];
      const double mn = max(m, subgroupMax(bm));
      double bs = 0.0LF;
      for (uint jj = gl_SubgroupInvocationID; jj < nb; jj += gl_SubgroupSize) {
        const double w = ExpD(sc[h][jj] - mn);
        sw[h][jj] = w;
        bs += w;
      }
      bs = subgroupAdd(bs);
      const double corr = m == kNegInf ? 0.0LF : ExpD(m - mn);
      if (subgroupElect()) {
        hl[h] = hl[h] * corr + bs;
        hm[h] = mn;
        hcorr[h] = corr;
      }
    }
    barrier();
    if (vlane) {
      [[unroll]] for (uint h = 0; h < QPK; ++h) {
        const double corr = hcorr[h];
        [[unroll]] for (uint c = 0; c < 4; ++c) a[h][c] *= corr;
      }
      for (uint u0 = 0; u0 < vkeys; u0 += 8) {
        if (vg + G * u0 >= nb) break;
        if (u0 > 0) {
          [[unroll]] for (uint u = 0; u < 8; ++u) {
            const uint jj = vg + G * (u0 + u);
            const uint vb = kbase + ((b + jj) % p.ring) * width + 4 * vq;
            [[unroll]] for (uint c = 0; c < 4; ++c)
              vv[u][c] = jj < nb && 4 * vq + c < hd ? vc[vb + c] : 0.0;
          }
        }
        [[unroll]] for (uint u = 0; u < 8; ++u) {
          const uint jj = vg + G * (u0 + u);
          if (jj < nb) {
            [[unroll]] for (uint h = 0; h < QPK; ++h) {
              const double w = sw[h][jj];
              [[unroll]] for (uint c = 0; c < 4; ++c) a[h][c] = fma(w, double(vv[u][c]), a[h][c]);
            }
          }
        }
      }
    }
    barrier();  // sc, sw and hcorr are reused by the next block
  }
  // Per head: the key groups' sums, added in group order, and the partials.
  [[unroll]] for (uint h = 0; h < QPK; ++h) {
    if (vlane) {
      [[unroll]] for (uint c = 0; c < 4; ++c)
        if (4 * vq + c < hd) gacc[vg * hd + 4 * vq + c] = a[h][c];
    }
    barrier();
    const uint ob = (t * p.nh + kvh * QPK + h) * p.splits + sp;
    for (uint i = tid; i < hd; i += WG) {
      double acc = 0.0LF;
      for (uint g = 0; g < G; ++g) acc += gacc[g * hd + i];
      po[ob * hd + i] = acc;
    }
    if (tid == 0) pml[ob] = dvec2(hm[h], hl[h]);
    barrier();
  }
}
