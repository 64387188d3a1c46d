#version 450
// One-token decode attention built for latency (the default for one-token steps where the shapes
// allow it; attention.comp + qkrope.comp + attn_combine.comp otherwise): workgroup (head, split)
//   1. ROPE 1: normalizes and rotates its head's q (qkrope.comp's arithmetic) and, in the split
//      holding the new position of a layer that owns its K/V, the new K row (and normalizes the
//      new V row), which it writes into the caches; their score and value start row group 0's
//      state before the key loop;
//   2. its share of the keys j in [jb, je): m = max_j s_j, l = sum_j e^(s_j - m),
//      o = sum_j e^(s_j - m) V_j, s_j = q . K_j (scale 1), in f32 (the dot products and sums; as
//      the prompt attention kernels, bench/journal/2026-11-sessions.md tenth session);
//   3. the merge of the splits, o = sum_s o_s e^(m_s - M) / sum_s l_s e^(m_s - M): MODE 1 (the
//      default) leaves the partials to a MODE 2 dispatch (grid: heads x blocks of WG merge
//      units), MODE 0 has the last split workgroup of the head to finish merge them.
// Layout: a key row is spread over RL lanes of a subgroup (lane rl holds dims rl + RL d, d < D,
// or groups of 4 with VEC, so a row's loads are coalesced and the rotation pairs (i, i + HD / 2)
// sit in one lane); a row group of RL lanes takes KW keys per block (U = (WG / RL) KW keys per
// block), keeps its own running max, sum and weighted sums across blocks (no barrier inside the
// key loop) and the row groups merge once at the end through shared memory. The host picks RL (a
// power of two up to the subgroup size with HD % (2 RL) == 0), D = HD / RL and KW.
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
#extension GL_KHR_shader_subgroup_shuffle : enable
#extension GL_KHR_memory_scope_semantics : enable
#include "common.glsl"
#define PROBE_BINDING 14
#include "probe.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint HD = 256;  // head dim
layout(constant_id = 2) const uint RL = 32;   // lanes per key row
layout(constant_id = 3) const uint D = 8;     // dims per lane: HD / RL (even)
layout(constant_id = 4) const uint KW = 4;    // keys per row group and block
layout(constant_id = 5) const uint ROPE = 1;  // 1: raw q / new K/V in, normalized and rotated here
layout(constant_id = 6) const uint MODE = 0;  // 0 last split merges; 1 partials only; 2 merge only
layout(constant_id = 7) const uint MB = 16;   // the merge's partials per round (<= 16)
// VEC 1 (D % 8 == 0): lane rl holds dims 4 rl + 4 RL g + c (g < D / 4, c < 4) and loads the cache
// rows as 16-byte vectors (a quarter of the load instructions); the rotation pairs stay in the
// lane (d and d + D / 2).
layout(constant_id = 8) const uint VEC = 0;
// FENCE 1 (MODE 0): the arrival count is one acquire-release atomic instead of a full memory
// barrier on each side of a relaxed one.
layout(constant_id = 9) const uint FENCE = 0;
// NC_MERGE 1 (MODE 0): the last split reads the partials through the read-only alias (binding 15)
// instead of the coherent binding, after the arrival count's barriers have made them available.
layout(constant_id = 10) const uint NC_MERGE = 0;
// VPF 1 (GEMMA_VULKAN_ATTN_VPF): the next block's V rows loaded with its K rows, before this
// block's softmax and value sums (a second set of registers), instead of after them: a split of
// several blocks no longer waits for each block's V rows. The same values.
layout(constant_id = 11) const uint VPF = 0;
// (constant 12 is unused: timing-only variants, removed)
// HPW (MODE 0; GEMMA_VULKAN_ATTN_HPW, the full-attention layers): query heads per workgroup (1 or
// 2, heads of one K/V head): each key row loaded is used for HPW heads' scores and value sums, so
// the cache's rows are read HPW times less often from L2; the grid has HPW times the splits.
layout(constant_id = 13) const uint HPW = 1;

