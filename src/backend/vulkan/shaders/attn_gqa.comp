#version 450
// One-token decode attention with the G = nh / nkv query heads of a K/V head in one workgroup
// (GEMMA_VULKAN_ATTN_GQA): workgroup (K/V head, split) loads each of its keys' K and V rows once
// for all G heads, where attn_fused.comp's workgroup (head, split) loads them once per head (on the
// H200 the G-fold reads of the same rows from L2 were what bounded that kernel's key loop:
// bench/NOTES.md, fifteenth session). Steps:
//   1. the G heads' q normalized and rotated (qkrope.comp's arithmetic, by row groups) into
//      shared memory; in the split holding the new position of a layer that owns its K/V, the new
//      K row normalized and rotated and the new V row normalized, written into the caches and
//      kept in shared memory for this step's key `pos` (no one else reads that row in this step);
//   2. blocks of U keys: scores by row groups (a key row on RL lanes, lane rl holding dims
//      rl + RL d; each head's q read from shared memory), each head's running max and sum by a
//      row group over the block's scores, then the weighted V rows by every invocation over its
//      own dims (t + WG c): o_h = sum_j e^(s_hj - m_h) V_j in f32;
//   3. the split's partials (o_h, m_h, l_h) as attn_fused writes them; the last split to arrive
//      merges all G heads: o = sum_s o_s e^(m_s - M) / sum_s l_s e^(m_s - M).
// The dot products and sums are f32 in a different order than attn_fused's: not its bits, the
// CPU reference's values within the attention kernels' tolerance.
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
#extension GL_KHR_shader_subgroup_shuffle : enable
#extension GL_KHR_memory_scope_semantics : enable
#include "common.glsl"
#define PROBE_BINDING 14
#include "probe.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint HD = 256;  // head dim
layout(constant_id = 2) const uint RL = 32;   // lanes per key row (within a subgroup)
layout(constant_id = 3) const uint D = 8;     // dims per lane: HD / RL (even)
layout(constant_id = 4) const uint KW = 4;    // keys per row group and block
layout(constant_id = 5) const uint G = 8;     // query heads per K/V head (<= 16)
layout(constant_id = 6) const uint MAXS = 64;  // splits (<= MAXS)

layout(std430, binding = 0) readonly buffer Q { float q[]; };  // [h][HD], raw
layout(std430, binding = 1) readonly buffer KC { float kc[]; };
layout(std430, binding = 2) readonly buffer VC { float vc[]; };
layout(std430, binding = 12) writeonly buffer KCW { float kcw[]; };
layout(std430, binding = 13) writeonly buffer VCW { float vcw[]; };
layout(std430, binding = 3) coherent buffer PO { float po[]; };
layout(std430, binding = 15) readonly buffer POR { float por[]; };
layout(std430, binding = 15) readonly buffer POR4 { vec4 por4[]; };
layout(std430, binding = 4) readonly buffer Rope { vec2 rope[]; };  // [pos][rot] (cos, sin)
layout(std430, binding = 5) writeonly buffer O { float o[]; };      // [h][HD]
layout(std430, binding = 5) writeonly buffer O4 { vec4 o4[]; };
layout(std430, binding = 6) coherent buffer Cnt { uint cnt[]; };    // arrivals, 0 between steps
layout(std430, binding = 7) readonly buffer KT { float kt[]; };     // the new raw K row [nkv][HD]
layout(std430, binding = 8) readonly buffer VT { float vt[]; };
layout(std430, binding = 9) readonly buffer QN { float qn[]; };
layout(std430, binding = 10) readonly buffer KN { float kn[]; };

layout(push_constant) uniform P {
  uint nh, nkv, ring, window, splits, rot;
  uint has_kn;
  uint kv_new;
  uint ml_base;
  float eps;
} p;

