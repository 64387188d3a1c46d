#include "backend/vulkan/vulkan_backend.h"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "backend/cache_window.h"
#include "backend/cpu/reference_ops.h"
#include "backend/vulkan/vk_device.h"
#include "core/thread_pool.h"
#include "gemma/error.h"
#include "model/model.h"

namespace gemma {
namespace {

using vk::BufRange;
using vk::Device;
using vk::Pool;

constexpr uint32_t kWG = 256;
constexpr int kCombineCounters = 256;  // (token, head) arrival counters of the merging attention
constexpr uint32_t kVocabBlock = 4096;  // logits_reduce's block (GEMMA_VULKAN_VOCAB_BLOCK: tests)
constexpr int kMatmulMinTokens = 8;  // linears over this many tokens use the tiled kernel

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

uint32_t KindCode(WeightKind k) {
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
uint32_t ElemsPerWord(WeightKind k) {
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
uint8_t ZeroByte(WeightKind k) {
  return k == WeightKind::kQ4 ? 0x88 : k == WeightKind::kQ2 ? 0xAA : 0;
}

struct LinPush {
  uint32_t rows, cols, wstride, x_stride, y_stride, y_off;
  float in_s0, out_s0, in_s1, out_s1, cap;
  uint32_t aux_stride, aux_off, x_row0, ntok;
  uint32_t n, has_a, has_wa;  // residual-norm tail
  float scale, eps;
  float next_in_s;  // XQ 2
  uint32_t xq_ld;   // linear_cm: uvec4 per token row of the quantized inputs
  uint32_t kper;    // linear_cm split K: K tiles per split (0: no split)
  float pj_in_s, pj_out_s;       // EPI 4 / PRO_T: the next linear's SRQ scales
  uint32_t pj_rows, pj_wstride;  // EPI 4, DJ: its rows and u32 words per row
  float pt_in_s, pt_out_s;       // PRO_T: the SRQ scales of the linear whose sums t holds
};
struct QuantPush {
  uint32_t cols, x_stride, x_row0, ld;
  float in_s;
};
struct NormPush {
  uint32_t n, has_t, has_a, has_wa;
  float scale, eps;
  uint32_t h_stride, t_stride, a_stride, h_row0;
};
struct RopePush {
  uint32_t nh, nkv, hd, ring, rot;
  float eps;
  uint32_t q_stride, kv_stride;
};
struct AttnPush {
  uint32_t nh, nkv, hd, ring, window, splits, q_stride;
  uint32_t rot = 0, kv_stride = 0, has_kn = 0, kv_new = 0;  // attention_rope
  float eps = 0.0f;
};
struct SplitQPush {  // split_f16.comp QROWS 1
  uint32_t cols, x_stride, x_row0, ld, nh, group, m;
};
struct AttnCmPush {  // attention_cm.comp
  uint32_t nh, nkv, hd, ring, window, q_stride, qld;
};
// attention_cm.comp's shared memory: K / V chunk (2 x 64 x 9 x 16), P (2 x 32 x 9 x 16), S
// (32 x 68 x 4), three 32-float arrays.
constexpr uint32_t kAttnCmShared = 18432 + 9216 + 8704 + 384;
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
struct ResidentPush {
  uint32_t nops, grid, spin_limit, warp_rows, prof;
};
// resident.comp: words per recorded operation and the kernels it runs.
constexpr size_t kOpWords = 64;
int ResidentKernel(const char* shader) {
  static const char* kNames[] = {"linear",       "linear_dp", "qkrope", "attention",
                                 "attn_combine", "resnorm",   "ple",    "logits_reduce"};
  for (int i = 0; i < 8; ++i)
    if (std::strcmp(shader, kNames[i]) == 0) return i;
  return -1;
}

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
  // theirs byte-wise in HeadNormInPrologueMatchesNormKernels, cause not found; bench/NOTES.md,
  // seventeenth session)
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

struct CacheSlot {
  Buf k, v;
  int ring = 0, width = 0;
};

class VulkanBackend : public Backend {
 public:
  VulkanBackend(const Model& model, const BackendOptions& options, const VulkanOptions& vopt)
      : model_(model), cfg_(model.text()), vopt_(vopt), options_(options) {
    // (Build plans the caches and the prompt chunk once the device is known: PlanGeometry.)
    Build();
  }

  std::string name() const override { return "vulkan"; }
  BackendCapabilities capabilities() const override { return {true, true, chunk_}; }
  int cached() const override { return window_.cached(); }
  int capacity() const override { return capacity_; }

  void Reset() override {
    window_.Reset();
    history_.clear();
  }

  bool Truncate(int n) override {
    if (!window_.Truncate(n)) {
      history_.clear();
      return false;
    }
    history_.resize(n);
    return true;
  }

  size_t resident_bytes() const override {
    if (!dev_) return 0;
    return dev_->committed_bytes(Pool::kDevice) - weight_bytes_ +
           dev_->committed_bytes(Pool::kHost) + dev_->committed_bytes(Pool::kUpload);
  }

  void Forward(const ForwardRequest& req, ForwardResult* out) override {
    const int n = static_cast<int>(req.tokens.size());
    ValidateForward(req, window_.cached(), capacity_, cfg_.vocab_size);
    if (broken_) Rebuild();
    *out = ForwardResult();
    const CacheWindow entry = window_;
    try {
      for (int begin = 0; begin < n; begin += chunk_) {
        const int m = std::min(chunk_, n - begin);
        RunChunk(req.tokens.subspan(begin, m), begin + m == n, req, out);
      }
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kDevice) {
        broken_ = true;
        window_ = entry;
        history_.resize(entry.cached());
      }
      throw;
    }
  }

  void GetStats(VulkanStats* s) const {
    s->device = dev_ ? dev_->name() : "";
    s->cpu_device = dev_ && dev_->is_cpu();
    s->device_bytes = dev_ ? dev_->committed_bytes(Pool::kDevice) : 0;
    s->weight_bytes = weight_bytes_;
    s->dispatches_per_token = resident_ ? 1 : decode_dispatches_;
    s->barriers_per_token = resident_ ? resident_phases_ : decode_barriers_;
    s->rebuilds = rebuilds_;
    s->resident_workgroups = resident_ ? resident_wgs_ : 0;
    s->resident_ops = resident_ ? resident_ops_ : 0;
    s->resident_fallbacks = resident_fallbacks_;
    s->kernels =
        std::string("prefill linears ") +
        (!coop_        ? ""
         : coop_dense_ ? "linear_cm (matrix units: SRQ, dense) + "
                       : "linear_cm (matrix units: SRQ) + ") +
        (mm_kernel_ == 1 ? "linear_mm" : "linear_mm2") + ", matvec " +
        (int_dot_ ? "packed int dot" : "scalar int") +
        (dev_ && dev_->int_dot_accelerated() ? " (accelerated)" : "") +
        (mv_fast_ && int_dot_ ? ", branch-free multiply" : "") +
        (xq_shared_ ? ", quantized input in shared" : ", quantized input global") + ", lanes_k " +
        std::to_string(lanes_k_) + ", decode splits " + std::to_string(splits_) +
        ", prefill attention " +
        (attn_cm_        ? "matrix units"
         : attn_tiled_   ? "tiled"
         : attn_pf_ == 4 ? "2 queries per subgroup, f32 dots"
         : attn_pf_ == 3 ? "4 (hd <= 256) or 2 queries per subgroup, f32 dots"
         : attn_pf_ == 2 ? "subgroup per query, f32 dots"
         : attn_pf_ == 1 ? "subgroup per query"
                         : "per query") +
        (cnorm_        ? ", norms in the consumer's prologue"
         : fuse_tails_ ? ", norm tails"
                       : "") +
        (mv_wgs_ > 0 ? ", matvec grid <= " + std::to_string(mv_wgs_) : "") +
        (mv_lanes_min_ < dev_->min_subgroup_size()
             ? ", integer rows on >= " + std::to_string(mv_lanes_min_) + " lanes"
             : "") +
        (attn_combine_ ? ", splits merged by the last workgroup" : "") +
        (ple_fuse_ ? ", PLE projection summed by the gate's workgroups" : "") +
        (down_fuse_ && int_dot_ ? ", down projection summed by gate/up's workgroups" : "") +
        (head_norm_ ? ", last norms in the LM head's prologue" : "") +
        (gpu_rows_ ? ", prompt rows decoded on the device" : "") +
        (attn_fused_ ? std::string(", one-token attention fused (") +
                           (attn_fused_rope_ ? "q/k norm + RoPE, " : "") +
                           (attn_fused_mode_ == 0 ? "merged by the last split)" : "merge dispatch)")
                     : "") +
        (resident_ ? ", resident decode (" + std::to_string(resident_wgs_) + " workgroups, " +
                         std::to_string(resident_ops_) + " operations, " +
                         std::to_string(resident_phases_) + " grid barriers)"
                   : ", decode as dispatches" +
                         (resident_note_.empty() ? "" : " (" + resident_note_ + ")"));
  }
  double CopyBandwidth(size_t bytes) { return dev_->CopyBandwidth(bytes, 5); }
  // Every resident weight buffer (each part of every linear).
  std::vector<BufRange> WeightRanges() const {
    std::vector<BufRange> parts;
    auto add = [&](const DevLinear& d) {
      for (const DevLinear::Part& p : d.parts)
        if (p.w.handle >= 0) parts.push_back(p.w.r);
    };
    for (const DevLayer& l : layers_)
      for (const DevLinear* d :
           {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down, &l.ple_gate, &l.ple_proj})
        add(*d);
    add(ple_proj_);
    add(lm_head_);
    return parts;
  }
  // readbw over each range (its 16-byte words, with that many workgroups), the dispatches back to
  // back in one command buffer: bytes read per second, the median of `iters` timed passes after
  // one more; 0 without timestamps.
  double ReadBandwidth(const std::vector<std::pair<BufRange, uint32_t>>& reads, int iters) {
    if (!dev_->has_timestamps() || reads.empty()) return 0.0;
    double bytes = 0;
    for (const auto& [r, wgs] : reads) bytes += static_cast<double>(r.size / 16 * 16);
    VkCommandBuffer cb = head_cmd_;
    std::vector<double> secs;
    for (int it = 0; it < iters + 1; ++it) {
      Begin(cb, false);
      dev_->ResetTimestamps(cb, 2);
      dev_->WriteTimestamp(cb, 0);
      Rec rc{cb};
      for (const auto& [r, wgs] : reads) {
        std::array<BufRange, vk::kBindings> b{};
        b[0] = r;
        b[3] = counter_.r;
        const uint32_t n = static_cast<uint32_t>(std::min<size_t>(r.size / 16, 0xFFFFFFFFu));
        Dispatch(rc, "readbw", {}, b, &n, sizeof(n), std::min<uint32_t>(wgs, (n + 255) / 256), 1, 1,
                 false);
      }
      dev_->WriteTimestamp(cb, 1);
      End(cb);
      dev_->Submit(cb);
      const std::vector<double> ts = dev_->ReadTimestamps(2);
      if (it > 0) secs.push_back((ts[1] - ts[0]) * 1e-9);
    }
    std::sort(secs.begin(), secs.end());
    return bytes / secs[secs.size() / 2];
  }
  // Bytes per second a compute shader reads from every resident weight buffer once (the decode's
  // traffic), median of `iters` timed passes; 0 without timestamps.
  double WeightReadBandwidth(int iters) {
    std::vector<std::pair<BufRange, uint32_t>> reads;
    for (const BufRange& r : WeightRanges()) reads.push_back({r, 2048});
    return ReadBandwidth(reads, iters);
  }
  // The device's streaming read bandwidth: readbw over the largest weight buffer (larger than
  // the caches on the models benchmarked), passes of at least 512 MiB in all per command buffer,
  // the median of `iters`. A floor that does not depend on how the weights are split into buffers
  // (WeightReadBandwidth reads every buffer once, many of them small). 0 without timestamps.
  double StreamReadBandwidth(int iters, size_t* range_bytes) {
    BufRange big{};
    for (const BufRange& r : WeightRanges())
      if (r.size > big.size) big = r;
    if (range_bytes) *range_bytes = big.size;
    if (big.size < 16) return 0.0;
    const int passes = static_cast<int>(std::clamp<size_t>((size_t(512) << 20) / big.size, 1, 64));
    const uint32_t cus = dev_->compute_units();
    const uint32_t wgs = cus > 0 ? std::min<uint32_t>(65535, 8 * cus) : 256;
    return ReadBandwidth(std::vector<std::pair<BufRange, uint32_t>>(passes, {big, wgs}), iters);
  }
  // Empty dispatches (readbw with n = 0): timestamps around `n` of them, median of 5 passes.
  VulkanDispatchCost DispatchCost(int n) {
    VulkanDispatchCost c;
    if (!dev_->has_timestamps() || n <= 0) return c;
    c.wide = std::max<uint32_t>(256, 4 * dev_->compute_units());
    auto time = [&](uint32_t wgs, bool barriers) {
      std::vector<double> us;
      for (int it = 0; it < 6; ++it) {
        VkCommandBuffer cb = head_cmd_;
        Begin(cb, false);
        dev_->ResetTimestamps(cb, 2);
        dev_->WriteTimestamp(cb, 0);
        Rec rc{cb};
        for (int i = 0; i < n; ++i) {
          std::array<BufRange, vk::kBindings> b{};
          b[0] = counter_.r;
          b[3] = counter_.r;
          const uint32_t zero = 0;
          Dispatch(rc, "readbw", {}, b, &zero, sizeof(zero), wgs, 1, 1, false);
          if (barriers) Barrier(rc);
        }
        dev_->WriteTimestamp(cb, 1);
        End(cb);
        dev_->Submit(cb);
        const std::vector<double> ts = dev_->ReadTimestamps(2);
        if (it > 0) us.push_back((ts[1] - ts[0]) * 1e-3 / n);
      }
      std::sort(us.begin(), us.end());
      return us[us.size() / 2];
    };
    c.dependent_us = time(1, true);
    c.dependent_wide_us = time(c.wide, true);
    c.independent_us = time(1, false);
    return c;
  }
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

  DevLinear PlanLinear(const Linear& lin) {
    DevLinear d;
    d.src = &lin;
    if (!lin.data) return d;
    if (IsQuantized(lin.kind) && !lin.row_scale)
      throw Error(ErrorCode::kUnsupported,
                  "vulkan: quantized linear without row scales: " + lin.name);
    d.rows = lin.rows;
    d.cols = lin.cols;
    d.wstride = static_cast<uint32_t>((lin.row_bytes + 15) / 16 * 4);  // rows of whole uvec4
    const size_t row_b = d.wstride * 4u;
    const int per_part = static_cast<int>(
        std::min<size_t>(lin.rows, std::max<size_t>(1, WeightPartLimit() / row_b)));
    for (int r0 = 0; r0 < lin.rows; r0 += per_part) {
      DevLinear::Part p;
      p.row0 = r0;
      p.rows = std::min(per_part, lin.rows - r0);
      p.w = Reserve(Pool::kDevice, row_b * p.rows);
      weight_bytes_ += row_b * p.rows;
      if (IsQuantized(lin.kind)) {
        p.s = Reserve(Pool::kDevice, 4u * p.rows);
        weight_bytes_ += 4u * p.rows;
      }
      d.parts.push_back(p);
    }
    return d;
  }

  void UploadLinear(DevLinear& d) {
    const Linear& lin = *d.src;
    for (DevLinear::Part& p : d.parts) {
      Resolve(p.w);
      const size_t row_b = d.wstride * 4u;
      std::vector<uint8_t> buf(row_b * p.rows, ZeroByte(lin.kind));
      for (int r = 0; r < p.rows; ++r) {
        std::memcpy(&buf[row_b * r], lin.data + (p.row0 + r) * lin.row_bytes, lin.row_bytes);
      }
      dev_->Upload(p.w.r, 0, buf.data(), buf.size());
      if (d.pairs.handle >= 0) {
        Resolve(d.pairs);
        const size_t npair = d.wstride / 2;
        std::vector<uint8_t> pb(buf.size());
        for (int r = 0; r < p.rows; ++r)
          for (size_t c = 0; c < npair; ++c)
            std::memcpy(&pb[(c * p.rows + r) * 8], &buf[row_b * r + c * 8], 8);
        dev_->Upload(d.pairs.r, 0, pb.data(), pb.size());
      }
      if (p.s.handle >= 0) {
        Resolve(p.s);
        dev_->Upload(p.s.r, 0, lin.row_scale + p.row0, 4u * p.rows);
      }
    }
  }

  Buf PlanVec(const std::vector<float>& v) {
    if (v.empty()) return {};
    Buf b = Reserve(Pool::kDevice, 4 * v.size());
    weight_bytes_ += 4 * v.size();
    return b;
  }
  void UploadVec(Buf& b, const std::vector<float>& v) {
    if (b.handle < 0) return;
    Resolve(b);
    dev_->Upload(b.r, 0, v.data(), 4 * v.size());
  }

  static int RotatedCount(const std::vector<float>& inv) {
    int rot = 0;
    for (int i = 0; i < static_cast<int>(inv.size()); ++i) {
      if (inv[i] != 0.0f) rot = i + 1;
    }
    return std::max(rot, 1);
  }
  std::vector<float> RopeTable(const std::vector<float>& inv, int rot) {
    // cos/sin exactly as the reference: f = float(pos) * inv_freq (f32), std::cos/std::sin.
    std::vector<float> t(static_cast<size_t>(capacity_) * rot * 2);
    for (int pos = 0; pos < capacity_; ++pos) {
      for (int k = 0; k < rot; ++k) {
        const float f = static_cast<float>(pos) * inv[k];
        t[(static_cast<size_t>(pos) * rot + k) * 2] = std::cos(f);
        t[(static_cast<size_t>(pos) * rot + k) * 2 + 1] = std::sin(f);
      }
    }
    return t;
  }

  // The longest prompt chunk where neither the caller nor GEMMA_VULKAN_MAX_CHUNK sets it: 1,024
  // tokens for models whose sliding window is at least 512 (E2B) on a discrete GPU with at least
  // 8 GiB of device-local memory (prefill 38,050 against 32,665 tok/s on 1,024 tokens and 32,767
  // against 27,409 on 8,192 on the H200 for +194 MiB at a 2,048-token capacity, bench/NOTES.md
  // twenty-fourth session), else 512.
  static constexpr int kChunkLarge = 1024, kChunkSmall = 512;
  static constexpr size_t kChunkLargeMemory = size_t(8) << 30;

  // Cache geometry and prompt chunk, once (the first Build: a rebuild after a failure keeps them).
  // The chunk is at most the sliding rings' slack (a chunk's keys must not overwrite keys its
  // first token still sees). Where the caller leaves the slack to the backend (0: one window) and
  // the chunk is the large default or VulkanOptions::max_chunk, the rings hold window + chunk.
  void PlanGeometry() {
    const bool large = vopt_.max_chunk <= 0 && !dev_->is_cpu() && dev_->is_discrete() &&
                       dev_->device_local_bytes() >= kChunkLargeMemory &&
                       cfg_.sliding_window >= kChunkSmall;
    int cap = vopt_.max_chunk > 0 ? vopt_.max_chunk : large ? kChunkLarge : kChunkSmall;
    cap = std::max(8, EnvInt("GEMMA_VULKAN_MAX_CHUNK", cap));
    BackendOptions o = options_;
    if (o.slack <= 0 && (large || vopt_.max_chunk > 0))
      o.slack = std::max(cfg_.sliding_window, cap);
    const CacheGeometry geo = PlanCacheGeometry(cfg_, o);
    capacity_ = geo.capacity;
    slack_ = geo.slack;
    sliding_ring_ = geo.ring;
    window_ = CacheWindow(cfg_.sliding_window, sliding_ring_);
    chunk_ = std::min(std::max(1, slack_), cap);
    history_.reserve(capacity_);  // no per-token allocations on the decode path
    planned_ = true;
  }

  void Build() {
    dev_.reset();
    for (auto& tier : decode_cmd_) tier.fill(VK_NULL_HANDLE);
    prefill_cmd_ = VK_NULL_HANDLE;
    prompt_cmds_.clear();  // (their command buffers went with the device)
    weight_bytes_ = 0;
    vk::DeviceOptions dopt;
    dopt.index = vopt_.device_index;
    dopt.skip_cpu = vopt_.skip_cpu_devices;
    dev_ = std::make_unique<Device>(dopt);
    if (!planned_) PlanGeometry();
    lanes_ = std::max<uint32_t>(32, dev_->subgroup_size());
    // Kernel-variant knobs for comparison runs (the defaults are the measured best).
    // linear_mm2 is opt-in: its spec-constant build ran 2x slower than linear_mm on the H200 and
    // its unrolled build has not completed a run there (bench/NOTES.md, Vulkan, 2026-11-29 v5).
    mm_kernel_ = EnvInt("GEMMA_VULKAN_MM", 1);
    lanes_k_ = static_cast<uint32_t>(std::max(1, EnvInt("GEMMA_VULKAN_LANES_K", 6)));
    // The tiled prefill attention measured 75 ms per 512-token chunk on the H200 against 28 ms for
    // the per-query kernel: off unless asked for.
    attn_tiled_ = EnvInt("GEMMA_VULKAN_ATTN_TILED", 0) != 0;
    // Subgroup-per-query prefill attention (32-wide subgroups only): 1 double, 2 f32 dot products,
    // 3 / 4: four (hd <= 256) / two queries per subgroup sharing each K/V load (f32 dots,
    // hd % 4 == 0); 4 measured fastest on the H200 (bench/NOTES.md).
    attn_pf_ = dev_->subgroup_size() == 32 && !attn_tiled_
                   ? std::clamp(EnvInt("GEMMA_VULKAN_ATTN_PF", 4), 0, 4)
                   : 0;
    fuse_tails_ = EnvInt("GEMMA_VULKAN_TAILS", 1) != 0;
    // Residual norms in the next linear's prologue (linear.comp PRO) instead of the last
    // workgroup's tail: with the capped matvec grid measured 3.22 against 3.69 ms per token on the
    // H200 (bench/NOTES.md, fifth session). Off by default where resident decode is asked for
    // (the resident kernel runs the tails).
    const bool resident_asked = vopt_.resident_workgroups > 0 ||
                                (vopt_.resident_workgroups < 0 &&
                                 EnvInt("GEMMA_VULKAN_RESIDENT_WGS", 0) != 0);
    cnorm_ = EnvInt("GEMMA_VULKAN_CNORM", resident_asked ? 0 : 1) != 0;
    // Opt-in: q/k norm + RoPE in the decode attention (one dispatch and one barrier fewer per
    // layer); measured slower on the H200 (3.83 against 3.67 ms per token; ninth session 2.85
    // against 2.50).
    fuse_rope_ = EnvInt("GEMMA_VULKAN_FUSE_ROPE", 0) != 0;
    const int fill_threads = std::clamp(
        EnvInt("GEMMA_VULKAN_FILL_THREADS", static_cast<int>(std::thread::hardware_concurrency())),
        1, 8);
    if (!fill_pool_ || fill_pool_->size() != fill_threads)
      fill_pool_ = fill_threads > 1 ? std::make_unique<ThreadPool>(fill_threads) : nullptr;
    xq_shared_ = EnvInt("GEMMA_VULKAN_XQ_SHARED", 1) != 0;
    // One-token linears with a capped grid (each workgroup loops over row blocks): N workgroups,
    // -k for k per compute unit (none where the device does not say), 0 = a workgroup per block.
    // -4 measured best on the H200 with the consumer norms (-3: 3.25, -6: 3.41, -8: 3.38 ms).
    mv_wgs_ = EnvInt("GEMMA_VULKAN_MV_WGS", -4);
    if (mv_wgs_ < 0) mv_wgs_ = -mv_wgs_ * static_cast<int>(dev_->compute_units());
    // Opt-in: the decode attention's last split workgroup merges the splits (one dispatch fewer
    // per layer); slower on the H200 before the sixth session's merge (3.97 against 3.68 ms per
    // token), then equal (2.80 against 2.80-2.81), slower with the ninth session's kernels (2.79
    // against 2.50-2.51; bench/NOTES.md).
    attn_combine_ = EnvInt("GEMMA_VULKAN_ATTN_COMBINE", 0) != 0;
    // One-token decode attention as attn_fused.comp (q/k norm + RoPE and the key splits in one
    // dispatch, f32 dot products; 2.15-2.18 against 2.44-2.47 ms per token for the three kernels
    // on the H200, bench/NOTES.md tenth session): GEMMA_VULKAN_ATTN_FUSED=0 restores qkrope +
    // attention + attn_combine; _ROPE=0 keeps qkrope's dispatch; _MODE=0 (default) merges the
    // splits in the last split's workgroup, 1 in a second dispatch over (heads x dim blocks)
    // (MODE 0 with its arrival as one acquire-release atomic and the partials read through the
    // read-only alias, FENCE + NC_MERGE below: 2.08-2.13 against 2.15-2.17 ms per token, 2.29
    // against 2.30 at 4,096 context on the H200; with coherent loads 2.18-2.26 against 2.15,
    // bench/NOTES.md eleventh session); GEMMA_VULKAN_ATTN_KW sets the keys per row group and
    // block. Off where resident decode is asked for (its kernel runs the three).
    attn_fused_ = EnvInt("GEMMA_VULKAN_ATTN_FUSED", resident_asked ? 0 : 1) != 0;
    attn_fused_rope_ = EnvInt("GEMMA_VULKAN_ATTN_FUSED_ROPE", 1) != 0;
    attn_fused_mode_ = EnvInt("GEMMA_VULKAN_ATTN_FUSED_MODE", 0) != 0 ? 1u : 0u;
    attn_kw_ = static_cast<uint32_t>(std::clamp(EnvInt("GEMMA_VULKAN_ATTN_KW", 0), 0, 8));
    // Key splits of the fused attention: one workgroup per compute unit over the heads (a single
    // wave, its ~140-180 registers allow one per unit), the decode splits where they are set or
    // on CPU devices; GEMMA_VULKAN_ATTN_FUSED_SPLITS overrides.
    fused_splits_ = EnvInt("GEMMA_VULKAN_ATTN_FUSED_SPLITS", 0);
    splits_set_ = vopt_.decode_splits > 0 || std::getenv("GEMMA_VULKAN_SPLITS") != nullptr;
    // The merge's partials per round (tests: fewer, so that the fixtures' contexts take several).
    attn_mb_ = static_cast<uint32_t>(std::clamp(EnvInt("GEMMA_VULKAN_ATTN_MB", 16), 1, 16));
    // 16-byte cache loads where a lane holds a multiple of 8 dims (VEC); lanes per key row
    // capped (tests: so that the fixtures' small heads take VEC).
    attn_vec_ = EnvInt("GEMMA_VULKAN_ATTN_VEC", 1) != 0;
    attn_rl_max_ = static_cast<uint32_t>(std::clamp(EnvInt("GEMMA_VULKAN_ATTN_RL", 64), 1, 64));
    // MODE 0's arrival count as one acquire-release atomic (FENCE) instead of full barriers, and
    // the last split's reads of the partials through the read-only alias (NC_MERGE) instead of
    // the coherent binding (the merge 4.5 against 5.9 us in the probes).
    attn_fence_ = EnvInt("GEMMA_VULKAN_ATTN_FENCE", 1) != 0;
    attn_nc_merge_ = EnvInt("GEMMA_VULKAN_ATTN_NC_MERGE", 1) != 0;
    // The next key block's V rows loaded with its K rows (attn_fused VPF): 1.796 against 1.890 ms
    // per token at 4,096 context on the H200 (the attention 545 against 594 us timestamped), equal
    // at 512 (1.696 / 1.703 against 1.692 / 1.699; bench/NOTES.md, fifteenth session).
    attn_vpf_ = EnvInt("GEMMA_VULKAN_ATTN_VPF", 1) != 0;
    attn_fused_dbg_ = static_cast<uint32_t>(EnvInt("GEMMA_VULKAN_ATTN_FUSED_DBG", 0));
    // Two query heads of a K/V head per attn_fused workgroup in the full-attention layers from
    // position attn_hpw_from_ on (each cache row loaded serves both: half the L2 reads, twice
    // the splits): 2.07 against 2.26 ms per token at 32K context on the H200, slower at 512 and
    // 4,096 (bench/NOTES.md, twenty-first session). One-token steps from that position on run
    // a second pre-recorded command buffer.
    attn_hpw_ = static_cast<uint32_t>(std::clamp(EnvInt("GEMMA_VULKAN_ATTN_HPW", 2), 1, 2));
    attn_hpw_from_ = std::max(0, EnvInt("GEMMA_VULKAN_ATTN_HPW_FROM", 12288));
    extra_dispatches_ = std::clamp(EnvInt("GEMMA_VULKAN_EXTRA_DISPATCHES", 0), 0, 16);
    // One-token steps: the PLE gate's workgroups add the PLE projection's products (int8 SRQ:
    // integer sums, exact in any order) into per-layer sums that the next layer's prologue scales
    // (linear.comp EPI 4 / PRO_T): one dispatch and one barrier fewer per layer.
    ple_fuse_ = EnvInt("GEMMA_VULKAN_PLE_FUSE", 1) != 0;
    // ... with blocks of 4 rows (kWG / 4 lanes per row: twice the workgroups of the general
    // choice for E2B's gate, one projection word per row and block): 2.02-2.04 against 2.08-2.20
    // ms per token on the H200 (bench/NOTES.md, eleventh session); 0: the general choice.
    ple_lanes_ = static_cast<uint32_t>(
        std::clamp(EnvInt("GEMMA_VULKAN_PLE_LANES", static_cast<int>(kWG / 4)), 0, 256));
    if (ple_lanes_ > 0) ple_lanes_ = std::bit_floor(ple_lanes_);
    // One-token steps: gate/up's workgroups also multiply the down projection's columns of their
    // rows and add the int32 sums atomically (linear.comp DJ / PRO_T): no down dispatch.
    down_fuse_ = EnvInt("GEMMA_VULKAN_DOWN_FUSE", 1) != 0;
    // ... gate/up's workgroup cap there (-k: k per compute unit; 0: the matvec cap): fewer
    // workgroups, fewer atomics (each adds the sums of all its blocks once).
    down_fuse_wgs_ = EnvInt("GEMMA_VULKAN_DOWN_FUSE_WGS", 0);
    // ... the down projection's words loaded after gate/up's multiply instead of before it, read
    // from a pair-major copy of the down weights (coalesced: a block's words of all rows
    // contiguous; +157 MiB on E2B) instead of 8 bytes per row from the row-major matrix, and the
    // sums in 4 copies (the workgroups' atomics spread over more addresses; the consumer adds
    // the copies): 1.865 / 1.878 against 2.024-2.178 ms per token without the fusion, 1.961 /
    // 1.966 without the pair-major copy (8 copies); 4 copies 1.851 / 1.853 against 1.863-1.978
    // for 8 and 1.867-1.896 for 16 (bench/NOTES.md, thirteenth session).
    down_fuse_late_ = EnvInt("GEMMA_VULKAN_DOWN_FUSE_LATE", 1) != 0;
    down_fuse_pairs_ = EnvInt("GEMMA_VULKAN_DOWN_FUSE_PAIRS", 1) != 0;
    // One-token decode steps: the last layer's residual norm and the final norm in the LM head's
    // prologue (its grid capped), not two norm dispatches and the residual's copy: the norms 8.7
    // against 23.0 us per token, the head 74.5 against 71.7 (bench/NOTES.md, thirteenth session).
    head_norm_ = EnvInt("GEMMA_VULKAN_HEAD_NORM", 1) != 0;
    // One-token FAST linears whose workgroups loop over several row blocks (the LM head): the
    // next block's weight vectors loaded before this block's multiply (linear.comp PFB): the head
    // 64.5 / 65.0 against 74.0 / 73.0 us per token (bench/NOTES.md, thirteenth session).
    mv_prefetch_block_ = EnvInt("GEMMA_VULKAN_MV_PREFETCH_BLOCK", 1) != 0;
    // ... and the first block's vectors at the kernel's start where a grid has at most this many
    // workgroups per compute unit (linear.comp PFE; set bits: 1 linears without a prologue, 2 the
    // PLE gate, 4 other prologue linears): 1.594-1.596 against 1.607-1.612 ms per token.
    mv_prefetch_early_ =
        static_cast<uint32_t>(std::max(0, EnvInt("GEMMA_VULKAN_MV_PREFETCH_EARLY", 2)));
    mv_prefetch_early_set_ =
        static_cast<uint32_t>(std::clamp(EnvInt("GEMMA_VULKAN_MV_PREFETCH_EARLY_SET", 7), 0, 7));
    // ... issued after a norm prologue's operand loads, which otherwise queue behind them
    // (PFE_LATE; with the PLE gate in the set: 1.567-1.576 against 1.594-1.597 ms per token on the
    // H200, bench/NOTES.md eighteenth session).
    mv_prefetch_early_late_ = EnvInt("GEMMA_VULKAN_MV_PREFETCH_EARLY_LATE", 1) != 0;
    // ... and the dense one-token linears with a staged input (FXW): the bf16 PLE model
    // projection.
    dense_prefetch_ = EnvInt("GEMMA_VULKAN_DENSE_PREFETCH", 1) != 0;
    // The head's argmax / pick: one logits_reduce dispatch whose last block per row merges
    // (LAST); 0: a second dispatch merges.
    reduce_last_ = EnvInt("GEMMA_VULKAN_REDUCE_LAST", 1) != 0;
    // (timing only) GEMMA_VULKAN_HEAD_NOCAP=1: the LM head without its softcap (wrong logits).
    head_nocap_ = EnvInt("GEMMA_VULKAN_HEAD_NOCAP", 0) != 0;
    down_fuse_copies_ =
        static_cast<uint32_t>(std::clamp(EnvInt("GEMMA_VULKAN_DOWN_FUSE_COPIES", 4), 1, 16));
    if (down_fuse_wgs_ < 0)
      down_fuse_wgs_ = -down_fuse_wgs_ * static_cast<int>(dev_->compute_units());
    // The down projection's quantized input written in its packed-dot order by gate/up (the
    // down projection stages plain words instead of four byte gathers per word): 2.60 / 2.57
    // against 2.65 / 2.62 ms per token on the H200 (bench/NOTES.md, seventh session).
    xq_perm_ = EnvInt("GEMMA_VULKAN_XQ_PERM", 1) != 0;
    // 4 (rows of 1,536 int2 / int4 columns on 8 / 16 lanes): 2.91 against 3.30 ms per token on the
    // H200 in one run (bench/NOTES.md, fifth session); 32 = a subgroup or more per row.
    mv_lanes_min_ = static_cast<uint32_t>(std::clamp(EnvInt("GEMMA_VULKAN_MV_LANES", 4), 4, 256));
    mv_lanes_min_ = std::bit_floor(mv_lanes_min_);
    mv_lanes_vec_ =
        static_cast<uint32_t>(std::clamp(EnvInt("GEMMA_VULKAN_MV_LANES_VEC", 3), 1, 64));
    mv_max_rows_ = static_cast<uint32_t>(std::max(1, EnvInt("GEMMA_VULKAN_MV_MAX_ROWS", 32768)));
    // One-token dense (bf16 / f16) rows of at most 8 x DENSE_LANES 16-byte vectors (E2B's 1,536-
    // and 2,048-column linears): this many lanes per row (a row's sum within one subgroup: no
    // shared reduction or barrier per block) and at most DENSE_WGS workgroups (-k: k per compute
    // unit; fewer copies of the norm prologue). bench/NOTES.md, twenty-second session.
    dense_lanes_ = static_cast<uint32_t>(std::max(0, EnvInt("GEMMA_VULKAN_DENSE_LANES", 32)));
    dense_wgs_ = EnvInt("GEMMA_VULKAN_DENSE_WGS", -2);
    if (dense_wgs_ < 0) dense_wgs_ = -dense_wgs_ * static_cast<int>(dev_->compute_units());
    // Opt-in: the longer matrices (the LM head) capped at their own count (-k: k per compute
    // unit); 0 = a workgroup per row block.
    mv_wgs_long_ = EnvInt("GEMMA_VULKAN_MV_WGS_LONG", 0);
    if (mv_wgs_long_ < 0) mv_wgs_long_ = -mv_wgs_long_ * static_cast<int>(dev_->compute_units());
    // Opt-in: the norm prologue packs its quantized bytes with shared-memory atomics (the
    // previous default) instead of subgroup shuffles.
    pack_atomic_ = EnvInt("GEMMA_VULKAN_PACK_ATOMIC", 0) != 0;
    // Opt-in: the prologue's RMS factors evaluated by every invocation (one barrier fewer each).
    rms_all_ = EnvInt("GEMMA_VULKAN_RMS_ALL", 0) != 0;
    // The prologues' RMS factors by Newton steps instead of a double division and square root
    // (linear.comp RMS_FAST; 1.531 / 1.539 against 1.558 / 1.554 ms on the H200).
    rms_fast_ = EnvInt("GEMMA_VULKAN_RMS_FAST", 1) != 0;
    // gate/up's input quantized once where both sets' input scales are equal (SHARE_X; 1.516 /
    // 1.523 against 1.537 / 1.537 ms on the synthetic checkpoint, whose scales are equal).
    share_x_ = EnvInt("GEMMA_VULKAN_SHARE_X", 1) != 0;
    // Measurement only (wrong results): the one-token multiply loop without its compute (1), its
    // weight loads (2) or both (3); + 4: packed dot products replaced by xors, + 8: shared input
    // words by register values (linear.comp DBG).
    mv_dbg_ = static_cast<uint32_t>(std::clamp(EnvInt("GEMMA_VULKAN_MV_DBG", 0), 0, 15));
    dense_vec4_ = EnvInt("GEMMA_VULKAN_DENSE_VEC4", 1) != 0;
    int_dot_ = dev_->int_dot() && EnvInt("GEMMA_VULKAN_DP", 1) != 0;
    mv_fast_ = EnvInt("GEMMA_VULKAN_MV_FAST", 1) != 0;
    // One-token gate/up with both weight sets' vectors loaded in one loop (linear.comp DUAL_LOOP):
    // 1.709 / 1.718 against 1.732 / 1.732 ms per token on the H200, gate/up 196-199 against
    // 212-217 us per token on the int4 layers, 324-329 against 333-337 on the int2 ones
    // (bench/NOTES.md, fifteenth session); 0: a loop per weight set.
    mv_dual_loop_ = static_cast<uint32_t>(std::clamp(EnvInt("GEMMA_VULKAN_MV_DUAL_LOOP", 1), 0, 4));
    // ... and single weight sets with two of a lane's vectors loaded per iteration (PAIR_LOOP):
    // 1.675 / 1.680 against 1.703 / 1.698 ms per token on the H200, q 222-223 against 236-238 us
    // per token, o 158-159 against 169-173 (bench/NOTES.md, fifteenth session). The value is the
    // vectors in flight (1-4; DUAL_LOOP's per set), 0 / 1 a vector an iteration.
    mv_pair_loop_ = static_cast<uint32_t>(std::clamp(EnvInt("GEMMA_VULKAN_MV_PAIR_LOOP", 2), 0, 4));
    // The FAST int2 / int4 linears' shared input chunk-major (linear.comp XCM): a row's lanes read
    // consecutive 16-byte chunks instead of chunks 64 (int2) / 32 (int4) bytes apart. Bits: 1 int2,
    // 2 int4. H200: 1.652 / 1.659 against 1.696 / 1.696 ms per token with both, int2 gate/up 285
    // against 325 us per token, the LM head 45 against 65; int4 alone gained nothing (1.660 / 1.660
    // with int2 only against 1.664 / 1.665 with both; bench/NOTES.md, sixteenth session).
    mv_xcm_ = static_cast<uint32_t>(std::clamp(EnvInt("GEMMA_VULKAN_MV_XCM", 1), 0, 3));
    // Measurement only (wrong results): the PLE gate's (1) / gate/up's (2) integer atomics for the
    // upper half of the rows skipped (linear.comp ADBG): what the atomics cost their phase and the
    // prologue reading their sums.
    atomic_dbg_ = static_cast<uint32_t>(std::clamp(EnvInt("GEMMA_VULKAN_ATOMIC_DBG", 0), 0, 3));
    // The norm prologues' columns 8 per invocation on 16-byte operand loads, whole words packed in
    // registers (linear.comp PRO_VEC): 1.609 / 1.611 against 1.665 / 1.663 ms per token.
    pro_vec_ = EnvInt("GEMMA_VULKAN_PRO_VEC", 1) != 0;
    // (investigation only) the LM head's prologue on PRO_VEC too:
    // HeadNormInPrologueMatchesNormKernels found its logits differing on the H200 after argmax
    // steps (bench/NOTES.md, seventeenth and eighteenth sessions).
    head_pro_vec_ = EnvInt("GEMMA_VULKAN_HEAD_PRO_VEC", 0) != 0;
    coop_ = dev_->coop_matrix() && EnvInt("GEMMA_VULKAN_CM", 1) != 0;
    // Opt-in: decode attention as a subgroup per (head, key split) (32-wide subgroups only).
    attn_dec_ = dev_->subgroup_size() == 32 && EnvInt("GEMMA_VULKAN_ATTN_DEC", 0) != 0;
    // GEMMA_VULKAN_BARRIER: the one-token layer loop's barriers: 1 (default) compute stage only
    // (2.150-2.152 against 2.161-2.192 ms per token on the H200; 287 barriers between empty
    // kernels 0.58 against 0.67 ms: bench/NOTES.md, eleventh session), 0 compute and transfer
    // stages (as every other barrier), 2 execution only (timing only: results may be wrong).
    switch (EnvInt("GEMMA_VULKAN_BARRIER", 1)) {
      case 1:
        light_barrier_ = vk::Device::BarrierKind::kCompute;
        break;
      case 2:
        light_barrier_ = vk::Device::BarrierKind::kExecOnly;
        break;
      default:
        light_barrier_ = vk::Device::BarrierKind::kFull;
    }
    empty_mode_ = EnvInt("GEMMA_VULKAN_EMPTY", 0);
    flag_every_ = EnvInt("GEMMA_VULKAN_FLAG_EVERY", 0);
    flag_split_ = static_cast<uint32_t>(std::clamp(EnvInt("GEMMA_VULKAN_FLAG_SPLIT", 1), 1, 16));
    min_vecs_ = static_cast<uint32_t>(std::clamp(EnvInt("GEMMA_VULKAN_EMPTY_VECS", 3), 0, 4));
    min_red_ = static_cast<uint32_t>(std::clamp(EnvInt("GEMMA_VULKAN_EMPTY_RED", 0), 0, 8));
    min_atoms_ = static_cast<uint32_t>(std::clamp(EnvInt("GEMMA_VULKAN_EMPTY_ATOMS", 0), 0, 16));
    min_inv_ = static_cast<uint32_t>(std::clamp(EnvInt("GEMMA_VULKAN_EMPTY_INV", 0), 0, 4));
    probe_twice_ = EnvInt("GEMMA_BENCH_PROBE_TWICE", 0);
    step_times_ = EnvInt("GEMMA_VULKAN_STEP_TIMES", 0) != 0 && dev_->has_timestamps();
    // One-token steps submitted before their inputs are written: the command buffer waits on a
    // host event before its first copy (the step's position and embedding row) and on a second
    // before the PLE rows' and mask's copies (after the first phase), so vkQueueSubmit and the
    // row decode overlap the GPU instead of preceding it; 0: fill, then submit.
    // 2 (tests): the buffers record the waits, the inputs are written before the submission and the
    // events set then, as the resident path's fallback submits them.
    early_submit_ = std::clamp(EnvInt("GEMMA_VULKAN_EARLY_SUBMIT", 1), 0, 2);
    ev_in_ = dev_->CreateEvent();
    ev_side_ = dev_->CreateEvent();
    probe_all_ = EnvInt("GEMMA_BENCH_PROBE_ALL", 0) != 0;
    empty_code_ = static_cast<uint32_t>(std::clamp(EnvInt("GEMMA_VULKAN_EMPTY_CODE", 8), 1, 16));
    attn_dbg_ = EnvInt("GEMMA_VULKAN_ATTN_DBG", 0);
    // Whole 32-key blocks per decode split, 64 splits: 2.94 against 3.06 ms per token at 4,096
    // context on the H200, equal at 512 (bench/NOTES.md, seventh session). Off on CPU devices and
    // where resident decode is asked for (its attention has equal splits).
    splits_adapt_ =
        EnvInt("GEMMA_VULKAN_SPLITS_ADAPT", dev_->is_cpu() || resident_asked ? 0 : 1) != 0;
    if (const char* e = std::getenv("GEMMA_VULKAN_EMPTY_ONLY")) {
      std::string list = e;
      for (size_t a = 0; a <= list.size();) {
        const size_t b = std::min(list.find(',', a), list.size());
        if (b > a) {
          empty_only_.push_back(list.substr(a, b - a));
          for (char& c : empty_only_.back()) c = c == '+' ? ' ' : c;  // '+' stands for a space
        }
        a = b + 1;
      }
    }
    if (const char* e = std::getenv("GEMMA_VULKAN_EMPTY_SHM")) {
      std::string list = e;
      for (size_t a = 0; a <= list.size();) {
        const size_t b = std::min(list.find(',', a), list.size());
        const size_t eq = list.find('=', a);
        if (eq < b)
          empty_shm_.emplace_back(list.substr(a, eq - a),
                                  static_cast<uint32_t>(std::atoi(list.c_str() + eq + 1)));
        a = b + 1;
      }
    }
    // Split K on matrix units: 0 off, 1 where the output tiles are few, 2 every K tile (tests).
    // Prompt chunks run the trailing KV-shared layers only for the returned position (exact).
    skip_tail_ = EnvInt("GEMMA_VULKAN_SKIP_TAIL", 1) != 0;
    coop_splitk_ = std::clamp(EnvInt("GEMMA_VULKAN_CM_SPLITK", 1), 0, 2);
    // Rows per workgroup of the single-set matrix-unit kernel: 64, or 128 (linear_cm128, measured
    // slower on the H200: 7,292 against 8,091 tok/s prefill).
    coop_bm_ = EnvInt("GEMMA_VULKAN_CM_BM", 64) == 128 ? 128 : 64;
    // Dense (bf16 / f16) prefill linears on matrix units too (hi + lo f16 inputs, f32 sums), where
    // the single-set kernel's staging fits: 64 weight rows and 2 x 128 token rows of 9 16-byte
    // vectors (45 KiB; the SRQ forms need 27-36).
    coop_dense_ = EnvInt("GEMMA_VULKAN_CM_DENSE", 1) != 0 &&
                  dev_->max_shared_bytes() >= (64 + 2 * 128) * 9 * 16;
    // Prefill attention on matrix units (attention_cm.comp), where they run the linears, the
    // subgroups are 32 wide (8 per workgroup) and its staging fits: K / V chunks, P and S (36 KiB).
    // On the H200 a 512-token chunk's attention took 1.45 ms against 7.3 (attention_pfq), the
    // 1,024-token prefill 31.6 against 44.6 ms, 8,192 tokens 28,900 against 11,600 tok/s
    // (bench/NOTES.md, twenty-fourth session).
    // The K rows are split into f16 terms unscaled: every layer's largest K norm weight times
    // sqrt(512) (a normalized row's largest magnitude at the largest head dim the kernel takes)
    // must stay well inside f16 (V's norm has no weights).
    attn_cm_ = coop_ && !attn_tiled_ && dev_->subgroup_size() == 32 &&
               dev_->max_shared_bytes() >= kAttnCmShared && EnvInt("GEMMA_VULKAN_ATTN_CM", 1) != 0;
    // (ACC 1: the most accurate of the three forms on the H200 at the speed of the fastest; the
    // kernel test's worst rows 6.9e-5 / 6.7e-5 against 9.9e-5 / 1.0e-4 with 0 and 1.0e-4 / 1.3e-4
    // with 2, which took 1.6x the time.)
    attn_cm_acc_ = static_cast<uint32_t>(std::clamp(EnvInt("GEMMA_VULKAN_ATTN_CM_ACC", 1), 0, 2));
    // (ROT 1: 8,192- / 32,768-token prompts 28,400 / 17,400 against 27,800 / 17,000 tok/s, a
    // 512-token chunk's attention 990 + 474 against 1,006 + 483 us; h200_v239.)
    attn_cm_rot_ = EnvInt("GEMMA_VULKAN_ATTN_CM_ROT", 1) != 0 ? 1u : 0u;
    for (const LayerWeights& w : model_.layer_weights()) {
      float kmax = 1.0f;  // layers without K norm weights (KV-shared layers read their owner's)
      for (float v : w.k_norm) kmax = std::max(kmax, std::fabs(v));
      if (!(kmax * std::sqrt(512.0f) < 16384.0f)) attn_cm_ = false;
    }
    // Resident decode (resident.comp: one dispatch of persistent workgroups per token) is opt-in:
    // on the H200 it measured slower than the dispatch path (bench/NOTES.md). Workgroups: the
    // option, else GEMMA_VULKAN_RESIDENT_WGS (-1: 2 per compute unit; 4 are not all resident).
    // Not on CPU devices: lavapipe computed wrong values once a workgroup spun at a grid barrier
    // (bench/NOTES.md).
    resident_note_.clear();
    resident_wgs_ = vopt_.resident_workgroups >= 0 ? vopt_.resident_workgroups
                                                   : EnvInt("GEMMA_VULKAN_RESIDENT_WGS", 0);
    if (resident_wgs_ < 0) resident_wgs_ = 2 * static_cast<int>(dev_->compute_units());
    if (resident_wgs_ > 0 && dev_->is_cpu()) {
      resident_note_ = "resident decode not on CPU devices";
      resident_wgs_ = 0;
    }
    if (resident_wgs_ > 0 && attn_dec_) resident_note_ = "resident decode not with attention_dec";
    if (resident_wgs_ > 0 && (cnorm_ || fuse_rope_))
      resident_note_ = "resident decode not with GEMMA_VULKAN_CNORM or GEMMA_VULKAN_FUSE_ROPE";
    resident_ = resident_wgs_ > 0 && !attn_dec_ && !cnorm_ && !fuse_rope_;
    resident_profile_ = resident_ && int_dot_ && dev_->device_clock() &&
                        EnvInt("GEMMA_VULKAN_RESIDENT_PROFILE", 0) != 0;
    prof_sum_.clear();
    prof_total_ = 0;
    prof_steps_ = 0;
    // Polls of a grid barrier before the step gives up (seconds).
    resident_spin_ =
        static_cast<uint32_t>(std::max(1, EnvInt("GEMMA_VULKAN_RESIDENT_SPIN", 1 << 22)));
    resident_cmd_.fill(VK_NULL_HANDLE);
    ops_buf_.fill(Buf{});
    splits_ = vopt_.decode_splits > 0
                  ? vopt_.decode_splits
                  : EnvInt("GEMMA_VULKAN_SPLITS", dev_->is_cpu() ? 2 : splits_adapt_ ? 64 : 16);

    const int H = cfg_.hidden_size, L = cfg_.num_layers, P = cfg_.hidden_size_per_layer_input;
    const int V = cfg_.vocab_size, C = chunk_;
    int qw = 0, kvw = 0, imax = 0, hdmax = 0, nh = 0;
    for (const LayerPlan& p : model_.layers()) {
      qw = std::max(qw, p.num_heads * p.head_dim);
      kvw = std::max(kvw, p.num_kv_heads * p.head_dim);
      imax = std::max(imax, p.intermediate);
      hdmax = std::max(hdmax, p.head_dim);
      nh = std::max(nh, p.num_heads);
    }
    if (hdmax > 512) throw Error(ErrorCode::kUnsupported, "vulkan: head_dim above 512");

    // Weights.
    layers_.assign(L, {});
    for (int l = 0; l < L; ++l) {
      const LayerWeights& w = model_.layer_weights()[l];
      const LayerPlan& p = model_.layers()[l];
      DevLayer& d = layers_[l];
      d.q = PlanLinear(w.q);
      if (!p.kv_shared) {
        d.k = PlanLinear(w.k);
        d.v = PlanLinear(w.v);
      }
      d.o = PlanLinear(w.o);
      d.gate = PlanLinear(w.gate);
      d.up = PlanLinear(w.up);
      d.down = PlanLinear(w.down);
      if (down_fuse_ && down_fuse_pairs_ && d.down.parts.size() == 1 && w.down.in_scale > 0.0f &&
          (w.down.kind == WeightKind::kQ2 || w.down.kind == WeightKind::kQ4)) {
        d.down.pairs = Reserve(Pool::kDevice, size_t(d.down.wstride) * 4 * d.down.rows);
        weight_bytes_ += size_t(d.down.wstride) * 4 * d.down.rows;
      }
      if (P > 0) {
        d.ple_gate = PlanLinear(w.ple_gate);
        d.ple_proj = PlanLinear(w.ple_proj);
        d.post_ple_norm = PlanVec(w.post_ple_norm);
      }
      d.input_norm = PlanVec(w.input_norm);
      d.post_attn_norm = PlanVec(w.post_attn_norm);
      d.pre_ffn_norm = PlanVec(w.pre_ffn_norm);
      d.post_ffn_norm = PlanVec(w.post_ffn_norm);
      d.q_norm = PlanVec(w.q_norm);
      d.k_norm = PlanVec(w.k_norm);
    }
    if (P > 0) {
      ple_proj_ = PlanLinear(model_.ple_model_proj());
      ple_norm_ = PlanVec(model_.ple_proj_norm());
    }
    final_norm_ = PlanVec(model_.final_norm());
    lm_head_ = PlanLinear(model_.lm_head());

    // RoPE tables.
    inv_s_ = ref::RopeInvFreq(cfg_.rope_sliding, cfg_.head_dim);
    inv_f_ = ref::RopeInvFreq(cfg_.rope_full,
                              cfg_.global_head_dim > 0 ? cfg_.global_head_dim : cfg_.head_dim);
    rot_s_ = RotatedCount(inv_s_);
    rot_f_ = RotatedCount(inv_f_);
    rope_s_ = Reserve(Pool::kDevice, size_t(capacity_) * rot_s_ * 8);
    rope_f_ = Reserve(Pool::kDevice, size_t(capacity_) * rot_f_ * 8);

    // Caches.
    slots_.assign(model_.num_caches(), {});
    for (const LayerPlan& p : model_.layers()) {
      if (p.cache_slot < 0) continue;
      CacheSlot& s = slots_[p.cache_slot];
      s.width = p.num_kv_heads * p.head_dim;
      s.ring = p.window > 0 ? sliding_ring_ : capacity_;
      const size_t bytes = size_t(s.ring) * s.width * 4;
      if (bytes > dev_->max_range()) {
        throw Error(ErrorCode::kCapacity,
                    "vulkan: a K/V cache of " + std::to_string(bytes >> 20) +
                        " MiB exceeds the device's storage-buffer range; lower the capacity");
      }
      s.k = Reserve(Pool::kDevice, bytes);
      s.v = Reserve(Pool::kDevice, bytes);
    }

    // Activations.
    head_rows_ = static_cast<int>(
        std::clamp<size_t>(std::min<size_t>(64u << 20, dev_->max_range()) / (size_t(V) * 4), 1, C));
    const int S = std::max(splits_, 1);
    auto F = [&](size_t floats) { return Reserve(Pool::kDevice, floats * 4); };
    h_ = F(size_t(C) * H);
    h2_ = F(H);
    a_ = F(size_t(C) * H);
    t_ = F(size_t(C) * H);
    q_ = F(size_t(C) * qw);
    kt_ = F(size_t(C) * kvw);
    vt_ = F(size_t(C) * kvw);
    attn_ = F(size_t(C) * qw);
    g_ = F(size_t(C) * imax);
    // doubles; attn_fused: floats, rows of RoundUp32(hd) and per head 2 x splits (<= 256) rounded
    // up to 32 floats for (m, l)
    po_ = F(size_t(std::max({C, S, 256})) * nh * RoundUp32(hdmax) * 2 + size_t(nh) * 512);
    pml_ = F(size_t(std::max(C, S)) * nh * 4);
    if (P > 0) {
      ple_ = F(size_t(C) * L * P);
      tok_ = F(size_t(C) * L * P);
      gp_ = F(size_t(C) * P);
    }
    // int32 sums of the PLE projections (EPI 4), then of the down projections (DJ, in
    // down_fuse_copies_ copies), zeroed per step
    pacc_ = F(size_t(L) * (1 + down_fuse_copies_) * H);
    hn_ = F(size_t(head_rows_) * H);
    logits_ = F(size_t(head_rows_) * V);
    vocab_block_ = static_cast<uint32_t>(
        std::clamp(EnvInt("GEMMA_VULKAN_VOCAB_BLOCK", static_cast<int>(kVocabBlock)), 1, 1 << 20));
    nblocks_ = (V + static_cast<int>(vocab_block_) - 1) / static_cast<int>(vocab_block_);
    part_ = F(size_t(head_rows_) * nblocks_ * 4);
    res_ = F(size_t(head_rows_) * 2);
    reduce_cnt_ = F(size_t(head_rows_));  // logits_reduce LAST: arrivals per row, zero between
    mask_ = F((V + 31) / 32);
    step_ = F(4);
    counter_ = F(64);
    hcount_ = F(kCombineCounters);
    // GEMMA_VULKAN_EMPTY=7 / 8's counters; =9: two 2,048-float vectors and the weight region
    if (empty_mode_ == 9) {
      const size_t want = size_t(std::clamp(EnvInt("GEMMA_VULKAN_EMPTY_WMB", 256), 1, 4096)) << 20;
      min_wn_ = static_cast<uint32_t>(std::min(want, dev_->max_range() - 65536) / 16 / 64 * 64);
      flags_ = F(4096 + size_t(min_wn_) * 4 + 4 * 2048);  // (+ the INV vectors)
    } else {
      flags_ = F(empty_mode_ == 8 ? 64 * 4096 : 1024);
    }
    grid_ = F(64);
    prof_ = F(2 * 16 * 4096);  // resident phase clocks; kernel probes (8 x 2 clocks a workgroup)
    probe_sink_ = probe_all_ ? F(2 * 16 * 4096) : Buf{};
    xq_region_ = (size_t(imax + 3) / 4 * 4 + 255) / 256 * 256;
    xq_ = Reserve(Pool::kDevice, xq_region_ * L);
    xqc_ = {};
    partc_ = {};
    if (coop_) {
      // Quantized inputs of the matrix-unit linears: kCoopSlots rotating slots of C tokens x the
      // widest input (padded to 64 columns) in f16.
      int max_cols = std::max({H, qw, imax, P});
      coop_ld_max_ = static_cast<uint32_t>((max_cols + 63) / 64 * 8);
      coop_slot_bytes_ = size_t(C) * coop_ld_max_ * 16;
      // attention_cm's split q rows (a chunk's tokens x heads, a workgroup's padding rows past
      // them) in two slots, their scales in a slot's split-K region.
      const size_t qrows = size_t(C) * nh + 32;
      if (attn_cm_)
        coop_slot_bytes_ = std::max(coop_slot_bytes_, qrows * AttnCmChunks(hdmax) * 8 * 16);
      xqc_ = Reserve(Pool::kDevice, coop_slot_bytes_ * kCoopSlots);
      coop_part_bytes_ =
          (std::max(size_t(C) * std::max({H, qw, P, kvw}), attn_cm_ ? qrows : 0) * 4 + 255) / 256 *
          256;
      partc_ = Reserve(Pool::kDevice, coop_part_bytes_ * kCoopSlots);
    }
    record_beside_ = EnvInt("GEMMA_VULKAN_RECORD_BESIDE", 1) != 0;
    chunk_cache_ = std::clamp(EnvInt("GEMMA_VULKAN_CHUNK_CACHE", 4), 0, 64);
    // Prompt chunks' embedding and PLE rows decoded on the device (embed_rows.comp) from the
    // checkpoint's stored rows, where the kernel knows both tables' kinds (GEMMA_VULKAN_GPU_ROWS;
    // 0: the host decodes them into f32 rows, 8x the staged bytes for the QAT checkpoint).
    gpu_rows_ = EnvInt("GEMMA_VULKAN_GPU_ROWS", 1) != 0 && GpuRowKind(model_.embed()) != 0 &&
                (P == 0 || GpuRowKind(model_.ple_embed()) != 0);
    // Host: inputs of a step and the readback.
    in_x0_off_ = 256;
    in_tok_off_ = in_x0_off_ + (size_t(C) * H * 4 + 255) / 256 * 256;
    in_mask_off_ = in_tok_off_ + (size_t(C) * L * P * 4 + 255) / 256 * 256;
    // (written once per element, never read by the host: device-local where it can be mapped,
    // so the step's copies out of it stay on the device; GEMMA_VULKAN_UPLOAD_LOCAL=0: host memory)
    in_host_ = Reserve(EnvInt("GEMMA_VULKAN_UPLOAD_LOCAL", 1) != 0 ? Pool::kUpload : Pool::kHost,
                       in_mask_off_ + size_t((V + 31) / 32) * 4);
    // One-token steps: the PLE rows and the mask in host memory instead (in_side_; the host
    // writes them fast, their copies run beside the body's first phase).
    upload_split_ = EnvInt("GEMMA_VULKAN_UPLOAD_SPLIT", 1) != 0;
    in_side_mask_off_ = (size_t(L) * P * 4 + 255) / 256 * 256;
    in_side_ =
        upload_split_ ? Reserve(Pool::kHost, in_side_mask_off_ + size_t((V + 31) / 32) * 4) : Buf{};
    out_host_ = Reserve(Pool::kHost, std::max<size_t>(size_t(head_rows_) * V * 4, 64));
    flag_host_ = Reserve(Pool::kHost, 64);
    prof_host_ = Reserve(Pool::kHost, 8 * 16 * 4096);

    dev_->Commit();

    for (int l = 0; l < L; ++l) {
      const LayerWeights& w = model_.layer_weights()[l];
      DevLayer& d = layers_[l];
      for (DevLinear* lin :
           {&d.q, &d.k, &d.v, &d.o, &d.gate, &d.up, &d.down, &d.ple_gate, &d.ple_proj}) {
        if (lin->src) UploadLinear(*lin);
      }
      UploadVec(d.input_norm, w.input_norm);
      UploadVec(d.post_attn_norm, w.post_attn_norm);
      UploadVec(d.pre_ffn_norm, w.pre_ffn_norm);
      UploadVec(d.post_ffn_norm, w.post_ffn_norm);
      UploadVec(d.q_norm, w.q_norm);
      UploadVec(d.k_norm, w.k_norm);
      UploadVec(d.post_ple_norm, w.post_ple_norm);
    }
    if (P > 0) {
      UploadLinear(ple_proj_);
      UploadVec(ple_norm_, model_.ple_proj_norm());
    }
    UploadVec(final_norm_, model_.final_norm());
    UploadLinear(lm_head_);
    Resolve(rope_s_);
    Resolve(rope_f_);
    {
      std::vector<float> t = RopeTable(inv_s_, rot_s_);
      dev_->Upload(rope_s_.r, 0, t.data(), t.size() * 4);
      t = RopeTable(inv_f_, rot_f_);
      dev_->Upload(rope_f_.r, 0, t.data(), t.size() * 4);
    }
    for (CacheSlot& s : slots_) {
      Resolve(s.k);
      Resolve(s.v);
    }
    for (Buf* b : {&h_,         &h2_,   &a_,       &t_,          &q_,          &kt_,
                   &vt_,        &attn_, &g_,       &po_,         &pml_,        &ple_,
                   &tok_,       &gp_,   &hn_,      &logits_,     &part_,       &res_,
                   &mask_,      &step_, &in_host_, &out_host_,   &counter_,    &hcount_,
                   &xq_,        &xqc_,  &partc_,   &grid_,       &flag_host_,  &prof_,
                   &prof_host_, &pacc_, &flags_,   &probe_sink_, &reduce_cnt_, &in_side_}) {
      if (b->handle >= 0) Resolve(*b);
    }
    dev_->Fill(counter_.r, 0);
    dev_->Fill(hcount_.r, 0);
    dev_->Fill(reduce_cnt_.r, 0);
    prefill_cmd_ = dev_->AllocCommandBuffer();
    head_cmd_ = dev_->AllocCommandBuffer();
    // Pre-record the decode step once to count its work.
    DecodeCommand(OutputMode::kArgmax);
    if (resident_) ResidentCommand(OutputMode::kArgmax);
  }

  void Rebuild() {
    std::vector<int32_t> replay = history_;
    Reset();
    Build();
    ++rebuilds_;
    broken_ = false;
    ForwardResult ignored;
    if (!replay.empty()) {
      try {
        Forward({.tokens = replay, .mode = OutputMode::kNone}, &ignored);
      } catch (...) {
        history_ = replay;
        window_.Commit(static_cast<int>(replay.size()));
        broken_ = true;
        throw;
      }
    }
  }

  // ---- recording ----
  struct Rec {
    VkCommandBuffer cmd;
    int dispatches = 0, barriers = 0;
    std::vector<std::string>* labels = nullptr;  // profiling: a timestamp after every dispatch
    // Capture (resident decode): dispatches become operation records of resident.comp and
    // barriers set the previous record's grid-barrier flag; every binding must lie in `pool`.
    std::vector<uint32_t>* ops = nullptr;
    VkBuffer pool = VK_NULL_HANDLE;
    bool capture_ok = true;
    uint32_t xq_max = 1;  // shared words the captured linears' quantized inputs need
    std::vector<std::string>* phase_labels = nullptr;  // a label per grid barrier (profiling)
    std::string pending;
    // Kernel probe: the `probe_nth` dispatch labelled `probe_label` runs the kernel's PROBE
    // variant, writing device-clock probes into prof_ (probe_wgs: its workgroup count).
    const std::string* probe_label = nullptr;
    int probe_nth = 0, probe_seen = 0;
    uint32_t probe_wgs = 0;
    // Between two compute dispatches (the one-token layer loop): Barrier records light_barrier_.
    bool light = false;
    // One-token steps from attn_hpw_from_ on: attn_fused with HPW heads per workgroup.
    bool long_ctx = false;
    // GEMMA_VULKAN_EMPTY=7: the layer loop's barriers as flags: phase index (barriers seen; =9
    // uses it too), workgroups of the previous phase (0: no wait) and of the current one.
    uint32_t flag_phase = 0, flag_prev = 0, flag_cur = 0;
    // GEMMA_VULKAN_EMPTY=8: dispatch index, the previous phase's first dispatch + 1 (0: no wait)
    // and count, the current phase's first dispatch.
    uint32_t flag_disp = 0, flag_wait = 0, flag_wait_n = 0, flag_first = 0;
    // GEMMA_VULKAN_FLAG_EVERY=k with =8: light barriers seen (every k-th stays a pipeline barrier).
    uint32_t flag_light = 0;
    // GEMMA_VULKAN_EMPTY=9: dispatches since the last barrier.
    uint32_t min_sub = 0;
    // One-token decode steps (GEMMA_VULKAN_HEAD_NORM): the caller records the head next, so the
    // body leaves its last residual norm (head_pend) to the head's prologue, which also applies the
    // final norm.
    bool fuse_head = false;
    bool head_pend = false;
    const Buf* head_wt = nullptr;
    float head_scale = 1.0f;
    BufRange head_h{};
    // Early-submit one-token steps: the PLE rows' and mask's copies (after the host's second
    // event) are recorded by RecordBody after the first phase's dispatches, before its barrier.
    bool side_pending = false;
    OutputMode side_mode = OutputMode::kNone;
  };

  void CaptureOp(Rec& rc, const char* shader, const std::vector<uint32_t>& spec,
                 const std::array<BufRange, vk::kBindings>& b, const void* push, size_t push_bytes,
                 uint32_t gx, uint32_t gy, uint32_t gz, uint32_t local_size) {
    const int kernel = ResidentKernel(shader);
    const bool lin = kernel == 0 || kernel == 1;
    // Linears: one token (token groups of one, a single token group).
    if (kernel < 0 || local_size != kWG || spec.size() > 11 || push_bytes > 32 * 4 ||
        (lin && (gx != 1 || spec.size() != 9 || spec[5] != 1))) {
      rc.capture_ok = false;
      resident_note_ = std::string("cannot capture ") + shader;
      return;
    }
    std::vector<uint32_t> op(kOpWords, 0);
    op[0] = static_cast<uint32_t>(kernel);
    op[1] = gx;
    op[2] = gy;
    op[3] = gz;
    for (size_t i = 0; i < spec.size(); ++i) op[5 + i] = spec[i];
    for (int i = 0; i < 11; ++i) {
      if (!b[i].buf) continue;
      if (b[i].buf != rc.pool || b[i].offset % 16 != 0) {
        rc.capture_ok = false;
        resident_note_ = std::string(shader) + " binding " + std::to_string(i) +
                         " outside the device pool's first buffer";
        return;
      }
      op[16 + i] = static_cast<uint32_t>(b[i].offset / 4);
    }
    std::memcpy(&op[32], push, push_bytes);
    if (lin) rc.xq_max = std::max(rc.xq_max, spec[4] * (spec[2] == 1 ? 2u : 1u));
    rc.ops->insert(rc.ops->end(), op.begin(), op.end());
    ++rc.dispatches;
    if (rc.phase_labels) {
      const std::string l = Label(shader, spec, gy, push, push_bytes);
      if (rc.pending.empty()) rc.pending = l;
      else if (rc.pending.find(" + ") == std::string::npos) rc.pending += " + more";
    }
  }


  // A dispatch's profile label: the shader, and for matvecs the kind, epilogue and shape.
  static std::string Label(const char* shader, const std::vector<uint32_t>& spec, uint32_t gy,
                           const void* push, size_t push_bytes) {
    std::string label = shader;
    if (label == "linear" || label == "linear_dp") {
      static const char* kKinds[] = {"f32", "bf16", "f16", "q2", "q4", "q8"};
      label += std::string(" ") + kKinds[spec[1]] + " epi" + std::to_string(spec[2]) + " " +
               std::to_string(push_bytes ? static_cast<const LinPush*>(push)->rows : gy) + "x" +
               std::to_string(push_bytes ? static_cast<const LinPush*>(push)->cols : 0);
    }
    return label;
  }

  void Dispatch(Rec& rc, const char* shader, std::vector<uint32_t> spec,
                const std::array<BufRange, vk::kBindings>& b, const void* push, size_t push_bytes,
                uint32_t gx, uint32_t gy = 1, uint32_t gz = 1, uint32_t local_size = kWG) {
    if (gx == 0 || gy == 0 || gz == 0) return;
    // Constant 0 is the local size (0 for shaders with a fixed size, which ignore it).
    spec.insert(spec.begin(), local_size);
    if (rc.ops) {
      CaptureOp(rc, shader, spec, b, push, push_bytes, gx, gy, gz, local_size);
      return;
    }
    std::array<BufRange, vk::kBindings> bb = b;
    bb[11] = step_.r;
    // One dispatch of `pipe` with `set` and the push constants.
    auto record = [&](VkPipeline pipe, VkDescriptorSet set) {
      vkCmdBindPipeline(rc.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
      vkCmdBindDescriptorSets(rc.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, dev_->layout(), 0, 1, &set,
                              0, nullptr);
      if (push_bytes)
        vkCmdPushConstants(rc.cmd, dev_->layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0,
                           static_cast<uint32_t>(push_bytes), push);
      vkCmdDispatch(rc.cmd, gx, gy, gz);
    };
    std::string probe_shader;
    bool probe_reported = false;
    // A label "2:..." selects the finer probe set (linear_dp_probe2: inside the norm prologue;
    // attention_probe2: the first key block's V loop, round by round).
    const bool fine = rc.probe_label && rc.probe_label->rfind("2:", 0) == 0;
    if (rc.probe_label &&
        (std::strcmp(shader, "linear_dp") == 0 || std::strcmp(shader, "attention") == 0 ||
         std::strcmp(shader, "attn_fused") == 0) &&
        Label(shader, spec, gy, push, push_bytes) == rc.probe_label->substr(fine ? 2 : 0)) {
      const uint32_t pb = shader[0] == 'l' ? 11 : std::strcmp(shader, "attention") == 0 ? 10 : 14;
      if (rc.probe_seen++ == rc.probe_nth) {
        probe_shader = std::string(shader) + (fine ? "_probe2" : "_probe");
        bb[pb] = prof_.r;
        rc.probe_wgs = gx * gy * gz;
        probe_reported = true;
      } else if (probe_all_) {
        // GEMMA_BENCH_PROBE_ALL (timing only): every dispatch with the label runs the probe
        // pipeline (the others into a scratch buffer), so the probed one finds its code where
        // the step's earlier dispatches of it left it, as the plain pipeline does.
        probe_shader = std::string(shader) + (fine ? "_probe2" : "_probe");
        bb[pb] = probe_sink_.r;
      }
    }
    if ((empty_mode_ != 0 ||
         (!empty_only_.empty() && EmptyOnly(Label(shader, spec, gy, push, push_bytes)))) &&
        std::strcmp(shader, "readbw") != 0) {
      // GEMMA_VULKAN_EMPTY (timing only): empty.comp in place of the kernel.
      std::vector<uint32_t> es{kWG};
      if (empty_mode_ == 7) {
        // each workgroup waits until the previous phase's workgroups have all counted themselves,
        // then counts itself in this phase's flag (acquire / release at device scope)
        es.resize(20, 0);
        es[17] = rc.flag_phase > 0 ? rc.flag_phase - 1 : 0;
        es[18] = rc.flag_prev;
        es[19] = rc.flag_phase + 1;
        rc.flag_cur += gx * gy * gz;
        bb[12] = flags_.r;
      }
      if (empty_mode_ == 8) {
        // GEMMA_VULKAN_FLAG_SPLIT=k: each dispatch counts itself on k lines (workgroup index mod
        // k), so k atomics proceed at once
        const uint32_t split = flag_split_;
        es.resize(23, 0);
        es[17] = rc.flag_wait;
        es[18] = rc.flag_wait_n;
        es[19] = std::min(rc.flag_disp, 4096u / split - 1) + 1;
        es[20] = gx * gy * gz;
        es[22] = split;
        ++rc.flag_disp;
        bb[12] = flags_.r;
      }
      if (empty_mode_ == 9) {
        // the least work of a dependent phase (empty.comp MW): the phase's parity picks the input
        // vector; phases take 16 slots of the weight region in turn, a phase's dispatches a
        // quarter slot each, so no dispatch finds its weights in L2
        es.resize(30, 0);
        es[23] = 1 + min_vecs_;
        es[24] = rc.flag_phase & 1u;
        es[25] = (rc.flag_phase % 16) * (min_wn_ / 16) + (rc.min_sub % 4) * (min_wn_ / 64);
        es[26] = min_wn_;
        es[27] = min_red_;
        es[28] = min_atoms_;
        es[29] = min_inv_;
        ++rc.min_sub;
        bb[12] = flags_.r;
      }
      if (empty_mode_ == 3 || empty_mode_ == 4) {
        es.resize(17, 0);
        es[15] = empty_code_;
        es[16] = empty_mode_ == 4 ? 1 : 0;
      }
      if (empty_mode_ == 2 || empty_mode_ == 5 || empty_mode_ == 6) {
        es = spec;
        es.resize(14, 0);
        es[0] = kWG;
        uint32_t code = 2166136261u;
        for (const char* c = shader; *c; ++c) code = (code ^ static_cast<uint8_t>(*c)) * 16777619u;
        es.push_back(code);
        if (empty_mode_ != 2) {  // 5, 6: mode 3 / 4's code in each original pipeline's own binary
          es.resize(17, 0);
          es[15] = empty_code_;
          es[16] = empty_mode_ == 6 ? 1 : 0;
        }
      }
      if (!empty_shm_.empty()) {
        // GEMMA_VULKAN_EMPTY_SHM=prefix=words,...: the shared memory of the first entry whose
        // prefix starts the original shader's name ("any" matches any)
        for (const auto& [prefix, words] : empty_shm_) {
          if (prefix == "any" || std::strncmp(shader, prefix.c_str(), prefix.size()) == 0) {
            es.resize(std::max<size_t>(es.size(), 22), 0);
            es[21] = std::max(words, 1u);
            break;
          }
        }
      }
      record(dev_->Pipeline("empty", es), dev_->Set(bb));
      ++rc.dispatches;
      return;
    }
    const VkPipeline pipe =
        dev_->Pipeline(probe_shader.empty() ? shader : probe_shader.c_str(), spec);
    const VkDescriptorSet set = dev_->Set(bb);
    if (probe_reported && probe_twice_ != 0) {
      // GEMMA_BENCH_PROBE_TWICE (timing only; kernels that accumulate give wrong results): the
      // probed kernel runs first once more, behind a barrier, as its plain pipeline (1: its data
      // warm in the caches, its code cold) or as the probe pipeline itself (2: both warm).
      record(probe_twice_ == 2 ? pipe : dev_->Pipeline(shader, spec), set);
      dev_->Barrier(rc.cmd, vk::Device::BarrierKind::kFull);
    }
    record(pipe, set);
    ++rc.dispatches;
    // GEMMA_VULKAN_EXTRA_DISPATCHES=k (timing only): k one-workgroup empty dispatches after each
    // of the one-token layer loop's dispatches, no barrier between: what a dispatch beside a
    // phase's kernel costs the step.
    for (int i = 0; rc.light && i < extra_dispatches_; ++i) {
      vkCmdBindPipeline(rc.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, dev_->Pipeline("empty", {kWG}));
      vkCmdDispatch(rc.cmd, 1, 1, 1);
    }
    if (rc.labels && rc.labels->size() + 1 < Device::kMaxTimestamps) {
      rc.labels->push_back(Label(shader, spec, gy, push, push_bytes));
      dev_->WriteTimestamp(rc.cmd, static_cast<uint32_t>(rc.labels->size()));
    }
  }
  void Barrier(Rec& rc) {
    ++rc.barriers;
    ++rc.flag_phase;
    rc.min_sub = 0;
    if (empty_mode_ == 8 && !rc.ops) {
      // (timing only) the next phase's workgroups wait for this phase's dispatches' ready flags;
      // with GEMMA_VULKAN_FLAG_EVERY=k every k-th light barrier stays a pipeline barrier, so at
      // most k phases' workgroups are in flight (and spinning) at once
      const bool flag = rc.light && (flag_every_ <= 0 || ++rc.flag_light % flag_every_ != 0);
      rc.flag_wait = flag ? rc.flag_first + 1 : 0;
      rc.flag_wait_n = flag ? rc.flag_disp - rc.flag_first : 0;
      rc.flag_first = rc.flag_disp;
      if (flag) return;
    }
    if (empty_mode_ == 7 && !rc.ops) {
      // (timing only) the next phase's workgroups wait for this one's count instead of a barrier
      rc.flag_prev = rc.light ? rc.flag_cur : 0;
      rc.flag_cur = 0;
      if (rc.light) return;
    }
    if (rc.ops) {
      if (!rc.ops->empty()) (*rc.ops)[rc.ops->size() - kOpWords + 4] |= 1u;
      if (rc.phase_labels) rc.phase_labels->push_back(rc.pending);
      rc.pending.clear();
      return;
    }
    dev_->Barrier(rc.cmd, rc.light ? light_barrier_ : vk::Device::BarrierKind::kFull);
  }

  // The register-tiled prefill kernel sums int2/int4 products in f32 without flushing, exact while
  // max|w| * 128 * cols < 2^24; GEMMA_VULKAN_MM=1 selects the 64x64 kernel (comparison runs).
  bool UseRegisterTiled(const Linear& lin) const {
    if (mm_kernel_ == 1) return false;
    if (lin.kind == WeightKind::kQ2) return static_cast<int64_t>(lin.cols) * 2 * 128 < (1 << 24);
    if (lin.kind == WeightKind::kQ4) return static_cast<int64_t>(lin.cols) * 8 * 128 < (1 << 24);
    return true;
  }

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
                const PleFuse* pj = nullptr) {
    const Linear& lin = *d.src;
    const bool dense = lin.kind == WeightKind::kBF16 || lin.kind == WeightKind::kF16;
    const uint32_t epw = ElemsPerWord(lin.kind);
    const uint32_t xwords = IsQuantized(lin.kind) ? std::max<uint32_t>(1, d.wstride * epw / 4) : 1;
    // Invocations per row: enough that each loads one or two 16-byte vectors (more workgroups in
    // flight for long rows), at least one subgroup.
    const uint32_t nvec = d.wstride / 4;
    uint32_t vec = nvec >= lanes_ ? 4 : 1;
    uint32_t lanes = lanes_;
    while (vec == 4 && lanes < kWG && nvec >= lanes_k_ * lanes) lanes *= 2;
    const bool dense_short = m == 1 && !rc.ops && vec == 4 && dense &&
                             dense_lanes_ >= dev_->subgroup_size() && dense_lanes_ <= kWG &&
                             nvec <= 8 * dense_lanes_;
    if (dense_short) lanes = dense_lanes_;
    // One-token SRQ integer matvecs with short rows: fewer lanes than a subgroup per row (about
    // mv_lanes_vec_ vectors each, at least mv_lanes_min_), several rows per subgroup (CLUSTER): a
    // quarter as many row blocks for a 1,536-column int2 row. Integer sums: exact in any order.
    bool cluster = false;
    if (m == 1 && !rc.ops && mv_lanes_min_ < dev_->min_subgroup_size() &&
        IsQuantized(lin.kind) && lin.in_scale > 0 && (!second || second->src->in_scale > 0)) {
      // Clusters lie within one subgroup (the shader sums them by xor shuffles), of the smallest
      // width the driver may pick.
      const uint32_t sg = dev_->min_subgroup_size();
      uint32_t l = mv_lanes_min_;
      while (l < sg && l * mv_lanes_vec_ < nvec) l *= 2;
      if (l < sg) {
        lanes = l;
        vec = 4;
        cluster = true;
      }
    }
    // EPI 4 where the linears allow it: the gate (EPI 3) on the packed-dot path in one part, the
    // projection int8 SRQ in one part with at most 8 rows per invocation; such a gate runs on
    // ple_lanes_ lanes per row: row blocks (the projection's column blocks) of kWG / ple_lanes_.
    const DevLinear* pjl = pj ? pj->proj : nullptr;
    const bool pj_fits = pjl && m == 1 && !rc.ops && epi == 3 && !second && d.parts.size() == 1 &&
                         int_dot_ && IsQuantized(lin.kind) && lin.in_scale > 0.0f && xq_mode == 0 &&
                         !tail && pjl->parts.size() == 1 && pjl->src->kind == WeightKind::kQ8 &&
                         pjl->src->in_scale > 0.0f && pjl->cols == lin.rows &&
                         pjl->src->rows <= 8 * static_cast<int>(kWG);
    if (pj_fits && ple_lanes_ > 0 && vec == 4) {
      lanes = ple_lanes_;
      cluster = lanes < dev_->min_subgroup_size();
      if (cluster && lanes < mv_lanes_min_) lanes = mv_lanes_min_;
    }
    const uint32_t rows_per_wg = kWG / lanes;
    // Tokens per workgroup: as many as the quantized inputs fit in 16 KiB of shared memory.
    uint32_t tok = 1;
    const uint32_t dual = second ? 2 : 1;
    const uint32_t max_tok = 4;  // chunks of 8+ tokens take the tiled kernel
    while (tok < max_tok && tok < static_cast<uint32_t>(m) && 2 * tok * dual * xwords * 4 <= 16384)
      tok *= 2;
    // ... and row blocks of whole int8 words of the projection (4-64 rows).
    const bool pj_ok = pj_fits && rows_per_wg % 4 == 0 && rows_per_wg <= 64;
    const uint32_t epi_k = pj_ok ? 4u : epi;
    // DJ where the linears allow it: gate/up (EPI 1) on the packed-dot path in one part, 2, 4 or 8
    // words of the int2 / int4 SRQ down projection per row block, up to 8 rows of it per
    // invocation.
    const bool dj_ok = pjl && m == 1 && !rc.ops && epi == 1 && second && d.parts.size() == 1 &&
                       second->parts.size() == 1 && int_dot_ && IsQuantized(lin.kind) &&
                       lin.in_scale > 0.0f && second->src->in_scale > 0.0f &&
                       (xq_mode == 0 || xq_mode == 2) && !tail && vec == 4 &&
                       pjl->parts.size() == 1 &&
                       (pjl->src->kind == WeightKind::kQ2 || pjl->src->kind == WeightKind::kQ4) &&
                       pjl->src->in_scale > 0.0f && pjl->cols == lin.rows &&
                       pjl->src->rows <= 8 * static_cast<int>(kWG) &&
                       rows_per_wg % (2 * ElemsPerWord(pjl->src->kind)) == 0 &&
                       rows_per_wg <= 8 * ElemsPerWord(pjl->src->kind);
    if (dj_ok) xq_mode = 0;  // (no down kernel reads what XQ 2 would write)
    for (size_t i = 0; i < d.parts.size(); ++i) {
      const DevLinear::Part& p = d.parts[i];
      LinPush pc{};
      pc.rows = p.rows;
      pc.cols = d.cols;
      pc.wstride = d.wstride;
      pc.x_stride = x_stride;
      pc.y_stride = y_stride;
      pc.y_off = y_off + p.row0;
      pc.in_s0 = lin.in_scale;
      pc.out_s0 = lin.out_scale;
      pc.cap = head_nocap_ ? 0.0f : cfg_.final_logit_softcapping.value_or(0.0f);
      pc.aux_stride = aux_stride;
      pc.aux_off = aux_off + p.row0;
      pc.x_row0 = x_row0;
      pc.ntok = m;
      std::array<BufRange, vk::kBindings> b{};
      b[0] = p.w.r;
      b[1] = p.s.handle >= 0 ? p.s.r : BufRange{};
      b[2] = x;
      b[3] = y;
      if (second) {
        const DevLinear::Part& p2 = second->parts[i];
        pc.in_s1 = second->src->in_scale;
        pc.out_s1 = second->src->out_scale;
        b[4] = p2.w.r;
        b[5] = p2.s.handle >= 0 ? p2.s.r : BufRange{};
      }
      if (aux) b[6] = *aux;
      uint32_t use_tail = 0;
      if (tail) {
        use_tail = 1;
        pc.n = d.rows;
        pc.has_a = tail->has_a;
        pc.has_wa = tail->wa != nullptr;
        pc.scale = tail->scale;
        pc.eps = cfg_.rms_norm_eps;
        b[6] = counter_.r;
        b[7] = h_.r;
        b[8] = *tail->wt;
        if (tail->wa) b[9] = *tail->wa;
        b[10] = a_.r;
      }
      uint32_t xqm = xq_mode;
      if (xq_mode == 1) b[5] = *xq;
      // Mode 3: as 1, but the workgroup copies the quantized input to shared memory first.
      if (xq_mode == 1 && xq_shared_ && xwords * 4 * tok <= 16384) xqm = 3;
      // The producer wrote this input in the packed-dot order (XqPerm): plain copies.
      const uint32_t perm = m == 1 && !rc.ops ? xq_perm : 0;
      if (xqm == 3 && perm) xqm = 4;
      if (xq_mode == 2) {
        b[6] = *xq;
        pc.next_in_s = next_in_s;
      }
      if (m >= kMatmulMinTokens) {
        // The tiled kernels have a fixed 256-invocation workgroup (no local-size constant).
        const bool coop_dense = UseCoopDense(d, second);
        if (coop_dense || UseCoop(lin, second ? second->src : nullptr)) {
          // Inputs quantized once per weight set into rotating slots (a slot is rewritten only
          // after at least one more barrier, so no reader of its previous contents is in flight).
          const uint32_t ld = (d.cols + 63) / 64 * 8;
          pc.xq_ld = ld;
          // Split K where the output tiles alone would leave the GPU mostly idle (few rows, long
          // rows): the splits add exact int32 partial sums atomically, linear_cm_epi finishes.
          uint32_t splits = 1;
          const uint32_t ktiles = (d.cols + 63) / 64;
          const uint32_t bm = second || coop_dense ? 64 : coop_bm_;
          const uint32_t tiles = ((m + 127) / 128) * ((p.rows + bm - 1) / bm);
          if (!second && !coop_dense && coop_splitk_ && d.parts.size() == 1 &&
              size_t(m) * p.rows * 4 <= coop_part_bytes_ &&
              (tiles < kCoopTargetTiles || coop_splitk_ == 2)) {
            splits = coop_splitk_ == 2 ? ktiles
                                       : std::min((kCoopTargetTiles + tiles - 1) / tiles, ktiles / 4);
            if (splits > 1) {
              pc.kper = (ktiles + splits - 1) / splits;
              splits = (ktiles + pc.kper - 1) / pc.kper;
            }
            if (splits <= 1) {
              splits = 1;
              pc.kper = 0;
            }
          }
          if (i == 0 && coop_dense) {
            // f32 inputs as hi + lo f16 terms scaled per token (split_f16.comp): two slots, the
            // tokens' scales in the first slot's split-K region (dense linears do not split K)
            for (int set = 0; set < 2; ++set) coop_slot_[set] = TakeCoopSlot();
            QuantPush qp{static_cast<uint32_t>(d.cols), static_cast<uint32_t>(x_stride),
                         static_cast<uint32_t>(x_row0), ld, 0.0f};
            std::array<BufRange, vk::kBindings> qb{};
            qb[2] = x;
            qb[3] = CoopSlot(coop_slot_[0]);
            qb[4] = CoopSlot(coop_slot_[1]);
            qb[9] = CoopPart(coop_slot_[0]);
            Dispatch(rc, "split_f16", {}, qb, &qp, sizeof(uint32_t) * 4, 1, m, 1,
                     /*local_size=*/0);
            Barrier(rc);
          } else if (i == 0) {
            if (splits > 1) {
              const BufRange part = CoopPart(coop_next_);
              vkCmdFillBuffer(rc.cmd, part.buf, part.offset, size_t(m) * p.rows * 4, 0);
            }
            for (int set = 0; set < (second ? 2 : 1); ++set) {
              const float in_s = set == 0 ? lin.in_scale : second->src->in_scale;
              coop_slot_[set] = TakeCoopSlot();
              QuantPush qp{static_cast<uint32_t>(d.cols), static_cast<uint32_t>(x_stride),
                           static_cast<uint32_t>(x_row0), ld, in_s};
              std::array<BufRange, vk::kBindings> qb{};
              qb[2] = x;
              qb[3] = CoopSlot(coop_slot_[set]);
              Dispatch(rc, "srq_quant", {}, qb, &qp, sizeof(qp), (ld + 255) / 256, m, 1,
                       /*local_size=*/0);
            }
            Barrier(rc);
          }
          b[7] = CoopSlot(coop_slot_[0]);
          b[8] = second || coop_dense ? CoopSlot(coop_slot_[1]) : b[7];
          b[9] = CoopPart(coop_slot_[0]);
          const uint32_t bn = second ? 64 : 128;
          Dispatch(rc, second ? "linear_cmd" : bm == 128 ? "linear_cm128" : "linear_cm",
                   {KindCode(lin.kind), epi}, b, &pc, sizeof(pc), (m + bn - 1) / bn,
                   (p.rows + bm - 1) / bm, splits, /*local_size=*/0);
          if (splits > 1) {
            Barrier(rc);
            Dispatch(rc, "linear_cm_epi", {KindCode(lin.kind), epi}, b, &pc, sizeof(pc),
                     (p.rows + 255) / 256, m, 1, /*local_size=*/0);
          }
        } else if (UseRegisterTiled(lin)) {
          const uint32_t bn = second ? 64 : 128;
          Dispatch(rc, second ? "linear_mm2d" : "linear_mm2", {KindCode(lin.kind), epi}, b, &pc,
                   sizeof(pc), (m + bn - 1) / bn, (p.rows + 127) / 128, 1,
                   /*local_size=*/0);
        } else {
          Dispatch(rc, "linear_mm", {KindCode(lin.kind), epi}, b, &pc, sizeof(pc), (m + 63) / 64,
                   (p.rows + 63) / 64, 1, /*local_size=*/0);
        }
        continue;
      }
      // Packed dot products for the SRQ integer path (not with XQ 1: its input stays unpermuted).
      const bool dp = int_dot_ && IsQuantized(lin.kind) && xqm != 1;
      std::vector<uint32_t> spec = {KindCode(lin.kind), epi_k, lanes, xwords, tok, vec,
                                    use_tail,           xqm};
      if (dj_ok) {
        b[13] = pjl->pairs.handle >= 0 ? pjl->pairs.r : pjl->parts[0].w.r;
        b[12] = pj->acc;
        pc.next_in_s = pjl->src->in_scale;
        pc.pj_rows = static_cast<uint32_t>(pjl->src->rows);
        pc.pj_wstride = static_cast<uint32_t>(pjl->wstride);
      } else if (pj_ok) {
        b[4] = pjl->parts[0].w.r;
        b[12] = pj->acc;
        pc.pj_in_s = pjl->src->in_scale;
        pc.pj_rows = static_cast<uint32_t>(pjl->src->rows);
        pc.pj_wstride = static_cast<uint32_t>(pjl->wstride);
      }
      if (pro) {
        if (m != 1 || tail || xqm == 1 || xqm == 3 || d.cols > 8 * static_cast<int>(kWG))
          throw Error(ErrorCode::kInternal, "vulkan: input norm prologue on a wrong linear");
        spec.push_back(pro->mode);
        spec.push_back(static_cast<uint32_t>(d.cols));
        pc.n = static_cast<uint32_t>(d.cols);
        pc.scale = pro->scale;
        pc.eps = cfg_.rms_norm_eps;
        pc.has_a = pro->h_out && i == 0;
        pc.has_wa = pro->wa != nullptr;
        b[7] = *pro->h_in;
        b[8] = *pro->wt;
        // Without wa, wt (the same length) stands in: the prologue loads binding 9 unconditionally
        // and ignores the values when has_wa is 0.
        b[9] = pro->wa ? *pro->wa : *pro->wt;
        if (pro->h_out) b[10] = *pro->h_out;
        if (pro->t_sums) {
          // PRO_T: t is the sums of t_sums (one part), with its row scales and SRQ scales.
          b[2] = *pro->t_acc;
          b[5] = pro->t_sums->parts[0].s.r;
          pc.pt_in_s = pro->t_sums->src->in_scale;
          pc.pt_out_s = pro->t_sums->src->out_scale;
        }
      }
      const uint32_t perm_out = xqm == 2 ? perm : 0;
      // The multiply without per-word branches (linear.comp FAST): both weight sets on the
      // SRQ integer path, 16-byte loads, the input in shared memory.
      const bool fast = dp && mv_fast_ && !rc.ops && vec == 4 && lin.in_scale > 0.0f &&
                        (!second || second->src->in_scale > 0.0f);
      if (fast || cluster || perm_out) {
        PadLinearSpec(spec, 10);
        spec.push_back(fast ? 1u : 0u);  // FAST
        spec.push_back(cluster ? 1u : 0u);
        if (perm_out) spec.push_back(perm_out);
      }
      if (pro && (pack_atomic_ || rms_all_ || pro->t_sums)) {
        PadLinearSpec(spec, 14);
        spec.push_back(pack_atomic_ ? 1u : 0u);  // PACK_ATOMIC
        spec.push_back(pro->t_sums ? 1u : 0u);   // PRO_T
        spec.push_back(rms_all_ ? 1u : 0u);      // RMS_ALL
      }
      if (m == 1 && !rc.ops && mv_dbg_ > 0 && vec == 4) {
        PadLinearSpec(spec, 17);
        spec.push_back(mv_dbg_);  // DBG
      }
      // One-token dense bf16 / f16 rows on 16-byte loads: the input (or a norm prologue's
      // output) staged as vec4s (linear.comp FXW), up to 16 KiB of it and 4 KiB below the
      // device's shared memory (the kernel's other shared arrays, the prologue's floats).
      const bool dense_vec = m == 1 && !rc.ops && dense_vec4_ && dense && vec == 4 && !tail &&
                             (!second || second->src->kind == lin.kind) && xqm == 0;
      const size_t fx_bytes = size_t(d.wstride) / 2 * 16;
      const size_t fx_other = 4096 + (pro ? size_t(d.cols) * 4 : 0);
      const bool fxw = dense_vec && fx_bytes <= 16384 &&
                       fx_bytes + fx_other <= dev_->max_shared_bytes();
      if (fxw) {
        PadLinearSpec(spec, 18);
        spec.push_back(d.wstride / 2);  // FXW
      }
      // ... longer inputs without a prologue (the down projections): read as vec4s from global
      // memory (linear.comp FXG; rows of whole vectors, the token's row on a 16-byte boundary).
      const bool fxg = dense_vec && !fxw && !pro && d.cols % 8 == 0 &&
                       static_cast<int>(d.wstride) * 2 == d.cols && x_stride % 4 == 0;
      if (dj_ok) {
        PadLinearSpec(spec, 19);
        spec.push_back(KindCode(pjl->src->kind));                                          // DJ
        spec.push_back((down_fuse_late_ ? 1u : 0u) | (pjl->pairs.handle >= 0 ? 2u : 0u));  // DJM
        spec.push_back(down_fuse_copies_);  // ACC_COPIES
      }
      if (pro && pro->t_sums && pro->t_copies > 1) {
        PadLinearSpec(spec, 21);
        spec.push_back(pro->t_copies);  // ACC_COPIES
      }

      // One-token steps: at most mv_wgs_ workgroups, each looping over row blocks (the input
      // prologue runs once per workgroup, in one wave). Not for captured (resident) steps: the
      // resident kernel takes the blocks as virtual workgroups.
      const uint32_t nblk = (p.rows + rows_per_wg - 1) / rows_per_wg;
      uint32_t gy = nblk;
      if (m == 1 && !rc.ops) {
        // (a prologue caps the longer matrices too: it runs once per workgroup)
        int cap = static_cast<uint32_t>(p.rows) <= mv_max_rows_ || pro ? mv_wgs_ : mv_wgs_long_;
        if (dj_ok && down_fuse_wgs_ > 0) cap = down_fuse_wgs_;
        if (dense_short && dense_wgs_ > 0) cap = dense_wgs_;
        if (cap > 0) gy = std::min<uint32_t>(gy, static_cast<uint32_t>(cap));
      }
      // Workgroups looping over several blocks of a single FAST weight set: the next block's
      // vectors loaded before this one's multiply (linear.comp PFB).
      const uint32_t nvl = (nvec + lanes - 1) / lanes;
      // ... and where the grid is at most mv_prefetch_early_ workgroups per compute unit, the
      // first block's loaded early (PFE: at the kernel's start, or after a norm prologue's operand
      // loads, PFE_LATE), also without a loop over blocks.
      // (mv_prefetch_early_set_ bits: 1 linears without a prologue, 2 the PLE gate, 4 the other
      // prologue linears)
      const bool pf_shape = !second && tok == 1 && nvl >= 1 && nvl <= 4;
      const uint32_t pfe_kind = !pro ? 1u : pj_ok ? 2u : 4u;
      const bool pfe = mv_prefetch_early_ > 0 && (mv_prefetch_early_set_ & pfe_kind) != 0 && fast &&
                       pf_shape && m == 1 && !rc.ops &&
                       gy <= mv_prefetch_early_ * std::max(1u, dev_->compute_units());
      const bool pfb = (((mv_prefetch_block_ && fast) || (dense_prefetch_ && (fxw || fxg))) &&
                        pf_shape && !pj_ok && gy < nblk) ||
                       pfe;
      if (pfb) {
        PadLinearSpec(spec, 22);
        spec.push_back(nvl);  // PFB
      }
      if (mv_dual_loop_ && fast && second && m == 1 && !fxw && mv_dbg_ == 0) {
        PadLinearSpec(spec, 23);
        spec.push_back(mv_dual_loop_);  // DUAL_LOOP
      }
      if (mv_pair_loop_ > 1 && fast && !second && m == 1 && !fxw && !pfb && mv_dbg_ == 0) {
        PadLinearSpec(spec, 24);
        spec.push_back(mv_pair_loop_);  // PAIR_LOOP
      }
      // (the shared input spans whole weight vectors: xwords is a multiple of a vector's words)
      if (fast && ((lin.kind == WeightKind::kQ2 && (mv_xcm_ & 1) != 0 && xwords % 16 == 0) ||
                   (lin.kind == WeightKind::kQ4 && (mv_xcm_ & 2) != 0 && xwords % 8 == 0))) {
        PadLinearSpec(spec, 25);
        spec.push_back(1);  // XCM
      }
      if (atomic_dbg_ && (pj_ok || dj_ok)) {
        PadLinearSpec(spec, 26);
        spec.push_back(atomic_dbg_);  // ADBG
      }
      // The prologue's columns 8 per invocation, read as 16-byte vectors (linear.comp PRO_VEC;
      // not with PACK_ATOMIC, the first form's other packing, nor where the caller says so).
      if (pro && pro->vec && pro_vec_ && !pack_atomic_ && d.cols % 8 == 0) {
        PadLinearSpec(spec, 27);
        spec.push_back(1);  // PRO_VEC
      }
      if (pfe) {
        PadLinearSpec(spec, 28);
        spec.push_back(1);  // PFE
      }
      if (pfe && pro && mv_prefetch_early_late_) {
        PadLinearSpec(spec, 29);
        spec.push_back(1);  // PFE_LATE
      }
      if (pro && rms_fast_) {
        PadLinearSpec(spec, 30);
        spec.push_back(1);  // RMS_FAST
      }
      // Both sets on the integer path with the same input scale: one quantized input (one-token
      // steps; the words are staged per workgroup).
      if (share_x_ && second && m == 1 && !rc.ops && xqm != 1 && IsQuantized(lin.kind) &&
          IsQuantized(second->src->kind) && lin.in_scale > 0.0f &&
          lin.in_scale == second->src->in_scale) {
        PadLinearSpec(spec, 31);
        spec.push_back(1);  // SHARE_X
      }

      if (fxg) {
        PadLinearSpec(spec, 32);
        spec.push_back(1);  // FXG
      }

      Dispatch(rc, dp ? "linear_dp" : "linear", spec, b, &pc, sizeof(pc), (m + tok - 1) / tok, gy);
    }
    return pj_ok || dj_ok;
  }

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

  // The residual stream is h_ unless `h` is given.
  void NormOp(Rec& rc, int m, const Buf* t, const Buf* wt, float scale, const Buf* wa, bool has_a,
              const BufRange& a, int h_row0 = 0, const BufRange* h = nullptr) {
    const int H = cfg_.hidden_size;
    NormPush pc{};
    pc.n = H;
    pc.has_t = t != nullptr;
    pc.has_a = has_a;
    pc.has_wa = wa && wa->handle >= 0;
    pc.scale = scale;
    pc.eps = cfg_.rms_norm_eps;
    pc.h_stride = pc.t_stride = pc.a_stride = H;
    pc.h_row0 = h_row0;
    std::array<BufRange, vk::kBindings> b{};
    b[0] = h ? *h : h_.r;
    if (t) b[1] = t->r;
    if (wt) b[2] = wt->r;
    if (has_a) b[3] = a;
    if (pc.has_wa) b[4] = wa->r;
    Dispatch(rc, "resnorm", {}, b, &pc, sizeof(pc), m);
  }

  // Records the model body for m tokens (inputs already in h_/tok_), then the head for rows
  // [out_first, out_first + out_count) when out_count > 0.
  // Layers [l_begin, l_end) (all by default); l_begin == 0 also records the step's prologue (PLE
  // projection, first input norm, PLE rows).
  void RecordBody(Rec& rc, int m, int splits, int l_begin = 0, int l_end = -1) {
    const int H = cfg_.hidden_size, L = cfg_.num_layers, P = cfg_.hidden_size_per_layer_input;
    const int LP = L * P;
    if (l_end < 0) l_end = L;
    if (l_begin == 0) {
    if (P > 0) {
      LinearOp(rc, ple_proj_, h_.r, H, ple_.r, LP, 0, m);
    }
    NormOp(rc, m, nullptr, nullptr, 1.0f, &layers_[0].input_norm, true, a_.r);
    if (rc.side_pending) RecordSideInputs(rc);
    Barrier(rc);
    if (P > 0) {
      PlePush pc{static_cast<uint32_t>(P), static_cast<uint32_t>(LP), model_.ple_model_proj_scale(),
                 model_.ple_input_scale(), cfg_.rms_norm_eps};
      std::array<BufRange, vk::kBindings> b{};
      b[0] = ple_.r;
      b[1] = tok_.r;
      b[2] = ple_norm_.r;
      Dispatch(rc, "ple", {}, b, &pc, sizeof(pc), L, m);
      // No barrier: the ple rows are first read after several barriers below.
    }
    }
    // GEMMA_VULKAN_CNORM=1, one-token steps: each residual norm is applied by the next linear's
    // workgroups (Pro) instead of a tail; the residual stream alternates between h_ and h2_.
    // PRO holds 8 values per invocation and keeps one vector in shared memory (with the
    // quantized inputs and reduction slots: at most ~16 KiB more).
    const bool cn = m == 1 && cnorm_ && H <= 8 * static_cast<int>(kWG) &&
                    4 * static_cast<size_t>(H) + 16384 <= dev_->max_shared_bytes();
    BufRange hcur = h_.r, hnext = h2_.r;
    const Buf* pend_wt = nullptr;  // the norm the next linear applies
    float pend_scale = 1.0f;
    // The PLE projection's sums left for the next layer's prologue (EPI 4 / PRO_T), or none.
    const DevLinear* pend_sums = nullptr;
    uint32_t pend_copies = 1;
    BufRange pend_acc{};
    // One-token steps: the layer loop records dispatches only (no transfers), so its barriers
    // need the compute stage only (GEMMA_VULKAN_BARRIER).
    rc.light = m == 1;
    for (int l = l_begin; l < l_end; ++l) {
      const LayerPlan& p = model_.layers()[l];
      const LayerWeights& w = model_.layer_weights()[l];
      DevLayer& d = layers_[l];
      const int hd = p.head_dim, nh = p.num_heads, nkv = p.num_kv_heads;
      const int qw = nh * hd, kvw = nkv * hd;
      if (cn && pend_wt) {
        const BufRange* wa = d.input_norm.handle >= 0 ? &d.input_norm.r : nullptr;
        const Pro pq{1,          &hcur,     &pend_wt->r, wa,         &hnext,
                     pend_scale, pend_sums, &pend_acc,   pend_copies};
        const Pro pkv{1,          &hcur,     &pend_wt->r, wa,         nullptr,
                      pend_scale, pend_sums, &pend_acc,   pend_copies};
        LinearOp(rc, d.q, t_.r, H, q_.r, qw, 0, m, 0, nullptr, nullptr, 0, 0, 0, nullptr, 0,
                 nullptr, 0.0f, &pq);
        if (!p.kv_shared) {
          LinearOp(rc, d.k, t_.r, H, kt_.r, kvw, 0, m, 0, nullptr, nullptr, 0, 0, 0, nullptr, 0,
                   nullptr, 0.0f, &pkv);
          LinearOp(rc, d.v, t_.r, H, vt_.r, kvw, 0, m, 0, nullptr, nullptr, 0, 0, 0, nullptr, 0,
                   nullptr, 0.0f, &pkv);
        }
        std::swap(hcur, hnext);
        pend_wt = nullptr;
        pend_sums = nullptr;
      } else {
        LinearOp(rc, d.q, a_.r, H, q_.r, qw, 0, m);
        if (!p.kv_shared) {
          LinearOp(rc, d.k, a_.r, H, kt_.r, kvw, 0, m);
          LinearOp(rc, d.v, a_.r, H, vt_.r, kvw, 0, m);
        }
      }
      Barrier(rc);
      CacheSlot& slot = slots_[model_.layers()[p.kv_layer].cache_slot];
      const bool sliding = p.type == LayerType::kSliding;
      // One-token steps: attn_fused.comp where the shapes fit (not captured for the resident
      // kernel, which runs the three-kernel path).
      uint32_t frl = 0, fd = 0, fkw = 0;
      const bool fused = m == 1 && !rc.ops && FusedAttnShape(hd, &frl, &fd, &fkw);
      // GEMMA_VULKAN_FUSE_ROPE=1, one-token steps: attention_rope does qkrope's work.
      const bool fuse_rope = !fused && m == 1 && fuse_rope_ && !attn_dec_ && hd <= 512;
      if (!fuse_rope && !(fused && attn_fused_rope_)) {
        RopePush pc{static_cast<uint32_t>(nh),
                    static_cast<uint32_t>(nkv),
                    static_cast<uint32_t>(hd),
                    static_cast<uint32_t>(slot.ring),
                    static_cast<uint32_t>(sliding ? rot_s_ : rot_f_),
                    cfg_.rms_norm_eps,
                    static_cast<uint32_t>(qw),
                    static_cast<uint32_t>(kvw)};
        std::array<BufRange, vk::kBindings> b{};
        b[0] = q_.r;
        b[1] = kt_.r;
        b[2] = vt_.r;
        b[3] = d.q_norm.r;
        if (d.k_norm.handle >= 0) b[4] = d.k_norm.r;
        b[5] = slot.k.r;
        b[6] = slot.v.r;
        b[7] = sliding ? rope_s_.r : rope_f_.r;
        Dispatch(rc, "qkrope", {}, b, &pc, sizeof(pc), nh + (p.kv_shared ? 0 : 2 * nkv), m);
        Barrier(rc);
      }
      {
        AttnPush pc{static_cast<uint32_t>(nh),       static_cast<uint32_t>(nkv),
                    static_cast<uint32_t>(hd),       static_cast<uint32_t>(slot.ring),
                    static_cast<uint32_t>(p.window), static_cast<uint32_t>(splits),
                    static_cast<uint32_t>(qw)};
        std::array<BufRange, vk::kBindings> b{};
        b[0] = q_.r;
        b[1] = slot.k.r;
        b[2] = slot.v.r;
        b[3] = po_.r;
        b[4] = pml_.r;
        if (fused) {
          // HPW query heads of one K/V head per workgroup (full-attention layers, MODE 0; its
          // row groups' states in shared memory: HPW x row groups x hd floats).
          const size_t hpw_shared = size_t(attn_hpw_) * (kWG / frl) * hd * 4 + 2048;
          const uint32_t hpw = rc.long_ctx && !sliding && attn_fused_mode_ == 0 &&
                                       nh % attn_hpw_ == 0 && (nh / nkv) % attn_hpw_ == 0 &&
                                       hpw_shared <= dev_->max_shared_bytes()
                                   ? attn_hpw_
                                   : 1u;
          const int fsplits = FusedSplits(nh / static_cast<int>(hpw));
          const FusedAttnPush fp{static_cast<uint32_t>(nh),
                                 static_cast<uint32_t>(nkv),
                                 static_cast<uint32_t>(slot.ring),
                                 static_cast<uint32_t>(p.window),
                                 static_cast<uint32_t>(fsplits),
                                 static_cast<uint32_t>(sliding ? rot_s_ : rot_f_),
                                 d.k_norm.handle >= 0 ? 1u : 0u,
                                 p.kv_shared ? 0u : 1u,
                                 static_cast<uint32_t>(fsplits * nh * RoundUp32(hd)),
                                 cfg_.rms_norm_eps};
          b[4] = sliding ? rope_s_.r : rope_f_.r;
          b[5] = attn_.r;
          b[6] = hcount_.r;
          b[7] = kt_.r;
          b[8] = vt_.r;
          b[9] = d.q_norm.r;
          b[10] = d.k_norm.handle >= 0 ? d.k_norm.r : d.q_norm.r;
          b[12] = slot.k.r;
          b[13] = slot.v.r;
          b[15] = po_.r;  // read-only alias of the partials (MODE 2, MODE 0 with NC_MERGE)
          const uint32_t rope = attn_fused_rope_ ? 1u : 0u;
          const uint32_t vec = attn_vec_ && fd % 8 == 0 ? 1u : 0u;
          Dispatch(rc, "attn_fused",
                   {static_cast<uint32_t>(hd), frl, fd, fkw, rope, attn_fused_mode_, attn_mb_, vec,
                    attn_fence_ ? 1u : 0u, attn_nc_merge_ ? 1u : 0u, attn_vpf_ ? 1u : 0u,
                    attn_fused_dbg_, hpw},
                   b, &fp, sizeof(fp), nh / hpw, 1, fsplits);
          Barrier(rc);
          if (attn_fused_mode_ == 1) {
            // Merge units of 4 dims with VEC, else 1.
            const uint32_t units = static_cast<uint32_t>(hd) / (vec ? 4u : 1u);
            Dispatch(rc, "attn_fused",
                     {static_cast<uint32_t>(hd), frl, fd, fkw, rope, 2u, attn_mb_, vec, 0u}, b, &fp,
                     sizeof(fp), nh, (units + kWG - 1) / kWG, 1);
            Barrier(rc);
          }
        } else if (m >= kMatmulMinTokens && attn_cm_ && AttnCmShape(hd, nh, nkv, m)) {
          AttnCmOp(rc, q_.r, slot.k.r, slot.v.r, attn_.r, nh, nkv, hd, slot.ring, p.window, m);
        } else if (m >= kMatmulMinTokens && attn_pf_) {
          // Prefill: a subgroup per (token, head), no splits to merge.
          b[5] = attn_.r;
          if (attn_pf_ >= 3 && hd % 4 == 0 && hd <= 512) {
            // 3: four queries per subgroup where hd <= 256, else two; 4: two everywhere.
            const bool narrow = hd <= 256;
            const int qps = attn_pf_ == 3 && narrow ? 4 : 2;
            const char* kernel = qps == 4 ? "attention_pfq4v2"
                                 : narrow ? "attention_pfq2v2"
                                          : "attention_pfq2v4";
            Dispatch(rc, kernel, {}, b, &pc, sizeof(pc), (nh + 3) / 4, (m + qps - 1) / qps, 1,
                     false);
          } else {
            Dispatch(rc, attn_pf_ == 1 ? "attention_pf" : "attention_pf32", {}, b, &pc,
                     sizeof(pc), (nh + 3) / 4, m, 1, false);
          }
          Barrier(rc);
        } else if (m >= kMatmulMinTokens && attn_tiled_) {
          // Prefill: query tiles share each K/V row; no splits to merge. The push block is the
          // same with the token count in place of the splits.
          AttnPush tp = pc;
          tp.splits = static_cast<uint32_t>(m);
          b[5] = attn_.r;
          Dispatch(rc, "attention_tiled", {}, b, &tp, sizeof(tp), nh, (m + 7) / 8, 1, false);
          Barrier(rc);
        } else {
          // GEMMA_VULKAN_ATTN_COMBINE=1 (not captured: the resident kernel merges separately).
          const bool merge = !fuse_rope && !(attn_dec_ && hd <= 512) && attn_combine_ &&
                             !rc.ops && m * nh <= kCombineCounters;
          if (fuse_rope) {
            pc.rot = static_cast<uint32_t>(sliding ? rot_s_ : rot_f_);
            pc.kv_stride = static_cast<uint32_t>(kvw);
            pc.has_kn = d.k_norm.handle >= 0;
            pc.kv_new = !p.kv_shared;
            pc.eps = cfg_.rms_norm_eps;
            b[5] = kt_.r;
            b[6] = vt_.r;
            b[7] = d.q_norm.r;
            if (d.k_norm.handle >= 0) b[8] = d.k_norm.r;
            b[9] = sliding ? rope_s_.r : rope_f_.r;
            Dispatch(rc, "attention_rope", {}, b, &pc, sizeof(pc), nh, m, splits);
          } else if (attn_dec_ && hd <= 512) {
            Dispatch(rc, "attention_dec", {}, b, &pc, sizeof(pc), (nh + 3) / 4, m, splits, false);
          } else if (merge) {
            // The last split workgroup of each head merges the splits (no combine dispatch).
            b[5] = attn_.r;
            b[6] = hcount_.r;
            Dispatch(rc, "attention", {1u}, b, &pc, sizeof(pc), nh, m, splits);
          } else if (attn_dbg_ != 0 || (splits_adapt_ && !rc.ops)) {
            // (not captured: the resident kernel's attention has no ADAPT)
            Dispatch(rc, "attention",
                     {0u, static_cast<uint32_t>(attn_dbg_), splits_adapt_ && !rc.ops ? 1u : 0u},
                     b, &pc, sizeof(pc), nh, m, splits);
          } else {
            Dispatch(rc, "attention", {}, b, &pc, sizeof(pc), nh, m, splits);
          }
          Barrier(rc);
          if (!merge) {
            CombinePush cp{static_cast<uint32_t>(nh), static_cast<uint32_t>(hd),
                           static_cast<uint32_t>(splits), static_cast<uint32_t>(qw)};
            b[5] = attn_.r;
            Dispatch(rc, "attn_combine", {}, b, &cp, sizeof(cp), nh, m);
            Barrier(rc);
          }
        }
      }
      // One-token steps fold each residual norm into the linear before it (TAIL).
      const bool fuse = !cn && m == 1 && fuse_tails_ && H <= 8 * static_cast<int>(kWG) &&
                        d.o.parts.size() == 1 && d.down.parts.size() == 1 &&
                        (P == 0 || d.ple_proj.parts.size() == 1);
      if (cn) {
        LinearOp(rc, d.o, attn_.r, qw, t_.r, H, 0, m);
      } else if (fuse) {
        const Tail tl{&d.post_attn_norm.r, 1.0f, true, &d.pre_ffn_norm.r};
        LinearOp(rc, d.o, attn_.r, qw, t_.r, H, 0, m, 0, nullptr, nullptr, 0, 0, 0, &tl);
      } else {
        LinearOp(rc, d.o, attn_.r, qw, t_.r, H, 0, m);
        Barrier(rc);
        NormOp(rc, m, &t_, &d.post_attn_norm, 1.0f, &d.pre_ffn_norm, true, a_.r);
      }
      Barrier(rc);
      // One-token steps: gate/up also write the down projection's quantized input (XQ).
      const bool xq = (fuse || cn) && d.down.src->in_scale > 0 && IsQuantized(d.down.src->kind) &&
                      d.gate.parts.size() == 1;
      const BufRange xq_l{xq_.r.buf, xq_.r.offset + xq_region_ * l, xq_region_, nullptr};
      // One-token steps with the norms in the consumers: the down projection summed by gate/up's
      // workgroups (DJ) where a prologue takes its sums next (the PLE gate's, or the next
      // layer's q/k/v: not after the last layer, which a norm kernel follows).
      const size_t dcopy = size_t(down_fuse_copies_) * H * 4;
      const PleFuse df{
          &d.down, {pacc_.r.buf, pacc_.r.offset + size_t(L) * H * 4 + l * dcopy, dcopy, nullptr}};
      bool down_fused = false;
      if (cn) {
        const BufRange* wa = d.pre_ffn_norm.handle >= 0 ? &d.pre_ffn_norm.r : nullptr;
        const Pro pg{1, &hcur, &d.post_attn_norm.r, wa, &hnext, 1.0f};
        const bool try_df = down_fuse_ && (P > 0 || l + 1 < l_end);
        down_fused = LinearOp(rc, d.gate, t_.r, H, g_.r, p.intermediate, 0, m, 1, &d.up, nullptr, 0,
                              0, 0, nullptr, xq ? 2 : 0, xq ? &xq_l : nullptr, d.down.src->in_scale,
                              &pg, XqPerm(d.down), try_df ? &df : nullptr);
        std::swap(hcur, hnext);
      } else if (xq) {
        LinearOp(rc, d.gate, a_.r, H, g_.r, p.intermediate, 0, m, 1, &d.up, nullptr, 0, 0, 0,
                 nullptr, 2, &xq_l, d.down.src->in_scale, nullptr, XqPerm(d.down));
      } else {
        LinearOp(rc, d.gate, a_.r, H, g_.r, p.intermediate, 0, m, 1, &d.up);
      }
      Barrier(rc);
      const Buf* next_norm = l + 1 < L ? &layers_[l + 1].input_norm : nullptr;
      const BufRange* next_w = next_norm && next_norm->handle >= 0 ? &next_norm->r : nullptr;
      if (cn) {
        if (!down_fused) {
          LinearOp(rc, d.down, g_.r, p.intermediate, t_.r, H, 0, m, 0, nullptr, nullptr, 0, 0, 0,
                   nullptr, xq ? 1 : 0, &xq_l, 0.0f, nullptr, XqPerm(d.down));
          Barrier(rc);
        }
        pend_wt = &d.post_ffn_norm;
        pend_scale = w.layer_scalar;
        pend_sums = down_fused ? &d.down : nullptr;
        pend_copies = down_fused ? down_fuse_copies_ : 1u;
        pend_acc = df.acc;
        if (P > 0) {
          const Pro pp{2,    &hcur,     &pend_wt->r, nullptr,    &hnext,
                       1.0f, pend_sums, &pend_acc,   pend_copies};
          // The projection's products added by the gate's workgroups (EPI 4) where the next
          // layer's prologue takes its sums (not after the last layer: a norm kernel follows).
          const PleFuse pf{
              &d.ple_proj,
              {pacc_.r.buf, pacc_.r.offset + size_t(l) * H * 4, size_t(H) * 4, nullptr}};
          const bool fused = LinearOp(rc, d.ple_gate, t_.r, H, gp_.r, P, 0, m, 3, nullptr, &ple_.r,
                                      LP, l * P, 0, nullptr, 0, nullptr, 0.0f, &pp, 0,
                                      ple_fuse_ && l + 1 < l_end ? &pf : nullptr);
          std::swap(hcur, hnext);
          if (!fused) {
            Barrier(rc);
            LinearOp(rc, d.ple_proj, gp_.r, P, t_.r, H, 0, m);
          }
          pend_wt = &d.post_ple_norm;
          pend_sums = fused ? &d.ple_proj : nullptr;
          pend_copies = 1;
          pend_acc = pf.acc;
        }
      } else if (P > 0) {
        if (fuse) {
          const Tail tl{&d.post_ffn_norm.r, 1.0f, false, nullptr};
          LinearOp(rc, d.down, g_.r, p.intermediate, t_.r, H, 0, m, 0, nullptr, nullptr, 0, 0, 0,
                   &tl, xq ? 1 : 0, &xq_l, 0.0f, nullptr, XqPerm(d.down));
        } else {
          LinearOp(rc, d.down, g_.r, p.intermediate, t_.r, H, 0, m);
          Barrier(rc);
          NormOp(rc, m, &t_, &d.post_ffn_norm, 1.0f, nullptr, false, {});
        }
        Barrier(rc);
        LinearOp(rc, d.ple_gate, h_.r, H, gp_.r, P, 0, m, 3, nullptr, &ple_.r, LP, l * P);
        Barrier(rc);
        if (fuse) {
          const Tail tl{&d.post_ple_norm.r, w.layer_scalar, next_norm != nullptr, next_w};
          LinearOp(rc, d.ple_proj, gp_.r, P, t_.r, H, 0, m, 0, nullptr, nullptr, 0, 0, 0, &tl);
        } else {
          LinearOp(rc, d.ple_proj, gp_.r, P, t_.r, H, 0, m);
          Barrier(rc);
          NormOp(rc, m, &t_, &d.post_ple_norm, w.layer_scalar, next_norm, next_norm != nullptr,
                 a_.r);
        }
      } else if (fuse) {
        const Tail tl{&d.post_ffn_norm.r, w.layer_scalar, next_norm != nullptr, next_w};
        LinearOp(rc, d.down, g_.r, p.intermediate, t_.r, H, 0, m, 0, nullptr, nullptr, 0, 0, 0, &tl,
                 xq ? 1 : 0, &xq_l, 0.0f, nullptr, XqPerm(d.down));
      } else {
        LinearOp(rc, d.down, g_.r, p.intermediate, t_.r, H, 0, m);
        Barrier(rc);
        NormOp(rc, m, &t_, &d.post_ffn_norm, w.layer_scalar, next_norm, next_norm != nullptr, a_.r);
      }
      Barrier(rc);
    }
    rc.light = false;
    if (cn && pend_wt && rc.fuse_head && !rc.ops && !pend_sums && l_end == L && m == 1) {
      // The last layer's norm and the final norm in the LM head's prologue (RecordHead).
      rc.head_pend = true;
      rc.head_wt = pend_wt;
      rc.head_scale = pend_scale;
      rc.head_h = hcur;
    } else if (cn && pend_wt) {
      // The last layer's norm, on the current residual buffer, which then goes back to h_.
      NormOp(rc, 1, &t_, pend_wt, pend_scale, nullptr, false, {}, 0, &hcur);
      Barrier(rc);
      if (hcur.offset != h_.r.offset || hcur.buf != h_.r.buf) {
        VkBufferCopy cp{hcur.offset, h_.r.offset, size_t(H) * 4};
        vkCmdCopyBuffer(rc.cmd, hcur.buf, h_.r.buf, 1, &cp);
        Barrier(rc);
      }
    }
  }

  // The head; copy_out false leaves the readback copy to RecordHeadCopy (resident capture).
  void RecordHead(Rec& rc, int out_first, int count, OutputMode mode, bool copy_out = true) {
    const int H = cfg_.hidden_size, V = cfg_.vocab_size;
    if (rc.head_pend && out_first == 0 && count == 1) {
      // h' = (h + rmsnorm(t) wt) scale, x = rmsnorm(h') final_norm in every workgroup of the head
      // (PRO 1; its grid capped as the other one-token linears', so once per workgroup)
      rc.head_pend = false;
      Pro ph{
          1,       &rc.head_h,   &rc.head_wt->r, final_norm_.handle >= 0 ? &final_norm_.r : nullptr,
          nullptr, rc.head_scale};
      ph.vec = head_pro_vec_;
      LinearOp(rc, lm_head_, t_.r, H, logits_.r, V, 0, count, 2, nullptr, nullptr, 0, 0, 0, nullptr,
               0, nullptr, 0.0f, &ph);
    } else {
      if (rc.head_pend) throw Error(ErrorCode::kInternal, "vulkan: the head's pending norm");
      NormOp(rc, count, nullptr, nullptr, 1.0f, &final_norm_, true, hn_.r, out_first);
      Barrier(rc);
      LinearOp(rc, lm_head_, hn_.r, H, logits_.r, V, 0, count, 2);
    }
    Barrier(rc);
    if (mode == OutputMode::kLogits) {
      if (copy_out) RecordHeadCopy(rc, count, mode);
      return;
    }
    ReducePush pc{static_cast<uint32_t>(V), vocab_block_, static_cast<uint32_t>(nblocks_),
                  mode == OutputMode::kSelect ? 1u : 0u};
    std::array<BufRange, vk::kBindings> b{};
    b[0] = logits_.r;
    b[1] = mask_.r;
    b[2] = part_.r;
    b[3] = res_.r;
    b[4] = reduce_cnt_.r;
    const uint32_t reg = (vocab_block_ + kWG - 1) / kWG;
    if (reduce_last_ && reg <= 16 && !rc.ops) {
      // One dispatch: each block reduced from registers, the row's last block merging them all.
      Dispatch(rc, "logits_reduce", {0, 1, reg}, b, &pc, sizeof(pc), nblocks_, count);
      Barrier(rc);
    } else {
      Dispatch(rc, "logits_reduce", {0}, b, &pc, sizeof(pc), nblocks_, count);
      Barrier(rc);
      Dispatch(rc, "logits_reduce", {1}, b, &pc, sizeof(pc), count);
      Barrier(rc);
    }
    if (copy_out) RecordHeadCopy(rc, count, mode);
  }
  void RecordHeadCopy(Rec& rc, int count, OutputMode mode) {
    if (mode == OutputMode::kLogits) {
      VkBufferCopy cp{logits_.r.offset, out_host_.r.offset, size_t(count) * cfg_.vocab_size * 4};
      vkCmdCopyBuffer(rc.cmd, logits_.r.buf, out_host_.r.buf, 1, &cp);
    } else {
      VkBufferCopy cp{res_.r.offset, out_host_.r.offset, size_t(count) * 8};
      vkCmdCopyBuffer(rc.cmd, res_.r.buf, out_host_.r.buf, 1, &cp);
    }
  }

  // The buffers a one-token step accumulates into, zeroed before it: the quantized inputs gate/up
  // writes for the down projections (XQ 2) and the PLE and down projections' sums (EPI 4, DJ).
  void ZeroOneTokenScratch(VkCommandBuffer cmd) {
    if (empty_mode_ == 7 || empty_mode_ == 8)
      vkCmdFillBuffer(cmd, flags_.r.buf, flags_.r.offset, flags_.r.size, 0);
    vkCmdFillBuffer(cmd, xq_.r.buf, xq_.r.offset, xq_.r.size, 0);
    if (pacc_.handle >= 0) vkCmdFillBuffer(cmd, pacc_.r.buf, pacc_.r.offset, pacc_.r.size, 0);
  }

  // early (one-token steps of the early-submit path): the copies wait for the host's events,
  // ev_in_ before the first; with the split staging the PLE rows' and mask's copies are left to
  // RecordBody (RecordSideInputs after the first phase's dispatches: a wait there holds back only
  // what follows it), else ev_in_ covers them too.
  void RecordInputs(Rec& rc, int m, OutputMode mode, bool early = false) {
    const int H = cfg_.hidden_size;
    const VkBuffer src = in_host_.r.buf;
    const VkDeviceSize base = in_host_.r.offset;
    if (early) dev_->WaitHostEvent(rc.cmd, ev_in_);
    VkBufferCopy cp{base, step_.r.offset, 16};
    vkCmdCopyBuffer(rc.cmd, src, step_.r.buf, 1, &cp);
    if (m > 1 && gpu_rows_) {
      RecordGpuRows(rc, model_.embed(), in_x0_off_, h_.r, m);
    } else {
      cp = {base + in_x0_off_, h_.r.offset, size_t(m) * H * 4};
      vkCmdCopyBuffer(rc.cmd, src, h_.r.buf, 1, &cp);
    }
    // One-token steps (split): the PLE rows and the mask come from host memory, copied (with the
    // scratch fills) after the barrier: they are first read after the body's first phase (by the
    // ple kernel, the head, the first gate/up), which ends with a full barrier, so their copies
    // run beside it. Every caller records the body (or, resident, a barrier) next.
    const bool split = m == 1 && in_side_.handle >= 0;
    if (split) Barrier(rc);
    if (split && early) {
      rc.side_pending = true;
      rc.side_mode = mode;
      return;
    }
    RecordRestInputs(rc, m, mode, split);
    if (!split) Barrier(rc);
  }

  // The PLE rows' and mask's copies (from the split staging or the main one) and a one-token
  // step's scratch fills.
  void RecordRestInputs(Rec& rc, int m, OutputMode mode, bool split) {
    const int LP = cfg_.num_layers * cfg_.hidden_size_per_layer_input;
    const VkDeviceSize base = in_host_.r.offset;
    const VkBuffer rest = split ? in_side_.r.buf : in_host_.r.buf;
    const VkDeviceSize tok_at = split ? in_side_.r.offset : base + in_tok_off_;
    const VkDeviceSize mask_at =
        split ? in_side_.r.offset + in_side_mask_off_ : base + in_mask_off_;
    if (LP > 0 && m > 1 && gpu_rows_) {
      RecordGpuRows(rc, model_.ple_embed(), in_tok_off_, tok_.r, m);
    } else if (LP > 0) {
      const VkBufferCopy cp{tok_at, tok_.r.offset, size_t(m) * LP * 4};
      vkCmdCopyBuffer(rc.cmd, rest, tok_.r.buf, 1, &cp);
    }
    if (mode == OutputMode::kSelect) {
      const VkBufferCopy cp{mask_at, mask_.r.offset, mask_.r.size};
      vkCmdCopyBuffer(rc.cmd, rest, mask_.r.buf, 1, &cp);
    }
    if (m == 1) ZeroOneTokenScratch(rc.cmd);
  }

  // The split staging's copies of an early-submit step, after the host's second event.
  void RecordSideInputs(Rec& rc) {
    rc.side_pending = false;
    dev_->WaitHostEvent(rc.cmd, ev_side_);
    RecordRestInputs(rc, 1, rc.side_mode, true);
  }

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
  VkCommandBuffer DecodeCommand(OutputMode mode) {
    const bool long_ctx = LongContextStep();
    VkCommandBuffer& cb = decode_cmd_[long_ctx ? 1 : 0][static_cast<int>(mode)];
    if (cb) return cb;
    cb = dev_->AllocCommandBuffer();
    Begin(cb, true);
    Rec rc{cb};
    rc.long_ctx = long_ctx;
    rc.fuse_head = head_norm_ && mode != OutputMode::kNone;
    if (step_times_) {
      dev_->ResetTimestamps(cb, 2);
      // (with early submission the first timestamp follows the input event's wait; the wait holds
      // back transfers only, so a driver may still write the timestamp before it ends)
      if (early_submit_) dev_->WaitHostEvent(cb, ev_in_);
      dev_->WriteTimestamp(cb, 0);
    }
    RecordInputs(rc, 1, mode, early_submit_ != 0);
    RecordBody(rc, 1, splits_);
    if (mode != OutputMode::kNone) RecordHead(rc, 0, 1, mode);
    if (step_times_) dev_->WriteTimestamp(cb, 1);
    End(cb);
    if (mode == OutputMode::kArgmax) {
      decode_dispatches_ = rc.dispatches;
      decode_barriers_ = rc.barriers;
    }
    return cb;
  }

  // The resident decode step for an output mode: the one-token body and head captured as
  // resident.comp operations (uploaded once), run by one dispatch of resident_wgs_ workgroups.
  // Returns VK_NULL_HANDLE (and turns the resident path off) where the step cannot be captured.
  VkCommandBuffer ResidentCommand(OutputMode mode) {
    const int mi = static_cast<int>(mode);
    VkCommandBuffer& cb = resident_cmd_[mi];
    if (cb) return cb;
    std::vector<uint32_t> ops;
    Rec cap{VK_NULL_HANDLE};
    cap.ops = &ops;
    cap.pool = h_.r.buf;
    std::vector<std::string> labels;
    cap.phase_labels = &labels;
    RecordBody(cap, 1, splits_);
    if (mode != OutputMode::kNone) RecordHead(cap, 0, 1, mode, /*copy_out=*/false);
    const BufRange whole = dev_->Whole(cap.pool);
    if (!cap.capture_ok || ops.empty() || !whole.buf || whole.size > dev_->max_range() ||
        grid_.r.buf != cap.pool) {
      if (resident_note_.empty()) resident_note_ = "the device pool is not one bindable buffer";
      resident_ = false;
      return VK_NULL_HANDLE;
    }
    Buf& ob = ops_buf_[mi];
    ob = Reserve(Pool::kDevice, ops.size() * 4);
    dev_->Commit();
    Resolve(ob);
    dev_->Upload(ob.r, 0, ops.data(), ops.size() * 4);
    cb = dev_->AllocCommandBuffer();
    Begin(cb, true);
    Rec rc{cb};
    RecordInputs(rc, 1, mode);
    vkCmdFillBuffer(cb, grid_.r.buf, grid_.r.offset, 8, 0);
    Barrier(rc);
    ResidentPush pc{static_cast<uint32_t>(ops.size() / kOpWords),
                    static_cast<uint32_t>(grid_.r.offset / 4), resident_spin_,
                    static_cast<uint32_t>(EnvInt("GEMMA_VULKAN_RESIDENT_ROWS", 1) != 0), 0};
    std::array<BufRange, vk::kBindings> b{};
    b[0] = whole;
    b[1] = ob.r;
    const bool prof = resident_profile_ && mode == OutputMode::kArgmax;
    if (prof) {
      pc.prof = static_cast<uint32_t>(prof_.r.offset / 4);
      phase_labels_ = labels;
    }
    const char* shader = prof ? "resident_dp_prof" : int_dot_ ? "resident_dp" : "resident";
    Dispatch(rc, shader, {cap.xq_max}, b, &pc, sizeof(pc), static_cast<uint32_t>(resident_wgs_),
             1, 1, /*local_size=*/0);
    Barrier(rc);
    if (mode != OutputMode::kNone) RecordHeadCopy(rc, 1, mode);
    VkBufferCopy cp{grid_.r.offset, flag_host_.r.offset, 8};
    vkCmdCopyBuffer(cb, grid_.r.buf, flag_host_.r.buf, 1, &cp);
    if (prof) {
      cp = {prof_.r.offset, prof_host_.r.offset,
            std::min<size_t>(prof_.r.size, prof_host_.r.size)};
      vkCmdCopyBuffer(cb, prof_.r.buf, prof_host_.r.buf, 1, &cp);
    }
    End(cb);
    if (mode == OutputMode::kArgmax) {
      resident_ops_ = static_cast<int>(ops.size() / kOpWords);
      resident_phases_ = cap.barriers;
    }
    return cb;
  }

  // GEMMA_VULKAN_RESIDENT_PROFILE=1: the device clock after every grid barrier of argmax steps,
  // summed per phase label; printed to stderr after 16 steps (clock units of the device: ns on
  // NVIDIA).
  void AccumulateProfile() {
    const uint32_t* t = reinterpret_cast<const uint32_t*>(prof_host_.r.mapped);
    const size_t n = std::min(phase_labels_.size(), prof_host_.r.size / 8 - 1);
    auto at = [&](size_t i) { return uint64_t(t[2 * i]) | (uint64_t(t[2 * i + 1]) << 32); };
    for (size_t i = 0; i < n; ++i) prof_sum_[phase_labels_[i]] += double(at(i + 1) - at(i));
    prof_total_ += double(at(n) - at(0));
    if (++prof_steps_ != 16) return;
    std::vector<std::pair<double, std::string>> rows;
    for (const auto& [k, v] : prof_sum_) rows.emplace_back(v, k);
    std::sort(rows.rbegin(), rows.rend());
    std::fprintf(stderr,
                 "\n| resident phase (first operation), %d argmax steps | us per token | share |\n"
                 "|---|---|---|\n",
                 prof_steps_);
    for (const auto& [v, k] : rows) {
      std::fprintf(stderr, "| %s | %.1f | %.1f%% |\n", k.c_str(), v / prof_steps_ / 1e3,
                   100 * v / prof_total_);
    }
    std::fprintf(stderr, "| total (%zu grid barriers) | %.1f | |\n", n,
                 prof_total_ / prof_steps_ / 1e3);
  }

  // One decoded token: the resident step where it is on, else (or after a resident step whose grid
  // barrier timed out: the step is redone, the path turned off) the dispatch path.
  void SubmitDecode(OutputMode mode) {
    if (resident_) {
      VkCommandBuffer cb = ResidentCommand(mode);
      if (cb) {
        dev_->Submit(cb);
        uint32_t flags[2];
        std::memcpy(flags, flag_host_.r.mapped, sizeof(flags));
        if (flags[1] == 0) {
          if (resident_profile_ && mode == OutputMode::kArgmax) AccumulateProfile();
          return;
        }
        resident_ = false;
        ++resident_fallbacks_;
        std::fprintf(stderr,
                     "gemma: vulkan: resident decode with %d workgroups timed out at a grid "
                     "barrier (not all resident?); decoding with dispatches\n",
                     resident_wgs_);
        dev_->Fill(counter_.r, 0);  // tail counters a cut-short step may have left
        dev_->Fill(hcount_.r, 0);
      }
    }
    if (!step_times_) {
      SubmitFilledDecode(DecodeCommand(mode));
      return;
    }
    // GEMMA_VULKAN_STEP_TIMES=1 (measurement): the step's GPU time (timestamps at the command
    // buffer's start and end) against the host's time in Submit (submission, the fence wait) and
    // in the rest of Forward, medians over each 64 steps printed to stderr.
    const VkCommandBuffer cb = DecodeCommand(mode);
    const auto t0 = std::chrono::steady_clock::now();
    SubmitFilledDecode(cb);
    NoteStepTimes(t0, std::chrono::steady_clock::now());
  }

  // A one-token step's command buffer (DecodeCommand) submitted with its inputs already written
  // (the resident path's fallback, and where it could not be captured): with early submission the
  // buffer waits on the host's events, so they are set first (a wait nobody sets would hold the
  // queue forever) and reset after.
  void SubmitFilledDecode(VkCommandBuffer cb) {
    if (early_submit_) {
      dev_->SetEvent(ev_in_);
      dev_->SetEvent(ev_side_);
    }
    dev_->Submit(cb);
    if (early_submit_) {
      dev_->ResetEvent(ev_in_);
      dev_->ResetEvent(ev_side_);
    }
  }

  // GEMMA_VULKAN_STEP_TIMES: the step's timestamps and the host's times, medians printed per 64.
  void NoteStepTimes(std::chrono::steady_clock::time_point t0,
                     std::chrono::steady_clock::time_point t1) {
    const std::vector<double> ts = dev_->ReadTimestamps(2);
    step_gpu_us_.push_back((ts[1] - ts[0]) * 1e-3);
    step_submit_us_.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    step_call_us_.push_back(dev_->last_submit_call_us());
    if (step_gpu_us_.size() == 64) {
      auto med = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      std::fprintf(stderr,
                   "| decode step, median of 64 (GEMMA_VULKAN_STEP_TIMES%s) | GPU %.1f us | "
                   "submit to fence %.1f us (vkQueueSubmit %.1f) | inputs filled in %.1f us |\n",
                   early_submit_ == 1 && !resident_ ? ", early submit" : "", med(step_gpu_us_),
                   med(step_submit_us_), med(step_call_us_),
                   step_fill_us_.empty() ? 0.0 : med(step_fill_us_));
      step_call_us_.clear();
      step_gpu_us_.clear();
      step_submit_us_.clear();
      step_fill_us_.clear();
    }
  }

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
  // Runs one linear (epilogue 0 store, 1 gelu(lin) * second, 2 softcap) over n tokens on this
  // backend's device, through the kernel a step of n tokens would use. Buffers are added per call.
  std::vector<float> RunLinear(const Linear& lin, const Linear* second, const float* x, int n,
                               uint32_t epi) {
    DevLinear d = PlanLinear(lin), d2;
    if (second) d2 = PlanLinear(*second);
    Buf xb = Reserve(Pool::kDevice, size_t(n) * lin.cols * 4);
    Buf yb = Reserve(Pool::kDevice, size_t(n) * lin.rows * 4);
    Buf host = Reserve(Pool::kHost, size_t(n) * lin.rows * 4);
    // linear_cm's quantized-input slots are sized for a chunk; a test may pass more tokens.
    const size_t part_bytes = (size_t(n) * lin.rows * 4 + 255) / 256 * 256;
    Buf slots = coop_ ? Reserve(Pool::kDevice, size_t(n) * coop_ld_max_ * 16 * kCoopSlots) : Buf{};
    Buf parts = coop_ ? Reserve(Pool::kDevice, part_bytes * kCoopSlots) : Buf{};
    dev_->Commit();
    std::optional<CoopSlotsSwap> swap;
    if (coop_) {
      Resolve(slots);
      Resolve(parts);
      swap.emplace(*this, slots, size_t(n) * coop_ld_max_ * 16, parts, part_bytes);
    }
    UploadLinear(d);
    if (second) UploadLinear(d2);
    Resolve(xb);
    Resolve(yb);
    Resolve(host);
    dev_->Upload(xb.r, 0, x, size_t(n) * lin.cols * 4);
    VkCommandBuffer cb = head_cmd_;
    Begin(cb, false);
    Rec rc{cb};
    LinearOp(rc, d, xb.r, lin.cols, yb.r, lin.rows, 0, n, epi, second ? &d2 : nullptr);
    Barrier(rc);
    VkBufferCopy cp{yb.r.offset, host.r.offset, size_t(n) * lin.rows * 4};
    vkCmdCopyBuffer(cb, yb.r.buf, host.r.buf, 1, &cp);
    End(cb);
    dev_->Submit(cb);
    const float* f = reinterpret_cast<const float*>(host.r.mapped);
    return std::vector<float>(f, f + size_t(n) * lin.rows);
  }

  // Prefill attention on matrix units over m query rows (q[t][nh hd]) and the K / V cache rings
  // k / v ([ring][nkv hd]; step.pos0 / step.m set): q split into hi + lo f16 rows (split_f16
  // QROWS: [K/V head][token][group] order, a power of two per row), then attention_cm, 32 rows of
  // one K/V head per workgroup, into out[t][nh hd].
  void AttnCmOp(Rec& rc, const BufRange& q, const BufRange& k, const BufRange& v,
                const BufRange& out, int nh, int nkv, int hd, int ring, int window, int m) {
    const uint32_t nch = AttnCmChunks(hd), qld = nch * 8;
    const uint32_t group = static_cast<uint32_t>(nh / nkv), tpw = 32 / group;
    const int sh = TakeCoopSlot(), sl = TakeCoopSlot();
    const SplitQPush qp{static_cast<uint32_t>(hd),
                        static_cast<uint32_t>(nh * hd),
                        0u,
                        qld,
                        static_cast<uint32_t>(nh),
                        group,
                        static_cast<uint32_t>(m)};
    std::array<BufRange, vk::kBindings> qb{};
    qb[2] = q;
    qb[3] = CoopSlot(sh);
    qb[4] = CoopSlot(sl);
    qb[9] = CoopPart(sh);
    Dispatch(rc, "split_f16", {1u}, qb, &qp, sizeof(qp), 1, static_cast<uint32_t>(m * nh), 1,
             /*local_size=*/0);
    Barrier(rc);
    const AttnCmPush ap{static_cast<uint32_t>(nh),
                        static_cast<uint32_t>(nkv),
                        static_cast<uint32_t>(hd),
                        static_cast<uint32_t>(ring),
                        static_cast<uint32_t>(window),
                        static_cast<uint32_t>(nh * hd),
                        qld};
    std::array<BufRange, vk::kBindings> b{};
    b[0] = CoopSlot(sh);
    b[1] = k;
    b[2] = v;
    b[3] = CoopSlot(sl);
    b[4] = CoopPart(sh);
    b[5] = out;
    Dispatch(rc,
             nch == 1   ? "attention_cm1"
             : nch == 4 ? "attention_cm4"
                        : "attention_cm8",
             {attn_cm_acc_, attn_cm_rot_}, b, &ap, sizeof(ap),
             (static_cast<uint32_t>(m) + tpw - 1) / tpw, static_cast<uint32_t>(nkv), 1,
             /*local_size=*/0);
    Barrier(rc);
  }

  // Kernel test hook: AttnCmOp over uploaded q and K / V rings at position pos0 (empty where the
  // device or the shape does not take the matrix-unit path).
  std::vector<float> RunAttnCm(const float* q, const float* k, const float* v, int nh, int nkv,
                               int hd, int ring, int window, int pos0, int m) {
    if (!attn_cm_ || nh % nkv != 0) return {};
    const size_t qn = size_t(m) * nh * hd, kvn = size_t(ring) * nkv * hd;
    const size_t slot_bytes = (size_t(m) * nh + 32) * AttnCmChunks(hd) * 8 * 16;
    const size_t part_bytes = ((size_t(m) * nh + 32) * 4 + 255) / 256 * 256;
    Buf qb = Reserve(Pool::kDevice, qn * 4), kb = Reserve(Pool::kDevice, kvn * 4),
        vb = Reserve(Pool::kDevice, kvn * 4), ob = Reserve(Pool::kDevice, qn * 4),
        host = Reserve(Pool::kHost, qn * 4),
        slots = Reserve(Pool::kDevice, slot_bytes * kCoopSlots),
        parts = Reserve(Pool::kDevice, part_bytes * kCoopSlots);
    dev_->Commit();
    for (Buf* b : {&qb, &kb, &vb, &ob, &host, &slots, &parts}) Resolve(*b);
    const CoopSlotsSwap swap(*this, slots, slot_bytes, parts, part_bytes);
    const bool shape = AttnCmShape(hd, nh, nkv, m);
    std::vector<float> r;
    if (shape) {
      dev_->Upload(qb.r, 0, q, qn * 4);
      dev_->Upload(kb.r, 0, k, kvn * 4);
      dev_->Upload(vb.r, 0, v, kvn * 4);
      VkCommandBuffer cb = head_cmd_;
      Begin(cb, false);
      Rec rc{cb};
      const uint32_t st[4] = {static_cast<uint32_t>(pos0), static_cast<uint32_t>(m), 0u, 0u};
      vkCmdUpdateBuffer(cb, step_.r.buf, step_.r.offset, sizeof(st), st);
      Barrier(rc);
      AttnCmOp(rc, qb.r, kb.r, vb.r, ob.r, nh, nkv, hd, ring, window, m);
      VkBufferCopy cp{ob.r.offset, host.r.offset, qn * 4};
      vkCmdCopyBuffer(cb, ob.r.buf, host.r.buf, 1, &cp);
      End(cb);
      dev_->Submit(cb);
      const float* f = reinterpret_cast<const float*>(host.r.mapped);
      r.assign(f, f + qn);
    }
    return r;
  }

  // One step over `tokens` with the `nth` dispatch labelled `label` (linear_dp or attention) run
  // as its PROBE variant: per-stage device-clock times of its workgroups, as a markdown table.
  std::string ProbeKernel(std::span<const int32_t> tokens, const std::string& label, int nth) {
    const int m = static_cast<int>(tokens.size());
    if (!dev_->device_clock() || !dev_->subgroup_clock())
      return "probe: the device has no shader device clock or no subgroup clock\n";
    if (m == 0 || m > chunk_ || window_.cached() + m > capacity_) return "probe: bad step\n";
    FillInputs(tokens, OutputMode::kArgmax, nullptr);
    VkCommandBuffer cb = head_cmd_;
    Begin(cb, false);
    vkCmdFillBuffer(cb, prof_.r.buf, prof_.r.offset, prof_.r.size, 0);
    dev_->Barrier(cb);
    Rec rc{cb};
    RecordInputs(rc, m, OutputMode::kArgmax);
    rc.probe_label = &label;
    rc.probe_nth = nth;
    if (m == 1) {
      rc.fuse_head = head_norm_;  // (as DecodeCommand)
      rc.long_ctx = LongContextStep();
      RecordBody(rc, 1, splits_);
      RecordHead(rc, 0, 1, OutputMode::kArgmax);
    } else {
      RecordHead(rc, RecordPromptStep(rc, m, window_.cached(), m - 1, 1), 1, OutputMode::kArgmax);
    }
    dev_->Barrier(cb);
    const VkBufferCopy cp{prof_.r.offset, prof_host_.r.offset,
                          std::min<size_t>(prof_.r.size, prof_host_.r.size)};
    vkCmdCopyBuffer(cb, prof_.r.buf, prof_host_.r.buf, 1, &cp);
    End(cb);
    dev_->Submit(cb);
    if (!rc.probe_wgs) return "probe: no dispatch labelled '" + label + "'\n";
    const uint32_t* raw = reinterpret_cast<const uint32_t*>(prof_host_.r.mapped);
    const uint32_t n = std::min<uint32_t>(rc.probe_wgs, 4096);
    // Slot k of workgroup w: the device clock (ns); slot 8 + k: its compute unit's cycles.
    auto word = [&](uint32_t w, int slot) {
      return uint64_t(raw[(w * 16 + slot) * 2]) | (uint64_t(raw[(w * 16 + slot) * 2 + 1]) << 32);
    };
    auto at = [&](uint32_t w, int k) { return static_cast<double>(word(w, k)); };
    // Per workgroup: its first and last written points (a kernel may skip some, e.g. the
    // prologue points of a linear without a prologue).
    double t0 = 1e300, s1 = 0, e1 = 0, span_ns = 0, span_cycles = 0;
    int first = 8, last = -1;
    for (uint32_t w = 0; w < n; ++w) {
      int wf = -1, wl = -1;
      for (int k = 0; k < 8; ++k) {
        if (word(w, k) == 0) continue;
        if (wf < 0) wf = k;
        wl = k;
        first = std::min(first, k);
        last = std::max(last, k);
      }
      if (wf < 0) continue;
      t0 = std::min(t0, at(w, wf));
      s1 = std::max(s1, at(w, wf));
      e1 = std::max(e1, at(w, wl));
      span_ns += at(w, wl) - at(w, wf);
      span_cycles += static_cast<double>(word(w, 8 + wl) - word(w, 8 + wf));
    }
    if (last < 0) return "probe: '" + label + "' wrote no points\n";
    // Cycles per ns from the workgroups' spans (the device clock ticks coarsely: ~0.26 us on the
    // H200); stage durations come from the cycle counter. Spans too short to time: cycles.
    const double ghz = span_ns >= 1000.0 ? span_cycles / span_ns : 0.0;
    char buf[256];
    std::string out = "| probe: " + label + " #" + std::to_string(nth) + " | " +
                      std::to_string(rc.probe_wgs) + " workgroups |\n|---|---|\n";
    std::snprintf(buf, sizeof(buf),
                  "| first start to last end | %.2f us |\n"
                  "| first start to last start | %.2f us |\n",
                  (e1 - t0) * 1e-3, (s1 - t0) * 1e-3);
    out += buf;
    if (ghz > 0) {
      std::snprintf(buf, sizeof(buf), "| compute-unit clock during the probe | %.0f MHz |\n",
                    ghz * 1e3);
      out += buf;
    }
    // Stages: from each written point to the workgroup's next written point, in cycles.
    std::map<std::pair<int, int>, std::array<double, 3>> stages;  // sum, max, count
    for (uint32_t w = 0; w < n; ++w) {
      int prev = -1;
      for (int k = first; k <= last; ++k) {
        if (word(w, k) == 0) continue;
        if (prev >= 0) {
          std::array<double, 3>& st = stages[{prev, k}];
          const double d = static_cast<double>(word(w, 8 + k) - word(w, 8 + prev));
          st[0] += d;
          st[1] = std::max(st[1], d);
          st[2] += 1;
        }
        prev = k;
      }
    }
    for (const auto& [ks, st] : stages) {
      if (ghz > 0) {
        std::snprintf(buf, sizeof(buf),
                      "| probe %d -> %d: mean / max over %d workgroups | %.3f / %.3f us |\n",
                      ks.first, ks.second, static_cast<int>(st[2]),
                      st[0] / st[2] / ghz * 1e-3, st[1] / ghz * 1e-3);
      } else {
        std::snprintf(buf, sizeof(buf),
                      "| probe %d -> %d: mean / max over %d workgroups | %.0f / %.0f cycles |\n",
                      ks.first, ks.second, static_cast<int>(st[2]), st[0] / st[2], st[1]);
      }
      out += buf;
    }
    return out;
  }

  std::vector<std::pair<std::string, double>> Profile(std::span<const int32_t> tokens) {
    std::vector<std::pair<std::string, double>> out;
    const int m = static_cast<int>(tokens.size());
    if (!dev_->has_timestamps() || m == 0 || m > chunk_ || window_.cached() + m > capacity_)
      return out;
    FillInputs(tokens, OutputMode::kArgmax, nullptr);
    std::vector<std::string> labels;
    VkCommandBuffer cb = head_cmd_;
    Begin(cb, false);
    dev_->ResetTimestamps(cb, Device::kMaxTimestamps);
    dev_->WriteTimestamp(cb, 0);
    Rec rc{cb};
    RecordInputs(rc, m, OutputMode::kArgmax);
    labels.push_back("step inputs (copies, fills, barrier)");
    dev_->WriteTimestamp(cb, 1);
    rc.labels = &labels;
    if (m == 1) {
      rc.fuse_head = head_norm_;  // (as DecodeCommand)
      rc.long_ctx = LongContextStep();
      RecordBody(rc, 1, splits_);
      RecordHead(rc, 0, 1, OutputMode::kArgmax);
    } else {
      RecordHead(rc, RecordPromptStep(rc, m, window_.cached(), m - 1, 1), 1, OutputMode::kArgmax);
    }
    End(cb);
    dev_->Submit(cb);
    const std::vector<double> ts = dev_->ReadTimestamps(static_cast<uint32_t>(labels.size() + 1));
    for (size_t i = 0; i < labels.size(); ++i) {
      auto it =
          std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == labels[i]; });
      const double d = ts[i + 1] - ts[i];
      if (it == out.end())
        out.emplace_back(labels[i], d);
      else
        it->second += d;
    }
    return out;
  }