layout(std430, binding = 0) readonly buffer Q { float q[]; };  // [h][HD] (raw where ROPE)
layout(std430, binding = 0) readonly buffer Q4 { vec4 q4[]; };
// The caches (ring rows of nkv * HD floats), read through 1 and 2 and written (the new row)
// through 12 and 13, which alias them: the NVIDIA driver bounds-checks loads from a writable
// binding with a branch each, those from a read-only one with a predicate.
layout(std430, binding = 1) readonly buffer KC { float kc[]; };
layout(std430, binding = 2) readonly buffer VC { float vc[]; };
layout(std430, binding = 1) readonly buffer KC4 { vec4 kc4[]; };
layout(std430, binding = 2) readonly buffer VC4 { vec4 vc4[]; };
layout(std430, binding = 12) writeonly buffer KCW { float kcw[]; };
layout(std430, binding = 13) writeonly buffer VCW { float vcw[]; };
// Partials: o_s at [(h * splits + s) * PR], (m_s, l_s) at ml_base + h MLS + 2 s: rows and each
// head's (m, l) block start on 128-byte lines (PR, MLS, ml_base multiples of 32 floats; the host
// aligns the buffer), so no cache line holds two heads' partials (NC_MERGE reads them through the
// non-coherent path after the head's arrivals: a line of another head cached early could be stale).
layout(std430, binding = 3) coherent buffer PO { float po[]; };
// MODE 2 reads the partials (written by the MODE 1 dispatch before) through a plain read-only
// alias: no coherent loads, the driver's predicated bounds checks.
layout(std430, binding = 15) readonly buffer POR { float por[]; };
layout(std430, binding = 3) coherent buffer PO4 { vec4 po4[]; };
layout(std430, binding = 15) readonly buffer POR4 { vec4 por4[]; };
layout(std430, binding = 4) readonly buffer Rope { vec2 rope[]; };  // [pos][rot] (cos, sin)
layout(std430, binding = 4) readonly buffer Rope4 { vec4 rope4[]; };
layout(std430, binding = 5) writeonly buffer O { float o[]; };     // [h][HD]
layout(std430, binding = 5) writeonly buffer O4 { vec4 o4[]; };
layout(std430, binding = 6) coherent buffer Cnt { uint cnt[]; };   // arrivals per head, 0 between steps
layout(std430, binding = 7) readonly buffer KT { float kt[]; };    // the new raw K row [nkv][HD]
layout(std430, binding = 8) readonly buffer VT { float vt[]; };
layout(std430, binding = 9) readonly buffer QN { float qn[]; };
layout(std430, binding = 10) readonly buffer KN { float kn[]; };
layout(std430, binding = 7) readonly buffer KT4 { vec4 kt4[]; };
layout(std430, binding = 8) readonly buffer VT4 { vec4 vt4[]; };
layout(std430, binding = 9) readonly buffer QN4 { vec4 qn4[]; };
layout(std430, binding = 10) readonly buffer KN4 { vec4 kn4[]; };

layout(push_constant) uniform P {
  uint nh, nkv, ring, window, splits, rot;
  uint has_kn;  // the K norm has a weight
  uint kv_new;  // the layer writes its K/V (0: a KV-shared layer)
  uint ml_base;
  float eps;
} p;

const uint WG = gl_WorkGroupSize.x;
const uint NRG = WG / RL;  // row groups
const uint U = NRG * KW;   // keys per block
const uint HALF = D / 2;   // the lane's dims d and d + HALF are a rotation pair
const float kNegInf = -1.0 / 0.0;

shared float rg_m[NRG * HPW];
shared float rg_l[NRG * HPW];
shared float rg_acc[NRG * HD * HPW];
shared float sw[256];  // the merge's split weights (splits <= 256)
shared bool s_last;

float RowSum(float v) {
  [[unroll]] for (uint off = RL / 2; off > 0; off >>= 1) v += subgroupShuffleXor(v, off);
  return v;
}
double RowSumD(double v) {
  [[unroll]] for (uint off = RL / 2; off > 0; off >>= 1) v += subgroupShuffleXor(v, off);
  return v;
}

// The head dim that lane rl's d-th value holds.
uint Dim(uint rl, uint d) { return VEC != 0 ? 4 * rl + 4 * RL * (d / 4) + d % 4 : rl + RL * d; }

// RmsFactor (common.glsl) without its double division and square root (library calls of ~100
// instructions each on the NVIDIA driver): the mean by a multiplication where HD is a power of
// two (exact), 1 / sqrt from the f32 estimate and two Newton steps in double (to double
// precision), rounded to f32: the same factor except where the exact value lies within a few
// double ulps of an f32 rounding boundary.
float RmsFactorNewton(double ss, float eps) {
  precise float ms = ((HD & (HD - 1)) == 0 ? float(ss * (1.0LF / double(HD))) : float(ss / double(HD))) + eps;
  return InvSqrtNewton(ms);
}

