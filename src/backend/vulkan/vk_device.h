// A Vulkan compute device for the Gemma backend: instance and device selection, pooled memory,
// pipelines from the embedded SPIR-V, cached descriptor sets and synchronous submission.
//
// Memory: callers Reserve() every buffer first, then Commit() packs the reservations into a few
// large allocations per pool (device-local for weights, caches and activations; host-visible for
// staging and readback); each buffer is a sub-range bound at its own offset. A single reservation
// must fit maxStorageBufferRange (callers split larger tensors).
// Every pipeline shares one layout: 16 storage buffers in set 0 and 128 bytes of push constants.
// Errors (including VK_ERROR_DEVICE_LOST) throw gemma::Error(kDevice); a Device that threw from
// Submit() must be discarded.
//
// Contexts: NewContext() makes another Device on the same VkDevice, queue and pipelines (a Core
// they share) with its own memory, command pool, fence, events, descriptor sets and timestamps,
// so buffers of one context may be bound by another (the shared weights) and contexts may record
// and submit on different threads at once (the queue and the pipeline cache are locked).
#pragma once

#include <vulkan/vulkan.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace gemma::vk {

std::span<const uint32_t> SpirvModule(const char* name);  // embedded, generated at build time
// Modules of another embedded table (the measurement lab's, bench/vulkan), looked up where
// SpirvModule has none; set once, before the pipelines that need them.
void SetExtraSpirv(std::span<const uint32_t> (*lookup)(const char* name));

// Storage-buffer bindings of the one descriptor-set layout every kernel uses (11: the step's
// values; 12-15: attn_fused.comp's cache write aliases, probe and read-only partials).
constexpr int kBindings = 16;

struct BufRange {
  VkBuffer buf = VK_NULL_HANDLE;
  VkDeviceSize offset = 0, size = 0;
  uint8_t* mapped = nullptr;  // host pool only
  bool operator<(const BufRange& o) const {
    return std::tie(buf, offset, size) < std::tie(o.buf, o.offset, o.size);
  }
};

struct DeviceOptions {
  // Physical device: index into vkEnumeratePhysicalDevices, or -1 to pick by type (discrete >
  // integrated > virtual > CPU). The environment variable GEMMA_VULKAN_DEVICE (an index or a
  // substring of the device name) overrides both.
  int index = -1;
  // With index -1: CPU-type devices (Mesa's lavapipe) are not picked ("auto" backend choice:
  // a CPU Vulkan device is far slower than the CPU backends).
  bool skip_cpu = false;
  // Submit polls the fence this many microseconds before blocking (-1: 20 ms, 0 on CPU devices).
  long spin_us = -1;
  // Diagnostics (bench/vulkan): each pipeline's driver statistics printed to stderr, and each
  // pipeline's driver binary written to dump_dir/<n>_<shader>.bin (empty: not).
  bool pipeline_stats = false;
  std::string pipeline_dump_dir;
  // Device-local bytes this device's contexts may hold together (0: the largest device-local
  // heap). An allocation past it fails as VK_ERROR_OUT_OF_DEVICE_MEMORY does.
  size_t memory_limit = 0;
  // A submission not finished after this many seconds is a hung device: Error(kDevice), and the
  // device is given up (0: kGpuStepTimeoutS, kCpuStepTimeoutS on CPU devices).
  double step_timeout_s = 0;
  // Matrix units through VK_KHR_cooperative_matrix where the device has it besides the NV
  // extension (coop_khr()).
  bool coop_khr = true;
  // Workgroup-scope matrices through VK_NV_cooperative_matrix2 where the device has it besides the
  // KHR extension (coop_cm2()).
  bool coop_cm2 = true;
};

inline constexpr double kGpuStepTimeoutS = 60;
inline constexpr double kCpuStepTimeoutS = 600;

// kUpload: written by the host, read by the device (a step's inputs): device-local memory the host
// can map where the device offers it (a copy from it stays on the device), else as kHost.
enum class Pool { kDevice, kHost, kUpload };

struct Core;  // the instance, device, queue and pipelines a device's contexts share

