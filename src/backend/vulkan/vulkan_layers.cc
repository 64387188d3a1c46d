#include "backend/vulkan/vulkan_backend_impl.h"

namespace gemma::vulkan_internal {

// Records the model body for m tokens (inputs already in h_/tok_), then the head for rows
// [out_first, out_first + out_count) when out_count > 0.
// Layers [l_begin, l_end) (all by default); l_begin == 0 also records the step's prologue (PLE
// projection, first input norm, PLE rows).
void VulkanBackend::RecordBody(Rec& rc, int m, int splits, int l_begin, int l_end) {
  const int H = cfg_.hidden_size, L = cfg_.num_layers, P = cfg_.hidden_size_per_layer_input;
  const int LP = L * P;
  if (l_end < 0) l_end = L;
  if (l_begin == 0) {
    if (P > 0) {
      LinearOp(rc, ple_proj_, h_.r, H, ple_.r, LP, 0, m);
    }
    NormOp(rc, m, nullptr, nullptr, 1.0f, &layers_[0].input_norm, true, a_.r);
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
  // ... and steps of 2..rows_pro_max_ tokens on the matvecs where every linear that takes a norm
  // is on the integer path (linear.comp PRO_M: the prologue per token, no fusions).
  const bool cn =
      (m == 1 || (m <= std::min(rows_pro_max_, rows_mv_max_) && short_pro_ok_)) && NormPrologues();
  const bool one = m == 1;
  // Steps of several tokens (a batch's rows, verification steps, prompt chunks) take each norm
  // after the first with the factors one-token steps' prologues use (the first, above, is a norm
  // kernel in both): each row gets the one-token step's bits.
  rc.fast_norm = m > 1 && rms_fast_ && NormPrologues();  // (and the last layer's, below)
  BufRange hcur = h_.r, hnext = h2_.r;
  const Buf* pend_wt = nullptr;  // the norm the next linear applies
  float pend_scale = 1.0f;
  // The PLE projection's sums left for the next layer's prologue (EPI 4 / PRO_T), or none.
  const DevLinear* pend_sums = nullptr;
  uint32_t pend_copies = 1;
  BufRange pend_acc{};
  // One-token and short steps (their linears all on the matvecs): the layer loop records
  // dispatches only (no transfers), so its barriers need the compute stage only
  // (GEMMA_VULKAN_BARRIER).
  rc.light = m <= rows_mv_max_;
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
      LinearOp(rc, d.q, t_.r, H, q_.r, qw, 0, m, 0, nullptr, nullptr, 0, 0, 0, nullptr, 0, nullptr,
               0.0f, &pq);
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
    if (rc.rows) {
      RecordRowsAttention(rc, p, d);
    } else {
      RecordAttention(rc, m, splits, p, d);
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
    const bool xq = (fuse || (cn && one)) && d.down.src->in_scale > 0 &&
                    IsQuantized(d.down.src->kind) &&
                    d.gate.parts.size() == 1;
    const BufRange xq_l{xq_.r.buf, xq_.r.offset + xq_region_ * l, xq_region_, nullptr};
    // One-token steps with the norms in the consumers: the down projection summed by gate/up's
    // workgroups (DJ) where a prologue takes its sums next (the PLE gate's, or the next
    // layer's q/k/v: not after the last layer, which a norm kernel follows).
    const size_t dcopy = size_t(down_fuse_copies_) * H * 4;
    const PleFuse df{&d.down,
                     {pacc_.r.buf, pacc_.r.offset + size_t(L) * H * 4 + l * dcopy, dcopy, nullptr}};
    bool down_fused = false;
    if (cn) {
      const BufRange* wa = d.pre_ffn_norm.handle >= 0 ? &d.pre_ffn_norm.r : nullptr;
      const Pro pg{1, &hcur, &d.post_attn_norm.r, wa, &hnext, 1.0f};
      const bool try_df = one && down_fuse_ && (P > 0 || l + 1 < l_end);
      down_fused = LinearOp(rc, d.gate, t_.r, H, g_.r, p.intermediate, 0, m, 1, &d.up, nullptr, 0,
                            0, 0, nullptr, xq ? 2 : 0, xq ? &xq_l : nullptr, d.down.src->in_scale,
                            &pg, XqPerm(d.down), try_df ? &df : nullptr);
      std::swap(hcur, hnext);
    } else if (xq) {
      LinearOp(rc, d.gate, a_.r, H, g_.r, p.intermediate, 0, m, 1, &d.up, nullptr, 0, 0, 0, nullptr,
               2, &xq_l, d.down.src->in_scale, nullptr, XqPerm(d.down));
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
        const PleFuse pf{&d.ple_proj,
                         {pacc_.r.buf, pacc_.r.offset + size_t(l) * H * 4, size_t(H) * 4, nullptr}};
        const bool fused =
            LinearOp(rc, d.ple_gate, t_.r, H, gp_.r, P, 0, m, 3, nullptr, &ple_.r, LP, l * P, 0,
                     nullptr, 0, nullptr, 0.0f, &pp, 0,
                     one && ple_fuse_ && l + 1 < l_end ? &pf : nullptr);
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
        LinearOp(rc, d.down, g_.r, p.intermediate, t_.r, H, 0, m, 0, nullptr, nullptr, 0, 0, 0, &tl,
                 xq ? 1 : 0, &xq_l, 0.0f, nullptr, XqPerm(d.down));
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
        NormOp(rc, m, &t_, &d.post_ple_norm, w.layer_scalar, next_norm, next_norm != nullptr, a_.r);
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
  if (cn && pend_wt && rc.fuse_head && !pend_sums && l_end == L && m == 1) {
    // The last layer's norm and the final norm in the LM head's prologue (RecordHead).
    rc.head_pend = true;
    rc.head_wt = pend_wt;
    rc.head_scale = pend_scale;
    rc.head_h = hcur;
  } else if (cn && pend_wt) {
    // The last layer's norm, on the current residual buffer, which then goes back to h_.
    NormOp(rc, m, &t_, pend_wt, pend_scale, nullptr, false, {}, 0, &hcur);
    Barrier(rc);
    if (hcur.offset != h_.r.offset || hcur.buf != h_.r.buf) {
      VkBufferCopy cp{hcur.offset, h_.r.offset, size_t(m) * H * 4};
      vkCmdCopyBuffer(rc.cmd, hcur.buf, h_.r.buf, 1, &cp);
      Barrier(rc);
    }
  }
  rc.fast_norm = false;
}

// q = rope(rmsnorm(q) q_norm), and the new K / V rows normed, roped and written to the cache
// (`slot`'s, or the rows' in set 1 with their row records), over gy tokens: `shader` is qkrope or
// a rows module; `ring` the push constants' ring (qkrope_rows: 0 sliding, 1 full).
void VulkanBackend::QkRopeOp(Rec& rc, const LayerPlan& p, const DevLayer& d, uint32_t ring,
                             const CacheSlot* slot, const BufRange& rope, const char* shader,
                             uint32_t gy) {
  const int hd = p.head_dim, nh = p.num_heads, nkv = p.num_kv_heads;
  RopePush pc{static_cast<uint32_t>(nh),
              static_cast<uint32_t>(nkv),
              static_cast<uint32_t>(hd),
              ring,
              static_cast<uint32_t>(p.type == LayerType::kSliding ? rot_s_ : rot_f_),
              cfg_.rms_norm_eps,
              static_cast<uint32_t>(nh * hd),
              static_cast<uint32_t>(nkv * hd)};
  std::array<BufRange, vk::kBindings> b{};
  b[0] = q_.r;
  b[1] = kt_.r;
  b[2] = vt_.r;
  b[3] = d.q_norm.r;
  if (d.k_norm.handle >= 0) b[4] = d.k_norm.r;
  if (slot) {
    b[5] = slot->k.r;
    b[6] = slot->v.r;
  } else {
    b[12] = row_steps_.r;
  }
  b[7] = rope;
  Dispatch(rc, shader, {}, b, &pc, sizeof(pc), nh + (p.kv_shared ? 0 : 2 * nkv), gy);
  Barrier(rc);
}

// One layer's attention for the m tokens of one context (q in q_, new K / V rows in kt_ / vt_):
// RoPE, the cache rows written, attention into attn_.
void VulkanBackend::RecordAttention(Rec& rc, int m, int splits, const LayerPlan& p, DevLayer& d) {
  const int hd = p.head_dim, nh = p.num_heads, nkv = p.num_kv_heads;
  const int qw = nh * hd;
  CacheSlot& slot = slots_[model_.layers()[p.kv_layer].cache_slot];
  const bool sliding = p.type == LayerType::kSliding;
  // One-token steps: attn_fused.comp where the shapes fit.
  uint32_t frl = 0, fd = 0, fkw = 0;
  const bool fused = m == 1 && FusedAttnShape(hd, &frl, &fd, &fkw);
  if (!(fused && attn_fused_rope_)) {
    QkRopeOp(rc, p, d, static_cast<uint32_t>(slot.ring), &slot, sliding ? rope_s_.r : rope_f_.r,
             "qkrope", m);
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
                0u /* (unused) */, hpw},
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
        Dispatch(rc, kernel, {}, b, &pc, sizeof(pc), (nh + 3) / 4, (m + qps - 1) / qps, 1, false);
      } else {
        Dispatch(rc, attn_pf_ == 1 ? "attention_pf" : "attention_pf32", {}, b, &pc, sizeof(pc),
                 (nh + 3) / 4, m, 1, false);
      }
      Barrier(rc);
    } else {
      if (splits_adapt_) {
        Dispatch(rc, "attention", {0u, 0u /* (unused) */, 1u}, b, &pc, sizeof(pc), nh, m, splits);
      } else {
        Dispatch(rc, "attention", {}, b, &pc, sizeof(pc), nh, m, splits);
      }
      Barrier(rc);
      CombinePush cp{static_cast<uint32_t>(nh), static_cast<uint32_t>(hd),
                     static_cast<uint32_t>(splits), static_cast<uint32_t>(qw)};
      b[5] = attn_.r;
      Dispatch(rc, "attn_combine", {}, b, &cp, sizeof(cp), nh, m);
      Barrier(rc);
    }
  }
}

// One layer's attention for a batch's rows (rc.rows: row r is context rows[r]'s token at the
// position of its row record): qkrope_rows, attention_rows in rc.row_splits key splits and their
// merge, each one dispatch over all rows, every row over its own context's caches (set 1) and
// ring lengths (its record); the RoPE table of the rows' largest capacity (rc.rope_rows).
void VulkanBackend::RecordRowsAttention(Rec& rc, const LayerPlan& p, DevLayer& d) {
  const int hd = p.head_dim, nh = p.num_heads, nkv = p.num_kv_heads;
  const uint32_t qw = nh * hd;
  const uint32_t rows = static_cast<uint32_t>(rc.rows->size());
  const int cache_slot = model_.layers()[p.kv_layer].cache_slot;
  const bool sliding = p.type == LayerType::kSliding;
  // (push constants: ring 0 reads the row's sliding ring, 1 its capacity: the owner's kind)
  const uint32_t ring = model_.layers()[p.kv_layer].window > 0 ? 0u : 1u;
  const uint32_t splits = static_cast<uint32_t>(rc.row_splits);
  std::array<BufRange, 2 * vk::Device::kRowSlots> caches{};
  for (uint32_t r = 0; r < rows; ++r) {
    const CacheSlot& slot = (*rc.rows)[r]->slots_[cache_slot];
    caches[r] = slot.k.r;
    caches[vk::Device::kRowSlots + r] = slot.v.r;
  }
  rc.rows_set = dev_->RowsSet(caches);
  QkRopeOp(rc, p, d, ring, nullptr, sliding ? rc.rope_rows->rope_s_.r : rc.rope_rows->rope_f_.r,
           dev_->row_slots() == 16 ? "qkrope_rows16" : "qkrope_rows8", rows);
  const char* attention = dev_->row_slots() == 16 ? "attention_rows16" : "attention_rows8";
  AttnPush pc{static_cast<uint32_t>(nh),
              static_cast<uint32_t>(nkv),
              static_cast<uint32_t>(hd),
              ring,
              static_cast<uint32_t>(p.window),
              splits,
              qw};
  std::array<BufRange, vk::kBindings> b{};
  b[0] = q_.r;
  b[3] = po_.r;
  b[4] = pml_.r;
  b[12] = row_steps_.r;
  Dispatch(rc, attention, {0u, 0u, splits_adapt_ ? 1u : 0u}, b, &pc, sizeof(pc), nh, rows, splits);
  rc.rows_set = VK_NULL_HANDLE;
  Barrier(rc);
  CombinePush cp{static_cast<uint32_t>(nh), static_cast<uint32_t>(hd), splits, qw};
  b[5] = attn_.r;
  Dispatch(rc, "attn_combine", {}, b, &cp, sizeof(cp), nh, rows);
  Barrier(rc);
}

void VulkanBackend::RecordHead(Rec& rc, int out_first, int count, OutputMode mode) {
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
    FinalNormOp(rc, count, out_first);
    Barrier(rc);
    LinearOp(rc, lm_head_, hn_.r, H, logits_.r, V, 0, count, 2);
  }
  Barrier(rc);
  if (mode == OutputMode::kLogits) {
    RecordHeadCopy(rc, count, mode);
    return;
  }
  RecordLogitsReduce(rc, count, mode == OutputMode::kSelect);
  RecordHeadCopy(rc, count, mode);
}

