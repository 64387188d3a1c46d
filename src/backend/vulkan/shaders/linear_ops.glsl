// linear.comp's helpers, included after its declarations (specialization constants, bindings,
// shared memory): the prologue's RMS factors and residual-norm tail, element access of the packed
// weight kinds, the quantized input's layout, and the multiply loops (dense, packed-dot, FAST),
// with the early loads of a workgroup's first block.

// The prologue's RmsFactor(tot, n, eps); with RMS_FAST (n == PRO_N) the mean by the constant
// reciprocal of PRO_N with one exact correction, and InvSqrtNewton.
float ProRmsFactor(double tot, uint n, float eps) {
  if (RMS_FAST != 0 && PRO_M != 0 && n == PRO_MN) return RmsFactorConstN(tot, PRO_MN, eps);
  if (RMS_FAST == 0 || PRO == 0 || n != PRO_N) return RmsFactor(tot, n, eps);
  return RmsFactorConstN(tot, PRO_N, eps);
}

// RmsFactor of the workgroup's sum of v: subgroup sums, then their sum in subgroup order and the
// factor (a double division and square root) evaluated by one invocation and broadcast through
// shared memory, instead of by every invocation of every workgroup (the probes measured ~0.9 us
// for the factor when every invocation of 4 workgroups per SM evaluated it). Same values.
// Slot: 0 or 1 (two factors in flight).
float BlockRmsFactor(double v, uint n, float eps, uint slot) {
  double s = subgroupAdd(v);
  if (subgroupElect()) red_d[slot * 128 + gl_SubgroupID] = s;
  barrier();
  if (RMS_ALL != 0) {
    double tot = 0.0LF;
    for (uint i = 0; i < gl_NumSubgroups; ++i) tot += red_d[slot * 128 + i];
    return ProRmsFactor(tot, n, eps);
  }
  if (gl_LocalInvocationID.x == 0) {
    double tot = 0.0LF;
    for (uint i = 0; i < gl_NumSubgroups; ++i) tot += red_d[slot * 128 + i];
    rms_bc[slot] = ProRmsFactor(tot, n, eps);
  }
  barrier();
  return rms_bc[slot];
}

void ResidualNormTail() {
  // Values held in registers (n <= 8 WG; the host checks), loaded before use: the tail runs in one
  // workgroup, so its cost is latency, not bandwidth.
  const uint tid = gl_LocalInvocationID.x;
  memoryBarrierBuffer();
  barrier();
  if (tid == 0) {
    last_wg = atomicAdd(done_wgs, 1u) == gl_NumWorkGroups.x * gl_NumWorkGroups.y - 1;
  }
  barrier();
  if (!last_wg) return;
  memoryBarrierBuffer();
  float yv[8], hv[8];
  [[unroll]] for (uint u = 0; u < 8; ++u) {
    const uint i = tid + u * WG;
    yv[u] = i < p.n ? y[i] : 0.0;
    hv[u] = i < p.n ? hres[i] : 0.0;
  }
  double ss = 0.0LF;
  [[unroll]] for (uint u = 0; u < 8; ++u) ss = fma(double(yv[u]), double(yv[u]), ss);
  const float r = BlockRmsFactor(ss, p.n, p.eps, 0);
  double ss2 = 0.0LF;
  [[unroll]] for (uint u = 0; u < 8; ++u) {
    const uint i = tid + u * WG;
    if (i < p.n) {
      precise float v = (yv[u] * r) * wt[i];
      precise float o = (hv[u] + v) * p.scale;
      hv[u] = o;
      hres[i] = o;
      ss2 = fma(double(o), double(o), ss2);
    }
  }
  if (p.has_a != 0) {
    const float r2 = BlockRmsFactor(ss2, p.n, p.eps, 1);
    [[unroll]] for (uint u = 0; u < 8; ++u) {
      const uint i = tid + u * WG;
      if (i < p.n) {
        precise float v = hv[u] * r2;
        precise float o = p.has_wa != 0 ? v * wa[i] : v;
        anorm[i] = o;
      }
    }
  }
  if (tid == 0) done_wgs = 0;
}

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

