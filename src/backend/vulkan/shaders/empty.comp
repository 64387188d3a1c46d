#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_memory_scope_semantics : enable
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
shared uint pad[SHM];
layout(std430, binding = 3) buffer Y { uint y[]; };
layout(std430, binding = 12) coherent buffer Flags { uint flags[]; };

#define S1(x) x = (x ^ (x >> 13u)) * 0x9E3779B1u;
#define S4 S1(a) S1(b) S1(c) S1(d)
#define BLOCK S4 S4 S4 S4 S4 S4 S4 S4 S4 S4 S4 S4 S4 S4 S4 S4

void main() {
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
