// PROBE 1 or 2 (kernel probes, ProbeVulkanKernel): invocation 0 of every workgroup writes, at up
// to 8 points Probe(k), the device clock into probe[(workgroup index) * 16 + k] and its compute
// unit's cycle counter (subgroup clock: fine resolution, not comparable across units) into
// probe[... + 8 + k] (workgroups past 4095 write nothing). The includer defines PROBE_BINDING, a
// binding the kernel otherwise leaves free.
#ifndef PROBE
#define PROBE 0
#endif
#if PROBE
#extension GL_EXT_shader_realtime_clock : require
#extension GL_ARB_shader_clock : require
layout(std430, binding = PROBE_BINDING) buffer ProbeBuf { uvec2 probe[]; };
void ProbeAt(uint k) {
  const uint wg = gl_WorkGroupID.x +
                  gl_NumWorkGroups.x * (gl_WorkGroupID.y + gl_NumWorkGroups.y * gl_WorkGroupID.z);
  if (gl_LocalInvocationID.x == 0 && wg < 4096u) {
    probe[wg * 16u + k] = clockRealtime2x32EXT();
    probe[wg * 16u + 8u + k] = clock2x32ARB();
  }
}
#endif
// Probe(k): the kernel's stage boundaries (PROBE 1); Probe2(k): a finer set inside one stage
// (PROBE 2, where the kernel has one).
void Probe(uint k) {
#if PROBE == 1
  ProbeAt(k);
#endif
}
void Probe2(uint k) {
#if PROBE == 2
  ProbeAt(k);
#endif
}
