#version 450
// The resident decode step: one dispatch of a fixed number of persistent workgroups (at most as
// many as the device runs at once) executes a one-token step's recorded operation list. Each
// operation is a dispatch of the multi-dispatch path (linear.comp, qkrope.comp, attention.comp,
// attn_combine.comp, resnorm.comp, ple.comp, logits_reduce.comp, ported here statement for
// statement so the results are the same bits); its workgroups become virtual workgroups taken
// round-robin, and a pipeline barrier of that path becomes a grid barrier (an atomic arrival
// counter the workgroups spin on). A grid barrier that waits longer than `spin_limit` polls (the
// workgroups are not all resident) sets the error word and lets every workgroup run to the end;
// the host then discards the step and falls back to the multi-dispatch path.
//
// Memory: binding 0 is the whole device pool (one buffer); operation bindings are word offsets
// into it. Weights are read through a read-only view (cached); everything a phase writes and a
// later phase reads goes through the coherent views. Binding 1 holds the operation list.
#extension GL_KHR_shader_subgroup_arithmetic : enable
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_shuffle : enable
#ifndef DP4A
#define DP4A 0
#endif
#if DP4A
#extension GL_EXT_spirv_intrinsics : require
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int SDot4(int a, int b, spirv_literal int fmt);
#endif

#ifndef PROFILE
#define PROFILE 0
#endif
#if PROFILE
#extension GL_EXT_shader_realtime_clock : require
#endif
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 1) const uint XQ_MAX = 1024;  // shared words of quantized linear inputs

layout(std430, binding = 0) readonly buffer MW { uvec4 mw[]; };
layout(std430, binding = 0) coherent buffer MF { float mf[]; };
layout(std430, binding = 0) coherent buffer MU { uint mu[]; };
layout(std430, binding = 0) coherent buffer MD { double md[]; };
layout(std430, binding = 0) coherent volatile buffer MV { uint mv[]; };
layout(std430, binding = 1) readonly buffer Ops { uint ops[]; };

layout(push_constant) uniform Push {
  uint nops;
  uint grid;        // word offset of {arrivals, error}
  uint spin_limit;  // polls per grid barrier before giving up
  uint warp_rows;   // SRQ linears: rows spread over subgroups (LinearWarpRows)
  uint prof;        // PROFILE: word offset of the device clock after each grid barrier
} pc;

// Operation record (64 words): kernel, grid x/y/z, flags (bit 0: grid barrier after), spec
// constants [5, 16) (constant_id order, [5] the local size), binding word offsets [16, 28),
// push constants [32, 64).
const uint OP_WORDS = 64;
const uint K_LINEAR = 0, K_LINEAR_DP = 1, K_QKROPE = 2, K_ATTENTION = 3, K_COMBINE = 4,
           K_RESNORM = 5, K_PLE = 6, K_LOGITS = 7;

const uint WG = 256;
uint ob;  // the current operation's first word
uint B[12];
uint PU(uint i) { return ops[ob + 32 + i]; }
float PF(uint i) { return uintBitsToFloat(ops[ob + 32 + i]); }
uint SP(uint i) { return ops[ob + 5 + i]; }

shared double red_d[128];
shared uint xq[XQ_MAX];
shared int red_i[2 * (WG / 4)];
shared float red_f[2 * (WG / 4)];
shared bool last_wg;
shared float xs[512];
shared vec4 sh4[WG];

double BlockSumD(double v) {
  double s = subgroupAdd(v);
  if (subgroupElect()) red_d[gl_SubgroupID] = s;
  barrier();
  double tot = 0.0LF;
  for (uint i = 0; i < gl_NumSubgroups; ++i) tot += red_d[i];
  barrier();
  return tot;
}

