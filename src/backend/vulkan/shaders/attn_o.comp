#version 450
// One-token decode: the attention's merge and the o projection over one head's columns in one
// kernel (GEMMA_VULKAN_ATTN_O). attn_fused (MODE 1) leaves each head's key-split partials; workgroup
// (row block rb, head h):
//   1. merges head h's partials as attn_fused's Merge does (the same f32 operations in the same
//      order: the same values), or reads the head's output where one split held every key;
//   2. quantizes them with o's SRQ input scale (as linear.comp's prologue);
//   3. multiplies them with o's rows [rb R, rb R + R) over the head's columns and adds each row's
//      int32 sum to pacc (copy h % COPIES) with an integer atomic: exact in any order, so the
//      heads' sums add up to o's own kernel's. The consumer (gate/up's prologue, linear.comp
//      PRO_T) applies o's row scales and output SRQ.
// The attention loses its arrival count and merge, o its own dispatch (bench/NOTES.md, nineteenth
// session). Every load that does not need the position (the partials, their (m, l), the weights)
// is issued before the position's: splits without keys hold stale partials, masked after.
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
// DP4A 1 (attn_o_dp, devices with VK_KHR_shader_integer_dot_product): the products as packed int8
// dot products (OpSDot) of the masked weight words (linear.comp FAST: an int2 / int4 code moved to
// a byte's top bits, 64 / 16 times its value) with the permuted input words; 0: the same bytes
// multiplied one by one. The same int32 sums.
#ifndef DP4A
#define DP4A 0
#endif
#if DP4A
#extension GL_EXT_spirv_intrinsics : require
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int SDot4(int a, int b, spirv_literal int fmt);
#endif
#include "common.glsl"
#define PROBE_BINDING 14
#include "probe.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint HD = 256;  // head dim
layout(constant_id = 2) const uint KIND = 4;  // o's weights: 3 int2, 4 int4, 5 int8
layout(constant_id = 3) const uint R = 64;    // o rows per workgroup
layout(constant_id = 4) const uint VEC = 1;   // attn_fused VEC: merge units of 4 dims
layout(constant_id = 5) const uint COPIES = 1;  // copies of the sums (linear.comp ACC_COPIES)
layout(constant_id = 6) const uint MB = 16;  // partials loaded before the position, then per round

layout(std430, binding = 0) readonly buffer W { uvec4 w[]; };     // o's rows (wstride words)
layout(std430, binding = 3) readonly buffer PO { float po[]; };   // attn_fused's partials
layout(std430, binding = 3) readonly buffer PO4 { vec4 po4[]; };
layout(std430, binding = 5) readonly buffer O { float oh[]; };    // [h][HD] where nact == 1
layout(std430, binding = 12) buffer PAcc { int pacc[]; };         // [copy][rows] o's sums

layout(push_constant) uniform P {
  uint splits;   // attn_fused's key splits
  uint window;   // the layer's window (0: full attention)
  uint ukeys;    // attn_fused's keys per block (row groups x KW)
  uint ml_base;  // attn_fused's (m, l) blocks
  uint rows;     // o's rows
  uint wstride;  // u32 words per row of o
  uint acc_stride;  // ints per copy of the sums
  float in_s;    // o's SRQ input scale
} p;

const uint WG = gl_WorkGroupSize.x;
const uint EPW = KIND == 3 ? 16 : KIND == 4 ? 8 : 4;  // elements per weight word
const uint NV = HD / EPW / 4;  // 16-byte weight vectors per row over one head's columns
const uint KV = (R * NV + WG - 1) / WG;  // ... per invocation
const uint MW = VEC != 0 ? 4 : 1;        // dims per merge unit
const uint NU = HD / MW;
const uint NCU = (NU + WG - 1) / WG;     // merge units per invocation
const float kNegInf = -1.0 / 0.0;

// The quantized head as packed int8 words, XPW per weight word, permuted as linear.comp's DP4A
// path: input word g of weight word i holds the elements whose codes the mask of group g moves
// into byte lanes (int2: crumbs g, g + 4, g + 8, g + 12; int4: nibbles g, g + 2, g + 4, g + 6;
// int8: the word's own four). Weight vector j's words at uvec4s XG c + j (c < XG): lanes reading
// consecutive vectors read consecutive 16-byte slots.
const uint XPW = EPW / 4;
const uint XG = XPW;  // 16-byte input slots per weight vector (4 words x XPW / 4)
shared uint xw[4 * XG * NV];
shared float sw[256];
shared int red[R * NV];

