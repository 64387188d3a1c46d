// PROBE 1 (kernel probes, ProbeVulkanKernel): invocation 0 of every workgroup writes the device
// clock at up to 8 points, Probe(k), into probe[(workgroup index) * 8 + k] (workgroups past 4095
// write nothing). The includer defines PROBE_BINDING, a binding the kernel otherwise leaves free.
#ifndef PROBE
#define PROBE 0
#endif
#if PROBE
#extension GL_EXT_shader_realtime_clock : require
layout(std430, binding = PROBE_BINDING) buffer ProbeBuf { uvec2 probe[]; };
void Probe(uint k) {
  const uint wg = gl_WorkGroupID.x +
                  gl_NumWorkGroups.x * (gl_WorkGroupID.y + gl_NumWorkGroups.y * gl_WorkGroupID.z);
  if (gl_LocalInvocationID.x == 0 && wg < 4096u) probe[wg * 8u + k] = clockRealtime2x32EXT();
}
#else
void Probe(uint k) {}
#endif