void VulkanBackend::RecordLogitsReduce(Rec& rc, int count, bool mask) {
  ReducePush pc{static_cast<uint32_t>(cfg_.vocab_size), vocab_block_,
                static_cast<uint32_t>(nblocks_), mask ? 1u : 0u};
  std::array<BufRange, vk::kBindings> b{};
  b[0] = logits_.r;
  b[1] = mask_.r;
  b[2] = part_.r;
  b[3] = res_.r;
  b[4] = reduce_cnt_.r;
  const uint32_t reg = (vocab_block_ + kWG - 1) / kWG;
  if (reduce_last_ && reg <= 16) {
    // One dispatch: each block reduced from registers, the row's last block merging them all.
    Dispatch(rc, "logits_reduce", {0, 1, reg}, b, &pc, sizeof(pc), nblocks_, count);
    Barrier(rc);
  } else {
    Dispatch(rc, "logits_reduce", {0}, b, &pc, sizeof(pc), nblocks_, count);
    Barrier(rc);
    Dispatch(rc, "logits_reduce", {1}, b, &pc, sizeof(pc), count);
    Barrier(rc);
  }
}

// The body and head of a multi-token step whose outputs are rows [out_first, out_first + count):
// with one output row (the last) or none, the layers from Model::shared_tail() (they feed only
// their own position's logits) run for that row alone
// (moved to row 0, the step's position and count rewritten on the device) or are skipped.
// Returns the row the head reads from (out_first, or 0 after the move).
int VulkanBackend::RecordPromptStep(Rec& rc, int m, int pos0, int out_first, int count) {
  const int L = cfg_.num_layers, H = cfg_.hidden_size;
  const int LP = L * cfg_.hidden_size_per_layer_input;
  const int lc = model_.shared_tail();
  // Chunks below the tiled kernels' size (a speculative verification step, a short prompt at a
  // long context) split each query's keys as a batch's rows do; longer chunks run the prompt
  // attention kernels, which take no splits.
  const int splits = m < kMatmulMinTokens ? RowSplits(m) : 1;
  if (!skip_tail_ || lc >= L || count > 1 || (count == 1 && out_first != m - 1)) {
    RecordBody(rc, m, splits);
    return out_first;
  }
  RecordBody(rc, m, splits, 0, lc);  // ends with a barrier
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

void VulkanBackend::RecordInputs(Rec& rc, int m, OutputMode mode, bool host_rows) {
  const int H = cfg_.hidden_size;
  const VkBuffer src = in_host_.r.buf;
  const VkDeviceSize base = in_host_.r.offset;
  VkBufferCopy cp{base, step_.r.offset, 16};
  vkCmdCopyBuffer(rc.cmd, src, step_.r.buf, 1, &cp);
  if (m > 1 && gpu_rows_ && !host_rows) {
    RecordGpuRows(rc, model_.embed(), in_x0_off_, h_.r, m);
  } else {
    cp = {base + in_x0_off_, h_.r.offset, size_t(m) * H * 4};
    vkCmdCopyBuffer(rc.cmd, src, h_.r.buf, 1, &cp);
  }
  // One-token steps (split): the PLE rows and the mask come from host memory, copied (with the
  // scratch fills) after the barrier: they are first read after the body's first phase (by the
  // ple kernel, the head, the first gate/up), which ends with a full barrier, so their copies
  // run beside it. Every caller records the body next.
  const bool split = m == 1 && in_side_.handle >= 0;
  if (split) Barrier(rc);
  RecordRestInputs(rc, m, mode, split);
  if (!split) Barrier(rc);
}

// The PLE rows' and mask's copies (from the split staging or the main one) and a one-token
// step's scratch fills.
void VulkanBackend::RecordRestInputs(Rec& rc, int m, OutputMode mode, bool split) {
  const int LP = cfg_.num_layers * cfg_.hidden_size_per_layer_input;
  const VkDeviceSize base = in_host_.r.offset;
  const VkBuffer rest = split ? in_side_.r.buf : in_host_.r.buf;
  const VkDeviceSize tok_at = split ? in_side_.r.offset : base + in_tok_off_;
  const VkDeviceSize mask_at = split ? in_side_.r.offset + in_side_mask_off_ : base + in_mask_off_;
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

// The records of the staging region at byte `off` decoded into m rows of `out` (f32).
void VulkanBackend::RecordGpuRows(Rec& rc, const Embedding& e, VkDeviceSize off,
                                  const BufRange& out, int m) {
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

// The pre-recorded command buffer of one decoded token for an output mode (and context tier:
// LongContextStep).
VkCommandBuffer VulkanBackend::DecodeCommand(OutputMode mode) {
  const bool long_ctx = LongContextStep();
  VkCommandBuffer& cb = decode_cmd_[long_ctx ? 1 : 0][static_cast<int>(mode)];
  if (cb) return cb;
  cb = dev_->AllocCommandBuffer();
  Begin(cb, true);
  Rec rc{cb};
  rc.long_ctx = long_ctx;
  rc.fuse_head = head_norm_ && mode != OutputMode::kNone;
  RecordInputs(rc, 1, mode);
  RecordBody(rc, 1, splits_);
  if (mode != OutputMode::kNone) RecordHead(rc, 0, 1, mode);
  End(cb);
  if (mode == OutputMode::kArgmax) {
    decode_dispatches_ = rc.dispatches;
    decode_barriers_ = rc.barriers;
  }
  return cb;
}

void VulkanBackend::RecordHeadCopy(Rec& rc, int count, OutputMode mode) {
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
void VulkanBackend::ZeroOneTokenScratch(VkCommandBuffer cmd) {
  vkCmdFillBuffer(cmd, xq_.r.buf, xq_.r.offset, xq_.r.size, 0);
  if (pacc_.handle >= 0) vkCmdFillBuffer(cmd, pacc_.r.buf, pacc_.r.offset, pacc_.r.size, 0);
}

}  // namespace gemma::vulkan_internal
