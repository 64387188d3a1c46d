// The Vulkan backend's measurement lab (bench/vulkan, target gemma_vulkan_lab; the library does
// not link it): bandwidth floors, dispatch cost, per-kernel profiles and kernel probes of a
// backend made by CreateVulkanBackend (zeros / empty for other backends).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/vulkan/vulkan_backend.h"

namespace gemma {

// Device-to-device copy bandwidth (bytes read + written per second) on the backend's device.
double MeasureVulkanCopyBandwidth(Backend& backend, size_t bytes);
// Bytes per second a compute shader reads from all resident weight buffers at once (a pass over
// the decode's weight traffic, timed with GPU timestamps; 0 without timestamps).
double MeasureVulkanWeightReadBandwidth(Backend& backend);
// Bytes per second a compute shader streams from the largest resident weight buffer (its size in
// *range_bytes), read over and over: the device's streaming read bandwidth, a floor independent of
// how the weights are split into buffers (0 without timestamps).
double MeasureVulkanStreamReadBandwidth(Backend& backend, size_t* range_bytes = nullptr);
// The matrix units' f16 x f16 -> f32 rate (FLOP/s) of 16x16x16 cooperative-matrix products held in
// registers (no memory traffic), every compute unit busy; 0 without matrix units or timestamps.
// mode 1 / 2: the B fragments loaded from shared memory before every product round, column- /
// row-major; 3: the A fragment, row-major (mma_peak.comp).
double MeasureVulkanMatrixPeak(Backend& backend, int mode = 0);
// GPU time (us, timestamps) per dispatch of an empty kernel in a command buffer of `n` of them:
// one workgroup each with a pipeline barrier between (what a dependent step pays per phase), the
// same with `wide` workgroups, and one workgroup without barriers. Zeros without timestamps.
VulkanDispatchCost MeasureVulkanDispatchCost(Backend& backend, int n = 320);
// GPU time per kernel label (ns, summed over the step) of one step over `tokens` (at most
// capabilities().max_chunk) at the current position, from timestamps after every dispatch; the
// caches are not advanced. Empty without timestamps.
std::vector<std::pair<std::string, double>> ProfileVulkanStep(Backend& backend,
                                                              std::span<const int32_t> tokens);
// The same for a batched step (BackendModel::ForwardBatch) of Vulkan contexts of one model, row
// i stepping tokens[i]; empty where they cannot batch.
std::vector<std::pair<std::string, double>> ProfileVulkanBatch(std::span<Backend* const> contexts,
                                                               std::span<const int32_t> tokens);
// One step over `tokens` (caches not advanced) with the `nth` dispatch labelled `label` (a
// "linear_dp ..." label of ProfileVulkanStep, or "attention") run as its probe variant: per-stage
// device-clock times of its workgroups as a markdown table (or a line saying why not).
std::string ProbeVulkanKernel(Backend& backend, std::span<const int32_t> tokens,
                              const std::string& label, int nth = 0);

}  // namespace gemma