 private:
  // Writes a step's inputs into the host staging buffer: step values, embedding rows, PLE rows
  // and (select) the allowed mask.
  // embed_rows.comp's kind code for a table it decodes (0: the host decodes it): bf16, f16, and
  // quantized kinds with whole scale blocks, whose record (codes, then scales) is no longer than
  // the f32 row the staging region holds.
  static uint32_t GpuRowKind(const Embedding& e) {
    if (e.cols <= 0 || !e.data) return 0;
    switch (e.kind) {
      case WeightKind::kBF16:
        return e.row_bytes == size_t(e.cols) * 2 ? 1 : 0;
      case WeightKind::kF16:
        return e.row_bytes == size_t(e.cols) * 2 ? 2 : 0;
      case WeightKind::kQ2:
      case WeightKind::kQ4:
      case WeightKind::kQ8: {
        if (!e.scale || e.scale_blocks <= 0 || e.cols % e.scale_blocks != 0) return 0;
        const int bits = WeightKindBits(e.kind);
        if (e.row_bytes != (size_t(e.cols) * bits + 7) / 8) return 0;
        if (GpuRowRecordWords(e) * 4 > size_t(e.cols) * 4) return 0;
        return e.kind == WeightKind::kQ2 ? 3 : e.kind == WeightKind::kQ4 ? 4 : 5;
      }
      default:
        return 0;
    }
  }
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
  void RecordGpuRows(Rec& rc, const Embedding& e, VkDeviceSize off, const BufRange& out, int m) {
    struct {
      uint32_t cols, rec_words, rec0, scale_word, block, y_stride;
      float embed_scale;
    } pc{static_cast<uint32_t>(e.cols),
         static_cast<uint32_t>(GpuRowRecordWords(e)),
         static_cast<uint32_t>(off / 4),
         static_cast<uint32_t>(GpuRowCodeWords(e)),
         static_cast<uint32_t>(IsQuantized(e.kind) ? e.cols / e.scale_blocks : 1),
         static_cast<uint32_t>(e.cols),
         e.embed_scale};
    std::array<BufRange, vk::kBindings> b{};
    b[0] = in_host_.r;
    b[3] = out;
    const uint32_t gx = std::min<uint32_t>(64, (static_cast<uint32_t>(e.cols) + 1023) / 1024);
    Dispatch(rc, "embed_rows", {GpuRowKind(e)}, b, &pc, sizeof(pc), gx, static_cast<uint32_t>(m), 1,
             /*local_size=*/0);
  }

