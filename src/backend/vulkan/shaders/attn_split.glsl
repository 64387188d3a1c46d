// One workgroup's share of a head's keys j in [jb, je) (attention.comp):
//   m = max_j s_j, l = sum_j exp(s_j - m), o = sum_j exp(s_j - m) V_j,   s_j = q . K_j (scale 1),
// an online softmax over blocks of ATT_KPB keys, in double as the CPU reference.
// The includer defines WG, ATT_QS(i) (the head's q in shared memory, staged by ATT_STAGE_Q(), which
// runs once, after the first block's loads are issued, and ends with a barrier),
// ATT_K(i) and ATT_V(i) (cache floats at absolute indices), and optionally ATT_PROBES (calls
// Probe / Probe2 of probe.glsl at the stage boundaries). (Loading the caches as vec4s, one
// 16-byte load per 4-float group instead of four scalar loads, measured slower on the H200:
// 2.61-2.64 against 2.39-2.41 ms per token, 3.04 against 2.61 at 4,096 context; ninth session.)
//
// Latency, not bandwidth, bounds a block (decode reads a few KiB per workgroup), so every stage
// issues all of its loads before it uses one:
// - scores: ATT_TPK invocations per key; the invocation `part` takes the 4-float groups
//   part, part + 8, ... of the row (consecutive lanes read consecutive 16 bytes), 8 groups per
//   round (one round for head dims <= 256), summed in that order and then across the key's lanes;
// - the block's max and sum: subgroup reductions (every subgroup evaluates the same values);
// - values: ceil(hd / 4) invocations cover a row in 4-float groups; the WG / that groups of them
//   take keys g, g + G, ... of the block (one round of 8 rows for head dims <= 256) and keep
//   their own sums, added over the groups (in group order) after the last block.
#ifndef ATT_TPK_DEFINED
#define ATT_TPK_DEFINED
const uint ATT_TPK = 8;             // invocations per key
const uint ATT_KPB = WG / ATT_TPK;  // keys per block
shared double att_sc[ATT_KPB];      // the block's scores
shared double att_w[ATT_KPB];       // the block's weights exp(s - m)
shared double att_acc[4 * WG];      // the key groups' sums of the values (G * hd <= 4 WG)
#endif

#ifdef ATT_PROBES
#define ATT_PROBE(k) Probe(k)
#define ATT_PROBE2(k) Probe2(k)
#else
#define ATT_PROBE(k)
#define ATT_PROBE2(k)
#endif

