// Engine and Session: prompt building, exact prefix reuse, prefill strategy, the decode loop with
// sampling, stop handling, streaming, cancellation and telemetry.
#include "gemma/engine.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <optional>

#include "backend/backend.h"
#include "chat/chat_template.h"
#include "chat/output_parser.h"
#include "constrain/constraint.h"
#include "constrain/vocabulary.h"
#include "core/timer.h"
#include "decode/sampler.h"
#include "decode/stop_matcher.h"
#include "model/model.h"
#include "runtime/backend_factory.h"
#include "tokenizer/tokenizer.h"

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

namespace {

namespace fs = std::filesystem;

decode::SamplingOptions ToSampling(const GenerateOptions& o) {
  decode::SamplingOptions s;
  s.temperature = o.temperature;
  s.top_k = o.top_k;
  s.top_p = o.top_p;
  s.min_p = o.min_p;
  s.typical_p = o.typical_p;
  s.repetition_penalty = o.repetition_penalty;
  s.frequency_penalty = o.frequency_penalty;
  s.presence_penalty = o.presence_penalty;
  s.penalty_window = o.penalty_window;
  s.penalty_scope = o.penalize_prompt ? decode::PenaltyScope::kPromptAndGenerated
                                      : decode::PenaltyScope::kGeneratedOnly;
  s.logit_bias = o.logit_bias;
  s.seed = o.seed;
  s.logprobs = o.logprobs;
  s.top_logprobs = o.top_logprobs;
  s.stop_ids = o.stop_ids;
  s.stop_strings = o.stop_strings;
  return s;
}

// True when the token can come straight from the backend's argmax output (no logits needed).
bool PureGreedy(const GenerateOptions& o) {
  return o.temperature == 0 && o.repetition_penalty == 1.0 && o.frequency_penalty == 0 &&
         o.presence_penalty == 0 && o.logit_bias.empty() && !o.logprobs &&
         o.constraint.kind == OutputConstraint::Kind::kNone;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(idx));
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - lo);
}

class EngineImpl;

class SessionImpl : public Session {
 public:
  SessionImpl(std::shared_ptr<const EngineImpl> engine, std::unique_ptr<Backend> backend)
      : engine_(std::move(engine)), backend_(std::move(backend)) {}

  Result Generate(const Input& input, const GenerateOptions& options, const TokenCallback& on_token,
                  std::stop_token stop) override;
  void Reset() override {
    backend_->Reset();
    evaluated_.clear();
  }
  const std::vector<int32_t>& evaluated() const override { return evaluated_; }

 private:
  // Keeps only the first n evaluated tokens (n <= evaluated_.size()).
  void Rollback(size_t n) {
    n = std::min({n, evaluated_.size(), static_cast<size_t>(backend_->cached())});
    if (!backend_->Truncate(static_cast<int>(n))) n = 0;
    evaluated_.resize(n);
  }
  Result Run(const std::vector<int32_t>& prompt, const Input& input, const GenerateOptions& options,
             const TokenCallback& on_token, std::stop_token stop, size_t* prompt_done);

  std::shared_ptr<const EngineImpl> engine_;
  std::unique_ptr<Backend> backend_;
  std::vector<int32_t> evaluated_;
};

class EngineImpl : public Engine {
 public:
  explicit EngineImpl(const EngineOptions& options) : options_(options) {
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
    if (capacity_ <= 0)
      throw Error(ErrorCode::kInvalidArgument, "context_capacity must be positive");
    // Start one backend now so a bad backend name or a missing device fails at load time.
    probe_ = MakeBackend();
    backend_name_ = probe_->name();
    load_ms_ = t.Ms();
  }

  std::unique_ptr<Session> NewSession() override {
    std::unique_ptr<Backend> b = probe_ ? std::move(probe_) : MakeBackend();
    return std::make_unique<SessionImpl>(
        std::static_pointer_cast<const EngineImpl>(shared_from_this()), std::move(b));
  }
  bool has_tokenizer() const override { return tokenizer_ != nullptr; }
  int context_capacity() const override { return capacity_; }
  std::string backend_name() const override { return backend_name_; }
  double load_ms() const override { return load_ms_; }
  int vocab_size() const override { return model_->text().vocab_size; }

