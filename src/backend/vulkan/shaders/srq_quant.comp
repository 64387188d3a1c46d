#version 450
// SRQ-quantized input rows for the matrix-unit linears (linear_cm.comp), once per linear instead of
// once per output tile: xq[t][g] holds columns 8g .. 8g + 7 of token t as f16 values of
// clamp(round_half_even(x / in_s), -128, 127) (exact small integers), zero past `cols`.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 2) readonly buffer X { float x[]; };
layout(std430, binding = 3) writeonly buffer XQ { uvec4 xq[]; };

layout(push_constant) uniform P {
  uint cols, x_stride, x_row0, ld;  // ld: uvec4 per token row of xq
  float in_s;
} p;

void main() {
  const uint g = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
  if (g >= p.ld) return;
  const uint xb = (t + p.x_row0) * p.x_stride;
  uvec4 h;
  [[unroll]] for (uint q = 0; q < 4; ++q) {
    const uint ca = 8 * g + 2 * q, cb = ca + 1;
    const float a = ca < p.cols ? float(QuantizeSrq(x[xb + ca], p.in_s)) : 0.0;
    const float b = cb < p.cols ? float(QuantizeSrq(x[xb + cb], p.in_s)) : 0.0;
    h[q] = packHalf2x16(vec2(a, b));
  }
  xq[t * p.ld + g] = h;
}
