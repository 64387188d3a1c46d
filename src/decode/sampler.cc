#include "decode/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "gemma/error.h"

namespace gemma::decode {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();
// History ids index dense per-token counters; this bounds them (vocabularies are ~2^18).
constexpr int32_t kMaxTokenId = 1 << 24;

uint64_t SeedFrom(const SamplingOptions& options) {
  ValidateSamplingOptions(options);
  if (options.seed) return *options.seed;
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd());
}

// Ranks candidates by (key, pos) ascending, a strict total order since positions are distinct.
bool RankedLess(const Ranked& a, const Ranked& b) {
  return a.key < b.key || (a.key == b.key && a.pos < b.pos);
}

// Finds the first element, in RankedLess order, at which the running sum of prob reaches `mass`;
// returns its pos, or the greatest element's if the total stays below `mass`. Quickselect on mass:
// each round partitions around a median-of-three pivot and keeps only the side holding the cut, so
// it costs O(n) expected instead of a sort; ranges of <= 64 are sorted and scanned. Running sums
// are therefore added up in a different order than a plain scan would, which moves results only
// for cuts within double rounding (~1e-16) of `mass`. Reorders `ranked`.
int32_t FirstReachingMass(std::vector<Ranked>& ranked, double mass) {
  size_t lo = 0;
  size_t hi = ranked.size();
  double acc = 0.0;  // mass of everything ordered before ranked[lo]
  while (hi - lo > 64) {
    Ranked a = ranked[lo], b = ranked[lo + (hi - lo) / 2], c = ranked[hi - 1];
    if (RankedLess(b, a)) std::swap(a, b);
    if (RankedLess(c, b)) std::swap(b, c);
    if (RankedLess(b, a)) std::swap(a, b);
    const Ranked pivot = b;
    auto first = ranked.begin() + lo;
    auto last = ranked.begin() + hi;
    auto mid = std::partition(first, last, [&](const Ranked& x) { return RankedLess(x, pivot); });
    double left = 0.0;
    for (auto it = first; it != mid; ++it) left += it->prob;
    if (acc + left >= mass) {
      hi = static_cast<size_t>(mid - ranked.begin());
      continue;
    }
    acc += left;
    std::iter_swap(mid,
                   std::find_if(mid, last, [&](const Ranked& x) { return x.pos == pivot.pos; }));
    acc += pivot.prob;
    if (acc >= mass) return pivot.pos;
    lo = static_cast<size_t>(mid - ranked.begin()) + 1;
  }
  std::sort(ranked.begin() + lo, ranked.begin() + hi, RankedLess);
  for (size_t i = lo; i < hi; ++i) {
    acc += ranked[i].prob;
    if (acc >= mass) return ranked[i].pos;
  }
  // Not reached. If an earlier round found the cut inside [0, hi) but these sums, taken in another
  // order, round just below `mass`, the cut is the greatest element there; if hi == n, the greatest
  // element overall (so everything is kept).
  return hi > 0 ? ranked[hi - 1].pos : -1;
}

}  // namespace

Sampler::Sampler(SamplingOptions options)
    : options_(std::move(options)), seed_(SeedFrom(options_)), rng_(seed_) {}

std::vector<std::pair<std::string, std::string>> Sampler::ResolvedConfig() const {
  return decode::ResolvedConfig(options_, seed_);
}

bool Sampler::IsPlainGreedy() const {
  const bool penalties = options_.penalty_window != 0 &&
                         (options_.repetition_penalty != 1.0 || options_.frequency_penalty != 0.0 ||
                          options_.presence_penalty != 0.0);
  return options_.temperature == 0.0 && options_.logit_bias.empty() && !penalties &&
         !options_.logprobs;
}

void Sampler::Count(int32_t token, int delta) {
  const size_t t = static_cast<size_t>(token);
  if (t >= counts_.size()) {
    counts_.resize(t + 1, 0);
    slot_.resize(t + 1, -1);
  }
  if (delta > 0) {
    if (counts_[t]++ == 0) {
      slot_[t] = static_cast<int32_t>(distinct_.size());
      distinct_.push_back(token);
    }
  } else if (--counts_[t] == 0) {
    const int32_t last = distinct_.back();
    distinct_[slot_[t]] = last;
    slot_[last] = slot_[t];
    distinct_.pop_back();
    slot_[t] = -1;
  }
}