const uint WG = gl_WorkGroupSize.x;
const uint NRG = WG / RL;            // row groups
const uint U = NRG * KW;             // keys per block
const uint HALF = D / 2;
const uint CPT = (HD + WG - 1) / WG;  // dims per invocation in the value sums
const uint UR = (U + RL - 1) / RL;   // a row group's lanes' keys in the softmax
const float kNegInf = -1.0 / 0.0;

shared float qs[G * HD];     // the heads' q, normalized and rotated
shared float kns[HD];        // the new K row (normalized, rotated) and V row (normalized)
shared float vns[HD];
shared float sc[G * U];      // the block's scores [h][j]
shared vec4 pr4[G * U / 4];  // ... their weights e^(s - m)
shared float hm[G], hl[G], hc[G];  // running max and sum, the block's rescale
shared float sw[G * MAXS];   // the merge's split weights
shared float accs[G * HD];   // the value sums [h][dim] (each invocation owns its dims)
shared bool s_last;

float RowSum(float v) {
  [[unroll]] for (uint off = RL / 2; off > 0; off >>= 1) v += subgroupShuffleXor(v, off);
  return v;
}
float RowMax(float v) {
  [[unroll]] for (uint off = RL / 2; off > 0; off >>= 1) v = max(v, subgroupShuffleXor(v, off));
  return v;
}
double RowSumD(double v) {
  [[unroll]] for (uint off = RL / 2; off > 0; off >>= 1) v += subgroupShuffleXor(v, off);
  return v;
}

uint Dim(uint rl, uint d) { return rl + RL * d; }

// attn_fused.comp's factor (the mean by a multiplication where HD is a power of two, two Newton
// steps in double from the f32 estimate).
float RmsFactorNewton(double ss, float eps) {
  precise float ms = ((HD & (HD - 1)) == 0 ? float(ss * (1.0LF / double(HD))) : float(ss / double(HD))) + eps;
  double y = double(inversesqrt(ms));
  const double hm2 = 0.5LF * double(ms);
  y = y * (1.5LF - hm2 * y * y);
  y = y * (1.5LF - hm2 * y * y);
  return float(y);
}

// x = rope(rmsnorm(x) * w) (weighted, rotated: the first rot pairs) or rmsnorm(x) on the lane's
// dims, as attn_fused.comp's NormRope.
void NormRope(inout float x[D], const float w[D], bool weighted, bool rotated, const vec2 cs[HALF],
              uint rl) {
  double ss = 0.0LF;
  [[unroll]] for (uint d = 0; d < D; ++d) ss = fma(double(x[d]), double(x[d]), ss);
  const float r = RmsFactorNewton(RowSumD(ss), p.eps);
  [[unroll]] for (uint d = 0; d < D; ++d) {
    precise float v = x[d] * r;
    if (weighted) v = v * w[d];
    x[d] = v;
  }
  if (!rotated) return;
  [[unroll]] for (uint d = 0; d < HALF; ++d) {
    if (Dim(rl, d) < p.rot) {
      precise float lo = x[d] * cs[d].x + (-x[d + HALF]) * cs[d].y;
      precise float hi = x[d + HALF] * cs[d].x + x[d] * cs[d].y;
      x[d] = lo;
      x[d + HALF] = hi;
    }
  }
}

uint CacheRow(uint b0, uint rb, uint off) {
  return p.ring >= U ? (rb + off >= p.ring ? rb + off - p.ring : rb + off) : (b0 + off) % p.ring;
}

uint MlAt(uint h, uint s) { return p.ml_base + h * ((2 * p.splits + 31) / 32 * 32) + 2 * s; }
const uint PR = (HD + 31) / 32 * 32;  // floats per partial row

