#version 450
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
layout(std430, binding = 3) buffer Y { uint y[]; };

void main() {
  const uint k = C1 ^ C2 ^ C3 ^ C4 ^ C5 ^ C6 ^ C7 ^ C8 ^ C9 ^ C10 ^ C11 ^ C12 ^ C13 ^ C14;
  if (gl_LocalInvocationID.x == 0xFFFFFFFFu - (k & 0xFFFFu)) y[0] = k;
}