  // `beside` (prompt chunks): run as one more task of the fill's pool, task 0, so it starts at once
  // beside the rows' tasks (after them without a pool or below 64 tokens); its exception, if any,
  // is rethrown here after the rows are written.
  void FillInputs(std::span<const int32_t> tokens, OutputMode mode,
                  const std::vector<uint64_t>* allowed,
                  const std::function<void()>* beside = nullptr) {
    const int m = static_cast<int>(tokens.size());
    const int H = cfg_.hidden_size, LP = cfg_.num_layers * cfg_.hidden_size_per_layer_input;
    uint8_t* in = in_host_.r.mapped;
    WriteStepValues(m);
    const bool gpu = m > 1 && gpu_rows_;
    auto rows = [&](int t0, int t1) {
      for (int t = t0; t < t1; ++t) {
        const int32_t id = model_.EmbedId(tokens[t]);
        if (gpu) {  // the stored rows (RecordGpuRows decodes them)
          CopyGpuRowRecord(model_.embed(), id,
                           in + in_x0_off_ + size_t(t) * GpuRowRecordWords(model_.embed()) * 4);
          if (LP > 0)
            CopyGpuRowRecord(
                model_.ple_embed(), id,
                in + in_tok_off_ + size_t(t) * GpuRowRecordWords(model_.ple_embed()) * 4);
          continue;
        }
        ref::EmbeddingRowFast(model_.embed(), id,
                              reinterpret_cast<float*>(in + in_x0_off_) + size_t(t) * H);
        if (LP > 0) {
          ref::EmbeddingRowFast(model_.ple_embed(), id,
                                reinterpret_cast<float*>(in + in_tok_off_) + size_t(t) * LP);
        }
      }
    };
    // Prompt chunks: the rows (about 10,500 dequantized floats per token on E2B) on several host
    // threads while the GPU waits for them; one-token steps stay on the caller.
    if (m == 1) {
      FillOneTokenRow(tokens[0]);
      FillOneTokenSide(tokens[0]);
    } else if (m < 64 || !fill_pool_) {
      rows(0, m);
      if (beside) (*beside)();
    } else {
      // (with `beside`, one thread records: the rows' tasks one fewer)
      const int tasks = std::max(1, fill_pool_->size() - (beside ? 1 : 0));
      const int first = beside ? 1 : 0;
      const int per = (m + tasks - 1) / tasks;
      std::exception_ptr err;
      fill_pool_->Run(tasks + first, [&](int task, int) {
        if (task < first) {
          try {
            (*beside)();
          } catch (...) {
            err = std::current_exception();
          }
          return;
        }
        const int k = task - first;
        rows(std::min(m, k * per), std::min(m, (k + 1) * per));
      });
      if (err) std::rethrow_exception(err);
    }
    if (mode == OutputMode::kSelect) FillMask(m, allowed);
  }

