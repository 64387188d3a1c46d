// Internal to the Vulkan backend (not installed): the backend class, split over files by concept.
//   vulkan_backend.cc  steps: Forward, prompt chunks, step inputs, readback; the public functions
//   vulkan_build.cc    device state: kernel choices, cache geometry, weights, buffers, statistics
//   vulkan_linear.cc   the command recorder (Dispatch, Barrier) and the linear, norm and
//                      prompt-attention ops
//   vulkan_layers.cc   the layer loop, the head, a prompt chunk, the decode command buffers
//   vulkan_measure.cc  bandwidth, dispatch cost, profiles, kernel probes, kernel test hooks
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "backend/cache_window.h"
#include "backend/cpu/reference_ops.h"
#include "backend/vulkan/vk_device.h"
#include "backend/vulkan/vulkan_backend.h"
#include "core/thread_pool.h"
#include "gemma/error.h"
#include "model/model.h"

namespace gemma::vulkan_internal {

using vk::BufRange;
using vk::Device;
using vk::Pool;

inline constexpr uint32_t kWG = 256;
inline constexpr int kCombineCounters =
    256;  // (token, head) arrival counters of the merging attention
inline constexpr uint32_t kVocabBlock =
    4096;  // logits_reduce's block (GEMMA_VULKAN_VOCAB_BLOCK: tests)
// Chunks of this many tokens take the prompt attention kernels (and verification steps that long
// run as rows); linears over more than VulkanBackend::rows_mv_max_ tokens (at most
// kMaxMatvecTokens) take the tiled kernels.
inline constexpr int kMatmulMinTokens = 8;
inline constexpr int kMaxMatvecTokens = 16;
inline constexpr uint32_t kCoopSmallTokens = 32;  // ... its small tiles up to this many tokens

inline uint32_t KindCode(WeightKind k) {
  switch (k) {
    case WeightKind::kF32:
      return 0;
    case WeightKind::kBF16:
      return 1;
    case WeightKind::kF16:
      return 2;
    case WeightKind::kQ2:
      return 3;
    case WeightKind::kQ4:
      return 4;
    case WeightKind::kQ8:
      return 5;
  }
  return 0;
}
inline uint32_t ElemsPerWord(WeightKind k) {
  switch (k) {
    case WeightKind::kF32:
      return 1;
    case WeightKind::kBF16:
    case WeightKind::kF16:
      return 2;
    case WeightKind::kQ2:
      return 16;
    case WeightKind::kQ4:
      return 8;
    case WeightKind::kQ8:
      return 4;
  }
  return 1;
}
inline uint8_t ZeroByte(WeightKind k) {
  return k == WeightKind::kQ4 ? 0x88 : k == WeightKind::kQ2 ? 0xAA : 0;
}

struct LinPush {
  uint32_t rows, cols, wstride, x_stride, y_stride, y_off;
  float in_s0, out_s0, in_s1, out_s1, cap;
  uint32_t aux_stride, aux_off, x_row0, ntok;
  uint32_t n, has_a, has_wa;  // residual-norm tail
  float scale, eps;
  float next_in_s;               // XQ 2
  uint32_t xq_ld;                // linear_cm: uvec4 per token row of the quantized inputs
  uint32_t kper;                 // linear_cm split K: K tiles per split (0: no split)
  float pj_in_s, pj_out_s;       // EPI 4 / PRO_T: the next linear's SRQ scales
  uint32_t pj_rows, pj_wstride;  // EPI 4, DJ: its rows and u32 words per row
  float pt_in_s, pt_out_s;       // PRO_T: the SRQ scales of the linear whose sums t holds
  float cm_out_lo = 0, cm_out_hi = 0;  // linear_cm OCLAMP: output bounds (the vision tower)
};
static_assert(offsetof(LinPush, cm_out_lo) == 116, "linear_cm.comp reads out_lo at offset 116");
static_assert(sizeof(LinPush) <= 128, "push constants: 128 bytes");
struct QuantPush {
  uint32_t cols, x_stride, x_row0, ld;
  float in_s;
};
struct NormPush {
  uint32_t n, has_t, has_a, has_wa;
  float scale, eps;
  uint32_t h_stride, t_stride, a_stride, h_row0;
  uint32_t flags = 0;  // the audio tower's (resnorm.comp): clamps at +-clip, SiLU, t_scale
  float clip = 0, t_scale = 0;
};
struct RopePush {
  uint32_t nh, nkv, hd, ring, rot;
  float eps;
  uint32_t q_stride, kv_stride;
};
struct AttnPush {
  uint32_t nh, nkv, hd, ring, window, splits, q_stride;
  uint32_t rot = 0, kv_stride = 0, has_kn = 0, kv_new = 0;  // attn_fused
  float eps = 0.0f;
};
struct SplitQPush {  // split_f16.comp QROWS 1 (and CLAMP's bounds)
  uint32_t cols, x_stride, x_row0, ld, nh, group, m;
  float lo = 0, hi = 0;
};
struct AttnCmPush {  // attention_cm.comp
  uint32_t nh, nkv, hd, ring, window, q_stride, qld;
  uint32_t m = 0;  // BIDIR: query tokens
};
// attention_cm.comp's shared memory: K / V chunk (2 x 64 x 9 x 16), P (2 x 32 x 9 x 16), S
// (32 x 68 x 4), three 32-float arrays.
inline constexpr uint32_t kAttnCmShared = 18432 + 9216 + 8704 + 384;
// attention_cm's 64-dim chunks per head (its modules attention_cm1 / 4 / 8).
inline uint32_t AttnCmChunks(int hd) { return hd <= 64 ? 1u : hd <= 256 ? 4u : 8u; }
inline const char* AttnCmModule(int hd) {
  const uint32_t nch = AttnCmChunks(hd);
  return nch == 1 ? "attention_cm1" : nch == 4 ? "attention_cm4" : "attention_cm8";
}
// linear_cm.comp's shared memory (the single-set kernel): 64 weight rows and 2 x 128 token rows
// of 9 16-byte vectors.
inline constexpr uint32_t kLinearCmShared = (64 + 2 * 128) * 9 * 16;
// attention_cm splits K rows into f16 terms unscaled: a layer's largest K norm weight times
// sqrt(512) (a normalized row's largest magnitude at the largest head dim the kernel takes) must
// stay well inside f16 (layers without K norm weights count as 1).
inline bool KNormFitsF16(const std::vector<float>& k_norm) {
  float kmax = 1.0f;
  for (float v : k_norm) kmax = std::max(kmax, std::fabs(v));
  return kmax * std::sqrt(512.0f) < 16384.0f;
}
struct CombinePush {
  uint32_t nh, hd, splits, o_stride;
};
struct FusedAttnPush {  // attn_fused.comp
  uint32_t nh, nkv, ring, window, splits, rot, has_kn, kv_new, ml_base;
  float eps;
};
struct PlePush {
  uint32_t pdim, stride;
  float proj_scale, input_scale, eps;
};
struct ReducePush {
  uint32_t vocab, block, nblocks, use_mask;
};
// A residual norm applied by the last workgroup of a one-token linear (linear.comp TAIL):
// h = (h + rmsnorm(y) * wt) * scale; a = rmsnorm(h) * wa when wa_or_none is given (has_a).
struct Tail {
  const BufRange* wt = nullptr;
  float scale = 1.0f;
  bool has_a = false;
  const BufRange* wa = nullptr;  // may be null with has_a (no weight)
};

// A residual norm applied by every workgroup of the next one-token linear to its input
// (linear.comp PRO, GEMMA_VULKAN_CNORM=1): x is the previous linear's raw output t;
// h' = (h_in + rmsnorm(t) * wt) * scale, input rmsnorm(h') * wa (mode 1) or h' (mode 2);
// workgroup 0 writes h' to h_out when given.
struct DevLinear;
struct Pro {
  uint32_t mode = 1;
  const BufRange* h_in = nullptr;
  const BufRange* wt = nullptr;
  const BufRange* wa = nullptr;
  const BufRange* h_out = nullptr;
  float scale = 1.0f;
  // PRO_T: t is the int32 sums `t_acc` of linear `t_sums` (its epilogue applied in the prologue).
  const DevLinear* t_sums = nullptr;
  const BufRange* t_acc = nullptr;
  uint32_t t_copies = 1;  // ... in this many copies of the sums (linear.comp ACC_COPIES)
  // linear.comp PRO_VEC allowed (the head's prologue keeps the element map of the norm kernels,
  // whose sums it reproduces bit for bit: on the H200 the PRO_VEC head's logits differed from
  // theirs byte-wise in HeadNormInPrologueMatchesNormKernels, cause not found;
  // bench/journal/2026-11-sessions.md, seventeenth session)
  bool vec = true;
};
// EPI 4 (one token, the PLE gate) or DJ (one token, gate/up and the down projection): the next
// linear `proj`'s products over the gate's rows added to the int32 sums `acc` (zeroed before the
// step) instead of a dispatch of its own.
struct PleFuse {
  const DevLinear* proj = nullptr;
  BufRange acc;
};

// A device buffer reserved before Commit and resolved after.
struct Buf {
  int handle = -1;
  BufRange r;
};

struct DevLinear {
  const Linear* src = nullptr;
  int rows = 0, cols = 0;
  uint32_t wstride = 0;
  struct Part {
    int row0 = 0, rows = 0;
    Buf w, s;
  };
  std::vector<Part> parts;
  // DJ with GEMMA_VULKAN_DOWN_FUSE_PAIRS (one part): the words again, pair-major (pair c of row j,
  // words 2c and 2c + 1, at pair index c * rows + j), so a row block's pairs are contiguous.
  Buf pairs;
};

struct DevLayer {
  DevLinear q, k, v, o, gate, up, down, ple_gate, ple_proj;
  Buf input_norm, post_attn_norm, pre_ffn_norm, post_ffn_norm, q_norm, k_norm, post_ple_norm;
};

// The one measurement hook of the recorder (bench/vulkan's profiles and kernel probes, which the
// library does not link): it sees each dispatch of a recording by its profile label (Label) and
// may, before it, run a probe build of the kernel (its shader name) with extra bindings (the probe
// buffer); after it, record into the command buffer (a timestamp).
class DispatchObserver {
 public:
  virtual ~DispatchObserver() = default;
  virtual void Before(const char* shader, const std::string& label, uint32_t workgroups,
                      std::string* probe_shader, std::array<BufRange, vk::kBindings>* bindings) {}
  virtual void After(VkCommandBuffer cmd, const std::string& label) {}
};

struct CacheSlot {
  Buf k, v;
  int ring = 0, width = 0;
};

// Weight planning and upload on a device (the shared weights' builder; kernel tests' linears):
// rows split into parts of at most part_limit bytes; *bytes grows by the bytes reserved.
DevLinear PlanDevLinear(Device& dev, size_t part_limit, const Linear& lin, size_t* bytes);
void UploadDevLinear(Device& dev, DevLinear& d);

// The activations and staging of a step, sized for `rows` tokens (a prompt chunk's rows): a context
// keeps a set for short steps (decode; short prompts), and prompt chunks longer than that take the
// engine's shared set (SharedActivations), so a session holds caches and short-step buffers only.
struct Activations {
  int rows = 0;
  Buf h, a, t, q, kt, vt, attn, g, po, pml, ple, tok, gp, hn, logits, part, res, reduce_cnt, xqc,
      partc, ksum, in_host, out_host;
  size_t in_x0_off = 0, in_tok_off = 0, in_mask_off = 0;
  size_t coop_slot_bytes = 0, coop_part_bytes = 0;
  size_t ksum_bytes = 0;    // a region of ksum (kKsumSlots of them)
  size_t kcount_bytes = 0;  // a region's split-K counters (kKsumSlots sets after the regions)
  int head_rows = 1;
};

// The engine's activations for prompt chunks of `rows` tokens, used by one context at a time
// (`mu` held from the chunk's inputs to its outputs' readback): memory of a context of its own on
// the engine's device.
struct SharedActivations {
  std::unique_ptr<Device> dev;
  Activations act;
  std::mutex mu;
};

// The weights on the device, shared by a model's contexts: the Device whose memory holds them
// (the first context on its core; the contexts are further contexts on that core) and where each
// tensor lies.
struct DeviceWeights {
  std::unique_ptr<Device> dev;
  std::vector<DevLayer> layers;
  DevLinear ple_proj, lm_head;
  Buf ple_norm, final_norm;
  size_t bytes = 0;
  int generation = 0;
  // The prompt chunks' shared activations by row count (made by the first context that needs them).
  mutable std::mutex workspace_mu;
  mutable std::map<int, std::shared_ptr<SharedActivations>> workspaces;
};

// The engine-level state of the Vulkan backend (one per BackendModel): the device and weights,
// built once and again after a device failure. Thread-safe.
class VulkanShared {
 public:
  VulkanShared(const Model& model, const VulkanOptions& vopt) : model_(model), vopt_(vopt) {}
  const Model& model() const { return model_; }
  const VulkanOptions& options() const { return vopt_; }
  // The current device and weights, built on first use and after Lost (Error kDevice when no
  // usable device exists).
  std::shared_ptr<const DeviceWeights> Acquire();
  // A context's device `w` failed: the next Acquire builds a new device and uploads the weights
  // again (other contexts still on `w` rebuild on their next step; `w` lives until they do).
  void Lost(const DeviceWeights* w);
  // The current weights' generation (-1 after Lost, until the next Acquire).
  int generation() const;
  // The current device and weights without building them (null after Lost, until Acquire).
  std::shared_ptr<const DeviceWeights> Current() const {
    std::lock_guard<std::mutex> lock(mu_);
    return current_;
  }

