// The sampling chain over one full f32 logits vector (vocab up to 262,144); one Sampler per
// request.
//
// Steps, in this order (each is skipped at its "off" value, see sampling_options.h):
//  1. Allowed-token bitmask (optional): bit (i % 64) of word i / 64 set = token i allowed; the
//     rest become -inf. No allowed token -> gemma::Error(kConstraint).
//  2. Logit bias: logit += float(bias), in f32 (transformers' SequenceBiasLogitsProcessor with
//     length-1 sequences).
//  3. Repetition penalty p, once per distinct token in the penalty window (transformers'
//     RepetitionPenaltyLogitsProcessor): logit < 0 ? logit * float(p) : logit / float(p), in f32.
//  4. Frequency/presence (OpenAI): logit = float(double(logit) - (count * frequency +
//     (count > 0) * presence)), count = occurrences in the penalty window.
//     The window is the last `penalty_window` tokens of SetPrompt() + Accept()ed tokens (of the
//     Accept()ed tokens only with PenaltyScope::kGeneratedOnly); default: all of them.
//  -- temperature == 0: the token is the argmax of these logits, lowest id on ties; stop here.
//  5. Temperature T: logit / float(T), in f32 (skipped when T == 1; a T so small that a logit
//     overflows is kInvalidArgument).
//  6. Top-k: keep tokens whose logit >= the k-th largest logit, so ties at the cut all survive
//     (TopKLogitsWarper). Found with nth_element: O(vocab).
//  7. Typical-p (TypicalLogitsWarper): with p = softmax over survivors and H its entropy, rank
//     survivors by s = |-log p - H| ascending; j = first rank where the cumulative p reaches
//     typical_p; keep every token with s <= s_j (ties with s_j survive; so does at least one).
//  8. Top-p (TopPLogitsWarper): rank survivors by logit descending, ties by ascending id; keep
//     rank r iff the mass of ranks < r is < top_p, and always rank 0. transformers sorts with an
//     unstable sort, so which of several tokens tied at the cut survive is unspecified there; the
//     count matches, and here the lower ids win.
//     Typical-p and top-p find their cut by quickselect on mass, O(vocab) expected, no full sort.
//  9. Min-p (MinPLogitsWarper): keep tokens with p >= min_p * p_max, computed as
//     exp(logit - max) >= min_p.
// 10. Draw: w_i = exp(double(l_i) - double(max)) over the survivors in ascending id order, W =
//     their sum accumulated in that order, u = rng.NextDouble() (rng.h), target = u * W; the token
//     is the first survivor whose running sum exceeds target (the last survivor with w > 0 if
//     rounding leaves none). Exactly one draw per sampled token; greedy consumes none.
// Filtered tokens are -inf. Softmaxes for filters are computed in double from the f32 logits
// (transformers uses f32), so a token within ~1e-7 relative of a cutoff may be decided
// differently there; the goldens flag such cases. Draws depend on std::exp, so a draw landing
// within an ulp of a bucket boundary could differ between libms; the u stream itself is
// platform-independent.
//
// Use, per request:
//   Sampler sampler(options);                 // validates; seed from options or random
//   sampler.SetPrompt(prompt_ids);
//   StopMatcher stops(options);
//   loop: SampleResult r = sampler.Sample(logits, constraint ? &mask : nullptr);
//         sampler.Accept(r.token);
//         if (stops.Push(r.token, detokenized_text, &emitted).stopped()) break;
//   at max tokens / EOS: stops.Finish(&emitted);
// When IsPlainGreedy(), the backend's argmax (lowest id on ties) gives the same token.
//
// Buffers are owned by the Sampler and reused: after the first Sample() at a given vocab size, the
// steady state allocates nothing (history growth is amortized).
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "decode/rng.h"
#include "decode/sampling_options.h"

