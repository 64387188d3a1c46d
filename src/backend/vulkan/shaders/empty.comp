#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_memory_scope_semantics : enable
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
// The structure-cost probe (GEMMA_VULKAN_EMPTY, timing only: the outputs are garbage): every
// dispatch of a recorded step runs this kernel with the original grid, bindings and push
// constants, so a step measures what the dispatches, barriers and bindings cost without the work.
// Mode 2 specializes it with the original kernel's constants (and a code of its name): one
// pipeline per original pipeline, whose code differs by a branch that never runs.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint C1 = 0;
layout(constant_id = 2) const uint C2 = 0;
layout(constant_id = 3) const uint C3 = 0;
layout(constant_id = 4) const uint C4 = 0;
layout(constant_id = 5) const uint C5 = 0;
layout(constant_id = 6) const uint C6 = 0;
layout(constant_id = 7) const uint C7 = 0;
layout(constant_id = 8) const uint C8 = 0;
layout(constant_id = 9) const uint C9 = 0;
layout(constant_id = 10) const uint C10 = 0;
layout(constant_id = 11) const uint C11 = 0;
layout(constant_id = 12) const uint C12 = 0;
layout(constant_id = 13) const uint C13 = 0;
layout(constant_id = 14) const uint C14 = 0;
// Modes 3 and 4 (the instruction-fetch probe): the first subgroup of each workgroup also runs
// CODE blocks of ~200 integer operations on four independent chains, straight-line (mode 3: the
// binary grows with CODE) or as a loop over one block (mode 4: the same operations executed from a
// small binary). Their difference per step is what fetching the longer code costs.
layout(constant_id = 15) const uint CODE = 0;
layout(constant_id = 16) const uint ROLLED = 0;
// Mode 7 (barriers as flags): every workgroup waits until flags[WAIT] reaches WAIT_N (the previous
// phase's workgroups; 0: no wait), then adds one to flags[SIG - 1] (SIG 0: mode 7 off; no pipeline
// barriers between the layer loop's phases).
layout(constant_id = 17) const uint WAIT = 0;
layout(constant_id = 18) const uint WAIT_N = 0;
layout(constant_id = 19) const uint SIG = 0;
// Mode 8 (barriers as per-dispatch ready flags): dispatch d's workgroups count themselves in
// flags[64 d]; the one that completes the count (N, this dispatch's workgroups) sets flags[64 d + 32]
// (its own 128-byte line), and the next phase's workgroups poll the ready words of the previous
// phase's WAIT_N dispatches from WAIT (WAIT 0: no wait; SIG: d + 1) with relaxed loads, then
// acquire. The pollers never touch the counters' lines.
layout(constant_id = 20) const uint N = 0;
// GEMMA_VULKAN_EMPTY_SHM (with any mode): the workgroup declares SHM words of shared memory (1:
// none to speak of), touched on a branch that never runs, so a step of empty kernels asks the
// driver for the shared-memory sizes the real kernels do (does a change of the L1 / shared split
// between dependent dispatches cost time?).
layout(constant_id = 21) const uint SHM = 1;
// GEMMA_VULKAN_FLAG_SPLIT (mode 8): a dispatch's workgroups count themselves on SPLIT lines
// (workgroup index mod SPLIT; line d SPLIT + j, its ready word 32 words on), so that many atomics
// proceed at once; the next phase polls all of them.
layout(constant_id = 22) const uint SPLIT = 1;
// Mode 9 (the least work a dependent phase does, timing only): MW = 1 + the 16-byte weight
// vectors each invocation streams (0: mode 9 off). Binding 12 then holds two vectors of 2,048
// floats, the phases' input and output alternating by PAR (this phase reads vector PAR, writes
// the other), and from vec4 1,024 on a weight region of WN vec4s, which this dispatch reads from
// vec4 WOFF on (the host spreads phases and the dispatches of a phase over it, so the reads come
// from memory, not L2). Each workgroup issues its weight loads, reads 8 floats of the input per
// invocation, reduces their squares over the workgroup (subgroup sums, shared memory, a barrier:
// a norm prologue's RMS reduction), folds the weights into one value per subgroup (a subgroup
// sum: a row's reduction) and writes it into the next phase's vector. What a real phase does
// beyond this (a second reduction, quantization through shared memory, atomics, an attention's
// chain of stages) is the difference to the real step.
layout(constant_id = 23) const uint MW = 0;
layout(constant_id = 24) const uint PAR = 0;
layout(constant_id = 25) const uint WOFF = 0;
layout(constant_id = 26) const uint WN = 1;
// ... RED more dependent reduction rounds after the first (each a subgroup sum, shared memory and
// a barrier: a second RMS factor, a quantization pass through shared memory), and ATOMS integer
// atomic adds per invocation into the next phase's vector instead of its stores (the down and PLE
// projections' sums added by their producers: every workgroup adds to the same words).
layout(constant_id = 27) const uint RED = 0;
layout(constant_id = 28) const uint ATOMS = 0;
// ... and INV more 2,048-float vectors read per workgroup with the input (8 floats per invocation
// of each, from after the weight region; never written, so they stay in L2 like a prologue's norm
// weights and row scales): what the redundant operand reads of every workgroup's prologue cost.
layout(constant_id = 29) const uint INV = 0;
shared uint pad[SHM];
shared float red9[MW > 0 ? 64 : 1];  // (a subgroup sum each: subgroups of 4 or more lanes)
layout(std430, binding = 3) buffer Y { uint y[]; };
layout(std430, binding = 12) coherent buffer Flags { uint flags[]; };
layout(std430, binding = 12) readonly buffer Vec9 { vec4 v9[]; };
layout(std430, binding = 12) readonly buffer Wt9 { uvec4 w9[]; };