// ---------------------------------------------------------------- linear.comp (one token)
// push: rows cols wstride x_stride y_stride y_off in_s0 out_s0 in_s1 out_s1 cap aux_stride aux_off
//       x_row0 ntok n has_a has_wa scale eps next_in_s
// spec: [1] KIND [2] EPI [3] LANES [4] XWORDS [5] TOK (1) [6] VEC [7] TAIL [8] XQ
uint KIND, EPI, LANES, XWORDS, VEC, TAIL, XQM, DUAL;
bool LDP;
bool int_path0, int_path1;
float in_s0, in_s1;
bool IntPath(uint d) { return d == 0 ? int_path0 : int_path1; }

uint ElemsPerWord() {
  return KIND == 0 ? 1 : KIND == 1 || KIND == 2 ? 2 : KIND == 3 ? 16 : KIND == 4 ? 8 : 4;
}
int QElem(uint w, uint k) {
  if (KIND == 3) return int((w >> (2 * k)) & 3u) - 2;
  if (KIND == 4) return int((w >> (4 * k)) & 15u) - 8;
  return bitfieldExtract(int(w), int(8 * k), 8);
}
float DElem(uint w, uint k) {
  if (KIND == 0) return uintBitsToFloat(w);
  uint h = (w >> (16 * k)) & 0xFFFFu;
  if (KIND == 1) return uintBitsToFloat(h << 16);
  return unpackHalf2x16(h).x;
}
uint PermCol(uint i, uint b) {
  if (!LDP || KIND == 5) return 4 * i + b;
  if (KIND == 4) return 8 * (i >> 1) + (i & 1) + 2 * b;
  return 16 * (i >> 2) + (i & 3) + 4 * b;
}

void Accumulate(uint w, uint j, uint d, inout int acc_i, inout float acc_f) {
  const uint epw = ElemsPerWord();
  const uint c0 = j * epw;
  const bool quant = KIND >= 3;
#if DP4A
  if (LDP && XQM != 1 && IntPath(d)) {
    const uint xo = d * XWORDS;
    int a = acc_i;
    if (KIND == 5) {
      a += SDot4(int(w), int(xq[xo + j]), 0);
    } else if (KIND == 4) {
      const uint lo = ((w & 0x0F0F0F0Fu) + 0x78787878u) ^ 0x80808080u;
      const uint hi = (((w >> 4) & 0x0F0F0F0Fu) + 0x78787878u) ^ 0x80808080u;
      a += SDot4(int(lo), int(xq[xo + 2 * j]), 0);
      a += SDot4(int(hi), int(xq[xo + 2 * j + 1]), 0);
    } else {
      [[unroll]] for (uint k = 0; k < 4; ++k) {
        const uint g = (((w >> (2 * k)) & 0x03030303u) + 0x7E7E7E7Eu) ^ 0x80808080u;
        a += SDot4(int(g), int(xq[xo + 4 * j + k]), 0);
      }
    }
    acc_i = a;
    return;
  }
#endif
  if (IntPath(d)) {
    int a = 0;
    const uint xo = d * XWORDS;
    for (uint k = 0; k < epw; ++k) {
      const uint c = c0 + k;
      const uint xw = XQM == 1 ? mu[B[5] + (c >> 2)] : xq[xo + (c >> 2)];
      const int xv = bitfieldExtract(int(xw), int(8 * (c & 3)), 8);
      a += QElem(w, k) * xv;
    }
    acc_i += a;
  } else {
    const uint xb = B[2] + PU(13) * PU(3);  // (t + x_row0) * x_stride, t = 0
    const uint cols = PU(1);
    float a = acc_f;
    for (uint k = 0; k < epw; ++k) {
      const uint c = c0 + k;
      const float xv = c < cols ? mf[xb + c] : 0.0;
      const float wv = quant ? float(QElem(w, k)) : DElem(w, k);
      a = fma(wv, xv, a);
    }
    acc_f = a;
  }
}

// Operation-level setup and the quantized input (the same for every row block of one token).
void LinearParams() {
  KIND = SP(1);
  EPI = SP(2);
  LANES = SP(3);
  XWORDS = SP(4);
  VEC = SP(6);
  TAIL = SP(7);
  XQM = SP(8);
  DUAL = EPI == 1 ? 2 : 1;
  LDP = ops[ob] == K_LINEAR_DP;
  const bool quant = KIND >= 3;
  in_s0 = PF(6);
  in_s1 = PF(8);
  int_path0 = quant && in_s0 > 0.0;
  int_path1 = quant && in_s1 > 0.0;
}

