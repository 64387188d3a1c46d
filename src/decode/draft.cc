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
  return probing_ ? 1 : max_draft_;
}

void DraftPolicy::Pause() {
  pause_ = backoff_;
  backoff_ = std::min(2 * backoff_, kMaxPause);
  probing_ = true;
}

void DraftPolicy::Record(int drafted, int accepted) {
  if (drafted <= 0) return;
  ++steps_;
  if (probing_) {
    // The probe after a pause: drafting resumes when its token was right and drafting can pay at
    // all here; else a pause twice as long.
    if (accepted < drafted || threshold() >= 1.0) {
      Pause();
      return;
    }
    probing_ = false;
    backoff_ = kMinPause;
    rate_ = std::max(0.5, threshold());
    return;
  }
  rate_ = 0.5 * rate_ + 0.5 * static_cast<double>(accepted) / drafted;
  // Below the break-even share a verification step (more work than a plain step) loses: plain
  // steps (which also time a plain step), then a one-token probe.
  if (steps_ >= 2 && rate_ < threshold()) Pause();
}

double DraftPolicy::Window::LowerMedian() const {
  const int m = std::min(n, kSize);
  if (m == 0) return 0;
  double s[kSize];
  std::copy(v, v + m, s);
  std::nth_element(s, s + (m - 1) / 2, s + m);
  return s[(m - 1) / 2];
}

void DraftPolicy::RecordPlainCost(double seconds) {
  if (seconds > 0) plain_s_.Add(seconds);
}

void DraftPolicy::RecordVerifyCost(int drafted, double seconds) {
  if (drafted <= 0 || !(seconds > 0) || probing_) return;
  verify_s_.Add(seconds);
  verify_k_.Add(drafted);
}

double DraftPolicy::threshold() const {
  const double plain = plain_s_.LowerMedian(), verify = verify_s_.LowerMedian(),
               k = verify_k_.LowerMedian();
  if (plain <= 0 || verify <= 0 || k <= 0) return 0.25;
  // (above 1: drafting never pays there, every verification step pauses it)
  return std::clamp((verify / plain - 1.0) / k, 0.0, 2.0);
}

}  // namespace gemma::decode
