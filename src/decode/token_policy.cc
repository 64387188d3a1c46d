#include "decode/token_policy.h"

#include <algorithm>
#include <utility>

#include "gemma/error.h"

namespace gemma::decode {

TokenPolicy::TokenPolicy(const SamplingOptions& options, std::vector<int32_t> eos_ids,
                         bool ignore_eos, TokenConstraint* constraint)
    : sampler_(options), stops_(options), constraint_(constraint) {
  if (!ignore_eos) eos_ = std::move(eos_ids);
  if (!sampler_.IsPlainGreedy())
    output_ = StepOutput::kLogits;
  else
    output_ = constraint_ ? StepOutput::kSelect : StepOutput::kArgmax;
}

const std::vector<uint64_t>* TokenPolicy::Mask() {
  if (!constraint_) return nullptr;
  if (!mask_ready_) {
    constraint_->AllowedTokens(&mask_);  // throws Error(kConstraint) at a dead end
    mask_ready_ = true;
  }
  return &mask_;
}

SampleResult TokenPolicy::Choose(std::span<const float> logits, int32_t backend_id,
                                 float backend_logprob) {
  switch (output_) {
    case StepOutput::kArgmax:
    case StepOutput::kSelect: {
      SampleResult r;
      r.token = backend_id;
      return r;
    }
    case StepOutput::kLogits:
      break;
  }
  return sampler_.Sample(logits, Mask());
}

StopCause TokenPolicy::Accept(int32_t token) {
  sampler_.Accept(token);
  mask_ready_ = false;
  if (constraint_) {
    constraint_->Accept(token);
    if (constraint_->IsComplete()) return StopCause::kConstraintComplete;
  }
  if (std::find(eos_.begin(), eos_.end(), token) != eos_.end()) return StopCause::kEos;
  if (stops_.IsStopId(token)) return StopCause::kStopId;
  return StopCause::kNone;
}

StopCause TokenPolicy::PushText(std::string_view piece, std::string* emitted) {
  return stops_.PushText(piece, emitted).kind == StopKind::kStopString ? StopCause::kStopString
                                                                       : StopCause::kNone;
}

void TokenPolicy::Finish(std::string_view flush, std::string* emitted) {
  stops_.PushText(flush, emitted);
  stops_.Finish(emitted);
}

}  // namespace gemma::decode
