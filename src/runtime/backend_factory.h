// Backend selection by name: "cpu", "cpu-ref", "vulkan", "auto". Which backends exist depends on
// the build (GEMMA_HAVE_CPU_FAST, GEMMA_HAVE_VULKAN).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace gemma {

struct BackendChoice {
  std::string name = "cpu";  // cpu | cpu-ref | vulkan | auto
  int threads = 0;           // CPU threads including the caller, 0 = all cores
  int device_index = -1;     // Vulkan physical device, -1 = by type
  size_t device_memory_limit = 0;  // Vulkan: bytes the engine may hold, 0 = the largest heap
  double device_step_timeout_s = 0;  // Vulkan: a step's wait past this is a hang (0 = default)
};

// The engine-level backend object and its first context (made at once, so a missing device or a
// capacity the device cannot hold fails here). "auto" is Vulkan on a GPU (never a CPU-type Vulkan
// device such as lavapipe), else "cpu". Throws Error(kInvalidArgument) for an unknown name or bad
// threads, Error(kDevice) when the named backend cannot start.
struct BackendStart {
  std::shared_ptr<BackendModel> model;
  std::unique_ptr<Backend> context;
};
BackendStart StartBackend(const BackendChoice& choice, const Model& model,
                          const BackendOptions& options);

// A model with one context (tools and tests that need one conversation).
std::unique_ptr<Backend> CreateBackend(const std::string& name, const Model& model,
                                       const BackendOptions& options, int threads);
std::vector<std::string> AvailableBackends();

// The largest thread count a CPU backend accepts.
inline constexpr int kMaxThreads = 1024;

}  // namespace gemma