void Sampler::SetPrompt(std::span<const int32_t> prompt) {
  for (int32_t t : distinct_) {
    counts_[t] = 0;
    slot_[t] = -1;
  }
  distinct_.clear();
  history_.clear();
  history_.reserve(prompt.size() + 4096);
  window_begin_ = 0;
  if (options_.penalty_scope == PenaltyScope::kPromptAndGenerated) {
    for (int32_t t : prompt) Accept(t);
  }
}

void Sampler::Accept(int32_t token) {
  if (token < 0 || token >= kMaxTokenId) {
    throw Error(ErrorCode::kInvalidArgument,
                "Sampler: token id " + std::to_string(token) + " out of range [0, 2^24)");
  }
  history_.push_back(token);
  const int32_t window = options_.penalty_window;
  if (window == 0) {
    window_begin_ = history_.size();
    return;
  }
  Count(token, +1);
  if (window > 0 && history_.size() - window_begin_ > static_cast<size_t>(window)) {
    Count(history_[window_begin_], -1);
    ++window_begin_;
  }
}

void Sampler::ApplyPenalties() {
  const bool rep = options_.repetition_penalty != 1.0;
  const bool freq = options_.frequency_penalty != 0.0 || options_.presence_penalty != 0.0;
  if (!rep && !freq) return;
  const float penalty = static_cast<float>(options_.repetition_penalty);
  const size_t n = work_.size();
  for (int32_t t : distinct_) {
    if (static_cast<size_t>(t) >= n) continue;
    float x = work_[t];
    if (rep) x = x < 0.0f ? x * penalty : x / penalty;
    if (freq) {
      x = static_cast<float>(static_cast<double>(x) -
                             (counts_[t] * options_.frequency_penalty + options_.presence_penalty));
    }
    work_[t] = x;
  }
}

double Sampler::CandidateWeights() {
  float max = kNegInf;
  for (int32_t id : candidates_) max = std::max(max, work_[id]);
  double sum = 0.0;
  if (weights_valid_ && max == weights_max_) {
    // Filters since the last call only dropped candidates (KeepMarked compacted weights_ along)
    // and kept the maximum, so every exp(l - max) is unchanged.
    for (double w : weights_) sum += w;
    return sum;
  }
  weights_.resize(candidates_.size());
  const double m = max;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    weights_[i] = std::exp(static_cast<double>(work_[candidates_[i]]) - m);
    sum += weights_[i];
  }
  weights_valid_ = true;
  weights_max_ = max;
  return sum;
}

void Sampler::KeepMarked() {
  size_t j = 0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (keep_[i]) {
      if (weights_valid_) weights_[j] = weights_[i];
      candidates_[j++] = candidates_[i];
    } else {
      work_[candidates_[i]] = kNegInf;
    }
  }
  candidates_.resize(j);
  if (weights_valid_) weights_.resize(j);
}

void Sampler::TopK(int32_t k) {
  scratch_.resize(candidates_.size());
  for (size_t i = 0; i < candidates_.size(); ++i) scratch_[i] = work_[candidates_[i]];
  std::nth_element(scratch_.begin(), scratch_.begin() + (k - 1), scratch_.end(),
                   std::greater<float>());
  const float threshold = scratch_[k - 1];
  keep_.resize(candidates_.size());
  for (size_t i = 0; i < candidates_.size(); ++i) keep_[i] = work_[candidates_[i]] >= threshold;
  KeepMarked();
}

void Sampler::TypicalP(double mass) {
  const size_t n = candidates_.size();
  const double sum = CandidateWeights();
  const double log_sum = std::log(sum);
  float max = kNegInf;
  for (int32_t id : candidates_) max = std::max(max, work_[id]);
  keys_.resize(n);
  double entropy = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double logp = (static_cast<double>(work_[candidates_[i]]) - max) - log_sum;
    keys_[i] = logp;
    const double p = weights_[i] / sum;
    if (p > 0.0) entropy -= p * logp;
  }
  for (size_t i = 0; i < n; ++i) keys_[i] = std::fabs(-keys_[i] - entropy);
  ranked_.resize(n);
  for (size_t i = 0; i < n; ++i) ranked_[i] = {keys_[i], weights_[i], static_cast<int32_t>(i)};
  const int32_t cut = FirstReachingMass(ranked_, mass * sum);
  const double cutoff = keys_[cut];
  keep_.resize(n);
  for (size_t i = 0; i < n; ++i) keep_[i] = keys_[i] <= cutoff;
  KeepMarked();
}

