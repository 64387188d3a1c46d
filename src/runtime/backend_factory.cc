#include "runtime/backend_factory.h"

#include "gemma/error.h"
#ifdef GEMMA_HAVE_CPU_FAST
#include "backend/cpu/fast/cpu_fast_backend.h"
#endif
#ifdef GEMMA_HAVE_VULKAN
#include "backend/vulkan/vulkan_backend.h"
#endif
#ifdef GEMMA_HAVE_WEBGPU
#include "backend/webgpu/webgpu_backend.h"
#endif

namespace gemma {
namespace {
#ifdef GEMMA_HAVE_WEBGPU
constexpr bool kAutoWebGpu = true;  // the WebAssembly build: auto is WebGPU, else the CPU
#else
constexpr bool kAutoWebGpu = false;
#endif
}  // namespace

std::vector<std::string> AvailableBackends() {
  std::vector<std::string> names = {"cpu", "cpu-ref"};
#ifdef GEMMA_HAVE_VULKAN
  names.push_back("vulkan");
#endif
#ifdef GEMMA_HAVE_WEBGPU
  names.push_back("webgpu");
#endif
  names.push_back("auto");
  return names;
}

BackendStart StartBackend(const BackendChoice& choice, const Model& model,
                          const BackendOptions& options) {
  if (choice.threads < 0 || choice.threads > kMaxThreads) {
    throw Error(ErrorCode::kInvalidArgument, "threads = " + std::to_string(choice.threads) +
                                                 ": use 0 (all cores) to " +
                                                 std::to_string(kMaxThreads));
  }
  BackendStart s;
  const std::string& name = choice.name;
  if (name == "cpu-ref") {
    s.model = CreateCpuReferenceModel(model);
  } else if (name == "cpu") {
#ifdef GEMMA_HAVE_CPU_FAST
    s.model = CreateCpuFastModel(model, choice.threads);
#else
    s.model = CreateCpuReferenceModel(model);
#endif
  } else if (name == "webgpu" || (name == "auto" && kAutoWebGpu)) {
#ifdef GEMMA_HAVE_WEBGPU
    try {
      s.model = CreateWebGpuModel(model);
      s.context = s.model->NewContext(options);
      return s;
    } catch (const Error& e) {
      // "auto" runs on the CPU without WebGPU, or with a device too small for the model.
      if (name == "webgpu" || (e.code() != ErrorCode::kDevice && e.code() != ErrorCode::kCapacity &&
                               e.code() != ErrorCode::kUnsupported)) {
        throw;
      }
    }
#else
    throw Error(ErrorCode::kUnsupported,
                "backend 'webgpu': only the WebAssembly build has the WebGPU backend");
#endif
    BackendChoice cpu = choice;
    cpu.name = "cpu";
    return StartBackend(cpu, model, options);
  } else if (name == "vulkan" || name == "auto") {
#ifdef GEMMA_HAVE_VULKAN
    VulkanOptions vulkan;
    vulkan.device_index = choice.device_index;
    vulkan.device_memory_limit = choice.device_memory_limit;
    vulkan.step_timeout_s = choice.device_step_timeout_s;
    vulkan.skip_cpu_devices = name == "auto";
    try {
      s.model = CreateVulkanModel(model, vulkan);
      s.context = s.model->NewContext(options);
      return s;
    } catch (const Error& e) {
      // "auto" runs on the CPU without a usable device, or one with too little memory.
      if (name == "vulkan" ||
          (e.code() != ErrorCode::kDevice && e.code() != ErrorCode::kCapacity)) {
        throw;
      }
    }
#else
    if (name == "vulkan")
      throw Error(ErrorCode::kUnsupported, "backend 'vulkan': this build has no Vulkan support");
#endif
    BackendChoice cpu = choice;
    cpu.name = "cpu";
    return StartBackend(cpu, model, options);
  } else {
    throw Error(ErrorCode::kInvalidArgument,
                "unknown backend '" + name + "' (cpu, cpu-ref, vulkan, webgpu, auto)");
  }
  s.context = s.model->NewContext(options);
  return s;
}

std::unique_ptr<Backend> CreateBackend(const std::string& name, const Model& model,
                                       const BackendOptions& options, int threads) {
  return StartBackend({.name = name, .threads = threads}, model, options).context;
}

}  // namespace gemma
