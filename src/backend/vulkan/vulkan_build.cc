#include "backend/vulkan/vulkan_backend_impl.h"

namespace gemma::vulkan_internal {

KernelConfig EffectiveKernels(const VulkanOptions& vopt, const KernelConfig& context) {
  KernelConfig kc = vopt.kernels;
  kc.Apply(context);
  kc.Apply(KernelConfig::FromEnvironment());
  return kc;
}

namespace {

// The widest layer's sizes: q and K/V row widths, MLP width, head dim, query heads.
struct Widths {
  int qw = 0, kvw = 0, imax = 0, hdmax = 0, nh = 0;
};
Widths LayerWidths(const Model& model) {
  Widths w;
  for (const LayerPlan& p : model.layers()) {
    w.qw = std::max(w.qw, p.num_heads * p.head_dim);
    w.kvw = std::max(w.kvw, p.num_kv_heads * p.head_dim);
    w.imax = std::max(w.imax, p.intermediate);
    w.hdmax = std::max(w.hdmax, p.head_dim);
    w.nh = std::max(w.nh, p.num_heads);
  }
  return w;
}

// The down projections' pair-major copies (linear.comp DJ with DOWN_FUSE_PAIRS) are part of the
// weights: whether the kernel choices take them.
bool DownPairCopies(const KernelConfig& kc) {
  return kc.Get("DOWN_FUSE", 1) != 0 && kc.Get("DOWN_FUSE_PAIRS", 1) != 0;
}

Buf PlanVec(Device& dev, const std::vector<float>& v, size_t* bytes) {
  if (v.empty()) return {};
  *bytes += 4 * v.size();
  return {dev.Reserve(Pool::kDevice, 4 * v.size()), {}};
}

void UploadVec(Device& dev, Buf& b, const std::vector<float>& v) {
  if (b.handle < 0) return;
  b.r = dev.Get(b.handle);
  dev.Upload(b.r, 0, v.data(), 4 * v.size());
}

// A new device (its first context) with every weight the decoder reads uploaded.
std::shared_ptr<DeviceWeights> BuildDeviceWeights(const Model& model, const VulkanOptions& vopt,
                                                  int generation) {
  const KernelConfig kc = EffectiveKernels(vopt);
  vk::DeviceOptions dopt;
  dopt.index = vopt.device_index;
  dopt.skip_cpu = vopt.skip_cpu_devices;
  dopt.spin_us = kc.Get("SPIN_US", -1);
  dopt.pipeline_stats = kc.Get("PIPE_STATS", 0) != 0;
  // KHR cooperative matrices where the device has them (the NV modules rewritten: no B operand
  // transposes; the prompt linears 10-15% faster on the H200,
  // bench/journal/2026-12-04-linear-cm-khr.md).
  dopt.coop_khr = kc.Get("CM_KHR", 1) != 0;
  // VK_NV_cooperative_matrix2 enabled where the device has it (CM2_DEVICE=0: not); the kernels
  // use it with CM2 (below and the towers').
  dopt.coop_cm2 = kc.Get("CM2_DEVICE", 1) != 0;
  dopt.pipeline_dump_dir = vopt.pipeline_dump_dir;
  dopt.memory_limit = vopt.device_memory_limit;
  dopt.step_timeout_s = vopt.step_timeout_s;
  auto w = std::make_shared<DeviceWeights>();
  w->generation = generation;
  w->dev = std::make_unique<Device>(dopt);
  Device& dev = *w->dev;
  const size_t limit = vopt.max_weight_part_bytes > 0
                           ? std::min<size_t>(dev.max_range(), vopt.max_weight_part_bytes)
                           : dev.max_range();
  const TextConfig& cfg = model.text();
  const int L = cfg.num_layers, P = cfg.hidden_size_per_layer_input;
  size_t& bytes = w->bytes;
  auto lin = [&](const Linear& l) { return PlanDevLinear(dev, limit, l, &bytes); };
  auto vec = [&](const std::vector<float>& v) { return PlanVec(dev, v, &bytes); };
  w->layers.assign(L, {});
  for (int l = 0; l < L; ++l) {
    const LayerWeights& lw = model.layer_weights()[l];
    const LayerPlan& p = model.layers()[l];
    DevLayer& d = w->layers[l];
    d.q = lin(lw.q);
    if (!p.kv_shared) {
      d.k = lin(lw.k);
      d.v = lin(lw.v);
    }
    d.o = lin(lw.o);
    d.gate = lin(lw.gate);
    d.up = lin(lw.up);
    d.down = lin(lw.down);
    if (DownPairCopies(kc) && d.down.parts.size() == 1 && lw.down.in_scale > 0.0f &&
        (lw.down.kind == WeightKind::kQ2 || lw.down.kind == WeightKind::kQ4)) {
      const size_t n = size_t(d.down.wstride) * 4 * d.down.rows;
      d.down.pairs = {dev.Reserve(Pool::kDevice, n), {}};
      bytes += n;
    }
    if (P > 0) {
      d.ple_gate = lin(lw.ple_gate);
      d.ple_proj = lin(lw.ple_proj);
      d.post_ple_norm = vec(lw.post_ple_norm);
    }
    d.input_norm = vec(lw.input_norm);
    d.post_attn_norm = vec(lw.post_attn_norm);
    d.pre_ffn_norm = vec(lw.pre_ffn_norm);
    d.post_ffn_norm = vec(lw.post_ffn_norm);
    d.q_norm = vec(lw.q_norm);
    d.k_norm = vec(lw.k_norm);
  }
  if (P > 0) {
    w->ple_proj = lin(model.ple_model_proj());
    w->ple_norm = vec(model.ple_proj_norm());
  }
  w->final_norm = vec(model.final_norm());
  w->lm_head = lin(model.lm_head());
  dev.Commit("the weights");
  for (int l = 0; l < L; ++l) {
    const LayerWeights& lw = model.layer_weights()[l];
    DevLayer& d = w->layers[l];
    for (DevLinear* x :
         {&d.q, &d.k, &d.v, &d.o, &d.gate, &d.up, &d.down, &d.ple_gate, &d.ple_proj}) {
      if (x->src) UploadDevLinear(dev, *x);
    }
    UploadVec(dev, d.input_norm, lw.input_norm);
    UploadVec(dev, d.post_attn_norm, lw.post_attn_norm);
    UploadVec(dev, d.pre_ffn_norm, lw.pre_ffn_norm);
    UploadVec(dev, d.post_ffn_norm, lw.post_ffn_norm);
    UploadVec(dev, d.q_norm, lw.q_norm);
    UploadVec(dev, d.k_norm, lw.k_norm);
    UploadVec(dev, d.post_ple_norm, lw.post_ple_norm);
  }
  if (P > 0) {
    UploadDevLinear(dev, w->ple_proj);
    UploadVec(dev, w->ple_norm, model.ple_proj_norm());
  }
  UploadVec(dev, w->final_norm, model.final_norm());
  UploadDevLinear(dev, w->lm_head);
  dev.ReleaseStaging();
  return w;
}

}  // namespace

std::shared_ptr<const DeviceWeights> VulkanShared::Acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!current_) current_ = BuildDeviceWeights(model_, vopt_, next_generation_++);
  return current_;
}

