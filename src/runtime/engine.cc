// Engine: loads the checkpoint, the tokenizer and the backend model once; renders and tokenizes
// prompts; compiles constraints. Sessions (session.cc) share all of it.
#include "gemma/engine.h"

#include <algorithm>
#include <filesystem>

#include "gemma/text.h"
#include "chat/chat_template.h"
#include "constrain/vocabulary.h"
#include "core/timer.h"
#include "format/generation_config.h"
#include "runtime/backend_factory.h"
#include "runtime/engine_impl.h"

namespace gemma {

const char* StopReasonName(StopReason r) {
  switch (r) {
    case StopReason::kEos:
      return "eos";
    case StopReason::kStopId:
      return "stop_id";
    case StopReason::kStopString:
      return "stop_string";
    case StopReason::kLength:
      return "length";
    case StopReason::kCancelled:
      return "cancelled";
    case StopReason::kConstraintComplete:
      return "constraint_complete";
  }
  return "?";
}

namespace fs = std::filesystem;

EngineImpl::EngineImpl(const EngineOptions& options) : options_(options) {
  Timer t;
  model_ = Model::Load(options.model_path);
  std::string tok = options.tokenizer_path;
  if (tok.empty()) {
    std::error_code ec;
    const fs::path dir = fs::is_directory(options.model_path, ec)
                             ? fs::path(options.model_path)
                             : fs::path(options.model_path).parent_path();
    if (fs::exists(dir / "tokenizer.json")) tok = (dir / "tokenizer.json").string();
  }
  if (!tok.empty()) tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::FromFile(tok));
  if (tokenizer_ && tokenizer_->vocab_size() > model_->text().vocab_size) {
    throw Error(ErrorCode::kConfig, "tokenizer " + tok + " has " +
                                        std::to_string(tokenizer_->vocab_size()) +
                                        " ids but the model's vocabulary is " +
                                        std::to_string(model_->text().vocab_size));
  }
  capacity_ = std::min(options.context_capacity, model_->text().max_position_embeddings);
  if (capacity_ <= 0) throw Error(ErrorCode::kInvalidArgument, "context_capacity must be positive");
  // The backend model holds the weights once; its first context is made now so a bad backend
  // name or a missing device fails at load time, and the first session takes it.
  BackendStart start = StartBackend(
      {.name = options.backend, .threads = options.threads, .device_index = options.device_index},
      *model_, {.capacity = capacity_});
  backend_model_ = std::move(start.model);
  first_context_ = std::move(start.context);
  backend_name_ = first_context_->name();
  const GenerationDefaults g = LoadGenerationDefaults(options.model_path);
  if (auto t = g.EffectiveTemperature()) defaults_.temperature = *t;
  if (g.top_k) defaults_.top_k = *g.top_k;
  if (g.top_p) defaults_.top_p = *g.top_p;
  if (g.min_p) defaults_.min_p = *g.min_p;
  if (g.typical_p) defaults_.typical_p = *g.typical_p;
  if (g.repetition_penalty) defaults_.repetition_penalty = *g.repetition_penalty;
  if (g.max_new_tokens) defaults_.max_new_tokens = *g.max_new_tokens;
  load_ms_ = t.Ms();
}

std::unique_ptr<Session> EngineImpl::NewSession() {
  std::unique_ptr<Backend> context;
  {
    std::lock_guard<std::mutex> lock(first_context_mutex_);
    context = std::move(first_context_);
  }
  if (!context) context = backend_model_->NewContext({.capacity = capacity_});
  return NewSessionImpl(std::static_pointer_cast<const EngineImpl>(shared_from_this()),
                        std::move(context));
}

const Tokenizer& EngineImpl::tokenizer() const {
  if (!tokenizer_) {
    throw Error(ErrorCode::kTokenizer,
                "no tokenizer: put tokenizer.json beside the model or set tokenizer_path");
  }
  return *tokenizer_;
}

// Ids the tokenizer does not have are special (never allowed).
std::shared_ptr<const constrain::Vocabulary> EngineImpl::vocabulary() const {
  std::call_once(vocab_once_, [&] {
    const Tokenizer& t = tokenizer();
    const int n = model_->text().vocab_size;
    std::vector<std::string> bytes(n);
    std::vector<bool> special(n, true);
    for (int i = 0; i < std::min(n, t.vocab_size()); ++i) {
      bytes[i] = t.TokenBytes(i);
      special[i] = t.IsSpecial(i);
    }
    vocab_ = std::make_shared<const constrain::Vocabulary>(std::move(bytes), std::move(special));
  });
  return vocab_;
}