// The quantized input in shared memory (the same for every row of one token).
void LinearStage() {
  const uint tid = gl_LocalInvocationID.x;
  const uint cols = PU(1);
  const uint xb = B[2] + PU(13) * PU(3);
  if (XQM == 3) {
    for (uint i = tid; i < XWORDS; i += WG) {
      uint v = 0;
      if (!LDP) {
        v = mu[B[5] + i];
      } else {
        [[unroll]] for (uint b = 0; b < 4; ++b) {
          const uint c = PermCol(i, b);
          v |= ((mu[B[5] + (c >> 2)] >> (8 * (c & 3))) & 0xFFu) << (8 * b);
        }
      }
      xq[i] = v;
    }
    barrier();
  } else if (XQM != 1 && (int_path0 || (DUAL == 2 && int_path1))) {
    const uint nw = !LDP ? (cols + 3) / 4 : XWORDS;
    for (uint d = 0; d < DUAL; ++d) {
      if (!IntPath(d)) continue;
      const float s_in = d == 0 ? in_s0 : in_s1;
      for (uint i = tid; i < nw; i += WG) {
        uint packed = 0;
        for (uint k = 0; k < 4; ++k) {
          const uint c = PermCol(i, k);
          const int q = c < cols ? QuantizeSrq(mf[xb + c], s_in) : 0;
          packed |= (uint(q) & 0xFFu) << (8 * k);
        }
        xq[d * XWORDS + i] = packed;
      }
    }
    barrier();
  }
}

void ResidualNormTail(uint nvirt) {
  const uint tid = gl_LocalInvocationID.x;
  const uint n = PU(15);
  const float scale = PF(18), eps = PF(19);
  memoryBarrierBuffer();
  barrier();
  if (tid == 0) last_wg = atomicAdd(mu[B[6]], 1u) == nvirt - 1;
  barrier();
  if (!last_wg) return;
  memoryBarrierBuffer();
  float yv[8], hv[8];
  [[unroll]] for (uint u = 0; u < 8; ++u) {
    const uint i = tid + u * WG;
    yv[u] = i < n ? mf[B[3] + i] : 0.0;
    hv[u] = i < n ? mf[B[7] + i] : 0.0;
  }
  double ss = 0.0LF;
  [[unroll]] for (uint u = 0; u < 8; ++u) ss = fma(double(yv[u]), double(yv[u]), ss);
  const float r = RmsFactor(BlockSumD(ss), n, eps);
  double ss2 = 0.0LF;
  [[unroll]] for (uint u = 0; u < 8; ++u) {
    const uint i = tid + u * WG;
    if (i < n) {
      precise float v = (yv[u] * r) * mf[B[8] + i];
      precise float o = (hv[u] + v) * scale;
      hv[u] = o;
      mf[B[7] + i] = o;
      ss2 = fma(double(o), double(o), ss2);
    }
  }
  if (PU(16) != 0) {
    const float r2 = RmsFactor(BlockSumD(ss2), n, eps);
    const bool has_wa = PU(17) != 0;
    [[unroll]] for (uint u = 0; u < 8; ++u) {
      const uint i = tid + u * WG;
      if (i < n) {
        precise float v = hv[u] * r2;
        precise float o = has_wa ? v * mf[B[9] + i] : v;
        mf[B[10] + i] = o;
      }
    }
  }
  if (tid == 0) mu[B[6]] = 0;
}

