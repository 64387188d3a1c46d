#version 450
// Merges the key splits of attention.comp (double): o = sum_s o_s e^(m_s - M) / sum_s l_s e^(m_s - M).
#extension GL_KHR_shader_subgroup_arithmetic : enable
#extension GL_KHR_shader_subgroup_basic : enable
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(std430, binding = 3) readonly buffer PO { double po[]; };
layout(std430, binding = 4) readonly buffer PML { dvec2 pml[]; };
layout(std430, binding = 5) writeonly buffer O { float o[]; };

layout(push_constant) uniform P {
  uint nh, hd, splits, o_stride;
} p;

const uint WG = gl_WorkGroupSize.x;
#include "combine.glsl"

void main() {
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y;
  CombineHead((t * p.nh + h) * p.splits, p.splits, p.hd, t * p.o_stride + h * p.hd);
}
