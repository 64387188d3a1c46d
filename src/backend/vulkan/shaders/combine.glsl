// The merge of one (token, head)'s key splits (attention.comp's partials, double):
//   o = sum_s o_s e^(m_s - M) / sum_s l_s e^(m_s - M),  M = max over splits with l_s > 0.
// The includer declares po[] (double), pml[] (dvec2), o[] (float) and WG; splits <= 256.
shared double cmb_wgt[256];

void CombineHead(uint base, uint splits, uint hd, uint obase) {
  const uint tid = gl_LocalInvocationID.x;
  double mx = -1.0LF / 0.0LF;
  for (uint s = 0; s < splits; ++s) {
    if (pml[base + s].y > 0.0LF) mx = max(mx, pml[base + s].x);
  }
  for (uint s = tid; s < splits; s += WG) {
    const dvec2 ml = pml[base + s];
    cmb_wgt[s] = ml.y > 0.0LF ? ExpD(ml.x - mx) : 0.0LF;
  }
  barrier();
  double l = 0.0LF;
  for (uint s = 0; s < splits; ++s) l += pml[base + s].y * cmb_wgt[s];
  for (uint i = tid; i < hd; i += WG) {
    double acc = 0.0LF;
    for (uint s0 = 0; s0 < splits; s0 += 8) {
      double v[8];
      [[unroll]] for (uint u = 0; u < 8; ++u)
        v[u] = s0 + u < splits ? po[(base + s0 + u) * hd + i] : 0.0LF;
      [[unroll]] for (uint u = 0; u < 8; ++u)
        if (s0 + u < splits) acc += v[u] * cmb_wgt[s0 + u];
    }
    o[obase + i] = float(acc / l);
  }
}