void main() {
  Probe(0);
  const uint tid = gl_LocalInvocationID.x;
  const uint kvh = gl_WorkGroupID.x, sp = gl_WorkGroupID.z;
  const uint h0 = kvh * G;  // the group's first head
  // The loops over heads run on the runtime count gq (= G), so the compiler keeps them rolled:
  // the binary stays small (the first version, unrolled over heads with the sums in registers,
  // was 82 KB of code and slower in every stage).
  const uint gq = p.nh / p.nkv;
  const uint width = p.nkv * HD;
  const uint khead = kvh * HD;
  const uint rpg = gl_SubgroupSize / RL;
  const uint rl = gl_SubgroupInvocationID % RL;
  const uint rg = gl_SubgroupID * rpg + gl_SubgroupInvocationID / RL;

  const uint pos = step.pos0;
  const uint first = (p.window > 0 && pos + 1 > p.window) ? pos + 1 - p.window : 0;
  const uint nkeys = pos + 1 - first;
  const uint per = U * ((nkeys + U * p.splits - 1) / (U * p.splits));
  const uint nact = (nkeys + per - 1) / per;
  const uint jb = first + sp * per;
  if (jb > pos) return;  // a split without keys (uniform over the workgroup)
  const uint je = min(pos + 1, jb + per);
  const bool has_new = p.kv_new != 0 && je == pos + 1;

  // The first block's K rows (by row groups) and V values (by dims), issued first.
  float kr[KW][D];
  float vv[U][CPT];
  uint b0 = jb;
  {
    const uint rb = b0 % p.ring;
    [[unroll]] for (uint k = 0; k < KW; ++k) {
      const uint off = rg * KW + k, row = CacheRow(b0, rb, off);
      const bool ok = b0 + off < je;
      [[unroll]] for (uint d = 0; d < D; ++d)
        kr[k][d] = ok ? kc[row * width + khead + Dim(rl, d)] : 0.0;
    }
    [[unroll]] for (uint j = 0; j < U; ++j) {
      const uint row = CacheRow(b0, rb, j);
      [[unroll]] for (uint c = 0; c < CPT; ++c) {
        const uint i = tid + WG * c;
        vv[j][c] = b0 + j < je && i < HD ? vc[row * width + khead + i] : 0.0;
      }
    }
  }

  // 1. The heads' q (row group rg: heads rg, rg + NRG, ...) and the new K/V row (the last row
  // group), normalized and rotated into shared memory.
  vec2 cs[HALF];
  [[unroll]] for (uint d = 0; d < HALF; ++d) {
    const uint k = Dim(rl, d);
    cs[d] = k < p.rot ? rope[pos * p.rot + k] : vec2(1.0, 0.0);
  }
  float qw[D];
  [[unroll]] for (uint d = 0; d < D; ++d) qw[d] = qn[Dim(rl, d)];
  [[dont_unroll]] for (uint h = rg; h < gq; h += NRG) {
    float x[D];
    [[unroll]] for (uint d = 0; d < D; ++d) x[d] = q[(h0 + h) * HD + Dim(rl, d)];
    NormRope(x, qw, true, true, cs, rl);
    [[unroll]] for (uint d = 0; d < D; ++d) qs[h * HD + Dim(rl, d)] = x[d];
  }
  if (has_new && rg == NRG - 1) {
    float kx[D], vx[D], kw_[D];
    [[unroll]] for (uint d = 0; d < D; ++d) {
      kx[d] = kt[khead + Dim(rl, d)];
      vx[d] = vt[khead + Dim(rl, d)];
      kw_[d] = p.has_kn != 0 ? kn[Dim(rl, d)] : 1.0;
    }
    NormRope(kx, kw_, p.has_kn != 0, true, cs, rl);
    NormRope(vx, kw_, false, false, cs, rl);
    const uint crow = (pos % p.ring) * width + khead;
    [[unroll]] for (uint d = 0; d < D; ++d) {
      kcw[crow + Dim(rl, d)] = kx[d];
      vcw[crow + Dim(rl, d)] = vx[d];
      kns[Dim(rl, d)] = kx[d];
      vns[Dim(rl, d)] = vx[d];
    }
  }
  if (tid < gq) {
    hm[tid] = kNegInf;
    hl[tid] = 0.0;
  }
  [[dont_unroll]] for (uint h = 0; h < gq; ++h)
    [[unroll]] for (uint c = 0; c < CPT; ++c)
      if (tid + WG * c < HD) accs[h * HD + tid + WG * c] = 0.0;
  barrier();
  Probe(1);  // q and the new row ready

  while (true) {
    // 2a. Scores of the row group's keys for every head.
    [[unroll]] for (uint k = 0; k < KW; ++k) {
      if (has_new && b0 + rg * KW + k == pos) {
        [[unroll]] for (uint d = 0; d < D; ++d) kr[k][d] = kns[Dim(rl, d)];
      }
    }
    [[dont_unroll]] for (uint h = 0; h < gq; ++h) {
      float qh[D];
      [[unroll]] for (uint d = 0; d < D; ++d) qh[d] = qs[h * HD + Dim(rl, d)];
      [[unroll]] for (uint k = 0; k < KW; ++k) {
        float a = 0.0;
        [[unroll]] for (uint d = 0; d < D; ++d) a = fma(qh[d], kr[k][d], a);
        a = RowSum(a);
        const uint j = rg * KW + k;
        if (rl == 0) sc[h * U + j] = b0 + j < je ? a : kNegInf;
      }
    }
    // The next block's K rows, loaded while this block's softmax and values run.
    const uint nb = b0 + U;
    if (nb < je) {
      const uint rb = nb % p.ring;
      [[unroll]] for (uint k = 0; k < KW; ++k) {
        const uint off = rg * KW + k, row = CacheRow(nb, rb, off);
        const bool ok = nb + off < je;
        [[unroll]] for (uint d = 0; d < D; ++d)
          kr[k][d] = ok ? kc[row * width + khead + Dim(rl, d)] : 0.0;
      }
    }
    barrier();
    if (b0 == jb) Probe(2);  // the first block's scores
    // 2b. Each head's block max, running max and sum (row group rg: heads rg, rg + NRG, ...).
    [[dont_unroll]] for (uint h = rg; h < gq; h += NRG) {
      float s[UR];
      float bm = kNegInf;
      [[unroll]] for (uint r = 0; r < UR; ++r) {
        const uint j = rl + RL * r;
        s[r] = j < U ? sc[h * U + j] : kNegInf;
        bm = max(bm, s[r]);
      }
      bm = RowMax(bm);  // (every block holds a key: finite)
      const float mo = hm[h];
      const float mn = max(mo, bm);
      float ws = 0.0;
      [[unroll]] for (uint r = 0; r < UR; ++r) {
        const uint j = rl + RL * r;
        const float w = s[r] == kNegInf ? 0.0 : exp(s[r] - mn);
        if (j < U) pr4[(h * U + j) / 4][j % 4] = w;
        ws += w;
      }
      ws = RowSum(ws);
      if (rl == 0) {
        const float corr = mo == kNegInf ? 0.0 : exp(mo - mn);
        hl[h] = hl[h] * corr + ws;
        hm[h] = mn;
        hc[h] = corr;
      }
    }
    barrier();
    // 2c. The weighted V rows over this invocation's dims.
    if (has_new && pos >= b0 && pos < b0 + U) {
      [[unroll]] for (uint j = 0; j < U; ++j)
        if (b0 + j == pos)
          [[unroll]] for (uint c = 0; c < CPT; ++c)
            if (tid + WG * c < HD) vv[j][c] = vns[tid + WG * c];
    }
    [[dont_unroll]] for (uint h = 0; h < gq; ++h) {
      const float corr = hc[h];
      [[unroll]] for (uint c = 0; c < CPT; ++c) {
        if (tid + WG * c >= HD) continue;
        float a = accs[h * HD + tid + WG * c] * corr;
        [[unroll]] for (uint j4 = 0; j4 < U / 4; ++j4) {
          const vec4 w = pr4[h * (U / 4) + j4];
          a = fma(w.x, vv[4 * j4][c], a);
          a = fma(w.y, vv[4 * j4 + 1][c], a);
          a = fma(w.z, vv[4 * j4 + 2][c], a);
          a = fma(w.w, vv[4 * j4 + 3][c], a);
        }
        accs[h * HD + tid + WG * c] = a;
      }
    }
    b0 = nb;
    if (b0 >= je) break;
    const uint rb = b0 % p.ring;
    [[unroll]] for (uint j = 0; j < U; ++j) {
      const uint row = CacheRow(b0, rb, j);
      [[unroll]] for (uint c = 0; c < CPT; ++c) {
        const uint i = tid + WG * c;
        vv[j][c] = b0 + j < je && i < HD ? vc[row * width + khead + i] : 0.0;
      }
    }
  }
  Probe(3);  // every block

  // 3. The split's partials, or the output where one split holds every key.
  [[dont_unroll]] for (uint h = 0; h < gq; ++h) {
    const float L = hl[h];
    [[unroll]] for (uint c = 0; c < CPT; ++c) {
      const uint i = tid + WG * c;
      if (i >= HD) continue;
      if (nact == 1) o[(h0 + h) * HD + i] = accs[h * HD + i] / L;
      else po[((h0 + h) * p.splits + sp) * PR + i] = accs[h * HD + i];
    }
  }
  if (nact == 1) return;
  if (tid < gq) {
    po[MlAt(h0 + tid, sp)] = hm[tid];
    po[MlAt(h0 + tid, sp) + 1] = hl[tid];
  }
  {
    const int sem = gl_StorageSemanticsBuffer | gl_StorageSemanticsShared;
    controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, sem, gl_SemanticsAcquireRelease);
    if (tid == 0)
      s_last = atomicAdd(cnt[kvh], 1u, gl_ScopeDevice, gl_StorageSemanticsBuffer,
                         gl_SemanticsAcquireRelease) == nact - 1;
    controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, sem, gl_SemanticsAcquireRelease);
  }
  Probe(4);  // arrival counted
  if (!s_last) return;

  // The merge of every head of the group: row group rg publishes the split weights of heads rg,
  // rg + NRG, ... (e^(m_s - M)) and their denominator, then each invocation sums 4-dim units over
  // the splits, two units and 16 splits' loads in flight at a time.
  [[dont_unroll]] for (uint h = rg; h < gq; h += NRG) {
    float mx = kNegInf;
    for (uint s = rl; s < nact; s += RL) mx = max(mx, por[MlAt(h0 + h, s)]);
    mx = RowMax(mx);
    float den = 0.0;
    for (uint s = rl; s < nact; s += RL) {
      const float w = exp(por[MlAt(h0 + h, s)] - mx);
      sw[h * MAXS + s] = w;
      den = fma(por[MlAt(h0 + h, s) + 1], w, den);
    }
    den = RowSum(den);
    if (rl == 0) hl[h] = den;
  }
  barrier();
  Probe(5);  // the split weights
  const uint NU = gq * HD / 4;
  [[dont_unroll]] for (uint u = tid; u < NU; u += WG) {
    const uint h = u / (HD / 4), i4 = u % (HD / 4);
    vec4 a = vec4(0.0);
    [[dont_unroll]] for (uint s0 = 0; s0 < nact; s0 += 16) {
      vec4 v[16];
      [[unroll]] for (uint k = 0; k < 16; ++k)
        v[k] = s0 + k < nact ? por4[(((h0 + h) * p.splits + s0 + k) * PR) / 4 + i4] : vec4(0.0);
      [[unroll]] for (uint k = 0; k < 16; ++k)
        if (s0 + k < nact) a = fma(v[k], vec4(sw[h * MAXS + s0 + k]), a);
    }
    o4[((h0 + h) * HD) / 4 + i4] = a / hl[h];
  }
  if (tid == 0) cnt[kvh] = 0;
  Probe(6);  // merged
}