 private:
  const Model& model_;
  const VulkanOptions vopt_;
  mutable std::mutex mu_;
  std::shared_ptr<const DeviceWeights> current_;
  int next_generation_ = 0;
};

// The kernel choices of a model's contexts: the options', then the developer override
// (GEMMA_VULKAN_KERNELS).
KernelConfig EffectiveKernels(const VulkanOptions& vopt, const KernelConfig& context = {});

class VulkanBackend : public Backend {
 public:
  // `kernels`: this context's kernel choices over the model's (the weights' layout is the
  // model's: a context cannot add the down projections' pair-major copies).
  VulkanBackend(std::shared_ptr<VulkanShared> shared, const BackendOptions& options,
                const KernelConfig& kernels = {})
      : model_(shared->model()),
        cfg_(model_.text()),
        vopt_(shared->options()),
        context_kernels_(kernels),
        options_(options),
        shared_(std::move(shared)) {
    // (Build plans the caches and the prompt chunk once the device is known: PlanGeometry.)
    Build();
  }

  std::string name() const override { return "vulkan"; }
  BackendCapabilities capabilities() const override {
    return {.logits = true, .select = true, .max_chunk = chunk_, .soft_tokens = true};
  }
  int cached() const override { return window_.cached(); }
  int capacity() const override { return capacity_; }