  // The step's position and token count (the step buffer's values) at the staging buffer's start.
  // Then (words 4-7) the step values of a prompt chunk's trailing shared layers, run for its last
  // position alone (RecordPromptStep).
  void WriteStepValues(int m) {
    const uint32_t pos = static_cast<uint32_t>(window_.cached());
    const uint32_t step[8] = {pos, static_cast<uint32_t>(m), 0, 0, pos + m - 1, 1, 0, 0};
    std::memcpy(in_host_.r.mapped, step, m > 1 ? 32 : 16);
  }

  // One token: the rows decoded into cached memory and copied into the staging buffer in one pass
  // each (the staging memory may be uncached, where element-by-element stores are slow). The
  // embedding row first, then the PLE rows (the split staging when there is one).
  void FillOneTokenRow(int32_t token) {
    const int H = cfg_.hidden_size;
    fill_row_.resize(H);
    ref::EmbeddingRowFast(model_.embed(), model_.EmbedId(token), fill_row_.data());
    std::memcpy(in_host_.r.mapped + in_x0_off_, fill_row_.data(), size_t(H) * 4);
  }
  void FillOneTokenSide(int32_t token) {
    const int LP = cfg_.num_layers * cfg_.hidden_size_per_layer_input;
    if (LP == 0) return;
    fill_row_.resize(LP);
    ref::EmbeddingRowFast(model_.ple_embed(), model_.EmbedId(token), fill_row_.data());
    uint8_t* tok = in_side_.handle >= 0 ? in_side_.r.mapped : in_host_.r.mapped + in_tok_off_;
    std::memcpy(tok, fill_row_.data(), size_t(LP) * 4);
  }
  void FillMask(int m, const std::vector<uint64_t>* allowed) {
    uint8_t* mask = m == 1 && in_side_.handle >= 0 ? in_side_.r.mapped + in_side_mask_off_
                                                   : in_host_.r.mapped + in_mask_off_;
    std::memcpy(mask, allowed->data(), size_t((cfg_.vocab_size + 31) / 32) * 4);
  }

