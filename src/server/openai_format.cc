#include "server/openai_format.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <span>

#include "chat/output_parser.h"

namespace gemma::server {
namespace {

std::string TokenText(const Engine& e, int32_t id) { return e.Detokenize({id}); }

json Bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

json ToolCallJson(const std::string& name, const json& args, int index, bool with_index) {
  json c = {{"id", NewId("call_")},
            {"type", "function"},
            {"function", {{"name", name}, {"arguments", Dump(args)}}}};
  if (with_index) c["index"] = index;
  return c;
}

json ChatLogprobEntries(std::span<const TokenLogprob> lps, const Engine& e) {
  json content = json::array();
  for (const TokenLogprob& lp : lps) {
    const std::string t = TokenText(e, lp.id);
    json top = json::array();
    for (const auto& [id, p] : lp.top) {
      const std::string s = TokenText(e, id);
      top.push_back({{"token", s}, {"logprob", p}, {"bytes", Bytes(s)}});
    }
    content.push_back(
        {{"token", t}, {"logprob", lp.logprob}, {"bytes", Bytes(t)}, {"top_logprobs", top}});
  }
  return content;
}

json ChatLogprobs(std::span<const TokenLogprob> lps, const Engine& e) {
  return {{"content", ChatLogprobEntries(lps, e)}};
}

// `offset`: the text offset of the first token (streamed chunks continue where the last ended).
json CompletionLogprobs(std::span<const TokenLogprob> lps, const Engine& e, size_t* offset) {
  json tokens = json::array(), values = json::array(), tops = json::array(),
       offs = json::array();
  for (const TokenLogprob& lp : lps) {
    const std::string t = TokenText(e, lp.id);
    tokens.push_back(t);
    values.push_back(lp.logprob);
    offs.push_back(*offset);
    *offset += t.size();
    json top = json::object();
    for (const auto& [id, p] : lp.top) top[TokenText(e, id)] = p;
    tops.push_back(top);
  }
  return {{"tokens", tokens},
          {"token_logprobs", values},
          {"top_logprobs", tops},
          {"text_offset", offs}};
}

json CompletionLogprobs(const Result& r, const Engine& e) {
  size_t offset = 0;
  return CompletionLogprobs(r.logprobs, e, &offset);
}

int64_t Now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string SseEvent(const json& j) { return "data: " + Dump(j) + "\n\n"; }

std::string NewId(std::string_view prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx",
                static_cast<unsigned long long>(salt ^ (++counter * 0x9E3779B97F4A7C15ull)));
  return std::string(prefix) + buf;
}

std::string FinishReason(const Result& r) {
  if (!r.tool_calls.empty()) return "tool_calls";
  return r.stop_reason == StopReason::kLength ? "length" : "stop";
}

json Usage(const std::vector<Result>& results) {
  int prompt = 0, cached = 0, completion = 0;
  if (!results.empty()) {
    prompt = results[0].telemetry.prompt_tokens;
    cached = results[0].telemetry.reused_tokens;
  }
  for (const Result& r : results) completion += static_cast<int>(r.tokens.size());
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

namespace {

// Seconds as "HH:MM:SS<sep>mmm" (SubRip uses ',', WebVTT '.').
std::string Timestamp(double seconds, char sep) {
  const long ms = std::lround(seconds * 1000.0);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%02ld:%02ld:%02ld%c%03ld", ms / 3600000, ms / 60000 % 60,
                ms / 1000 % 60, sep, ms % 1000);
  return buf;
}

}  // namespace

AudioBody AudioResponse(const AudioRequest& req, const Result& r) {
  std::string text = r.text;
  const size_t b = text.find_first_not_of(" \t\r\n");
  text = b == std::string::npos ? "" : text.substr(b, text.find_last_not_of(" \t\r\n") - b + 1);
  const std::string& f = req.response_format;
  if (f == "text") return {"text/plain; charset=utf-8", text + "\n"};
  if (f == "srt")
    return {"application/x-subrip",
            "1\n" + Timestamp(0, ',') + " --> " + Timestamp(req.seconds, ',') + "\n" + text + "\n\n"};
  if (f == "vtt")
    return {"text/vtt", "WEBVTT\n\n" + Timestamp(0, '.') + " --> " + Timestamp(req.seconds, '.') +
                            "\n" + text + "\n\n"};
  const int input = r.telemetry.prompt_tokens, output = static_cast<int>(r.tokens.size());
  json j = {{"text", text},
            {"usage",
             {{"type", "tokens"},
              {"input_tokens", input},
              {"output_tokens", output},
              {"total_tokens", input + output}}}};
  if (f == "verbose_json") {
    j["task"] = req.translate ? "translate" : "transcribe";
    j["language"] = req.translate ? "en" : req.language;
    j["duration"] = req.seconds;
    j["segments"] = json::array({{{"id", 0},
                                  {"start", 0.0},
                                  {"end", req.seconds},
                                  {"text", text},
                                  {"tokens", r.tokens}}});
  }
  return {"application/json", Dump(j)};
}

json Timings(const Telemetry& t, size_t completion_tokens) {
  const int prompt_n = t.prompt_tokens - t.reused_tokens;
  const double predicted_ms = t.total_ms - t.prefill_ms;
  auto per = [](double ms, double n) { return n > 0 ? ms / n : 0.0; };
  auto rate = [](double ms, double n) { return ms > 0 ? n * 1000.0 / ms : 0.0; };
  json j = {{"cache_n", t.reused_tokens},
            {"prompt_n", prompt_n},
            {"prompt_ms", t.prefill_ms},
            {"prompt_per_token_ms", per(t.prefill_ms, prompt_n)},
            {"prompt_per_second", rate(t.prefill_ms, prompt_n)},
            {"predicted_n", completion_tokens},
            {"predicted_ms", predicted_ms},
            {"predicted_per_token_ms", per(predicted_ms, completion_tokens)},
            {"predicted_per_second", rate(predicted_ms, completion_tokens)},
            {"ttft_ms", t.ttft_ms},
            {"itl_median_ms", t.itl_median_ms},
            {"itl_p95_ms", t.itl_p95_ms}};
  if (t.verify_steps > 0) {  // speculative decoding (llama-server's names)
    j["draft_n"] = t.drafted;
    j["draft_n_accepted"] = t.accepted;
  }
  return j;
}

namespace {

// The response object both completion endpoints share around their choices.
json Envelope(const char* object, const ParsedRequest& req, json choices,
              const std::vector<Result>& results, const std::string& id, int64_t created) {
  json out = {{"id", id},
              {"object", object},
              {"created", created},
              {"model", req.model},
              {"system_fingerprint", "gemma-engine"},
              {"choices", std::move(choices)},
              {"usage", Usage(results)}};
  if (!results.empty()) {
    out["timings"] = Timings(results.back().telemetry, results.back().tokens.size());
    // Every decoding option as used (the request's, else the checkpoint's generation_config.json
    // defaults): the first sample's; sample i of n / best_of uses seed + i.
    out["resolved_config"] = results.front().resolved_config;
  }
  return out;
}

}  // namespace

json ChatResponse(const ParsedRequest& req, const std::vector<Result>& results,
                  const Engine& engine, const std::string& id, int64_t created) {
  json choices = json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    json msg = {{"role", "assistant"}, {"content", r.text}};
    if (!r.reasoning.empty()) msg["reasoning_content"] = r.reasoning;
    if (!r.tool_calls.empty()) {
      json calls = json::array();
      for (const ToolCall& c : r.tool_calls)
        calls.push_back(ToolCallJson(c.name, c.arguments, 0, false));
      msg["tool_calls"] = calls;
      if (r.text.empty()) msg["content"] = nullptr;
    }
    json choice = {{"index", i},
                   {"message", msg},
                   {"finish_reason", FinishReason(r)},
                   {"logprobs", req.logprobs ? ChatLogprobs(r.logprobs, engine) : json()}};
    choices.push_back(choice);
  }
  return Envelope("chat.completion", req, std::move(choices), results, id, created);
}