// Column of byte b of shared input word i (DP4A layout: the lanes of Accumulate's masks).
uint PermCol(uint i, uint b) {
  if (DP4A == 0 || KIND == 5) return 4 * i + b;
  if (KIND == 4) return 8 * (i >> 1) + (i & 1) + 2 * b;
  return 16 * (i >> 2) + (i & 3) + 4 * b;
}

// The column distance between consecutive bytes of one shared word (PermCol(i, b + 1) -
// PermCol(i, b)); the four columns of a word differ only in the bits of PackStride() * 3.
uint PackStride() {
  if (DP4A == 0 || KIND == 5) return 1;
  return KIND == 4 ? 2 : 4;
}

// PermCol's inverse: the shared word and byte of input column c.
uvec2 XqWord(uint c) {
  if (DP4A == 0 || KIND == 5) return uvec2(c >> 2, c & 3);
  if (KIND == 4) return uvec2(2 * (c >> 3) + (c & 1), (c & 7) >> 1);
  return uvec2(4 * (c >> 4) + (c & 3), (c & 15) >> 2);
}

// PRO_VEC: the word slot (of the invocation's 2, or for int2 4) and byte of element u (column
// 8 tid + u; PermCol's inverse relative to the invocation's first word).
uvec2 VecSlot(uint u, uint tid) {
  if (DP4A == 0 || KIND == 5) return uvec2(u >> 2, u & 3);
  if (KIND == 4) return uvec2(u & 1, u >> 1);
  return uvec2(u & 3, 2 * (tid & 1) + (u >> 2));
}

// PRO_T: t from P's int32 sum and row scale (P's epilogue, as this kernel's own below: scales in
// double, rounded once, output SRQ).
float ProT(int sum, float row_s) {
  const float t = float(double(sum) * double(p.pt_in_s) * double(row_s));
  return p.pt_out_s > 0.0 ? Srq(t, p.pt_out_s) : t;
}

// The prologue's input value from h' (mode 1: normed with factor r2 and weight wa; 2: h'; the
// mode is PRO or PRO_M).
float ProInput(uint mode, float h, float r2, float wa) {
  if (mode != 1) return h;
  precise float v = h * r2;
  precise float o = p.has_wa != 0 ? v * wa : v;
  return o;
}

// PRO_M: token tt's (row t's) input at column c < PRO_MN from its factors (the prologue's
// operations again: h' as PRO computes it, then ProInput's).
float ProMInput(uint tt, uint t, uint c) {
  const float tv = x[(t + p.x_row0) * p.x_stride + c];
  precise float v = (tv * prom_r[2 * tt]) * wt[c];
  precise float o = (hm[t * PRO_MN + c] + v) * p.scale;
  // (without wa the host binds wt at its binding, as for PRO)
  return ProInput(PRO_M, o, prom_r[2 * tt + 1], wa[c]);
}

// The shared word holding a token's input word i (row-local): i itself, or with XCM chunk-major.
uint XqAt(uint i) {
  if (XCM == 0) return i;
  return ((i % XS) >> 2) * (4 * XNV) + 4 * (i / XS) + (i & 3);
}

uint row_v0 = 0, row_nv = 0;  // a row's first weight vector and vectors (KSPLIT: this split's)
int acc_i[2 * TOK];
ACCF acc_f[2 * TOK];
bool int_path[2];

// The set whose quantized input words set d reads (SHARE_X: set 0's), and whether the input is
// quantized for set d (its integer path, and its own words).
uint XSet(uint d) { return SHARE_X != 0 ? 0u : d; }
bool QuantizesFor(uint d) { return int_path[d] && XSet(d) == d; }

// The 16-byte weight vector j4 of set d at vector offset `base`.
uvec4 WeightVec(uint d, uint base, uint j4) {
  return d == 0 ? w0[base + j4] : w1[base + j4];
}

#if DP4A
// The packed dot product of weight lanes g and shared input word xi.
#define DOT4(g, xi) SDot4(int(g), int(xq[xi]), 0)
#endif