  // A one-token step submitted before its inputs are written (GEMMA_VULKAN_EARLY_SUBMIT): the
  // command buffer waits on ev_in_ for the position and embedding row and on ev_side_ for the PLE
  // rows and mask (RecordInputs), so vkQueueSubmit and the PLE rows' decode run while the GPU
  // starts. The events are set on every path (a throw would otherwise leave the queue waiting).
  void EarlyDecode(int32_t token, OutputMode cmd_mode, OutputMode fill_mode,
                   const std::vector<uint64_t>* allowed) {
    const VkCommandBuffer cb = DecodeCommand(cmd_mode);
    const auto t0 = std::chrono::steady_clock::now();
    dev_->SubmitBegin(cb);
    // (without the split staging ev_in_ covers every copy: the PLE rows and mask come first)
    const bool split = in_side_.handle >= 0;
    auto fill_side = [&] {
      FillOneTokenSide(token);
      if (fill_mode == OutputMode::kSelect) FillMask(1, allowed);
    };
    try {
      const auto f0 = std::chrono::steady_clock::now();
      WriteStepValues(1);
      FillOneTokenRow(token);
      if (!split) fill_side();
      dev_->SetEvent(ev_in_);
      if (split) fill_side();
      dev_->SetEvent(ev_side_);
      if (step_times_)
        step_fill_us_.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - f0)
                .count());
    } catch (...) {
      try {
        dev_->SetEvent(ev_in_);
        dev_->SetEvent(ev_side_);
        dev_->SubmitWait();
      } catch (...) {
      }
      throw;
    }
    dev_->SubmitWait();
    dev_->ResetEvent(ev_in_);
    dev_->ResetEvent(ev_side_);
    if (step_times_) NoteStepTimes(t0, std::chrono::steady_clock::now());
  }

  // The body and head of a multi-token step whose outputs are rows [out_first, out_first + count):
  // with one output row (the last) or none, the layers from Model::shared_tail() (they feed only
  // their own position's logits) run for that row alone
  // (moved to row 0, the step's position and count rewritten on the device) or are skipped.
  // Returns the row the head reads from (out_first, or 0 after the move).
  int RecordPromptStep(Rec& rc, int m, int pos0, int out_first, int count) {
    const int L = cfg_.num_layers, H = cfg_.hidden_size;
    const int LP = L * cfg_.hidden_size_per_layer_input;
    const int lc = model_.shared_tail();
    if (!skip_tail_ || lc >= L || count > 1 || (count == 1 && out_first != m - 1)) {
      RecordBody(rc, m, 1);
      return out_first;
    }
    RecordBody(rc, m, 1, 0, lc);  // ends with a barrier
    if (count == 0) return out_first;
    // Row m - 1 of the residual stream, its normed input to layer lc and its PLE rows -> row 0.
    const VkDeviceSize row = size_t(m - 1) * H * 4;
    VkBufferCopy cp{h_.r.offset + row, h_.r.offset, size_t(H) * 4};
    vkCmdCopyBuffer(rc.cmd, h_.r.buf, h_.r.buf, 1, &cp);
    cp = {a_.r.offset + row, a_.r.offset, size_t(H) * 4};
    vkCmdCopyBuffer(rc.cmd, a_.r.buf, a_.r.buf, 1, &cp);
    if (LP > 0) {
      cp = {ple_.r.offset + size_t(m - 1) * LP * 4, ple_.r.offset, size_t(LP) * 4};
      vkCmdCopyBuffer(rc.cmd, ple_.r.buf, ple_.r.buf, 1, &cp);
    }
    // The tail's step values (position pos0 + m - 1, one token): written by FillInputs at the
    // staging buffer's word 4 (WriteStepValues), so the recorded chunk does not depend on pos0 and
    // can be replayed (RunChunk's cache of recorded chunks).
    (void)pos0;
    cp = {in_host_.r.offset + 16, step_.r.offset, 16};
    vkCmdCopyBuffer(rc.cmd, in_host_.r.buf, step_.r.buf, 1, &cp);
    ZeroOneTokenScratch(rc.cmd);  // as a one-token step
    Barrier(rc);
    RecordBody(rc, 1, splits_, lc, L);
    return 0;
  }

  void RunChunk(std::span<const int32_t> tokens, bool last_chunk, const ForwardRequest& req,
                ForwardResult* out) {
    const int m = static_cast<int>(tokens.size());
    const int pos0 = window_.cached();
    window_.BeginWrite(pos0, m);
    int out_first = req.all_positions ? 0 : (last_chunk ? m - 1 : m);
    int count = req.mode == OutputMode::kNone ? 0 : m - out_first;
    const bool inline_head = count <= head_rows_;
    const bool early = m == 1 && early_submit_ == 1 && !resident_;
    const auto f0 = std::chrono::steady_clock::now();
    if (!early && m == 1) {
      FillInputs(tokens, req.mode, req.allowed);
      if (step_times_)
        step_fill_us_.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - f0)
                .count());
    }
    if (early) {
      EarlyDecode(tokens[0], count > 0 ? req.mode : OutputMode::kNone, req.mode, req.allowed);
    } else if (m == 1) {
      SubmitDecode(count > 0 ? req.mode : OutputMode::kNone);
    } else {
      // Prompt chunks: the command buffer is recorded by one task of the fill's pool while the
      // others gather the rows (the recording reads none of them), then submitted
      // (GEMMA_VULKAN_RECORD_BESIDE=0: one after the other).
      // A chunk's commands depend on its length, outputs and mode alone (positions and rows come
      // from the staging buffer), so recorded chunks are kept and replayed
      // (GEMMA_VULKAN_CHUNK_CACHE entries, 0: every chunk recorded anew): every full chunk of a
      // long prompt but the first.
      const PromptKey key{m, out_first, count, static_cast<int>(req.mode)};
      PromptCmd* pc = nullptr;
      for (PromptCmd& c : prompt_cmds_)
        if (c.key == key) pc = &c;
      const bool hit = pc != nullptr;
      if (!hit && chunk_cache_ > 0) {
        if (prompt_cmds_.size() < static_cast<size_t>(chunk_cache_)) {
          prompt_cmds_.push_back({key, dev_->AllocCommandBuffer(), 0, 0});
          pc = &prompt_cmds_.back();
        } else {  // the least recently used entry is recorded anew
          pc = &*std::min_element(
              prompt_cmds_.begin(), prompt_cmds_.end(),
              [](const PromptCmd& a, const PromptCmd& b) { return a.used < b.used; });
        }
      }
      const VkCommandBuffer cmd = pc ? pc->cmd : prefill_cmd_;
      double record_us = 0;
      const std::function<void()> record = [&] {
        const auto r0 = std::chrono::steady_clock::now();
        if (pc) pc->key = PromptKey{};  // (incomplete until End: a throw leaves no entry)
        Begin(cmd, pc != nullptr);
        Rec rc{cmd};
        RecordInputs(rc, m, req.mode);
        out_first = RecordPromptStep(rc, m, pos0, out_first, count);
        if (count > 0 && inline_head) RecordHead(rc, out_first, count, req.mode);
        End(cmd);
        if (pc) {
          pc->key = key;
          pc->out_first = out_first;
        }
        record_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - r0)
                        .count();
      };
      if (hit) {
        FillInputs(tokens, req.mode, req.allowed);
        out_first = pc->out_first;
      } else if (record_beside_) {
        FillInputs(tokens, req.mode, req.allowed, &record);
      } else {
        FillInputs(tokens, req.mode, req.allowed);
        record();
      }
      if (pc) pc->used = ++prompt_cmd_clock_;
      const auto f2 = std::chrono::steady_clock::now();
      dev_->Submit(cmd);
      if (step_times_) {
        // (measurement) a prompt chunk's host time: the rows' fill and the recording (beside it or
        // after it), the submission to its fence (the GPU's time and the wait's latency)
        using us = std::chrono::duration<double, std::micro>;
        std::fprintf(stderr,
                     "prompt chunk of %d at %d: fill and record %.0f us (record %.0f us%s), "
                     "submit to fence %.0f us\n",
                     m, pos0, us(f2 - f0).count(), record_us,
                     hit              ? ", replayed"
                     : record_beside_ ? ", beside"
                                      : "",
                     us(std::chrono::steady_clock::now() - f2).count());
      }
    }
    window_.Commit(pos0 + m);
    history_.insert(history_.end(), tokens.begin(), tokens.end());
    if (count == 0) return;
    if (inline_head) {
      ReadHead(count, req.mode, out);
      return;
    }
    for (int g = 0; g < count; g += head_rows_) {
      const int n = std::min(head_rows_, count - g);
      Begin(head_cmd_, false);
      Rec rc{head_cmd_};
      RecordHead(rc, out_first + g, n, req.mode);
      End(head_cmd_);
      dev_->Submit(head_cmd_);
      ReadHead(n, req.mode, out);
    }
  }

  void ReadHead(int count, OutputMode mode, ForwardResult* out) {
    const int V = cfg_.vocab_size;
    const uint8_t* o = out_host_.r.mapped;
    if (mode == OutputMode::kLogits) {
      const float* f = reinterpret_cast<const float*>(o);
      out->logits.insert(out->logits.end(), f, f + size_t(count) * V);
      return;
    }
    for (int i = 0; i < count; ++i) {
      uint32_t r[2];
      std::memcpy(r, o + 8 * i, 8);
      if (r[0] == 0xFFFFFFFFu) throw Error(ErrorCode::kConstraint, "select: no token is allowed");
      out->ids.push_back(static_cast<int32_t>(r[0]));
      if (mode == OutputMode::kSelect) {
        float lp;
        std::memcpy(&lp, &r[1], 4);
        out->logprobs.push_back(lp);
      }
    }
  }

  const Model& model_;
  const TextConfig& cfg_;
  VulkanOptions vopt_;
  BackendOptions options_;
  bool planned_ = false;  // PlanGeometry has run
  int capacity_ = 0, slack_ = 0, sliding_ring_ = 0, chunk_ = 1;
  CacheWindow window_;
  std::vector<int32_t> history_;  // committed tokens, replayed after a device rebuild
  bool broken_ = false;
  int rebuilds_ = 0;

  std::unique_ptr<Device> dev_;
  uint32_t lanes_ = 32;
  int mm_kernel_ = 1;        // prefill linears: 1 linear_mm, 2 register-tiled (linear_mm2)
  uint32_t lanes_k_ = 6;     // a row gets 2x the lanes while it has >= lanes_k_ vectors per lane
  bool attn_tiled_ = false;  // prefill attention through attention_tiled
  bool fuse_tails_ = true;   // one-token steps fold residual norms into the preceding linear
  bool cnorm_ = false;       // one-token steps apply residual norms in the next linear (Pro)
  bool fuse_rope_ = false;   // one-token steps: q/k norm + RoPE inside attention_rope
  bool xq_shared_ = true;    // matvecs stage a pre-quantized input in shared memory
  bool xq_perm_ = false;  // gate/up writes the down projection's input in packed-dot order
  bool attn_combine_ = false;  // decode attention merges its splits in the last workgroup
  bool attn_fused_ = false;    // one-token attention through attn_fused.comp (where it fits)
  bool attn_fused_rope_ = true;   // ... with qkrope's work inside (ROPE)
  uint32_t attn_fused_mode_ = 0;  // ... 0: the last split merges, 1: a second dispatch merges
  bool attn_vpf_ = true;          // ... the next block's V rows loaded with its K rows (VPF)
  uint32_t attn_fused_dbg_ = 0;   // ... GEMMA_VULKAN_ATTN_FUSED_DBG (DBG; timing only)
  uint32_t attn_hpw_ = 2;         // ... GEMMA_VULKAN_ATTN_HPW (HPW; full-attention layers)
  int attn_hpw_from_ = 12288;     // ... from this position on (GEMMA_VULKAN_ATTN_HPW_FROM)
  int extra_dispatches_ = 0;      // GEMMA_VULKAN_EXTRA_DISPATCHES (timing only)
  uint32_t attn_kw_ = 0;          // ... keys per row group and block (0: by head dim)
  uint32_t attn_mb_ = 16;         // ... partials per round of the merge
  bool attn_vec_ = true;          // ... 16-byte loads (VEC)
  uint32_t attn_rl_max_ = 64;     // ... at most this many lanes per key row
  bool attn_nc_merge_ = true;     // ... MODE 0: partials read through the read-only alias
  bool attn_fence_ = true;        // ... MODE 0: an acquire-release arrival atomic (FENCE)
  int fused_splits_ = 0;          // ... key splits (0: by compute units)
  bool splits_set_ = false;       // the decode splits were set (options or environment)
  bool ple_fuse_ = true;          // one-token PLE projection in the gate's workgroups (EPI 4)
  uint32_t ple_lanes_ = 64;       // ... lanes per gate row (0: the general choice)
  bool down_fuse_ = true;         // one-token down projection in gate/up's workgroups (DJ)
  int down_fuse_wgs_ = 0;         // ... gate/up's workgroup cap there (0: mv_wgs_)
  bool down_fuse_late_ = true;    // ... the down words loaded after the multiply
  bool down_fuse_pairs_ = true;   // ... from a pair-major copy
  uint32_t down_fuse_copies_ = 4;  // ... copies of the sums
  bool head_norm_ = true;          // one-token decode steps: the last norms in the head's prologue
  bool dense_prefetch_ = true;     // FXW linears looping over blocks: the next block's early
  bool reduce_last_ = true;        // logits_reduce in one dispatch (LAST)
  bool head_nocap_ = false;        // GEMMA_VULKAN_HEAD_NOCAP (timing only)
  bool mv_prefetch_block_ = true;  // FAST linears looping over blocks: the next block's early
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
    if (!attn_fused_ || attn_dec_ || hd <= 0) return false;
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
  uint32_t mv_lanes_min_ = 4;   // one-token integer matvecs: fewest lanes per row (CLUSTER < SG)
  uint32_t mv_lanes_vec_ = 3;   // ... chosen for about this many 16-byte vectors per lane
  int mv_wgs_ = 0;           // one-token linears: workgroup cap (0 = one per row block)
  uint32_t mv_max_rows_ = 32768;  // ... for parts of at most this many rows
  int mv_wgs_long_ = 0;            // the cap for longer parts (0: none)
  uint32_t dense_lanes_ = 32;  // one-token dense rows of <= 8 x this many vectors: lanes per row
  int dense_wgs_ = 0;          // ... their workgroup cap (0: mv_wgs_)
  bool pack_atomic_ = false;       // the prologue packs with atomics (linear.comp PACK_ATOMIC)
  bool rms_all_ = false;           // every invocation evaluates the RMS factor (RMS_ALL)
  bool rms_fast_ = true;           // the prologues' RMS factors by Newton steps (RMS_FAST)
  bool share_x_ = true;            // one quantized input for equal input scales (SHARE_X)
  uint32_t mv_dbg_ = 0;            // linear.comp DBG (measurement only)
  bool dense_vec4_ = true;         // one-token dense rows read a vec4-staged input (FXW)
  bool int_dot_ = false;     // matvecs use packed integer dot products (linear_dp)
  bool mv_fast_ = true;      // GEMMA_VULKAN_MV_FAST: linear_dp's branch-free multiply (FAST)
  uint32_t mv_dual_loop_ = 1;  // GEMMA_VULKAN_MV_DUAL_LOOP: gate/up's two sets in one loop
  uint32_t mv_pair_loop_ = 2;  // GEMMA_VULKAN_MV_PAIR_LOOP: one set, vectors an iteration
  uint32_t atomic_dbg_ = 0;    // GEMMA_VULKAN_ATOMIC_DBG (timing only)
  bool pro_vec_ = true;        // GEMMA_VULKAN_PRO_VEC: the prologue on 16-byte operand loads
  bool head_pro_vec_ = false;  // GEMMA_VULKAN_HEAD_PRO_VEC: the head's prologue too
  uint32_t mv_xcm_ = 1;      // GEMMA_VULKAN_MV_XCM: the FAST int2 (1) / int4 (2) input chunk-major
  bool coop_ = false;        // prefill SRQ (and dense) linears on matrix units (linear_cm)
  std::unique_ptr<ThreadPool> fill_pool_;  // gathers a prompt chunk's embedding / PLE rows
  std::vector<float> fill_row_;            // a one-token step's rows before the staging copy
  int attn_pf_ = 0;  // prefill attention: attention_pf (a subgroup per query and head), 2: f32 dots
  static constexpr int kCoopSlots = 4;
  Buf xqc_;                  // linear_cm's quantized inputs, kCoopSlots slots
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
  bool attn_dec_ = false;  // decode attention: attention_dec (a subgroup per head and split)
  vk::Device::BarrierKind light_barrier_ = vk::Device::BarrierKind::kFull;  // GEMMA_VULKAN_BARRIER
  bool gpu_rows_ = false;  // prompt chunks' rows decoded by embed_rows.comp (GEMMA_VULKAN_GPU_ROWS)
  bool record_beside_ = true;  // prompt chunks recorded beside the rows' fill (..._RECORD_BESIDE)
  // Recorded prompt chunks kept for replay, by (tokens, first output, outputs, mode).
  struct PromptKey {
    int m = 0, out_first = -1, count = -1, mode = -1;
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
  int chunk_cache_ = 4;      // GEMMA_VULKAN_CHUNK_CACHE: recorded chunks kept
  bool step_times_ = false;  // GEMMA_VULKAN_STEP_TIMES: decode steps timestamped (measurement)
  int early_submit_ = 1;     // GEMMA_VULKAN_EARLY_SUBMIT: one-token steps wait on host events
  VkEvent ev_in_ = VK_NULL_HANDLE;    // ... set once the position and embedding row are written
  VkEvent ev_side_ = VK_NULL_HANDLE;  // ... once the PLE rows and the mask are
  std::vector<double> step_gpu_us_, step_submit_us_, step_fill_us_, step_call_us_;
  int probe_twice_ = 0;     // GEMMA_BENCH_PROBE_TWICE: the probed kernel runs twice (timing only)
  bool probe_all_ = false;  // GEMMA_BENCH_PROBE_ALL: every dispatch of the label probes (timing)
  Buf probe_sink_;          // ... where the ones not reported write
  int empty_mode_ = 0;     // GEMMA_VULKAN_EMPTY: every dispatch runs empty.comp (timing only)
  int flag_every_ = 0;     // GEMMA_VULKAN_FLAG_EVERY: =8's pipeline barriers kept (every k-th)
  uint32_t flag_split_ = 1;  // GEMMA_VULKAN_FLAG_SPLIT: =8's counter lines per dispatch
  // GEMMA_VULKAN_EMPTY=9: 16-byte weight vectors per invocation (GEMMA_VULKAN_EMPTY_VECS), the
  // weight region's vec4s (GEMMA_VULKAN_EMPTY_WMB MiB, at most the storage-buffer range), extra
  // reduction rounds (GEMMA_VULKAN_EMPTY_RED), atomic adds per invocation (..._ATOMS) and more
  // vectors read with the input (..._INV)
  uint32_t min_vecs_ = 3, min_wn_ = 64, min_red_ = 0, min_atoms_ = 0, min_inv_ = 0;
  uint32_t empty_code_ = 8;  // GEMMA_VULKAN_EMPTY_CODE: blocks of the fetch probe (modes 3, 4)
  // GEMMA_VULKAN_EMPTY_SHM: shared-memory words of the empty kernels by original shader prefix
  std::vector<std::pair<std::string, uint32_t>> empty_shm_;
  // GEMMA_VULKAN_EMPTY_ONLY=a,b: only dispatches whose profile label starts with a or b do.
  std::vector<std::string> empty_only_;
  int attn_dbg_ = 0;  // GEMMA_VULKAN_ATTN_DBG: attn_split.glsl's ATT_DBG (timing only)
  bool splits_adapt_ = false;  // decode attention: whole key blocks per split (ADAPT)
  bool EmptyOnly(const std::string& label) const {
    for (const std::string& p : empty_only_)
      if (label.rfind(p, 0) == 0) return true;
    return false;
  }
  uint32_t coop_bm_ = 64;
  bool attn_cm_ = false;      // GEMMA_VULKAN_ATTN_CM: prefill attention on matrix units
  uint32_t attn_cm_acc_ = 1;  // GEMMA_VULKAN_ATTN_CM_ACC: attention_cm.comp's ACC
  uint32_t attn_cm_rot_ = 1;  // GEMMA_VULKAN_ATTN_CM_ROT: its key blocks in a rotated order
  // attention_cm's 64-dim chunks of a head (its build: attention_cm1 / 4 / 8); q's split rows
  // hold 8 x that many 16-byte vectors.
  static uint32_t AttnCmChunks(int hd) { return hd <= 64 ? 1u : hd <= 256 ? 4u : 8u; }
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
  BufRange CoopPart(int i) const {
    return BufRange{partc_.r.buf, partc_.r.offset + coop_part_bytes_ * i, coop_part_bytes_, nullptr};
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
  Buf pacc_;
  Buf flags_;  // GEMMA_VULKAN_EMPTY=7: phase counters  // EPI 4: int32 sums of each layer's PLE
               // projection
  Buf h_, h2_, a_, t_, q_, kt_, vt_, attn_, g_, po_, pml_, ple_, tok_, gp_, hn_, logits_, part_, res_,
      mask_, step_, in_host_, out_host_, counter_, hcount_, xq_;
  size_t xq_region_ = 0;
  size_t in_x0_off_ = 0, in_tok_off_ = 0, in_mask_off_ = 0;
  Buf in_side_;  // one-token steps' PLE rows and mask (host memory)
  size_t in_side_mask_off_ = 0;
  bool upload_split_ = true;  // GEMMA_VULKAN_UPLOAD_SPLIT
  int head_rows_ = 1, nblocks_ = 1;
  uint32_t vocab_block_ = kVocabBlock;
  std::array<std::array<VkCommandBuffer, 4>, 2> decode_cmd_{};  // [long context][mode]
  VkCommandBuffer prefill_cmd_ = VK_NULL_HANDLE, head_cmd_ = VK_NULL_HANDLE;
  int decode_dispatches_ = 0, decode_barriers_ = 0;
  // Resident decode (resident.comp).
  int resident_wgs_ = 0;
  uint32_t resident_spin_ = 1u << 22;
  bool resident_ = false;
  std::array<VkCommandBuffer, 4> resident_cmd_{};
  std::array<Buf, 4> ops_buf_{};
  Buf grid_, flag_host_;  // {arrivals, error} and its host copy
  int resident_ops_ = 0, resident_phases_ = 0, resident_fallbacks_ = 0;
  std::string resident_note_;  // why the resident path is off (where it was asked for)
  bool resident_profile_ = false;
  Buf prof_, prof_host_;
  Buf reduce_cnt_;
  std::vector<std::string> phase_labels_;
  std::map<std::string, double> prof_sum_;
  double prof_total_ = 0;
  int prof_steps_ = 0;
};

}  // namespace