void Sampler::TopP(double p) {
  const size_t n = candidates_.size();
  const double sum = CandidateWeights();
  // Rank by logit descending, ties by ascending id (candidate positions ascend with ids). Rank r is
  // kept iff the mass before it is < p, i.e. up to and including the first rank whose running sum
  // reaches p (rank 0 always: with p = 0 it is that rank).
  ranked_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    ranked_[i] = {-static_cast<double>(work_[candidates_[i]]), weights_[i],
                  static_cast<int32_t>(i)};
  }
  const int32_t cut = FirstReachingMass(ranked_, p * sum);
  const Ranked last = {-static_cast<double>(work_[candidates_[cut]]), 0.0, cut};
  keep_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const Ranked r = {-static_cast<double>(work_[candidates_[i]]), 0.0, static_cast<int32_t>(i)};
    keep_[i] = !RankedLess(last, r);
  }
  KeepMarked();
}

void Sampler::MinP(double min_p) {
  CandidateWeights();  // weights_ = exp(l - max) = p / p_max
  keep_.resize(candidates_.size());
  for (size_t i = 0; i < candidates_.size(); ++i) keep_[i] = weights_[i] >= min_p;
  KeepMarked();
}

void Sampler::RunChain(std::span<const float> logits, const std::vector<uint64_t>* allowed) {
  const size_t n = logits.size();
  if (n == 0) throw Error(ErrorCode::kInvalidArgument, "Sampler: empty logits");
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw Error(ErrorCode::kInvalidArgument, "Sampler: vocab too large");
  }
  if (work_.capacity() < n) {
    work_.reserve(n);
    candidates_.reserve(n);
    weights_.reserve(n);
    keys_.reserve(n);
    ranked_.reserve(n);
    keep_.reserve(n);
    scratch_.reserve(n);
  }
  if (counts_.size() < n) {
    counts_.resize(n, 0);
    slot_.resize(n, -1);
    distinct_.reserve(n);
  }
  work_.resize(n);
  weights_valid_ = false;

  // 1. Copy, check, mask.
  auto bad_logit = [](size_t i, float x) {
    throw Error(ErrorCode::kInternal,
                "Sampler: logit " + std::to_string(i) + " is " + (std::isnan(x) ? "NaN" : "+inf"));
  };
  if (allowed != nullptr) {
    if (allowed->size() < (n + 63) / 64) {
      throw Error(ErrorCode::kInvalidArgument, "Sampler: allowed-token bitmask has " +
                                                   std::to_string(allowed->size()) +
                                                   " words; vocab " + std::to_string(n) +
                                                   " needs " + std::to_string((n + 63) / 64));
    }
    uint64_t any = 0;
    for (size_t i = 0; i < n; ++i) {
      const float x = logits[i];
      if (!(x < kPosInf)) bad_logit(i, x);
      const uint64_t bit = ((*allowed)[i >> 6] >> (i & 63)) & 1;
      any |= bit;
      work_[i] = bit ? x : kNegInf;
    }
    if (!any) {
      throw Error(ErrorCode::kConstraint, "Sampler: the allowed-token bitmask allows no token");
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      const float x = logits[i];
      if (!(x < kPosInf)) bad_logit(i, x);
      work_[i] = x;
    }
  }

  // 2. Logit bias.
  for (const auto& [id, bias] : options_.logit_bias) {
    if (static_cast<size_t>(id) >= n) {
      throw Error(ErrorCode::kInvalidArgument, "sampling option logit_bias: token id " +
                                                   std::to_string(id) + " >= vocab size " +
                                                   std::to_string(n));
    }
    work_[id] += bias;
  }

  // 3-4. Penalties.
  ApplyPenalties();

  candidates_.clear();
  for (size_t i = 0; i < n; ++i) {
    const float x = work_[i];
    if (x == kNegInf) continue;
    if (!(x < kPosInf)) {
      throw Error(ErrorCode::kInvalidArgument,
                  "Sampler: logit " + std::to_string(i) + " overflows after logit_bias/penalties");
    }
    candidates_.push_back(static_cast<int32_t>(i));
  }
  if (candidates_.empty()) {
    if (allowed != nullptr) {
      throw Error(ErrorCode::kConstraint,
                  "Sampler: every allowed token has a -inf logit after logit_bias/penalties");
    }
    throw Error(ErrorCode::kInvalidArgument,
                "Sampler: every token has a -inf logit after logit_bias/penalties");
  }
  greedy_ = options_.temperature == 0.0;
  if (greedy_) return;

  // 5. Temperature.
  if (options_.temperature != 1.0) {
    const float t = static_cast<float>(options_.temperature);
    for (int32_t id : candidates_) {
      const float x = work_[id] / t;
      if (!(x < kPosInf)) {
        throw Error(ErrorCode::kInvalidArgument,
                    "sampling option temperature: " + std::to_string(options_.temperature) +
                        " overflows the logits; use 0 for greedy");
      }
      work_[id] = x;
    }
  }
  // 6-9. Filters.
  if (options_.top_k > 0 && static_cast<size_t>(options_.top_k) < candidates_.size()) {
    TopK(options_.top_k);
  }
  if (options_.typical_p < 1.0 && candidates_.size() > 1) TypicalP(options_.typical_p);
  if (options_.top_p < 1.0 && candidates_.size() > 1) TopP(options_.top_p);
  if (options_.min_p > 0.0 && candidates_.size() > 1) MinP(options_.min_p);
}