void MinimalPhase() {
  const uint i = gl_LocalInvocationID.x;
  const uint wg = gl_WorkGroupID.x +
                  gl_NumWorkGroups.x * (gl_WorkGroupID.y + gl_NumWorkGroups.y * gl_WorkGroupID.z);
  const uint nv = MW - 1;
  uvec4 w[4];
  const uint base = WOFF + (wg * gl_WorkGroupSize.x + i) * nv;
  [[unroll]] for (uint v = 0; v < 4; ++v)
    if (v < nv) w[v] = w9[1024 + (base + v) % WN];
  const uint in0 = PAR * 512 + (2 * i) % 512;
  const vec4 a = v9[in0], b = v9[in0 + 1];
  float sq = dot(a, a) + dot(b, b);
  for (uint k = 0; k < INV; ++k) {
    const uint e = 1024 + WN + k * 512 + 2 * i;
    sq += dot(v9[e], v9[e + 1]);
  }
  float ss = subgroupAdd(sq);
  if (subgroupElect()) red9[gl_SubgroupID] = ss;
  barrier();
  float tot = 0.0;
  for (uint s = 0; s < gl_NumSubgroups; ++s) tot += red9[s];
  for (uint k = 0; k < RED; ++k) {
    const float t = subgroupAdd(tot * a[k & 3u] + b[(k + 1u) & 3u]);
    barrier();  // (every invocation has read red9 before it is written again)
    if (subgroupElect()) red9[gl_SubgroupID] = t;
    barrier();
    tot = 0.0;
    for (uint s = 0; s < gl_NumSubgroups; ++s) tot += red9[s];
  }
  uint acc = i;
  [[unroll]] for (uint v = 0; v < 4; ++v)
    if (v < nv) acc += w[v].x ^ w[v].y ^ w[v].z ^ w[v].w;
  if (ATOMS > 0) {
    for (uint k = 0; k < ATOMS; ++k)
      atomicAdd(flags[(1 - PAR) * 2048 + (i * ATOMS + k) % 2048], (acc + k) & 1u);
    return;
  }
  const float r = subgroupAdd(tot * float(acc & 255u) * 1e-30);
  if (subgroupElect())
    flags[(1 - PAR) * 2048 + (wg * gl_NumSubgroups + gl_SubgroupID) % 2048] = floatBitsToUint(r);
}

#define S1(x) x = (x ^ (x >> 13u)) * 0x9E3779B1u;
#define S4 S1(a) S1(b) S1(c) S1(d)
#define BLOCK S4 S4 S4 S4 S4 S4 S4 S4 S4 S4 S4 S4 S4 S4 S4 S4

