// Command recording shared by the towers' resident paths (vulkan_tower.cc: the image tower and
// the towers' common parts; vulkan_audio_tower.cc: the audio tower). Internal.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "backend/vulkan/vk_device.h"
#include "model/model.h"

namespace gemma::vulkan_internal {

// tower_gemm.comp's push constants.
struct GemmPush {
  uint32_t n, K, N, wstride, flags;
  float in_min, in_max, out_min, out_max;
  uint32_t cT = 0, cF = 0, cin = 0, cF2 = 0, mstride = 0;  // CONV
};

GemmPush MakeGemmPush(const gemma::Linear& lin, uint32_t wstride, int n);
// A clippable linear's bounds into tower_gemm's push constants (infinite bounds: no clamp, as
// ref::ClippedForward).
void SetClamps(const ClippedLinear& cl, GemmPush* pc);
// Resets `cmd` and begins it for one submission.
void BeginOneTime(VkCommandBuffer cmd);
// Records one dispatch of `shader` into `cmd`, then a barrier: its writes before what follows.
void RecordDispatch(vk::Device& dev, VkCommandBuffer cmd, const char* shader,
                    const std::vector<uint32_t>& spec,
                    const std::array<vk::BufRange, vk::kBindings>& b, const void* push,
                    size_t push_bytes, uint32_t gx, uint32_t gy, vk::Device::BarrierKind barrier);
// Ends `cmd` with a copy of `floats` f32 values from `src` to the host-visible `host`, submits it,
// waits, and puts the values in `out`. Throws Error(kDevice).
void SubmitAndRead(vk::Device& dev, VkCommandBuffer cmd, const vk::BufRange& src,
                   const vk::BufRange& host, size_t floats, std::vector<float>* out);
// Workgroups of 256 for `count` elements (tower_ew, tower_pool): x at most 65,535, the rest in y.
std::pair<uint32_t, uint32_t> Grid256(size_t count);

}  // namespace gemma::vulkan_internal