void VulkanShared::Lost(const DeviceWeights* w) {
  std::lock_guard<std::mutex> lock(mu_);
  if (current_.get() == w) current_.reset();
}

int VulkanShared::generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_ ? current_->generation : -1;
}

void VulkanBackend::Build() {
  dev_.reset();
  for (auto& tier : decode_cmd_) tier.fill(VK_NULL_HANDLE);
  prefill_cmd_ = VK_NULL_HANDLE;
  prompt_cmds_.clear();  // (their command buffers went with the device)
  batch_cmds_.clear();
  kc_ = EffectiveKernels(vopt_, context_kernels_);
  // This context on the engine's device, whose weights it reads.
  weights_ = shared_->Acquire();
  dev_ = weights_->dev->NewContext();
  layers_ = weights_->layers;
  {
    const auto int_path = [](const DevLinear& d) {
      return d.src && IsQuantized(d.src->kind) && d.src->in_scale > 0.0f && d.parts.size() == 1;
    };
    short_pro_ok_ = !layers_.empty();
    for (const DevLayer& d : layers_) {
      const bool kv = !d.k.src || (int_path(d.k) && int_path(d.v));
      const bool ple = !d.ple_gate.src || int_path(d.ple_gate);
      short_pro_ok_ = short_pro_ok_ && int_path(d.q) && kv && int_path(d.gate) &&
                      int_path(d.up) && ple;
    }
  }
  ple_proj_ = weights_->ple_proj;
  lm_head_ = weights_->lm_head;
  ple_norm_ = weights_->ple_norm;
  final_norm_ = weights_->final_norm;
  weight_bytes_ = weights_->bytes;
  if (!planned_) PlanGeometry();
  lanes_ = std::max<uint32_t>(32, dev_->subgroup_size());
  // Kernel-variant knobs for comparison runs (the defaults are the measured best).
  lanes_k_ = static_cast<uint32_t>(std::max(1, Knob("LANES_K", 6)));
  // Subgroup-per-query prefill attention (32-wide subgroups only): 1 double, 2 f32 dot products,
  // 3 / 4: four (hd <= 256) / two queries per subgroup sharing each K/V load (f32 dots,
  // hd % 4 == 0); 4 measured fastest on the H200 (bench/journal/2026-11-sessions.md).
  attn_pf_ = dev_->subgroup_size() == 32 ? std::clamp(Knob("ATTN_PF", 4), 0, 4) : 0;
  fuse_tails_ = Knob("TAILS", 1) != 0;
  // Residual norms in the next linear's prologue (linear.comp PRO) instead of the last
  // workgroup's tail: with the capped matvec grid measured 3.22 against 3.69 ms per token on the
  // H200 (bench/journal/2026-11-sessions.md, fifth session).
  cnorm_ = Knob("CNORM", 1) != 0;
  const int fill_threads =
      std::clamp(Knob("FILL_THREADS", static_cast<int>(std::thread::hardware_concurrency())), 1, 8);
  if (!fill_pool_ || fill_pool_->size() != fill_threads)
    fill_pool_ = fill_threads > 1 ? std::make_unique<ThreadPool>(fill_threads) : nullptr;
  xq_shared_ = Knob("XQ_SHARED", 1) != 0;
  // A verification step (all_positions) of VERIFY_ROWS .. batch_rows() tokens runs as rows of a
  // batched step (ForwardRows) instead of a prompt chunk; 0: never. Both paths timed side by side
  // on an H100 (E2B QAT, 512 context; bench/journal/2026-12-05-h100-batched-webgpu-llama.md),
  // chunk / rows: 2 tokens 4.90 / 5.10 ms, 5 tokens 10.47 / 10.69, 7 tokens 12.02 / 12.28,
  // 9 tokens 9.83 / 8.72. Not on CPU devices, where a batch's rows run slower than the chunk.
  // (Steps of kMatmulMinTokens tokens and more take the rows whatever this says: Forward.)
  verify_rows_ = std::max(0, Knob("VERIFY_ROWS", dev_->is_cpu() ? 0 : 9));
  // One-token linears with a capped grid (each workgroup loops over row blocks): N workgroups,
  // -k for k per compute unit (none where the device does not say), 0 = a workgroup per block.
  // -4 measured best on the H200 with the consumer norms (-3: 3.25, -6: 3.41, -8: 3.38 ms).
  mv_wgs_ = Knob("MV_WGS", -4);
  if (mv_wgs_ < 0) mv_wgs_ = -mv_wgs_ * static_cast<int>(dev_->compute_units());
  // One-token decode attention as attn_fused.comp (q/k norm + RoPE and the key splits in one
  // dispatch, f32 dot products; 2.15-2.18 against 2.44-2.47 ms per token for the three kernels
  // on the H200, bench/journal/2026-11-sessions.md tenth session): GEMMA_VULKAN_ATTN_FUSED=0
  // restores qkrope + attention + attn_combine; _ROPE=0 keeps qkrope's dispatch; _MODE=0 (default)
  // merges the splits in the last split's workgroup, 1 in a second dispatch over (heads x dim
  // blocks) (MODE 0 with its arrival as one acquire-release atomic and the partials read through
  // the read-only alias, FENCE + NC_MERGE below: 2.08-2.13 against 2.15-2.17 ms per token, 2.29
  // against 2.30 at 4,096 context on the H200; with coherent loads 2.18-2.26 against 2.15,
  // bench/journal/2026-11-sessions.md eleventh session); GEMMA_VULKAN_ATTN_KW sets the keys per row
  // group and block. Opt-in
  // since issue 34: its f32 softmax and sums differ from the reference's double ones by ~1e-7
  // relative, enough to move an SRQ rounding of o_proj's input now and then; the flip lands in the
  // residual and the next layers' K/V rows and moves later steps' logits by several head quanta
  // (beyond the documented allowance). The three-kernel path is double, as the reference
  // (vulkan_diff_test).
  attn_fused_ = Knob("ATTN_FUSED", 0) != 0;
  attn_fused_rope_ = Knob("ATTN_FUSED_ROPE", 1) != 0;
  attn_fused_mode_ = Knob("ATTN_FUSED_MODE", 0) != 0 ? 1u : 0u;
  attn_kw_ = static_cast<uint32_t>(std::clamp(Knob("ATTN_KW", 0), 0, 8));
  // Key splits of the fused attention: one workgroup per compute unit over the heads (a single
  // wave, its ~140-180 registers allow one per unit), the decode splits where they are set or
  // on CPU devices; GEMMA_VULKAN_ATTN_FUSED_SPLITS overrides.
  fused_splits_ = Knob("ATTN_FUSED_SPLITS", 0);
  splits_set_ = vopt_.decode_splits > 0 || kc_.Has("SPLITS");
  // The merge's partials per round (tests: fewer, so that the fixtures' contexts take several).
  attn_mb_ = static_cast<uint32_t>(std::clamp(Knob("ATTN_MB", 16), 1, 16));
  // 16-byte cache loads where a lane holds a multiple of 8 dims (VEC); lanes per key row
  // capped (tests: so that the fixtures' small heads take VEC).
  attn_vec_ = Knob("ATTN_VEC", 1) != 0;
  attn_rl_max_ = static_cast<uint32_t>(std::clamp(Knob("ATTN_RL", 64), 1, 64));
  // MODE 0's arrival count as one acquire-release atomic (FENCE) instead of full barriers, and
  // the last split's reads of the partials through the read-only alias (NC_MERGE) instead of
  // the coherent binding (the merge 4.5 against 5.9 us in the probes).
  attn_fence_ = Knob("ATTN_FENCE", 1) != 0;
  attn_nc_merge_ = Knob("ATTN_NC_MERGE", 1) != 0;
  // The next key block's V rows loaded with its K rows (attn_fused VPF): 1.796 against 1.890 ms
  // per token at 4,096 context on the H200 (the attention 545 against 594 us timestamped), equal
  // at 512 (1.696 / 1.703 against 1.692 / 1.699; bench/journal/2026-11-sessions.md, fifteenth
  // session).
  attn_vpf_ = Knob("ATTN_VPF", 1) != 0;
  // Two query heads of a K/V head per attn_fused workgroup in the full-attention layers from
  // position attn_hpw_from_ on (each cache row loaded serves both: half the L2 reads, twice
  // the splits): 2.07 against 2.26 ms per token at 32K context on the H200, slower at 512 and
  // 4,096 (bench/journal/2026-11-sessions.md, twenty-first session). One-token steps from that
  // position on run a second pre-recorded command buffer.
  attn_hpw_ = static_cast<uint32_t>(std::clamp(Knob("ATTN_HPW", 2), 1, 2));
  attn_hpw_from_ = std::max(0, Knob("ATTN_HPW_FROM", 12288));
  // One-token steps: the PLE gate's workgroups add the PLE projection's products (int8 SRQ:
  // integer sums, exact in any order) into per-layer sums that the next layer's prologue scales
  // (linear.comp EPI 4 / PRO_T): one dispatch and one barrier fewer per layer.
  ple_fuse_ = Knob("PLE_FUSE", 1) != 0;
  // ... with blocks of 4 rows (kWG / 4 lanes per row: twice the workgroups of the general
  // choice for E2B's gate, one projection word per row and block): 2.02-2.04 against 2.08-2.20
  // ms per token on the H200 (bench/journal/2026-11-sessions.md, eleventh session); 0: the general
  // choice.
  ple_lanes_ =
      static_cast<uint32_t>(std::clamp(Knob("PLE_LANES", static_cast<int>(kWG / 4)), 0, 256));
  if (ple_lanes_ > 0) ple_lanes_ = std::bit_floor(ple_lanes_);
  // One-token steps: gate/up's workgroups also multiply the down projection's columns of their
  // rows and add the int32 sums atomically (linear.comp DJ / PRO_T): no down dispatch.
  down_fuse_ = Knob("DOWN_FUSE", 1) != 0;
  // ... gate/up's workgroup cap there (-k: k per compute unit; 0: the matvec cap): fewer
  // workgroups, fewer atomics (each adds the sums of all its blocks once).
  down_fuse_wgs_ = Knob("DOWN_FUSE_WGS", 0);
  // ... the down projection's words loaded after gate/up's multiply instead of before it, read
  // from a pair-major copy of the down weights (coalesced: a block's words of all rows
  // contiguous; +157 MiB on E2B) instead of 8 bytes per row from the row-major matrix, and the
  // sums in 4 copies (the workgroups' atomics spread over more addresses; the consumer adds
  // the copies): 1.865 / 1.878 against 2.024-2.178 ms per token without the fusion, 1.961 /
  // 1.966 without the pair-major copy (8 copies); 4 copies 1.851 / 1.853 against 1.863-1.978
  // for 8 and 1.867-1.896 for 16 (bench/journal/2026-11-sessions.md, thirteenth session).
  down_fuse_late_ = Knob("DOWN_FUSE_LATE", 1) != 0;
  down_fuse_pairs_ = Knob("DOWN_FUSE_PAIRS", 1) != 0;
  // One-token decode steps: the last layer's residual norm and the final norm in the LM head's
  // prologue (its grid capped), not two norm dispatches and the residual's copy: the norms 8.7
  // against 23.0 us per token, the head 74.5 against 71.7 (bench/journal/2026-11-sessions.md,
  // thirteenth session).
  head_norm_ = Knob("HEAD_NORM", 1) != 0;
  // One-token FAST linears whose workgroups loop over several row blocks (the LM head): the
  // next block's weight vectors loaded before this block's multiply (linear.comp PFB): the head
  // 64.5 / 65.0 against 74.0 / 73.0 us per token (bench/journal/2026-11-sessions.md, thirteenth
  // session).
  mv_prefetch_block_ = Knob("MV_PREFETCH_BLOCK", 1) != 0;
  // ... and the first block's vectors at the kernel's start where a grid has at most this many
  // workgroups per compute unit (linear.comp PFE; set bits: 1 linears without a prologue, 2 the
  // PLE gate, 4 other prologue linears): 1.594-1.596 against 1.607-1.612 ms per token.
  mv_prefetch_early_ = static_cast<uint32_t>(std::max(0, Knob("MV_PREFETCH_EARLY", 2)));
  mv_prefetch_early_set_ =
      static_cast<uint32_t>(std::clamp(Knob("MV_PREFETCH_EARLY_SET", 7), 0, 7));
  // ... issued after a norm prologue's operand loads, which otherwise queue behind them
  // (PFE_LATE; with the PLE gate in the set: 1.567-1.576 against 1.594-1.597 ms per token on the
  // H200, bench/journal/2026-11-sessions.md eighteenth session).
  mv_prefetch_early_late_ = Knob("MV_PREFETCH_EARLY_LATE", 1) != 0;
  // ... and the dense one-token linears with a staged input (FXW): the bf16 PLE model
  // projection.
  dense_prefetch_ = Knob("DENSE_PREFETCH", 1) != 0;
  // The head's argmax / pick: one logits_reduce dispatch whose last block per row merges
  // (LAST); 0: a second dispatch merges.
  reduce_last_ = Knob("REDUCE_LAST", 1) != 0;
  down_fuse_copies_ = static_cast<uint32_t>(std::clamp(Knob("DOWN_FUSE_COPIES", 4), 1, 16));
  if (down_fuse_wgs_ < 0)
    down_fuse_wgs_ = -down_fuse_wgs_ * static_cast<int>(dev_->compute_units());
  // The down projection's quantized input written in its packed-dot order by gate/up (the
  // down projection stages plain words instead of four byte gathers per word): 2.60 / 2.57
  // against 2.65 / 2.62 ms per token on the H200 (bench/journal/2026-11-sessions.md, seventh
  // session).
  xq_perm_ = Knob("XQ_PERM", 1) != 0;
  // 4 (rows of 1,536 int2 / int4 columns on 8 / 16 lanes): 2.91 against 3.30 ms per token on the
  // H200 in one run (bench/journal/2026-11-sessions.md, fifth session); 32 = a subgroup or more per
  // row.
  mv_lanes_min_ = static_cast<uint32_t>(std::clamp(Knob("MV_LANES", 4), 4, 256));
  mv_lanes_min_ = std::bit_floor(mv_lanes_min_);
  mv_lanes_vec_ = static_cast<uint32_t>(std::clamp(Knob("MV_LANES_VEC", 3), 1, 64));
  mv_max_rows_ = static_cast<uint32_t>(std::max(1, Knob("MV_MAX_ROWS", 32768)));
  // One-token dense (bf16 / f16) rows of at most 8 x DENSE_LANES 16-byte vectors (E2B's 1,536-
  // and 2,048-column linears): this many lanes per row (a row's sum within one subgroup: no
  // shared reduction or barrier per block) and at most DENSE_WGS workgroups (-k: k per compute
  // unit; fewer copies of the norm prologue). bench/journal/2026-11-sessions.md, twenty-second
  // session.
  dense_lanes_ = static_cast<uint32_t>(std::max(0, Knob("DENSE_LANES", 32)));
  dense_wgs_ = Knob("DENSE_WGS", -2);
  if (dense_wgs_ < 0) dense_wgs_ = -dense_wgs_ * static_cast<int>(dev_->compute_units());
  // Opt-in: the longer matrices (the LM head) capped at their own count (-k: k per compute
  // unit); 0 = a workgroup per row block.
  mv_wgs_long_ = Knob("MV_WGS_LONG", 0);
  if (mv_wgs_long_ < 0) mv_wgs_long_ = -mv_wgs_long_ * static_cast<int>(dev_->compute_units());
  // Opt-in: the norm prologue packs its quantized bytes with shared-memory atomics (the
  // previous default) instead of subgroup shuffles.
  pack_atomic_ = Knob("PACK_ATOMIC", 0) != 0;
  // Opt-in: the prologue's RMS factors evaluated by every invocation (one barrier fewer each).
  rms_all_ = Knob("RMS_ALL", 0) != 0;
  // The prologues' RMS factors by Newton steps instead of a double division and square root
  // (linear.comp RMS_FAST; 1.531 / 1.539 against 1.558 / 1.554 ms on the H200).
  rms_fast_ = Knob("RMS_FAST", 1) != 0;
  // gate/up's input quantized once where both sets' input scales are equal (SHARE_X; 1.516 /
  // 1.523 against 1.537 / 1.537 ms on the synthetic checkpoint, whose scales are equal).
  share_x_ = Knob("SHARE_X", 1) != 0;
  // Short steps (a batch's rows, verification steps, prompt chunks) of up to ROWS_MV tokens on the
  // matvecs (longer: the tiled kernels), each weight block streamed once for up to 4 of their
  // tokens: at most ROWS_WGS workgroups (-k: k per compute unit; each quantizes the tokens' inputs
  // once and loops over row blocks), the one-token steps' lanes per integer row (ROWS_CLUSTER),
  // and integer rows longer than ROWS_KCOLS columns split K (workgroups of that many columns
  // adding exact int32 sums). H100, E2B QAT, batched steps at 512 context (vulkan_batch_bench):
  // 4 rows 7.28 ms with neither the lanes nor the cap, 5.72 with both, 4.99 with split K at 768
  // columns (5.04-5.50 at 512-3,072), 4.78 with the rows' attention at 8 key splits; 8 / 16 rows
  // 8.66 / 11.08 ms on the tiled kernels, 6.08-6.11 / 8.89 on the matvecs (ROWS_MV 16; 8 tokens a
  // workgroup: 7.19 at 8 rows); a k = 4 / 8 verification step 6.43 / 8.55 -> 5.36 / 6.95 ms;
  // bench/journal/2026-12-05-short-step-matvecs.md, 2026-12-05-short-step-choices.md.
  rows_wgs_ = Knob("ROWS_WGS", -4);
  if (rows_wgs_ < 0) rows_wgs_ = -rows_wgs_ * static_cast<int>(dev_->compute_units());
  rows_cluster_ = Knob("ROWS_CLUSTER", 1) != 0;
  rows_kcols_ = static_cast<uint32_t>(std::max(0, Knob("ROWS_KCOLS", 768)));
  rows_mv_max_ = std::clamp(Knob("ROWS_MV", kMaxMatvecTokens), 1, kMaxMatvecTokens);
  // Steps of 2..ROWS_PRO tokens take their residual norms in the next linears' prologues
  // (linear.comp PRO_M), as one-token steps do: three norm kernels and barriers fewer per layer,
  // against each workgroup's prologue over its (up to 4) tokens. On the H100 (E2B QAT, 512
  // cached tokens, bench/journal/2026-12-06-kfin.md): 2 / 3 / 4 tokens 3.59 / 4.03-4.07 / 4.25
  // -> 3.19-3.24 / 3.76 / 4.02-4.03 ms, 4 rows 4.39-4.41 -> 4.23-4.24; 5 tokens 5.07 -> 5.09-5.12,
  // 8 rows 5.78 -> 5.99-6.09, 16 rows 8.57-8.63 -> 9.57 (two or more token groups each run the
  // prologue): 4.
  rows_pro_max_ = std::clamp(Knob("ROWS_PRO", 4), 1, kMaxMatvecTokens);
  // Checkpoints with SRQ linears (mobile QAT): the dense linears' sums in double as the CPU
  // reference's (linear.comp DSUM), so that the SRQ roundings after them (the PLE model
  // projection feeds every layer's PLE gate) see the reference's values: +0.24 ms per token
  // with PRO_VEC off on the H200's E2B QAT decode (2.13 -> 2.37 ms, issue 34). Dense models keep
  // f32 sums (their contract with the reference is a tolerance).
  dsum_ = false;
  for (const LayerWeights& w : model_.layer_weights())
    for (const Linear* l :
         {&w.q, &w.k, &w.v, &w.o, &w.gate, &w.up, &w.down, &w.ple_gate, &w.ple_proj})
      dsum_ = dsum_ || (l->data && l->in_scale > 0.0f);
  dense_vec4_ = Knob("DENSE_VEC4", 1) != 0;
  int_dot_ = dev_->int_dot() && Knob("DP", 1) != 0;
  mv_fast_ = Knob("MV_FAST", 1) != 0;
  // One-token gate/up with both weight sets' vectors loaded in one loop (linear.comp DUAL_LOOP):
  // 1.709 / 1.718 against 1.732 / 1.732 ms per token on the H200, gate/up 196-199 against
  // 212-217 us per token on the int4 layers, 324-329 against 333-337 on the int2 ones
  // (bench/journal/2026-11-sessions.md, fifteenth session); 0: a loop per weight set.
  mv_dual_loop_ = static_cast<uint32_t>(std::clamp(Knob("MV_DUAL_LOOP", 1), 0, 4));
  // ... and single weight sets with two of a lane's vectors loaded per iteration (PAIR_LOOP):
  // 1.675 / 1.680 against 1.703 / 1.698 ms per token on the H200, q 222-223 against 236-238 us
  // per token, o 158-159 against 169-173 (bench/journal/2026-11-sessions.md, fifteenth session).
  // The value is the vectors in flight (1-4; DUAL_LOOP's per set), 0 / 1 a vector an iteration.
  mv_pair_loop_ = static_cast<uint32_t>(std::clamp(Knob("MV_PAIR_LOOP", 2), 0, 4));
  // The FAST int2 / int4 linears' shared input chunk-major (linear.comp XCM): a row's lanes read
  // consecutive 16-byte chunks instead of chunks 64 (int2) / 32 (int4) bytes apart. Bits: 1 int2,
  // 2 int4. H200: 1.652 / 1.659 against 1.696 / 1.696 ms per token with both, int2 gate/up 285
  // against 325 us per token, the LM head 45 against 65; int4 alone gained nothing (1.660 / 1.660
  // with int2 only against 1.664 / 1.665 with both; bench/journal/2026-11-sessions.md, sixteenth
  // session).
  mv_xcm_ = static_cast<uint32_t>(std::clamp(Knob("MV_XCM", 1), 0, 3));
  // The norm prologues' columns 8 per invocation on 16-byte operand loads, whole words packed in
  // registers (linear.comp PRO_VEC): 1.609 / 1.611 against 1.665 / 1.663 ms per token, but off:
  // on the H200 it moved SRQ roundings against the CPU reference in 3 of 4 random QAT models
  // that pass without it (issue 34, bench/journal/2026-12-02-issue34.md; cause not found, as for
  // the LM head's prologue below), on lavapipe it is exact.
  pro_vec_ = Knob("PRO_VEC", 0) != 0;
  // (investigation only) the LM head's prologue on PRO_VEC too:
  // HeadNormInPrologueMatchesNormKernels found its logits differing on the H200 after argmax
  // steps (bench/journal/2026-11-sessions.md, seventeenth and eighteenth sessions).
  head_pro_vec_ = Knob("HEAD_PRO_VEC", 0) != 0;
  coop_ = dev_->coop_matrix() && Knob("CM", 1) != 0;
  // Prompt linears on workgroup-scope matrices where the device has VK_NV_cooperative_matrix2
  // and the library was built with its modules (linear_cm2.comp): off until measured faster than
  // linear_cm (its first form was slower: bench/journal/2026-12-06-linear-cm2.md).
  cm2_ =
      coop_ && dev_->coop_cm2() && Knob("CM2", 0) != 0 && !vk::SpirvModule("linear_cm2_q").empty();
  // GEMMA_VULKAN_BARRIER: the one-token layer loop's barriers: 1 (default) compute stage only
  // (2.150-2.152 against 2.161-2.192 ms per token on the H200; 287 barriers between empty
  // kernels 0.58 against 0.67 ms: bench/journal/2026-11-sessions.md, eleventh session), 0 compute
  // and transfer stages (as every other barrier), 2 execution only (timing only: results may be
  // wrong).
  switch (Knob("BARRIER", 1)) {
    case 1:
      light_barrier_ = vk::Device::BarrierKind::kCompute;
      break;
    case 2:
      light_barrier_ = vk::Device::BarrierKind::kExecOnly;
      break;
    default:
      light_barrier_ = vk::Device::BarrierKind::kFull;
  }
  // Whole 32-key blocks per decode split, 64 splits: 2.94 against 3.06 ms per token at 4,096
  // context on the H200, equal at 512 (bench/journal/2026-11-sessions.md, seventh session). Off on
  // CPU devices.
  splits_adapt_ = Knob("SPLITS_ADAPT", dev_->is_cpu() ? 0 : 1) != 0;
  // Split K on matrix units: 0 off, 1 where the output tiles are few, 2 every K tile (tests).
  // Prompt chunks run the trailing KV-shared layers only for the returned position (exact).
  skip_tail_ = Knob("SKIP_TAIL", 1) != 0;
  coop_splitk_ = std::clamp(Knob("CM_SPLITK", 1), 0, 2);
  // Dense (bf16 / f16) prefill linears on matrix units too (hi + lo f16 inputs, f32 sums), where
  // the single-set kernel's staging fits: 64 weight rows and 2 x 128 token rows of 9 16-byte
  // vectors (45 KiB; the SRQ forms need 27-36).
  coop_dense_ = Knob("CM_DENSE", 1) != 0 && dev_->max_shared_bytes() >= kLinearCmShared;
  // Prefill attention on matrix units (attention_cm.comp), where they run the linears, the
  // subgroups are 32 wide (8 per workgroup) and its staging fits: K / V chunks, P and S (36 KiB).
  // On the H200 a 512-token chunk's attention took 1.45 ms against 7.3 (attention_pfq), the
  // 1,024-token prefill 31.6 against 44.6 ms, 8,192 tokens 28,900 against 11,600 tok/s
  // (bench/journal/2026-11-sessions.md, twenty-fourth session).
  // The K rows are split into f16 terms unscaled (KNormFitsF16; V's norm has no weights).
  attn_cm_ = coop_ && dev_->subgroup_size() == 32 &&
             dev_->max_shared_bytes() >= kAttnCmShared && Knob("ATTN_CM", 1) != 0;
  // (ACC 1: the most accurate of the three forms on the H200 at the speed of the fastest; the
  // kernel test's worst rows 6.9e-5 / 6.7e-5 against 9.9e-5 / 1.0e-4 with 0 and 1.0e-4 / 1.3e-4
  // with 2, which took 1.6x the time.)
  attn_cm_acc_ = static_cast<uint32_t>(std::clamp(Knob("ATTN_CM_ACC", 1), 0, 2));
  // (ROT 1: 8,192- / 32,768-token prompts 28,400 / 17,400 against 27,800 / 17,000 tok/s, a
  // 512-token chunk's attention 990 + 474 against 1,006 + 483 us; h200_v239.)
  attn_cm_rot_ = Knob("ATTN_CM_ROT", 1) != 0 ? 1u : 0u;
  // (KV-shared layers have no K norm weights: they read their owner's.)
  for (const LayerWeights& w : model_.layer_weights())
    if (!KNormFitsF16(w.k_norm)) attn_cm_ = false;
  splits_ = vopt_.decode_splits > 0 ? vopt_.decode_splits
                                    : Knob("SPLITS", dev_->is_cpu()  ? 2
                                                     : splits_adapt_ ? 64
                                                                     : 16);
  // A batch's rows (and verification steps as rows) with at most this many key splits (0: the
  // decode's, up to 256 / rows; at 512 context and 4 rows 64 splits, of which 16 hold whole 32-key
  // blocks). H100, 4 rows at 512 context: 5.72 ms with the decode's, 5.52 with 16, 5.44 with 8;
  // with split K at 1,536 columns 5.05 with 4, 4.74 with 8.
  rows_splits_ = std::max(0, Knob("ROWS_SPLITS", 8));

  const int H = cfg_.hidden_size, L = cfg_.num_layers, P = cfg_.hidden_size_per_layer_input;
  const int V = cfg_.vocab_size;
  const auto [qw, kvw, imax, hdmax, nh] = LayerWidths(model_);
  if (hdmax > 512) throw Error(ErrorCode::kUnsupported, "vulkan: head_dim above 512");

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

  // Activations: the context's own set for short steps (up to kShortStepRows tokens); longer
  // prompt chunks take the engine's (StepActivations).
  auto F = [&](size_t floats) { return Reserve(Pool::kDevice, floats * 4); };
  h2_ = F(size_t(kMaxMatvecTokens) * H);  // (short steps' prologues: a row per token)
  // int32 sums of the PLE projections (EPI 4), then of the down projections (DJ, in
  // down_fuse_copies_ copies), zeroed per step
  pacc_ = F(size_t(L) * (1 + down_fuse_copies_) * H);
  vocab_block_ = static_cast<uint32_t>(
      std::clamp(Knob("VOCAB_BLOCK", static_cast<int>(kVocabBlock)), 1, 1 << 20));
  nblocks_ = (V + static_cast<int>(vocab_block_) - 1) / static_cast<int>(vocab_block_);
  mask_ = F((V + 31) / 32);
  step_ = F(4);
  counter_ = F(64);
  hcount_ = F(kCombineCounters);
  prof_ = F(2 * 16 * 4096);  // kernel probes (8 x 2 clocks a workgroup)
  xq_region_ = (size_t(imax + 3) / 4 * 4 + 255) / 256 * 256;
  xq_ = Reserve(Pool::kDevice, xq_region_ * L);
  if (coop_) {
    int max_cols = std::max({H, qw, imax, P});
    coop_ld_max_ = static_cast<uint32_t>((max_cols + 63) / 64 * 8);
  }
  record_beside_ = Knob("RECORD_BESIDE", 1) != 0;
  chunk_cache_ = std::clamp(Knob("CHUNK_CACHE", 4), 0, 64);
  // Prompt chunks' embedding and PLE rows decoded on the device (embed_rows.comp) from the
  // checkpoint's stored rows, where the kernel knows both tables' kinds (GEMMA_VULKAN_GPU_ROWS;
  // 0: the host decodes them into f32 rows, 8x the staged bytes for the QAT checkpoint).
  gpu_rows_ = Knob("GPU_ROWS", 1) != 0 && GpuRowKind(model_.embed()) != 0 &&
              (P == 0 || GpuRowKind(model_.ple_embed()) != 0);
  upload_local_ = Knob("UPLOAD_LOCAL", 1) != 0;
  // (a batch's rows each write one position of their own rings: the chunk does not bound them)
  short_rows_ = kShortStepRows;
  Activations own = PlanActivations(*dev_, short_rows_);
  // One-token steps: the PLE rows and the mask in host memory instead (in_side_; the host
  // writes them fast, their copies run beside the body's first phase).
  upload_split_ = Knob("UPLOAD_SPLIT", 1) != 0;
  in_side_mask_off_ = (size_t(L) * P * 4 + 255) / 256 * 256;
  in_side_ =
      upload_split_ ? Reserve(Pool::kHost, in_side_mask_off_ + size_t((V + 31) / 32) * 4) : Buf{};
  prof_host_ = Reserve(Pool::kHost, 8 * 16 * 4096);
  row_steps_ = Reserve(Pool::kDevice, kShortStepRows * kRowStepBytes);
  row_steps_host_ =
      Reserve(upload_local_ ? Pool::kUpload : Pool::kHost, kShortStepRows * kRowStepBytes);

  dev_->Commit("a session's caches and activations");
  ResolveActivations(*dev_, own);
  SwapActivations(own);

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
  for (Buf* b : {&h2_, &mask_, &step_, &counter_, &hcount_, &xq_, &prof_, &prof_host_, &pacc_,
                 &in_side_, &row_steps_, &row_steps_host_}) {
    if (b->handle >= 0) Resolve(*b);
  }
  dev_->Fill(counter_.r, 0);
  dev_->Fill(hcount_.r, 0);
  dev_->Fill(reduce_cnt_.r, 0);
  prefill_cmd_ = dev_->AllocCommandBuffer();
  head_cmd_ = dev_->AllocCommandBuffer();
  // Batched steps (ForwardRows): rows of the activations' and the head's sets, where the device
  // indexes the rows' caches (set 1).
  static std::atomic<uint64_t> next_uid{1};
  uid_ = next_uid++;
  batch_rows_ = dev_->row_sets()
                    ? std::min({short_rows_, head_rows_, static_cast<int>(dev_->row_slots())})
                    : 1;
  // Pre-record the decode step once to count its work.
  DecodeCommand(OutputMode::kArgmax);
  dev_->ReleaseStaging();  // (the uploads above are done; a later Upload allocates it again)
}