// Adds word j (of row-local index) of weight set d to the token accumulators.
void Accumulate(uint w, uint j, uint d, uint tg) {
  const uint epw = ElemsPerWord();
  const uint c0 = j * epw;
  const bool quant = KIND >= 3;
#if DP4A
  if (XQ != 1 && int_path[d]) {
    [[unroll]] for (uint tt = 0; tt < TOK; ++tt) {
      const uint xo = (XSet(d) * TOK + tt) * XWORDS;
      int a = acc_i[d * TOK + tt];
      if (KIND == 5) {
        a += DOT4(w, xo + j);
      } else if (KIND == 4) {
        const uint lo = ((w & 0x0F0F0F0Fu) + 0x78787878u) ^ 0x80808080u;
        const uint hi = (((w >> 4) & 0x0F0F0F0Fu) + 0x78787878u) ^ 0x80808080u;
        a += DOT4(lo, xo + 2 * j);
        a += DOT4(hi, xo + 2 * j + 1);
      } else {
        [[unroll]] for (uint k = 0; k < 4; ++k) {
          const uint g = (((w >> (2 * k)) & 0x03030303u) + 0x7E7E7E7Eu) ^ 0x80808080u;
          a += DOT4(g, xo + 4 * j + k);
        }
      }
      acc_i[d * TOK + tt] = a;
    }
    return;
  }
#endif
  if (int_path[d]) {
    [[unroll]] for (uint tt = 0; tt < TOK; ++tt) {
      int a = 0;
      const uint xo = (XSet(d) * TOK + tt) * XWORDS;
      [[unroll]] for (uint k = 0; k < epw; ++k) {
        const uint c = c0 + k;
        const uint xw = XQ == 1 ? xq_in[(tg + tt) * XWORDS + (c >> 2)] : xq[xo + (c >> 2)];
        const int xv = bitfieldExtract(int(xw), int(8 * (c & 3)), 8);
        a += QElem(w, k) * xv;
      }
      acc_i[d * TOK + tt] += a;
    }
  } else {
    [[unroll]] for (uint tt = 0; tt < TOK; ++tt) {
      const uint t = tg + tt;
      if (t >= p.ntok) break;
      const uint xb = (t + p.x_row0) * p.x_stride;
      ACCF a = acc_f[d * TOK + tt];
      [[unroll]] for (uint k = 0; k < epw; ++k) {
        const uint c = c0 + k;
        const float xv = c < p.cols ? (PRO != 0 ? xs[c] : x[xb + c]) : 0.0;
        const float wv = quant ? float(QElem(w, k)) : DElem(w, k);
        a = fma(ACCF(wv), ACCF(xv), a);
      }
      acc_f[d * TOK + tt] = a;
    }
  }
}

// DJ: block blk's words of D's rows tid + WG r (pairs at even word offsets: a row's stride is a
// multiple of 4 words, so a pair is inside the row or past its end).
void LoadDj(uint blk, out uvec2 dw[8][DJP]) {
  const uint tid = gl_LocalInvocationID.x;
  [[unroll]] for (uint r = 0; r < 8; ++r) {
    const uint j = tid + WG * r;
    [[unroll]] for (uint k = 0; k < DJP; ++k) {
      const uint c = blk * DJP + k;  // pair index within the row
      const uint idx = (DJM & 2) != 0 ? c * p.pj_rows + j : (j * p.pj_wstride) / 2 + c;
      dw[r][k] = j < p.pj_rows && 2 * c < p.pj_wstride ? djw[idx] : uvec2(0u);
    }
  }
}

// Weight vector w4 (row-local vector index j4) of a dense row times the staged input, added to a
// (FXW; one token): 8 FMAs in column order.
uint xg4 = 0;  // FXG: the token's input row in vec4s (set in main)
ACCF DenseDot(uvec4 w4, uint j4, ACCF a) {
  const vec4 xa = FXG != 0 ? x4[xg4 + 2 * j4] : xf4[2 * j4];
  const vec4 xb = FXG != 0 ? x4[xg4 + 2 * j4 + 1] : xf4[2 * j4 + 1];
  a = fma(ACCF(DElem(w4.x, 0)), ACCF(xa.x), a);
  a = fma(ACCF(DElem(w4.x, 1)), ACCF(xa.y), a);
  a = fma(ACCF(DElem(w4.y, 0)), ACCF(xa.z), a);
  a = fma(ACCF(DElem(w4.y, 1)), ACCF(xa.w), a);
  a = fma(ACCF(DElem(w4.z, 0)), ACCF(xb.x), a);
  a = fma(ACCF(DElem(w4.z, 1)), ACCF(xb.y), a);
  a = fma(ACCF(DElem(w4.w, 0)), ACCF(xb.z), a);
  a = fma(ACCF(DElem(w4.w, 1)), ACCF(xb.w), a);
  return a;
}

