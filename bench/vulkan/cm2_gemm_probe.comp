#version 450
// cm2_gemm_probe.cc's kernel: C[N][M] = A[M][K] . B[N][K]^T on workgroup-scope cooperative matrices.
// F16 (default): f16 A and B, f32 sums. INT8: int8 A and B, int32 sums. PACK=4 / 2: A as packed
// offset-binary int4 / int2 codes (8 / 16 per word along K) decoded at load, B int8.
#extension GL_KHR_memory_scope_semantics : enable
#extension GL_KHR_cooperative_matrix : enable
#extension GL_NV_cooperative_matrix2 : enable
#extension GL_EXT_shader_explicit_arithmetic_types : enable
#extension GL_EXT_buffer_reference : enable

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 128;
layout(constant_id = 2) const uint BN = 128;
layout(constant_id = 3) const uint BK = 32;

#if defined(INT8) || defined(PACK)
#define AT int8_t
#define CT int32_t
#else
#define AT float16_t
#define CT float
#endif
#ifdef PACK
struct Word { uint w; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer WordRef { Word b; };
layout(std430, binding = 0) readonly buffer A { Word a[]; };
AT DecodeA(const in WordRef r, const in uint32_t blockCoords[2], const in uint32_t coordInBlock[2]) {
  const uint s = (PACK) * coordInBlock[1];
  return AT(int((r.b.w >> s) & ((1u << (PACK)) - 1u)) - (1 << ((PACK) - 1)));
}
#else
layout(std430, binding = 0) readonly buffer A { AT a[]; };
#endif
layout(std430, binding = 1) readonly buffer B { AT b[]; };
layout(std430, binding = 2) writeonly buffer C { CT c[]; };
layout(push_constant) uniform P { uint M, N, K; } p;

void main() {
  const uint r0 = gl_WorkGroupID.y * BM, t0 = gl_WorkGroupID.x * BN;
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> la =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lb =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lc =
      createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
#ifdef PACK
  la = setTensorLayoutBlockSizeNV(la, 1, 32 / (PACK));
#endif
  la = setTensorLayoutDimensionNV(la, p.M, p.K);
  lb = setTensorLayoutDimensionNV(lb, p.N, p.K);
  lc = setTensorLayoutDimensionNV(lc, p.N, p.M);
  tensorViewNV<2, false, 1, 0> tr = createTensorViewNV(2, false, 1, 0);
  coopmat<CT, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> acc =
      coopmat<CT, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(CT(0));
  for (uint k = 0; k < p.K; k += BK) {
    coopmat<AT, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> ma;
    coopmat<AT, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB> mb;
#ifdef PACK
    coopMatLoadTensorNV(ma, a, 0, sliceTensorLayoutNV(la, r0, BM, k, BK), DecodeA);
#else
    coopMatLoadTensorNV(ma, a, 0, sliceTensorLayoutNV(la, r0, BM, k, BK));
#endif
    coopMatLoadTensorNV(mb, b, 0, sliceTensorLayoutNV(lb, t0, BN, k, BK), tr);
    acc = coopMatMulAdd(ma, mb, acc);
  }
  coopMatStoreTensorNV(acc, c, 0, sliceTensorLayoutNV(lc, t0, BN, r0, BM), tr);
}
