// Test-only hooks of the Vulkan backend (target gemma_vulkan_testing, linked by tests only).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/vulkan/vulkan_backend.h"

namespace gemma {

// Kernel test hook: y[n][lin.rows] from one linear over x[n][lin.cols] on the backend's device,
// through the kernel an n-token step uses (one-token matvec, multi-token matvec, or the tiled
// kernel from 8 tokens). epilogue 0: store; 1: gelu_tanh(lin) * second (gate/up); 2: softcap.
std::vector<float> VulkanLinearForTest(Backend& backend, const Linear& lin, const Linear* second,
                                       const float* x, int n, int epilogue);
// Kernel test hook: the matrix-unit linears' input quantization (srq_quant.comp) of x[n][cols]
// with input scale in_s: n rows of 16 bytes per 8 columns (padded to 64 columns) holding f16
// values, or with `i8` the same values as int8 bytes, row t from byte t x 8 x (padded columns / 8)
// (the buffer's first half; the rest as it was filled before: 0xAB). Empty for other backends.
std::vector<uint8_t> VulkanSrqQuantForTest(Backend& backend, const float* x, int n, int cols,
                                           float in_s, bool i8);
// Kernel test hook: the prefill attention on matrix units (attention_cm.comp) over q[m][nh hd]
// at positions pos0 .. pos0 + m - 1 and K / V cache rings k / v [ring][nkv hd] (key j in row
// j % ring; window 0: full attention), out[m][nh hd]; empty where the device does not run that
// path or the shape does not fit it.
std::vector<float> VulkanPrefillAttentionForTest(Backend& backend, const float* q, const float* k,
                                                 const float* v, int nh, int nkv, int hd, int ring,
                                                 int window, int pos0, int m);
// Benchmark hook: VulkanLinearForTest's linear recorded `reps` times in one command buffer (a
// barrier between), after one untimed run; returns the GPU time per run in ns (timestamps; 0
// without them) and the last run's output in *y; *main_ns: the part of it in the main kernel
// (linear_c* / linear_mm: not the input's split or quantization). `probe`: the large-tile
// matrix-unit kernels run as the lab's probe build <module>_<probe> (its results meaningless).
double VulkanTimeLinearForBench(Backend& backend, const Linear& lin, const Linear* second,
                                const float* x, int n, int epilogue, int reps,
                                std::vector<float>* y = nullptr, double* main_ns = nullptr,
                                const char* probe = nullptr);
// Random weights for kernel tests and benchmarks: rows x cols of `kind` from `seed` (bf16 with
// small exponents: finite values of modest size; packed codes with per-row scales and an SRQ input
// scale). `lin` points into the struct's own vectors: move it, do not copy it.
struct SynthLinear {
  std::vector<uint8_t> bytes;
  std::vector<float> scales;
  Linear lin;
};
SynthLinear MakeSynthLinear(WeightKind kind, int rows, int cols, uint32_t seed);
// Waits until a model made by CreateVulkanModel has built its batched steps' pipelines (kernel
// choice BATCH_WARM, from its second context on; at once where that thread has not started).
// False for other models. (Defined beside the model in the library.)
bool WaitForVulkanBatchPipelines(BackendModel& model);
// Makes the next submission fail as VK_ERROR_DEVICE_LOST does. Returns false for other backends.
bool SimulateVulkanDeviceLoss(Backend& backend);

}  // namespace gemma
