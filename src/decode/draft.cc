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
  if (probing_) return 1;
  const int best = Best();
  // Now and then a length next to the best one whose cost is not measured yet.
  if (steps_ % 8 == 7) {
    for (const int k : {best - 1, best + 1}) {
      if (k >= 1 && k <= max_draft_ && verify_s_[k].n < 2) return k;
    }
  }
  return best;
}

int DraftPolicy::Best() const {
  int best = 1;
  for (int k = 2; k <= max_draft_; ++k) {
    if (Gain(k) > Gain(best)) best = k;
  }
  return best;
}

double DraftPolicy::Cost(int k) const {
  const double plain = plain_s_.LowerMedian();
  auto measured = [&](int j) {
    return plain > 0 && verify_s_[j].n >= 2 ? verify_s_[j].LowerMedian() / plain : 0.0;
  };
  if (const double c = measured(k); c > 0) return c;
  // 1 + b k, b from the nearest measured length.
  for (int d = 1; d < max_draft_; ++d) {
    for (const int j : {k - d, k + d}) {
      if (j < 1 || j > max_draft_) continue;
      if (const double c = measured(j); c > 0) return 1.0 + std::max(0.0, c - 1.0) / j * k;
    }
  }
  return 1.0 + 0.25 * k;
}

double DraftPolicy::Gain(int k) const {
  const double a = acceptance();
  double tokens = 1, p = 1;
  for (int i = 0; i < k; ++i) tokens += (p *= a);
  return tokens / Cost(k);
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
    // all at the current acceptance; else a pause twice as long.
    if (accepted < drafted) {
      Pause();
      return;
    }
    accepted_ = std::max(accepted_ + 1, rejected_);  // (a >= 1/2 again)
    if (Gain(Best()) < 1.0) {
      Pause();
      return;
    }
    probing_ = false;
    backoff_ = kMinPause;
    return;
  }
  accepted_ = 0.8 * accepted_ + accepted;
  rejected_ = 0.8 * rejected_ + (accepted < drafted ? 1 : 0);
  if (steps_ >= 2 && Gain(Best()) < 1.0) Pause();
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
  if (drafted <= 0 || drafted > kMaxDraft || !(seconds > 0) || probing_) return;
  verify_s_[drafted].Add(seconds);
}

}  // namespace gemma::decode