// Where element e (< HD) of the head goes: the uint index in xw and the byte.
uvec2 XSlot(uint e) {
  const uint wi = e / EPW, k = e % EPW;
  const uint g = KIND == 3 ? k & 3u : KIND == 4 ? k & 1u : 0u;
  const uint b = KIND == 3 ? k >> 2 : KIND == 4 ? k >> 1 : k;
  const uint wv = XPW * (wi % 4) + g;  // the input word within the vector's 4 XPW
  return uvec2(4 * ((wv / 4) * NV + wi / 4) + wv % 4, b);
}

// Weight word w's group-g lanes (64 / 16 times the int2 / int4 values; int8 as stored).
uint Mask(uint w, uint g) {
  if (KIND == 3) return ((w << (6 - 2 * g)) & 0xC0C0C0C0u) ^ 0x80808080u;
  if (KIND == 4) return (g == 0 ? (w << 4) & 0xF0F0F0F0u : w & 0xF0F0F0F0u) ^ 0x80808080u;
  return w;
}
int Dot4(uint a, uint b) {
#if DP4A
  return SDot4(int(a), int(b), 0);
#else
  int s = 0;
  [[unroll]] for (uint k = 0; k < 4; ++k)
    s += bitfieldExtract(int(a), int(8 * k), 8) * bitfieldExtract(int(b), int(8 * k), 8);
  return s;
#endif
}