// Row `base` (in vectors) of every dense weight set into acc_f (FXW; one token): the lane's
// vectors of both sets, 4 of each at a time, loaded before any is multiplied (one load in flight
// per lane left the bf16 linears at a fraction of the memory bandwidth); each set's FMAs in
// vector order.
void MultiplyDense(uint base, uint lane) {
  const uint nv = p.wstride / 4;
  for (uint j0 = lane; j0 < nv; j0 += 4 * LANES) {
    uvec4 w[DUAL][4];
    [[unroll]] for (uint d = 0; d < DUAL; ++d)
      [[unroll]] for (uint v = 0; v < 4; ++v) {
        const uint j4 = j0 + LANES * v;
        w[d][v] = j4 < nv ? WeightVec(d, base, j4) : uvec4(0u);
      }
    [[unroll]] for (uint d = 0; d < DUAL; ++d) {
      ACCF a = acc_f[d * TOK];
      [[unroll]] for (uint v = 0; v < 4; ++v) {
        const uint j4 = j0 + LANES * v;
        if (j4 < nv) a = DenseDot(w[d][v], j4, a);
      }
      acc_f[d * TOK] = a;
    }
  }
}

// FXW with PFB: the lane's vectors of the row (vector lane + LANES v, v < PFB), already loaded;
// the same FMAs in the same order as MultiplyDense.
void MultiplyDenseRegs(const uvec4 w[4], uint lane) {
  ACCF a = acc_f[0];
  [[unroll]] for (uint v = 0; v < 4; ++v) {
    const uint j4 = lane + LANES * v;
    if (v >= PFB || j4 >= p.wstride / 4) continue;
    a = DenseDot(w[v], j4, a);
  }
  acc_f[0] = a;
}

#if DP4A
// The packed dot products of weight vector w4 (row-local vector index j4) of set d, added to a
// (FAST: 64 / 16 times the int2 / int4 products).
void DotFast(uvec4 w4, uint j4, uint d, inout int a[TOK]) {
  [[unroll]] for (uint q = 0; q < 4; ++q) {
    const uint w = q == 0 ? w4.x : q == 1 ? w4.y : q == 2 ? w4.z : w4.w;
    [[unroll]] for (uint tt = 0; tt < TOK; ++tt) {
      const uint xo = (XSet(d) * TOK + tt) * XWORDS;
      if (KIND == 3) {
        const uint xi = xo + (XCM != 0 ? 4 * (q * XNV + j4) : 16 * j4 + 4 * q);
        a[tt] = DOT4(((w << 6) & 0xC0C0C0C0u) ^ 0x80808080u, xi) + a[tt];
        a[tt] = DOT4(((w << 4) & 0xC0C0C0C0u) ^ 0x80808080u, xi + 1) + a[tt];
        a[tt] = DOT4(((w << 2) & 0xC0C0C0C0u) ^ 0x80808080u, xi + 2) + a[tt];
        a[tt] = DOT4((w & 0xC0C0C0C0u) ^ 0x80808080u, xi + 3) + a[tt];
      } else if (KIND == 4) {
        const uint xi = xo + (XCM != 0 ? 4 * ((q >> 1) * XNV + j4) + 2 * (q & 1) : 8 * j4 + 2 * q);
        a[tt] = DOT4(((w << 4) & 0xF0F0F0F0u) ^ 0x80808080u, xi) + a[tt];
        a[tt] = DOT4((w & 0xF0F0F0F0u) ^ 0x80808080u, xi + 1) + a[tt];
      } else {  // int8: the default path's product
        a[tt] = DOT4(w, xo + 4 * j4 + q) + a[tt];
      }
    }
  }
}

// The int2 (int4) products were 64 (16) times their values: exact multiples, shifted back.
void AddFast(const int a[TOK], uint d) {
  [[unroll]] for (uint tt = 0; tt < TOK; ++tt)
    acc_i[d * TOK + tt] += KIND == 3 ? a[tt] >> 6 : KIND == 4 ? a[tt] >> 4 : a[tt];
}

