#include "decode/draft.h"

#include <algorithm>

namespace gemma::decode {

std::vector<int32_t> PromptLookupDraft::Propose(std::span<const int32_t> history, int k) {
  const int len = static_cast<int>(history.size());
  if (k <= 0) return {};
  for (int n = std::min(max_ngram_, len - 1); n >= std::max(1, min_ngram_); --n) {
    const std::span<const int32_t> suffix = history.subspan(len - n);
    // The most recent earlier occurrence with at least one token after it.
    for (int p = len - n - 1; p >= 0; --p) {
      if (!std::equal(suffix.begin(), suffix.end(), history.begin() + p)) continue;
      const int from = p + n, to = std::min(len, from + k);
      return std::vector<int32_t>(history.begin() + from, history.begin() + to);
    }
  }
  return {};
}

int DraftPolicy::Next() {
  if (max_draft_ <= 0) return 0;
  if (pause_ > 0) {
    --pause_;
    return 0;
  }
  return max_draft_;
}

void DraftPolicy::Record(int drafted, int accepted) {
  if (drafted <= 0) return;
  ++steps_;
  rate_ = 0.5 * rate_ + 0.5 * static_cast<double>(accepted) / drafted;
  // Below ~1 token in 4 accepted, a verification step (more work than a plain step) loses: 16
  // plain steps, then drafts again from a neutral average.
  if (steps_ >= 3 && rate_ < 0.25) {
    pause_ = 16;
    rate_ = 0.5;
  }
}

}  // namespace gemma::decode