void main() {
  if (MW > 0) {
    MinimalPhase();
    return;
  }
  if (N > 0 && WAIT > 0) {
    // (SPLIT lines per dispatch: invocation i polls line i % SPLIT of dispatch WAIT - 1 + i / SPLIT)
    const uint i = gl_LocalInvocationID.x;
    if (SPLIT > 1 && i < WAIT_N * SPLIT) {
      const uint w = (WAIT - 1 + i / SPLIT) * SPLIT + i % SPLIT;
      for (uint k = 0; k < (1u << 22) && atomicLoad(flags[64 * w + 32], gl_ScopeDevice,
                                                    gl_StorageSemanticsBuffer,
                                                    gl_SemanticsRelaxed) == 0;
           ++k) {
      }
      memoryBarrier(gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsAcquire);
    }
    if (SPLIT == 1 && i == 0) {
      for (uint d = WAIT - 1; d < WAIT - 1 + WAIT_N; ++d) {
        for (uint i = 0; i < (1u << 22) &&
                         atomicLoad(flags[64 * d + 32], gl_ScopeDevice, gl_StorageSemanticsBuffer,
                                    gl_SemanticsRelaxed) == 0;
             ++i) {
        }
      }
      memoryBarrier(gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsAcquire);
    }
    barrier();
  } else if (N == 0 && WAIT_N > 0) {
    if (gl_LocalInvocationID.x == 0) {
      while (atomicLoad(flags[WAIT], gl_ScopeDevice, gl_StorageSemanticsBuffer,
                        gl_SemanticsAcquire) < WAIT_N) {
      }
    }
    barrier();
  }
  const uint k = C1 ^ C2 ^ C3 ^ C4 ^ C5 ^ C6 ^ C7 ^ C8 ^ C9 ^ C10 ^ C11 ^ C12 ^ C13 ^ C14;
  if (CODE > 0 && gl_LocalInvocationID.x < 32) {
    uint a = gl_LocalInvocationID.x + k, b = a + 1u, c = a + 2u, d = a + 3u;
    if (ROLLED != 0) {
      [[dont_unroll]] for (uint i = 0; i < CODE; ++i) { BLOCK }
    } else {
      if (CODE > 0) { BLOCK }
      if (CODE > 1) { BLOCK }
      if (CODE > 2) { BLOCK }
      if (CODE > 3) { BLOCK }
      if (CODE > 4) { BLOCK }
      if (CODE > 5) { BLOCK }
      if (CODE > 6) { BLOCK }
      if (CODE > 7) { BLOCK }
      if (CODE > 8) { BLOCK }
      if (CODE > 9) { BLOCK }
      if (CODE > 10) { BLOCK }
      if (CODE > 11) { BLOCK }
      if (CODE > 12) { BLOCK }
      if (CODE > 13) { BLOCK }
      if (CODE > 14) { BLOCK }
      if (CODE > 15) { BLOCK }
    }
    if ((a ^ b ^ c ^ d) == 0x12345678u + k) y[1] = a;
  }
  if (gl_LocalInvocationID.x == 0xFFFFFFFFu - (k & 0xFFFFu)) y[0] = k;
  if (SHM > 1 && gl_NumWorkGroups.x == 0x7FFFFFF1u) {
    pad[gl_LocalInvocationID.x % SHM] = k;
    barrier();
    y[3] = pad[(gl_LocalInvocationID.x + 1u) % SHM];
  }
  if (N > 0) {
    barrier();
    if (gl_LocalInvocationID.x == 0) {
      const uint wg = gl_WorkGroupID.x +
                      gl_NumWorkGroups.x * (gl_WorkGroupID.y + gl_NumWorkGroups.y * gl_WorkGroupID.z);
      const uint j = wg % SPLIT;
      const uint nj = N / SPLIT + (j < N % SPLIT ? 1u : 0u);
      const uint d = (SIG - 1) * SPLIT + j;
      if (atomicAdd(flags[64 * d], 1u, gl_ScopeDevice, gl_StorageSemanticsBuffer,
                    gl_SemanticsAcquireRelease) == nj - 1)
        atomicStore(flags[64 * d + 32], 1u, gl_ScopeDevice, gl_StorageSemanticsBuffer,
                    gl_SemanticsRelease);
      // (fewer workgroups than lines: the lines nobody counts on are ready at once)
      for (uint e = N; wg == 0 && e < SPLIT; ++e)
        atomicStore(flags[64 * ((SIG - 1) * SPLIT + e) + 32], 1u, gl_ScopeDevice,
                    gl_StorageSemanticsBuffer, gl_SemanticsRelaxed);
    }
  } else if (SIG > 0) {
    barrier();
    if (gl_LocalInvocationID.x == 0)
      atomicAdd(flags[SIG - 1], 1u, gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsRelease);
  }
}