Activations VulkanBackend::PlanActivations(Device& dev, int rows) {
  const int H = cfg_.hidden_size, L = cfg_.num_layers, P = cfg_.hidden_size_per_layer_input;
  const int V = cfg_.vocab_size, C = rows;
  const auto [qw, kvw, imax, hdmax, nh] = LayerWidths(model_);
  const int S = std::max(splits_, 1);
  Activations a;
  a.rows = rows;
  auto F = [&](size_t floats) { return Buf{dev.Reserve(Pool::kDevice, floats * 4), {}}; };
  a.head_rows = static_cast<int>(
      std::clamp<size_t>(std::min<size_t>(64u << 20, dev.max_range()) / (size_t(V) * 4), 1, C));
  a.h = F(size_t(C) * H);
  a.a = F(size_t(C) * H);
  a.t = F(size_t(C) * H);
  a.q = F(size_t(C) * qw);
  a.kt = F(size_t(C) * kvw);
  a.vt = F(size_t(C) * kvw);
  a.attn = F(size_t(C) * qw);
  a.g = F(size_t(C) * imax);
  // doubles; attn_fused: floats, rows of RoundUp32(hd) and per head 2 x splits (<= 256) rounded
  // up to 32 floats for (m, l)
  // (a batch's rows: kRowSplitUnits rows x splits in all)
  a.po = F(size_t(std::max({C, S, kRowSplitUnits})) * nh * RoundUp32(hdmax) * 2 + size_t(nh) * 512);
  a.pml = F(size_t(std::max({C, S, kRowSplitUnits})) * nh * 4);
  if (P > 0) {
    a.ple = F(size_t(C) * L * P);
    a.tok = F(size_t(C) * L * P);
    a.gp = F(size_t(C) * P);
  }
  a.hn = F(size_t(a.head_rows) * H);
  a.logits = F(size_t(a.head_rows) * V);
  a.part = F(size_t(a.head_rows) * nblocks_ * 4);
  a.res = F(size_t(a.head_rows) * 2);
  a.reduce_cnt = F(size_t(a.head_rows));  // logits_reduce LAST: arrivals per row, zero between
  if (coop_) {
    // Quantized inputs of the matrix-unit linears: kCoopSlots rotating slots of C tokens x the
    // widest input (padded to 64 columns) in f16.
    a.coop_slot_bytes = size_t(C) * coop_ld_max_ * 16;
    // attention_cm's split q rows (a chunk's tokens x heads, a workgroup's padding rows past
    // them) in two slots, their scales in a slot's split-K region.
    const size_t qrows = size_t(C) * nh + 32;
    if (attn_cm_)
      a.coop_slot_bytes = std::max(a.coop_slot_bytes, qrows * AttnCmChunks(hdmax) * 8 * 16);
    a.xqc = {dev.Reserve(Pool::kDevice, a.coop_slot_bytes * kCoopSlots), {}};
    a.coop_part_bytes =
        (std::max(size_t(C) * std::max({H, qw, P, kvw}), attn_cm_ ? qrows : 0) * 4 + 255) / 256 *
        256;
    a.partc = {dev.Reserve(Pool::kDevice, a.coop_part_bytes * kCoopSlots), {}};
  }
  if (C > 1) {
    const size_t tokens = std::min(C, rows_mv_max_), widest = std::max({H, qw, kvw, imax, P});
    a.ksum_bytes = (tokens * widest * 4 + 255) / 256 * 256;
    // ... then split K's counters, one set per sum region: one per token group (at least
    // one token each) and row block (at least one row each) of the widest output.
    a.kcount_bytes = (tokens * widest * 4 + 255) / 256 * 256;
    a.ksum = {dev.Reserve(Pool::kDevice, kKsumSlots * (a.ksum_bytes + a.kcount_bytes)), {}};
  }
  // Host: inputs of a step and the readback.
  a.in_x0_off = 256;
  a.in_tok_off = a.in_x0_off + (size_t(C) * H * 4 + 255) / 256 * 256;
  a.in_mask_off = a.in_tok_off + (size_t(C) * L * P * 4 + 255) / 256 * 256;
  // (written once per element, never read by the host: device-local where it can be mapped,
  // so the step's copies out of it stay on the device; GEMMA_VULKAN_UPLOAD_LOCAL=0: host memory)
  a.in_host = {dev.Reserve(upload_local_ ? Pool::kUpload : Pool::kHost,
                           a.in_mask_off + size_t((V + 31) / 32) * 4),
               {}};
  a.out_host = {dev.Reserve(Pool::kHost, std::max<size_t>(size_t(a.head_rows) * V * 4, 64)), {}};
  return a;
}