// Row `base` (in vectors) of weight set d into acc_i (FAST).
void MultiplyFast(uint base, uint lane, uint d) {
  int a[TOK];
  [[unroll]] for (uint tt = 0; tt < TOK; ++tt) a[tt] = 0;
  // (|a| <= 64 * 2 * 128 per int2 column: exact in int32 for rows of up to 2^17 columns)
  [[dont_unroll]] for (uint j4 = lane; j4 < row_nv; j4 += LANES) {
    DotFast(WeightVec(d, base, j4), j4, d, a);
  }
  AddFast(a, d);
}

// PAIR_LOOP: row `base` (in vectors) of weight set d into acc_i, PAIR_LOOP vectors an iteration.
void MultiplyFastPair(uint base, uint lane, uint d) {
  const uint K = clamp(PAIR_LOOP, 1, 4);
  int a[TOK];
  [[unroll]] for (uint tt = 0; tt < TOK; ++tt) a[tt] = 0;
  const uint nv = p.wstride / 4;
  uint j4 = lane;
  [[dont_unroll]] for (; j4 + (K - 1) * LANES < nv; j4 += K * LANES) {
    uvec4 x[4];
    [[unroll]] for (uint k = 0; k < K; ++k) x[k] = WeightVec(d, base, j4 + k * LANES);
    [[unroll]] for (uint k = 0; k < K; ++k) DotFast(x[k], j4 + k * LANES, d, a);
  }
  [[dont_unroll]] for (; j4 < nv; j4 += LANES) DotFast(WeightVec(d, base, j4), j4, d, a);
  AddFast(a, d);
}

// DUAL_LOOP: row `base` (in vectors) of both weight sets into acc_i, one loop.
void MultiplyFast2(uint base, uint lane) {
  int a0[TOK], a1[TOK];
  [[unroll]] for (uint tt = 0; tt < TOK; ++tt) {
    a0[tt] = 0;
    a1[tt] = 0;
  }
  const uint K = clamp(DUAL_LOOP, 1, 4);
  const uint nv = p.wstride / 4;
  uint j4 = lane;
  [[dont_unroll]] for (; j4 + (K - 1) * LANES < nv; j4 += K * LANES) {
    uvec4 g[4], u[4];
    [[unroll]] for (uint k = 0; k < K; ++k) {
      g[k] = WeightVec(0, base, j4 + k * LANES);
      u[k] = WeightVec(1, base, j4 + k * LANES);
    }
    [[unroll]] for (uint k = 0; k < K; ++k) {
      DotFast(g[k], j4 + k * LANES, 0, a0);
      DotFast(u[k], j4 + k * LANES, 1, a1);
    }
  }
  [[dont_unroll]] for (; j4 < nv; j4 += LANES) {
    DotFast(WeightVec(0, base, j4), j4, 0, a0);
    DotFast(WeightVec(1, base, j4), j4, 1, a1);
  }
  AddFast(a0, 0);
  AddFast(a1, 1);
}

// PFB: the row's vectors of this lane (vector lane + LANES v, v < PFB, within the row), already
// loaded.
void MultiplyFastRegs(const uvec4 w[4], uint lane) {
  int a[TOK];
  [[unroll]] for (uint tt = 0; tt < TOK; ++tt) a[tt] = 0;
  [[unroll]] for (uint v = 0; v < 4; ++v)
    if (v < PFB && lane + LANES * v < p.wstride / 4) DotFast(w[v], lane + LANES * v, 0, a);
  AddFast(a, 0);
}
#endif

// PFB: the lane's vectors of this workgroup's first block's row.
void LoadFirstBlock(out uvec4 w[4], uint lane, uint rloc) {
  const uint row0 = gl_WorkGroupID.y * ROWS_PER_WG + rloc;
  [[unroll]] for (uint v = 0; v < 4; ++v)
    w[v] = v < PFB && row0 < p.rows && lane + LANES * v < p.wstride / 4
               ? w0[row0 * (p.wstride / 4) + lane + LANES * v]
               : uvec4(0u);
}
