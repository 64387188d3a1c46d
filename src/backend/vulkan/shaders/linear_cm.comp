#version 450
// Prefill linears on matrix units (GL_NV_cooperative_matrix, 16x16x16 f16 -> f32), for the SRQ
// integer path of int2 / int4 / int8 weights. A workgroup of 8 subgroups computes BM rows (64;
// MM_SMALL 128) x BN tokens (128, or 64 for the fused gate/up pair; MM_SMALL 32), each subgroup 32
// rows x BN / (8 / (BM / 32)) tokens, over K tiles of 64 columns staged in shared memory
// as f16: weights decoded from their packed codes with the 0x6400 exponent trick (1024 + code is an
// exact f16, minus 1024 + offset); inputs come SRQ-quantized (int8 values as f16) from srq_quant.comp.
// The next K tile's global words are loaded into registers before the current tile's products.
// Exactness: every product is an integer (|w x| <= 2^14) and the matrix unit sums in f32; as long as
// every partial sum stays below 2^24 no bit is lost (integers below 2^24 are exact in f32, and the
// units align addends to the largest exponent). The host uses this kernel for int2/int4 only when
// max|w| * 128 * cols < 2^24; int8 weights move the f32 sums into int32 every 8 K tiles (512
// columns: |sum| <= 2^23). The result is the int32 dot product of linear.comp bit for bit, and the
// epilogues are linear.comp's (0 store, 1 gelu(gate) * up, 2 softcap, 3 gelu * aux).
// Dense weights (KIND 1 bf16, 2 f16): bf16 converted to f16 (exact for |w| in f16's normal range,
// 2^-14 .. 65504; smaller weights round to f16 subnormals, an absolute error below 2^-25), f16 as
// stored; the f32 inputs come from split_f16.comp as two f16 terms per value (hi + lo, ~22 bits)
// scaled by a power of two per token (binding 9, ts[t] = the inverse), each weight tile multiplied
// by both terms on the matrix units and each K tile's sums added into f32 running sums: f32-level
// results without integer exactness. Split K is not used (its integer atomics need integer sums).
// QDENSE 1 (the towers' quantized linears without SRQ scales: int2 / int4 / int8 codes with a scale
// per row): the codes decoded as for the SRQ path, the f32 inputs split as for the dense kinds, the
// running sums as the dense kinds', and each sum times the token's scale and the row's in f64 (as
// tower_gemm.comp's epilogue).
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 1) const uint KIND = 4;
layout(constant_id = 2) const uint EPI = 0;
// OCLAMP 1 (the vision tower's clippable linears): outputs clamped to [out_lo, out_hi].
layout(constant_id = 3) const uint OCLAMP = 0;
layout(constant_id = 4) const uint QDENSE = 0;

layout(std430, binding = 0) readonly buffer W0 { uint w0[]; };
layout(std430, binding = 1) readonly buffer S0 { float s0[]; };
layout(std430, binding = 2) readonly buffer X { float x[]; };
layout(std430, binding = 3) buffer Y { float y[]; };
layout(std430, binding = 4) readonly buffer W1 { uint w1[]; };
layout(std430, binding = 5) readonly buffer S1 { float s1[]; };
layout(std430, binding = 6) readonly buffer Aux { float aux[]; };
layout(std430, binding = 7) readonly buffer XQ0 { uvec4 xq0[]; };
layout(std430, binding = 8) readonly buffer XQ1 { uvec4 xq1[]; };
layout(std430, binding = 9) buffer Part { int part[]; };  // split K: int32 sums [t][row]
// Dense kinds: weights as 16-byte vectors (8 values), the token's scale as a float in part[t].
layout(std430, binding = 0) readonly buffer W0V { uvec4 w0v[]; };
layout(std430, binding = 4) readonly buffer W1V { uvec4 w1v[]; };

