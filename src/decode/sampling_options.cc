#include "decode/sampling_options.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <string_view>

#include "gemma/error.h"

namespace gemma::decode {
namespace {

std::string Num(double v) {
  if (std::isnan(v)) return "\"nan\"";
  if (std::isinf(v)) return v > 0 ? "\"inf\"" : "\"-inf\"";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::string NumF(float v) {
  if (std::isnan(v)) return "\"nan\"";
  if (std::isinf(v)) return v > 0 ? "\"inf\"" : "\"-inf\"";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          static const char* kHex = "0123456789abcdef";
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  return out;
}

[[noreturn]] void Bad(const std::string& field, const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, "sampling option " + field + ": " + what);
}

void CheckUnitInterval(const char* field, double v) {
  if (!(v >= 0.0 && v <= 1.0)) Bad(field, Num(v) + " must be in [0, 1]");
}

}  // namespace

void ValidateSamplingOptions(const SamplingOptions& o) {
  if (!(o.temperature >= 0.0) || !std::isfinite(o.temperature)) {
    Bad("temperature", Num(o.temperature) + " must be finite and >= 0 (0 = greedy)");
  }
  if (o.top_k < 0) Bad("top_k", std::to_string(o.top_k) + " must be >= 0 (0 = off)");
  CheckUnitInterval("top_p", o.top_p);
  CheckUnitInterval("min_p", o.min_p);
  if (!(o.typical_p > 0.0 && o.typical_p <= 1.0)) {
    Bad("typical_p", Num(o.typical_p) + " must be in (0, 1] (1 = off)");
  }
  if (!(o.repetition_penalty > 0.0) || !std::isfinite(o.repetition_penalty)) {
    Bad("repetition_penalty", Num(o.repetition_penalty) + " must be finite and > 0 (1 = off)");
  }
  if (!std::isfinite(o.frequency_penalty)) {
    Bad("frequency_penalty", Num(o.frequency_penalty) + " must be finite");
  }
  if (!std::isfinite(o.presence_penalty)) {
    Bad("presence_penalty", Num(o.presence_penalty) + " must be finite");
  }
  if (o.penalty_window < -1) {
    Bad("penalty_window", std::to_string(o.penalty_window) + " must be >= -1 (-1 = all tokens)");
  }
  for (const auto& [id, bias] : o.logit_bias) {
    if (id < 0) Bad("logit_bias", "token id " + std::to_string(id) + " is negative");
    if (std::isnan(bias) || bias == std::numeric_limits<float>::infinity()) {
      Bad("logit_bias", "bias for token " + std::to_string(id) + " is " + NumF(bias) +
                            "; must be finite or -inf");
    }
  }
  if (o.top_logprobs < 0 || o.top_logprobs > kMaxTopLogprobs) {
    Bad("top_logprobs", std::to_string(o.top_logprobs) + " must be in [0, " +
                            std::to_string(kMaxTopLogprobs) + "]");
  }
  if (o.top_logprobs > 0 && !o.logprobs) Bad("top_logprobs", "> 0 requires logprobs = true");
  for (int32_t id : o.stop_ids) {
    if (id < 0) Bad("stop_ids", "token id " + std::to_string(id) + " is negative");
  }
  for (size_t i = 0; i < o.stop_strings.size(); ++i) {
    if (o.stop_strings[i].empty()) Bad("stop_strings", "entry " + std::to_string(i) + " is empty");
  }
}

std::vector<std::pair<std::string, std::string>> ResolvedConfig(const SamplingOptions& o,
                                                                uint64_t seed_used) {
  std::vector<std::pair<std::string, std::string>> kv;
  kv.emplace_back("mode", o.temperature == 0.0 ? "\"greedy\"" : "\"sample\"");
  kv.emplace_back("temperature", Num(o.temperature));
  kv.emplace_back("top_k", std::to_string(o.top_k));
  kv.emplace_back("top_p", Num(o.top_p));
  kv.emplace_back("min_p", Num(o.min_p));
  kv.emplace_back("typical_p", Num(o.typical_p));
  kv.emplace_back("repetition_penalty", Num(o.repetition_penalty));
  kv.emplace_back("frequency_penalty", Num(o.frequency_penalty));
  kv.emplace_back("presence_penalty", Num(o.presence_penalty));
  kv.emplace_back("penalty_window", std::to_string(o.penalty_window));
  kv.emplace_back("penalty_scope", o.penalty_scope == PenaltyScope::kPromptAndGenerated
                                       ? "\"prompt_and_generated\""
                                       : "\"generated_only\"");
  std::string bias = "{";
  for (const auto& [id, b] : o.logit_bias) {
    if (bias.size() > 1) bias += ',';
    bias += "\"" + std::to_string(id) + "\":" + NumF(b);
  }
  bias += "}";
  kv.emplace_back("logit_bias", bias);
  kv.emplace_back("seed", std::to_string(seed_used));
  kv.emplace_back("seed_source", o.seed ? "\"request\"" : "\"random\"");
  kv.emplace_back("logprobs", o.logprobs ? "true" : "false");
  kv.emplace_back("top_logprobs", std::to_string(o.top_logprobs));
  kv.emplace_back("logprob_source",
                  o.logprob_source == LogprobSource::kRaw ? "\"raw\"" : "\"final\"");
  std::string ids = "[";
  for (size_t i = 0; i < o.stop_ids.size(); ++i) {
    if (i) ids += ',';
    ids += std::to_string(o.stop_ids[i]);
  }
  ids += "]";
  kv.emplace_back("stop_ids", ids);
  std::string strs = "[";
  for (size_t i = 0; i < o.stop_strings.size(); ++i) {
    if (i) strs += ',';
    strs += JsonString(o.stop_strings[i]);
  }
  strs += "]";
  kv.emplace_back("stop_strings", strs);
  return kv;
}

std::string ResolvedConfigJson(const SamplingOptions& o, uint64_t seed_used) {
  std::string out = "{";
  for (const auto& [k, v] : ResolvedConfig(o, seed_used)) {
    if (out.size() > 1) out += ',';
    out += JsonString(k) + ":" + v;
  }
  out += "}";
  return out;
}

}  // namespace gemma::decode
