// Helpers shared by the runtime's tests (not part of gemma_runtime).
#pragma once

#include <string>

#include "gemma/engine.h"

namespace gemma {

// A checkpoint under tests/goldens/model/.
inline std::string Fixture(const std::string& name) {
  return std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/model/" + name;
}

// n greedy tokens, end of sequence ignored.
inline GenerateOptions Greedy(int n) {
  GenerateOptions o;
  o.max_new_tokens = n;
  o.ignore_eos = true;
  return o;
}

// Sampled requests that speculative decoding must leave exactly as they are (variant 0..2):
// temperatures, top-k/p, min-p, repetition and presence penalties, log-probs, a regex constraint.
inline GenerateOptions SampledVariant(int variant) {
  GenerateOptions o;
  o.max_new_tokens = 40;
  o.temperature = variant == 0 ? 0.7 : 1.0;
  o.top_k = variant == 1 ? 20 : 0;
  o.top_p = variant == 1 ? 0.9 : 1.0;
  o.min_p = variant == 2 ? 0.02 : 0.0;
  o.repetition_penalty = variant == 1 ? 1.15 : 1.0;
  o.presence_penalty = variant == 2 ? 0.3 : 0.0;
  o.logprobs = variant == 0;
  o.top_logprobs = variant == 0 ? 2 : 0;
  if (variant == 2) {
    o.constraint.kind = OutputConstraint::Kind::kRegex;
    o.constraint.regex = "[a-z ]{1,80}\\.";
  }
  return o;
}

}  // namespace gemma
