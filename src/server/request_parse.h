// OpenAI request bodies -> engine inputs and decoding options. Every field is checked here, so a
// bad request is answered with a 400 naming the field before it takes a slot.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "gemma/engine.h"
#include "server/api_error.h"

namespace gemma::server {

struct ParsedRequest {
  bool chat = true;  // /v1/chat/completions (else /v1/completions)
  std::string model;
  Input input;
  GenerateOptions options;
  int n = 1;        // choices returned
  int best_of = 1;  // samples drawn; the n with the highest sum of log-probs are returned
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;       // the client asked for log-probs (best_of may force them on)
  bool tools_given = false;
  std::string constraint_field;  // the field that set options.constraint, for error reports
};

struct ParseContext {
  const Engine* engine = nullptr;
  std::string model_id;  // the only model served
  // Canonical; empty: media parts carry their bytes (data URLs, base64) and never name a file.
  // Set (`serve --media-dir`): image, audio and video parts may also name files inside it, by
  // "path" (relative to it, or absolute) or a file:// URL.
  std::filesystem::path media_dir;
  // The server's speculative decoding, for requests without a "speculative" field.
  SpeculativeOptions speculative;
};

// The bytes of `rel` (relative, without "." or ".." components) inside the folder `dir`, opened one
// component at a time without following symbolic links (and without blocking on a FIFO): a path
// that was checked inside the folder and then had a component swapped for a link is refused, not
// followed out of it. Throws Error(kIo) with the reason, or Error(kCapacity) over `max_bytes`.
std::vector<uint8_t> ReadInsideFolder(const std::filesystem::path& dir,
                                      const std::filesystem::path& rel, size_t max_bytes);

// Throws ApiError (400 naming the field, 404 for an unknown model).
ParsedRequest ParseChatRequest(const nlohmann::json& body, const ParseContext& ctx);
ParsedRequest ParseCompletionRequest(const nlohmann::json& body, const ParseContext& ctx);

// POST /v1/audio/transcriptions and /v1/audio/translations: the multipart fields as a chat request
// (the clip and an instruction in one user message; greedy unless `temperature` is given) and what
// the response needs.
struct AudioRequest {
  ParsedRequest chat;
  bool translate = false;
  std::string response_format = "json";  // json, text, verbose_json, srt, vtt
  std::string language;                  // as given (ISO-639-1), "" when not
  double seconds = 0;                    // the clip's duration
};
// The user message's text beside the clip (`prompt`: the request's hint, may be empty).
std::string AudioInstruction(bool translate, const std::string& language, const std::string& prompt);
// `fields`: the form's text fields by name; `file`: the "file" part's bytes (nullptr when absent).
// Throws ApiError (400 naming the field; 404 for an unknown model).
AudioRequest ParseAudioRequest(const std::multimap<std::string, std::string>& fields,
                               const std::string* file, bool translate, const ParseContext& ctx);

// OpenAI chat messages -> the chat template's shape (tool-call arguments as objects; files that
// media parts name resolved inside ctx.media_dir). Throws ApiError naming the bad message.
nlohmann::json NormalizeMessages(const nlohmann::json& messages, const ParseContext& ctx);

// What a request's unset sampling fields take: the checkpoint's generation_config.json defaults
// (Engine::DefaultGenerateOptions), reported by /props and /v1/models.
nlohmann::json SamplingDefaultsJson(const Engine& engine);

// Maps an engine error raised while serving a request to an API error (4xx for what the request
// caused, 5xx for the engine's own failures).
ApiError FromEngineError(const Error& e);
// The same, naming the request's constraint field when the constraint was what failed.
ApiError FromEngineError(const Error& e, const ParsedRequest& r);

}  // namespace gemma::server
