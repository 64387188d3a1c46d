#version 450
// SRQ-quantized input rows for the matrix-unit linears (linear_cm.comp), once per linear instead of
// once per output tile: xq[t][g] holds columns 8g .. 8g + 7 of token t as f16 values of
// clamp(round_half_even(x / in_s), -128, 127) (exact small integers), zero past `cols`.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 2) readonly buffer X { float x[]; };
layout(std430, binding = 3) writeonly buffer XQ { uvec4 xq[]; };
// I8 1 (linear_cm2.comp's integer tiles): the same values as int8 bytes, 8 to a uvec2, token t's
// row from byte t x ld x 8 (a row's element stride stays ld x 8; the rows fill the first half of
// the f16 layout's span).
layout(std430, binding = 3) writeonly buffer XQ8 { uvec2 xq8[]; };
layout(constant_id = 1) const uint I8 = 0;

layout(push_constant) uniform P {
  uint cols, x_stride, x_row0, ld;  // ld: uvec4 per token row of xq
  float in_s;
} p;

void main() {
  const uint g = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
  if (g >= p.ld) return;
  const uint xb = (t + p.x_row0) * p.x_stride;
  uvec4 h;
  uvec2 bytes = uvec2(0);
  [[unroll]] for (uint q = 0; q < 4; ++q) {
    const uint ca = 8 * g + 2 * q, cb = ca + 1;
    const int a = ca < p.cols ? QuantizeSrq(x[xb + ca], p.in_s) : 0;
    const int b = cb < p.cols ? QuantizeSrq(x[xb + cb], p.in_s) : 0;
    h[q] = packHalf2x16(vec2(float(a), float(b)));
    bytes[q / 2] |= ((uint(a) & 255u) | ((uint(b) & 255u) << 8)) << (16 * (q % 2));
  }
  if (I8 == 1)
    xq8[t * p.ld + g] = bytes;
  else
    xq[t * p.ld + g] = h;
}