void VulkanBackend::ResolveActivations(Device& dev, Activations& a) {
  for (Buf* b : {&a.h,   &a.a,          &a.t,   &a.q,     &a.kt,   &a.vt,      &a.attn,    &a.g,
                 &a.po,  &a.pml,        &a.ple, &a.tok,   &a.gp,   &a.hn,      &a.logits,  &a.part,
                 &a.res, &a.reduce_cnt, &a.xqc, &a.partc, &a.ksum, &a.in_host, &a.out_host}) {
    if (b->handle >= 0) b->r = dev.Get(b->handle);
  }
  dev.Fill(a.reduce_cnt.r, 0);
  if (a.ksum.handle >= 0) dev.Fill(a.ksum.r, 0);
}

void VulkanBackend::SwapActivations(Activations& a) {
  std::swap(short_rows_, a.rows);
  for (auto [mine, theirs] :
       std::initializer_list<std::pair<Buf*, Buf*>>{{&h_, &a.h},
                                                    {&a_, &a.a},
                                                    {&t_, &a.t},
                                                    {&q_, &a.q},
                                                    {&kt_, &a.kt},
                                                    {&vt_, &a.vt},
                                                    {&attn_, &a.attn},
                                                    {&g_, &a.g},
                                                    {&po_, &a.po},
                                                    {&pml_, &a.pml},
                                                    {&ple_, &a.ple},
                                                    {&tok_, &a.tok},
                                                    {&gp_, &a.gp},
                                                    {&hn_, &a.hn},
                                                    {&logits_, &a.logits},
                                                    {&part_, &a.part},
                                                    {&res_, &a.res},
                                                    {&reduce_cnt_, &a.reduce_cnt},
                                                    {&xqc_, &a.xqc},
                                                    {&partc_, &a.partc},
                                                    {&ksum_, &a.ksum},
                                                    {&in_host_, &a.in_host},
                                                    {&out_host_, &a.out_host}}) {
    std::swap(*mine, *theirs);
  }
  std::swap(in_x0_off_, a.in_x0_off);
  std::swap(in_tok_off_, a.in_tok_off);
  std::swap(in_mask_off_, a.in_mask_off);
  std::swap(coop_slot_bytes_, a.coop_slot_bytes);
  std::swap(coop_part_bytes_, a.coop_part_bytes);
  std::swap(ksum_bytes_, a.ksum_bytes);
  std::swap(kcount_bytes_, a.kcount_bytes);
  std::swap(head_rows_, a.head_rows);
}

