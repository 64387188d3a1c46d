#include "backend/vulkan/vulkan_backend_impl.h"

namespace gemma::vulkan_internal {

// y[t][y_off + r] = epi(lin(x[t])) for t in [x_row0, x_row0 + m); epi 1 fuses `second`.
// Returns whether `pj` was taken (EPI 4, DJ: the caller then records no dispatch for pj->proj).
bool VulkanBackend::LinearOp(Rec& rc, const DevLinear& d, const BufRange& x, int x_stride,
                             const BufRange& y, int y_stride, int y_off, int m, uint32_t epi,
                             const DevLinear* second, const BufRange* aux, int aux_stride,
                             int aux_off, int x_row0, const Tail* tail, uint32_t xq_mode,
                             const BufRange* xq, float next_in_s, const Pro* pro, uint32_t xq_perm,
                             const PleFuse* pj) {
  const Linear& lin = *d.src;
  const bool dense = lin.kind == WeightKind::kBF16 || lin.kind == WeightKind::kF16;
  const uint32_t epw = ElemsPerWord(lin.kind);
  // Short steps (a batch's rows, verification steps) take the matvecs up to rows_mv_max_ tokens.
  const bool short_mv = m > 1 && m <= rows_mv_max_;
  // ... their integer linears with long rows split K (linear.comp KSPLIT): workgroups of
  // rows_kcols_ columns (whole 16-byte weight vectors), on the FAST multiply.
  const uint32_t vec_cols = 4 * epw;
  const bool ksplit = short_mv && rows_kcols_ > 0 && rows_kcols_ % vec_cols == 0 &&
                      static_cast<uint32_t>(d.cols) > rows_kcols_ && int_dot_ && mv_fast_ &&
                      IsQuantized(lin.kind) && lin.in_scale > 0.0f && !second &&
                      (epi == 0 || epi == 2 || epi == 3) && !tail && (!pro || m > 1) &&
                      xq_mode == 0 && !pj &&
                      d.parts.size() == 1 && ksum_.handle >= 0 &&
                      size_t(m) * d.rows * 4 <= ksum_bytes_;
  // The input words a workgroup quantizes, and the 16-byte weight vectors of a row it multiplies.
  const uint32_t xwords = ksplit                  ? rows_kcols_ / 4
                          : IsQuantized(lin.kind) ? std::max<uint32_t>(1, d.wstride * epw / 4)
                                                  : 1;
  const uint32_t nvec = ksplit ? rows_kcols_ / vec_cols : d.wstride / 4;
  // Invocations per row: enough that each loads one or two 16-byte vectors (more workgroups in
  // flight for long rows), at least one subgroup.
  uint32_t vec = nvec >= lanes_ || ksplit ? 4 : 1;
  uint32_t lanes = lanes_;
  while (vec == 4 && lanes < kWG && nvec >= lanes_k_ * lanes) lanes *= 2;
  // (also over the short steps' tokens, a batch's rows and verification steps: the same lanes give
  // each token the one-token step's sums, the same products added in the same order)
  const bool dense_short = m <= static_cast<int>(kCoopSmallTokens) && vec == 4 && dense &&
                           dense_lanes_ >= dev_->subgroup_size() && dense_lanes_ <= kWG &&
                           nvec <= 8 * dense_lanes_;
  if (dense_short) lanes = dense_lanes_;
  // Both sets on the integer path with the same input scale: one quantized input (linear.comp
  // SHARE_X; the words are staged per workgroup).
  const bool share = share_x_ && second && (m == 1 || short_mv) && xq_mode != 1 &&
                     IsQuantized(lin.kind) && IsQuantized(second->src->kind) &&
                     lin.in_scale > 0.0f && lin.in_scale == second->src->in_scale;
  // Tokens per workgroup: as many as their quantized inputs fit in 16 KiB of shared memory (short
  // steps: with the reduction slots below the device's limit), at most 4 (8 measured slower for
  // short steps: bench/journal/2026-12-05-short-step-choices.md).
  uint32_t tok = 1;
  const uint32_t dual = second ? 2 : 1, sets = share ? 1 : dual;
  const uint32_t max_tok = 4;
  const size_t other = size_t(dual) * max_tok * 64 * 12 + 4096;
  const size_t most = dev_->max_shared_bytes() > other ? dev_->max_shared_bytes() - other : 0;
  const size_t xq_cap = short_mv ? std::min<size_t>(16384, most) : 16384;
  while (tok < max_tok && tok < static_cast<uint32_t>(m) && 2 * tok * sets * xwords * 4 <= xq_cap)
    tok *= 2;
  // One-token (rows_cluster_: and short steps') SRQ integer matvecs with short rows: fewer lanes
  // than a subgroup per row (about mv_lanes_vec_ vectors each, at least mv_lanes_min_), several
  // rows per subgroup (CLUSTER): a quarter as many row blocks for a 1,536-column int2 row. Integer
  // sums: exact in any order.
  bool cluster = false;
  if ((m == 1 || (short_mv && rows_cluster_)) && mv_lanes_min_ < dev_->min_subgroup_size() &&
      IsQuantized(lin.kind) && lin.in_scale > 0 && (!second || second->src->in_scale > 0)) {
    // Clusters lie within one subgroup (the shader sums them by xor shuffles), of the smallest
    // width the driver may pick; at least a lane per token (each finishes one).
    const uint32_t sg = dev_->min_subgroup_size();
    uint32_t l = std::max(mv_lanes_min_, tok);
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
  const bool pj_fits = pjl && m == 1 && epi == 3 && !second && d.parts.size() == 1 && int_dot_ &&
                       IsQuantized(lin.kind) && lin.in_scale > 0.0f && xq_mode == 0 && !tail &&
                       pjl->parts.size() == 1 && pjl->src->kind == WeightKind::kQ8 &&
                       pjl->src->in_scale > 0.0f && pjl->cols == lin.rows &&
                       pjl->src->rows <= 8 * static_cast<int>(kWG);
  if (pj_fits && ple_lanes_ > 0 && vec == 4) {
    lanes = ple_lanes_;
    cluster = lanes < dev_->min_subgroup_size();
    if (cluster && lanes < mv_lanes_min_) lanes = mv_lanes_min_;
  }
  const uint32_t rows_per_wg = kWG / lanes;
  // ... and row blocks of whole int8 words of the projection (4-64 rows).
  const bool pj_ok = pj_fits && rows_per_wg % 4 == 0 && rows_per_wg <= 64;
  const uint32_t epi_k = pj_ok ? 4u : epi;
  // DJ where the linears allow it: gate/up (EPI 1) on the packed-dot path in one part, 2, 4 or 8
  // words of the int2 / int4 SRQ down projection per row block, up to 8 rows of it per
  // invocation.
  const bool dj_ok =
      pjl && m == 1 && epi == 1 && second && d.parts.size() == 1 && second->parts.size() == 1 &&
      int_dot_ && IsQuantized(lin.kind) && lin.in_scale > 0.0f && second->src->in_scale > 0.0f &&
      (xq_mode == 0 || xq_mode == 2) && !tail && vec == 4 && pjl->parts.size() == 1 &&
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
    pc.cap = cfg_.final_logit_softcapping.value_or(0.0f);
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
    const uint32_t perm = m == 1 ? xq_perm : 0;
    if (xqm == 3 && perm) xqm = 4;
    if (xq_mode == 2) {
      b[6] = *xq;
      pc.next_in_s = next_in_s;
    }
    // Dense (bf16 / f16) weights over at most kCoopSmallTokens tokens (a batch's rows, a
    // verification step) stay on the matvecs: the tiled kernels' pass over dense weights costs
    // the same at any token count up to a tile (H200, E2B bf16: a 16-row batched step 40.9 ms on
    // the matrix units against 51.9 for its rows one by one, 8 rows 38.7 against 26.0).
    const bool dense_short_step = dense && m <= static_cast<int>(kCoopSmallTokens);
    if (m > 1 && !short_mv && !dense_short_step) {
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
        // Steps of at most kCoopSmallTokens tokens: 128 rows x 32 tokens per workgroup (the
        // MM_SMALL modules), else 64 rows x 128 tokens (64 for the gate/up pair).
        // (their shared memory: (DUAL x 128 + 2 x 32) rows of 9 16-byte vectors)
        const size_t small_shared = size_t((second ? 2 : 1) * 128 + 2 * 32) * 9 * 16;
        const bool small =
            m <= static_cast<int>(kCoopSmallTokens) && small_shared <= dev_->max_shared_bytes();
        // Longer steps where the device has workgroup-scope matrices: linear_cm2 without split K,
        // rows x tokens per workgroup as its modules' tiles (CMakeLists.txt: 128 x 128 for one
        // SRQ set, 64 x 128 for the SRQ pair and dense sets, 64 x 64 for dense pairs).
        const bool cm2 = cm2_ && !small;
        const uint32_t bm = cm2 ? (second || coop_dense ? 64 : 128) : small ? 128 : 64;
        const uint32_t bn = small ? 32 : second && (!cm2 || coop_dense) ? 64 : 128;
        const uint32_t ktiles = (d.cols + 63) / 64;
        const uint32_t tiles = ((m + bn - 1) / bn) * ((p.rows + bm - 1) / bm);
        if (!second && !coop_dense && !cm2 && coop_splitk_ && d.parts.size() == 1 &&
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
            // (linear_cm2 takes the integers as int8 bytes: I8)
            Dispatch(rc, "srq_quant", {cm2 ? 1u : 0u}, qb, &qp, sizeof(qp), (ld + 255) / 256, m, 1,
                     /*local_size=*/0);
          }
          Barrier(rc);
        }
        b[7] = CoopSlot(coop_slot_[0]);
        b[8] = second || coop_dense ? CoopSlot(coop_slot_[1]) : b[7];
        b[9] = CoopPart(coop_slot_[0]);
        const char* module = cm2     ? (coop_dense ? (second ? "linear_cmd2_d" : "linear_cm2_d")
                                                   : (second ? "linear_cmd2_q" : "linear_cm2_q"))
                             : small ? (second ? "linear_cmd_small" : "linear_cm_small")
                                     : (second ? "linear_cmd" : "linear_cm");
        Dispatch(rc, module, {KindCode(lin.kind), epi}, b, &pc, sizeof(pc), (m + bn - 1) / bn,
                 (p.rows + bm - 1) / bm, splits, /*local_size=*/0);
        if (splits > 1) {
          Barrier(rc);
          Dispatch(rc, "linear_cm_epi", {KindCode(lin.kind), epi}, b, &pc, sizeof(pc),
                   (p.rows + 255) / 256, m, 1, /*local_size=*/0);
        }
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
      // (steps of several tokens: PRO_M below, the integer path only, no fusion)
      const bool int_sets = lin.in_scale > 0.0f && IsQuantized(lin.kind) &&
                            (!second || (second->src->in_scale > 0.0f &&
                                         IsQuantized(second->src->kind)));
      if (tail || xqm == 1 || xqm == 3 || d.cols > 8 * static_cast<int>(kWG) ||
          (m > 1 && (!short_mv || !int_sets || xqm != 0 || pro->t_sums || pj)))
        throw Error(ErrorCode::kInternal, "vulkan: input norm prologue on a wrong linear");
      spec.push_back(m == 1 ? pro->mode : 0u);  // PRO
      spec.push_back(m == 1 ? static_cast<uint32_t>(d.cols) : 1u);  // PRO_N
      pc.n = static_cast<uint32_t>(d.cols);
      pc.scale = pro->scale;
      pc.eps = cfg_.rms_norm_eps;
      pc.has_a = pro->h_out && i == 0;
      pc.has_wa = pro->wa != nullptr;
      b[m == 1 ? 7 : 13] = *pro->h_in;
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
    const bool fast = dp && mv_fast_ && vec == 4 && lin.in_scale > 0.0f &&
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
    // One-token dense bf16 / f16 rows on 16-byte loads: the input (or a norm prologue's
    // output) staged as vec4s (linear.comp FXW), up to 16 KiB of it and 4 KiB below the
    // device's shared memory (the kernel's other shared arrays, the prologue's floats).
    const bool dense_vec = m == 1 && dense_vec4_ && dense && vec == 4 && !tail &&
                           (!second || second->src->kind == lin.kind) && xqm == 0;
    const size_t fx_bytes = size_t(d.wstride) / 2 * 16;
    const size_t fx_other = 4096 + (pro ? size_t(d.cols) * 4 : 0);
    const bool fxw =
        dense_vec && fx_bytes <= 16384 && fx_bytes + fx_other <= dev_->max_shared_bytes();
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
    // prologue runs once per workgroup, in one wave).
    const uint32_t nblk = (p.rows + rows_per_wg - 1) / rows_per_wg;
    uint32_t gy = nblk;
    if (m == 1) {
      // (a prologue caps the longer matrices too: it runs once per workgroup)
      int cap = static_cast<uint32_t>(p.rows) <= mv_max_rows_ || pro ? mv_wgs_ : mv_wgs_long_;
      if (dj_ok && down_fuse_wgs_ > 0) cap = down_fuse_wgs_;
      if (dense_short && dense_wgs_ > 0) cap = dense_wgs_;
      if (cap > 0) gy = std::min<uint32_t>(gy, static_cast<uint32_t>(cap));
    } else if (rows_wgs_ > 0) {
      // (split K: the cap over all the splits' workgroups)
      const uint32_t nsplit = ksplit ? (d.wstride / 4 + nvec - 1) / nvec : 1;
      gy = std::min<uint32_t>(gy, std::max<uint32_t>(1, rows_wgs_ / nsplit));
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
                     pf_shape && m == 1 &&
                     gy <= mv_prefetch_early_ * std::max(1u, dev_->compute_units());
    const bool pfb = (((mv_prefetch_block_ && fast) || (dense_prefetch_ && (fxw || fxg))) &&
                      pf_shape && !pj_ok && gy < nblk) ||
                     pfe;
    if (pfb) {
      PadLinearSpec(spec, 22);
      spec.push_back(nvl);  // PFB
    }
    if (mv_dual_loop_ && fast && second && m == 1 && !fxw) {
      PadLinearSpec(spec, 23);
      spec.push_back(mv_dual_loop_);  // DUAL_LOOP
    }
    if (mv_pair_loop_ > 1 && fast && !second && m == 1 && !fxw && !pfb) {
      PadLinearSpec(spec, 24);
      spec.push_back(mv_pair_loop_);  // PAIR_LOOP
    }
    // (the shared input spans whole weight vectors: xwords is a multiple of a vector's words)
    if (fast && ((lin.kind == WeightKind::kQ2 && (mv_xcm_ & 1) != 0 && xwords % 16 == 0) ||
                 (lin.kind == WeightKind::kQ4 && (mv_xcm_ & 2) != 0 && xwords % 8 == 0))) {
      PadLinearSpec(spec, 25);
      spec.push_back(1);  // XCM
    }
    // The prologue's columns 8 per invocation, read as 16-byte vectors (linear.comp PRO_VEC;
    // not with PACK_ATOMIC, the first form's other packing, nor where the caller says so).
    if (pro && m == 1 && pro->vec && pro_vec_ && !pack_atomic_ && d.cols % 8 == 0) {
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
    if (share) {
      PadLinearSpec(spec, 31);
      spec.push_back(1);  // SHARE_X
    }

    if (fxg) {
      PadLinearSpec(spec, 32);
      spec.push_back(1);  // FXG
    }
    uint32_t gz = 1;
    if (ksplit) {
      if (!fast) throw Error(ErrorCode::kInternal, "vulkan: split-K matvec off the FAST path");
      PadLinearSpec(spec, 33);
      spec.push_back(nvec);                    // KSPLIT
      gz = (d.wstride / 4 + nvec - 1) / nvec;  // (the row's vectors, nvec per split)
      // A region of its own among the phase's split linears (they run at once on a GPU).
      if (rc.ksum_phase == rc.barriers && rc.ksum_taken == kKsumSlots) Barrier(rc);
      if (rc.ksum_phase != rc.barriers) {
        rc.ksum_phase = rc.barriers;
        rc.ksum_taken = 0;
      }
      ++rc.ksum_taken;
      const int slot = ksum_next_;
      ksum_next_ = (ksum_next_ + 1) % kKsumSlots;
      b[12] = {ksum_.r.buf, ksum_.r.offset + ksum_bytes_ * slot, ksum_bytes_, nullptr};
      // The last split of each row block finishes it (the epilogue, the sums zeroed for the
      // region's next use): a counter per token group and block, the region's own counters.
      const size_t counters = size_t((m + tok - 1) / tok) * nblk * 4;
      if (counters > kcount_bytes_)
        throw Error(ErrorCode::kInternal, "vulkan: split-K counters past their region");
      b[7] = {ksum_.r.buf, ksum_.r.offset + kKsumSlots * ksum_bytes_ + kcount_bytes_ * slot,
              kcount_bytes_, nullptr};
    }
    if (pro && m > 1) {
      PadLinearSpec(spec, 34);
      spec.push_back(pro->mode);                        // PRO_M
      spec.push_back(static_cast<uint32_t>(d.cols));  // PRO_MN
    }

    // Dense sums in double (DSUM) where SRQ roundings follow them: checkpoints with SRQ linears.
    const bool ds =
        dsum_ && (dense || lin.in_scale <= 0.0f || (second && second->src->in_scale <= 0.0f));
    const char* module = dp ? (ds ? "linear_dp_ds" : "linear_dp") : (ds ? "linear_ds" : "linear");
    Dispatch(rc, module, spec, b, &pc, sizeof(pc), (m + tok - 1) / tok, gy, gz);
  }
  return pj_ok || dj_ok;
}

// The residual stream is h_ unless `h` is given.
void VulkanBackend::NormOp(Rec& rc, int m, const Buf* t, const Buf* wt, float scale, const Buf* wa,
                           bool has_a, const BufRange& a, int h_row0, const BufRange* h) {
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
  Dispatch(rc, "resnorm", {0u, rc.fast_norm ? static_cast<uint32_t>(H) : 0u}, b, &pc, sizeof(pc),
           m);
}

void VulkanBackend::Dispatch(Rec& rc, const char* shader, std::vector<uint32_t> spec,
                             const std::array<BufRange, vk::kBindings>& b, const void* push,
                             size_t push_bytes, uint32_t gx, uint32_t gy, uint32_t gz,
                             uint32_t local_size) {
  if (gx == 0 || gy == 0 || gz == 0) return;
  // Constant 0 is the local size (0 for shaders with a fixed size, which ignore it).
  spec.insert(spec.begin(), local_size);
  std::array<BufRange, vk::kBindings> bb = b;
  bb[11] = step_.r;
  // One dispatch of `pipe` with `set` and the push constants.
  auto record = [&](VkPipeline pipe, VkDescriptorSet set) {
    vkCmdBindPipeline(rc.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
    vkCmdBindDescriptorSets(rc.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, dev_->layout(), 0, 1, &set, 0,
                            nullptr);
    if (rc.rows_set)
      vkCmdBindDescriptorSets(rc.cmd, VK_PIPELINE_BIND_POINT_COMPUTE, dev_->layout(), 1, 1,
                              &rc.rows_set, 0, nullptr);
    if (push_bytes)
      vkCmdPushConstants(rc.cmd, dev_->layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0,
                         static_cast<uint32_t>(push_bytes), push);
    vkCmdDispatch(rc.cmd, gx, gy, gz);
  };
  std::string probe_shader, label;
  if (rc.observer) {
    label = Label(shader, spec, gy, push, push_bytes);
    rc.observer->Before(shader, label, gx * gy * gz, &probe_shader, &bb);
  }
  const VkPipeline pipe =
      dev_->Pipeline(probe_shader.empty() ? shader : probe_shader.c_str(), spec);
  const VkDescriptorSet set = dev_->Set(bb);
  record(pipe, set);
  ++rc.dispatches;
  if (rc.observer) rc.observer->After(rc.cmd, label);
}

void VulkanBackend::Barrier(Rec& rc) {
  ++rc.barriers;
  dev_->Barrier(rc.cmd, rc.light ? light_barrier_ : vk::Device::BarrierKind::kFull);
}

// Prefill attention on matrix units over m query rows (q[t][nh hd]) and the K / V cache rings
// k / v ([ring][nkv hd]; step.pos0 / step.m set): q split into hi + lo f16 rows (split_f16
// QROWS: [K/V head][token][group] order, a power of two per row), then attention_cm, 32 rows of
// one K/V head per workgroup, into out[t][nh hd].
void VulkanBackend::AttnCmOp(Rec& rc, const BufRange& q, const BufRange& k, const BufRange& v,
                             const BufRange& out, int nh, int nkv, int hd, int ring, int window,
                             int m) {
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
  Dispatch(rc, AttnCmModule(hd), {attn_cm_acc_, attn_cm_rot_}, b, &ap, sizeof(ap),
           (static_cast<uint32_t>(m) + tpw - 1) / tpw, static_cast<uint32_t>(nkv), 1,
           /*local_size=*/0);
  Barrier(rc);
}

}  // namespace gemma::vulkan_internal