namespace gemma::decode {

struct TokenLogprob {
  int32_t token = -1;
  double logprob = 0.0;
};

// Internal: a candidate as ranked by top-p (key = -logit) or typical-p (key = |-log p - H|).
struct Ranked {
  double key;
  double prob;  // unnormalized weight
  int32_t pos;  // index into the candidate list
};

struct SampleResult {
  int32_t token = -1;
  // Filled when options.logprobs; from options.logprob_source's distribution.
  double logprob = std::numeric_limits<double>::quiet_NaN();
  // The top_logprobs most likely tokens of that distribution, logprob descending, ties by lower id;
  // tokens at -inf are never listed (so there may be fewer than asked).
  int32_t num_top = 0;
  std::array<TokenLogprob, kMaxTopLogprobs> top{};
  int32_t num_candidates = 0;  // tokens that survived the chain (greedy: those with finite logits)
};

class Sampler {
 public:
  // Validates (gemma::Error(kInvalidArgument) naming the field). Without options.seed, draws a
  // seed from std::random_device; seed() and ResolvedConfig() report it.
  explicit Sampler(SamplingOptions options);

  const SamplingOptions& options() const { return options_; }
  uint64_t seed() const { return seed_; }
  std::vector<std::pair<std::string, std::string>> ResolvedConfig() const;

  // True when, without a bitmask, the token is just the argmax of the raw logits (lowest id on
  // ties): temperature 0, no logit_bias, no active penalty, no log-probs. The runtime may then ask
  // the backend for argmax only and skip the full-logits readback.
  bool IsPlainGreedy() const;

  // Replaces the penalty history with the prompt (counted only with kPromptAndGenerated). Ids must
  // be in [0, 2^24) (kInvalidArgument otherwise); ids >= the vocab are kept but never penalize.
  void SetPrompt(std::span<const int32_t> prompt);
  // Appends a token to the history. Sample() does not call this: the caller accepts the token it
  // actually emits (sampled or forced).
  void Accept(int32_t token);

  // Runs the chain and draws. `allowed` (may be null) is the constrained-decoding bitmask; it must
  // hold at least ceil(vocab / 64) words. Errors: kInvalidArgument (empty logits, short bitmask,
  // logit_bias id >= vocab, nothing finite or an overflow after bias/penalties/temperature),
  // kConstraint (the bitmask allows no token, or only tokens at -inf), kInternal (a NaN or +inf
  // logit from the model).
  SampleResult Sample(std::span<const float> logits,
                      const std::vector<uint64_t>* allowed = nullptr);

  // Runs the chain without drawing and returns the processed logits (vocab entries, filtered =
  // -inf; greedy: after step 4). Valid until the next call. Consumes no randomness.
  std::span<const float> Process(std::span<const float> logits,
                                 const std::vector<uint64_t>* allowed = nullptr);

 private:
  void RunChain(std::span<const float> logits, const std::vector<uint64_t>* allowed);
  void ApplyPenalties();
  void TopK(int32_t k);
  void TypicalP(double mass);
  void TopP(double p);
  void MinP(double min_p);
  // Softmax weights exp(l - max) of the candidates into weights_ (reused while valid); returns
  // their sum, accumulated in candidate (ascending id) order.
  double CandidateWeights();
  void KeepMarked();  // compacts candidates_ by keep_, setting the dropped ones to -inf
  void FillLogprobs(std::span<const float> dist, SampleResult& result) const;
  void Count(int32_t token, int delta);

  SamplingOptions options_;
  uint64_t seed_ = 0;
  Xoshiro256ss rng_;

  // Penalty window state.
  std::vector<int32_t> history_;   // in-scope tokens, oldest first
  size_t window_begin_ = 0;        // history_[window_begin_, end) is the window
  std::vector<uint32_t> counts_;   // token -> occurrences in the window
  std::vector<int32_t> distinct_;  // tokens with counts_ > 0
  std::vector<int32_t> slot_;      // token -> index in distinct_, or -1

  // Per-call work buffers.
  std::vector<float> work_;          // processed logits, full vocab
  std::vector<int32_t> candidates_;  // ids with finite work_, ascending
  std::vector<double> weights_;      // per candidate: exp(l - weights_max_) while weights_valid_
  bool weights_valid_ = false;
  float weights_max_ = 0.0f;
  std::vector<double> keys_;    // per candidate (typical-p)
  std::vector<Ranked> ranked_;  // candidates ranked by a filter's key
  std::vector<uint8_t> keep_;   // per candidate
  std::vector<float> scratch_;
  bool greedy_ = false;
};

}  // namespace gemma::decode