class Device {
 public:
  explicit Device(const DeviceOptions& options);
  ~Device();
  // Another context on this device (see above).
  std::unique_ptr<Device> NewContext() const;
  // Frees the upload staging memory (allocated again, as large as needed up to 64 MiB, by the
  // next Upload).
  void ReleaseStaging();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const std::string& name() const { return name_; }
  uint32_t subgroup_size() const { return subgroup_size_; }
  uint32_t min_subgroup_size() const { return min_subgroup_size_; }
  VkDeviceSize max_range() const { return max_range_; }
  uint32_t max_shared_bytes() const { return max_shared_; }  // per workgroup
  bool is_cpu() const { return cpu_; }
  bool is_discrete() const { return discrete_; }
  // The largest device-local memory heap, in bytes.
  VkDeviceSize device_local_bytes() const { return device_local_bytes_; }
  // VK_KHR_shader_integer_dot_product enabled (shaders may use OpSDot on packed 4x8-bit values);
  // accelerated: the device reports the signed packed form as faster than emulation.
  bool int_dot() const { return int_dot_; }
  bool int_dot_accelerated() const { return int_dot_accelerated_; }
  // VK_NV_cooperative_matrix (16x16x16 f16 -> f32, subgroup scope) with f16 arithmetic and the
  // Vulkan memory model enabled: linear_cm.comp can run.
  bool coop_matrix() const { return coop_matrix_; }
  // VK_KHR_cooperative_matrix too (16x16x16 f16 -> f32 at subgroup scope; DeviceOptions::
  // coop_khr): Pipeline() builds the modules with NV cooperative matrices rewritten as KHR ones
  // (spirv_coopmat.h).
  bool coop_khr() const { return coop_khr_; }
  // VK_NV_cooperative_matrix2 too (workgroup scope, flexible f16 x f16 -> f32 and s8 x s8 -> s32
  // dimensions, tensor addressing, per-element operations; DeviceOptions::coop_cm2), with 16-bit
  // storage and buffer device addresses: linear_cm2.comp can run.
  bool coop_cm2() const { return coop_cm2_; }
  // VK_KHR_shader_clock with shaderDeviceClock enabled (kernel probes).
  bool device_clock() const { return device_clock_; }
  bool subgroup_clock() const { return subgroup_clock_; }
  float timestamp_period_ns() const { return ts_period_; }
  // Streaming multiprocessors (VK_NV_shader_sm_builtins) or compute units (VK_AMD_shader_core_
  // properties); 0 where the device does not say. Sizes the decode kernels' grids.
  uint32_t compute_units() const { return compute_units_; }
  size_t committed_bytes(Pool pool) const { return committed_[static_cast<int>(pool)]; }
  // Device-local bytes held by every context of this device together, and what they may hold
  // (DeviceOptions::memory_limit, else the largest device-local heap).
  size_t device_memory_in_use() const;
  size_t device_memory_limit() const;

  int Reserve(Pool pool, size_t bytes);
  // Allocates what was reserved. Error(kCapacity) naming `what` and the bytes when the device
  // memory it needs is beyond device_memory_limit() or the driver reports it out of memory.
  void Commit(const char* what = "buffers");
  BufRange Get(int handle) const;
  // The whole buffer (allocation chunk) a committed range lives in.
  BufRange Whole(VkBuffer buf) const;

  // Synchronous copy into a device buffer through the staging buffer.
  void Upload(const BufRange& dst, size_t dst_off, const void* src, size_t bytes);
  void Fill(const BufRange& dst, uint32_t value);

  // local size = spec[0]; further entries are constant_id 1, 2, ...
  VkPipeline Pipeline(const char* shader, const std::vector<uint32_t>& spec);
  // Pipelines built so far on this device (all its contexts).
  size_t pipeline_count() const;
  VkDescriptorSet Set(const std::array<BufRange, kBindings>& bindings);
  // Set 1 of the pipeline layout: the K (binding 0) and V (binding 1) caches of up to
  // row_slots() rows of a batched step (16, or 8 where a stage has fewer storage buffers; shaders
  // index them by workgroup: qkrope / attention ROWS; caches[kRowSlots + r] is row r's V), from a
  // pool the owner releases as a whole (ResetTransientSets) when no command buffer using them
  // will be submitted again. Only where row_sets().
  static constexpr uint32_t kRowSlots = 16;
  uint32_t row_slots() const { return row_slots_; }
  static constexpr size_t kMaxTransientSets = 4096;
  VkDescriptorSet RowsSet(const std::array<BufRange, 2 * kRowSlots>& caches);
  void ResetTransientSets();
  size_t transient_sets() const { return row_sets_map_.size(); }
  bool row_sets() const { return row_sets_; }
  VkPipelineLayout layout() const { return layout_; }

  VkCommandBuffer AllocCommandBuffer();
  // Waits for completion: polls the fence for up to 20 ms (DeviceOptions::spin_us; 0 on CPU
  // devices), then blocks.
  void Submit(VkCommandBuffer cmd);
  // Submit in two halves: SubmitBegin returns once the work is queued, SubmitWait waits for it
  // as Submit does (one submission in flight at a time).
  void SubmitBegin(VkCommandBuffer cmd);
  void SubmitWait();
  // kFull: compute/transfer writes -> compute/transfer reads and writes; kCompute: shader writes ->
  // shader reads and writes, compute stage only (between two dispatches); kExecOnly: an execution
  // dependency without a memory barrier (timing only: results may be wrong).
  enum class BarrierKind { kFull, kCompute, kExecOnly };
  void Barrier(VkCommandBuffer cmd, BarrierKind kind = BarrierKind::kFull);
  BufRange dummy() const { return dummy_; }