  void Reset() override {
    window_.Reset();
    history_.clear();
    soft_rows_.clear();
    replay_ = false;
  }

  bool Truncate(int n) override {
    if (!window_.Truncate(n)) {
      history_.clear();
      soft_rows_.clear();
      return false;
    }
    history_.resize(n);
    DropSoftRows(n);
    return true;
  }

  size_t resident_bytes() const override {
    if (!dev_) return 0;
    return dev_->committed_bytes(Pool::kDevice) + dev_->committed_bytes(Pool::kHost) +
           dev_->committed_bytes(Pool::kUpload);
  }

  void Forward(const ForwardRequest& req, ForwardResult* out) override;

  void GetStats(VulkanStats* s) const;
  double CopyBandwidth(size_t bytes) { return dev_->CopyBandwidth(bytes, 5); }
  // Every resident weight buffer (each part of every linear).
  std::vector<BufRange> WeightRanges() const;
  // readbw over each range (its 16-byte words, with that many workgroups), the dispatches back to
  // back in one command buffer: bytes read per second, the median of `iters` timed passes after
  // one more; 0 without timestamps.
  double ReadBandwidth(const std::vector<std::pair<BufRange, uint32_t>>& reads, int iters);
  // Bytes per second a compute shader reads from every resident weight buffer once (the decode's
  // traffic), median of `iters` timed passes; 0 without timestamps.
  double WeightReadBandwidth(int iters);
  // The device's streaming read bandwidth: readbw over the largest weight buffer (larger than
  // the caches on the models benchmarked), passes of at least 512 MiB in all per command buffer,
  // the median of `iters`. A floor that does not depend on how the weights are split into buffers
  // (WeightReadBandwidth reads every buffer once, many of them small). 0 without timestamps.
  double StreamReadBandwidth(int iters, size_t* range_bytes);
  // mma_peak over 8 workgroups per compute unit: FLOP/s, the best of 5 passes (0 without
  // matrix units or timestamps).
  double MatrixPeak(int mode);
  // Empty dispatches (readbw with n = 0): timestamps around `n` of them, median of 5 passes.
  VulkanDispatchCost DispatchCost(int n);
  void FailNextSubmit() {
    if (dev_) dev_->FailNextSubmit();
  }

 private:
  // ---- building device state ----
  Buf Reserve(Pool pool, size_t bytes) { return {dev_->Reserve(pool, bytes), {}}; }
  void Resolve(Buf& b) { b.r = dev_->Get(b.handle); }

  // Largest weight buffer bound at once: the device's storage-buffer range (or a smaller test
  // limit); longer matrices are split by rows into several dispatches.
  size_t WeightPartLimit() const {
    const size_t dev = dev_->max_range();
    return vopt_.max_weight_part_bytes > 0 ? std::min(dev, vopt_.max_weight_part_bytes) : dev;
  }

  // A linear of this context's own (kernel tests).
  DevLinear PlanLinear(const Linear& lin) {
    size_t bytes = 0;
    return PlanDevLinear(*dev_, WeightPartLimit(), lin, &bytes);
  }
  void UploadLinear(DevLinear& d) { UploadDevLinear(*dev_, d); }

  static int RotatedCount(const std::vector<float>& inv) {
    int rot = 0;
    for (int i = 0; i < static_cast<int>(inv.size()); ++i) {
      if (inv[i] != 0.0f) rot = i + 1;
    }
    return std::max(rot, 1);
  }
  std::vector<float> RopeTable(const std::vector<float>& inv, int rot);

  // The longest prompt chunk where neither the caller nor GEMMA_VULKAN_MAX_CHUNK sets it: 1,024
  // tokens for models whose sliding window is at least 512 (E2B) on a discrete GPU with at least
  // 8 GiB of device-local memory (prefill 38,050 against 32,665 tok/s on 1,024 tokens and 32,767
  // against 27,409 on 8,192 on the H200 for +194 MiB at a 2,048-token capacity,
  // bench/journal/2026-11-sessions.md twenty-fourth session), else 512.
  static constexpr int kChunkLarge = 1024, kChunkSmall = 512;
  static constexpr size_t kChunkLargeMemory = size_t(8) << 30;

  // Cache geometry and prompt chunk, once (the first Build: a rebuild after a failure keeps them).
  // The chunk is at most the sliding rings' slack (a chunk's keys must not overwrite keys its
  // first token still sees). Where the caller leaves the slack to the backend (0: one window) and
  // the chunk is the large default or VulkanOptions::max_chunk, the rings hold window + chunk.
  void PlanGeometry();

  void Build();

  void Rebuild();
  void Replay();  // replay_: history_ evaluated again
  // Evaluates the committed `tokens` into reset caches; on a failure they stay committed and
  // *again is set (broken_ / replay_), so the next Forward tries again.
  void Reevaluate(const std::vector<int32_t>& tokens, std::map<int, std::vector<float>> soft_rows,
                  bool* again);

  // Steps of at most this many tokens run on the context's own activations; longer prompt chunks
  // on the engine's shared set.
  static constexpr int kShortStepRows = 16;
  int short_rows_ = 1;
  // Reserves on `dev` the activations of steps of `rows` tokens (committed and resolved by the
  // caller: ResolveActivations).
  Activations PlanActivations(Device& dev, int rows);
  static void ResolveActivations(Device& dev, Activations& act);
  // Exchanges the activation members with `act` (a shared set in, then out again).
  void SwapActivations(Activations& act);
  // For a step of m tokens: holds the engine's shared activations (swapped in) where m exceeds the
  // context's own set, until destroyed.
  class StepActivations {
   public:
    StepActivations(VulkanBackend& b, int m);
    ~StepActivations();
    StepActivations(const StepActivations&) = delete;
    StepActivations& operator=(const StepActivations&) = delete;

   private:
    VulkanBackend& b_;
    std::shared_ptr<SharedActivations> shared_;
    std::unique_lock<std::mutex> lock_;
  };

  // ---- recording ----
  struct Rec {
    VkCommandBuffer cmd;
    int dispatches = 0, barriers = 0;
    // Measurement (bench/vulkan: profiles, kernel probes) sees every dispatch; null in steps.
    DispatchObserver* observer = nullptr;
    // Between two compute dispatches (the one-token layer loop): Barrier records light_barrier_.
    bool light = false;
    // One-token steps from attn_hpw_from_ on: attn_fused with HPW heads per workgroup.
    bool long_ctx = false;
    // One-token decode steps (GEMMA_VULKAN_HEAD_NORM): the caller records the head next, so the
    // body leaves its last residual norm (head_pend) to the head's prologue, which also applies the
    // final norm.
    bool fuse_head = false;
    // Norm kernels with the one-token steps' prologue factors (resnorm.comp FAST_N; RecordBody).
    bool fast_norm = false;
    bool head_pend = false;
    const Buf* head_wt = nullptr;
    float head_scale = 1.0f;
    BufRange head_h{};
    // A batch's step (ForwardRows): row r is context (*rows)[r]'s token; the attention runs per
    // row in row_splits key splits (RecordRowsAttention).
    const std::vector<VulkanBackend*>* rows = nullptr;
    int row_splits = 1;
    const VulkanBackend* rope_rows = nullptr;  // the row whose RoPE tables the rows read
    // Set 1 (the rows' caches, Device::RowsSet) bound with the next dispatches.
    VkDescriptorSet rows_set = VK_NULL_HANDLE;
    // Split-K regions taken since the barrier numbered ksum_phase (LinearOp's KSPLIT).
    int ksum_phase = -1, ksum_taken = 0;
  };

