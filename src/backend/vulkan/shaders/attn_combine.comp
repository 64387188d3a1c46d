#version 450
// Merges the key splits of attention.comp (double): o = sum_s o_s e^(m_s - M) / sum_s l_s e^(m_s - M).
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(std430, binding = 3) readonly buffer PO { double po[]; };
layout(std430, binding = 4) readonly buffer PML { dvec2 pml[]; };
layout(std430, binding = 5) writeonly buffer O { float o[]; };

layout(push_constant) uniform P {
  uint nh, hd, splits, o_stride;
} p;

const uint WG = gl_WorkGroupSize.x;
shared double wgt[256];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y;
  const uint base = (t * p.nh + h) * p.splits;
  double mx = -1.0LF / 0.0LF;
  for (uint s = 0; s < p.splits; ++s) {
    if (pml[base + s].y > 0.0LF) mx = max(mx, pml[base + s].x);
  }
  for (uint s = tid; s < p.splits; s += WG) {
    const dvec2 ml = pml[base + s];
    wgt[s] = ml.y > 0.0LF ? ExpD(ml.x - mx) : 0.0LF;
  }
  barrier();
  double l = 0.0LF;
  for (uint s = 0; s < p.splits; ++s) l += pml[base + s].y * wgt[s];
  for (uint i = tid; i < p.hd; i += WG) {
    double acc = 0.0LF;
    for (uint s0 = 0; s0 < p.splits; s0 += 8) {
      double v[8];
      [[unroll]] for (uint u = 0; u < 8; ++u)
        v[u] = s0 + u < p.splits ? po[(base + s0 + u) * p.hd + i] : 0.0LF;
      [[unroll]] for (uint u = 0; u < 8; ++u)
        if (s0 + u < p.splits) acc += v[u] * wgt[s0 + u];
    }
    o[t * p.o_stride + h * p.hd + i] = float(acc / l);
  }
}