  // Bytes moved per second (read + write) by a device-to-device copy of `bytes`, median of
  // `iters` timed submissions; buffers are temporary.
  double CopyBandwidth(size_t bytes, int iters);

  // GPU timestamps (for profiling): write slot i after all prior work; read slots [0, n) in ns.
  bool has_timestamps() const { return ts_pool_ != VK_NULL_HANDLE; }
  void ResetTimestamps(VkCommandBuffer cmd, uint32_t n);
  void WriteTimestamp(VkCommandBuffer cmd, uint32_t i);
  std::vector<double> ReadTimestamps(uint32_t n);
  static constexpr uint32_t kMaxTimestamps = 4096;

  // Fault injection (tests, the soak): the next submission of any context of this device fails
  // as VK_ERROR_DEVICE_LOST does; the next device-local allocation of any context fails as
  // VK_ERROR_OUT_OF_DEVICE_MEMORY does.
  void FailNextSubmit();
  void FailNextAllocation();
  // ... the next submission of any context does not finish within the step timeout (as a hung
  // device: its work completes, but the wait gives up first).
  void HangNextSubmit();

 private:
  struct Chunk {
    VkDeviceMemory mem = VK_NULL_HANDLE;
    VkBuffer buf = VK_NULL_HANDLE;
    uint8_t* mapped = nullptr;
    VkDeviceSize size = 0;
    VkDeviceSize device_bytes = 0;  // counted in the core's device_bytes (kDevice chunks)
  };
  struct Reservation {
    Pool pool;
    size_t bytes;
    BufRange range;
  };
  Device() = default;
  void Init(const DeviceOptions& options);
  void InitContext();
  void DestroyContext();
  uint32_t FindMemoryType(uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags prefer);
  Chunk MakeChunk(Pool pool, size_t bytes, const char* what = "a buffer");
  void FreeChunk(Chunk& c);
  static void FreeChunkOf(Core& core, VkDevice dev, Chunk& c);
  void PrintPipelineStats(const char* shader, const std::vector<uint32_t>& spec, VkPipeline p);

  std::shared_ptr<Core> core_;
  // Copies of the core's handles and properties (the core owns the handles).
  VkInstance instance_ = VK_NULL_HANDLE;
  VkPhysicalDevice phys_ = VK_NULL_HANDLE;
  VkDevice dev_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t family_ = 0;
  VkCommandPool cmd_pool_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  VkQueryPool ts_pool_ = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE, rows_layout_ = VK_NULL_HANDLE;
  bool row_sets_ = false;
  uint32_t row_slots_ = 0;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkDescriptorPool desc_pool_ = VK_NULL_HANDLE;
  VkDescriptorPool transient_pool_ = VK_NULL_HANDLE;
  VkPhysicalDeviceMemoryProperties mem_props_{};
  std::string name_;
  uint32_t subgroup_size_ = 32, min_subgroup_size_ = 32;
  bool int_dot_ = false, int_dot_accelerated_ = false, coop_matrix_ = false, device_clock_ = false;
  bool coop_khr_ = false;
  bool coop_cm2_ = false;
  bool subgroup_clock_ = false;
  bool pipe_stats_ = false;  // DeviceOptions::pipeline_stats (where the driver can)
  std::string dump_dir_;     // DeviceOptions::pipeline_dump_dir
  VkDeviceSize max_range_ = 0, align_ = 256, max_alloc_ = 0;
  bool cpu_ = false, discrete_ = false;
  VkDeviceSize device_local_bytes_ = 0;
  long spin_us_ = 0;  // Submit polls the fence this long before blocking
  double step_timeout_s_ = kGpuStepTimeoutS;
  float ts_period_ = 1;
  uint32_t compute_units_ = 0;
  uint32_t max_shared_ = 16384;
  bool ts_valid_ = false;  // the queue family writes timestamps
  // This context's own objects.

  std::vector<Chunk> chunks_;
  std::vector<Reservation> reservations_;
  size_t committed_[3] = {0, 0, 0};
  Chunk staging_;
  size_t staging_bytes_ = 0;
  BufRange dummy_;
  int dummy_handle_ = -1;
  VkCommandBuffer upload_cmd_ = VK_NULL_HANDLE;
  std::map<std::array<BufRange, kBindings>, VkDescriptorSet> sets_;
  std::map<std::array<BufRange, 2 * kRowSlots>, VkDescriptorSet> row_sets_map_;
};

}  // namespace gemma::vk
