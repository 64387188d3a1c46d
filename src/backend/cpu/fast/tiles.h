// Register tile shape and prefetch distance shared by the linear kernels (quant_linear.cc,
// fast_ops.cc); target-independent, so outside Highway's per-target namespaces.
#pragma once

#include <cstddef>

namespace gemma::fast {

constexpr int kRows = 4;    // rows per register tile
constexpr int kTokens = 4;  // tokens per register tile (prefill)
// Decode: prefetch distance (whole 4-row groups). 12 KiB was best with 16 short row ranges per
// linear; with 2 long ranges per thread and both threads streaming, 8 KiB is (end to end ITL ~22.9
// -> ~21.9 ms; 4 KiB 24.4, 6 KiB 22.2, 12 KiB 22.7).
constexpr size_t kPrefetchBytes = 8192;

}  // namespace gemma::fast
