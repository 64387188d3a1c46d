#include "runtime/backend_factory.h"

#include "gemma/error.h"
#ifdef GEMMA_HAVE_CPU_FAST
#include "backend/cpu/fast/cpu_fast_backend.h"
#endif
#ifdef GEMMA_HAVE_VULKAN
#include "backend/vulkan/vulkan_backend.h"
#endif

namespace gemma {

std::vector<std::string> AvailableBackends() {
  std::vector<std::string> names = {"cpu", "cpu-ref"};
#ifdef GEMMA_HAVE_VULKAN
  names.push_back("vulkan");
#endif
  names.push_back("auto");
  return names;
}

std::unique_ptr<Backend> CreateBackend(const std::string& name, const Model& model,
                                       const BackendOptions& options, int threads) {
  if (name == "cpu-ref") return CreateCpuReferenceBackend(model, options);
  if (name == "cpu") {
#ifdef GEMMA_HAVE_CPU_FAST
    return CreateCpuFastBackend(model, options, threads);
#else
    return CreateCpuReferenceBackend(model, options);
#endif
  }
  if (name == "vulkan") {
#ifdef GEMMA_HAVE_VULKAN
    return CreateVulkanBackend(model, options);
#else
    throw Error(ErrorCode::kUnsupported, "backend 'vulkan': this build has no Vulkan support");
#endif
  }
  if (name == "auto") {
#ifdef GEMMA_HAVE_VULKAN
    try {
      return CreateVulkanBackend(model, options);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kDevice) throw;
    }
#endif
    return CreateBackend("cpu", model, options, threads);
  }
  throw Error(ErrorCode::kInvalidArgument,
              "unknown backend '" + name + "' (cpu, cpu-ref, vulkan, auto)");
}

}  // namespace gemma