json CompletionResponse(const ParsedRequest& req, const std::vector<Result>& results,
                        const Engine& engine, const std::string& id, int64_t created) {
  json choices = json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    choices.push_back({{"index", i},
                       {"text", r.text},
                       {"finish_reason", FinishReason(r)},
                       {"logprobs", req.logprobs ? CompletionLogprobs(r, engine) : json()}});
  }
  return Envelope("text_completion", req, std::move(choices), results, id, created);
}

StreamFormatter::StreamFormatter(const ParsedRequest& req, const Engine& engine, std::string model)
    : req_(req),
      engine_(engine),
      model_(std::move(model)),
      id_(NewId(req.chat ? "chatcmpl-" : "cmpl-")),
      created_(Now()) {}

StreamFormatter::~StreamFormatter() = default;

json StreamFormatter::Chunk(json choice) const {
  return {{"id", id_},
          {"object", req_.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created_},
          {"model", model_},
          {"system_fingerprint", "gemma-engine"},
          {"choices", json::array({std::move(choice)})}};
}

std::vector<json> StreamFormatter::Begin(int choice) {
  parser_ = std::make_unique<chat::StreamingParser>();
  tool_index_ = 0;
  pending_.clear();
  logprobs_sent_ = 0;
  text_offset_ = 0;
  if (!req_.chat) return {};
  return {Chunk({{"index", choice},
                 {"delta", {{"role", "assistant"}, {"content", ""}}},
                 {"logprobs", nullptr},
                 {"finish_reason", nullptr}})};
}