layout(push_constant) uniform P {
  uint rows, cols, wstride, x_stride, y_stride, y_off;
  float in_s0, out_s0, in_s1, out_s1;
  float cap;
  uint aux_stride, aux_off, x_row0, ntok;
  uint n, has_a, has_wa;
  float scale, eps, next_in_s;
  uint xq_ld;  // uvec4 per token row of xq0 / xq1
  uint kper;   // split K: K tiles per workgroup along z, sums added into part[] (0: no split)
  layout(offset = 116) float out_lo;  // OCLAMP (LinPush::cm_out_lo, cm_out_hi)
  float out_hi;
} p;

#ifndef MM_DUAL
#define MM_DUAL 1
#endif
const uint DUAL = MM_DUAL;
// Tile shapes (BM rows x BN tokens per workgroup of 8 subgroups, K tiles of BK columns; each
// subgroup WM rows x BN / (8 / (BM / WM)) tokens):
// - default: BM 64 x BN 128 (64 for the gate/up pair), BK 64, WM 32;
// - MM_SMALL (steps of at most 32 tokens: a batch's rows, short prompt chunks): 128 rows x 32
//   tokens, a quarter of the large tiles' padded products for such steps.
// (128 x 128 and 256 x 128 tiles with K tiles of 32 measured no faster on the H200, two
// shared-memory stages with K tiles of 32 slower: bench/journal/2026-12-04-linear-cm-khr.md, tags
// linear-cm-tiles-2026-12-04 and linear-cm-dbuf-2026-12-04.)
#ifdef MM_SMALL
const uint BM = 128, BK = 64, BN = 32, WM = 32;
#else
const uint BM = 64, BK = 64;
const uint BN = DUAL == 1 ? 128 : 64;
const uint WM = 32;
#endif
const uint SGM = BM / WM;  // subgroups along M (of 8)
const uint FM = WM / 16;   // 16-row tiles per subgroup
const bool DENSE = KIND == 1 || KIND == 2;         // dense weights (and inputs)
const bool QD = QDENSE == 1 && KIND >= 3;           // quantized weights, dense inputs
const bool DX = DENSE || QD;                        // inputs as hi and lo f16 terms
const bool INT8_SUMS = KIND == 5 && !QD;            // the SRQ int8 path's exact int32 sums
const bool DRAIN = DX;  // f32 running sums of the matrix units' sums (dense inputs)
const uint NB = DX ? 2 : DUAL;  // input tiles per K tile: one per weight set, or hi and lo
const uint SG_N = BN / (8 / SGM) / 16;  // 16-token tiles per subgroup
const uint KV = BK / 8;                 // uvec4 (8 halves) per staged row of a K tile
const uint LD = KV + 1;                 // padded against bank conflicts
const uint AU = BM * KV / 256;          // uvec4 per invocation per weight set per K tile
const uint BU = BN * KV / 256;          // ... per input set
const uint A_SIZE = DUAL * BM * LD;     // weights [d][row][k]
const uint B_SIZE = NB * BN * LD;       // inputs [s][token][k] (column-major K x N), per input scale
const uint FLUSH = 512 / BK;            // int8: K tiles per f32 partial sum (512 columns)
const uint DRAIN_TILES = 64 / BK;       // dense: K tiles per f32 running-sum addition (64 columns)
// (the epilogue's scratch, 2 x 64 uvec4 per subgroup, lies in the same array)
shared uvec4 sm[A_SIZE + B_SIZE > 8 * 128 ? A_SIZE + B_SIZE : 8 * 128];

#define F16M fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define F32M fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

uint ElemsPerWord() { return KIND == 3 ? 16 : KIND == 4 ? 8 : 4; }

// Two codes as f16 (1024 + c0, 1024 + c1), minus the format's offset: exact small integers.
uint PairToHalf(uint lo, uint hi, float16_t bias) {
  const f16vec2 v = unpackFloat2x16(lo | (hi << 16) | 0x64006400u) - f16vec2(bias);
  return packFloat2x16(v);
}