void LinearItem(uint vy, uint nvirt) {
  const uint tid = gl_LocalInvocationID.x;
  const uint lane = tid % LANES;
  const uint rloc = tid / LANES;
  const uint rows_per_wg = WG / LANES;
  const uint row = vy * rows_per_wg + rloc;
  const uint rows = PU(0), wstride = PU(2);
  const bool quant = KIND >= 3;
  const uint nsg = WG / gl_SubgroupSize;
  for (uint d = 0; d < DUAL; ++d) {
    int acc_i = 0;
    float acc_f = 0.0;
    if (row < rows) {
      const uint wb = (d == 0 ? B[0] : B[4]) / 4;
      if (VEC == 4) {
        const uint base = wb + row * (wstride / 4);
        for (uint j4 = lane; j4 < wstride / 4; j4 += LANES) {
          const uvec4 w4 = mw[base + j4];
          [[dont_unroll]] for (uint q4 = 0; q4 < 4; ++q4)
            Accumulate(w4[q4], 4 * j4 + q4, d, acc_i, acc_f);
        }
      } else {
        const uint base = row * wstride;
        for (uint j = lane; j < wstride; j += LANES) {
          const uint w = mw[wb + ((base + j) >> 2)][(base + j) & 3];
          Accumulate(w, j, d, acc_i, acc_f);
        }
      }
    }
    const int si = subgroupAdd(acc_i);
    const float sf = subgroupAdd(acc_f);
    if (subgroupElect()) {
      red_i[d * nsg + gl_SubgroupID] = si;
      red_f[d * nsg + gl_SubgroupID] = sf;
    }
  }
  barrier();
  if (row < rows && lane == 0) {
    const uint per_row = LANES / gl_SubgroupSize;
    float v0 = 0.0, v1 = 0.0;
    for (uint d = 0; d < DUAL; ++d) {
      int ti = 0;
      float tf = 0.0;
      const uint rb = d * nsg + rloc * per_row;
      for (uint k = 0; k < per_row; ++k) {
        ti += red_i[rb + k];
        tf += red_f[rb + k];
      }
      const float rs = quant ? mf[(d == 0 ? B[1] : B[5]) + row] : 1.0;
      const float s_out = d == 0 ? PF(7) : PF(9);
      float r;
      if (IntPath(d)) {
        r = float(double(ti) * double(d == 0 ? in_s0 : in_s1) * double(rs));
      } else {
        r = quant ? tf * rs : tf;
      }
      if (s_out > 0.0) r = Srq(r, s_out);
      if (d == 0) v0 = r; else v1 = r;
    }
    float outv = v0;
    const float cap = PF(10);
    if (EPI == 1) outv = GeluTanh(v0) * v1;
    if (EPI == 2 && cap > 0.0) outv = TanhClamped(ExactDiv(v0, cap)) * cap;
    if (EPI == 3) outv = GeluTanh(v0) * mf[B[6] + PU(12) + row];  // aux_off + row, t = 0
    mf[B[3] + PU(5) + row] = outv;  // y_off + row, t = 0
    if (XQM == 2) {
      const uint q = uint(QuantizeSrq(outv, PF(20))) & 0xFFu;
      atomicOr(mu[B[6] + (row >> 2)], q << (8 * (row & 3)));
    }
  }
  if (TAIL == 1) ResidualNormTail(nvirt);
}

// Rows spread over subgroups (SRQ integer path, the sums do not depend on the order): subgroup w
// of the grid takes rows w, w + W, ... (W subgroups in all), two at a time so their weight loads
// are in flight together; no workgroup barriers. Same epilogue as LinearItem.
bool WarpMode() { return pc.warp_rows != 0 && int_path0 && (DUAL == 1 || int_path1); }

void RowEpilogue(uint row, int ti0, int ti1) {
  const float s_out0 = PF(7), s_out1 = PF(9);
  float v0 = float(double(ti0) * double(in_s0) * double(mf[B[1] + row]));
  if (s_out0 > 0.0) v0 = Srq(v0, s_out0);
  float outv = v0;
  if (DUAL == 2) {
    float v1 = float(double(ti1) * double(in_s1) * double(mf[B[5] + row]));
    if (s_out1 > 0.0) v1 = Srq(v1, s_out1);
    outv = GeluTanh(v0) * v1;
  }
  const float cap = PF(10);
  if (EPI == 2 && cap > 0.0) outv = TanhClamped(ExactDiv(v0, cap)) * cap;
  if (EPI == 3) outv = GeluTanh(v0) * mf[B[6] + PU(12) + row];
  mf[B[3] + PU(5) + row] = outv;
  if (XQM == 2) {
    const uint q = uint(QuantizeSrq(outv, PF(20))) & 0xFFu;
    atomicOr(mu[B[6] + (row >> 2)], q << (8 * (row & 3)));
  }
}

