#version 450
// Prefill attention, tiled over queries: workgroup (head, tile of QT consecutive tokens) walks the
// union of the tile's key ranges in blocks of 32 keys, so each K/V row is loaded once for QT
// queries. Invocation (query qi, key kj) computes one score; invocation (qi, dim group) accumulates
// its dims. Online softmax per query in double, as attention.comp; the mask is causal plus the
// sliding window; the result goes straight to the attention output (no key splits to merge).
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer KC { float kc[]; };
layout(std430, binding = 2) readonly buffer VC { float vc[]; };
layout(std430, binding = 5) writeonly buffer O { float o[]; };

layout(push_constant) uniform P {
  uint nh, nkv, hd, ring, window, m;
  uint q_stride;
} p;

const uint QT = 8;             // queries per workgroup
const uint KB = 32;            // keys per block
const uint DPT = 512 / KB;     // dims per invocation (hd <= 512)
shared float qs[QT][512];
shared double sc[QT][KB];

uint FirstKey(uint pos) { return (p.window > 0 && pos + 1 > p.window) ? pos + 1 - p.window : 0; }

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint h = gl_WorkGroupID.x, t0 = gl_WorkGroupID.y * QT;
  const uint hd = p.hd;
  const uint qi = tid / KB, lane = tid % KB;
  const uint t = t0 + qi;
  const bool qvalid = t < p.m;
  const uint pos = step.pos0 + t;
  const uint kvh = h / (p.nh / p.nkv);
  const uint width = p.nkv * hd;
  for (uint i = lane; i < hd; i += KB) qs[qi][i] = qvalid ? q[t * p.q_stride + h * hd + i] : 0.0;
  barrier();
  const uint tlast = min(t0 + QT, p.m) - 1;
  const uint kbeg = FirstKey(step.pos0 + t0), kend = step.pos0 + tlast + 1;
  const uint qfirst = FirstKey(pos);
  const double kNegInf = -1.0LF / 0.0LF;
  double m = kNegInf, l = 0.0LF;
  double acc[DPT];
  [[unroll]] for (uint u = 0; u < DPT; ++u) acc[u] = 0.0LF;
  for (uint b = kbeg; b < kend; b += KB) {
    const uint j = b + lane;
    double s = kNegInf;
    if (qvalid && j < kend && j <= pos && j >= qfirst) {
      const uint kb = (j % p.ring) * width + kvh * hd;
      s = 0.0LF;
      for (uint i0 = 0; i0 < hd; i0 += 8) {
        float kv[8];
        [[unroll]] for (uint u = 0; u < 8; ++u) kv[u] = i0 + u < hd ? kc[kb + i0 + u] : 0.0;
        [[unroll]] for (uint u = 0; u < 8; ++u)
          if (i0 + u < hd) s = fma(double(qs[qi][i0 + u]), double(kv[u]), s);
      }
    }
    sc[qi][lane] = s;
    barrier();
    double bm = kNegInf;
    for (uint jj = 0; jj < KB; ++jj) bm = max(bm, sc[qi][jj]);
    const double mn = max(m, bm);
    barrier();
    sc[qi][lane] = s == kNegInf ? 0.0LF : ExpD(s - mn);
    barrier();
    double bs = 0.0LF;
    for (uint jj = 0; jj < KB; ++jj) bs += sc[qi][jj];
    const double corr = m == kNegInf ? 0.0LF : ExpD(m - mn);
    l = l * corr + bs;
    m = mn;
    [[unroll]] for (uint u = 0; u < DPT; ++u) acc[u] *= corr;
    const uint nb = min(KB, kend - b);
    for (uint jj = 0; jj < nb; ++jj) {
      const double w = sc[qi][jj];
      if (w == 0.0LF) continue;
      const uint vb = ((b + jj) % p.ring) * width + kvh * hd;
      [[unroll]] for (uint u = 0; u < DPT; ++u) {
        const uint d = lane + KB * u;
        if (d < hd) acc[u] = fma(w, double(vc[vb + d]), acc[u]);
      }
    }
    barrier();
  }
  if (!qvalid) return;
  [[unroll]] for (uint u = 0; u < DPT; ++u) {
    const uint d = lane + KB * u;
    if (d < hd) o[t * p.q_stride + h * hd + d] = float(acc[u] / l);
  }
}
