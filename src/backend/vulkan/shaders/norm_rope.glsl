// Per-head q/k/v post-processing shared by qkrope.comp and attention.comp (ROPE): for one head of
// kind 0 (q), 1 (k) or 2 (v) at position pos,
//   o = rope(rmsnorm(x) * w)   (q: w = q_norm, k: w = k_norm; rope over the first rot pairs)
//   o = rmsnorm(x)             (v)
// The including shader defines, before including this file: WG, `shared float xs[512]`,
// `double BlockSum(double)`, a `rope` buffer of vec2 [pos][rot], and the macros
// NR_LOAD(kind, i) (raw value i of the head), NR_WEIGHT(kind, i, v) (v times the norm weight) and
// NR_STORE(kind, i, o) (where result i goes).
void NormRopeHead(uint kind, uint hd, uint rot, float eps, uint pos) {
  const uint tid = gl_LocalInvocationID.x;
  double ss = 0.0LF;
  for (uint i = tid; i < hd; i += WG) {
    const float v = NR_LOAD(kind, i);
    xs[i] = v;
    ss = fma(double(v), double(v), ss);
  }
  const float r = RmsFactor(BlockSum(ss), hd, eps);
  barrier();
  for (uint i = tid; i < hd; i += WG) {
    precise float v = xs[i] * r;
    v = NR_WEIGHT(kind, i, v);
    xs[i] = v;
  }
  barrier();
  const uint half_d = hd / 2;
  for (uint i = tid; i < hd; i += WG) {
    precise float o = xs[i];
    if (kind != 2) {
      const uint k = i < half_d ? i : i - half_d;
      if (k < rot) {
        const vec2 cs = rope[pos * rot + k];
        if (i < half_d) {
          o = xs[i] * cs.x + (-xs[i + half_d]) * cs.y;
        } else {
          o = xs[i] * cs.x + xs[i - half_d] * cs.y;
        }
      }
    }
    NR_STORE(kind, i, o);
  }
}