std::span<const float> Sampler::Process(std::span<const float> logits,
                                        const std::vector<uint64_t>* allowed) {
  RunChain(logits, allowed);
  return work_;
}

void Sampler::FillLogprobs(std::span<const float> dist, SampleResult& result) const {
  float max = kNegInf;
  for (float x : dist) max = std::max(max, x);
  double sum = 0.0;
  const double m = max;
  for (float x : dist) {
    if (x != kNegInf) sum += std::exp(static_cast<double>(x) - m);
  }
  const double log_z = m + std::log(sum);
  result.logprob = static_cast<double>(dist[result.token]) - log_z;

  const int32_t want = options_.top_logprobs;
  int32_t count = 0;
  auto& top = result.top;
  for (size_t i = 0; i < dist.size() && want > 0; ++i) {
    const float x = dist[i];
    if (x == kNegInf) continue;
    if (count == want && !(x > static_cast<float>(top[count - 1].logprob))) continue;
    // top[].logprob holds raw values until the end; ascending scan keeps lower ids first on ties.
    int32_t j = std::min(count, want - 1);
    while (j > 0 && x > static_cast<float>(top[j - 1].logprob)) {
      top[j] = top[j - 1];
      --j;
    }
    top[j] = {static_cast<int32_t>(i), static_cast<double>(x)};
    if (count < want) ++count;
  }
  for (int32_t i = 0; i < count; ++i) top[i].logprob -= log_z;
  result.num_top = count;
}

SampleResult Sampler::Sample(std::span<const float> logits, const std::vector<uint64_t>* allowed) {
  RunChain(logits, allowed);
  SampleResult result;
  result.num_candidates = static_cast<int32_t>(candidates_.size());
  if (greedy_) {
    // Ascending ids and a strict > keep the lowest id among equal maxima.
    int32_t best = candidates_[0];
    float best_value = work_[best];
    for (int32_t id : candidates_) {
      const float v = work_[id];
      if (v > best_value) {
        best_value = v;
        best = id;
      }
    }
    result.token = best;
  } else {
    const double total = CandidateWeights();
    const double target = rng_.NextDouble() * total;
    double acc = 0.0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      acc += weights_[i];
      if (target < acc) {
        result.token = candidates_[i];
        break;
      }
    }
    if (result.token < 0) {
      for (size_t i = candidates_.size(); i-- > 0;) {
        if (weights_[i] > 0.0) {
          result.token = candidates_[i];
          break;
        }
      }
    }
  }
  if (options_.logprobs) {
    FillLogprobs(
        options_.logprob_source == LogprobSource::kRaw ? logits : std::span<const float>(work_),
        result);
  }
  return result;
}

}  // namespace gemma::decode
