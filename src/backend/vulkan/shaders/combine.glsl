// The merge of one (token, head)'s key splits (attn_split.glsl's partials, double):
//   o = sum_s o_s e^(m_s - M) / sum_s l_s e^(m_s - M),  M = max over splits with l_s > 0.
// The includer declares WG and either po[] (double), pml[] (dvec2), o[] (float) or the macros
// CMB_ML(i) (split i's dvec2(m, l)), CMB_PO(i) and CMB_STORE(i, v); splits <= 256.
// M and the denominator are subgroup reductions (every subgroup evaluates the same values), the
// weights go through shared memory, each output dim loads all of its splits before summing them.
// The splits holding keys are a prefix (attention.comp gives the keys out in order), so the sums
// stop after the last split with l > 0.
#ifndef CMB_ML
#define CMB_ML(i) pml[i]
#define CMB_PO(i) po[i]
#define CMB_STORE(i, v) o[i] = (v)
#endif
shared double cmb_wgt[256];

void CombineHead(uint base, uint splits, uint hd, uint obase) {
  const uint tid = gl_LocalInvocationID.x;
  double mx = -1.0LF / 0.0LF;
  uint nact = 0;
  for (uint s = gl_SubgroupInvocationID; s < splits; s += gl_SubgroupSize) {
    const dvec2 ml = CMB_ML(base + s);
    if (ml.y > 0.0LF) {
      mx = max(mx, ml.x);
      nact = s + 1;
    }
  }
  mx = subgroupMax(mx);
  nact = subgroupMax(nact);
  double lp = 0.0LF;
  for (uint s = gl_SubgroupInvocationID; s < splits; s += gl_SubgroupSize) {
    const dvec2 ml = CMB_ML(base + s);
    const double w = ml.y > 0.0LF ? ExpD(ml.x - mx) : 0.0LF;
    if (gl_SubgroupID == 0) cmb_wgt[s] = w;
    lp += ml.y * w;
  }
  const double l = subgroupAdd(lp);
  barrier();
  for (uint i = tid; i < hd; i += WG) {
    double acc = 0.0LF;
    for (uint s0 = 0; s0 < nact; s0 += 16) {
      double v[16];
      [[unroll]] for (uint u = 0; u < 16; ++u)
        v[u] = s0 + u < nact ? CMB_PO((base + s0 + u) * hd + i) : 0.0LF;
      [[unroll]] for (uint u = 0; u < 16; ++u)
        if (s0 + u < nact) acc += v[u] * cmb_wgt[s0 + u];
    }
    CMB_STORE(obase + i, float(acc / l));
  }
}