void LinearWarpRows(uint G) {
  const uint SG = gl_SubgroupSize, lane = gl_SubgroupInvocationID;
  const uint W = G * gl_NumSubgroups;
  const uint rows = PU(0), nvec = PU(2) / 4;
  float dummy_f = 0.0;
  for (uint r0 = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID; r0 < rows; r0 += 2 * W) {
    const uint r1 = r0 + W;
    const bool has1 = r1 < rows;
    int a00 = 0, a01 = 0, a10 = 0, a11 = 0;  // [row][weight set]
    for (uint d = 0; d < DUAL; ++d) {
      const uint wb = (d == 0 ? B[0] : B[4]) / 4;
      int s0 = 0, s1 = 0;
      for (uint j4 = lane; j4 < nvec; j4 += SG) {
        const uvec4 w0 = mw[wb + r0 * nvec + j4];
        const uvec4 w1 = has1 ? mw[wb + r1 * nvec + j4] : uvec4(0);
        [[unroll]] for (uint q4 = 0; q4 < 4; ++q4) {
          Accumulate(w0[q4], 4 * j4 + q4, d, s0, dummy_f);
          if (has1) Accumulate(w1[q4], 4 * j4 + q4, d, s1, dummy_f);
        }
      }
      s0 = subgroupAdd(s0);
      s1 = subgroupAdd(s1);
      if (d == 0) { a00 = s0; a10 = s1; } else { a01 = s0; a11 = s1; }
    }
    if (subgroupElect()) {
      RowEpilogue(r0, a00, a01);
      if (has1) RowEpilogue(r1, a10, a11);
    }
  }
}

// ---------------------------------------------------------------- qkrope.comp
// push: nh nkv hd ring rot eps q_stride kv_stride; bindings q kt vt qn kn kc vc rope
void QkRope(uint slot, uint t) {
  const uint tid = gl_LocalInvocationID.x;
  const uint nh = PU(0), nkv = PU(1), hd = PU(2), ring = PU(3), rot = PU(4);
  const float eps = PF(5);
  const uint q_stride = PU(6), kv_stride = PU(7);
  const uint pos = step.pos0 + t;
  uint kind;
  uint head;
  if (slot < nh) { kind = 0; head = slot; }
  else if (slot < nh + nkv) { kind = 1; head = slot - nh; }
  else { kind = 2; head = slot - nh - nkv; }
  double ss = 0.0LF;
  for (uint i = tid; i < hd; i += WG) {
    float v = kind == 0 ? mf[B[0] + t * q_stride + head * hd + i]
            : kind == 1 ? mf[B[1] + t * kv_stride + head * hd + i]
                        : mf[B[2] + t * kv_stride + head * hd + i];
    xs[i] = v;
    ss = fma(double(v), double(v), ss);
  }
  const float r = RmsFactor(BlockSumD(ss), hd, eps);
  barrier();
  for (uint i = tid; i < hd; i += WG) {
    precise float v = xs[i] * r;
    if (kind == 0) v = v * mf[B[3] + i];
    if (kind == 1) v = v * mf[B[4] + i];
    xs[i] = v;
  }
  barrier();
  const uint half_d = hd / 2;
  const uint crow = (pos % ring) * (nkv * hd) + head * hd;
  for (uint i = tid; i < hd; i += WG) {
    precise float o = xs[i];
    if (kind != 2) {
      const uint k = i < half_d ? i : i - half_d;
      if (k < rot) {
        const vec2 cs = vec2(mf[B[7] + 2 * (pos * rot + k)], mf[B[7] + 2 * (pos * rot + k) + 1]);
        if (i < half_d) {
          o = xs[i] * cs.x + (-xs[i + half_d]) * cs.y;
        } else {
          o = xs[i] * cs.x + xs[i - half_d] * cs.y;
        }
      }
    }
    if (kind == 0) mf[B[0] + t * q_stride + head * hd + i] = o;
    else if (kind == 1) mf[B[5] + crow + i] = o;
    else mf[B[6] + crow + i] = o;
  }
}