// attn_fused's partial layout.
const uint PR = (HD + 31) / 32 * 32;
uint MlAt(uint h, uint s) { return p.ml_base + h * ((2 * p.splits + 31) / 32 * 32) + 2 * s; }
vec4 PartialAt(uint e) {
  if (MW == 4) return po4[e / 4];
  return vec4(po[e], 0.0, 0.0, 0.0);
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint rb = gl_WorkGroupID.x, h = gl_WorkGroupID.y;
  const uint row0 = rb * R;
  const uint base = h * p.splits;
  const uint np = min(p.splits, MB);
  Probe(0);
  for (uint i = tid; i < 4 * XG * NV; i += WG) xw[i] = 0u;

  // The first MB partials of the invocation's units, the lane's splits' (m, l) and the weights.
  vec4 v[2][MB];
  [[unroll]] for (uint c = 0; c < NCU; ++c) {
    const uint ui = tid + WG * c;
    [[unroll]] for (uint u = 0; u < MB; ++u)
      v[c][u] = ui < NU && u < np ? PartialAt((base + u) * PR + MW * ui) : vec4(0.0);
  }
  vec2 ml[8];
  [[unroll]] for (uint r = 0; r < 8; ++r) {
    const uint s = gl_SubgroupInvocationID + gl_SubgroupSize * r;
    ml[r] = s < p.splits ? vec2(po[MlAt(h, s)], po[MlAt(h, s) + 1]) : vec2(kNegInf, 0.0);
  }
  uvec4 wv[KV];
  const uint j = tid % NV;
  [[unroll]] for (uint k = 0; k < KV; ++k) {
    const uint vi = tid + WG * k, row = row0 + vi / NV;
    wv[k] = vi < R * NV && row < p.rows ? w[row * (p.wstride / 4) + h * NV + j] : uvec4(0u);
  }

  Probe(1);  // every position-independent load issued
  // attn_fused's split count for this position.
  const uint pos = step.pos0;
  const uint first = (p.window > 0 && pos + 1 > p.window) ? pos + 1 - p.window : 0;
  const uint nkeys = pos + 1 - first;
  const uint per = p.ukeys * ((nkeys + p.ukeys * p.splits - 1) / (p.ukeys * p.splits));
  const uint nact = (nkeys + per - 1) / per;

  // 1. The head's attention output (attn_fused's Merge).
  float outv[2][4];
  if (nact == 1) {
    [[unroll]] for (uint c = 0; c < NCU; ++c) {
      const uint ui = tid + WG * c;
      [[unroll]] for (uint e = 0; e < MW; ++e) outv[c][e] = ui < NU ? oh[h * HD + MW * ui + e] : 0.0;
    }
    barrier();  // (xw zeroed)
  } else {
    float mx = kNegInf;
    [[unroll]] for (uint r = 0; r < 8; ++r) {
      const uint s = gl_SubgroupInvocationID + gl_SubgroupSize * r;
      if (s >= nact) ml[r] = vec2(kNegInf, 0.0);
      mx = max(mx, ml[r].x);
    }
    mx = subgroupMax(mx);
    Probe(2);  // the (m, l) loaded
    float den = 0.0;
    [[unroll]] for (uint r = 0; r < 8; ++r) {
      const uint s = gl_SubgroupInvocationID + gl_SubgroupSize * r;
      if (s < nact) {
        const float wt = exp(ml[r].x - mx);
        if (gl_SubgroupID == 0) sw[s] = wt;
        den = fma(ml[r].y, wt, den);
      }
    }
    den = subgroupAdd(den);
    barrier();
    Probe(3);  // the split weights published
    [[unroll]] for (uint c = 0; c < NCU; ++c) {
      const uint ui = tid + WG * c;
      vec4 acc = vec4(0.0);
      [[unroll]] for (uint u = 0; u < MB; ++u)
        if (u < nact) acc = fma(v[c][u], vec4(sw[u]), acc);
      for (uint s0 = MB; s0 < nact; s0 += MB) {
        vec4 w2[MB];
        [[unroll]] for (uint u = 0; u < MB; ++u)
          w2[u] = ui < NU && s0 + u < nact ? PartialAt((base + s0 + u) * PR + MW * ui) : vec4(0.0);
        [[unroll]] for (uint u = 0; u < MB; ++u)
          if (s0 + u < nact) acc = fma(w2[u], vec4(sw[s0 + u]), acc);
      }
      if (MW == 4) {
        const vec4 o4 = acc / den;
        [[unroll]] for (uint e = 0; e < 4; ++e) outv[c][e] = o4[e];
      } else {
        outv[c][0] = acc.x / den;
      }
    }
  }

  // 2. Quantized with o's input scale (linear.comp's quantization).
  const float rs = SrqReciprocal(p.in_s);
  [[unroll]] for (uint c = 0; c < NCU; ++c) {
    const uint ui = tid + WG * c;
    if (ui < NU) {
      [[unroll]] for (uint e = 0; e < MW; ++e) {
        const uvec2 sl = XSlot(MW * ui + e);
        atomicOr(xw[sl.x], (uint(QuantizeSrqR(outv[c][e], p.in_s, rs)) & 0xFFu) << (8 * sl.y));
      }
    }
  }
  barrier();
  Probe(4);  // merged and quantized

  // 3. Each vector's products (4 words of EPW columns), a row's NV partial sums added in shared
  // memory, one atomic per row.
  [[unroll]] for (uint k = 0; k < KV; ++k) {
    const uint vi = tid + WG * k;
    if (vi >= R * NV) continue;
    int s = 0;
    [[unroll]] for (uint c = 0; c < XG; ++c) {
      const uint xb = 4 * (c * NV + j);
      const uvec4 x4 = uvec4(xw[xb], xw[xb + 1], xw[xb + 2], xw[xb + 3]);
      [[unroll]] for (uint q = 0; q < 4; ++q) {
        // input word 4 c + q of the vector: weight word (4 c + q) / XPW, group (4 c + q) % XPW
        const uint wq = (4 * c + q) / XPW, g = (4 * c + q) % XPW;
        s += Dot4(Mask(wv[k][wq], g), x4[q]);
      }
    }
    red[vi] = KIND == 3 ? s >> 6 : KIND == 4 ? s >> 4 : s;
  }
  barrier();
  Probe(5);  // the products
  for (uint r = tid; r < R; r += WG) {
    if (row0 + r >= p.rows) continue;
    int s = 0;
    for (uint q = 0; q < NV; ++q) s += red[r * NV + q];
    atomicAdd(pacc[(h % COPIES) * p.acc_stride + row0 + r], s);
  }
  Probe(6);  // the sums added
}