VulkanBackend::StepActivations::StepActivations(VulkanBackend& b, int m) : b_(b) {
  if (m <= b.short_rows_) return;
  const int rows = b.chunk_;
  {
    std::lock_guard<std::mutex> lock(b.weights_->workspace_mu);
    std::shared_ptr<SharedActivations>& ws = b.weights_->workspaces[rows];
    if (!ws) {
      auto made = std::make_shared<SharedActivations>();
      made->dev = b.weights_->dev->NewContext();
      made->act = b.PlanActivations(*made->dev, rows);
      made->dev->Commit("a prompt chunk's activations");
      ResolveActivations(*made->dev, made->act);
      ws = made;
    }
    shared_ = ws;
  }
  lock_ = std::unique_lock<std::mutex>(shared_->mu);
  b.SwapActivations(shared_->act);
}

VulkanBackend::StepActivations::~StepActivations() {
  if (shared_) b_.SwapActivations(shared_->act);
}

// Cache geometry and prompt chunk, once (the first Build: a rebuild after a failure keeps them).
// The chunk is at most the sliding rings' slack (a chunk's keys must not overwrite keys its
// first token still sees). Where the caller leaves the slack to the backend (0: one window) and
// the chunk is the large default or VulkanOptions::max_chunk, the rings hold window + chunk.
void VulkanBackend::PlanGeometry() {
  const bool large = vopt_.max_chunk <= 0 && !dev_->is_cpu() && dev_->is_discrete() &&
                     dev_->device_local_bytes() >= kChunkLargeMemory &&
                     cfg_.sliding_window >= kChunkSmall;
  int cap = vopt_.max_chunk > 0 ? vopt_.max_chunk : large ? kChunkLarge : kChunkSmall;
  cap = std::max(8, Knob("MAX_CHUNK", cap));
  BackendOptions o = options_;
  if (o.slack <= 0 && (large || vopt_.max_chunk > 0)) o.slack = std::max(cfg_.sliding_window, cap);
  const CacheGeometry geo = PlanCacheGeometry(cfg_, o);
  capacity_ = geo.capacity;
  slack_ = geo.slack;
  sliding_ring_ = geo.ring;
  window_ = CacheWindow(cfg_.sliding_window, sliding_ring_);
  chunk_ = std::min(std::max(1, slack_), cap);
  history_.reserve(capacity_);  // no per-token allocations on the decode path
  planned_ = true;
}