// ---------------------------------------------------------------- attention.comp
// push: nh nkv hd ring window splits q_stride; bindings q kc vc po(double) pml(dvec2)
// The block loop is attention.comp's (attn_split.glsl, the same source).
#define ATT_QS(i) xs[i]
#define ATT_K(i) mf[i]
#define ATT_V(i) mf[i]
uint att_qbase;
#define ATT_STAGE_Q()                                                        \
  for (uint i = gl_LocalInvocationID.x; i < hd; i += WG) xs[i] = mf[att_qbase + i]; \
  barrier()
#include "attn_split.glsl"
void Attention(uint h, uint t, uint sp) {
  const uint tid = gl_LocalInvocationID.x;
  const uint nh = PU(0), nkv = PU(1), hd = PU(2), ring = PU(3), window = PU(4), splits = PU(5);
  const uint q_stride = PU(6);
  const uint pos = step.pos0 + t;
  const uint first = (window > 0 && pos + 1 > window) ? pos + 1 - window : 0;
  const uint nkeys = pos + 1 - first;
  const uint per = (nkeys + splits - 1) / splits;
  const uint jb = first + sp * per;
  const uint je = min(pos + 1, jb + per);
  const uint kvh = h / (nh / nkv);
  const uint width = nkv * hd;
  att_qbase = B[0] + t * q_stride + h * hd;
  double m, l, acc0, acc1;
  AttnSplit(B[1] + kvh * hd, B[2] + kvh * hd, jb, je, ring, width, hd, m, l, acc0, acc1);
  const uint obase = ((t * nh + h) * splits + sp);
  const uint po = B[3] / 2, pml = B[4] / 2;  // double indices
  if (tid < hd) md[po + obase * hd + tid] = acc0;
  if (tid + WG < hd) md[po + obase * hd + tid + WG] = acc1;
  if (tid == 0) {
    md[pml + 2 * obase] = m;
    md[pml + 2 * obase + 1] = l;
  }
}

// ---------------------------------------------------------------- attn_combine.comp
// push: nh hd splits o_stride; bindings 3 po, 4 pml, 5 o (combine.glsl, the same source)
uint cmb_po, cmb_pml, cmb_o;  // double, double and float indices
#define CMB_ML(i) dvec2(md[cmb_pml + 2 * (i)], md[cmb_pml + 2 * (i) + 1])
#define CMB_PO(i) md[cmb_po + (i)]
#define CMB_STORE(i, v) mf[cmb_o + (i)] = (v)
#include "combine.glsl"
void Combine(uint h, uint t) {
  const uint nh = PU(0), hd = PU(1), splits = PU(2), o_stride = PU(3);
  cmb_po = B[3] / 2;
  cmb_pml = B[4] / 2;
  cmb_o = B[5];
  CombineHead((t * nh + h) * splits, splits, hd, t * o_stride + h * hd);
}

// ---------------------------------------------------------------- resnorm.comp
// push: n has_t has_a has_wa scale eps h_stride t_stride a_stride h_row0; bindings h t wt a wa
void ResNorm(uint row) {
  const uint tid = gl_LocalInvocationID.x;
  const uint n = PU(0);
  const float scale = PF(4), eps = PF(5);
  const uint hb = B[0] + (row + PU(9)) * PU(6);
  if (PU(1) != 0) {
    const uint tb = B[1] + row * PU(7);
    double ss = 0.0LF;
    for (uint i = tid; i < n; i += WG) ss = fma(double(mf[tb + i]), double(mf[tb + i]), ss);
    const float r = RmsFactor(BlockSumD(ss), n, eps);
    for (uint i = tid; i < n; i += WG) {
      precise float v = (mf[tb + i] * r) * mf[B[2] + i];
      precise float o = (mf[hb + i] + v) * scale;
      mf[hb + i] = o;
    }
  }
  if (PU(2) != 0) {
    double ss = 0.0LF;
    for (uint i = tid; i < n; i += WG) ss = fma(double(mf[hb + i]), double(mf[hb + i]), ss);
    const float r = RmsFactor(BlockSumD(ss), n, eps);
    const uint ab = B[3] + row * PU(8);
    const bool has_wa = PU(3) != 0;
    for (uint i = tid; i < n; i += WG) {
      precise float v = mf[hb + i] * r;
      precise float o = has_wa ? v * mf[B[4] + i] : v;
      mf[ab + i] = o;
    }
  }
}

