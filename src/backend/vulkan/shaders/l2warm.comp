#version 450
// GEMMA_VULKAN_L2_WARM (one-token steps): reads one word of every 32-byte sector of a weight range
// and discards it, so a later phase finds those weights in the L2 cache. Dispatched beside a
// phase's kernel (no barrier between), it costs that phase nothing where the phase leaves the
// memory system idle. Writes nothing unless the words' xor equals the push constant `never`.
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 3) writeonly buffer Sink { uint sink[]; };
layout(push_constant) uniform P {
  uint words;  // words in the range
  uint never;
} p;

void main() {
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x * 8;
  uint acc = 0;
  for (uint i = gl_GlobalInvocationID.x * 8; i < p.words; i += step) acc ^= w[i];
  if (acc == p.never) sink[0] = acc;
}
