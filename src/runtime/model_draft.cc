#include "runtime/model_draft.h"

#include <algorithm>

#include "gemma/error.h"

namespace gemma {

void ModelDraft::Step(std::span<const int32_t> tokens, OutputMode mode, ForwardResult* out,
                      bool batched) {
  if (stop_.stop_requested()) throw Error(ErrorCode::kCancelled, "cancelled while drafting");
  // (unchanged caches if it throws)
  if (batched) {
    batcher_->Step(context_.get(),
                   {.tokens = tokens, .mode = mode, .all_positions = tokens.size() > 1}, out);
  } else {
    context_->Forward({.tokens = tokens, .mode = mode}, out);
  }
  evaluated_.insert(evaluated_.end(), tokens.begin(), tokens.end());
}

std::vector<int32_t> ModelDraft::Propose(std::span<const int32_t> history, int k) {
  if (k < 1 || history.empty()) return {};
  evaluated_.resize(std::min(evaluated_.size(), static_cast<size_t>(context_->cached())));
  // The caches keep the longest prefix shared with the history, but the history's last token is
  // always evaluated (its output is the first draft token).
  size_t keep = 0;
  while (keep < evaluated_.size() && keep < history.size() && evaluated_[keep] == history[keep])
    ++keep;
  keep = std::min(keep, history.size() - 1);
  if (keep < evaluated_.size()) {
    if (!context_->Truncate(static_cast<int>(keep))) keep = 0;  // (a reset: re-evaluated below)
    evaluated_.resize(keep);
  }
  // The history and k - 1 drafted tokens must fit.
  const int room = context_->capacity() - static_cast<int>(history.size()) + 1;
  k = std::min(k, room);
  if (k < 1) return {};
  const size_t max_chunk = context_->capabilities().max_chunk > 0
                               ? static_cast<size_t>(context_->capabilities().max_chunk)
                               : history.size();
  // Through the batcher, the draft context leaves it when this call ends, however it ends (its
  // next step is a verification step away).
  const StepBatcher::LeaveOnExit leave{batcher_, context_.get()};
  ForwardResult r;
  for (size_t b = keep; b < history.size(); b += max_chunk) {
    const size_t e = std::min(history.size(), b + max_chunk);
    const bool last = e == history.size();
    // (a short catch-up, the accepted part of the last draft and the new token, joins the batch)
    Step(history.subspan(b, e - b), last ? OutputMode::kArgmax : OutputMode::kNone, &r,
         batcher_ && last && (e - b == 1 || (batch_catch_up_ && e - b <= 8 && b == keep)));
  }
  std::vector<int32_t> draft = {r.ids.back()};
  while (static_cast<int>(draft.size()) < k) {
    Step(std::span<const int32_t>(&draft.back(), 1), OutputMode::kArgmax, &r, batcher_ != nullptr);
    draft.push_back(r.ids.back());
  }
  return draft;
}

}  // namespace gemma
