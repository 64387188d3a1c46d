// Register tile shape and prefetch distance shared by the linear kernels (quant_linear.cc,
// fast_ops.cc); target-independent, so outside Highway's per-target namespaces.
#pragma once

#include <cstddef>

// The WebAssembly build compiles Highway's portable EMU128 target only (Debian's Highway 1.0.3 has
// no f64 vectors on its WASM target: src/backend/cpu/fast/CMakeLists.txt); the kernels that decode
// spends its time in have WebAssembly SIMD paths there (`#if GEMMA_WASM_KERNELS`), with the same
// lanes and the same operations in the same order as the EMU128 code they replace, so results are
// bit-identical to it (docs/web.md).
#if defined(__wasm_simd128__)
#include <wasm_simd128.h>
#define GEMMA_WASM_KERNELS (HWY_TARGET == HWY_EMU128)
#else
#define GEMMA_WASM_KERNELS 0
#endif

namespace gemma::fast {

constexpr int kRows = 4;    // rows per register tile
constexpr int kTokens = 4;  // tokens per register tile (prefill)
// Decode: prefetch distance (whole 4-row groups). 12 KiB was best with 16 short row ranges per
// linear; with 2 long ranges per thread and both threads streaming, 8 KiB is (end to end ITL ~22.9
// -> ~21.9 ms; 4 KiB 24.4, 6 KiB 22.2, 12 KiB 22.7).
constexpr size_t kPrefetchBytes = 8192;

// kPrefetchBytes rounded to whole groups of `group` bytes (a tile's rows), at least one group.
inline size_t PrefetchAhead(size_t group) {
  return (kPrefetchBytes / group > 0 ? kPrefetchBytes / group : 1) * group;
}

}  // namespace gemma::fast
