#version 450
// Bandwidth probe: every invocation reads 16-byte words of binding 0 in a grid-stride loop and
// folds them; the write never happens for a real push block (n > 0) but keeps the loads alive.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer W { uvec4 w[]; };
layout(std430, binding = 3) buffer Y { uint y[]; };
layout(push_constant) uniform P { uint n; } p;

void main() {
  const uint stride = gl_NumWorkGroups.x * 256;
  uvec4 acc = uvec4(0);
  uint i = gl_GlobalInvocationID.x;
  for (; i + 3 * stride < p.n; i += 4 * stride) {
    const uvec4 a = w[i], b = w[i + stride], c = w[i + 2 * stride], d = w[i + 3 * stride];
    acc ^= a ^ b ^ c ^ d;
  }
  for (; i < p.n; i += stride) acc ^= w[i];
  if (p.n == 0u && (acc.x ^ acc.y ^ acc.z ^ acc.w) == 1u) y[0] = 1u;
}
