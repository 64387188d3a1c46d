// The WebAssembly module's interface (embind): an engine loaded from a directory of the
// Emscripten file system (MEMFS, NODEFS, WORKERFS), its sessions, generation with the server's
// request fields, streaming, cancel, reset, scoring. Every call returns one JSON text, either
// {"ok": value} or {"error": {"code", "message"[, "param"]}} with the gemma::Error code's name
// (ErrorCodeName), so no C++ exception crosses into JavaScript. web/lib/gemma-engine.mjs is the
// library over it; docs/web.md describes both.
//
// Requests use the HTTP server's field names and checks (server/request_parse.h): a prompt or
// token ids go through ParseCompletionRequest, messages through ParseChatRequest, and unset
// sampling fields take the checkpoint's generation_config.json defaults, as the server does.
// Results are `gemma-engine run --json`'s object (runtime/result_json.h).
#include <emscripten/bind.h>
#include <emscripten/val.h>

#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "conformance.h"
#include "gemma/engine.h"
#include "gemma/error.h"
#include "runtime/result_json.h"
#include "server/openai_format.h"
#include "server/openai_run.h"
#include "server/request_parse.h"
#ifdef GEMMA_HAVE_WEBGPU
#include "backend/webgpu/webgpu_backend.h"
#endif

namespace gemma::web {
namespace {

using nlohmann::json;

std::string Ok(json value) {
  return json{{"ok", std::move(value)}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string Fail(std::string_view code, const std::string& message, const std::string& param = "") {
  json e = {{"code", code}, {"message", message}};
  if (!param.empty()) e["param"] = param;
  return json{{"error", e}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Runs fn() -> json and wraps its value or its error.
template <class Fn>
std::string Call(Fn&& fn) {
  try {
    return Ok(fn());
  } catch (const Error& e) {
    return Fail(ErrorCodeName(e.code()), e.what());
  } catch (const server::ApiError& e) {
    // A request field the server would answer with a 400: the caller's argument.
    return Fail("invalid_argument", e.what(), e.param());
  } catch (const json::exception& e) {
    return Fail("invalid_argument", std::string("JSON: ") + e.what());
  } catch (const std::bad_alloc&) {
    return Fail("capacity", "out of memory (the WebAssembly heap is at most 4 GiB)");
  } catch (const std::exception& e) {
    return Fail("internal", e.what());
  }
}

json Parse(const std::string& text, const char* what) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) {
    throw Error(ErrorCode::kInvalidArgument, std::string(what) + " is not valid JSON");
  }
  return j;
}

// {"prompt": TEXT | [IDS]} or {"messages": [...], "tools": [...]} plus the request's fields ->
// the engine's input and options, checked as the server checks them.
server::ParsedRequest ParseRequest(const Engine& engine, const json& input, const json& options) {
  if (!input.is_object()) {
    throw Error(ErrorCode::kInvalidArgument, "input must be an object with prompt or messages");
  }
  if (!options.is_object()) throw Error(ErrorCode::kInvalidArgument, "options must be an object");
  json body = options;
  for (auto it = input.begin(); it != input.end(); ++it) {
    if (body.contains(it.key())) {
      throw Error(ErrorCode::kInvalidArgument,
                  "'" + it.key() + "' is given both in the input and in the options");
    }
    body[it.key()] = it.value();
  }
  for (const char* f : {"stream", "stream_options", "n", "best_of", "model"}) {
    if (body.contains(f)) {
      throw Error(ErrorCode::kInvalidArgument,
                  std::string("'") + f + "' is a server field; the library streams through "
                                         "onToken and generates one answer per call");
    }
  }
  const server::ParseContext ctx{.engine = &engine, .model_id = ""};
  if (body.contains("messages")) return server::ParseChatRequest(body, ctx);
  if (body.contains("prompt")) return server::ParseCompletionRequest(body, ctx);
  throw Error(ErrorCode::kInvalidArgument, "input needs a prompt (text or token ids) or messages");
}

json EngineInfo(const Engine& e) {
  return {{"backend", e.backend_name()},
          {"device", e.backend_device()},
          {"vocab_size", e.vocab_size()},
          {"context_capacity", e.context_capacity()},
          {"has_tokenizer", e.has_tokenizer()},
          {"load_ms", e.load_ms()},
          {"shared_bytes", e.shared_bytes()},
          // (the module decodes no audio, web_decoders.cc: a model's audio tower has no input here)
          {"modalities", {{"image", e.has_vision()}, {"audio", false}}},
          {"chat_template", e.chat_template_info().ToJson()},
          {"generation_defaults", server::SamplingDefaultsJson(e)}};
}

class WebSession {
 public:
  WebSession(std::shared_ptr<Engine> engine, std::string model_id)
      : engine_(std::move(engine)), model_id_(std::move(model_id)), session_(engine_->NewSession()) {}

  // The server's /v1/chat/completions (chat) or /v1/completions on this session, for an in-page
  // transport (web/console): the same checks, samples and response bodies (openai_run.h). With
  // "stream": true every event's SSE text ("data: {...}\n\n", "data: [DONE]\n\n") goes to
  // on_event(text) as it comes (a truthy return cancels) and the answer is {"ok": null};
  // otherwise {"ok": RESPONSE}. A refused request is {"error": {"status", "body"}} with the body
  // the server would send; an error after streaming began travels in the stream, as the server's.
  std::string OpenAi(bool chat, const std::string& body_json, emscripten::val on_event) {
    std::optional<server::ParsedRequest> pr;
    bool streaming = false;
    auto refuse = [&](const server::ApiError& e) {
      if (streaming) {
        on_event(server::SseEvent(e.ToJson()) + "data: [DONE]\n\n");
        return Ok(nullptr);
      }
      return json{{"error", {{"status", e.status()}, {"body", e.ToJson()}}}}.dump(
          -1, ' ', false, json::error_handler_t::replace);
    };
    try {
      const json body = json::parse(body_json, nullptr, false);
      if (body.is_discarded()) throw server::ApiError(400, "the request body is not valid JSON");
      const server::ParseContext ctx{.engine = engine_.get(), .model_id = model_id_};
      pr = chat ? server::ParseChatRequest(body, ctx) : server::ParseCompletionRequest(body, ctx);
      server::PrepareRequest(&*pr, *engine_);
      stop_ = std::stop_source();
      const std::string id = server::NewId(chat ? "chatcmpl-" : "cmpl-");
      if (!pr->stream) {
        const std::vector<Result> results =
            server::RunSamples(*pr, *session_, stop_.get_token(), nullptr, {});
        const int64_t now = static_cast<int64_t>(std::time(nullptr));
        return Ok(chat ? server::ChatResponse(*pr, results, *engine_, id, now)
                       : server::CompletionResponse(*pr, results, *engine_, id, now));
      }
      server::StreamFormatter fmt(*pr, *engine_, model_id_);
      auto emit = [&](std::string events, bool) {
        streaming = true;
        if (on_event(events).as<bool>()) stop_.request_stop();
      };
      const std::vector<Result> results =
          server::RunSamples(*pr, *session_, stop_.get_token(), &fmt, emit);
      std::string tail;
      if (pr->include_usage) tail += server::SseEvent(fmt.UsageChunk(results));
      on_event(tail + "data: [DONE]\n\n");
      return Ok(nullptr);
    } catch (const server::ApiError& e) {
      return refuse(e);
    } catch (const Error& e) {
      return refuse(pr ? server::FromEngineError(e, *pr) : server::FromEngineError(e));
    } catch (const std::exception& e) {
      return refuse(server::ApiError(500, std::string("internal error: ") + e.what()));
    }
  }

  // on_token(id, index, delta, logprob) for every streamed token (logprob is null unless
  // requested); a truthy return value cancels. It must not throw (a JavaScript exception would
  // unwind through the engine's frames without its destructors).
  std::string Generate(const std::string& input_json, const std::string& options_json,
                       emscripten::val on_token) {
    return Call([&]() -> json {
      const server::ParsedRequest req =
          ParseRequest(*engine_, Parse(input_json, "input"), Parse(options_json, "options"));
      stop_ = std::stop_source();
      TokenCallback cb;
      if (!on_token.isUndefined() && !on_token.isNull()) {
        cb = [&](const TokenEvent& ev) {
          emscripten::val lp = ev.logprob ? emscripten::val(ev.logprob->logprob)
                                          : emscripten::val::null();
          const emscripten::val stop = on_token(ev.id, ev.index, std::string(ev.delta), lp);
          if (stop.as<bool>()) stop_.request_stop();
        };
      }
      const Result r = session_->Generate(req.input, req.options, cb, stop_.get_token());
      return ResultJson(r, req.options);
    });
  }

  // Cancels the generation in flight (from its on_token callback in a single-threaded module);
  // it ends with stop_reason "cancelled".
  void Cancel() { stop_.request_stop(); }

  std::string Reset() {
    return Call([&]() -> json {
      session_->Reset();
      return nullptr;
    });
  }

  // log p(token | prefix) for every position of `ids`, and the logits at every position when
  // return_logits (positions x vocab, row-major).
  std::string Score(const std::string& ids_json, bool return_logits) {
    return Call([&]() -> json {
      const json ids = Parse(ids_json, "ids");
      if (!ids.is_array()) throw Error(ErrorCode::kInvalidArgument, "ids must be an array");
      const ScoreResult s = session_->Score(ids.get<std::vector<int32_t>>(), return_logits);
      json out = {{"logprobs", s.logprobs}, {"total_ms", s.total_ms}};
      if (return_logits) out["logits"] = s.logits;
      return out;
    });
  }

  std::string Evaluated() const { return Ok(session_->evaluated()); }

 private:
  std::shared_ptr<Engine> engine_;
  std::string model_id_;
  std::unique_ptr<Session> session_;
  std::stop_source stop_;
};

class WebEngine {
 public:
  // {"model_path", "tokenizer_path", "backend", "context", "threads", "model_id"}; loads the
  // checkpoint. model_id names the model in OpenAI requests and responses (default "model").
  static std::string Load(const std::string& options_json) {
    return Call([&]() -> json {
      const json o = Parse(options_json, "options");
      if (!o.is_object() || !o.contains("model_path")) {
        throw Error(ErrorCode::kInvalidArgument, "options need model_path");
      }
      EngineOptions eo;
      eo.model_path = o.at("model_path").get<std::string>();
      eo.tokenizer_path = o.value("tokenizer_path", "");
      eo.backend = o.value("backend", "cpu");
      eo.context_capacity = o.value("context", 4096);
      // One thread unless the module was built with pthreads (GEMMA_WEB_THREADS).
      eo.threads = o.value("threads", 1);
      auto engine = std::make_shared<WebEngine>(Engine::Load(eo), o.value("model_id", "model"));
      const int handle = static_cast<int>(Registry().size());
      Registry().push_back(engine);
      json info = EngineInfo(*engine->engine_);
      info["handle"] = handle;
      return info;
    });
  }
  // The engine a Load returned (the handle keeps JavaScript free of C++ object lifetimes until
  // it asks for one); null after Destroy.
  static std::shared_ptr<WebEngine> Get(int handle) {
    if (handle < 0 || handle >= static_cast<int>(Registry().size())) return nullptr;
    return Registry()[handle];
  }
  static void Destroy(int handle) {
    if (handle >= 0 && handle < static_cast<int>(Registry().size())) Registry()[handle].reset();
  }

  WebEngine(std::shared_ptr<Engine> e, std::string model_id)
      : engine_(std::move(e)), model_id_(std::move(model_id)) {}

  std::string Info() const {
    return Call([&]() -> json { return EngineInfo(*engine_); });
  }
  std::string Tokenize(const std::string& text) const {
    return Call([&]() -> json { return engine_->Tokenize(text); });
  }
  std::string Detokenize(const std::string& ids_json) const {
    return Call([&]() -> json {
      return engine_->Detokenize(Parse(ids_json, "ids").get<std::vector<int32_t>>());
    });
  }
  // The rendered prompt text and its token ids for an input ({"prompt"} or {"messages",
  // "tools", "chat_template_kwargs"}), as generate would evaluate it.
  std::string Prompt(const std::string& input_json) const {
    return Call([&]() -> json {
      const server::ParsedRequest req = ParseRequest(*engine_, Parse(input_json, "input"), json::object());
      json out = {{"tokens", engine_->PromptTokens(req.input)}};
      if (!req.input.token_ids) out["text"] = engine_->PromptText(req.input);
      return out;
    });
  }
  std::unique_ptr<WebSession> NewSession() const {
    return std::make_unique<WebSession>(engine_, model_id_);
  }
  // The server's /props for this engine (one slot: the page's session).
  std::string Props() const {
    return Call([&]() -> json {
      json p = EngineInfo(*engine_);
      p.erase("handle");
      p["model"] = model_id_;
      p["context"] = engine_->context_capacity();
      p["slots"] = 1;
      p["auth"] = false;
      return p;
    });
  }

 private:
  static std::vector<std::shared_ptr<WebEngine>>& Registry() {
    static std::vector<std::shared_ptr<WebEngine>> r;
    return r;
  }
  std::shared_ptr<Engine> engine_;
  std::string model_id_;
};

}  // namespace
}  // namespace gemma::web

EMSCRIPTEN_BINDINGS(gemma_engine) {
  using gemma::web::WebEngine;
  using gemma::web::WebSession;
  emscripten::class_<WebEngine>("Engine")
      .smart_ptr<std::shared_ptr<WebEngine>>("EnginePtr")
      .class_function("load", &WebEngine::Load)
      .class_function("get", &WebEngine::Get)
      .class_function("destroy", &WebEngine::Destroy)
      .function("info", &WebEngine::Info)
      .function("tokenize", &WebEngine::Tokenize)
      .function("detokenize", &WebEngine::Detokenize)
      .function("prompt", &WebEngine::Prompt)
      .function("props", &WebEngine::Props)
      .function("newSession", &WebEngine::NewSession);
  emscripten::class_<WebSession>("Session")
      .function("generate", &WebSession::Generate)
      .function("openai", &WebSession::OpenAi)
      .function("cancel", &WebSession::Cancel)
      .function("reset", &WebSession::Reset)
      .function("score", &WebSession::Score)
      .function("evaluated", &WebSession::Evaluated);
#ifdef GEMMA_HAVE_WEBGPU
  emscripten::function("loseWebGpuDevice", &gemma::WebGpuLoseDevice);
#endif
  // The tests' conformance operations (conformance.h), answered as the native oracle answers.
  emscripten::function("conformance", &gemma::web::Conformance);
}