json StreamFormatter::TakeLogprobs(std::span<const TokenLogprob> lps) {
  if (!req_.logprobs || lps.empty()) return nullptr;
  logprobs_sent_ += lps.size();
  return req_.chat ? ChatLogprobs(lps, engine_) : CompletionLogprobs(lps, engine_, &text_offset_);
}

std::vector<json> StreamFormatter::Token(int choice, std::string_view delta,
                                         const TokenLogprob* logprob) {
  std::vector<json> out;
  if (logprob && req_.logprobs) pending_.push_back(*logprob);
  // A token's log-probs travel with the first chunk that carries text after it; those of tokens
  // whose text is held back (a stop string's prefix, a marker) wait for the next one, and End
  // sends the rest (the stop token's among them), so the chunks' entries add up to the whole
  // answer's.
  if (delta.empty()) return out;
  if (!req_.chat) {
    out.push_back(Chunk({{"index", choice},
                         {"text", std::string(delta)},
                         {"logprobs", TakeLogprobs(pending_)},
                         {"finish_reason", nullptr}}));
    pending_.clear();
    return out;
  }
  for (const chat::StreamEvent& ev : parser_->Push(delta)) {
    json d;
    switch (ev.kind) {
      case chat::StreamEvent::Kind::kTextDelta:
        if (ev.text.empty()) continue;
        d = {{"content", ev.text}};
        break;
      case chat::StreamEvent::Kind::kReasoningDelta:
        if (ev.text.empty()) continue;
        d = {{"reasoning_content", ev.text}};
        break;
      case chat::StreamEvent::Kind::kToolCall:
        d = {{"tool_calls", json::array({ToolCallJson(ev.tool_call.name,
                                                      json::parse(ev.tool_call.arguments.dump()),
                                                      tool_index_++, true)})}};
        break;
      case chat::StreamEvent::Kind::kMalformed:
        continue;  // reported nowhere in OpenAI's shape; the text stays out of content
    }
    out.push_back(Chunk({{"index", choice},
                         {"delta", d},
                         {"logprobs", TakeLogprobs(pending_)},
                         {"finish_reason", nullptr}}));
    pending_.clear();
  }
  return out;
}

std::vector<json> StreamFormatter::End(int choice, const Result& r) {
  std::vector<json> out;
  if (req_.chat) {
    // Flush what the parser held back (a trailing partial marker that never completed).
    for (const chat::StreamEvent& ev : parser_->Finish()) {
      if (ev.kind == chat::StreamEvent::Kind::kTextDelta && !ev.text.empty())
        out.push_back(Chunk({{"index", choice},
                             {"delta", {{"content", ev.text}}},
                             {"logprobs", nullptr},
                             {"finish_reason", nullptr}}));
    }
  }
  // Every entry not sent yet: held-back tokens' and the stop token's.
  std::span<const TokenLogprob> rest;
  if (logprobs_sent_ < r.logprobs.size())
    rest = std::span<const TokenLogprob>(r.logprobs).subspan(logprobs_sent_);
  json last = {{"index", choice}, {"finish_reason", FinishReason(r)}};
  if (req_.chat) {
    last["delta"] = json::object();
  } else {
    last["text"] = "";
  }
  last["logprobs"] = TakeLogprobs(rest);
  pending_.clear();
  json c = Chunk(last);
  c["timings"] = Timings(r.telemetry, r.tokens.size());
  c["resolved_config"] = r.resolved_config;
  out.push_back(c);
  return out;
}

json StreamFormatter::UsageChunk(const std::vector<Result>& results) const {
  json c = Chunk(json());
  c["choices"] = json::array();
  c["usage"] = Usage(results);
  return c;
}

}  // namespace gemma::server
