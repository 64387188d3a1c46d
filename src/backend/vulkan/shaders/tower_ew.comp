#version 450
// The vision tower's elementwise steps (vulkan_tower.cc's resident image path), over `count`
// elements:
//   MODE 0: a[t][d] += b[t % pw][d] + b[pw + t / pw][d]: the learned x and y position rows (b
//           holds the image's pw column rows, then its row rows);
//   MODE 1: a[i] = GeluTanh(a[i]) * b[i]: the MLP's gate times its up projection.
// f32 operation by operation, as ref::VisionTowerForward.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 1) const uint MODE = 0;

layout(std430, binding = 0) buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };

layout(push_constant) uniform P {
  uint count;
  uint D;   // MODE 0: row length
  uint pw;  // MODE 0: patches per row
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 256u;
  if (i >= p.count) return;
  if (MODE == 0) {
    const uint t = i / p.D, d = i % p.D;
    precise float pos = b[(t % p.pw) * p.D + d] + b[(p.pw + t / p.pw) * p.D + d];
    precise float o = a[i] + pos;
    a[i] = o;
  } else {
    precise float o = GeluTanh(a[i]) * b[i];
    a[i] = o;
  }
}