  // A dispatch's profile label: the shader, and for matvecs the kind, epilogue and shape.
  static std::string Label(const char* shader, const std::vector<uint32_t>& spec, uint32_t gy,
                           const void* push, size_t push_bytes) {
    std::string label = shader;
    if (label == "linear" || label == "linear_dp" || label == "linear_ds" ||
        label == "linear_dp_ds") {
      static const char* kKinds[] = {"f32", "bf16", "f16", "q2", "q4", "q8"};
      label += std::string(" ") + kKinds[spec[1]] + " epi" + std::to_string(spec[2]) + " " +
               std::to_string(push_bytes ? static_cast<const LinPush*>(push)->rows : gy) + "x" +
               std::to_string(push_bytes ? static_cast<const LinPush*>(push)->cols : 0);
    }
    return label;
  }

  void Dispatch(Rec& rc, const char* shader, std::vector<uint32_t> spec,
                const std::array<BufRange, vk::kBindings>& b, const void* push, size_t push_bytes,
                uint32_t gx, uint32_t gy = 1, uint32_t gz = 1, uint32_t local_size = kWG);
  void Barrier(Rec& rc);

  // Matrix units (linear_cm) take the SRQ integer path of int2/int4/int8 weights; int2/int4 sum in
  // f32 without flushing, exact while max|w| * 128 * cols < 2^24 (int8 flushes every 512 columns).
  // Dense (bf16 / f16) linears on matrix units: whole 16-byte weight vectors on 16-byte aligned
  // bindings (rows of a multiple of 8 columns).
  bool UseCoopDense(const DevLinear& d, const DevLinear* second) const {
    if (!coop_ || !coop_dense_) return false;
    for (const DevLinear* l : {&d, second}) {
      if (!l) continue;
      if (l->src->kind != WeightKind::kBF16 && l->src->kind != WeightKind::kF16) return false;
      if (l->src->kind != d.src->kind || l->cols % 8 != 0) return false;
      for (const DevLinear::Part& p : l->parts)
        if (p.w.r.offset % 16 != 0) return false;
    }
    return true;
  }

  bool UseCoop(const Linear& lin, const Linear* second) const {
    if (!coop_) return false;
    for (const Linear* l : {&lin, second}) {
      if (!l) continue;
      if (l->kind != WeightKind::kQ2 && l->kind != WeightKind::kQ4 && l->kind != WeightKind::kQ8)
        return false;
      if (!(l->in_scale > 0) || l->kind != lin.kind) return false;
      const int64_t maxw = l->kind == WeightKind::kQ2 ? 2 : l->kind == WeightKind::kQ4 ? 8 : 0;
      if (static_cast<int64_t>(l->cols) * maxw * 128 >= (1 << 24)) return false;
    }
    return true;
  }

  // Appends linear.comp's defaults for the specialization constants missing before index n of
  // `spec` (spec[k] is constant k + 1; PRO_N, constant 10, and ACC_COPIES, constant 22, default
  // to 1, the others to 0).
  static void PadLinearSpec(std::vector<uint32_t>& spec, size_t n) {
    while (spec.size() < n) spec.push_back(spec.size() == 9 || spec.size() == 21 ? 1u : 0u);
  }

  // y[t][y_off + r] = epi(lin(x[t])) for t in [x_row0, x_row0 + m); epi 1 fuses `second`.
  // Returns whether `pj` was taken (EPI 4, DJ: the caller then records no dispatch for pj->proj).
  bool LinearOp(Rec& rc, const DevLinear& d, const BufRange& x, int x_stride, const BufRange& y,
                int y_stride, int y_off, int m, uint32_t epi = 0, const DevLinear* second = nullptr,
                const BufRange* aux = nullptr, int aux_stride = 0, int aux_off = 0, int x_row0 = 0,
                const Tail* tail = nullptr, uint32_t xq_mode = 0, const BufRange* xq = nullptr,
                float next_in_s = 0.0f, const Pro* pro = nullptr, uint32_t xq_perm = 0,
                const PleFuse* pj = nullptr);

  // GEMMA_VULKAN_XQ_PERM=1: the kind code in whose packed-dot order gate/up writes the down
  // projection's quantized input (one-token steps, where the down projection stages it in shared
  // memory and multiplies with packed dot products); 0: natural order. Both ends ask this.
  uint32_t XqPerm(const DevLinear& down) const {
    if (!xq_perm_ || !int_dot_ || !xq_shared_) return 0;
    const WeightKind k = down.src->kind;
    if (k != WeightKind::kQ2 && k != WeightKind::kQ4) return 0;
    const uint32_t xwords = std::max<uint32_t>(1, down.wstride * ElemsPerWord(k) / 4);
    return xwords * 4 <= 16384 ? KindCode(k) : 0;
  }

  // One-token steps apply the residual norms in the next linears' prologues (CNORM; PRO holds 8
  // values per invocation and keeps one vector in shared memory, with the quantized inputs and
  // reduction slots: at most ~16 KiB more). With RMS_FAST, other steps' norm kernels then take the
  // prologues' factors (rc.fast_norm).
  bool NormPrologues() const {
    const int H = cfg_.hidden_size;
    return cnorm_ && H <= 8 * static_cast<int>(kWG) &&
           4 * static_cast<size_t>(H) + 16384 <= dev_->max_shared_bytes();
  }
  // The final norm of `count` rows from row0 of h_ into hn_, as a one-token step's head prologue
  // (HEAD_NORM) computes it.
  void FinalNormOp(Rec& rc, int count, int row0) {
    rc.fast_norm = head_norm_ && rms_fast_ && NormPrologues();
    NormOp(rc, count, nullptr, nullptr, 1.0f, &final_norm_, true, hn_.r, row0);
    rc.fast_norm = false;
  }
  // The residual stream is h_ unless `h` is given.
  void NormOp(Rec& rc, int m, const Buf* t, const Buf* wt, float scale, const Buf* wa, bool has_a,
              const BufRange& a, int h_row0 = 0, const BufRange* h = nullptr);

  // Records the model body for m tokens (inputs already in h_/tok_), then the head for rows
  // [out_first, out_first + out_count) when out_count > 0.
  // Layers [l_begin, l_end) (all by default); l_begin == 0 also records the step's prologue (PLE
  // projection, first input norm, PLE rows).
  void RecordBody(Rec& rc, int m, int splits, int l_begin = 0, int l_end = -1);
  // One layer's attention for the m tokens of this context (RoPE, cache rows, attention into
  // attn_), or for a batch's rows, each over its own context's caches.
  void RecordAttention(Rec& rc, int m, int splits, const LayerPlan& p, DevLayer& d);
  void RecordRowsAttention(Rec& rc, const LayerPlan& p, DevLayer& d);
  void QkRopeOp(Rec& rc, const LayerPlan& p, const DevLayer& d, uint32_t ring,
                const CacheSlot* slot, const BufRange& rope, const char* shader, uint32_t gy);
  // A batch's head: the final norm and the LM head over its first `count` rows, their argmaxes
  // when `reduce`; the logits of rows [0, logits_rows) and the argmaxes of rows
  // [logits_rows, count) copied to the host (the latter after the former).
  void RecordBatchHead(Rec& rc, int count, int logits_rows, bool reduce);
  // The argmax (mask: among the allowed ids) of each of the head's first `count` rows into res_.
  void RecordLogitsReduce(Rec& rc, int count, bool mask);
  // ForwardRows' command buffer (recorded, or replayed by its key) submitted, its inputs written
  // (`rope`: WriteRowSteps' choice).
  void SubmitRows(const std::vector<VulkanBackend*>& rows, const std::vector<int32_t>& positions,
                  const std::vector<uint64_t>& key, int logits_rows, int out_rows, int splits,
                  const VulkanBackend* rope);