  const Tokenizer& tokenizer() const {
    if (!tokenizer_) {
      throw Error(ErrorCode::kTokenizer,
                  "no tokenizer: put tokenizer.json beside the model or set tokenizer_path");
    }
    return *tokenizer_;
  }
  const Model& model() const { return *model_; }

  // The token -> bytes table for constraints, built once on first use. Ids the tokenizer does not
  // have are special (never allowed).
  std::shared_ptr<const constrain::Vocabulary> vocabulary() const {
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

  std::shared_ptr<const constrain::Constraint> CompileConstraint(
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

  std::vector<int32_t> Tokenize(std::string_view text) const override {
    return tokenizer().Encode(text);
  }
  std::string Detokenize(const std::vector<int32_t>& ids) const override {
    return tokenizer().Decode(ids);
  }

  std::vector<int32_t> PromptTokens(const Input& in) const override {
    const int given = in.text.has_value() + in.token_ids.has_value() + in.messages.has_value();
    if (given != 1) {
      throw Error(ErrorCode::kInvalidArgument,
                  "input needs exactly one of text, token_ids, messages");
    }
    std::vector<int32_t> ids;
    if (in.token_ids) {
      ids = *in.token_ids;
    } else if (in.text) {
      if (in.add_bos) ids.push_back(model_->text().bos_token_id);
      tokenizer().EncodeTo(*in.text, &ids);
    } else {
      chat::ChatTemplateOptions topt;
      topt.add_generation_prompt = true;
      topt.enable_thinking = in.enable_thinking;
      const std::string rendered = chat::RenderChatTemplate(
          *in.messages, in.tools.is_null() ? nlohmann::json::array() : in.tools, topt);
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

 private:
  std::unique_ptr<Backend> MakeBackend() const {
    return CreateBackend(options_.backend, *model_, {.capacity = capacity_}, options_.threads);
  }

  EngineOptions options_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  mutable std::once_flag vocab_once_;
  mutable std::shared_ptr<const constrain::Vocabulary> vocab_;
  std::unique_ptr<Backend> probe_;
  std::string backend_name_;
  int capacity_ = 0;
  double load_ms_ = 0;
};

Result SessionImpl::Generate(const Input& input, const GenerateOptions& options,
                             const TokenCallback& on_token, std::stop_token stop) {
  const std::vector<int32_t> prompt = engine_->PromptTokens(input);
  // Until the caches are touched, a failure keeps everything as it was.
  size_t prompt_done = evaluated_.size();
  try {
    return Run(prompt, input, options, on_token, stop, &prompt_done);
  } catch (...) {
    // Keep only what is fully evaluated prompt: a half-finished generation is never reused.
    Rollback(prompt_done);
    throw;
  }
}

Result SessionImpl::Run(const std::vector<int32_t>& prompt, const Input& input,
                        const GenerateOptions& options, const TokenCallback& on_token,
                        std::stop_token stop, size_t* prompt_done) {
  Timer total;
  const Model& model = engine_->model();
  if (options.max_new_tokens < 1) {
    throw Error(ErrorCode::kInvalidArgument, "max_new_tokens must be >= 1");
  }
  if (options.prefill_chunk < 1)
    throw Error(ErrorCode::kInvalidArgument, "prefill_chunk must be >= 1");
  decode::SamplingOptions sopt = ToSampling(options);
  decode::Sampler sampler(sopt);  // validates every option, naming the bad field
  decode::StopMatcher stops(sopt);
  const int capacity = engine_->context_capacity();
  if (static_cast<int64_t>(prompt.size()) + options.max_new_tokens > capacity) {
    throw Error(ErrorCode::kCapacity,
                "prompt (" + std::to_string(prompt.size()) + " tokens) + max_new_tokens (" +
                    std::to_string(options.max_new_tokens) + ") exceeds the context capacity " +
                    std::to_string(capacity));
  }
  const Tokenizer* tok = engine_->has_tokenizer() ? &engine_->tokenizer() : nullptr;
  std::vector<int> eos = model.text().eos_token_ids;
  // A constraint may always end with an EOS or stop id, even with ignore_eos.
  std::vector<int> all_stops = eos;
  all_stops.insert(all_stops.end(), options.stop_ids.begin(), options.stop_ids.end());
  if (options.ignore_eos) eos.clear();
  std::optional<constrain::ConstraintState> cstate;
  if (auto c = engine_->CompileConstraint(options.constraint, input, all_stops)) cstate.emplace(c);
  std::vector<uint64_t> allowed;

  Result result;
  Telemetry& tel = result.telemetry;
  tel.backend = backend_->name();
  tel.load_ms = engine_->load_ms();
  tel.prompt_tokens = static_cast<int>(prompt.size());

  // Exact prefix reuse: keep the longest common prefix, but always evaluate at least the last
  // prompt token (its logits are not stored).
  size_t keep = 0;
  if (options.reuse_prompt_cache) {
    while (keep < evaluated_.size() && keep < prompt.size() && evaluated_[keep] == prompt[keep])
      ++keep;
    keep = std::min(keep, prompt.size() - 1);
  }
  Rollback(keep);
  keep = evaluated_.size();
  *prompt_done = keep;
  tel.reused_tokens = static_cast<int>(keep);

  const bool greedy_ids = PureGreedy(options);
  const OutputMode mode = greedy_ids ? OutputMode::kArgmax : OutputMode::kLogits;
  ForwardResult fr;
  Timer prefill;
  {
    const size_t n = prompt.size() - keep;
    size_t chunk = n;
    if (options.prefill == PrefillStrategy::kSequential) chunk = 1;
    if (options.prefill == PrefillStrategy::kChunked)
      chunk = static_cast<size_t>(options.prefill_chunk);
    // kAuto: one call; the backend splits it into chunks its caches allow.
    for (size_t b = keep; b < prompt.size(); b += chunk) {
      if (stop.stop_requested()) throw Error(ErrorCode::kCancelled, "cancelled during prefill");
      const size_t e = std::min(prompt.size(), b + chunk);
      const bool last = e == prompt.size();
      backend_->Forward({.tokens = std::span<const int32_t>(prompt.data() + b, e - b),
                         .mode = last ? mode : OutputMode::kNone},
                        &fr);
      evaluated_.insert(evaluated_.end(), prompt.begin() + b, prompt.begin() + e);
      *prompt_done = evaluated_.size();
    }
  }
  tel.prefill_ms = prefill.Ms();
  sampler.SetPrompt(prompt);

  decode::StopMatcher* sm = &stops;
  std::optional<StreamDecoder> stream;
  if (tok) stream.emplace(*tok);
  std::string emitted;  // raw text released to the caller (stop strings held back)
  Timer step;
  result.stop_reason = StopReason::kLength;
  for (int i = 0; i < options.max_new_tokens; ++i) {
    int32_t token;
    if (greedy_ids) {
      token = fr.ids.back();
    } else {
      if (cstate) cstate->AllowedTokens(&allowed);  // throws Error(kConstraint) at a dead end
      const decode::SampleResult s = sampler.Sample(fr.logits, cstate ? &allowed : nullptr);
      token = s.token;
      if (options.logprobs) {
        TokenLogprob lp{token, s.logprob, {}};
        for (int k = 0; k < s.num_top; ++k) lp.top.emplace_back(s.top[k].token, s.top[k].logprob);
        result.logprobs.push_back(std::move(lp));
      }
    }
    sampler.Accept(token);
    if (cstate) cstate->Accept(token);
    if (stop.stop_requested())
      throw Error(ErrorCode::kCancelled, "cancelled before emitting a token");
    if (cstate && cstate->IsComplete()) {
      result.stop_reason = StopReason::kConstraintComplete;
      tel.token_ms.push_back(step.Ms());
      break;
    }
    if (std::find(eos.begin(), eos.end(), token) != eos.end()) {
      result.stop_reason = StopReason::kEos;
      tel.token_ms.push_back(step.Ms());
      break;
    }
    if (sm->IsStopId(token)) {
      result.stop_reason = StopReason::kStopId;
      tel.token_ms.push_back(step.Ms());
      break;
    }
    result.tokens.push_back(token);
    std::string piece = stream ? stream->Push(token) : std::string();
    const size_t before = emitted.size();
    const decode::StopEvent ev = sm->PushText(piece, &emitted);
    tel.token_ms.push_back(step.Ms());
    if (i == 0) tel.ttft_ms = total.Ms();
    if (on_token) {
      try {
        on_token(TokenEvent{token, i, std::string_view(emitted).substr(before), emitted});
      } catch (const Error&) {
        throw;
      } catch (const std::exception& e) {
        throw Error(ErrorCode::kCallback, std::string("token callback threw: ") + e.what());
      } catch (...) {
        throw Error(ErrorCode::kCallback, "token callback threw");
      }
    }
    if (ev.kind == decode::StopKind::kStopString) {
      result.stop_reason = StopReason::kStopString;
      break;
    }
    if (i + 1 == options.max_new_tokens) break;
    if (stop.stop_requested())
      throw Error(ErrorCode::kCancelled, "cancelled before evaluating a token");
    step.Reset();
    backend_->Forward({.tokens = std::span<const int32_t>(&token, 1), .mode = mode}, &fr);
    evaluated_.push_back(token);
  }
  if (result.stop_reason != StopReason::kStopString) {
    if (stream) sm->PushText(stream->Flush(), &emitted);
    sm->Finish(&emitted);
  }
  if (result.tokens.empty() && tel.ttft_ms == 0) tel.ttft_ms = total.Ms();

  result.raw_text = emitted;
  if (input.messages) {
    const chat::ParsedOutput parsed = chat::ParseModelOutput(emitted);
    result.text = parsed.text;
    result.reasoning = parsed.reasoning;
    for (const chat::ToolCall& tc : parsed.tool_calls) {
      result.tool_calls.push_back({tc.name, nlohmann::json::parse(tc.arguments.dump())});
    }
    for (const chat::MalformedBlock& m : parsed.malformed) {
      result.parse_errors.push_back(m.reason + ": " + m.raw);
    }
  } else {
    result.text = emitted;
  }
  result.resolved_config = nlohmann::json::parse(decode::ResolvedConfigJson(sopt, sampler.seed()));
  result.resolved_config["max_new_tokens"] = options.max_new_tokens;
  result.resolved_config["reuse_prompt_cache"] = options.reuse_prompt_cache;
  result.resolved_config["ignore_eos"] = options.ignore_eos;
  result.resolved_config["backend"] = tel.backend;
  {
    const OutputConstraint& oc = options.constraint;
    static const char* kKinds[] = {"none", "regex", "json", "json_schema", "tool_calls"};
    nlohmann::json cj = {{"kind", kKinds[static_cast<int>(oc.kind)]}};
    if (oc.kind == OutputConstraint::Kind::kRegex) cj["regex"] = oc.regex;
    if (oc.kind == OutputConstraint::Kind::kJson) cj["object_root"] = oc.object_root;
    if (oc.kind == OutputConstraint::Kind::kJsonSchema) cj["schema"] = oc.schema_json;
    if (oc.kind == OutputConstraint::Kind::kToolCalls)
      cj["require_tool_call"] = oc.require_tool_call;
    if (oc.kind != OutputConstraint::Kind::kNone) {
      cj["whitespace"] = oc.whitespace;
      cj["max_depth"] = oc.max_depth;
    }
    result.resolved_config["constraint"] = cj;
  }

  tel.total_ms = total.Ms();
  const size_t n = tel.token_ms.size();
  if (n > 1) {
    std::vector<double> itl(tel.token_ms.begin() + 1, tel.token_ms.end());
    tel.itl_median_ms = Percentile(itl, 0.5);
    tel.itl_p95_ms = Percentile(itl, 0.95);
    double sum = 0;
    for (double v : itl) sum += v;
    tel.tpot_ms = sum / itl.size();
    tel.decode_tok_s = sum > 0 ? itl.size() * 1000.0 / sum : 0;
  }
  tel.overall_tok_s = tel.total_ms > 0 ? result.tokens.size() * 1000.0 / tel.total_ms : 0;
  tel.resident_bytes = CurrentRssBytes();
  return result;
}

}  // namespace

std::shared_ptr<Engine> Engine::Load(const EngineOptions& options) {
  return std::make_shared<EngineImpl>(options);
}

}  // namespace gemma