DevLinear PlanDevLinear(Device& dev, size_t part_limit, const Linear& lin, size_t* bytes) {
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
  const int per_part =
      static_cast<int>(std::min<size_t>(lin.rows, std::max<size_t>(1, part_limit / row_b)));
  for (int r0 = 0; r0 < lin.rows; r0 += per_part) {
    DevLinear::Part p;
    p.row0 = r0;
    p.rows = std::min(per_part, lin.rows - r0);
    p.w = {dev.Reserve(Pool::kDevice, row_b * p.rows), {}};
    *bytes += row_b * p.rows;
    if (IsQuantized(lin.kind)) {
      p.s = {dev.Reserve(Pool::kDevice, 4u * p.rows), {}};
      *bytes += 4u * p.rows;
    }
    d.parts.push_back(p);
  }
  return d;
}

void UploadDevLinear(Device& dev, DevLinear& d) {
  const Linear& lin = *d.src;
  for (DevLinear::Part& p : d.parts) {
    p.w.r = dev.Get(p.w.handle);
    const size_t row_b = d.wstride * 4u;
    std::vector<uint8_t> buf(row_b * p.rows, ZeroByte(lin.kind));
    for (int r = 0; r < p.rows; ++r) {
      std::memcpy(&buf[row_b * r], lin.data + (p.row0 + r) * lin.row_bytes, lin.row_bytes);
    }
    dev.Upload(p.w.r, 0, buf.data(), buf.size());
    if (d.pairs.handle >= 0) {
      d.pairs.r = dev.Get(d.pairs.handle);
      const size_t npair = d.wstride / 2;
      std::vector<uint8_t> pb(buf.size());
      for (int r = 0; r < p.rows; ++r)
        for (size_t c = 0; c < npair; ++c)
          std::memcpy(&pb[(c * p.rows + r) * 8], &buf[row_b * r + c * 8], 8);
      dev.Upload(d.pairs.r, 0, pb.data(), pb.size());
    }
    if (p.s.handle >= 0) {
      p.s.r = dev.Get(p.s.handle);
      dev.Upload(p.s.r, 0, lin.row_scale + p.row0, 4u * p.rows);
    }
  }
}