  // ForwardRows' command buffer: rows (row r a token of context rows[r]) in the order logits,
  // argmax, no output; logits_rows / out_rows as ForwardRows counts them.
  void RecordRows(VkCommandBuffer cmd, const std::vector<VulkanBackend*>& rows, int logits_rows,
                  int out_rows, int splits, const VulkanBackend* rope);

  void RecordHead(Rec& rc, int out_first, int count, OutputMode mode);
  void RecordHeadCopy(Rec& rc, int count, OutputMode mode);

  // The buffers a one-token step accumulates into, zeroed before it: the quantized inputs gate/up
  // writes for the down projections (XQ 2) and the PLE and down projections' sums (EPI 4, DJ).
  void ZeroOneTokenScratch(VkCommandBuffer cmd);

  // host_rows: a prompt chunk's embedding rows are f32 rows from the host (soft tokens), not
  // the stored rows RecordGpuRows decodes.
  void RecordInputs(Rec& rc, int m, OutputMode mode, bool host_rows = false);

  // The PLE rows' and mask's copies (from the split staging or the main one) and a one-token
  // step's scratch fills.
  void RecordRestInputs(Rec& rc, int m, OutputMode mode, bool split);

  void Begin(VkCommandBuffer cmd, bool reusable) {
    vkResetCommandBuffer(cmd, 0);
    VkCommandBufferBeginInfo bi{};
    bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    bi.flags = reusable ? 0 : VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    if (vkBeginCommandBuffer(cmd, &bi) != VK_SUCCESS)
      throw Error(ErrorCode::kDevice, "vulkan: vkBeginCommandBuffer failed");
  }
  void End(VkCommandBuffer cmd) {
    if (vkEndCommandBuffer(cmd) != VK_SUCCESS)
      throw Error(ErrorCode::kDevice, "vulkan: vkEndCommandBuffer failed");
  }

  // Whether a one-token step at the current position runs the long-context attention (HPW).
  bool LongContextStep() const { return attn_hpw_ > 1 && window_.cached() >= attn_hpw_from_; }

  // The pre-recorded command buffer of one decoded token for an output mode (and context tier:
  // LongContextStep).
  VkCommandBuffer DecodeCommand(OutputMode mode);

  // One decoded token (inputs written).
  void SubmitDecode(OutputMode mode);

  // A one-token step's command buffer (DecodeCommand) submitted with its inputs written.
  void SubmitFilledDecode(VkCommandBuffer cb);

  // Test hooks: test-sized matrix-unit input slots and split-K regions in place of the step's,
  // restored when the scope ends (an exception included).
  class CoopSlotsSwap {
   public:
    CoopSlotsSwap(VulkanBackend& b, const Buf& slots, size_t slot_bytes, const Buf& parts,
                  size_t part_bytes)
        : b_(b),
          slots_(b.xqc_),
          parts_(b.partc_),
          slot_bytes_(b.coop_slot_bytes_),
          part_bytes_(b.coop_part_bytes_) {
      b.xqc_ = slots;
      b.partc_ = parts;
      b.coop_slot_bytes_ = slot_bytes;
      b.coop_part_bytes_ = part_bytes;
    }
    ~CoopSlotsSwap() {
      b_.xqc_ = slots_;
      b_.partc_ = parts_;
      b_.coop_slot_bytes_ = slot_bytes_;
      b_.coop_part_bytes_ = part_bytes_;
    }
    CoopSlotsSwap(const CoopSlotsSwap&) = delete;
    CoopSlotsSwap& operator=(const CoopSlotsSwap&) = delete;

   private:
    VulkanBackend& b_;
    const Buf slots_, parts_;
    const size_t slot_bytes_, part_bytes_;
  };

  // Public to the free functions of vulkan_backend.h.
 public:
  // BackendModel::ForwardBatch's work, recorded and submitted by this context: the steps `steps`
  // of the distinct contexts `ctx` (ctx[i] steps[i]'s; this context among them or not), each a
  // row per token (one token, or several with all_positions), at least 2 and at most
  // batch_rows() rows in all, each step validated and BatchReady. Fills every step's result and
  // commits every context's tokens, or throws with no context's cached() changed (a device
  // failure marks them all for a rebuild).
  void ForwardRows(std::span<VulkanBackend* const> ctx, std::span<BatchStep* const> steps);
  // The most rows one batched step of this context takes (1: it does not batch).
  int batch_rows() const { return batch_rows_; }
  // Builds the device's pipelines of batched steps of min_rows .. batch_rows() rows (argmax rows
  // and logits rows) by recording such steps of this context's rows into a command buffer that is
  // never submitted; `stop` ends it between recordings. (Pipelines are built at first use, which
  // stalled the first batch of each size for seconds.)
  void PrepareBatchPipelines(int min_rows, const std::atomic<bool>& stop);
  // Whether a validated request can be a batch's rows now (else it runs alone): one token, or a
  // verification step (all_positions) of at most batch_rows() tokens within the rings' slack (a
  // chunk's bound: its keys must not overwrite keys its first token still sees).
  bool BatchReady(const ForwardRequest& req) const {
    const size_t m = req.tokens.size();
    return !broken_ && !replay_ && weights_->generation == shared_->generation() &&
           req.mode != OutputMode::kSelect && m >= 1 &&
           (m == 1 ||
            (req.all_positions && m <= static_cast<size_t>(std::min(chunk_, batch_rows_)))) &&
           std::none_of(req.soft.begin(), req.soft.end(), [](const float* p) { return p; });
  }
  // Identifies this context's current device state (new after each Build): batch recordings
  // are kept by their rows' ids.
  uint64_t uid() const { return uid_; }

  // Runs one linear (epilogue 0 store, 1 gelu(lin) * second, 2 softcap) over n tokens on this
  // backend's device, through the kernel a step of n tokens would use. Buffers are added per call.
  std::vector<float> RunLinear(const Linear& lin, const Linear* second, const float* x, int n,
                               uint32_t epi, int reps = 1, double* gpu_ns = nullptr,
                               double* main_ns = nullptr, const char* probe = nullptr);

  // Prefill attention on matrix units over m query rows (q[t][nh hd]) and the K / V cache rings
  // k / v ([ring][nkv hd]; step.pos0 / step.m set): q split into hi + lo f16 rows (split_f16
  // QROWS: [K/V head][token][group] order, a power of two per row), then attention_cm, 32 rows of
  // one K/V head per workgroup, into out[t][nh hd].
  void AttnCmOp(Rec& rc, const BufRange& q, const BufRange& k, const BufRange& v,
                const BufRange& out, int nh, int nkv, int hd, int ring, int window, int m);

  // Kernel test hook: srq_quant over x[n][cols] with input scale in_s, as f16 values (i8 false)
  // or int8 bytes (I8, linear_cm2's); returns the output buffer, n rows of 16 bytes per 8 columns
  // (padded to 64 columns), filled with 0xAB before the dispatch.
  std::vector<uint8_t> RunSrqQuant(const float* x, int n, int cols, float in_s, bool i8);