// ---------------------------------------------------------------- ple.comp
// push: pdim stride proj_scale input_scale eps; bindings y tok wn
void Ple(uint l, uint t) {
  const uint tid = gl_LocalInvocationID.x;
  const uint pdim = PU(0);
  const float proj_scale = PF(2), input_scale = PF(3), eps = PF(4);
  const uint b = t * PU(1) + l * pdim;
  double ss = 0.0LF;
  for (uint i = tid; i < pdim; i += WG) {
    precise float v = mf[B[0] + b + i] * proj_scale;
    ss = fma(double(v), double(v), ss);
  }
  const float r = RmsFactor(BlockSumD(ss), pdim, eps);
  barrier();
  for (uint i = tid; i < pdim; i += WG) {
    precise float v = ((mf[B[0] + b + i] * proj_scale) * r) * mf[B[2] + i];
    precise float o = (v + mf[B[1] + b + i]) * input_scale;
    mf[B[0] + b + i] = o;
  }
}

// ---------------------------------------------------------------- logits_reduce.comp
// push: vocab block nblocks use_mask; bindings z mask part(vec4) res(uvec2); spec [1] FINAL
vec4 Merge(vec4 a, vec4 b) {
  const float mx = max(a.x, b.x);
  float s = 0.0;
  if (a.y > 0.0) s += a.y * exp(a.x - mx);
  if (b.y > 0.0) s += b.y * exp(b.x - mx);
  vec4 r = vec4(mx, s, a.z, a.w);
  const bool bvalid = b.w >= 0.0;
  const bool avalid = a.w >= 0.0;
  if (bvalid && (!avalid || b.z > a.z || (b.z == a.z && b.w < a.w))) {
    r.z = b.z;
    r.w = b.w;
  }
  return r;
}
vec4 LdPart(uint i) {
  return vec4(mf[B[2] + 4 * i], mf[B[2] + 4 * i + 1], mf[B[2] + 4 * i + 2], mf[B[2] + 4 * i + 3]);
}
void LogitsReduce(uint gx, uint gy) {
  const uint tid = gl_LocalInvocationID.x;
  const bool fin = SP(1) == 1;
  const uint vocab = PU(0), block = PU(1), nblocks = PU(2), use_mask = PU(3);
  const uint row = fin ? gx : gy;
  vec4 acc = vec4(-1.0 / 0.0, 0.0, -1.0 / 0.0, -1.0);
  if (!fin) {
    const uint b0 = gx * block;
    const uint b1 = min(vocab, b0 + block);
    for (uint i = b0 + tid; i < b1; i += WG) {
      const float v = mf[B[0] + row * vocab + i];
      const bool ok = use_mask == 0 || ((mu[B[1] + (i >> 5)] >> (i & 31)) & 1u) != 0;
      acc = Merge(acc, vec4(v, 1.0, ok ? v : -1.0 / 0.0, ok ? float(i) : -1.0));
    }
  } else {
    for (uint i = tid; i < nblocks; i += WG) acc = Merge(acc, LdPart(row * nblocks + i));
  }
  sh4[tid] = acc;
  barrier();
  for (uint s = WG / 2; s > 0; s >>= 1) {
    if (tid < s) sh4[tid] = Merge(sh4[tid], sh4[tid + s]);
    barrier();
  }
  const vec4 r = sh4[0];
  if (tid == 0 && !fin) {
    const uint o = B[2] + 4 * (row * nblocks + gx);
    mf[o] = r.x;
    mf[o + 1] = r.y;
    mf[o + 2] = r.z;
    mf[o + 3] = r.w;
  } else if (tid == 0) {
    const float lp = r.w >= 0.0 ? r.z - r.x - log(r.y) : 0.0;
    mu[B[3] + 2 * row] = r.w >= 0.0 ? uint(r.w) : 0xFFFFFFFFu;
    mu[B[3] + 2 * row + 1] = floatBitsToUint(lp);
  }
}

