#version 450
// Head outputs without reading the logits back. Pass 1 (FINAL = 0), workgroup (block, row): over
// its vocabulary block, the max, sum exp(z - max), and the best allowed id (largest logit, lowest
// id on ties; every id is allowed when use_mask = 0). Pass 2 (FINAL = 1), one workgroup per row:
// merges the blocks and writes {id, log-prob of id under the full softmax}: 8 bytes per row.
#extension GL_KHR_shader_subgroup_basic : enable
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint FINAL = 0;
layout(std430, binding = 0) readonly buffer L { float z[]; };
layout(std430, binding = 1) readonly buffer Mask { uint mask[]; };
layout(std430, binding = 2) buffer Part { vec4 part[]; };  // {max, sumexp, best_val, best_id}
layout(std430, binding = 3) writeonly buffer Res { uvec2 res[]; };

layout(push_constant) uniform P {
  uint vocab, block, nblocks, use_mask;
} p;

const uint WG = gl_WorkGroupSize.x;
shared vec4 sh[WG];

// Merge of two partials (a's ids are lower when on the left).
vec4 Merge(vec4 a, vec4 b) {
  const float mx = max(a.x, b.x);
  float s = 0.0;
  if (a.y > 0.0) s += a.y * exp(a.x - mx);
  if (b.y > 0.0) s += b.y * exp(b.x - mx);
  vec4 r = vec4(mx, s, a.z, a.w);
  const bool bvalid = b.w >= 0.0;
  const bool avalid = a.w >= 0.0;
  if (bvalid && (!avalid || b.z > a.z || (b.z == a.z && b.w < a.w))) {
    r.z = b.z;
    r.w = b.w;
  }
  return r;
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint row = FINAL == 1 ? gl_WorkGroupID.x : gl_WorkGroupID.y;
  vec4 acc = vec4(-1.0 / 0.0, 0.0, -1.0 / 0.0, -1.0);
  if (FINAL == 0) {
    const uint b0 = gl_WorkGroupID.x * p.block;
    const uint b1 = min(p.vocab, b0 + p.block);
    for (uint i = b0 + tid; i < b1; i += WG) {
      const float v = z[row * p.vocab + i];
      const bool ok = p.use_mask == 0 || ((mask[i >> 5] >> (i & 31)) & 1u) != 0;
      acc = Merge(acc, vec4(v, 1.0, ok ? v : -1.0 / 0.0, ok ? float(i) : -1.0));
    }
  } else {
    for (uint i = tid; i < p.nblocks; i += WG) acc = Merge(acc, part[row * p.nblocks + i]);
  }
  sh[tid] = acc;
  barrier();
  for (uint s = WG / 2; s > 0; s >>= 1) {
    if (tid < s) sh[tid] = Merge(sh[tid], sh[tid + s]);
    barrier();
  }
  if (tid != 0) return;
  const vec4 r = sh[0];
  if (FINAL == 0) {
    part[row * p.nblocks + gl_WorkGroupID.x] = r;
  } else {
    const float lp = r.w >= 0.0 ? r.z - r.x - log(r.y) : 0.0;
    res[row] = uvec2(r.w >= 0.0 ? uint(r.w) : 0xFFFFFFFFu, floatBitsToUint(lp));
  }
}
