// HTTP request handling of src/server without sockets: the body of POST /v1/chat/completions or
// /v1/completions through the steps Server::HandleGenerate takes before a slot (JSON parse,
// request parsing, prompt rendering and tokenization, the context checks), then a generation of at
// most 2 tokens on the built-in tiny model with every option the request set (sampling filters,
// penalties, logit bias, stop strings, constraints, tools). What the server would answer with a
// 5xx, or any exception other than ApiError / gemma::Error, is a finding: a bad request must be a
// 4xx naming its field. (cpp-httplib's own parsing of the wire format is Debian's code, not ours.)
#include <fuzzer/FuzzedDataProvider.h>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "gemma/engine.h"
#include "gemma/error.h"
#include "server/request_parse.h"

namespace s = gemma::server;

namespace {

std::shared_ptr<gemma::Engine> g_engine;

void Finding(const std::string& what) { gemma::fuzz::Violated(what); }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  gemma::EngineOptions eo;
  eo.model_path = GEMMA_SOURCE_DIR "/models/tiny-trained";
  eo.backend = "cpu";
  eo.threads = 1;
  eo.context_capacity = 192;  // a request cannot ask for long generations
  g_engine = gemma::Engine::Load(eo);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const bool chat = in.ConsumeBool();
  const bool generate = in.ConsumeBool();
  const std::string text = in.ConsumeRemainingBytesAsString();
  const s::ParseContext ctx{.engine = g_engine.get(), .model_id = "tiny-trained"};
  try {
    nlohmann::json body;
    try {
      body = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception&) {
      return 0;  // the server's 400 invalid_json (ParseBody in server.cc)
    }
    s::ParsedRequest pr =
        chat ? s::ParseChatRequest(body, ctx) : s::ParseCompletionRequest(body, ctx);
    std::vector<int32_t> prompt;
    try {
      prompt = g_engine->PromptTokens(pr.input);
    } catch (const gemma::Error& e) {
      throw s::FromEngineError(e);
    }
    if (static_cast<int64_t>(prompt.size()) >= g_engine->context_capacity()) return 0;  // 400
    if (!generate) return 0;
    gemma::GenerateOptions o = pr.options;
    o.max_new_tokens = std::max(1, std::min(o.max_new_tokens, 2));
    if (static_cast<int64_t>(prompt.size()) + o.max_new_tokens > g_engine->context_capacity())
      return 0;
    auto session = g_engine->NewSession();
    try {
      (void)session->Generate(pr.input, o);
    } catch (const gemma::Error& e) {
      throw s::FromEngineError(e, pr);
    }
  } catch (const s::ApiError& e) {
    if (e.status() >= 500) Finding("HTTP " + std::to_string(e.status()) + ": " + e.what());
  }
  return 0;
}
