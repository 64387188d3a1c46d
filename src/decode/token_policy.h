// The one owner of the token loop's decisions: which output the backend computes for the next
// position, which token is emitted, and whether generation stops (EOS, stop ids, stop strings, a
// completed constraint). The runtime drives the backend and the stream; every choice is made here.
//
//   TokenPolicy policy(options, eos_ids, constraint);
//   policy.SetPrompt(prompt);
//   per position: out = policy.Output();  mask = policy.Mask();   // backend computes `out`
//                 choice = policy.Choose(logits | id + logprob);
//                 stop = policy.Accept(choice.token);            // EOS / stop id / constraint
//                 if (!stop) stop = policy.PushText(piece, &emitted);  // stop strings
//   at the end:   policy.Finish(flush, &emitted)
//
// Output choice: plain greedy (Sampler::IsPlainGreedy) without a constraint needs only the argmax
// id; plain greedy with a constraint needs the best allowed id (kSelect: 8 bytes back instead of the
// whole logit row); anything else (sampling, penalties, bias, log-probs) needs the full logits. The
// three give the same token: the backends' argmax and select pick the lowest id among equal
// maxima, as the sampler does.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "decode/sampler.h"
#include "decode/sampling_options.h"
#include "decode/stop_matcher.h"

namespace gemma::decode {

// The constraint as the token loop sees it (constrained decoding lives in src/constrain; the
// runtime adapts it).
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // The allowed-token bitmask for the next position; throws Error(kConstraint) at a dead end.
  virtual void AllowedTokens(std::vector<uint64_t>* mask) = 0;
  // Advances by the emitted token (Error(kConstraint) if it is not allowed).
  virtual void Accept(int32_t token) = 0;
  // A stop id was accepted where the constraint allows it: the output is complete.
  virtual bool IsComplete() const = 0;
};

enum class StepOutput { kArgmax, kSelect, kLogits };

enum class StopCause { kNone, kEos, kStopId, kStopString, kConstraintComplete };

class TokenPolicy {
 public:
  // Validates the options (Error(kInvalidArgument) naming the field). eos_ids end generation
  // unless ignore_eos; a constraint may always end on an EOS or stop id (it was compiled with
  // them). `constraint` may be null and must outlive the policy.
  TokenPolicy(const SamplingOptions& options, std::vector<int32_t> eos_ids, bool ignore_eos,
              TokenConstraint* constraint);

  void SetPrompt(std::span<const int32_t> prompt) { sampler_.SetPrompt(prompt); }

  // What the backend must compute for the next position.
  StepOutput Output() const { return output_; }
  // The allowed-token mask for the next position (kSelect / kLogits with a constraint), computed
  // once per position; null without a constraint.
  const std::vector<uint64_t>* Mask();

  // The next token from the backend's output: the argmax id (kArgmax), the selected id and its
  // log-prob (kSelect), or the full logits (kLogits, sampled with the mask).
  SampleResult Choose(std::span<const float> logits, int32_t backend_id, float backend_logprob);
  // The next token from full logits whatever Output() is (a verification step's rows): the same
  // token Choose gives from the argmax or select output of the same logits.
  SampleResult ChooseFromLogits(std::span<const float> logits) {
    return sampler_.Sample(logits, Mask());
  }

  // Accepts the emitted token into the penalty history and the constraint; reports a stop by id
  // (constraint complete, then EOS, then a stop id). A stopping token is not part of the text.
  StopCause Accept(int32_t token);
  // The accepted token's text: appends what may be emitted (stop strings held back) to *emitted.
  StopCause PushText(std::string_view piece, std::string* emitted);
  // End of generation by any cause but a stop string: the detokenizer's tail, then held text.
  void Finish(std::string_view flush, std::string* emitted);

  const Sampler& sampler() const { return sampler_; }
  bool constrained() const { return constraint_ != nullptr; }

 private:
  Sampler sampler_;
  StopMatcher stops_;
  std::vector<int32_t> eos_;
  TokenConstraint* constraint_;
  StepOutput output_;
  std::vector<uint64_t> mask_;
  bool mask_ready_ = false;
};

}  // namespace gemma::decode