// 8 consecutive weights (starting at code j of word w, or of the word pair w / w2 for int8).
uvec4 Decode8(uint w, uint w2, uint j) {
  uvec4 r;
  if (KIND == 4) {  // nibbles, offset binary (code - 8)
    [[unroll]] for (uint i = 0; i < 4; ++i)
      r[i] = PairToHalf((w >> (8 * i)) & 15u, (w >> (8 * i + 4)) & 15u, float16_t(1032.0));
  } else if (KIND == 3) {  // crumbs, offset binary (code - 2), codes j .. j + 7
    const uint s = w >> (2 * j);
    [[unroll]] for (uint i = 0; i < 4; ++i)
      r[i] = PairToHalf((s >> (4 * i)) & 3u, (s >> (4 * i + 2)) & 3u, float16_t(1026.0));
  } else {  // int8 two's complement: (b ^ 0x80) = b + 128
    const uint a = w ^ 0x80808080u, b = w2 ^ 0x80808080u;
    r[0] = PairToHalf(a & 255u, (a >> 8) & 255u, float16_t(1152.0));
    r[1] = PairToHalf((a >> 16) & 255u, a >> 24, float16_t(1152.0));
    r[2] = PairToHalf(b & 255u, (b >> 8) & 255u, float16_t(1152.0));
    r[3] = PairToHalf((b >> 16) & 255u, b >> 24, float16_t(1152.0));
  }
  return r;
}

// Dense kinds: 8 consecutive values of a row (bf16 or f16 pairs) as 8 f16 values.
uvec4 LoadW8(uint d, uint row, uint c) {
  if (row >= p.rows || c >= p.cols) return uvec4(0);
  const uvec4 v = d == 0 ? w0v[(row * p.wstride + c / 2) / 4] : w1v[(row * p.wstride + c / 2) / 4];
  if (KIND == 2) return v;
  uvec4 r;
  [[unroll]] for (uint i = 0; i < 4; ++i)
    r[i] = packHalf2x16(vec2(uintBitsToFloat(v[i] << 16), uintBitsToFloat(v[i] & 0xFFFF0000u)));
  return r;
}

