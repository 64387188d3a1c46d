#include "runtime/result_json.h"

namespace gemma {

bool ConstraintComplete(const GenerateOptions& g, const Result& r) {
  if (g.constraint.kind == OutputConstraint::Kind::kNone) return true;
  return r.stop_reason == StopReason::kConstraintComplete || r.stop_reason == StopReason::kEos ||
         r.stop_reason == StopReason::kStopId;
}

nlohmann::json ResultJson(const Result& r, const GenerateOptions& g) {
  nlohmann::json j;
  j["text"] = r.text;
  j["raw_text"] = r.raw_text;
  j["reasoning"] = r.reasoning;
  j["tool_calls"] = nlohmann::json::array();
  for (const ToolCall& t : r.tool_calls)
    j["tool_calls"].push_back({{"name", t.name}, {"arguments", t.arguments}});
  j["parse_errors"] = r.parse_errors;
  j["tokens"] = r.tokens;
  j["stop_reason"] = StopReasonName(r.stop_reason);
  if (g.constraint.kind != OutputConstraint::Kind::kNone)
    j["constraint_complete"] = ConstraintComplete(g, r);
  if (!r.logprobs.empty()) {
    j["logprobs"] = nlohmann::json::array();
    for (const TokenLogprob& lp : r.logprobs) {
      nlohmann::json top = nlohmann::json::array();
      for (const auto& [id, p] : lp.top) top.push_back({{"id", id}, {"logprob", p}});
      j["logprobs"].push_back({{"id", lp.id}, {"logprob", lp.logprob}, {"top", top}});
    }
  }
  j["resolved_config"] = r.resolved_config;
  const Telemetry& t = r.telemetry;
  j["telemetry"] = {{"backend", t.backend},
                    {"load_ms", t.load_ms},
                    {"prompt_tokens", t.prompt_tokens},
                    {"reused_tokens", t.reused_tokens},
                    {"images", t.images},
                    {"images_encoded", t.images_encoded},
                    {"vision_ms", t.vision_ms},
                    {"audios", t.audios},
                    {"audios_encoded", t.audios_encoded},
                    {"audio_ms", t.audio_ms},
                    {"media_ms", t.media_ms},
                    {"ttft_ms", t.ttft_ms},
                    {"prefill_ms", t.prefill_ms},
                    {"token_ms", t.token_ms},
                    {"itl_median_ms", t.itl_median_ms},
                    {"itl_p95_ms", t.itl_p95_ms},
                    {"tpot_ms", t.tpot_ms},
                    {"total_ms", t.total_ms},
                    {"decode_tok_s", t.decode_tok_s},
                    {"overall_tok_s", t.overall_tok_s},
                    {"resident_bytes", t.resident_bytes},
                    {"verify_steps", t.verify_steps},
                    {"drafted", t.drafted},
                    {"draft_ms", t.draft_ms},
                    {"jump_forward_steps", t.jump_forward_steps},
                    {"batched_steps", t.batched_steps},
                    {"max_batch", t.max_batch},
                    {"accepted", t.accepted}};
  return j;
}

}  // namespace gemma