  // Kernel test hook: AttnCmOp over uploaded q and K / V rings at position pos0 (empty where the
  // device or the shape does not take the matrix-unit path).
  std::vector<float> RunAttnCm(const float* q, const float* k, const float* v, int nh, int nkv,
                               int hd, int ring, int window, int pos0, int m);

  // One step over `tokens` with the `nth` dispatch labelled `label` (linear_dp or attention) run
  // as its PROBE variant: per-stage device-clock times of its workgroups, as a markdown table.
  void RecordArgmaxStep(Rec& rc, int m);
  std::string ProbeKernel(std::span<const int32_t> tokens, const std::string& label, int nth);

  std::vector<std::pair<std::string, double>> Profile(std::span<const int32_t> tokens);
  // Profile for a batched step (ForwardRows) of the contexts `ctx`, row i stepping tokens[i]
  // (their caches not advanced).
  std::vector<std::pair<std::string, double>> ProfileRows(std::span<VulkanBackend* const> ctx,
                                                          std::span<const int32_t> tokens);
  // The two profiles' common part (bench/vulkan/vulkan_lab.cc).
  std::vector<std::pair<std::string, double>> TimedRecording(Rec& rc,
                                                             const std::function<void()>& inputs,
                                                             const std::function<void()>& body);

 private:
  // Writes a step's inputs into the host staging buffer: step values, embedding rows, PLE rows
  // and (select) the allowed mask.
  // embed_rows.comp's kind code for a table it decodes (0: the host decodes it): bf16, f16, and
  // quantized kinds with whole scale blocks, whose record (codes, then scales) is no longer than
  // the f32 row the staging region holds.
  static uint32_t GpuRowKind(const Embedding& e);
  // u32 words of a token's record: the stored row (padded to a word), then its scale blocks.
  static size_t GpuRowCodeWords(const Embedding& e) { return (e.row_bytes + 3) / 4; }
  static size_t GpuRowRecordWords(const Embedding& e) {
    return GpuRowCodeWords(e) + (IsQuantized(e.kind) ? size_t(e.scale_blocks) : 0);
  }
  // A token's record: the stored row, then (quantized kinds) its scales.
  static void CopyGpuRowRecord(const Embedding& e, int32_t id, uint8_t* dst) {
    std::memcpy(dst, e.data + size_t(id) * e.row_bytes, e.row_bytes);
    if (IsQuantized(e.kind))
      std::memcpy(dst + GpuRowCodeWords(e) * 4, e.scale + size_t(id) * e.scale_blocks,
                  size_t(e.scale_blocks) * 4);
  }
  // The records of the staging region at byte `off` decoded into m rows of `out` (f32).
  void RecordGpuRows(Rec& rc, const Embedding& e, VkDeviceSize off, const BufRange& out, int m);

  // `beside` (prompt chunks): run as one more task of the fill's pool, task 0, so it starts at once
  // beside the rows' tasks (after them without a pool or below 64 tokens); its exception, if any,
  // is rethrown here after the rows are written.
  // `soft`: empty, or per token the soft token's row (ForwardRequest::soft) or null.
  void FillInputs(std::span<const int32_t> tokens, OutputMode mode,
                  const std::vector<uint64_t>* allowed,
                  const std::function<void()>* beside = nullptr,
                  std::span<const float* const> soft = {});

  // The step's position and token count (the step buffer's values) at the staging buffer's start.
  // Then (words 4-7) the step values of a prompt chunk's trailing shared layers, run for its last
  // position alone (RecordPromptStep).
  void WriteStepValues(int m);

  // One token: the rows decoded into cached memory and copied into the staging buffer in one pass
  // each (the staging memory may be uncached, where element-by-element stores are slow). The
  // embedding row first, then the PLE rows (the split staging when there is one).
  void FillOneTokenRow(int32_t token, const float* soft = nullptr);
  void FillOneTokenSide(int32_t token);
  void FillMask(int m, const std::vector<uint64_t>* allowed);

  // The body and head of a multi-token step whose outputs are rows [out_first, out_first + count):
  // with one output row (the last) or none, the layers from Model::shared_tail() (they feed only
  // their own position's logits) run for that row alone
  // (moved to row 0, the step's position and count rewritten on the device) or are skipped.
  // Returns the row the head reads from (out_first, or 0 after the move).
  int RecordPromptStep(Rec& rc, int m, int pos0, int out_first, int count);

  void RunChunk(std::span<const int32_t> tokens, bool last_chunk, const ForwardRequest& req,
                ForwardResult* out, std::span<const float* const> soft);
  // The soft rows of committed positions at or after n forgotten.
  void DropSoftRows(int n) { soft_rows_.erase(soft_rows_.lower_bound(n), soft_rows_.end()); }

  void ReadHead(int count, OutputMode mode, ForwardResult* out);

  const Model& model_;
  const TextConfig& cfg_;
  VulkanOptions vopt_;
  KernelConfig context_kernels_;  // this context's choices over the model's
  KernelConfig kc_;  // the kernel choices set (options, context, then GEMMA_VULKAN_KERNELS)
  int Knob(const char* name, int fallback) const { return kc_.Get(name, fallback); }
  BackendOptions options_;
  bool planned_ = false;  // PlanGeometry has run
  int capacity_ = 0, slack_ = 0, sliding_ring_ = 0, chunk_ = 1;
  CacheWindow window_;
  std::vector<int32_t> history_;  // committed tokens, replayed after a device rebuild
  std::map<int, std::vector<float>> soft_rows_;  // their soft rows (image, audio), by position
  bool broken_ = false;
  // A request failed (not on the device) after an earlier chunk of it was written: the sliding
  // rings may have lost entries the committed tokens need, so the next Forward evaluates
  // history_ again on the same device.
  bool replay_ = false;
  int rebuilds_ = 0;

  // The engine-level state, the device and weights this context was built on (declared before
  // dev_: this context's Device goes first), and this context's Device on their core.
  std::shared_ptr<VulkanShared> shared_;
  std::shared_ptr<const DeviceWeights> weights_;

 public:
  const std::shared_ptr<VulkanShared>& shared() const { return shared_; }

