#version 450
// Matrix-unit peak probe (the measurement lab): every subgroup multiplies fragments it holds,
// ACC independent 16x16 f32 accumulators, p.iters rounds (16x16x16 f16 products), no memory
// traffic in the loop (MODE 0); the sums are stored only for an impossible push value (keeps
// them alive). MODE 1 / 2 load the B fragments from shared memory every round, column-major /
// row-major; MODE 3 the A fragment, row-major (what each load costs the driver's code).
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
layout(constant_id = 1) const uint MODE = 0;
layout(std430, binding = 3) buffer Y { float y[]; };
layout(push_constant) uniform P { uint iters; uint store; } p;
#ifndef ACC
#define ACC 8
#endif
shared uvec4 sm[64];  // two 16 x 16 f16 tiles
#define F16M fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define F32M fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

void main() {
  if (gl_LocalInvocationID.x < 64) sm[gl_LocalInvocationID.x] = uvec4(0x1C001C00u * (gl_LocalInvocationID.x & 1u));
  barrier();
  F16M a, b[2];
  coopMatLoadNV(a, sm, 0, 2, false);
  coopMatLoadNV(b[0], sm, 32, 2, true);
  coopMatLoadNV(b[1], sm, 0, 2, true);
  F32M acc[ACC];
  [[unroll]] for (uint i = 0; i < ACC; ++i) acc[i] = F32M(0.0);
  for (uint it = 0; it < p.iters; ++it) {
    const uint o = (it & 1u) * 32u;
    if (MODE == 1) {
      coopMatLoadNV(b[0], sm, o, 2, true);
      coopMatLoadNV(b[1], sm, 32u - o, 2, true);
    } else if (MODE == 2) {
      coopMatLoadNV(b[0], sm, o, 2, false);
      coopMatLoadNV(b[1], sm, 32u - o, 2, false);
    } else if (MODE == 3) {
      coopMatLoadNV(a, sm, o, 2, false);
    }
    [[unroll]] for (uint i = 0; i < ACC; ++i) acc[i] = coopMatMulAddNV(a, b[i & 1], acc[i]);
  }
  if (p.store == 12345u) {
    [[unroll]] for (uint i = 0; i < ACC; ++i) coopMatStoreNV(acc[i], y, 256 * i, 16, false);
  }
}
