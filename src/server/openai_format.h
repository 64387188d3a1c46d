// Engine results -> OpenAI response bodies and SSE chunks (chat.completion, text_completion), with
// llama-server's `timings` and `reasoning_content`.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gemma/engine.h"
#include "server/request_parse.h"

namespace gemma::chat {
class StreamingParser;
}

namespace gemma::server {

using nlohmann::json;

std::string NewId(std::string_view prefix);
std::string FinishReason(const Result& r);
json Usage(const std::vector<Result>& results);
json Timings(const Telemetry& t, size_t completion_tokens);

// The whole response of a non-streaming request; `results` are the returned choices in order.
json ChatResponse(const ParsedRequest& req, const std::vector<Result>& results,
                  const Engine& engine, const std::string& id, int64_t created);
json CompletionResponse(const ParsedRequest& req, const std::vector<Result>& results,
                        const Engine& engine, const std::string& id, int64_t created);

// The body of a transcription / translation (AudioRequest::response_format): its content type and
// text. The text is the model's output trimmed of surrounding whitespace; verbose_json, srt and vtt
// hold the clip as one segment (the model gives no finer timings).
struct AudioBody {
  std::string content_type, body;
};
AudioBody AudioResponse(const AudioRequest& req, const Result& r);

// Builds the chunks of one streamed request. Chat output is split into content, reasoning_content
// and whole tool calls as it arrives, so a client never sees Gemma's markers.
class StreamFormatter {
 public:
  StreamFormatter(const ParsedRequest& req, const Engine& engine, std::string model);
  ~StreamFormatter();
  std::vector<json> Begin(int choice);
  // `logprob`: the token's entry when the request asked for log-probs (TokenEvent::logprob).
  std::vector<json> Token(int choice, std::string_view delta, const TokenLogprob* logprob);
  std::vector<json> End(int choice, const Result& r);
  json UsageChunk(const std::vector<Result>& results) const;

 private:
  json Chunk(json choice) const;
  // The chunk field for these entries (null when none or not asked for); counts them as sent.
  json TakeLogprobs(std::span<const TokenLogprob> lps);
  const ParsedRequest& req_;
  const Engine& engine_;
  std::string model_, id_;
  int64_t created_;
  std::unique_ptr<chat::StreamingParser> parser_;
  int tool_index_ = 0;
  std::vector<TokenLogprob> pending_;  // streamed tokens whose text no chunk has carried yet
  size_t logprobs_sent_ = 0;           // Result::logprobs entries already in chunks
  size_t text_offset_ = 0;             // completions: text_offset of the next entry
};

// "data: {...}\n\n"
std::string SseEvent(const json& j);
std::string Dump(const json& j);  // invalid UTF-8 replaced, never throws

}  // namespace gemma::server
