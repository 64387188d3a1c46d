#include "backend/vulkan/vulkan_backend_impl.h"

namespace gemma {
namespace vulkan_internal {

void VulkanBackend::Forward(const ForwardRequest& req, ForwardResult* out) {
  const int n = static_cast<int>(req.tokens.size());
  ValidateForward(req, window_.cached(), capacity_, cfg_.vocab_size);
  // Another context's device failure replaced the engine's device: rebuild on the new one.
  if (!broken_ && weights_->generation != shared_->generation()) broken_ = true;
  if (broken_) Rebuild();
  if (replay_) Replay();
  *out = ForwardResult();
  // A verification step long enough runs as a batched step's rows (VERIFY_ROWS), and from
  // kMatmulMinTokens tokens always: a chunk that long takes the prompt path's attention, whose f32
  // sums do not give the one-token steps' outputs bit for bit (the rows' attention does).
  const bool as_rows = n > 1 && req.all_positions &&
                       ((verify_rows_ > 0 && n >= verify_rows_) || n >= kMatmulMinTokens);
  if (as_rows && BatchReady(req)) {  // (n <= batch_rows_)
    BatchStep step{this, req, out};
    VulkanBackend* self = this;
    BatchStep* sp = &step;
    ForwardRows(std::span(&self, 1), std::span(&sp, 1));
    return;
  }
  const CacheWindow entry = window_;
  int begin = 0;
  try {
    for (; begin < n; begin += chunk_) {
      const int m = std::min(chunk_, n - begin);
      RunChunk(req.tokens.subspan(begin, m), begin + m == n, req, out,
               req.soft.empty() ? req.soft : req.soft.subspan(begin, m));
    }
  } catch (const Error& e) {
    // Nothing of a failed request is committed (Backend::Forward).
    window_ = entry;
    history_.resize(entry.cached());
    DropSoftRows(entry.cached());
    if (e.code() == ErrorCode::kDevice) {
      broken_ = true;
    } else if (begin > 0) {
      replay_ = true;  // (one chunk stays within the rings' slack: nothing it needs was lost)
    }
    throw;
  }
}

void VulkanBackend::RunChunk(std::span<const int32_t> tokens, bool last_chunk,
                             const ForwardRequest& req, ForwardResult* out,
                             std::span<const float* const> soft) {
  const int m = static_cast<int>(tokens.size());
  // Soft tokens (image or audio input): their rows come from the host as f32 (host_rows), in
  // place of the embedding rows; a chunk with none keeps every fast path.
  const bool host_rows = std::any_of(soft.begin(), soft.end(), [](const float* p) { return p; });
  if (!host_rows) soft = {};
  const StepActivations activations(*this, m);  // (the engine's set for long prompt chunks)
  const int pos0 = window_.cached();
  window_.BeginWrite(pos0, m);
  int out_first = req.all_positions ? 0 : (last_chunk ? m - 1 : m);
  int count = req.mode == OutputMode::kNone ? 0 : m - out_first;
  const bool inline_head = count <= head_rows_;
  if (m == 1) {
    FillInputs(tokens, req.mode, req.allowed, nullptr, soft);
    SubmitDecode(count > 0 ? req.mode : OutputMode::kNone);
  } else {
    // Prompt chunks: the command buffer is recorded by one task of the fill's pool while the
    // others gather the rows (the recording reads none of them), then submitted
    // (GEMMA_VULKAN_RECORD_BESIDE=0: one after the other).
    // A chunk's commands depend on its length, outputs and mode alone (positions and rows come
    // from the staging buffer), so recorded chunks are kept and replayed
    // (GEMMA_VULKAN_CHUNK_CACHE entries, 0: every chunk recorded anew): every full chunk of a
    // long prompt but the first.
    const PromptKey key{m, out_first, count, static_cast<int>(req.mode), host_rows};
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
    const std::function<void()> record = [&] {
      if (pc) pc->key = PromptKey{};  // (incomplete until End: a throw leaves no entry)
      Begin(cmd, pc != nullptr);
      Rec rc{cmd};
      RecordInputs(rc, m, req.mode, host_rows);
      out_first = RecordPromptStep(rc, m, pos0, out_first, count);
      if (count > 0 && inline_head) RecordHead(rc, out_first, count, req.mode);
      End(cmd);
      if (pc) {
        pc->key = key;
        pc->out_first = out_first;
      }
    };
    if (hit) {
      FillInputs(tokens, req.mode, req.allowed, nullptr, soft);
      out_first = pc->out_first;
    } else if (record_beside_) {
      FillInputs(tokens, req.mode, req.allowed, &record, soft);
    } else {
      FillInputs(tokens, req.mode, req.allowed, nullptr, soft);
      record();
    }
    if (pc) pc->used = ++prompt_cmd_clock_;
    dev_->Submit(cmd);
  }
  window_.Commit(pos0 + m);
  history_.insert(history_.end(), tokens.begin(), tokens.end());
  const int H = cfg_.hidden_size;
  for (int t = 0; t < static_cast<int>(soft.size()); ++t)
    if (soft[t]) soft_rows_[pos0 + t].assign(soft[t], soft[t] + H);
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

// Batched decode: one command buffer over every row (ForwardRows' contract in the header). A step
// of k tokens (a verification step) is k rows of its context at consecutive positions: every row
// writes its keys before any row's attention runs, and each row's attention reads its context's
// keys up to its own position (the k keys stay within the rings' slack, as a chunk's do). Steps go
// in the order logits, argmax, no output; the recording is kept by the rows' context ids and modes
// (their caches, RoPE tables and order fix it; tokens and positions come from the staging
// buffers), so a steady batch replays it.
void VulkanBackend::ForwardRows(std::span<VulkanBackend* const> ctx,
                                std::span<BatchStep* const> steps) {
  const int S = static_cast<int>(steps.size());
  if (S == 0) return;
  int B = 0;
  for (const BatchStep* s : steps) B += static_cast<int>(s->request.tokens.size());
  if (B < 2 || B > batch_rows_ || ctx.size() != steps.size())
    throw Error(ErrorCode::kInternal, "vulkan: a batch of " + std::to_string(B) + " rows");
  auto group = [](OutputMode m) {
    return m == OutputMode::kLogits ? 0 : m == OutputMode::kNone ? 2 : 1;
  };
  std::vector<int> order(S);
  for (int i = 0; i < S; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const int ga = group(steps[a]->request.mode), gb = group(steps[b]->request.mode);
    return ga != gb ? ga < gb : ctx[a]->uid() < ctx[b]->uid();
  });
  std::vector<VulkanBackend*> rows;
  std::vector<int32_t> tokens, positions;
  std::vector<uint64_t> key;
  int logits_rows = 0, out_rows = 0;
  for (int i : order) {
    const int g = group(steps[i]->request.mode);
    for (size_t j = 0; j < steps[i]->request.tokens.size(); ++j) {
      rows.push_back(ctx[i]);
      tokens.push_back(steps[i]->request.tokens[j]);
      positions.push_back(ctx[i]->cached() + static_cast<int>(j));
      logits_rows += g == 0;
      out_rows += g != 2;
      key.push_back(ctx[i]->uid());
      key.push_back(static_cast<uint64_t>(g));
    }
  }
  const int splits = RowSplits(B);
  // Inputs: the rows' embedding and PLE rows (as a prompt chunk's), each row's position.
  FillInputs(tokens, OutputMode::kArgmax, nullptr);
  const VulkanBackend* rope = WriteRowSteps(rows, positions);
  try {
    SubmitRows(rows, positions, key, logits_rows, out_rows, splits, rope);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kDevice) {
      broken_ = true;
      for (VulkanBackend* c : rows) c->broken_ = true;
    }
    throw;
  }
  const int V = cfg_.vocab_size;
  const uint8_t* o = out_host_.r.mapped;
  int r = 0;
  for (int i : order) {
    BatchStep& st = *steps[i];
    VulkanBackend& c = *ctx[i];
    const std::span<const int32_t> toks = st.request.tokens;
    *st.result = ForwardResult();
    for (size_t j = 0; j < toks.size(); ++j, ++r) {
      if (r < logits_rows) {
        const float* f = reinterpret_cast<const float*>(o) + size_t(r) * V;
        st.result->logits.insert(st.result->logits.end(), f, f + V);
      } else if (r < out_rows) {
        uint32_t w[2];
        std::memcpy(w, o + size_t(logits_rows) * V * 4 + 8 * (r - logits_rows), 8);
        st.result->ids.push_back(static_cast<int32_t>(w[0]));
      }
    }
    c.window_.Commit(c.cached() + static_cast<int>(toks.size()));
    c.history_.insert(c.history_.end(), toks.begin(), toks.end());
    ++c.batched_steps_;
  }
}

const VulkanBackend* VulkanBackend::WriteRowSteps(std::span<VulkanBackend* const> rows,
                                                  std::span<const int32_t> positions) {
  const VulkanBackend* rope = rows[0];
  for (size_t r = 0; r < rows.size(); ++r) {
    const VulkanBackend& c = *rows[r];
    const uint32_t st[6] = {
        static_cast<uint32_t>(positions[r]), 1, 0, 0, static_cast<uint32_t>(c.sliding_ring_),
        static_cast<uint32_t>(c.capacity_)};
    std::memcpy(row_steps_host_.r.mapped + r * kRowStepBytes, st, sizeof(st));
    if (c.capacity_ > rope->capacity_) rope = &c;
  }
  return rope;
}

// ForwardRows' command buffer (recorded, or replayed by its key) submitted, its inputs written.
void VulkanBackend::SubmitRows(const std::vector<VulkanBackend*>& rows,
                               const std::vector<int32_t>& positions,
                               const std::vector<uint64_t>& key, int logits_rows, int out_rows,
                               int splits, const VulkanBackend* rope) {
  BatchCmd* bc = nullptr;
  for (BatchCmd& c : batch_cmds_)
    if (c.key == key) bc = &c;
  if (!bc) {
    // The rows' cache sets of recordings no longer kept are released with them all.
    if (dev_->transient_sets() + model_.num_caches() > vk::Device::kMaxTransientSets) {
      for (BatchCmd& c : batch_cmds_) c.key.clear();
      dev_->ResetTransientSets();
    }
    for (BatchCmd& c : batch_cmds_)
      if (c.key.empty()) bc = &c;
    if (!bc && batch_cmds_.size() < kBatchCmds) {
      batch_cmds_.push_back({{}, dev_->AllocCommandBuffer(), 0});
      bc = &batch_cmds_.back();
    }
    if (!bc)
      bc = &*std::min_element(batch_cmds_.begin(), batch_cmds_.end(),
                              [](const BatchCmd& a, const BatchCmd& b) { return a.used < b.used; });
    bc->key.clear();  // (incomplete until End: a throw leaves no entry)
    RecordRows(bc->cmd, rows, logits_rows, out_rows, splits, rope);
    bc->key = key;
  }
  bc->used = ++batch_cmd_clock_;
  for (size_t r = 0; r < rows.size(); ++r) rows[r]->window_.BeginWrite(positions[r], 1);
  dev_->Submit(bc->cmd);
}

void VulkanBackend::RecordRows(VkCommandBuffer cmd, const std::vector<VulkanBackend*>& rows,
                               int logits_rows, int out_rows, int splits,
                               const VulkanBackend* rope) {
  const int B = static_cast<int>(rows.size());
  Begin(cmd, true);
  Rec rc{cmd};
  rc.rows = &rows;
  rc.row_splits = splits;
  rc.rope_rows = rope;
  const VkBufferCopy cp{row_steps_host_.r.offset, row_steps_.r.offset, B * kRowStepBytes};
  vkCmdCopyBuffer(rc.cmd, row_steps_host_.r.buf, row_steps_.r.buf, 1, &cp);
  RecordInputs(rc, B, OutputMode::kArgmax);  // (ends with a barrier)
  RecordBody(rc, B, splits);
  if (out_rows > 0) RecordBatchHead(rc, out_rows, logits_rows, out_rows > logits_rows);
  End(cmd);
}

void VulkanBackend::PrepareBatchPipelines(int min_rows, const std::atomic<bool>& stop) {
  if (batch_rows_ < 2) return;
  const VkCommandBuffer cmd = dev_->AllocCommandBuffer();
  for (int B = std::max(2, min_rows); B <= batch_rows_ && !stop.load(); ++B) {
    const std::vector<VulkanBackend*> rows(static_cast<size_t>(B), this);
    // argmax rows (decode), then logits rows (verification steps)
    RecordRows(cmd, rows, 0, B, RowSplits(B), this);
    if (!stop.load()) RecordRows(cmd, rows, B, B, RowSplits(B), this);
  }
  // (the command buffer and the rows' descriptor sets go with this context)
}

void VulkanBackend::RecordBatchHead(Rec& rc, int count, int logits_rows, bool reduce) {
  const int H = cfg_.hidden_size, V = cfg_.vocab_size;
  FinalNormOp(rc, count, 0);
  Barrier(rc);
  LinearOp(rc, lm_head_, hn_.r, H, logits_.r, V, 0, count, 2);
  Barrier(rc);
  if (reduce) RecordLogitsReduce(rc, count, false);
  if (logits_rows > 0) {
    const VkBufferCopy cp{logits_.r.offset, out_host_.r.offset, size_t(logits_rows) * V * 4};
    vkCmdCopyBuffer(rc.cmd, logits_.r.buf, out_host_.r.buf, 1, &cp);
  }
  if (count > logits_rows) {
    const VkBufferCopy cp{res_.r.offset + size_t(logits_rows) * 8,
                          out_host_.r.offset + size_t(logits_rows) * V * 4,
                          size_t(count - logits_rows) * 8};
    vkCmdCopyBuffer(rc.cmd, res_.r.buf, out_host_.r.buf, 1, &cp);
  }
}

// `beside` (prompt chunks): run as one more task of the fill's pool, task 0, so it starts at once
// beside the rows' tasks (after them without a pool or below 64 tokens); its exception, if any,
// is rethrown here after the rows are written.
void VulkanBackend::FillInputs(std::span<const int32_t> tokens, OutputMode mode,
                               const std::vector<uint64_t>* allowed,
                               const std::function<void()>* beside,
                               std::span<const float* const> soft) {
  const int m = static_cast<int>(tokens.size());
  const int H = cfg_.hidden_size, LP = cfg_.num_layers * cfg_.hidden_size_per_layer_input;
  uint8_t* in = in_host_.r.mapped;
  WriteStepValues(m);
  // Prompt chunks: the stored rows (RecordGpuRows decodes them), but f32 embedding rows from the
  // host when the chunk has soft tokens (their rows are the tower's floats).
  const bool gpu_ple = m > 1 && gpu_rows_, gpu_x0 = gpu_ple && soft.empty();
  auto rows = [&](int t0, int t1) {
    for (int t = t0; t < t1; ++t) {
      const int32_t id = model_.EmbedId(tokens[t]);
      if (gpu_x0) {
        CopyGpuRowRecord(model_.embed(), id,
                         in + in_x0_off_ + size_t(t) * GpuRowRecordWords(model_.embed()) * 4);
      } else if (!soft.empty() && soft[t]) {
        std::memcpy(in + in_x0_off_ + size_t(t) * H * 4, soft[t], size_t(H) * 4);
      } else {
        ref::EmbeddingRowFast(model_.embed(), id,
                              reinterpret_cast<float*>(in + in_x0_off_) + size_t(t) * H);
      }
      if (LP == 0) continue;
      if (gpu_ple) {
        CopyGpuRowRecord(model_.ple_embed(), id,
                         in + in_tok_off_ + size_t(t) * GpuRowRecordWords(model_.ple_embed()) * 4);
      } else {
        ref::EmbeddingRowFast(model_.ple_embed(), id,
                              reinterpret_cast<float*>(in + in_tok_off_) + size_t(t) * LP);
      }
    }
  };
  // Prompt chunks: the rows (about 10,500 dequantized floats per token on E2B) on several host
  // threads while the GPU waits for them; one-token steps stay on the caller.
  if (m == 1) {
    FillOneTokenRow(tokens[0], soft.empty() ? nullptr : soft[0]);
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

void VulkanBackend::ReadHead(int count, OutputMode mode, ForwardResult* out) {
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

// One decoded token (inputs written).
void VulkanBackend::SubmitDecode(OutputMode mode) { SubmitFilledDecode(DecodeCommand(mode)); }

// A one-token step's command buffer (DecodeCommand) submitted with its inputs written.
void VulkanBackend::SubmitFilledDecode(VkCommandBuffer cb) { dev_->Submit(cb); }

// One token: the rows decoded into cached memory and copied into the staging buffer in one pass
// each (the staging memory may be uncached, where element-by-element stores are slow). The
// embedding row first, then the PLE rows (the split staging when there is one).
void VulkanBackend::FillOneTokenRow(int32_t token, const float* soft) {
  const int H = cfg_.hidden_size;
  if (soft) {
    std::memcpy(in_host_.r.mapped + in_x0_off_, soft, size_t(H) * 4);
    return;
  }
  fill_row_.resize(H);
  ref::EmbeddingRowFast(model_.embed(), model_.EmbedId(token), fill_row_.data());
  std::memcpy(in_host_.r.mapped + in_x0_off_, fill_row_.data(), size_t(H) * 4);
}

void VulkanBackend::FillOneTokenSide(int32_t token) {
  const int LP = cfg_.num_layers * cfg_.hidden_size_per_layer_input;
  if (LP == 0) return;
  fill_row_.resize(LP);
  ref::EmbeddingRowFast(model_.ple_embed(), model_.EmbedId(token), fill_row_.data());
  uint8_t* tok = in_side_.handle >= 0 ? in_side_.r.mapped : in_host_.r.mapped + in_tok_off_;
  std::memcpy(tok, fill_row_.data(), size_t(LP) * 4);
}

void VulkanBackend::FillMask(int m, const std::vector<uint64_t>* allowed) {
  uint8_t* mask = m == 1 && in_side_.handle >= 0 ? in_side_.r.mapped + in_side_mask_off_
                                                 : in_host_.r.mapped + in_mask_off_;
  std::memcpy(mask, allowed->data(), size_t((cfg_.vocab_size + 31) / 32) * 4);
}

// The step's position and token count (the step buffer's values) at the staging buffer's start.
// Then (words 4-7) the step values of a prompt chunk's trailing shared layers, run for its last
// position alone (RecordPromptStep).
void VulkanBackend::WriteStepValues(int m) {
  const uint32_t pos = static_cast<uint32_t>(window_.cached());
  const uint32_t step[8] = {pos, static_cast<uint32_t>(m), 0, 0, pos + m - 1, 1, 0, 0};
  std::memcpy(in_host_.r.mapped, step, m > 1 ? 32 : 16);
}

// Writes a step's inputs into the host staging buffer: step values, embedding rows, PLE rows
// and (select) the allowed mask.
// embed_rows.comp's kind code for a table it decodes (0: the host decodes it): bf16, f16, and
// quantized kinds with whole scale blocks, whose record (codes, then scales) is no longer than
// the f32 row the staging region holds.
uint32_t VulkanBackend::GpuRowKind(const Embedding& e) {
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

}  // namespace vulkan_internal

using vulkan_internal::VulkanBackend;

std::unique_ptr<Backend> CreateVulkanBackend(const Model& model, const BackendOptions& options,
                                             const VulkanOptions& vulkan) {
  return std::make_unique<VulkanBackend>(
      std::make_shared<vulkan_internal::VulkanShared>(model, vulkan), options);
}

std::unique_ptr<Backend> CreateVulkanBackend(const Model& model, const BackendOptions& options) {
  return CreateVulkanBackend(model, options, VulkanOptions());
}

std::unique_ptr<Backend> CreateVulkanSibling(const Backend& backend, const BackendOptions& options,
                                             const KernelConfig& kernels) {
  const auto* vb = dynamic_cast<const VulkanBackend*>(&backend);
  if (!vb) return nullptr;
  return std::make_unique<VulkanBackend>(vb->shared(), options, kernels);
}

bool GetVulkanStats(const Backend& backend, VulkanStats* stats) {
  const auto* vb = dynamic_cast<const VulkanBackend*>(&backend);
  if (!vb) return false;
  vb->GetStats(stats);
  return true;
}

}  // namespace gemma
