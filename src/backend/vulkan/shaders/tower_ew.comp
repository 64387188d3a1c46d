#version 450
// The towers' elementwise steps (vulkan_tower.cc's resident paths), over `count` elements:
//   MODE 0: a[t][d] += b[t % pw][d] + b[pw + t / pw][d]: the learned x and y position rows (b
//           holds the image's pw column rows, then its row rows);
//   MODE 1: a[i] = GeluTanh(a[i]) * b[i]: the MLP's gate times its up projection;
//   MODE 2: a[i] = SiLU(a[i]) (the audio feed-forward's hidden);
//   MODE 3: a[t][d] += b[d] (a bias: the audio output_proj's);
//   MODE 4: a[t][d] = sum_k c[d][k] g[t - (pw - 1) + k][d] over the frames >= 0, g = GLU(b) =
//           b[t][d] sigmoid(b[t][D + d]) (b [n][2 D]): the audio light conv's GLU and causal
//           depthwise convolution of kernel pw, the sum in double.
// f32 operation by operation, as ref::VisionTowerForward and ref::AudioTowerForward.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 1) const uint MODE = 0;

layout(std430, binding = 0) buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) readonly buffer C { float c[]; };

layout(push_constant) uniform P {
  uint count;
  uint D;   // MODE 0, 3, 4: row length
  uint pw;  // MODE 0: patches per row; MODE 4: kernel
} p;

float Sigmoid(float x) {
  precise float s = 1.0 / (1.0 + exp(-x));
  return s;
}

void main() {
  const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 256u;
  if (i >= p.count) return;
  if (MODE == 0) {
    const uint t = i / p.D, d = i % p.D;
    precise float pos = b[(t % p.pw) * p.D + d] + b[(p.pw + t / p.pw) * p.D + d];
    precise float o = a[i] + pos;
    a[i] = o;
  } else if (MODE == 1) {
    precise float o = GeluTanh(a[i]) * b[i];
    a[i] = o;
  } else if (MODE == 2) {
    const float x = a[i];
    precise float o = x / (1.0 + exp(-x));
    a[i] = o;
  } else if (MODE == 3) {
    precise float o = a[i] + b[i % p.D];
    a[i] = o;
  } else {
    const uint t = i / p.D, d = i % p.D;
    double acc = 0.0LF;
    for (uint k = 0; k < p.pw; ++k) {
      if (t + k + 1u < p.pw) continue;  // frame t - (pw - 1) + k < 0
      const uint row = (t + k + 1u - p.pw) * 2u * p.D;
      precise float g = b[row + d] * Sigmoid(b[row + p.D + d]);
      acc += double(c[d * p.pw + k]) * double(g);
    }
    a[i] = float(acc);
  }
}
