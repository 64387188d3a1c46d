// Per-request sampling options, their validation, and the "resolved config" dump that results
// carry.
//
// Chain order (see sampler.h for the exact semantics of each step):
//   allowed-token bitmask -> logit bias -> repetition penalty -> frequency/presence penalties
//   -> temperature -> top-k -> typical-p -> top-p -> min-p -> draw.
// Every step is off at its default value, so a default SamplingOptions samples from the raw
// softmax.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gemma::decode {

// Which tokens the repetition/frequency/presence penalties look at.
enum class PenaltyScope {
  kPromptAndGenerated,  // default: transformers' RepetitionPenaltyLogitsProcessor semantics
  kGeneratedOnly,       // only tokens produced by this request (vLLM/OpenAI-server style)
};

// Which distribution reported log-probs come from.
enum class LogprobSource {
  kRaw,    // default: log-softmax of the logits as given to the sampler (the model's distribution
           // after final-logit softcap, before mask/bias/penalties/temperature/filters), as OpenAI
           // reports
  kFinal,  // log-softmax of the processed logits the token was drawn from (filtered tokens
           // excluded); with temperature 0: the logits after mask/bias/penalties (no temperature,
           // no filters)
};

inline constexpr int32_t kMaxTopLogprobs = 20;

struct SamplingOptions {
  // 0 = greedy: argmax (lowest id on ties) after mask/bias/penalties; top-k/p, typical-p and min-p
  // are then ignored. > 0 divides the logits (transformers' TemperatureLogitsWarper).
  double temperature = 1.0;
  int32_t top_k = 0;       // 0 = off; else keep tokens >= the k-th largest logit (ties kept)
  double top_p = 1.0;      // [0, 1]; 1 = off
  double min_p = 0.0;      // [0, 1]; 0 = off
  double typical_p = 1.0;  // (0, 1]; 1 = off
  double repetition_penalty = 1.0;  // > 0; 1 = off. Positive logits / p, negative logits * p
  double frequency_penalty = 0.0;   // logit -= count * frequency_penalty
  double presence_penalty = 0.0;    // logit -= presence_penalty if count > 0
  // Penalties look at the last `penalty_window` tokens of the scope; -1 = all of them, 0 = none.
  int32_t penalty_window = -1;
  PenaltyScope penalty_scope = PenaltyScope::kPromptAndGenerated;
  std::map<int32_t, float> logit_bias;  // id -> added to the logit; finite or -inf (bans the token)
  std::optional<uint64_t> seed;         // absent: a random seed, reported in the resolved config
  bool logprobs = false;
  int32_t top_logprobs = 0;  // [0, kMaxTopLogprobs]; > 0 requires logprobs
  LogprobSource logprob_source = LogprobSource::kRaw;
  std::vector<int32_t> stop_ids;
  std::vector<std::string> stop_strings;  // non-empty strings
};

// Throws gemma::Error(kInvalidArgument) naming the first bad field, e.g. "top_p = 1.5 ...".
void ValidateSamplingOptions(const SamplingOptions& options);

// Every option as (key, JSON value text), in a fixed order, plus derived keys: "mode" ("greedy" or
// "sample") and "seed" as the seed actually used. Example: {"temperature", "0.7"}, {"stop_strings",
// "[\"\\n\\n\"]"}. Floats print in their shortest round-trip form.
std::vector<std::pair<std::string, std::string>> ResolvedConfig(const SamplingOptions& options,
                                                                uint64_t seed_used);

// The same pairs as one JSON object: {"temperature":0.7,...}.
std::string ResolvedConfigJson(const SamplingOptions& options, uint64_t seed_used);

}  // namespace gemma::decode
