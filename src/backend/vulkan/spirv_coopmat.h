// SPIR-V written against SPV_NV_cooperative_matrix, rewritten for SPV_KHR_cooperative_matrix.
//
// Debian 12's glslang (11.13) compiles GL_NV_cooperative_matrix but not the KHR extension. The NV
// matrix types do not say which operand of a product a matrix is, so NVIDIA's driver keeps every
// f16 matrix in one register layout and transposes the B operands before each product (a MOVM
// per use; on the H200 they bounded the prompt linears at ~15% of the matrix units' rate). The
// KHR types carry the use (A, B, accumulator), so the driver loads B in its operand layout.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gemma::vk {

// The module with its NV cooperative-matrix capability, extension, types and instructions
// replaced by the KHR ones. Each f16 matrix value takes the use its products give it (A or B;
// loads, phis, copies and selects of one value share it; unused: A); f32 matrices are
// accumulators. Returns the input unchanged when it does not use NV cooperative matrices, and an
// empty vector with *error set for constructs it does not rewrite (a value used as both A and B,
// matrices in variables, f32 operands or f16 accumulators).
std::vector<uint32_t> CoopMatrixNvToKhr(std::span<const uint32_t> spirv, std::string* error);

}  // namespace gemma::vk
