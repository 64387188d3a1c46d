// One OpenAI request on one session, independent of the transport: the checks against the
// engine and the generation of its samples, streamed through a StreamFormatter. The HTTP server
// (server.cc) and the WebAssembly module's in-page endpoint (web/src/bindings.cc) both run
// requests through these.
#pragma once

#include <cstdint>
#include <functional>
#include <stop_token>
#include <string>
#include <vector>

#include "gemma/engine.h"
#include "server/openai_format.h"
#include "server/request_parse.h"

namespace gemma::server {

// Checks a parsed request against the engine (a tokenizer for constraints and tools, the prompt
// and max_tokens within the context; max_tokens 0 becomes the rest of the context) and returns
// the prompt's tokens. Throws ApiError naming `prompt_field` for a prompt too long (default:
// "messages" or "prompt").
std::vector<int32_t> PrepareRequest(ParsedRequest* pr, const Engine& engine,
                                    const char* prompt_field = nullptr);

// Runs the request's samples (n, best_of) one after another on `s`; each after the first reuses
// the prompt's K/V. With `fmt`, every token's chunks go to emit(SSE text, first token) as they
// come. best_of > n keeps the n samples with the highest summed log-probs. observe(result) is
// called per sample (metrics). Throws gemma::Error (kCancelled when `stop` is requested).
std::vector<Result> RunSamples(const ParsedRequest& pr, Session& s, std::stop_token stop,
                               StreamFormatter* fmt,
                               const std::function<void(std::string, bool)>& emit,
                               const std::function<void()>& on_accepted = {},
                               const std::function<void(const Result&)>& observe = {});

}  // namespace gemma::server
