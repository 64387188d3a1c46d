#version 450
// Prefill attention on matrix units (GL_NV_cooperative_matrix, 16x16x16 f16 -> f32), flash-style:
// a workgroup takes BR = 32 query rows of one K/V head, the rows being (token, query head of the
// group) pairs (32 / group consecutive tokens, every query head of the group), so each K/V row it
// stages serves all of them. Keys go in blocks of BC = 64 over the union of the rows' ranges (a row
// masks the keys outside its own causal / sliding range), each workgroup starting at a rotated
// block (ROT) so the workgroups running at once read different rows:
//   S = q K^T on the units, q and K as hi + lo f16 terms (~22 significant bits: hi rounded to 11
//     bits by integer operations, lo = f16(x - hi)), three products per 16-column step (hi hi,
//     hi lo, lo hi), the hi x hi products summed apart from the cross terms (ACC 1) and each
//     64-column chunk's sums added into f32 running sums by ordinary adds (the units' own
//     accumulation rounds coarser: ADD_INTO below);
//   the rows' online softmax in f32 (max, exp, sum), as transformers' eager attention;
//   O = O c + P V with P and V split the same way, each block's products added into the f32 O.
// q comes from split_f16.comp (QROWS 1: rows in [K/V head][token][group] order, each scaled by its
// own power of two, ts, which S is multiplied by); K / V are the f32 cache rows, split as they are
// staged in shared memory (K chunks of 64 keys x 64 dims with the rows' q chunk, then V chunks),
// the next chunk's global loads issued before the current chunk's products. Element positions of
// a 16 x 16 f32 fragment (implementation-defined, the same for every fragment of the type) come
// from two index fragments (row and column numbers loaded as matrices). Values must fit f16: q is
// scaled per row, K and V are normalized rows (the host checks the K norm's weights; V's norm has
// none). Needs subgroups of 32 (8 per workgroup). Built as attention_cm{1,4,8}: head dims up to
// 64 NCH.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(local_size_x = 256) in;
// Where the hi x hi products are summed (ADD_INTO below): 0 with the cross terms inside the units
// over a chunk, 1 apart from them inside the units over a chunk, 2 into f32 sums every 16-column
// step.
layout(constant_id = 1) const uint ACC = 1;
layout(constant_id = 2) const uint ROT = 1;
// BIDIR 1 (the vision tower): every query row sees every key 0 .. ring - 1 (no causal or window
// mask; the ring is the image's keys), and the queries are p.m tokens (a chunk of the image: q's
// split rows and the output bound at the chunk) instead of step.m.
layout(constant_id = 3) const uint BIDIR = 0;
layout(std430, binding = 0) readonly buffer QH { uvec4 qh[]; };
layout(std430, binding = 1) readonly buffer KC { vec4 kc4[]; };
layout(std430, binding = 2) readonly buffer VC { vec4 vc4[]; };
layout(std430, binding = 3) readonly buffer QL { uvec4 ql[]; };
layout(std430, binding = 4) readonly buffer TS { float ts[]; };
layout(std430, binding = 5) writeonly buffer O { float o[]; };

layout(push_constant) uniform P {
  uint nh, nkv, hd, ring, window, q_stride;  // q_stride: the output's row stride (floats)
  uint qld;  // uvec4 per q row of qh / ql
  uint m;    // BIDIR: query tokens
} p;

uint Tokens() { return BIDIR == 1 ? p.m : step.m; }

#ifndef NCH
#define NCH 4
#endif
const uint BR = 32, BC = 64, DC = 64;  // query rows, keys per block, dims per staged chunk
const uint LDK = DC / 8 + 1;           // uvec4 per staged K / V row (8 halves each), padded
const uint LDP = BC / 8 + 1;           // uvec4 per P row
const uint LDS = BC + 4;               // floats per S row

shared uvec4 kvs[2 * BC * LDK];  // hi rows then lo rows, [key][dim]
shared uvec4 ps[2 * BR * LDP];   // P hi then lo, [row][key]; q chunks (LDP == LDK) in the S phase
shared float sf[BR * LDS];       // S, [row][key]; the index fragments at the start
shared float corr_sh[BR], l_sh[BR], ts_sh[BR];