// kbase / vbase: the index of the K / V head's dim 0 in ring row 0; rows are `width` floats.
// Invocation tid returns the sums of dims tid and tid + WG (hd <= 2 WG) in acc0 / acc1.
void AttnSplit(uint kbase, uint vbase, uint jb, uint je, uint ring, uint width, uint hd,
               out double m_out, out double l_out, out double acc0, out double acc1) {
  const uint tid = gl_LocalInvocationID.x;
  const double kNegInf = -1.0LF / 0.0LF;
  double m = kNegInf;
  double l = 0.0LF;
  const uint n4 = (hd + 3) / 4;       // 4-float groups per row
  const uint krounds = (n4 + 8 * ATT_TPK - 1) / (8 * ATT_TPK);
  const uint G = WG / n4;             // value key groups (>= 1: hd <= 4 WG)
  const uint vg = tid / n4, vq = tid % n4;
  const bool vlane = vg < G;
  const uint vkeys = (ATT_KPB + G - 1) / G;  // keys per group and block
  double a[4] = double[4](0.0LF, 0.0LF, 0.0LF, 0.0LF);
  const uint kl = tid / ATT_TPK, part = tid % ATT_TPK;
  // Ring rows of a block's keys b + jj (jj < ATT_KPB) from b's row, without a division per key
  // where the ring holds a whole block (it always does in the model; tiny rings divide).
  const bool small_ring = ring < ATT_KPB;
  for (uint b = jb; b < je; b += ATT_KPB) {
    const uint j = b + kl;
    const uint nb = min(ATT_KPB, je - b);
    const uint rb = b % ring;
#define ATT_ROW(jj) \
  (small_ring ? (b + (jj)) % ring : rb + (jj) >= ring ? rb + (jj) - ring : rb + (jj))
    const uint kb = kbase + ATT_ROW(kl) * width;
    // The block's first round of key and value loads before anything waits (on the first block
    // also before the caller's q staging, ATT_STAGE_Q).
    vec4 kv[8], vv[8];
    [[unroll]] for (uint u = 0; u < 8; ++u) {
      const uint i = 4 * (part + ATT_TPK * u);
      [[unroll]] for (uint c = 0; c < 4; ++c)
        kv[u][c] = j < je && i + c < hd ? ATT_K(kb + i + c) : float(c);
    }
    [[unroll]] for (uint u = 0; u < 8; ++u) {
      const uint jj = vg + G * u;
      const uint vb = vbase + ATT_ROW(jj) * width + 4 * vq;
      [[unroll]] for (uint c = 0; c < 4; ++c)
        vv[u][c] = vlane && jj < nb && 4 * vq + c < hd ? ATT_V(vb + c) : float(c);
    }
    if (b == jb) ATT_STAGE_Q();
    double s = 0.0LF;
    if (j < je) {
      for (uint r = 0; r < krounds; ++r) {
        if (r > 0) {
          [[unroll]] for (uint u = 0; u < 8; ++u) {
            const uint i = 4 * (part + ATT_TPK * (8 * r + u));
            [[unroll]] for (uint c = 0; c < 4; ++c)
              kv[u][c] = i + c < hd ? ATT_K(kb + i + c) : float(c);
          }
        }
        [[unroll]] for (uint u = 0; u < 8; ++u) {
          const uint i = 4 * (part + ATT_TPK * (8 * r + u));
          [[unroll]] for (uint c = 0; c < 4; ++c)
            if (i + c < hd) s = fma(double(ATT_QS(i + c)), double(kv[u][c]), s);
        }
      }
    }
    s += subgroupShuffleXor(s, 1);
    s += subgroupShuffleXor(s, 2);
    s += subgroupShuffleXor(s, 4);
    if (part == 0) att_sc[kl] = j < je ? s : kNegInf;
    barrier();
    if (b == jb) ATT_PROBE(2);  // first block's scores
    double bm = kNegInf;
    for (uint jj = gl_SubgroupInvocationID; jj < nb; jj += gl_SubgroupSize) bm = max(bm, att_sc[jj]);
    const double mn = max(m, subgroupMax(bm));
    double bs = 0.0LF;
    for (uint jj = gl_SubgroupInvocationID; jj < nb; jj += gl_SubgroupSize) {
      const double e = ExpD(att_sc[jj] - mn);
      if (gl_SubgroupID == 0) att_w[jj] = e;
      bs += e;
    }
    bs = subgroupAdd(bs);
    const double corr = m == kNegInf ? 0.0LF : ExpD(m - mn);
    l = l * corr + bs;
    m = mn;
    [[unroll]] for (uint c = 0; c < 4; ++c) a[c] *= corr;
    barrier();
    if (b == jb) ATT_PROBE(3);  // first block's weights and sum
    if (b == jb) ATT_PROBE2(0);
    if (vlane) {
      for (uint u0 = 0; u0 < vkeys; u0 += 8) {
        if (vg + G * u0 >= nb) break;
        if (u0 > 0) {
          [[unroll]] for (uint u = 0; u < 8; ++u) {
            const uint jj = vg + G * (u0 + u);
            const uint vb = vbase + ATT_ROW(jj) * width + 4 * vq;
            [[unroll]] for (uint c = 0; c < 4; ++c)
              vv[u][c] = jj < nb && 4 * vq + c < hd ? ATT_V(vb + c) : float(c);
          }
        }
        if (b == jb && u0 == 0) ATT_PROBE2(1);  // first round's loads issued
        [[unroll]] for (uint u = 0; u < 8; ++u) {
          const uint jj = vg + G * (u0 + u);
          if (jj < nb) {
            const double w = att_w[jj];
            [[unroll]] for (uint c = 0; c < 4; ++c) a[c] = fma(w, double(vv[u][c]), a[c]);
          }
        }
        if (b == jb && u0 == 0) ATT_PROBE2(2);  // first round summed
      }
    }
    barrier();  // att_sc / att_w are reused by the next block
    if (b == jb) ATT_PROBE(4);  // first block's value sums
#undef ATT_ROW
  }
  // The groups' sums, added in group order.
  if (vlane) {
    [[unroll]] for (uint c = 0; c < 4; ++c)
      if (4 * vq + c < hd) att_acc[vg * hd + 4 * vq + c] = a[c];
  }
  barrier();
  acc0 = 0.0LF;
  acc1 = 0.0LF;
  for (uint g = 0; g < G; ++g) {
    if (tid < hd) acc0 += att_acc[g * hd + tid];
    if (tid + WG < hd) acc1 += att_acc[g * hd + tid + WG];
  }
  ATT_PROBE2(7);
  m_out = m;
  l_out = l;
}