 private:
  std::unique_ptr<Device> dev_;
  uint32_t lanes_ = 32;
  uint32_t lanes_k_ = 6;       // a row gets 2x the lanes while it has >= lanes_k_ vectors per lane
  bool fuse_tails_ = true;     // one-token steps fold residual norms into the preceding linear
  bool cnorm_ = false;         // one-token steps apply residual norms in the next linear (Pro)
  bool xq_shared_ = true;      // matvecs stage a pre-quantized input in shared memory
  bool xq_perm_ = false;       // gate/up writes the down projection's input in packed-dot order
  bool attn_fused_ = false;    // one-token attention through attn_fused.comp (where it fits)
  bool attn_fused_rope_ = true;     // ... with qkrope's work inside (ROPE)
  uint32_t attn_fused_mode_ = 0;    // ... 0: the last split merges, 1: a second dispatch merges
  bool attn_vpf_ = true;            // ... the next block's V rows loaded with its K rows (VPF)
  uint32_t attn_hpw_ = 2;           // ... GEMMA_VULKAN_ATTN_HPW (HPW; full-attention layers)
  int attn_hpw_from_ = 12288;       // ... from this position on (GEMMA_VULKAN_ATTN_HPW_FROM)
  uint32_t attn_kw_ = 0;            // ... keys per row group and block (0: by head dim)
  uint32_t attn_mb_ = 16;           // ... partials per round of the merge
  bool attn_vec_ = true;            // ... 16-byte loads (VEC)
  uint32_t attn_rl_max_ = 64;       // ... at most this many lanes per key row
  bool attn_nc_merge_ = true;       // ... MODE 0: partials read through the read-only alias
  bool attn_fence_ = true;          // ... MODE 0: an acquire-release arrival atomic (FENCE)
  int fused_splits_ = 0;            // ... key splits (0: by compute units)
  bool splits_set_ = false;         // the decode splits were set (options or environment)
  bool ple_fuse_ = true;            // one-token PLE projection in the gate's workgroups (EPI 4)
  uint32_t ple_lanes_ = 64;         // ... lanes per gate row (0: the general choice)
  bool down_fuse_ = true;           // one-token down projection in gate/up's workgroups (DJ)
  int down_fuse_wgs_ = 0;           // ... gate/up's workgroup cap there (0: mv_wgs_)
  bool down_fuse_late_ = true;      // ... the down words loaded after the multiply
  bool down_fuse_pairs_ = true;     // ... from a pair-major copy
  uint32_t down_fuse_copies_ = 4;   // ... copies of the sums
  bool head_norm_ = true;           // one-token decode steps: the last norms in the head's prologue
  bool dense_prefetch_ = true;      // FXW linears looping over blocks: the next block's early
  bool reduce_last_ = true;         // logits_reduce in one dispatch (LAST)
  bool mv_prefetch_block_ = true;   // FAST linears looping over blocks: the next block's early
  uint32_t mv_prefetch_early_ = 2;  // ... the first block's at the start, grids <= this per unit
  uint32_t mv_prefetch_early_set_ = 7;  // ... for these linears (bits above)
  bool mv_prefetch_early_late_ = true;  // ... issued after a norm prologue's operand loads
  static int RoundUp32(int n) { return (n + 31) / 32 * 32; }
  int FusedSplits(int nh) const {
    const int cu = static_cast<int>(dev_->compute_units());
    int s = fused_splits_ > 0                          ? fused_splits_
            : splits_set_ || dev_->is_cpu() || cu == 0 ? splits_
                                                       : cu / nh;
    // (the merge holds 8 splits per lane of the smallest subgroup the driver may pick)
    return std::clamp(s, 1, std::min(256, 8 * static_cast<int>(dev_->min_subgroup_size())));
  }
  // attn_fused.comp's lanes per key row, dims per lane and keys per row group for head dim hd;
  // false where the kernel does not fit (then the three-kernel path runs).
  bool FusedAttnShape(int hd, uint32_t* rl, uint32_t* dpl, uint32_t* kw) const {
    if (!attn_fused_ || hd <= 0) return false;
    // A key row's lanes lie within the smallest subgroup the driver may pick.
    uint32_t r = 1;
    while (r * 2 <= std::min(dev_->min_subgroup_size(), attn_rl_max_) && hd % (4 * r) == 0) r *= 2;
    const uint32_t d = static_cast<uint32_t>(hd) / r;
    if (hd % (2 * r) != 0 || d < 2 || d > 16 || kWG % dev_->subgroup_size() != 0) return false;
    *rl = r;
    *dpl = d;
    *kw = attn_kw_ > 0 ? attn_kw_ : std::clamp(32u / d, 1u, 4u);
    return true;
  }
  uint32_t mv_lanes_min_ = 4;     // one-token integer matvecs: fewest lanes per row (CLUSTER < SG)
  uint32_t mv_lanes_vec_ = 3;     // ... chosen for about this many 16-byte vectors per lane
  int mv_wgs_ = 0;                // one-token linears: workgroup cap (0 = one per row block)
  uint32_t mv_max_rows_ = 32768;  // ... for parts of at most this many rows
  int mv_wgs_long_ = 0;           // the cap for longer parts (0: none)
  uint32_t dense_lanes_ = 32;     // one-token dense rows of <= 8 x this many vectors: lanes per row
  int dense_wgs_ = 0;             // ... their workgroup cap (0: mv_wgs_)
  bool pack_atomic_ = false;      // the prologue packs with atomics (linear.comp PACK_ATOMIC)
  bool rms_all_ = false;          // every invocation evaluates the RMS factor (RMS_ALL)
  bool rms_fast_ = true;          // the prologues' RMS factors by Newton steps (RMS_FAST)
  bool share_x_ = true;           // one quantized input for equal input scales (SHARE_X)
  // Short steps (a batch's rows, verification steps) on the matvecs:
  int rows_mv_max_ = kMaxMatvecTokens;      // ... of at most this many tokens (more: tiled)
  int rows_pro_max_ = 4;                    // ... their norms in prologues up to this many
  // Every linear that takes a norm (q, k, v, gate / up, the PLE gate) is on the integer path
  // (SRQ input scales), as linear.comp PRO_M needs.
  bool short_pro_ok_ = false;
  int rows_wgs_ = 0;                        // ... their workgroup cap (0 = one per row block)
  bool rows_cluster_ = true;                // ... the one-token integer lanes (CLUSTER)
  bool dsum_ = false;             // dense sums in double (DSUM): the model has SRQ linears
  bool dense_vec4_ = true;        // one-token dense rows read a vec4-staged input (FXW)
  bool int_dot_ = false;          // matvecs use packed integer dot products (linear_dp)
  bool mv_fast_ = true;           // GEMMA_VULKAN_MV_FAST: linear_dp's branch-free multiply (FAST)
  uint32_t mv_dual_loop_ = 1;     // GEMMA_VULKAN_MV_DUAL_LOOP: gate/up's two sets in one loop
  uint32_t mv_pair_loop_ = 2;     // GEMMA_VULKAN_MV_PAIR_LOOP: one set, vectors an iteration
  bool pro_vec_ = false;          // GEMMA_VULKAN_PRO_VEC: the prologue on 16-byte operand loads
  bool head_pro_vec_ = false;     // GEMMA_VULKAN_HEAD_PRO_VEC: the head's prologue too
  uint32_t mv_xcm_ = 1;  // GEMMA_VULKAN_MV_XCM: the FAST int2 (1) / int4 (2) input chunk-major
  bool coop_ = false;    // prefill SRQ (and dense) linears on matrix units (linear_cm)
  bool cm2_ = false;     // ... on workgroup-scope matrices (linear_cm2)
  std::unique_ptr<ThreadPool> fill_pool_;  // gathers a prompt chunk's embedding / PLE rows
  std::vector<float> fill_row_;            // a one-token step's rows before the staging copy
  int attn_pf_ = 0;  // prefill attention: attention_pf (a subgroup per query and head), 2: f32 dots
  static constexpr int kCoopSlots = 4;
  Buf xqc_;  // linear_cm's quantized inputs, kCoopSlots slots
  size_t coop_slot_bytes_ = 0;
  uint32_t coop_ld_max_ = 0;
  int coop_next_ = 0, coop_slot_[2] = {0, 0};
  // The next of the rotating input slots (with its split-K region).
  int TakeCoopSlot() {
    const int slot = coop_next_;
    coop_next_ = (coop_next_ + 1) % kCoopSlots;
    return slot;
  }
  BufRange CoopSlot(int i) const {
    return BufRange{xqc_.r.buf, xqc_.r.offset + coop_slot_bytes_ * i, coop_slot_bytes_, nullptr};
  }
  // Split-K partial sums, one region per quantized-input slot (the same rotation keeps them apart).
  static constexpr uint32_t kCoopTargetTiles = 264;  // output tiles wanted in flight (2 per SM)
  int coop_splitk_ = 0;
  bool skip_tail_ = true;  // RecordPromptStep: trailing KV-shared layers for the output row only
  vk::Device::BarrierKind light_barrier_ = vk::Device::BarrierKind::kFull;  // GEMMA_VULKAN_BARRIER
  bool gpu_rows_ = false;  // prompt chunks' rows decoded by embed_rows.comp (GEMMA_VULKAN_GPU_ROWS)
  bool record_beside_ = true;  // prompt chunks recorded beside the rows' fill (..._RECORD_BESIDE)
  // Recorded prompt chunks kept for replay, by (tokens, first output, outputs, mode).
  struct PromptKey {
    int m = 0, out_first = -1, count = -1, mode = -1;
    bool host_rows = false;
    bool operator==(const PromptKey&) const = default;
  };
  struct PromptCmd {
    PromptKey key;
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    int out_first = 0;  // RecordPromptStep's value
    uint64_t used = 0;  // the clock at its last use
  };
  std::vector<PromptCmd> prompt_cmds_;
  uint64_t prompt_cmd_clock_ = 0;
  int chunk_cache_ = 4;        // GEMMA_VULKAN_CHUNK_CACHE: recorded chunks kept
  bool splits_adapt_ = false;  // decode attention: whole key blocks per split (ADAPT)
  bool attn_cm_ = false;      // GEMMA_VULKAN_ATTN_CM: prefill attention on matrix units
  uint32_t attn_cm_acc_ = 1;  // GEMMA_VULKAN_ATTN_CM_ACC: attention_cm.comp's ACC
  uint32_t attn_cm_rot_ = 1;  // GEMMA_VULKAN_ATTN_CM_ROT: its key blocks in a rotated order
  // attention_cm's 64-dim chunks of a head (its build: attention_cm1 / 4 / 8); q's split rows
  // hold 8 x that many 16-byte vectors.
  // attention_cm's shapes: head dims up to 512 in 16-byte vectors, query heads per K/V head
  // dividing its 32 rows, q's split rows (with a workgroup's padding rows) inside one input slot
  // and their split_f16 workgroups (one a row) within the guaranteed grid height.
  bool AttnCmShape(int hd, int nh, int nkv, int m) const {
    const int group = nh / nkv;
    if (hd % 4 != 0 || hd > 512 || nh % nkv != 0 || group > 32 || 32 % group != 0) return false;
    const size_t rows = size_t(m) * nh + 32;
    return rows - 32 <= 65535 && rows * AttnCmChunks(hd) * 8 * 16 <= coop_slot_bytes_ &&
           rows * 4 <= coop_part_bytes_;
  }
  bool coop_dense_ = true;  // GEMMA_VULKAN_CM_DENSE: bf16 / f16 prefill linears on matrix units
  Buf partc_;
  size_t coop_part_bytes_ = 0;
  // Split-K short-step matvecs (linear.comp KSPLIT): int32 sums of up to rows_mv_max_
  // tokens x the widest output, kKsumSlots regions used in turn, each zero between uses (each
  // row block's finishing workgroup zeroes its sums and counter), and after them each region's
  // counters. Split linears of one phase (q, k, v) run at once on a GPU: each takes its own
  // region, and a phase's (kKsumSlots + 1)-th records a barrier first.
  static constexpr int kKsumSlots = 3;
  Buf ksum_;
  size_t ksum_bytes_ = 0;
  size_t kcount_bytes_ = 0;  // a region's counters
  int ksum_next_ = 0;
  uint32_t rows_kcols_ = 0;  // ... input columns per split (0: no split)
  BufRange CoopPart(int i) const {
    return BufRange{partc_.r.buf, partc_.r.offset + coop_part_bytes_ * i, coop_part_bytes_,
                    nullptr};
  }
  int splits_ = 1;
  size_t weight_bytes_ = 0;
  std::vector<DevLayer> layers_;
  DevLinear ple_proj_, lm_head_;
  Buf ple_norm_, final_norm_;
  std::vector<float> inv_s_, inv_f_;
  int rot_s_ = 1, rot_f_ = 1;
  Buf rope_s_, rope_f_;
  std::vector<CacheSlot> slots_;
  Buf pacc_;  // EPI 4 / DJ: int32 sums of each layer's PLE and down projections
  Buf h_, h2_, a_, t_, q_, kt_, vt_, attn_, g_, po_, pml_, ple_, tok_, gp_, hn_, logits_, part_,
      res_, mask_, step_, in_host_, out_host_, counter_, hcount_, xq_;
  size_t xq_region_ = 0;
  size_t in_x0_off_ = 0, in_tok_off_ = 0, in_mask_off_ = 0;
  Buf in_side_;  // one-token steps' PLE rows and mask (host memory)
  size_t in_side_mask_off_ = 0;
  bool upload_split_ = true;  // GEMMA_VULKAN_UPLOAD_SPLIT
  bool upload_local_ = true;  // GEMMA_VULKAN_UPLOAD_LOCAL
  int head_rows_ = 1, nblocks_ = 1;
  uint32_t vocab_block_ = kVocabBlock;
  std::array<std::array<VkCommandBuffer, 4>, 2> decode_cmd_{};  // [long context][mode]
  VkCommandBuffer prefill_cmd_ = VK_NULL_HANDLE, head_cmd_ = VK_NULL_HANDLE;
  int decode_dispatches_ = 0, decode_barriers_ = 0;
  Buf prof_, prof_host_;
  Buf reduce_cnt_;
  // Batched steps (ForwardRows): each row's record (its position, 1, 0, 0, its sliding ring, its
  // capacity) at a stride of kRowStepBytes, written by the host (row_steps_host_) and copied to
  // the device (row_steps_) at the step's start.
  static constexpr size_t kRowStepBytes = 256;
  Buf row_steps_, row_steps_host_;
  // The rows' records (row r of context rows[r] at positions[r]) and the context whose RoPE tables
  // they read (the largest capacity).
  const VulkanBackend* WriteRowSteps(std::span<VulkanBackend* const> rows,
                                     std::span<const int32_t> positions);
  // Key splits of a batch row's attention: the decode's, at most what the partial sums of
  // `rows` rows hold (PlanActivations sizes them for kRowSplitUnits rows x splits).
  // (ROWS_SPLITS > 0: at most that many)
  static constexpr int kRowSplitUnits = 256;
  int RowSplits(int rows) const {
    return std::clamp(kRowSplitUnits / rows, 1, rows_splits_ > 0 ? rows_splits_ : splits_);
  }
  int rows_splits_ = 0;
  int batch_rows_ = 1;
  int verify_rows_ = 0;  // VERIFY_ROWS (Build)
  int64_t batched_steps_ = 0;
  uint64_t uid_ = 0;
  // Recorded batch steps kept for replay, by their rows' context ids and output modes.
  struct BatchCmd {
    std::vector<uint64_t> key;
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    uint64_t used = 0;
  };
  // (a steady set of sessions steps in few compositions: all of them, and all but one while a
  // session chooses its next token)
  static constexpr size_t kBatchCmds = 32;
  std::vector<BatchCmd> batch_cmds_;
  uint64_t batch_cmd_clock_ = 0;
};

}  // namespace gemma::vulkan_internal