// ---------------------------------------------------------------- the step
void GridBarrier(uint target) {
  memoryBarrierBuffer();
  barrier();
  if (gl_LocalInvocationID.x == 0) atomicAdd(mu[pc.grid], 1u);
  // Invocation 0 polls while the others wait at the barrier: one L2 request per workgroup and
  // poll.
  uint spins = 0;
  bool err = false;
  while (gl_LocalInvocationID.x == 0 && !err && mv[pc.grid] < target) {
    if (++spins >= pc.spin_limit) {
      atomicOr(mu[pc.grid + 1], 1u);
      err = true;
    } else if ((spins & 63u) == 0) {
      err = mv[pc.grid + 1] != 0;
    }
  }
  memoryBarrierBuffer();
  barrier();
}

void main() {
  const uint G = gl_NumWorkGroups.x, wg = gl_WorkGroupID.x;
  uint phase = 0;
#if PROFILE
  if (wg == 0 && gl_LocalInvocationID.x == 0) {
    const uvec2 t = clockRealtime2x32EXT();
    mu[pc.prof] = t.x;
    mu[pc.prof + 1] = t.y;
  }
#endif
  for (uint o = 0; o < pc.nops; ++o) {
    ob = o * OP_WORDS;
    const uint kernel = ops[ob];
    const uint gx = ops[ob + 1], gy = ops[ob + 2], gz = ops[ob + 3];
    const uint n = gx * gy * gz;
    [[unroll]] for (uint i = 0; i < 12; ++i) B[i] = ops[ob + 16 + i];
    const bool lin = kernel == K_LINEAR || kernel == K_LINEAR_DP;
    if (lin) LinearParams();
    if (lin && WarpMode()) {
      // Every workgroup takes part (the tail counts all G).
      if (wg * gl_NumSubgroups < PU(0)) LinearStage();
      LinearWarpRows(G);
      barrier();
      if (TAIL == 1) ResidualNormTail(G);
      if ((ops[ob + 4] & 1u) != 0) {
        GridBarrier(++phase * G);
#if PROFILE
        if (wg == 0 && gl_LocalInvocationID.x == 0) {
          const uvec2 t = clockRealtime2x32EXT();
          mu[pc.prof + 2 * phase] = t.x;
          mu[pc.prof + 2 * phase + 1] = t.y;
        }
#endif
      }
      continue;
    }
    if (lin && wg < n) LinearStage();
    for (uint v = wg; v < n; v += G) {
      const uint vx = v % gx, vy = (v / gx) % gy, vz = v / (gx * gy);
      if (lin) LinearItem(vy, n);
      else if (kernel == K_QKROPE) QkRope(vx, vy);
      else if (kernel == K_ATTENTION) Attention(vx, vy, vz);
      else if (kernel == K_COMBINE) Combine(vx, vy);
      else if (kernel == K_RESNORM) ResNorm(vx);
      else if (kernel == K_PLE) Ple(vx, vy);
      else if (kernel == K_LOGITS) LogitsReduce(vx, vy);
      barrier();
    }
    if ((ops[ob + 4] & 1u) != 0) {
      GridBarrier(++phase * G);
#if PROFILE
      if (wg == 0 && gl_LocalInvocationID.x == 0) {
        const uvec2 t = clockRealtime2x32EXT();
        mu[pc.prof + 2 * phase] = t.x;
        mu[pc.prof + 2 * phase + 1] = t.y;
      }
#endif
    }
  }
}
