#include "backend/vulkan/vk_device.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/vulkan/spirv_coopmat.h"
#include "gemma/error.h"

namespace gemma::vk {

// What a device's contexts share: the handles (destroyed with the last context), the queue's lock
// (vkQueueSubmit needs external synchronization) and the pipelines, built once under their lock.
// The instance is not theirs: one per process (ProcessInstance).
struct Core {
  VkDevice dev = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE, rows_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  std::mutex queue_mu, pipe_mu;
  // Device-local bytes held by every context, what they may hold, and injected faults.
  std::atomic<size_t> device_bytes{0};
  size_t memory_limit = 0;
  std::atomic<bool> fail_next_submit{false}, fail_next_alloc{false}, hang_next_wait{false};
  // A submission did not finish within the step timeout: the device is given up. Its contexts'
  // handles and the device itself are destroyed on threads of their own once the queue is idle
  // (after a real hang that wait may never end: those threads wait, nothing else does).
  std::atomic<bool> abandoned{false};
  std::map<std::string, VkShaderModule> modules;
  std::map<std::pair<std::string, std::vector<uint32_t>>, VkPipeline> pipelines;

  ~Core() {
    if (!dev) return;
    auto destroy = [dev = dev, pipelines = std::move(pipelines), modules = std::move(modules),
                    layout = layout, set_layout = set_layout, rows_layout = rows_layout] {
      vkDeviceWaitIdle(dev);
      for (auto& [k, p] : pipelines) vkDestroyPipeline(dev, p, nullptr);
      for (auto& [k, m] : modules) vkDestroyShaderModule(dev, m, nullptr);
      if (layout) vkDestroyPipelineLayout(dev, layout, nullptr);
      if (set_layout) vkDestroyDescriptorSetLayout(dev, set_layout, nullptr);
      if (rows_layout) vkDestroyDescriptorSetLayout(dev, rows_layout, nullptr);
      vkDestroyDevice(dev, nullptr);
    };
    if (abandoned) {
      std::thread(std::move(destroy)).detach();
    } else {
      destroy();
    }
  }
};

namespace {

std::atomic<std::span<const uint32_t> (*)(const char*)> g_extra_spirv{nullptr};

const char* ResultName(VkResult r) {
  switch (r) {
    case VK_ERROR_DEVICE_LOST:
      return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_OUT_OF_HOST_MEMORY:
      return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
      return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED:
      return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_FEATURE_NOT_PRESENT:
      return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_TIMEOUT:
      return "VK_TIMEOUT";
    default:
      return "VkResult error";
  }
}

// One VkInstance for the process, made on first use and kept to exit. The loader unloads the driver
// when the last instance is destroyed, and NVIDIA's driver cannot be loaded again indefinitely in
// one process: on the H200 (driver 580) the 30th instance failed with VK_ERROR_INCOMPATIBLE_DRIVER
// (each load takes static TLS: bench/journal/2026-12-03-vulkan-instance.md). A failed creation is
// not kept: a later engine tries again.
VkInstance ProcessInstance() {
  static std::mutex mu;
  static VkInstance instance = VK_NULL_HANDLE;
  std::lock_guard<std::mutex> lock(mu);
  if (instance != VK_NULL_HANDLE) return instance;
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "gemma-engine";
  // (1.3: the workgroup-scope matrix modules are SPIR-V 1.6; the device's own version still rules)
  app.apiVersion = VK_API_VERSION_1_3;
  VkInstanceCreateInfo ici{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ici.pApplicationInfo = &app;
  VkInstance made = VK_NULL_HANDLE;
  const VkResult r = vkCreateInstance(&ici, nullptr, &made);
  if (r != VK_SUCCESS) {
    throw Error(ErrorCode::kDevice,
                std::string("vulkan: no Vulkan driver (vkCreateInstance: ") + ResultName(r) + ")");
  }
  instance = made;
  return instance;
}

void Check(VkResult r, const char* what) {
  if (r != VK_SUCCESS) {
    throw Error(ErrorCode::kDevice, std::string("vulkan: ") + what + " failed: " + ResultName(r) +
                                        " (" + std::to_string(static_cast<int>(r)) + ")");
  }
}

int TypeRank(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return 4;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return 3;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return 1;
    default:
      return 0;
  }
}

}  // namespace

void SetExtraSpirv(std::span<const uint32_t> (*lookup)(const char* name)) {
  g_extra_spirv.store(lookup);
}

Device::Device(const DeviceOptions& options) : core_(std::make_shared<Core>()) {
  try {
    Init(options);
    InitContext();
  } catch (...) {
    // The destructor does not run for a throwing constructor: release what Init created (the
    // core goes with its last owner).
    DestroyContext();
    throw;
  }
}

std::unique_ptr<Device> Device::NewContext() const {
  std::unique_ptr<Device> d(new Device());
  d->core_ = core_;
  d->instance_ = instance_;
  d->phys_ = phys_;
  d->dev_ = dev_;
  d->queue_ = queue_;
  d->family_ = family_;
  d->set_layout_ = set_layout_;
  d->rows_layout_ = rows_layout_;
  d->row_sets_ = row_sets_;
  d->row_slots_ = row_slots_;
  d->layout_ = layout_;
  d->mem_props_ = mem_props_;
  d->name_ = name_;
  d->subgroup_size_ = subgroup_size_;
  d->min_subgroup_size_ = min_subgroup_size_;
  d->int_dot_ = int_dot_;
  d->int_dot_accelerated_ = int_dot_accelerated_;
  d->coop_matrix_ = coop_matrix_;
  d->coop_khr_ = coop_khr_;
  d->coop_cm2_ = coop_cm2_;
  d->device_clock_ = device_clock_;
  d->subgroup_clock_ = subgroup_clock_;
  d->pipe_stats_ = pipe_stats_;
  d->dump_dir_ = dump_dir_;
  d->max_range_ = max_range_;
  d->align_ = align_;
  d->max_alloc_ = max_alloc_;
  d->cpu_ = cpu_;
  d->discrete_ = discrete_;
  d->device_local_bytes_ = device_local_bytes_;
  d->spin_us_ = spin_us_;
  d->step_timeout_s_ = step_timeout_s_;
  d->ts_period_ = ts_period_;
  d->compute_units_ = compute_units_;
  d->max_shared_ = max_shared_;
  d->ts_valid_ = ts_valid_;
  d->InitContext();  // (a throw destroys d, and with it what InitContext made)
  return d;
}

void Device::Init(const DeviceOptions& options) {
  instance_ = ProcessInstance();
  uint32_t n = 0;
  vkEnumeratePhysicalDevices(instance_, &n, nullptr);
  std::vector<VkPhysicalDevice> devs(n);
  vkEnumeratePhysicalDevices(instance_, &n, devs.data());
  // Usable: Vulkan 1.1, a compute queue, subgroup arithmetic in compute shaders, the kBindings
  // storage buffers of the one descriptor-set layout.
  std::vector<int> usable;
  std::vector<std::string> names;
  for (uint32_t i = 0; i < n; ++i) {
    VkPhysicalDeviceSubgroupProperties sg{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    p2.pNext = &sg;
    vkGetPhysicalDeviceProperties2(devs[i], &p2);
    names.push_back(p2.properties.deviceName);
    const bool ok = p2.properties.apiVersion >= VK_API_VERSION_1_1 &&
                    (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                    (sg.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) &&
                    (sg.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT) &&
                    sg.subgroupSize >= 8 && sg.subgroupSize <= 128 &&
                    p2.properties.limits.maxPerStageDescriptorStorageBuffers >= kBindings &&
                    p2.properties.limits.maxDescriptorSetStorageBuffers >= kBindings;
    if (ok) usable.push_back(static_cast<int>(i));
  }
  int pick = -1;
  const char* env = std::getenv("GEMMA_VULKAN_DEVICE");
  if (env && *env) {
    char* end = nullptr;
    const long idx = std::strtol(env, &end, 10);
    for (int i : usable) {
      if ((*end == 0 && i == idx) || (*end != 0 && names[i].find(env) != std::string::npos)) {
        pick = i;
        break;
      }
    }
    if (pick < 0) {
      throw Error(ErrorCode::kDevice,
                  std::string("vulkan: GEMMA_VULKAN_DEVICE=") + env + " matches no usable device");
    }
  } else if (options.index >= 0) {
    if (std::find(usable.begin(), usable.end(), options.index) == usable.end())
      throw Error(ErrorCode::kDevice, "vulkan: device index " + std::to_string(options.index) +
                                          " is not a usable device");
    pick = options.index;
  } else {
    int best_rank = -1;
    for (int i : usable) {
      VkPhysicalDeviceProperties p;
      vkGetPhysicalDeviceProperties(devs[i], &p);
      if (options.skip_cpu && p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU) continue;
      if (TypeRank(p.deviceType) > best_rank) {
        best_rank = TypeRank(p.deviceType);
        pick = i;
      }
    }
  }
  if (pick < 0) {
    throw Error(ErrorCode::kDevice,
                "vulkan: no usable Vulkan device (need Vulkan 1.1 compute with subgroup "
                "arithmetic and shuffles and " +
                    std::to_string(kBindings) + " storage buffers per shader stage)");
  }
  phys_ = devs[pick];
  VkPhysicalDeviceSubgroupProperties sg{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceMaintenance3Properties m3{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  sg.pNext = &m3;
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  p2.pNext = &sg;
  vkGetPhysicalDeviceProperties2(phys_, &p2);
  name_ = p2.properties.deviceName;
  subgroup_size_ = sg.subgroupSize;
  max_range_ = p2.properties.limits.maxStorageBufferRange;
  max_shared_ = p2.properties.limits.maxComputeSharedMemorySize;
  // Set 1's row caches: 2 x 16 storage buffers beside set 0's, or 2 x 8 (lavapipe: 32 a stage).
  const uint32_t per_stage = p2.properties.limits.maxPerStageDescriptorStorageBuffers;
  row_slots_ = per_stage >= kBindings + 2 * kRowSlots         ? kRowSlots
               : per_stage >= kBindings + 2 * (kRowSlots / 2) ? kRowSlots / 2
                                                              : 0;
  align_ = std::max<VkDeviceSize>(256, p2.properties.limits.minStorageBufferOffsetAlignment);
  max_alloc_ = m3.maxMemoryAllocationSize;
  cpu_ = p2.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  spin_us_ = options.spin_us >= 0 ? options.spin_us : cpu_ ? 0 : 20000;
  step_timeout_s_ = options.step_timeout_s > 0 ? options.step_timeout_s
                    : cpu_                     ? kCpuStepTimeoutS
                                               : kGpuStepTimeoutS;
  dump_dir_ = options.pipeline_dump_dir;
  ts_period_ = p2.properties.limits.timestampPeriod;
  vkGetPhysicalDeviceMemoryProperties(phys_, &mem_props_);
  discrete_ = p2.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
  for (uint32_t i = 0; i < mem_props_.memoryHeapCount; ++i)
    if (mem_props_.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      device_local_bytes_ = std::max(device_local_bytes_, mem_props_.memoryHeaps[i].size);
  core_->memory_limit = options.memory_limit > 0 ? options.memory_limit : device_local_bytes_;

  uint32_t nq = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(phys_, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  vkGetPhysicalDeviceQueueFamilyProperties(phys_, &nq, qf.data());
  family_ = UINT32_MAX;
  for (uint32_t i = 0; i < nq; ++i) {
    if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      // Prefer a compute queue that also does graphics (the universal queue has timestamps).
      if (family_ == UINT32_MAX || (qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) family_ = i;
      if (qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT) break;
    }
  }
  const float prio = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = family_;
  qci.queueCount = 1;
  qci.pQueuePriorities = &prio;
  VkPhysicalDeviceFeatures have{};
  vkGetPhysicalDeviceFeatures(phys_, &have);
  if (!have.shaderFloat64) {
    throw Error(ErrorCode::kDevice,
                "vulkan: " + name_ + " lacks shaderFloat64 (the exact reductions need it)");
  }
  VkPhysicalDeviceFeatures want{};
  want.shaderFloat64 = VK_TRUE;
  // (the batched steps' attention indexes the rows' caches in set 1 by workgroup: RowsSet)
  row_sets_ = have.shaderStorageBufferArrayDynamicIndexing == VK_TRUE && row_slots_ > 0;
  want.shaderStorageBufferArrayDynamicIndexing = have.shaderStorageBufferArrayDynamicIndexing;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.pEnabledFeatures = &want;
  // Optional: packed 4x8-bit integer dot products (the matvec kernels' int8/int4/int2 inner loop).
  uint32_t next = 0;
  vkEnumerateDeviceExtensionProperties(phys_, nullptr, &next, nullptr);
  std::vector<VkExtensionProperties> exts(next);
  vkEnumerateDeviceExtensionProperties(phys_, nullptr, &next, exts.data());
  const char* kDotExt = VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME;
  VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR dot{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR};
  for (const VkExtensionProperties& e : exts) {
    if (std::strcmp(e.extensionName, kDotExt) != 0) continue;
    VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    f2.pNext = &dot;
    vkGetPhysicalDeviceFeatures2(phys_, &f2);
    VkPhysicalDeviceShaderIntegerDotProductPropertiesKHR dp{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES_KHR};
    VkPhysicalDeviceProperties2 pp{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    pp.pNext = &dp;
    vkGetPhysicalDeviceProperties2(phys_, &pp);
    int_dot_ = dot.shaderIntegerDotProduct == VK_TRUE;
    int_dot_accelerated_ = dp.integerDotProduct4x8BitPackedSignedAccelerated == VK_TRUE;
  }
  std::vector<const char*> enable;
  void* chain = nullptr;
  if (int_dot_) {
    dot.pNext = chain;
    chain = &dot;
    enable.push_back(kDotExt);
  }
  // Optional: matrix units for the prefill linears (VK_NV_cooperative_matrix with 16x16x16
  // f16 x f16 -> f32 at subgroup scope, f16 arithmetic, the Vulkan memory model the extension's
  // SPIR-V declares, 32-wide subgroups and 36 KiB of shared memory).
  VkPhysicalDeviceCooperativeMatrixFeaturesNV cm{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  VkPhysicalDeviceShaderFloat16Int8FeaturesKHR f16{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES_KHR};
  VkPhysicalDeviceVulkanMemoryModelFeaturesKHR mm{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES_KHR};
  auto has_ext = [&](const char* name) {
    for (const VkExtensionProperties& e : exts)
      if (std::strcmp(e.extensionName, name) == 0) return true;
    return false;
  };
  // An extension's property struct (sType set by the caller), filled by the device.
  auto props = [&](auto st) {
    VkPhysicalDeviceProperties2 q{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    q.pNext = &st;
    vkGetPhysicalDeviceProperties2(phys_, &q);
    st.pNext = nullptr;
    return st;
  };
  // The smallest subgroup a pipeline may get (drivers that pick the width per pipeline report the
  // largest as subgroupSize); kernels that keep several rows in one subgroup stay within it.
  min_subgroup_size_ = subgroup_size_;
  if (has_ext(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME)) {
    const auto sc = props(VkPhysicalDeviceSubgroupSizeControlPropertiesEXT{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES_EXT});
    if (sc.minSubgroupSize > 0) min_subgroup_size_ = std::min(subgroup_size_, sc.minSubgroupSize);
  }
  // Compute units (sizes the grids of the decode's kernels).
  if (has_ext(VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME)) {
    compute_units_ = props(VkPhysicalDeviceShaderSMBuiltinsPropertiesNV{
                               VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV})
                         .shaderSMCount;
  } else if (has_ext(VK_AMD_SHADER_CORE_PROPERTIES_EXTENSION_NAME)) {
    const auto cp = props(VkPhysicalDeviceShaderCorePropertiesAMD{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_AMD});
    compute_units_ =
        cp.shaderEngineCount * cp.shaderArraysPerEngineCount * cp.computeUnitsPerShaderArray;
  }
  if (has_ext(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME) &&
      has_ext(VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME) &&
      has_ext(VK_KHR_VULKAN_MEMORY_MODEL_EXTENSION_NAME) && subgroup_size_ == 32 &&
      p2.properties.limits.maxComputeSharedMemorySize >= 36 * 1024) {
    cm.pNext = &f16;
    f16.pNext = &mm;
    VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    f2.pNext = &cm;
    vkGetPhysicalDeviceFeatures2(phys_, &f2);
    bool shape = false;
    auto props_fn = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV>(
        vkGetInstanceProcAddr(instance_, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV"));
    if (props_fn) {
      uint32_t n = 0;
      props_fn(phys_, &n, nullptr);
      std::vector<VkCooperativeMatrixPropertiesNV> props(
          n, VkCooperativeMatrixPropertiesNV{VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV});
      props_fn(phys_, &n, props.data());
      for (const VkCooperativeMatrixPropertiesNV& q : props) {
        shape |= q.MSize == 16 && q.NSize == 16 && q.KSize == 16 &&
                 q.AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
                 q.BType == VK_COMPONENT_TYPE_FLOAT16_NV &&
                 q.CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
                 q.DType == VK_COMPONENT_TYPE_FLOAT32_NV && q.scope == VK_SCOPE_SUBGROUP_NV;
      }
    }
    coop_matrix_ = shape && cm.cooperativeMatrix && f16.shaderFloat16 && mm.vulkanMemoryModel;
  }
  if (coop_matrix_) {
    cm.cooperativeMatrixRobustBufferAccess = VK_FALSE;
    mm.vulkanMemoryModelDeviceScope = VK_FALSE;
    mm.vulkanMemoryModelAvailabilityVisibilityChains = VK_FALSE;
    f16.shaderInt8 = VK_FALSE;
    mm.pNext = chain;
    chain = &cm;
    enable.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
    enable.push_back(VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME);
    enable.push_back(VK_KHR_VULKAN_MEMORY_MODEL_EXTENSION_NAME);
  }
  // Optional with the above: VK_KHR_cooperative_matrix, whose matrix types carry their operand
  // use (Pipeline() rewrites the NV modules). Debian 12's Vulkan headers (1.3.239) predate it: its
  // structures are declared here as the registry defines them.
  struct CoopKhrFeatures {
    VkStructureType sType = static_cast<VkStructureType>(1000506000);
    void* pNext = nullptr;
    VkBool32 cooperativeMatrix = VK_FALSE, cooperativeMatrixRobustBufferAccess = VK_FALSE;
  } cmk;
  struct CoopKhrProperties {
    VkStructureType sType = static_cast<VkStructureType>(1000506001);
    void* pNext = nullptr;
    uint32_t MSize = 0, NSize = 0, KSize = 0;
    uint32_t AType = 0, BType = 0, CType = 0, ResultType = 0;  // VkComponentTypeKHR
    VkBool32 saturatingAccumulation = VK_FALSE;
    uint32_t scope = 0;  // VkScopeKHR
  };
  if (coop_matrix_ && options.coop_khr && has_ext("VK_KHR_cooperative_matrix")) {
    VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    f2.pNext = &cmk;
    vkGetPhysicalDeviceFeatures2(phys_, &f2);
    using PropsFn = VkResult(VKAPI_PTR*)(VkPhysicalDevice, uint32_t*, CoopKhrProperties*);
    auto props_fn = reinterpret_cast<PropsFn>(
        vkGetInstanceProcAddr(instance_, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"));
    bool shape = false;
    if (props_fn && cmk.cooperativeMatrix) {
      uint32_t n = 0;
      props_fn(phys_, &n, nullptr);
      std::vector<CoopKhrProperties> kp(n);
      props_fn(phys_, &n, kp.data());
      for (const CoopKhrProperties& q : kp)  // f16 = 0, f32 = 1; subgroup scope = 3
        shape |= q.MSize == 16 && q.NSize == 16 && q.KSize == 16 && q.AType == 0 && q.BType == 0 &&
                 q.CType == 1 && q.ResultType == 1 && q.scope == 3;
    }
    coop_khr_ = shape;
    if (coop_khr_) {
      cmk.cooperativeMatrixRobustBufferAccess = VK_FALSE;
      cmk.pNext = chain;
      chain = &cmk;
      enable.push_back("VK_KHR_cooperative_matrix");
    }
  }
  // Optional with KHR matrices: VK_NV_cooperative_matrix2 (linear_cm2.comp: workgroup-scope
  // matrices whose staging through shared memory the driver plans, tensor-addressing loads with
  // a decode function per element, per-element epilogues). Its modules are SPIR-V 1.6 (a Vulkan
  // 1.3 device), read 16-bit storage and pass buffer references to the decode functions. Debian
  // 12's headers predate it: the registry's structures, declared here.
  struct Cm2Features {
    VkStructureType sType = static_cast<VkStructureType>(1000593000);
    void* pNext = nullptr;
    VkBool32 workgroup_scope = VK_FALSE, flexible_dimensions = VK_FALSE, reductions = VK_FALSE,
             conversions = VK_FALSE, per_element = VK_FALSE, tensor_addressing = VK_FALSE,
             block_loads = VK_FALSE;
  } cm2f;
  struct Cm2Properties {
    VkStructureType sType = static_cast<VkStructureType>(1000593002);
    void* pNext = nullptr;
    uint32_t workgroup_scope_max_workgroup_size = 0, flexible_dimensions_max_dimension = 0,
             workgroup_scope_reserved_shared_memory = 0;
  };
  struct Cm2Flexible {
    VkStructureType sType = static_cast<VkStructureType>(1000593001);
    void* pNext = nullptr;
    uint32_t m_granularity = 0, n_granularity = 0, k_granularity = 0;
    uint32_t a_type = 0, b_type = 0, c_type = 0, result_type = 0;  // VkComponentTypeKHR
    VkBool32 saturating = VK_FALSE;
    uint32_t scope = 0, workgroup_invocations = 0;
  };
  VkPhysicalDevice16BitStorageFeatures s16{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
  VkPhysicalDeviceBufferDeviceAddressFeatures bda{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES};
  if (coop_khr_ && options.coop_cm2 && p2.properties.apiVersion >= VK_API_VERSION_1_3 &&
      has_ext("VK_NV_cooperative_matrix2")) {
    cm2f.pNext = &s16;
    s16.pNext = &bda;
    VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    f2.pNext = &cm2f;
    vkGetPhysicalDeviceFeatures2(phys_, &f2);
    const auto cp = props(Cm2Properties{});
    using FlexFn = VkResult(VKAPI_PTR*)(VkPhysicalDevice, uint32_t*, Cm2Flexible*);
    auto flex_fn = reinterpret_cast<FlexFn>(vkGetInstanceProcAddr(
        instance_, "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV"));
    // The modules' two forms at workgroup scope (2; 3 is subgroup) with 256 invocations, tiles of
    // multiples of 32: f16 x f16 -> f32 (component types 0, 1) and s8 x s8 -> s32 (3, 5).
    bool f16_shape = false, i8_shape = false;
    if (flex_fn) {
      uint32_t n = 0;
      flex_fn(phys_, &n, nullptr);
      std::vector<Cm2Flexible> fp(n);
      flex_fn(phys_, &n, fp.data());
      auto divides32 = [](uint32_t g) { return g > 0 && 32 % g == 0; };
      for (const Cm2Flexible& q : fp) {
        if (q.scope != 2 || q.workgroup_invocations != 256 || !divides32(q.m_granularity) ||
            !divides32(q.n_granularity) || !divides32(q.k_granularity))
          continue;
        f16_shape |= q.a_type == 0 && q.b_type == 0 && q.c_type == 1 && q.result_type == 1;
        i8_shape |= q.a_type == 3 && q.b_type == 3 && q.c_type == 5 && q.result_type == 5;
      }
    }
    coop_cm2_ = f16_shape && i8_shape && cm2f.workgroup_scope && cm2f.flexible_dimensions &&
                cm2f.per_element && cm2f.tensor_addressing && s16.storageBuffer16BitAccess &&
                bda.bufferDeviceAddress && cp.workgroup_scope_max_workgroup_size >= 256;
    if (coop_cm2_) {
      cm2f.reductions = VK_FALSE;
      cm2f.conversions = VK_FALSE;
      cm2f.block_loads = VK_FALSE;
      s16.uniformAndStorageBuffer16BitAccess = VK_FALSE;
      s16.storagePushConstant16 = VK_FALSE;
      s16.storageInputOutput16 = VK_FALSE;
      bda.bufferDeviceAddressCaptureReplay = VK_FALSE;
      bda.bufferDeviceAddressMultiDevice = VK_FALSE;
      bda.pNext = chain;
      chain = &cm2f;
      enable.push_back("VK_NV_cooperative_matrix2");
    }
  }
  // Optional: a device-wide clock in shaders (kernel probes).
  VkPhysicalDeviceShaderClockFeaturesKHR clk{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CLOCK_FEATURES_KHR};
  if (has_ext(VK_KHR_SHADER_CLOCK_EXTENSION_NAME)) {
    VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    f2.pNext = &clk;
    vkGetPhysicalDeviceFeatures2(phys_, &f2);
    device_clock_ = clk.shaderDeviceClock == VK_TRUE;
    // The SM cycle counter too where present (kernel probes: stage durations in cycles).
    subgroup_clock_ = device_clock_ && clk.shaderSubgroupClock == VK_TRUE;
    if (device_clock_) {
      clk.shaderSubgroupClock = subgroup_clock_ ? VK_TRUE : VK_FALSE;
      clk.pNext = chain;
      chain = &clk;
      enable.push_back(VK_KHR_SHADER_CLOCK_EXTENSION_NAME);
    }
  }
  // Optional (DeviceOptions::pipeline_stats): the driver's statistics of each compiled pipeline
  // (registers per invocation, shared and local memory) printed to stderr when it is created.
  VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR pex{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
  if (options.pipeline_stats &&
      has_ext(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME)) {
    VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    f2.pNext = &pex;
    vkGetPhysicalDeviceFeatures2(phys_, &f2);
    pipe_stats_ = pex.pipelineExecutableInfo == VK_TRUE;
    if (pipe_stats_) {
      pex.pNext = chain;
      chain = &pex;
      enable.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
    }
  }
  dci.pNext = chain;
  dci.enabledExtensionCount = static_cast<uint32_t>(enable.size());
  dci.ppEnabledExtensionNames = enable.data();
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  Check(vkCreateDevice(phys_, &dci, nullptr, &dev_), "vkCreateDevice");
  core_->dev = dev_;
  vkGetDeviceQueue(dev_, family_, 0, &queue_);
  ts_valid_ = qf[family_].timestampValidBits > 0 && ts_period_ > 0;

  std::array<VkDescriptorSetLayoutBinding, kBindings> b{};
  for (int i = 0; i < kBindings; ++i) {
    b[i].binding = i;
    b[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    b[i].descriptorCount = 1;
    b[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo dl{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  dl.bindingCount = kBindings;
  dl.pBindings = b.data();
  Check(vkCreateDescriptorSetLayout(dev_, &dl, nullptr, &set_layout_), "descriptor set layout");
  core_->set_layout = set_layout_;
  // Set 1: the K and V caches of a batch's rows (binding 0 / 1, kRowSlots each).
  std::array<VkDescriptorSetLayoutBinding, 2> rb{};
  for (uint32_t i = 0; i < 2; ++i) {
    rb[i].binding = i;
    rb[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    rb[i].descriptorCount = std::max(1u, row_slots_);
    rb[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  dl.bindingCount = 2;
  dl.pBindings = rb.data();
  Check(vkCreateDescriptorSetLayout(dev_, &dl, nullptr, &rows_layout_), "descriptor set layout");
  core_->rows_layout = rows_layout_;
  const VkDescriptorSetLayout layouts[2] = {set_layout_, rows_layout_};
  VkPushConstantRange pc{VK_SHADER_STAGE_COMPUTE_BIT, 0, 128};
  VkPipelineLayoutCreateInfo pl{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  // (set 1 only where a stage takes its buffers too: the layout's buffers count against the
  // stage's limit whether a shader uses them or not)
  pl.setLayoutCount = row_slots_ > 0 ? 2 : 1;
  pl.pSetLayouts = layouts;
  pl.pushConstantRangeCount = 1;
  pl.pPushConstantRanges = &pc;
  Check(vkCreatePipelineLayout(dev_, &pl, nullptr, &layout_), "pipeline layout");
  core_->layout = layout_;
}

void Device::InitContext() {
  VkCommandPoolCreateInfo cpi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  cpi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  cpi.queueFamilyIndex = family_;
  Check(vkCreateCommandPool(dev_, &cpi, nullptr, &cmd_pool_), "vkCreateCommandPool");
  VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  Check(vkCreateFence(dev_, &fci, nullptr, &fence_), "vkCreateFence");
  const uint32_t kMaxSets = 8192;
  VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kMaxSets * kBindings};
  VkDescriptorPoolCreateInfo dp{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  dp.maxSets = kMaxSets;
  dp.poolSizeCount = 1;
  dp.pPoolSizes = &ps;
  Check(vkCreateDescriptorPool(dev_, &dp, nullptr, &desc_pool_), "descriptor pool");
  VkDescriptorPoolSize tps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                           static_cast<uint32_t>(kMaxTransientSets) * 2 * kRowSlots};
  dp.maxSets = static_cast<uint32_t>(kMaxTransientSets);
  dp.pPoolSizes = &tps;
  Check(vkCreateDescriptorPool(dev_, &dp, nullptr, &transient_pool_), "descriptor pool");

  if (ts_valid_) {
    VkQueryPoolCreateInfo qp{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    qp.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qp.queryCount = kMaxTimestamps;
    if (vkCreateQueryPool(dev_, &qp, nullptr, &ts_pool_) != VK_SUCCESS) ts_pool_ = VK_NULL_HANDLE;
  }
  upload_cmd_ = AllocCommandBuffer();
  dummy_handle_ = Reserve(Pool::kDevice, 256);
}

Device::~Device() { DestroyContext(); }

void Device::DestroyContext() {
  if (!dev_) return;
  // The context's handles, destroyed once the queue is idle (waiting on it needs its lock): here,
  // or on a thread of its own where the device was given up (Core::abandoned).
  std::vector<Chunk> chunks = std::move(chunks_);
  chunks.push_back(staging_);
  staging_ = {};
  staging_bytes_ = 0;
  chunks_.clear();
  auto destroy = [core = core_, dev = dev_, queue = queue_, desc = desc_pool_,
                  tdesc = transient_pool_, fence = fence_, ts = ts_pool_, cmd = cmd_pool_,
                  chunks = std::move(chunks)]() mutable {
    if (queue) {
      std::lock_guard<std::mutex> lock(core->queue_mu);
      vkQueueWaitIdle(queue);
    }
    if (desc) vkDestroyDescriptorPool(dev, desc, nullptr);
    if (tdesc) vkDestroyDescriptorPool(dev, tdesc, nullptr);
    for (Chunk& c : chunks) FreeChunkOf(*core, dev, c);
    if (fence) vkDestroyFence(dev, fence, nullptr);
    if (ts) vkDestroyQueryPool(dev, ts, nullptr);
    if (cmd) vkDestroyCommandPool(dev, cmd, nullptr);
  };
  if (core_->abandoned) {
    std::thread(std::move(destroy)).detach();
  } else {
    destroy();
  }
  desc_pool_ = VK_NULL_HANDLE;
  transient_pool_ = VK_NULL_HANDLE;
  row_sets_map_.clear();
  fence_ = VK_NULL_HANDLE;
  ts_pool_ = VK_NULL_HANDLE;
  cmd_pool_ = VK_NULL_HANDLE;
}

void Device::ReleaseStaging() {
  FreeChunk(staging_);
  staging_bytes_ = 0;
}

void Device::FreeChunk(Chunk& c) { FreeChunkOf(*core_, dev_, c); }

void Device::FreeChunkOf(Core& core, VkDevice dev, Chunk& c) {
  if (c.buf) vkDestroyBuffer(dev, c.buf, nullptr);
  if (c.mem) vkFreeMemory(dev, c.mem, nullptr);
  core.device_bytes -= c.device_bytes;
  c = {};
}

size_t Device::device_memory_in_use() const { return core_->device_bytes; }
size_t Device::device_memory_limit() const { return core_->memory_limit; }
void Device::FailNextSubmit() { core_->fail_next_submit = true; }
void Device::HangNextSubmit() { core_->hang_next_wait = true; }
void Device::FailNextAllocation() { core_->fail_next_alloc = true; }

namespace {

std::string Mib(size_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }

}  // namespace

uint32_t Device::FindMemoryType(uint32_t bits, VkMemoryPropertyFlags want,
                                VkMemoryPropertyFlags prefer) {
  int best = -1;
  for (uint32_t i = 0; i < mem_props_.memoryTypeCount; ++i) {
    const VkMemoryPropertyFlags f = mem_props_.memoryTypes[i].propertyFlags;
    if (!(bits & (1u << i)) || (f & want) != want) continue;
    if (best < 0 || ((f & prefer) == prefer &&
                     (mem_props_.memoryTypes[best].propertyFlags & prefer) != prefer)) {
      best = static_cast<int>(i);
    }
  }
  if (best < 0) throw Error(ErrorCode::kDevice, "vulkan: no suitable memory type");
  return static_cast<uint32_t>(best);
}

Device::Chunk Device::MakeChunk(Pool pool, size_t bytes, const char* what) {
  Chunk c;
  c.size = bytes;
  VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bci.size = bytes;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
              VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  // (linear_cm2's decode functions take references into the weights' buffers)
  if (coop_cm2_) bci.usage |= VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  Check(vkCreateBuffer(dev_, &bci, nullptr, &c.buf), "vkCreateBuffer");
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(dev_, c.buf, &req);
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.allocationSize = req.size;
  VkMemoryAllocateFlagsInfo af{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
  af.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
  if (coop_cm2_) ai.pNext = &af;
  const VkMemoryPropertyFlags mapped =
      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  const uint32_t host_type =
      pool == Pool::kDevice
          ? 0
          : FindMemoryType(req.memoryTypeBits, mapped, VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
  ai.memoryTypeIndex =
      pool == Pool::kDevice
          ? FindMemoryType(req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0)
      : pool == Pool::kUpload
          ? FindMemoryType(req.memoryTypeBits, mapped, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)
          : host_type;
  VkResult r = VK_ERROR_OUT_OF_DEVICE_MEMORY;
  const size_t in_use = core_->device_bytes;
  if (pool != Pool::kDevice ||
      (!core_->fail_next_alloc.exchange(false) && in_use + req.size <= core_->memory_limit)) {
    r = vkAllocateMemory(dev_, &ai, nullptr, &c.mem);
  }
  if (r != VK_SUCCESS && pool == Pool::kUpload && ai.memoryTypeIndex != host_type) {
    // (a small device-local window of host-visible memory may be full: host memory instead)
    ai.memoryTypeIndex = host_type;
    r = vkAllocateMemory(dev_, &ai, nullptr, &c.mem);
  }
  if (r != VK_SUCCESS) {
    vkDestroyBuffer(dev_, c.buf, nullptr);
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY) {
      throw Error(ErrorCode::kCapacity,
                  std::string("vulkan: out of ") +
                      (pool == Pool::kDevice ? "device" : "host-visible") + " memory for " + what +
                      ": allocating " + Mib(req.size) + " failed (" + ResultName(r) + "); " +
                      name_ + " holds " + Mib(in_use) + " for this engine of " +
                      Mib(core_->memory_limit) +
                      " it may use. Lower the context capacity or close sessions");
    }
    Check(r, ("vkAllocateMemory of " + std::to_string(bytes >> 20) + " MiB").c_str());
  }
  if (pool == Pool::kDevice) {
    c.device_bytes = req.size;
    core_->device_bytes += req.size;
  }
  Check(vkBindBufferMemory(dev_, c.buf, c.mem, 0), "vkBindBufferMemory");
  if (pool != Pool::kDevice) {
    void* p = nullptr;
    Check(vkMapMemory(dev_, c.mem, 0, VK_WHOLE_SIZE, 0, &p), "vkMapMemory");
    c.mapped = static_cast<uint8_t*>(p);
  }
  return c;
}

int Device::Reserve(Pool pool, size_t bytes) {
  bytes = std::max<size_t>(bytes, 4);
  if (bytes > max_range_) {
    throw Error(ErrorCode::kInternal, "vulkan: buffer of " + std::to_string(bytes) +
                                          " bytes exceeds maxStorageBufferRange");
  }
  reservations_.push_back({pool, bytes, {}});
  return static_cast<int>(reservations_.size()) - 1;
}

void Device::Commit(const char* what) {
  // Chunks as large as one binding can address,
  // at most 4 GiB.
  const VkDeviceSize cap = std::min<VkDeviceSize>(
      {max_alloc_ ? max_alloc_ : (1ull << 30), max_range_, 4ull << 30});
  // Too little device memory is said before anything is allocated, with what it would take.
  size_t want = 0;
  for (const Reservation& rs : reservations_)
    if (rs.pool == Pool::kDevice && !rs.range.buf) want += rs.bytes;
  const size_t in_use = core_->device_bytes;
  if (in_use + want > core_->memory_limit) {
    throw Error(ErrorCode::kCapacity,
                std::string("vulkan: ") + what + " need " + Mib(want) + " of device memory; " +
                    name_ + " has " + Mib(core_->memory_limit) + " for this engine, " +
                    Mib(in_use) + " of it in use. Lower the context capacity, close sessions " +
                    "or use a CPU backend");
  }
  for (Pool pool : {Pool::kDevice, Pool::kHost, Pool::kUpload}) {
    // Pack reservations in order into chunks of at most `cap` bytes.
    size_t i = 0;
    while (i < reservations_.size()) {
      size_t total = 0, j = i;
      std::vector<size_t> members;
      for (; j < reservations_.size(); ++j) {
        Reservation& rs = reservations_[j];
        if (rs.pool != pool || rs.range.buf) continue;
        const size_t at = (total + align_ - 1) / align_ * align_;
        if (!members.empty() && at + rs.bytes > cap) break;
        members.push_back(j);
        total = at + rs.bytes;
      }
      if (members.empty()) break;
      Chunk c = MakeChunk(pool, total, what);
      chunks_.push_back(c);
      committed_[static_cast<int>(pool)] += total;
      size_t off = 0;
      for (size_t m : members) {
        off = (off + align_ - 1) / align_ * align_;
        Reservation& rs = reservations_[m];
        rs.range = {c.buf, off, rs.bytes, c.mapped ? c.mapped + off : nullptr};
        off += rs.bytes;
      }
      i = members.back() + 1;
    }
  }
  dummy_ = Get(dummy_handle_);
}

BufRange Device::Get(int handle) const {
  const BufRange& r = reservations_.at(handle).range;
  if (!r.buf) throw Error(ErrorCode::kInternal, "vulkan: buffer used before Commit()");
  return r;
}

BufRange Device::Whole(VkBuffer buf) const {
  for (const Chunk& c : chunks_)
    if (c.buf == buf) return {c.buf, 0, c.size, c.mapped};
  return {};
}

void Device::Upload(const BufRange& dst, size_t dst_off, const void* src, size_t bytes) {
  const uint8_t* s = static_cast<const uint8_t*>(src);
  constexpr size_t kStagingMax = 64u << 20;
  if (staging_bytes_ < std::min(bytes, kStagingMax)) {
    ReleaseStaging();
    staging_bytes_ = std::min(bytes, kStagingMax);
    staging_ = MakeChunk(Pool::kHost, staging_bytes_);
  }
  while (bytes > 0) {
    const size_t n = std::min(bytes, staging_bytes_);
    std::memcpy(staging_.mapped, s, n);
    vkResetCommandBuffer(upload_cmd_, 0);
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    Check(vkBeginCommandBuffer(upload_cmd_, &bi), "vkBeginCommandBuffer");
    VkBufferCopy cp{0, dst.offset + dst_off, n};
    vkCmdCopyBuffer(upload_cmd_, staging_.buf, dst.buf, 1, &cp);
    Check(vkEndCommandBuffer(upload_cmd_), "vkEndCommandBuffer");
    Submit(upload_cmd_);
    s += n;
    dst_off += n;
    bytes -= n;
  }
}

void Device::Fill(const BufRange& dst, uint32_t value) {
  vkResetCommandBuffer(upload_cmd_, 0);
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  Check(vkBeginCommandBuffer(upload_cmd_, &bi), "vkBeginCommandBuffer");
  vkCmdFillBuffer(upload_cmd_, dst.buf, dst.offset, (dst.size + 3) / 4 * 4, value);
  Check(vkEndCommandBuffer(upload_cmd_), "vkEndCommandBuffer");
  Submit(upload_cmd_);
}

size_t Device::pipeline_count() const {
  std::lock_guard<std::mutex> lock(core_->pipe_mu);
  return core_->pipelines.size();
}

VkPipeline Device::Pipeline(const char* shader, const std::vector<uint32_t>& spec) {
  auto key = std::make_pair(std::string(shader), spec);
  std::unique_lock<std::mutex> lock(core_->pipe_mu);
  auto it = core_->pipelines.find(key);
  if (it != core_->pipelines.end()) return it->second;
  VkShaderModule& mod = core_->modules[shader];
  if (!mod) {
    std::span<const uint32_t> code = SpirvModule(shader);
    if (code.empty() && g_extra_spirv.load()) code = g_extra_spirv.load()(shader);
    if (code.empty()) throw Error(ErrorCode::kInternal, std::string("no SPIR-V for ") + shader);
    // With KHR cooperative matrices: the NV ones rewritten (other modules come back unchanged).
    std::vector<uint32_t> rewritten;
    if (coop_khr_) {
      std::string why;
      rewritten = CoopMatrixNvToKhr(code, &why);
      if (rewritten.empty())
        throw Error(ErrorCode::kInternal,
                    std::string("KHR cooperative matrices for ") + shader + ": " + why);
      code = rewritten;
    }
    VkShaderModuleCreateInfo sci{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    sci.codeSize = code.size() * 4;
    sci.pCode = code.data();
    Check(vkCreateShaderModule(dev_, &sci, nullptr, &mod), "vkCreateShaderModule");
  }
  std::vector<VkSpecializationMapEntry> entries(spec.size());
  for (size_t i = 0; i < spec.size(); ++i)
    entries[i] = {static_cast<uint32_t>(i), static_cast<uint32_t>(4 * i), 4};
  VkSpecializationInfo si{static_cast<uint32_t>(entries.size()), entries.data(), spec.size() * 4,
                          spec.data()};
  VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  ci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = mod;
  ci.stage.pName = "main";
  ci.stage.pSpecializationInfo = &si;
  ci.layout = layout_;
  if (pipe_stats_) ci.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
  // DeviceOptions::pipeline_dump_dir (inspection only): each pipeline is built into its own pipeline
  // cache, whose data (the driver's binary, in its own format) is written to dir/<n>_<shader>.bin.
  const char* dump_dir = dump_dir_.empty() ? nullptr : dump_dir_.c_str();
  VkPipelineCache cache = VK_NULL_HANDLE;
  if (dump_dir) {
    VkPipelineCacheCreateInfo pci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    Check(vkCreatePipelineCache(dev_, &pci, nullptr, &cache), "vkCreatePipelineCache");
  }
  // Built without the lock (but for the inspection modes): a step that needs a pipeline already
  // built does not wait for another thread's build (the model's BATCH_WARM thread builds the
  // batched steps' pipelines beside the sessions' steps; with the lock held through each build a
  // session's prompt chunks waited for them: one stream at 160 instead of 399 tok/s on an H100).
  // Two threads building the same pipeline keep the first.
  const bool inspect = dump_dir || pipe_stats_;
  if (!inspect) lock.unlock();
  VkPipeline p;
  const VkResult made = vkCreateComputePipelines(dev_, cache, 1, &ci, nullptr, &p);
  if (!inspect) lock.lock();
  Check(made, (std::string("vkCreateComputePipelines ") + shader).c_str());
  const auto [at, added] = core_->pipelines.emplace(key, p);
  if (!added) {
    vkDestroyPipeline(dev_, p, nullptr);
    return at->second;
  }
  if (pipe_stats_) PrintPipelineStats(shader, spec, p);
  if (cache != VK_NULL_HANDLE) {
    size_t n = 0;
    vkGetPipelineCacheData(dev_, cache, &n, nullptr);
    std::vector<char> blob(n);
    vkGetPipelineCacheData(dev_, cache, &n, blob.data());
    static int serial = 0;
    const std::string path =
        std::string(dump_dir) + "/" + std::to_string(serial++) + "_" + shader + ".bin";
    if (FILE* f = std::fopen(path.c_str(), "wb")) {
      std::fwrite(blob.data(), 1, n, f);
      std::fclose(f);
    }
    // The NVIDIA driver's data holds a zstd frame: where libzstd can be loaded, its contents go
    // to <n>_<shader>.raw too (bench/vulkan/sass_h200.py takes the code out of either file).
    struct Zstd {
      unsigned long long (*size)(const void*, size_t) = nullptr;
      size_t (*decompress)(void*, size_t, const void*, size_t) = nullptr;
      unsigned (*is_error)(size_t) = nullptr;
    };
    static const Zstd zstd = [] {
      Zstd z;
      if (void* h = dlopen("libzstd.so.1", RTLD_NOW)) {
        z.size = reinterpret_cast<decltype(z.size)>(dlsym(h, "ZSTD_getFrameContentSize"));
        z.decompress = reinterpret_cast<decltype(z.decompress)>(dlsym(h, "ZSTD_decompress"));
        z.is_error = reinterpret_cast<decltype(z.is_error)>(dlsym(h, "ZSTD_isError"));
      }
      return z;
    }();
    const char kMagic[4] = {'\x28', '\xb5', '\x2f', '\xfd'};
    const auto frame = std::search(blob.begin(), blob.end(), kMagic, kMagic + 4);
    size_t raw_bytes = 0;
    if (zstd.size && zstd.decompress && zstd.is_error && frame != blob.end()) {
      const size_t in = static_cast<size_t>(blob.end() - frame);
      const unsigned long long out = zstd.size(&*frame, in);
      if (out > 0 && out < (1ull << 30)) {
        std::vector<char> raw(out);
        const size_t got = zstd.decompress(raw.data(), raw.size(), &*frame, in);
        if (!zstd.is_error(got)) {
          const std::string rpath = path.substr(0, path.size() - 4) + ".raw";
          if (FILE* f = std::fopen(rpath.c_str(), "wb")) {
            std::fwrite(raw.data(), 1, got, f);
            std::fclose(f);
            raw_bytes = got;
          }
        }
      }
    }
    std::string sp;
    for (uint32_t v : spec) sp += (sp.empty() ? "" : ",") + std::to_string(v);
    std::fprintf(stderr, "pipe-dump %s spec=%s -> %s (%zu bytes, %zu decompressed)\n", shader,
                 sp.c_str(), path.c_str(), n, raw_bytes);
    vkDestroyPipelineCache(dev_, cache, nullptr);
  }
  return p;
}

void Device::PrintPipelineStats(const char* shader, const std::vector<uint32_t>& spec,
                                VkPipeline p) {
  auto props_fn = reinterpret_cast<PFN_vkGetPipelineExecutablePropertiesKHR>(
      vkGetDeviceProcAddr(dev_, "vkGetPipelineExecutablePropertiesKHR"));
  auto stats_fn = reinterpret_cast<PFN_vkGetPipelineExecutableStatisticsKHR>(
      vkGetDeviceProcAddr(dev_, "vkGetPipelineExecutableStatisticsKHR"));
  if (!props_fn || !stats_fn) return;
  VkPipelineInfoKHR pi{VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR};
  pi.pipeline = p;
  uint32_t n = 0;
  if (props_fn(dev_, &pi, &n, nullptr) != VK_SUCCESS) return;
  std::string line = std::string("pipe-stats ") + shader + " spec=";
  for (size_t i = 0; i < spec.size(); ++i) line += (i ? "," : "") + std::to_string(spec[i]);
  for (uint32_t e = 0; e < n; ++e) {
    VkPipelineExecutableInfoKHR ei{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR};
    ei.pipeline = p;
    ei.executableIndex = e;
    uint32_t ns = 0;
    if (stats_fn(dev_, &ei, &ns, nullptr) != VK_SUCCESS) continue;
    std::vector<VkPipelineExecutableStatisticKHR> st(
        ns, VkPipelineExecutableStatisticKHR{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR});
    if (stats_fn(dev_, &ei, &ns, st.data()) != VK_SUCCESS) continue;
    for (const VkPipelineExecutableStatisticKHR& s : st) {
      line += std::string(" | ") + s.name + "=";
      switch (s.format) {
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
          line += s.value.b32 ? "true" : "false";
          break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
          line += std::to_string(s.value.i64);
          break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
          line += std::to_string(s.value.u64);
          break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR:
          line += std::to_string(s.value.f64);
          break;
        default:
          line += "?";
      }
    }
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

VkDescriptorSet Device::Set(const std::array<BufRange, kBindings>& bindings) {
  auto it = sets_.find(bindings);
  if (it != sets_.end()) return it->second;
  VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  ai.descriptorPool = desc_pool_;
  ai.descriptorSetCount = 1;
  ai.pSetLayouts = &set_layout_;
  VkDescriptorSet set;
  Check(vkAllocateDescriptorSets(dev_, &ai, &set), "vkAllocateDescriptorSets");
  std::array<VkDescriptorBufferInfo, kBindings> info;
  std::array<VkWriteDescriptorSet, kBindings> w{};
  for (int i = 0; i < kBindings; ++i) {
    const BufRange& b = bindings[i].buf ? bindings[i] : dummy_;
    info[i] = {b.buf, b.offset, b.size};
    w[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    w[i].dstSet = set;
    w[i].dstBinding = i;
    w[i].descriptorCount = 1;
    w[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    w[i].pBufferInfo = &info[i];
  }
  vkUpdateDescriptorSets(dev_, kBindings, w.data(), 0, nullptr);
  sets_[bindings] = set;
  return set;
}

VkDescriptorSet Device::RowsSet(const std::array<BufRange, 2 * kRowSlots>& caches) {
  auto it = row_sets_map_.find(caches);
  if (it != row_sets_map_.end()) return it->second;
  if (row_sets_map_.size() >= kMaxTransientSets)
    throw Error(ErrorCode::kInternal, "vulkan: the transient descriptor sets are exhausted");
  VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  ai.descriptorPool = transient_pool_;
  ai.descriptorSetCount = 1;
  ai.pSetLayouts = &rows_layout_;
  VkDescriptorSet set;
  Check(vkAllocateDescriptorSets(dev_, &ai, &set), "vkAllocateDescriptorSets");
  std::array<VkDescriptorBufferInfo, 2 * kRowSlots> info;
  std::array<VkWriteDescriptorSet, 2> w{};
  for (uint32_t i = 0; i < 2 * kRowSlots; ++i) {
    const BufRange& b = caches[i].buf ? caches[i] : dummy_;
    info[i] = {b.buf, b.offset, b.size};
  }
  for (uint32_t k = 0; k < 2; ++k) {
    w[k] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    w[k].dstSet = set;
    w[k].dstBinding = k;
    w[k].descriptorCount = row_slots_;
    w[k].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    w[k].pBufferInfo = &info[k * kRowSlots];
  }
  vkUpdateDescriptorSets(dev_, 2, w.data(), 0, nullptr);
  row_sets_map_[caches] = set;
  return set;
}

void Device::ResetTransientSets() {
  if (transient_pool_) vkResetDescriptorPool(dev_, transient_pool_, 0);
  row_sets_map_.clear();
}

VkCommandBuffer Device::AllocCommandBuffer() {
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = cmd_pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VkCommandBuffer cb;
  Check(vkAllocateCommandBuffers(dev_, &ai, &cb), "vkAllocateCommandBuffers");
  return cb;
}

void Device::Submit(VkCommandBuffer cmd) {
  SubmitBegin(cmd);
  SubmitWait();
}

void Device::SubmitBegin(VkCommandBuffer cmd) {
  if (core_->fail_next_submit.exchange(false)) {
    Check(VK_ERROR_DEVICE_LOST, "vkQueueSubmit (simulated)");
  }
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cmd;
  VkResult r;
  {
    std::lock_guard<std::mutex> lock(core_->queue_mu);
    r = vkQueueSubmit(queue_, 1, &si, fence_);
  }
  Check(r, "vkQueueSubmit");
}

void Device::SubmitWait() {
  // The fence polled for up to spin_us_ before the blocking wait: on the H200 the blocking wait
  // returned ~0.1 ms after the step's last command (bench/journal/2026-11-sessions.md, fourteenth session), a
  // twentieth of a decoded token. Not on CPU devices (the poll would take a core from the device's
  // threads).
  if (spin_us_ > 0) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
    VkResult r;
    while ((r = vkGetFenceStatus(dev_, fence_)) == VK_NOT_READY &&
           std::chrono::steady_clock::now() < until) {
    }
    if (r != VK_NOT_READY) Check(r, "vkGetFenceStatus");
  }
  // A wait past the step timeout is a hung device: given up (Core::abandoned), kDevice here, and
  // the backend builds a new device at the next request.
  const VkResult r = core_->hang_next_wait.exchange(false)
                         ? VK_TIMEOUT
                         : vkWaitForFences(dev_, 1, &fence_, VK_TRUE,
                                           static_cast<uint64_t>(step_timeout_s_ * 1e9));
  if (r == VK_TIMEOUT) {
    core_->abandoned = true;
    char what[200];
    std::snprintf(what, sizeof what,
                  "vulkan: a submission did not finish within %g s (the device hung or is far "
                  "too slow); the device is given up and built again at the next request",
                  step_timeout_s_);
    throw Error(ErrorCode::kDevice, what);
  }
  Check(r, "vkWaitForFences");
  Check(vkResetFences(dev_, 1, &fence_), "vkResetFences");
}

void Device::ResetTimestamps(VkCommandBuffer cmd, uint32_t n) {
  vkCmdResetQueryPool(cmd, ts_pool_, 0, n);
}

void Device::WriteTimestamp(VkCommandBuffer cmd, uint32_t i) {
  vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, ts_pool_, i);
}

std::vector<double> Device::ReadTimestamps(uint32_t n) {
  std::vector<uint64_t> raw(n);
  Check(vkGetQueryPoolResults(dev_, ts_pool_, 0, n, n * 8, raw.data(), 8,
                              VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
        "vkGetQueryPoolResults");
  std::vector<double> ns(n);
  for (uint32_t i = 0; i < n; ++i) ns[i] = static_cast<double>(raw[i]) * ts_period_;
  return ns;
}

double Device::CopyBandwidth(size_t bytes, int iters) {
  Chunk a = MakeChunk(Pool::kDevice, bytes), b = MakeChunk(Pool::kDevice, bytes);
  VkCommandBuffer cmd = AllocCommandBuffer();
  std::vector<double> secs;
  for (int i = 0; i < iters + 1; ++i) {
    vkResetCommandBuffer(cmd, 0);
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    Check(vkBeginCommandBuffer(cmd, &bi), "vkBeginCommandBuffer");
    VkBufferCopy cp{0, 0, bytes};
    if (ts_pool_) {
      ResetTimestamps(cmd, 2);
      WriteTimestamp(cmd, 0);
    }
    vkCmdCopyBuffer(cmd, a.buf, b.buf, 1, &cp);
    if (ts_pool_) WriteTimestamp(cmd, 1);
    Check(vkEndCommandBuffer(cmd), "vkEndCommandBuffer");
    const auto t0 = std::chrono::steady_clock::now();
    Submit(cmd);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (ts_pool_) {
      const std::vector<double> ts = ReadTimestamps(2);
      s = (ts[1] - ts[0]) * 1e-9;
    }
    if (i > 0) secs.push_back(s);  // first run warms up
  }
  vkFreeCommandBuffers(dev_, cmd_pool_, 1, &cmd);
  FreeChunk(a);
  FreeChunk(b);
  std::sort(secs.begin(), secs.end());
  return 2.0 * static_cast<double>(bytes) / secs[secs.size() / 2];
}

void Device::Barrier(VkCommandBuffer cmd, BarrierKind kind) {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  if (kind != BarrierKind::kFull) {
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0,
                         kind == BarrierKind::kCompute ? 1 : 0, &mb, 0, nullptr, 0, nullptr);
    return;
  }
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask =
      VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT;
  vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1,
                       &mb, 0, nullptr, 0, nullptr);
}

}  // namespace gemma::vk
