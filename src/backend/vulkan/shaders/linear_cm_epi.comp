#version 450
// Epilogue of a split-K linear_cm (KSPLIT; one weight set): the int32 dot products
// summed by the splits' atomics, times the input and row scales in double, then linear.comp's SRQ
// and epilogues (0 store, 2 softcap, 3 gelu * aux).
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 1) const uint KIND = 4;
layout(constant_id = 2) const uint EPI = 0;

layout(std430, binding = 1) readonly buffer S0 { float s0[]; };
layout(std430, binding = 3) buffer Y { float y[]; };
layout(std430, binding = 6) readonly buffer Aux { float aux[]; };
layout(std430, binding = 9) buffer Part { int part[]; };

layout(push_constant) uniform P {
  uint rows, cols, wstride, x_stride, y_stride, y_off;
  float in_s0, out_s0, in_s1, out_s1;
  float cap;
  uint aux_stride, aux_off, x_row0, ntok;
} p;

void main() {
  const uint row = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
  if (row >= p.rows) return;
  const int sum = part[t * p.rows + row];
  const float a = EPI == 3 ? aux[t * p.aux_stride + p.aux_off + row] : 0.0;
  y[t * p.y_stride + p.y_off + row] = SplitKOut(sum, p.in_s0, s0[row], p.out_s0, EPI, p.cap, a);
}