#define F16M fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define F32M fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

// hi (11 significant bits, by integer rounding) and lo terms of two values, packed as f16 pairs.
uvec2 Split2(vec2 v) {
  const vec2 hi = uintBitsToFloat((floatBitsToUint(v) + 0x1000u) & 0xFFFFE000u);
  return uvec2(packHalf2x16(hi), packHalf2x16(v - hi));
}

uint RingSlot(uint j) { return j % p.ring; }

// The units' accumulation rounds coarser than f32 adds (linear_cm.comp): each chunk's sums (and
// with ACC 2 each step's hi x hi sums) go into f32 running sums by element-wise adds (the matrix +
// operator crashes glslang 12's optimizer).
#define ADD_INTO(dst, src)                                   \
  [[unroll]] for (uint e_ = 0; e_ < 8; ++e_) {               \
    if (e_ < (src).length()) (dst)[e_] += (src)[e_];         \
  }
#define ACC_HH(dst, hh, cross, a, b)                         \
  if (ACC == 2) {                                            \
    const F32M hh_ = coopMatMulAddNV(a, b, F32M(0.0));       \
    ADD_INTO(dst, hh_);                                      \
  } else if (ACC == 1) {                                     \
    hh = coopMatMulAddNV(a, b, hh);                          \
  } else {                                                   \
    cross = coopMatMulAddNV(a, b, cross);                    \
  }