std::unique_ptr<Backend> CreateVulkanBackend(const Model& model, const BackendOptions& options,
                                             const VulkanOptions& vulkan) {
  return std::make_unique<VulkanBackend>(model, options, vulkan);
}

std::unique_ptr<Backend> CreateVulkanBackend(const Model& model, const BackendOptions& options) {
  return CreateVulkanBackend(model, options, VulkanOptions());
}

bool GetVulkanStats(const Backend& backend, VulkanStats* stats) {
  const auto* vb = dynamic_cast<const VulkanBackend*>(&backend);
  if (!vb) return false;
  vb->GetStats(stats);
  return true;
}

double MeasureVulkanCopyBandwidth(Backend& backend, size_t bytes) {
  auto* vb = dynamic_cast<VulkanBackend*>(&backend);
  return vb ? vb->CopyBandwidth(bytes) : 0.0;
}

VulkanDispatchCost MeasureVulkanDispatchCost(Backend& backend, int n) {
  auto* vb = dynamic_cast<VulkanBackend*>(&backend);
  return vb ? vb->DispatchCost(n) : VulkanDispatchCost{};
}

double MeasureVulkanWeightReadBandwidth(Backend& backend) {
  auto* vb = dynamic_cast<VulkanBackend*>(&backend);
  return vb ? vb->WeightReadBandwidth(5) : 0.0;
}

