// The WebGPU backend (WebAssembly build only): the text model's operations as WGSL kernels
// (src/backend/webgpu/wgsl/), weights and caches resident on the GPU, one readback per step. The
// C++ side plans and records the work; webgpu_library.js is the thin device layer, and its two
// asynchronous calls (device creation, readback) suspend the caller through Asyncify, so the
// page's event loop keeps turning while the GPU works. docs/webgpu.md.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace gemma {

class Model;

// Creates the device (navigator.gpu, or Module.gpu under Node) and uploads the weights.
// Error(kUnsupported) where WebGPU is absent, Error(kDevice) when the adapter or device cannot be
// had, Error(kCapacity) when a weight exceeds the device's buffer limits.
std::shared_ptr<BackendModel> CreateWebGpuModel(const Model& model);

// The adapter the last CreateWebGpuModel got ("" before).
std::string WebGpuAdapter();

// Tests: destroys the device, as a lost GPU would be; the next request fails with kDevice and the
// one after rebuilds the device from the weights and replays each conversation.
void WebGpuLoseDevice();

}  // namespace gemma