void main() {
  const uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID;
  const uint kvh = gl_WorkGroupID.y;
  const uint group = p.nh / p.nkv, tpw = BR / group;  // tokens per workgroup
  const uint t0 = gl_WorkGroupID.x * tpw;
  const uint tend = min(t0 + tpw, Tokens());  // past the last valid token
  const uint qrow0 = (kvh * Tokens() + t0) * group;
  const uint hd = p.hd, width = p.nkv * hd;
  const uint lo = BIDIR == 0 && p.window > 0 && step.pos0 + t0 + 1 > p.window
                      ? step.pos0 + t0 + 1 - p.window
                      : 0u;
  const uint hi = BIDIR == 1 ? p.ring - 1 : step.pos0 + tend - 1;

  // Index fragments: element e of any F32M lies at row ridx[e], column cidx[e] (cidx loaded
  // after the key loop, where the output needs it: fewer registers held through the loop).
  F32M ridx, cidx;
  sf[tid] = float(tid / 16);
  barrier();
  coopMatLoadNV(ridx, sf, 0, 16, false);
  if (tid < BR)
    ts_sh[tid] = tid / group < tpw && t0 + tid / group < Tokens() ? ts[qrow0 + tid] : 0.0;

  // The K / V chunk (keys b .. b + 63, dims 64 c ..) as 8 floats x 2 per invocation; zeros past
  // the head dim and past the last key.
  // With a K chunk, the rows' q chunk (hi, lo: row tid / 8, dims 64 c + 8 (tid % 8) ..), staged
  // in P's place (P is written after the block's last K chunk and read before the next block's
  // first).
  vec4 reg[2][2];
  uvec4 qreg[2];
#define LOAD_TILE(b_, isv_, c_)                                                       \
  [[unroll]] for (uint u = 0; u < 2; ++u) {                                           \
    const uint i = tid + 256 * u, key = (b_) + i / 8, d0 = (c_) * DC + 8 * (i % 8);   \
    const uint base = (RingSlot(key) * width + kvh * hd + d0) / 4;                    \
    [[unroll]] for (uint w = 0; w < 2; ++w) {                                         \
      const bool ok = key <= hi && d0 + 4 * w < hd;                                   \
      reg[u][w] = ok ? ((isv_) ? vc4[base + w] : kc4[base + w]) : vec4(0.0);          \
    }                                                                                 \
  }                                                                                   \
  if (!(isv_)) {                                                                      \
    const uint qi_ = (qrow0 + tid / 8) * p.qld + (c_) * (DC / 8) + tid % 8;           \
    qreg[0] = qh[qi_];                                                                \
    qreg[1] = ql[qi_];                                                                \
  }
#define STORE_TILE(isv_)                                                          \
  [[unroll]] for (uint u = 0; u < 2; ++u) {                                       \
    const uint i = tid + 256 * u, key = i / 8, g = i % 8;                         \
    const uvec2 a = Split2(reg[u][0].xy), b2 = Split2(reg[u][0].zw);              \
    const uvec2 c2 = Split2(reg[u][1].xy), d2 = Split2(reg[u][1].zw);             \
    kvs[key * LDK + g] = uvec4(a.x, b2.x, c2.x, d2.x);                            \
    kvs[(BC + key) * LDK + g] = uvec4(a.y, b2.y, c2.y, d2.y);                     \
  }                                                                               \
  if (!(isv_)) {                                                                  \
    ps[(tid / 8) * LDP + tid % 8] = qreg[0];                                      \
    ps[(BR + tid / 8) * LDP + tid % 8] = qreg[1];                                 \
  }

  // This subgroup's tiles: S tile (si, sj) of the block; O tile (si, sj) of each dim chunk.
  const uint si = sg / 4, sj = sg % 4;
  F32M oacc[NCH];
  [[unroll]] for (uint c = 0; c < NCH; ++c) oacc[c] = F32M(0.0);
  // Softmax: row tid / 8, keys 8 (tid % 8) .. + 7.
  const uint srow = tid / 8, spart = tid % 8;
  const uint stok = t0 + srow / group;
  const bool svalid = srow / group < tpw && stok < Tokens();
  const uint spos = step.pos0 + stok;
  const uint sfirst = (p.window > 0 && spos + 1 > p.window) ? spos + 1 - p.window : 0u;
  const float kNegInf = -1.0 / 0.0;
  float m_run = kNegInf, l_run = 0.0;

  // Blocks in a rotated order (ROT 1): workgroup w starts at block w mod nb and wraps, so the
  // workgroups running at once read different K / V rows (the softmax is online: any order).
  const uint nb = lo <= hi ? (hi - lo) / BC + 1 : 0u;
  const uint rot = ROT == 1 && nb > 0 ? gl_WorkGroupID.x % nb : 0u;
  if (nb > 0) LOAD_TILE(lo + rot * BC, false, 0);
  for (uint bi = 0; bi < nb; ++bi) {
    const uint b = lo + ((bi + rot) % nb) * BC;
    const uint bnext = lo + ((bi + 1 + rot) % nb) * BC;
    F32M stot = F32M(0.0);
    [[unroll]] for (uint c = 0; c < NCH; ++c) {
      barrier();
      STORE_TILE(false);
      barrier();
      if (c + 1 < NCH) {
        LOAD_TILE(b, false, c + 1);
      } else {
        LOAD_TILE(b, true, 0);
      }
      F32M hh = F32M(0.0), cross = F32M(0.0);
      [[unroll]] for (uint ks = 0; ks < DC / 16; ++ks) {
        F16M qa, qb, ka, kb;
        coopMatLoadNV(qa, ps, (16 * si) * LDP + 2 * ks, LDP, false);
        coopMatLoadNV(qb, ps, (BR + 16 * si) * LDP + 2 * ks, LDP, false);
        coopMatLoadNV(ka, kvs, (16 * sj) * LDK + 2 * ks, LDK, true);
        coopMatLoadNV(kb, kvs, (BC + 16 * sj) * LDK + 2 * ks, LDK, true);
        ACC_HH(stot, hh, cross, qa, ka);
        cross = coopMatMulAddNV(qa, kb, cross);
        cross = coopMatMulAddNV(qb, ka, cross);
      }
      if (ACC == 1) ADD_INTO(stot, hh);
      ADD_INTO(stot, cross);
    }
    coopMatStoreNV(stot, sf, (16 * si) * LDS + 16 * sj, LDS, false);
    barrier();
    {
      float s[8], pv[8];
      float bm = kNegInf;
      [[unroll]] for (uint k = 0; k < 8; ++k) {
        const uint j = b + 8 * spart + k;
        const bool ok = svalid && (BIDIR == 1 ? j <= hi : j <= spos && j >= sfirst);
        s[k] = ok ? sf[srow * LDS + 8 * spart + k] * ts_sh[srow] : kNegInf;
        bm = max(bm, s[k]);
      }
      bm = max(bm, subgroupShuffleXor(bm, 1));
      bm = max(bm, subgroupShuffleXor(bm, 2));
      bm = max(bm, subgroupShuffleXor(bm, 4));
      const float mn = max(m_run, bm);
      const float corr = m_run == kNegInf ? 0.0 : exp(m_run - mn);
      float sum = 0.0;
      [[unroll]] for (uint k = 0; k < 8; ++k) {
        pv[k] = s[k] == kNegInf ? 0.0 : exp(s[k] - mn);
        sum += pv[k];
      }
      sum += subgroupShuffleXor(sum, 1);
      sum += subgroupShuffleXor(sum, 2);
      sum += subgroupShuffleXor(sum, 4);
      l_run = l_run * corr + sum;
      m_run = mn;
      if (spart == 0) corr_sh[srow] = corr;
      uvec4 ph, pl;
      [[unroll]] for (uint q = 0; q < 4; ++q) {
        const uvec2 v = Split2(vec2(pv[2 * q], pv[2 * q + 1]));
        ph[q] = v.x;
        pl[q] = v.y;
      }
      ps[srow * LDP + spart] = ph;
      ps[(BR + srow) * LDP + spart] = pl;
    }
    [[unroll]] for (uint c = 0; c < NCH; ++c) {
      barrier();
      STORE_TILE(true);
      barrier();
      if (c + 1 < NCH) {
        LOAD_TILE(b, true, c + 1);
      } else if (bi + 1 < nb) {
        LOAD_TILE(bnext, false, 0);
      }
      F32M acc = F32M(0.0), hh = F32M(0.0), cross = F32M(0.0);
      [[unroll]] for (uint ks = 0; ks < BC / 16; ++ks) {
        F16M pa, pb, va, vb;
        coopMatLoadNV(pa, ps, (16 * si) * LDP + 2 * ks, LDP, false);
        coopMatLoadNV(pb, ps, (BR + 16 * si) * LDP + 2 * ks, LDP, false);
        coopMatLoadNV(va, kvs, (16 * ks) * LDK + 2 * sj, LDK, false);
        coopMatLoadNV(vb, kvs, (BC + 16 * ks) * LDK + 2 * sj, LDK, false);
        ACC_HH(acc, hh, cross, pa, va);
        cross = coopMatMulAddNV(pa, vb, cross);
        cross = coopMatMulAddNV(pb, va, cross);
      }
      if (ACC == 1) ADD_INTO(acc, hh);
      ADD_INTO(acc, cross);
      [[unroll]] for (uint e = 0; e < 8; ++e) {
        if (e < acc.length()) {
          const float cr = corr_sh[16 * si + uint(ridx[e])];
          oacc[c][e] = oacc[c][e] * cr + acc[e];
        }
      }
    }
  }
  if (spart == 0) l_sh[srow] = l_run;
  barrier();  // (every softmax's reads of sf are done)
  sf[tid] = float(tid % 16);
  barrier();
  coopMatLoadNV(cidx, sf, 0, 16, false);
  [[unroll]] for (uint c = 0; c < NCH; ++c) {
    [[unroll]] for (uint e = 0; e < 8; ++e) {
      if (e < oacc[c].length()) {
        const uint r = 16 * si + uint(ridx[e]), d = c * DC + 16 * sj + uint(cidx[e]);
        const uint tok = t0 + r / group;
        if (r / group < tpw && tok < Tokens() && d < hd) {
          const uint h = kvh * group + r % group;
          o[tok * p.q_stride + h * hd + d] = oacc[c][e] / l_sh[r];
        }
      }
    }
  }
}
