// Backend selection by name: "cpu", "cpu-ref", "vulkan", "auto". Which backends exist depends on
// the build (GEMMA_HAVE_CPU_FAST, GEMMA_HAVE_VULKAN).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace gemma {

// Throws Error(kInvalidArgument) for an unknown name, Error(kDevice) when the backend cannot start.
std::unique_ptr<Backend> CreateBackend(const std::string& name, const Model& model,
                                       const BackendOptions& options, int threads);
std::vector<std::string> AvailableBackends();

}  // namespace gemma