std::shared_ptr<const constrain::Constraint> EngineImpl::CompileConstraint(
    const OutputConstraint& oc, const Input& input, const std::vector<int>& stop_ids) const {
  constrain::ConstraintOptions co;
  switch (oc.kind) {
    case OutputConstraint::Kind::kNone:
      return nullptr;
    case OutputConstraint::Kind::kRegex:
      co.kind = constrain::ConstraintKind::kRegex;
      break;
    case OutputConstraint::Kind::kJson:
      co.kind = constrain::ConstraintKind::kJson;
      break;
    case OutputConstraint::Kind::kJsonSchema:
      co.kind = constrain::ConstraintKind::kJsonSchema;
      break;
    case OutputConstraint::Kind::kToolCalls:
      co.kind = constrain::ConstraintKind::kToolCalls;
      break;
  }
  co.regex = oc.regex;
  if (oc.kind == OutputConstraint::Kind::kJsonSchema) {
    try {
      co.schema = nlohmann::ordered_json::parse(oc.schema_json);
    } catch (const nlohmann::json::exception& e) {
      throw Error(ErrorCode::kConstraint, std::string("schema is not valid JSON: ") + e.what());
    }
  }
  if (oc.kind == OutputConstraint::Kind::kToolCalls) {
    if (!input.tools.is_array() || input.tools.empty()) {
      throw Error(ErrorCode::kConstraint, "tool-call constraint needs the request's tools");
    }
    co.tools = nlohmann::ordered_json::parse(input.tools.dump());
  }
  co.require_tool_call = oc.require_tool_call;
  co.thinking = input.messages.has_value() && input.enable_thinking;
  co.object_root = oc.object_root;
  if (oc.whitespace == "none")
    co.whitespace = constrain::Whitespace::kNone;
  else if (oc.whitespace == "compact")
    co.whitespace = constrain::Whitespace::kCompact;
  else if (oc.whitespace == "any")
    co.whitespace = constrain::Whitespace::kAny;
  else
    throw Error(ErrorCode::kInvalidArgument, "constraint whitespace: none, compact or any");
  co.max_depth = oc.max_depth;
  co.stop_ids.assign(stop_ids.begin(), stop_ids.end());
  return constrain::Constraint::Compile(vocabulary(), co);
}

std::vector<int32_t> EngineImpl::Tokenize(std::string_view text) const {
  return tokenizer().Encode(text);
}

std::string EngineImpl::Detokenize(const std::vector<int32_t>& ids) const {
  return tokenizer().Decode(ids);
}

namespace {

int CountInputs(const Input& in) {
  return in.text.has_value() + in.token_ids.has_value() + in.messages.has_value();
}

std::string RenderMessages(const Input& in) {
  // Until the media towers exist, an image, audio or video part is refused rather than rendered
  // as a bare placeholder the model cannot see.
  if (const std::string at = chat::FirstMediaPart(*in.messages); !at.empty())
    throw Error(ErrorCode::kUnsupported, at + ": image, audio and video input are not supported yet");
  return RenderChat(*in.messages, in.tools, in.enable_thinking);
}

}  // namespace

std::string EngineImpl::PromptText(const Input& in) const {
  if (CountInputs(in) != 1) {
    throw Error(ErrorCode::kInvalidArgument, "input needs exactly one of text, token_ids, messages");
  }
  if (in.token_ids) {
    throw Error(ErrorCode::kInvalidArgument,
                "token-id input has no prompt text (Detokenize the ids instead)");
  }
  if (in.text) {
    if (!in.add_bos) return *in.text;
    const int bos = model_->text().bos_token_id;
    return (tokenizer_ ? tokenizer_->TokenBytes(bos) : std::string("<bos>")) + *in.text;
  }
  return RenderMessages(in);
}

std::vector<int32_t> EngineImpl::PromptTokens(const Input& in) const {
  if (CountInputs(in) != 1) {
    throw Error(ErrorCode::kInvalidArgument, "input needs exactly one of text, token_ids, messages");
  }
  std::vector<int32_t> ids;
  if (in.token_ids) {
    ids = *in.token_ids;
  } else if (in.text) {
    if (in.add_bos) ids.push_back(model_->text().bos_token_id);
    tokenizer().EncodeTo(*in.text, &ids);
  } else {
    const std::string rendered = RenderMessages(in);  // input errors before a missing tokenizer
    ids = tokenizer().Encode(rendered);
  }
  if (ids.empty()) throw Error(ErrorCode::kInvalidArgument, "the prompt is empty");
  for (int32_t id : ids) {
    if (id < 0 || id >= model_->text().vocab_size) {
      throw Error(ErrorCode::kInvalidArgument,
                  "prompt token id " + std::to_string(id) + " outside the vocabulary");
    }
  }
  return ids;
}

std::shared_ptr<Engine> Engine::Load(const EngineOptions& options) {
  return std::make_shared<EngineImpl>(options);
}

}  // namespace gemma
