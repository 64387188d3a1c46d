#version 450
// Head outputs without reading the logits back. Pass 1 (FINAL = 0), workgroup (block, row): over
// its vocabulary block, the max, sum exp(z - max), and the best allowed id (largest logit, lowest
// id on ties; every id is allowed when use_mask = 0). Pass 2 (FINAL = 1), one workgroup per row:
// merges the blocks and writes {id, log-prob of id under the full softmax}: 8 bytes per row.
// LAST 1 (with FINAL = 0; GEMMA_VULKAN_REDUCE_LAST): pass 1 loads its block at once (REG values
// per invocation), reduces it through subgroup operations, and the row's last workgroup to finish
// (an arrival count per row, zero between steps) does pass 2's merge: one dispatch and one barrier.
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint FINAL = 0;
layout(constant_id = 2) const uint LAST = 0;
layout(constant_id = 3) const uint REG = 16;  // LAST: values per invocation (block <= REG x WG)
layout(std430, binding = 0) readonly buffer L { float z[]; };
layout(std430, binding = 1) readonly buffer Mask { uint mask[]; };
layout(std430, binding = 2) coherent buffer Part { vec4 part[]; };  // {max, sumexp, best_val, best_id}
layout(std430, binding = 3) writeonly buffer Res { uvec2 res[]; };
layout(std430, binding = 4) coherent buffer Cnt { uint cnt[]; };  // LAST: arrivals per row

layout(push_constant) uniform P {
  uint vocab, block, nblocks, use_mask;
} p;

const uint WG = gl_WorkGroupSize.x;
const float kNegInf = -1.0 / 0.0;
shared vec4 sh[WG];
shared bool s_last;

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

// The workgroup's partials (one per invocation, lower ids in lower invocations) merged in order.
vec4 BlockMerge(vec4 acc) {
  const uint tid = gl_LocalInvocationID.x;
  sh[tid] = acc;
  barrier();
  for (uint s = WG / 2; s > 0; s >>= 1) {
    if (tid < s) sh[tid] = Merge(sh[tid], sh[tid + s]);
    barrier();
  }
  return sh[0];
}

void WriteResult(uint row, vec4 r) {
  const float lp = r.w >= 0.0 ? r.z - r.x - log(r.y) : 0.0;
  res[row] = uvec2(r.w >= 0.0 ? uint(r.w) : 0xFFFFFFFFu, floatBitsToUint(lp));
}

// LAST: pass 1 from registers. The invocation's REG values (ids b0 + tid + WG k), all loaded before
// any is used; its max, its sum of exp(z - max) (independent exponentials), its best allowed id;
// then the subgroup's (the sums rescaled to the subgroup's max) and the workgroup's, merged in
// subgroup order by invocation 0.
vec4 BlockFromRegisters(uint row, uint b0, uint b1) {
  const uint tid = gl_LocalInvocationID.x;
  float v[REG];
  [[unroll]] for (uint k = 0; k < REG; ++k) {
    const uint i = b0 + tid + WG * k;
    v[k] = i < b1 ? z[row * p.vocab + i] : kNegInf;
  }
  float mx = kNegInf, bv = kNegInf;
  uint bid = 0xFFFFFFFFu;
  [[unroll]] for (uint k = 0; k < REG; ++k) {
    const uint i = b0 + tid + WG * k;
    if (i >= b1) continue;
    mx = max(mx, v[k]);
    const bool ok = p.use_mask == 0 || ((mask[i >> 5] >> (i & 31)) & 1u) != 0;
    if (ok && (bid == 0xFFFFFFFFu || v[k] > bv)) {  // (ids ascend with k: ties keep the lower)
      bv = v[k];
      bid = i;
    }
  }
  float s = 0.0;
  if (mx != kNegInf) {
    [[unroll]] for (uint k = 0; k < REG; ++k)
      if (b0 + tid + WG * k < b1) s += exp(v[k] - mx);
  }
  const float smx = subgroupMax(mx);
  const float ss = subgroupAdd(s > 0.0 ? s * exp(mx - smx) : 0.0);
  const float sbv = subgroupMax(bid != 0xFFFFFFFFu ? bv : kNegInf);
  const uint sbid = subgroupMin(bid != 0xFFFFFFFFu && bv == sbv ? bid : 0xFFFFFFFFu);
  if (subgroupElect())
    sh[gl_SubgroupID] = vec4(smx, ss, sbv, sbid != 0xFFFFFFFFu ? float(sbid) : -1.0);
  barrier();
  vec4 acc = vec4(kNegInf, 0.0, kNegInf, -1.0);
  if (tid == 0)
    for (uint g = 0; g < gl_NumSubgroups; ++g) acc = Merge(acc, sh[g]);
  return acc;
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint row = FINAL == 1 ? gl_WorkGroupID.x : gl_WorkGroupID.y;
  if (FINAL == 0 && LAST != 0) {
    const uint b0 = gl_WorkGroupID.x * p.block;
    const uint b1 = min(p.vocab, b0 + p.block);
    const vec4 r = BlockFromRegisters(row, b0, b1);
    if (tid == 0) part[row * p.nblocks + gl_WorkGroupID.x] = r;
    // The partial ordered before the arrival; the last arrival's merge loads after it.
    memoryBarrierBuffer();
    barrier();
    if (tid == 0) s_last = atomicAdd(cnt[row], 1u) == p.nblocks - 1;
    barrier();
    if (!s_last) return;
    memoryBarrierBuffer();
    vec4 acc = vec4(kNegInf, 0.0, kNegInf, -1.0);
    for (uint i = tid; i < p.nblocks; i += WG) acc = Merge(acc, part[row * p.nblocks + i]);
    const vec4 m = BlockMerge(acc);
    if (tid == 0) {
      WriteResult(row, m);
      cnt[row] = 0;
    }
    return;
  }
  vec4 acc = vec4(kNegInf, 0.0, kNegInf, -1.0);
  if (FINAL == 0) {
    const uint b0 = gl_WorkGroupID.x * p.block;
    const uint b1 = min(p.vocab, b0 + p.block);
    for (uint i = b0 + tid; i < b1; i += WG) {
      const float v = z[row * p.vocab + i];
      const bool ok = p.use_mask == 0 || ((mask[i >> 5] >> (i & 31)) & 1u) != 0;
      acc = Merge(acc, vec4(v, 1.0, ok ? v : kNegInf, ok ? float(i) : -1.0));
    }
  } else {
    for (uint i = tid; i < p.nblocks; i += WG) acc = Merge(acc, part[row * p.nblocks + i]);
  }
  const vec4 r = BlockMerge(acc);
  if (tid != 0) return;
  if (FINAL == 0) {
    part[row * p.nblocks + gl_WorkGroupID.x] = r;
  } else {
    WriteResult(row, r);
  }
}
