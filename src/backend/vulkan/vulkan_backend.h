// The Vulkan backend: resident GPU execution of the Gemma 4 text decoder.
//
// Weights (except the token-embedding and PLE tables, which stay host-side: only the gathered
// rows of a step are uploaded), K/V caches and activations live in device memory. A decoded token
// is one pre-recorded command buffer, one submission and one small readback (8 bytes for argmax
// and select). Numerics follow the CPU reference (reference_ops.h): QAT linears quantize their
// input with SRQ and accumulate exactly in integers; dense linears accumulate in f32.
//
// Layout of a step: the host writes the step values (first position, token count), the gathered
// embedding/PLE rows and (select) the allowed mask into a mapped staging buffer; the command buffer
// copies them to device memory first, so the one-token command buffer is recorded once per output
// mode and reused for every decoded token (per-token values are read from that copied block, not
// push constants, for that reason). Shapes are specialization constants; per-linear scalars are
// push constants recorded with each dispatch. Steps of 8+ tokens use tiled matrix kernels: on
// matrix units (VK_NV_cooperative_matrix, f16 operands holding exact small integers, so the SRQ
// integer sums are still exact) where the device offers them, a portable f32 tile elsewhere; their
// attention computes dot products and weighted sums in f32 (softmax in double), as transformers
// does, where one-token steps and the CPU reference use double (docs/vulkan.md).
// Requirements: Vulkan 1.1 compute with subgroup arithmetic and shuffle (subgroups of 8+) and
// shaderFloat64 (the reductions the CPU reference does in double are done in double).
//
// Failures: any Vulkan error, VK_ERROR_DEVICE_LOST included, fails the request in flight with
// gemma::Error(kDevice) and leaves cached() as it was before the request; the next Forward
// rebuilds the device state and replays the committed tokens, so the conversation is kept.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/vulkan/kernel_config.h"
#include "model/model.h"

namespace gemma {

struct VulkanOptions {
  // Physical device index (-1: discrete > integrated > virtual > CPU). The environment variable
  // GEMMA_VULKAN_DEVICE (index or name substring) overrides it.
  int device_index = -1;
  // With device_index -1: never pick a CPU-type device (the "auto" backend choice).
  bool skip_cpu_devices = false;
  // Key splits of decode attention (0: chosen from the device).
  int decode_splits = 0;
  // Weight matrices larger than the device's maxStorageBufferRange are split by rows; a non-zero
  // value lowers that limit (tests exercise the split on small models with it).
  size_t max_weight_part_bytes = 0;
  // Device-local memory the engine (weights and every session) may hold, in bytes (0: the
  // device's largest device-local heap). Past it, loading or a new session is Error(kCapacity)
  // saying what it needs, before anything is allocated; the "auto" backend then runs on the CPU.
  size_t device_memory_limit = 0;
  // Longest prompt chunk evaluated at once (0: 1,024 tokens for models with a sliding window of
  // at least 512 on a discrete GPU with at least 8 GiB of device-local memory, else 512;
  // the kernel config's MAX_CHUNK overrides, to compare). Where BackendOptions leaves the slack at
  // 0, the sliding rings then hold window + max(window, chunk) entries; a caller's slack bounds the
  // chunk instead (the chunk is at most the slack).
  int max_chunk = 0;
  // A submission not finished after this many seconds is a hung device: Error(kDevice), the device
  // is given up and the contexts rebuild on a new one (0: 60 s on GPUs, 600 s on CPU devices).
  double step_timeout_s = 0;
  // Kernel choices other than their measured defaults (kernel_config.h; benchmarks and tests).
  // The environment variable GEMMA_VULKAN_KERNELS (the same text) applies over it.
  KernelConfig kernels;
  // Diagnostics: each pipeline's driver binary written to this folder (empty: not).
  std::string pipeline_dump_dir;
};

// Throws gemma::Error(kDevice) when no usable Vulkan device exists.
std::shared_ptr<BackendModel> CreateVulkanModel(const Model& model, const VulkanOptions& vulkan);
std::unique_ptr<Backend> CreateVulkanBackend(const Model& model, const BackendOptions& options);
std::unique_ptr<Backend> CreateVulkanBackend(const Model& model, const BackendOptions& options,
                                             const VulkanOptions& vulkan);

// Another context on `backend`'s device, pipelines and weights (nullptr for other backends), with
// `kernels` over the model's kernel choices: benchmarks and tests compare kernel variants on one
// device without building it and uploading the weights again. (The down projections' pair-major
// copies are the model's choice: DOWN_FUSE_PAIRS has no effect here.)
std::unique_ptr<Backend> CreateVulkanSibling(const Backend& backend, const BackendOptions& options,
                                             const KernelConfig& kernels = {});

// Diagnostics and test hooks for a backend made by CreateVulkanBackend (nullptr otherwise).
struct VulkanStats {
  std::string device;
  bool cpu_device = false;       // a CPU-type device (e.g. Mesa's lavapipe)
  size_t device_bytes = 0;       // resident device memory (weights, caches, activations)
  size_t weight_bytes = 0;       // of which weights
  int dispatches_per_token = 0;  // in the decode command buffer
  int barriers_per_token = 0;
  int rebuilds = 0;     // device-state rebuilds after failures
  int64_t batched_steps = 0;  // this context's one-token steps run as rows of a batch
  size_t pipelines = 0;       // pipelines built on the device so far (all contexts)
  std::string kernels;  // the kernel variants in use (and the kernel config's overrides)
};
bool GetVulkanStats(const Backend& backend, VulkanStats* stats);
// GPU time per empty dispatch (bench/vulkan/vulkan_lab.h: MeasureVulkanDispatchCost).
struct VulkanDispatchCost {
  double dependent_us = 0, dependent_wide_us = 0, independent_us = 0;
  uint32_t wide = 0;
};

}  // namespace gemma