uint LoadW(uint d, uint row, uint wi) {
  if (row >= p.rows || wi >= p.wstride) return KIND == 5 ? 0u : KIND == 4 ? 0x88888888u : 0xAAAAAAAAu;
  return d == 0 ? w0[row * p.wstride + wi] : w1[row * p.wstride + wi];
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint sg = gl_SubgroupID;
  const uint sg_m = sg % SGM, sg_n = sg / SGM;
  const uint t0 = gl_WorkGroupID.x * BN, r0 = gl_WorkGroupID.y * BM;
  const float in_s[2] = float[2](p.in_s0, p.in_s1);
  const uint epw = ElemsPerWord();

  F32M acc[DUAL][FM][SG_N];
  [[unroll]] for (uint d = 0; d < DUAL; ++d)
    [[unroll]] for (uint i = 0; i < FM; ++i)
      [[unroll]] for (uint j = 0; j < SG_N; ++j) acc[d][i][j] = F32M(0.0);
  // int8: exact running sums per element of the accumulators (16x16 / 32 = 8 per invocation).
  int tot[DUAL][FM][SG_N][8];
  // Dense kinds: f32 running sums, each 64 columns' matrix-unit sums added with round-to-nearest
  // adds (the units' own accumulation rounds less accurately: only 64 columns of hi and lo stay
  // in them).
  float ftot[DUAL][FM][SG_N][8];
  if (INT8_SUMS || DRAIN) {
    [[unroll]] for (uint d = 0; d < DUAL; ++d)
      [[unroll]] for (uint i = 0; i < FM; ++i)
        [[unroll]] for (uint j = 0; j < SG_N; ++j)
          [[unroll]] for (uint e = 0; e < 8; ++e) {
            tot[d][i][j][e] = 0;
            ftot[d][i][j][e] = 0.0;
          }
  }

  const uint ktiles_all = (p.cols + BK - 1) / BK;
  const uint kbeg = p.kper > 0 ? gl_WorkGroupID.z * p.kper : 0;
  const uint ktiles = p.kper > 0 ? min(ktiles_all, kbeg + p.kper) : ktiles_all;  // end tile
  // Registers for one K tile: per weight set AU groups of 8 codes (int8: two words each) and
  // BU input vectors per input set.
  uint wr[DUAL][AU][2];
  uvec4 wv[DUAL][AU];  // dense kinds: 8 values as f16
  uvec4 xr[NB][BU];
  // Loads K tile kt into the registers.
#define LOAD_TILE(kt)                                                                  \
  {                                                                                    \
    const uint k0_ = (kt) * BK;                                                        \
    [[unroll]] for (uint d = 0; d < DUAL; ++d) {                                       \
      [[unroll]] for (uint u = 0; u < AU; ++u) {                                       \
        const uint i = tid + 256 * u;                                                  \
        const uint row = r0 + i / KV, c = k0_ + 8 * (i % KV);                          \
        if (DENSE) {                                                                   \
          wv[d][u] = LoadW8(d, row, c);                                                \
        } else {                                                                       \
          wr[d][u][0] = LoadW(d, row, KIND == 4 ? c / 8 : KIND == 3 ? c / 16 : c / 4); \
          wr[d][u][1] = KIND == 5 ? LoadW(d, row, c / 4 + 1) : 0u;                     \
        }                                                                              \
      }                                                                                \
    }                                                                                  \
    [[unroll]] for (uint s = 0; s < NB; ++s) {                                         \
      [[unroll]] for (uint u = 0; u < BU; ++u) {                                       \
        const uint i = tid + 256 * u;                                                  \
        const uint t = t0 + i / KV;                                                    \
        const uint xi = t * p.xq_ld + k0_ / 8 + i % KV;                                \
        xr[s][u] = t < p.ntok ? (s == 0 ? xq0[xi] : xq1[xi]) : uvec4(0);               \
      }                                                                                \
    }                                                                                  \
  }
  // Registers -> shared stage at `base_`: K tile kt_'s weights decoded (columns past the end
  // zeroed), inputs as loaded.
#define STAGE_TILE(kt_, base_)                                                               \
  {                                                                                          \
    const uint k0s_ = (kt_) * BK;                                                            \
    [[unroll]] for (uint d = 0; d < DUAL; ++d) {                                             \
      [[unroll]] for (uint u = 0; u < AU; ++u) {                                             \
        const uint i = tid + 256 * u;                                                        \
        const uint rr = i / KV, g = i % KV;                                                  \
        const uint c = k0s_ + 8 * g; /* first column of the group */                         \
        uvec4 h = uvec4(0);                                                                  \
        if (c < p.cols) {                                                                    \
          h = DENSE ? wv[d][u] : Decode8(wr[d][u][0], wr[d][u][1], KIND == 3 ? c % 16 : 0u); \
          if (c + 8 > p.cols) {                                                              \
            [[unroll]] for (uint q = 0; q < 4; ++q) {                                        \
              if (c + 2 * q >= p.cols)                                                       \
                h[q] = 0u;                                                                   \
              else if (c + 2 * q + 1 >= p.cols)                                              \
                h[q] &= 0xFFFFu;                                                             \
            }                                                                                \
          }                                                                                  \
        }                                                                                    \
        sm[(base_) + (d * BM + rr) * LD + g] = h;                                            \
      }                                                                                      \
    }                                                                                        \
    [[unroll]] for (uint s = 0; s < NB; ++s) {                                               \
      [[unroll]] for (uint u = 0; u < BU; ++u) {                                             \
        const uint i = tid + 256 * u;                                                        \
        sm[(base_) + A_SIZE + (s * BN + i / KV) * LD + i % KV] = xr[s][u];                   \
      }                                                                                      \
    }                                                                                        \
  }
  // The products of the stage at `base_`, then the int8 flush and the dense drain of tile kt_.
#define TILE_PRODUCTS(kt_, base_)                                                              \
  {                                                                                            \
    [[unroll]] for (uint ks = 0; ks < BK / 16; ++ks) {                                         \
      [[unroll]] for (uint d = 0; d < DUAL; ++d) {                                             \
        F16M a[FM];                                                                            \
        [[unroll]] for (uint i = 0; i < FM; ++i)                                               \
          coopMatLoadNV(a[i], sm, (base_) + (d * BM + sg_m * WM + 16 * i) * LD + 2 * ks, LD,    \
                        false);                                                                \
        /* input tiles: set d's (SRQ), or the hi and then the lo terms (dense inputs) */       \
        [[unroll]] for (uint s = DX ? 0 : d; s < (DX ? NB : d + 1); ++s) {                     \
          F16M b[SG_N];                                                                        \
          [[unroll]] for (uint j = 0; j < SG_N; ++j)                                           \
            coopMatLoadNV(b[j], sm,                                                            \
                          (base_) + A_SIZE + (s * BN + sg_n * SG_N * 16 + 16 * j) * LD + 2 * ks, \
                          LD, true);                                                           \
          [[unroll]] for (uint i = 0; i < FM; ++i)                                             \
            [[unroll]] for (uint j = 0; j < SG_N; ++j)                                         \
              acc[d][i][j] = coopMatMulAddNV(a[i], b[j], acc[d][i][j]);                        \
        }                                                                                      \
      }                                                                                        \
    }                                                                                          \
    if (INT8_SUMS && (((kt_) % FLUSH) == FLUSH - 1 || (kt_) + 1 == ktiles)) {                  \
      [[unroll]] for (uint d = 0; d < DUAL; ++d)                                               \
        [[unroll]] for (uint i = 0; i < FM; ++i)                                               \
          [[unroll]] for (uint j = 0; j < SG_N; ++j) {                                         \
            [[unroll]] for (uint e = 0; e < 8; ++e) {                                          \
              if (e < acc[d][i][j].length()) tot[d][i][j][e] += int(acc[d][i][j][e]);          \
            }                                                                                  \
            acc[d][i][j] = F32M(0.0);                                                          \
          }                                                                                    \
    }                                                                                          \
    if (DRAIN && (((kt_) % DRAIN_TILES) == DRAIN_TILES - 1 || (kt_) + 1 == ktiles)) {          \
      [[unroll]] for (uint d = 0; d < DUAL; ++d)                                               \
        [[unroll]] for (uint i = 0; i < FM; ++i)                                               \
          [[unroll]] for (uint j = 0; j < SG_N; ++j) {                                         \
            [[unroll]] for (uint e = 0; e < 8; ++e) {                                          \
              if (e < acc[d][i][j].length()) ftot[d][i][j][e] += acc[d][i][j][e];              \
            }                                                                                  \
            acc[d][i][j] = F32M(0.0);                                                          \
          }                                                                                    \
    }                                                                                          \
  }
  LOAD_TILE(kbeg);
#if defined(MM_PROBE)
  // (the lab's probe builds: MM_PROBE 1 stages the first K tile only, keeping the barriers;
  // 2 also drops the barriers after it: the products' own rate; results meaningless)
  STAGE_TILE(kbeg, 0u);
  barrier();
  for (uint kt = kbeg; kt < ktiles; ++kt) {
    if (MM_PROBE == 1 && kt > kbeg) barrier();
    TILE_PRODUCTS(kt, 0u);
    if (MM_PROBE == 1) barrier();
  }
#else
  for (uint kt = kbeg; kt < ktiles; ++kt) {
    STAGE_TILE(kt, 0u);
    barrier();
    if (kt + 1 < ktiles) LOAD_TILE(kt + 1);
    TILE_PRODUCTS(kt, 0u);
    barrier();
  }
#endif
  if (DRAIN) {
    [[unroll]] for (uint d = 0; d < DUAL; ++d)
      [[unroll]] for (uint i = 0; i < FM; ++i)
        [[unroll]] for (uint j = 0; j < SG_N; ++j)
          [[unroll]] for (uint e = 0; e < 8; ++e) {
            if (e < acc[d][i][j].length()) acc[d][i][j][e] = ftot[d][i][j][e];
          }
  }

  // Epilogue, one 16 x 16 tile at a time through the subgroup's scratch (column-major: lanes take
  // consecutive rows). int8 tiles go through scratch as two exact f32 halves (sum >> 12, sum & 4095).
  const uint lane = gl_SubgroupInvocationID;
  const uint scratch = sg * 2 * 64;  // 2 x 256 floats per subgroup
  const float out_s[2] = float[2](p.out_s0, p.out_s1);
  [[unroll]] for (uint i = 0; i < FM; ++i) {
    [[unroll]] for (uint j = 0; j < SG_N; ++j) {
      int vi[DUAL][8];
      float vf[DUAL][8];  // dense kinds
      [[unroll]] for (uint d = 0; d < DUAL; ++d) {
        if (INT8_SUMS) {
          F32M hi = acc[d][i][j], lo = acc[d][i][j];
          [[unroll]] for (uint e = 0; e < 8; ++e) {
            if (e < hi.length()) {
              hi[e] = float(tot[d][i][j][e] >> 12);
              lo[e] = float(tot[d][i][j][e] & 4095);
            }
          }
          coopMatStoreNV(hi, sm, scratch, 4, true);
          coopMatStoreNV(lo, sm, scratch + 64, 4, true);
        } else {
          coopMatStoreNV(acc[d][i][j], sm, scratch, 4, true);
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        [[unroll]] for (uint e = 0; e < 8; ++e) {
          const uint f = lane + 32 * e;  // float index: token (f / 16) x 16 + row (f % 16)
          const float v0 = uintBitsToFloat(sm[scratch + f / 4][f % 4]);
          vf[d][e] = v0;
          if (INT8_SUMS) {
            const float v1 = uintBitsToFloat(sm[scratch + 64 + f / 4][f % 4]);
            vi[d][e] = int(v0) * 4096 + int(v1);
          } else {
            vi[d][e] = int(v0);
          }
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();
      }
      [[unroll]] for (uint e = 0; e < 8; ++e) {
        const uint f = lane + 32 * e;
        const uint row = r0 + sg_m * WM + 16 * i + f % 16;
        const uint t = t0 + sg_n * SG_N * 16 + 16 * j + f / 16;
        if (row >= p.rows || t >= p.ntok) continue;
        if (p.kper > 0) {  // split K: exact integer partial sums; linear_cm_epi finishes
          atomicAdd(part[t * p.rows + row], vi[0][e]);
          continue;
        }
        float v[2];
        [[unroll]] for (uint d = 0; d < DUAL; ++d) {
          float r;
          if (DENSE) {
            r = vf[d][e] * intBitsToFloat(part[t]);  // a power of two: exact
          } else if (QD) {
            const float rs = d == 0 ? s0[row] : s1[row];
            r = float(double(vf[d][e] * intBitsToFloat(part[t])) * double(rs));
          } else {
            const float rs = d == 0 ? s0[row] : s1[row];
            r = float(double(vi[d][e]) * double(in_s[d]) * double(rs));
          }
          if (out_s[d] > 0.0) r = Srq(r, out_s[d]);
          v[d] = r;
        }
        float outv = v[0];
        if (EPI == 1) outv = GeluTanh(v[0]) * v[DUAL - 1];
        if (EPI == 2 && p.cap > 0.0) outv = TanhClamped(ExactDiv(v[0], p.cap)) * p.cap;
        if (EPI == 3) outv = GeluTanh(v[0]) * aux[t * p.aux_stride + p.aux_off + row];
        if (OCLAMP == 1) outv = min(max(outv, p.out_lo), p.out_hi);
        y[t * p.y_stride + p.y_off + row] = outv;
      }
    }
  }
}
