#version 450
// The vision tower's pooling (vulkan_tower.cc's resident image path): each output row o is the
// mean of a K x K block of patch rows, float(1 / K^2) * h summed in double in patch order, then
// rounded, times sqrt(hidden), then standardized where the tower asks (ref::VisionTowerForward).
// One invocation per output element.

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer H { float h[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };
layout(std430, binding = 2) readonly buffer SB { float std_bias[]; };
layout(std430, binding = 3) readonly buffer SS { float std_scale[]; };

layout(push_constant) uniform P {
  uint D;     // hidden
  uint pw;    // patches per row
  uint k;     // pooling kernel
  uint m;     // output rows
  uint standardize;
  float wk;   // float(1 / k^2)
  float root; // float(sqrt(D))
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 256u;
  if (i >= p.m * p.D) return;
  const uint row = i / p.D, d = i % p.D;
  const uint ow = p.pw / p.k;
  const uint ox = row % ow, oy = row / ow;
  double s = 0.0LF;
  for (uint dy = 0; dy < p.k; ++dy) {
    for (uint dx = 0; dx < p.k; ++dx) {
      const uint t = (oy * p.k + dy) * p.pw + ox * p.k + dx;
      precise float w = p.wk * h[t * p.D + d];
      s += double(w);
    }
  }
  precise float r = float(s) * p.root;
  if (p.standardize != 0u) r = (r - std_bias[d]) * std_scale[d];
  o[i] = r;
}