// qkrope.comp's arithmetic on the lane's dims of one head: x = rope(rmsnorm(x) * w) (weighted:
// w = the dims' norm weights, rotated: the first rot pairs), or rmsnorm(x) alone.
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

// The ring row of key b0 + off (rb = b0 % ring; off < U): one compare where the ring holds a
// block, a division in tiny rings.
uint CacheRow(uint b0, uint rb, uint off) {
  return p.ring >= U ? (rb + off >= p.ring ? rb + off - p.ring : rb + off) : (b0 + off) % p.ring;
}

// The last step: o = sum_s o_s e^(m_s - M) / sum_s l_s e^(m_s - M) over the nact splits of head h.
// Every subgroup evaluates M and the denominator (subgroup 0 publishes the weights); each
// invocation's first MB partials are loaded before the weights are known, the rest MB a round.
// The merge's unit: W dims (4 with VEC: 16-byte loads and stores). MODE 0: the workgroup merges
// every unit (tid + WG c); MODE 2: units WG y + tid (grid y).
const uint W = VEC != 0 ? 4 : 1;
const uint NU = HD / W;
const bool kReadAlias = MODE == 2 || NC_MERGE != 0;
const uint PR = (HD + 31) / 32 * 32;  // floats per partial row
uint MlAt(uint h, uint s) { return p.ml_base + h * ((2 * p.splits + 31) / 32 * 32) + 2 * s; }
vec4 PartialAt(uint e) {  // the W values at float index e (a multiple of W)
  if (W == 4) return kReadAlias ? por4[e / 4] : po4[e / 4];
  return vec4(kReadAlias ? por[e] : po[e], 0.0, 0.0, 0.0);
}
float PartialScalar(uint e) { return kReadAlias ? por[e] : po[e]; }
void Merge(uint h, uint nact) {
  const uint tid = gl_LocalInvocationID.x;
  const uint base = h * p.splits;
  const uint NC = MODE == 2 ? 1 : (NU + WG - 1) / WG;
  const uint u0 = MODE == 2 ? WG * gl_WorkGroupID.y + tid : tid;
  vec4 v[2][16];
  [[unroll]] for (uint c = 0; c < NC; ++c) {
    const uint ui = u0 + WG * c;
    [[unroll]] for (uint u = 0; u < MB; ++u)
      v[c][u] = ui < NU && u < nact ? PartialAt((base + u) * PR + W * ui) : vec4(0.0);
  }
  // Each lane's splits' (m, l), loaded once (splits <= 8 x the subgroup size).
  vec2 ml[8];
  float mx = kNegInf;
  [[unroll]] for (uint r = 0; r < 8; ++r) {
    const uint s = gl_SubgroupInvocationID + gl_SubgroupSize * r;
    ml[r] = s < nact ? vec2(PartialScalar(MlAt(h, s)), PartialScalar(MlAt(h, s) + 1))
                     : vec2(kNegInf, 0.0);
    mx = max(mx, ml[r].x);
  }
  mx = subgroupMax(mx);
  Probe2(5);  // (m, l) loaded, the maximum
  float den = 0.0;
  [[unroll]] for (uint r = 0; r < 8; ++r) {
    const uint s = gl_SubgroupInvocationID + gl_SubgroupSize * r;
    if (s < nact) {
      const float w = exp(ml[r].x - mx);
      if (gl_SubgroupID == 0) sw[s] = w;
      den = fma(ml[r].y, w, den);
    }
  }
  den = subgroupAdd(den);
  barrier();
  Probe2(6);  // the weights published
  [[unroll]] for (uint c = 0; c < NC; ++c) {
    const uint ui = u0 + WG * c;
    if (ui >= NU) continue;
    vec4 acc = vec4(0.0);
    [[unroll]] for (uint u = 0; u < MB; ++u)
      if (u < nact) acc = fma(v[c][u], vec4(sw[u]), acc);
    for (uint s0 = MB; s0 < nact; s0 += MB) {
      vec4 w2[16];
      [[unroll]] for (uint u = 0; u < MB; ++u)
        w2[u] = s0 + u < nact ? PartialAt((base + s0 + u) * PR + W * ui) : vec4(0.0);
      [[unroll]] for (uint u = 0; u < MB; ++u)
        if (s0 + u < nact) acc = fma(w2[u], vec4(sw[s0 + u]), acc);
    }
    if (W == 4) o4[(h * HD) / 4 + ui] = acc / den;
    else o[h * HD + ui] = acc.x / den;
  }
}
void main() {
  Probe(0);
  Probe2(0);
  const uint tid = gl_LocalInvocationID.x;
  const uint h = gl_WorkGroupID.x * HPW, sp = gl_WorkGroupID.z;  // (h: the first head)
  const uint kvh = h / (p.nh / p.nkv);
  const uint width = p.nkv * HD;
  const uint rpg = gl_SubgroupSize / RL;  // row groups per subgroup
  const uint rl = gl_SubgroupInvocationID % RL;
  const uint rg = gl_SubgroupID * rpg + gl_SubgroupInvocationID / RL;
  const uint khead = kvh * HD;  // the K/V head's dim 0 in a cache row

  // Everything the workgroup reads, issued before any of it is used: first what does not depend
  // on the position (the head's q, the norm weights, the new K/V row: loaded while the position's
  // load and the split arithmetic run), then the rotation and the first block's keys and values.
  // The lane's D values of the vector at base (a head of q, a norm weight, the new K/V row, a
  // cache row's K/V head; a multiple of 4 with VEC); zeros where ok is false.
#define LOAD_ROW(dst, buf, buf4, base, ok)                                   \
  if (VEC != 0) {                                                            \
    [[unroll]] for (uint g = 0; g < D / 4; ++g) {                            \
      const vec4 t = (ok) ? buf4[(base) / 4 + rl + RL * g] : vec4(0.0);      \
      [[unroll]] for (uint c = 0; c < 4; ++c) dst[4 * g + c] = t[c];         \
    }                                                                        \
  } else {                                                                   \
    [[unroll]] for (uint d = 0; d < D; ++d) dst[d] = (ok) ? buf[(base) + rl + RL * d] : 0.0; \
  }
#define LOAD_HEAD(dst, buf, buf4, base) LOAD_ROW(dst, buf, buf4, base, true)
  float qv[HPW][D], qw[D];
  // (every split loads the new K/V row of a layer that writes it; the one holding the new
  // position uses it)
  const bool kv_new = ROPE != 0 && p.kv_new != 0;
  float kn_[D], vn_[D], kw_[D];
  if (MODE != 2) {
    [[unroll]] for (uint i = 0; i < HPW; ++i) {
      LOAD_HEAD(qv[i], q, q4, (h + i) * HD);
    }
    if (ROPE != 0) LOAD_HEAD(qw, qn, qn4, 0);
    if (kv_new) {
      LOAD_HEAD(kn_, kt, kt4, khead);
      LOAD_HEAD(vn_, vt, vt4, khead);
      if (p.has_kn != 0) {
        LOAD_HEAD(kw_, kn, kn4, 0);
      } else {
        [[unroll]] for (uint d = 0; d < D; ++d) kw_[d] = 1.0;
      }
    }
  }
  const uint pos = step.pos0;
  const uint first = (p.window > 0 && pos + 1 > p.window) ? pos + 1 - p.window : 0;
  const uint nkeys = pos + 1 - first;
  // Whole blocks per split (the leading splits hold the keys).
  const uint per = U * ((nkeys + U * p.splits - 1) / (U * p.splits));
  const uint nact = (nkeys + per - 1) / per;
  if (MODE == 2) {
    if (nact > 1) Merge(h, nact);
    return;
  }
  const uint jb = first + sp * per;
  if (jb > pos) return;  // a split without keys (uniform over the workgroup)
  Probe2(1);  // the position loaded (the branch above waits for it)
  const uint je = min(pos + 1, jb + per);
  vec2 cs[HALF];
  if (ROPE != 0) {
    if (VEC != 0 && p.rot % 4 == 0) {
      // Four consecutive pairs' (cos, sin) in two 16-byte loads.
      [[unroll]] for (uint g = 0; g < HALF / 4; ++g) {
        const uint k0 = 4 * rl + 4 * RL * g;
        const uint e = (pos * p.rot + k0) / 2;
        const bool inr = k0 < p.rot;
        const vec4 a = inr ? rope4[e] : vec4(1.0, 0.0, 1.0, 0.0);
        const vec4 b = inr ? rope4[e + 1] : vec4(1.0, 0.0, 1.0, 0.0);
        cs[4 * g] = a.xy;
        cs[4 * g + 1] = a.zw;
        cs[4 * g + 2] = b.xy;
        cs[4 * g + 3] = b.zw;
      }
    } else {
      [[unroll]] for (uint d = 0; d < HALF; ++d) {
        const uint k = Dim(rl, d);
        cs[d] = k < p.rot ? rope[pos * p.rot + k] : vec2(1.0, 0.0);
      }
    }
  }
  const bool has_new = kv_new && je == pos + 1;
  // The key loop's keys are [jb, jl): the new key (in the split holding the position of a layer
  // that writes its K/V) starts row group 0's state before the loop, so the loop has no per-key
  // select of the new row and the new row's registers are free in it (2.28 against 2.47 ms per
  // token at 32K context on the H200, bench/journal/2026-11-sessions.md twenty-first session).
  const uint jl = has_new ? pos : je;
  float kr[KW][D], vr[KW][D];
  uint b0 = jb;
  uint rbc = b0 % p.ring;  // b0's ring row
  {
    const uint rb = rbc;
    [[unroll]] for (uint k = 0; k < KW; ++k) {
      const uint off = rg * KW + k, row = CacheRow(b0, rb, off);
      const bool ok = b0 + off < jl;
      LOAD_ROW(kr[k], kc, kc4, row * width + khead, ok);
      LOAD_ROW(vr[k], vc, vc4, row * width + khead, ok);
    }
  }
  Probe(1);  // every load issued
  Probe2(2);
  if (ROPE != 0) {
    [[unroll]] for (uint i = 0; i < HPW; ++i) NormRope(qv[i], qw, true, true, cs, rl);
    Probe2(3);  // q normalized and rotated
    if (has_new) {
      NormRope(kn_, kw_, p.has_kn != 0, true, cs, rl);
      NormRope(vn_, kw_, false, false, cs, rl);
      // The new row for later steps (no one else reads it in this step).
      if (rg == 0) {
        const uint crow = (pos % p.ring) * width + khead;
        [[unroll]] for (uint d = 0; d < D; ++d) {
          kcw[crow + Dim(rl, d)] = kn_[d];
          vcw[crow + Dim(rl, d)] = vn_[d];
        }
      }
    }
  }

  Probe(2);  // q (and the new row) normalized and rotated
  float m[HPW], l[HPW];
  float acc[HPW][D];
  [[unroll]] for (uint i = 0; i < HPW; ++i) {
    m[i] = kNegInf;
    l[i] = 0.0;
    [[unroll]] for (uint d = 0; d < D; ++d) acc[i][d] = 0.0;
  }
  if (has_new) {
    // The new key's score (every row group computes it, row group 0 keeps it) and weight e^0 = 1.
    [[unroll]] for (uint i = 0; i < HPW; ++i) {
      float a = 0.0;
      [[unroll]] for (uint d = 0; d < D; ++d) a = fma(qv[i][d], kn_[d], a);
      const float sn = RowSum(a);
      if (rg == 0) {
        m[i] = sn;
        l[i] = 1.0;
        [[unroll]] for (uint d = 0; d < D; ++d) acc[i][d] = vn_[d];
      }
    }
  }
  while (b0 < jl) {
    float s[HPW][KW];
    [[unroll]] for (uint i = 0; i < HPW; ++i)
      [[unroll]] for (uint k = 0; k < KW; ++k) {
        float a = 0.0;
        [[unroll]] for (uint d = 0; d < D; ++d) a = fma(qv[i][d], kr[k][d], a);
        s[i][k] = RowSum(a);
      }
    if (b0 == jb) Probe(3);  // the first block's scores
    // The next block's keys, loaded while this block's softmax and values run; its ring row by a
    // compare (a division per block cost ~27 us per token at 4,096 context).
    const uint nb = b0 + U;
    const uint rbn = rbc + U >= p.ring ? rbc + U - p.ring : rbc + U;  // (unused where ring < U)
    float vnx[KW][D];  // VPF: the next block's V rows
    if (nb < jl) {
      [[unroll]] for (uint k = 0; k < KW; ++k) {
        const uint off = rg * KW + k, row = CacheRow(nb, rbn, off);
        LOAD_ROW(kr[k], kc, kc4, row * width + khead, nb + off < jl);
        if (VPF != 0) {
          LOAD_ROW(vnx[k], vc, vc4, row * width + khead, nb + off < jl);
        }
      }
    }
    [[unroll]] for (uint i = 0; i < HPW; ++i) {
      float bm = kNegInf;
      [[unroll]] for (uint k = 0; k < KW; ++k)
        if (b0 + rg * KW + k < jl) bm = max(bm, s[i][k]);
      if (bm != kNegInf) {  // the row group has keys in this block
        const float mn = max(m[i], bm);
        const float corr = m[i] == kNegInf ? 0.0 : exp(m[i] - mn);
        float w[KW];
        float ws = 0.0;
        [[unroll]] for (uint k = 0; k < KW; ++k) {
          w[k] = b0 + rg * KW + k < jl ? exp(s[i][k] - mn) : 0.0;
          ws += w[k];
        }
        l[i] = l[i] * corr + ws;
        [[unroll]] for (uint d = 0; d < D; ++d) {
          float a = acc[i][d] * corr;
          [[unroll]] for (uint k = 0; k < KW; ++k) a = fma(w[k], vr[k][d], a);
          acc[i][d] = a;
        }
        m[i] = mn;
      }
    }
    b0 = nb;
    rbc = rbn;
    if (b0 >= jl) break;
    if (VPF != 0) {
      [[unroll]] for (uint k = 0; k < KW; ++k)
        [[unroll]] for (uint d = 0; d < D; ++d) vr[k][d] = vnx[k][d];
      continue;
    }
    [[unroll]] for (uint k = 0; k < KW; ++k) {
      const uint off = rg * KW + k, row = CacheRow(b0, rbc, off);
      LOAD_ROW(vr[k], vc, vc4, row * width + khead, b0 + off < jl);
    }
  }

  Probe(4);  // every block
  // The row groups' states merged: this split's (M, L, o) of each of its heads.
  [[unroll]] for (uint i = 0; i < HPW; ++i) {
    if (rl == 0) {
      rg_m[i * NRG + rg] = m[i];
      rg_l[i * NRG + rg] = l[i];
    }
    [[unroll]] for (uint d = 0; d < D; ++d) rg_acc[(i * NRG + rg) * HD + Dim(rl, d)] = acc[i][d];
  }
  barrier();
  float M[HPW], L[HPW];
  [[unroll]] for (uint i = 0; i < HPW; ++i) {
    M[i] = kNegInf;
    [[unroll]] for (uint g = 0; g < NRG; ++g) M[i] = max(M[i], rg_m[i * NRG + g]);
    L[i] = 0.0;
    [[unroll]] for (uint g = 0; g < NRG; ++g)
      if (rg_l[i * NRG + g] > 0.0) L[i] = fma(rg_l[i * NRG + g], exp(rg_m[i * NRG + g] - M[i]), L[i]);
  }
  const uint NC = (HD + WG - 1) / WG;
  [[unroll]] for (uint hi = 0; hi < HPW; ++hi) {
    const uint ob = (h + hi) * p.splits + sp;
    [[unroll]] for (uint c = 0; c < NC; ++c) {
      const uint i = tid + WG * c;
      if (i >= HD) continue;
      float a = 0.0;
      [[unroll]] for (uint g = 0; g < NRG; ++g) {
        const uint rgi = hi * NRG + g;
        if (rg_l[rgi] > 0.0) a = fma(rg_acc[rgi * HD + i], exp(rg_m[rgi] - M[hi]), a);
      }
      if (nact == 1) o[(h + hi) * HD + i] = a / L[hi];
      else po[ob * PR + i] = a;
    }
  }
  Probe(5);  // the split's partials
  if (nact == 1) return;
  if (tid == 0) {
    [[unroll]] for (uint i = 0; i < HPW; ++i) {
      po[MlAt(h + i, sp)] = M[i];
      po[MlAt(h + i, sp) + 1] = L[i];
    }
  }
  if (MODE == 1) return;
  if (FENCE != 0) {
    // The workgroup's partials ordered before invocation 0's release, its acquire before the
    // workgroup's merge loads.
    const int sem = gl_StorageSemanticsBuffer | gl_StorageSemanticsShared;
    controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, sem, gl_SemanticsAcquireRelease);
    if (tid == 0)
      s_last = atomicAdd(cnt[h], 1u, gl_ScopeDevice, gl_StorageSemanticsBuffer,
                         gl_SemanticsAcquireRelease) == nact - 1;
    controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, sem, gl_SemanticsAcquireRelease);
  } else {
    memoryBarrierBuffer();
    barrier();
    if (tid == 0) s_last = atomicAdd(cnt[h], 1u) == nact - 1;
    barrier();
  }
  Probe(6);  // arrival counted
  Probe2(4);
  if (!s_last) return;
  if (FENCE == 0) memoryBarrierBuffer();
  [[unroll]] for (uint i = 0; i < HPW; ++i) {
    if (i > 0) barrier();  // (the previous head's split weights read)
    Merge(h + i, nact);
  }
  if (tid == 0) cnt[h] = 0;
  Probe(7);  // merged
  Probe2(7);
}