std::vector<float> VulkanBackend::RopeTable(const std::vector<float>& inv, int rot) {
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

void VulkanBackend::GetStats(VulkanStats* s) const {
  s->device = dev_ ? dev_->name() : "";
  s->cpu_device = dev_ && dev_->is_cpu();
  s->device_bytes = (dev_ ? dev_->committed_bytes(Pool::kDevice) : 0) +
                    (weights_ ? weights_->dev->committed_bytes(Pool::kDevice) : 0);
  s->weight_bytes = weight_bytes_;
  s->dispatches_per_token = decode_dispatches_;
  s->barriers_per_token = decode_barriers_;
  s->rebuilds = rebuilds_;
  s->batched_steps = batched_steps_;
  s->pipelines = dev_ ? dev_->pipeline_count() : 0;
  s->kernels =
      std::string("prefill linears ") +
      (!coop_        ? ""
       : coop_dense_ ? "linear_cm (matrix units: SRQ, dense) + "
                     : "linear_cm (matrix units: SRQ) + ") +
      (coop_ && dev_ && dev_->coop_khr() ? "KHR cooperative matrices, " : "") +
      "linear_mm, matvec " + (int_dot_ ? "packed int dot" : "scalar int") +
      (dev_ && dev_->int_dot_accelerated() ? " (accelerated)" : "") +
      (mv_fast_ && int_dot_ ? ", branch-free multiply" : "") +
      (xq_shared_ ? ", quantized input in shared" : ", quantized input global") + ", lanes_k " +
      std::to_string(lanes_k_) + ", decode splits " + std::to_string(splits_) +
      ", prefill attention " +
      (attn_cm_        ? "matrix units"
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
      (ple_fuse_ ? ", PLE projection summed by the gate's workgroups" : "") +
      (down_fuse_ && int_dot_ ? ", down projection summed by gate/up's workgroups" : "") +
      (head_norm_ ? ", last norms in the LM head's prologue" : "") +
      (gpu_rows_ ? ", prompt rows decoded on the device" : "") +
      (attn_fused_ ? std::string(", one-token attention fused (") +
                         (attn_fused_rope_ ? "q/k norm + RoPE, " : "") +
                         (attn_fused_mode_ == 0 ? "merged by the last split)" : "merge dispatch)")
                   : "") +
      "";
  if (!kc_.empty()) s->kernels += "; kernel config: " + kc_.ToString();
}

void VulkanBackend::Rebuild() {
  std::vector<int32_t> replay = history_;
  std::map<int, std::vector<float>> rows = std::move(soft_rows_);
  Reset();
  // (the device failed under this context, or another context's failure replaced it)
  shared_->Lost(weights_.get());
  Build();
  ++rebuilds_;
  broken_ = false;
  Reevaluate(replay, std::move(rows), &broken_);
}

void VulkanBackend::Replay() {
  const std::vector<int32_t> replay = history_;
  std::map<int, std::vector<float>> rows = std::move(soft_rows_);
  Reset();
  Reevaluate(replay, std::move(rows), &replay_);
}

void VulkanBackend::Reevaluate(const std::vector<int32_t>& tokens,
                               std::map<int, std::vector<float>> rows, bool* again) {
  if (tokens.empty()) return;
  ForwardResult ignored;
  std::vector<const float*> soft;  // (Forward commits copies of the rows again)
  if (!rows.empty()) {
    soft.assign(tokens.size(), nullptr);
    for (const auto& [pos, row] : rows)
      if (static_cast<size_t>(pos) < tokens.size()) soft[pos] = row.data();
  }
  try {
    Forward({.tokens = tokens, .soft = soft, .mode = OutputMode::kNone}, &ignored);
  } catch (...) {
    // (the tokens stay committed; the next Forward tries again)
    history_ = tokens;
    soft_rows_ = std::move(rows);
    window_.Commit(static_cast<int>(tokens.size()));
    *again = true;
    throw;
  }
}

}  // namespace gemma::vulkan_internal