double MeasureVulkanStreamReadBandwidth(Backend& backend, size_t* range_bytes) {
  auto* vb = dynamic_cast<VulkanBackend*>(&backend);
  return vb ? vb->StreamReadBandwidth(5, range_bytes) : 0.0;
}

std::string ProbeVulkanKernel(Backend& backend, std::span<const int32_t> tokens,
                              const std::string& label, int nth) {
  auto* vb = dynamic_cast<VulkanBackend*>(&backend);
  if (!vb) return {};
  return vb->ProbeKernel(tokens, label, nth);
}

std::vector<std::pair<std::string, double>> ProfileVulkanStep(Backend& backend,
                                                              std::span<const int32_t> tokens) {
  auto* vb = dynamic_cast<VulkanBackend*>(&backend);
  if (!vb) return {};
  return vb->Profile(tokens);
}

std::vector<float> VulkanLinearForTest(Backend& backend, const Linear& lin, const Linear* second,
                                       const float* x, int n, int epilogue) {
  auto* vb = dynamic_cast<VulkanBackend*>(&backend);
  if (!vb) return {};
  return vb->RunLinear(lin, second, x, n, static_cast<uint32_t>(epilogue));
}

std::vector<float> VulkanPrefillAttentionForTest(Backend& backend, const float* q, const float* k,
                                                 const float* v, int nh, int nkv, int hd, int ring,
                                                 int window, int pos0, int m) {
  auto* vb = dynamic_cast<VulkanBackend*>(&backend);
  if (!vb) return {};
  return vb->RunAttnCm(q, k, v, nh, nkv, hd, ring, window, pos0, m);
}

bool SimulateVulkanDeviceLoss(Backend& backend) {
  auto* vb = dynamic_cast<VulkanBackend*>(&backend);
  if (!vb) return false;
  vb->FailNextSubmit();
  return true;
}

}  // namespace gemma
