// Drafts from a draft model: a smaller checkpoint with the same vocabulary (EngineOptions::
// draft_model_path) proposes the next tokens greedily, on its own backend context, and the target
// model verifies them in one step (session.cc). Drafts are point masses, so the session's accept
// rule (keep a drafted token when the choice equals it) leaves greedy and sampled output exactly
// as without speculation.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <stop_token>
#include <vector>

#include "backend/backend.h"
#include "decode/draft.h"
#include "runtime/step_batcher.h"

namespace gemma {

class ModelDraft : public decode::DraftSource {
 public:
  // With a batcher (over the draft model, shared by every drafting session of an engine), the
  // draft's one-token steps, and its catch-up steps where `batch_catch_up` (the model's
  // batches_multi_token_steps()), are evaluated together with other sessions' draft steps.
  explicit ModelDraft(std::unique_ptr<Backend> context, StepBatcher* batcher = nullptr,
                      bool batch_catch_up = false)
      : context_(std::move(context)), batcher_(batcher), batch_catch_up_(batch_catch_up) {}

  // The draft model's k greedy tokens after `history`. Its context keeps the tokens it evaluated,
  // so a call evaluates only what follows the longest prefix `history` shares with them (the
  // accepted part of the last draft included): the prompt once, then about k + 1 tokens per call.
  // Empty when k < 1 or the draft context has no room. Throws Error(kCancelled) when `stop` is
  // requested between its steps (the context then keeps what it fully evaluated) and the draft
  // backend's own errors.
  std::vector<int32_t> Propose(std::span<const int32_t> history, int k) override;

  // Checked before each step of the next Propose calls.
  void set_stop(std::stop_token stop) { stop_ = std::move(stop); }
  // Tokens the draft context holds.
  const std::vector<int32_t>& evaluated() const { return evaluated_; }
  // Bytes the draft context holds now (its caches grow with use).
  size_t resident_bytes() const { return context_->resident_bytes(); }

 private:
  // `batched`: through the batcher (one token, or several with every position's output).
  void Step(std::span<const int32_t> tokens, OutputMode mode, ForwardResult* out, bool batched);

  std::unique_ptr<Backend> context_;
  StepBatcher* batcher_;
  bool batch_catch_up_;
  std::vector<int32_t> evaluated_;
  std::stop_token stop_;
};

}  // namespace gemma
