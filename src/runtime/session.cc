// Session: one conversation over one backend context. Exact prefix reuse, prefill in chunks the
// backend can take (cancellation is checked between chunks), and the decode loop: the backend
// computes what the TokenPolicy asks for (argmax, select among allowed ids, or logits), the
// policy picks the token and decides stops, the session streams text and keeps telemetry.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <optional>
#include <utility>

#include "backend/backend.h"
#include "backend/cache_window.h"
#include "chat/output_parser.h"
#include "constrain/constraint.h"
#include "core/memory.h"
#include "core/timer.h"
#include "decode/draft.h"
#include "decode/token_policy.h"
#include "runtime/engine_impl.h"
#include "runtime/model_draft.h"
#include "tokenizer/tokenizer.h"

namespace gemma {
namespace {

// Calls a caller's callback: its exceptions other than gemma::Error become Error(kCallback)
// saying "WHAT threw".
template <class F>
decltype(auto) CallUser(const char* what, F&& f) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kCallback, std::string(what) + " threw: " + e.what());
  } catch (...) {
    throw Error(ErrorCode::kCallback, std::string(what) + " threw");
  }
}

// SpeculativeOptions::Mode::kCustom: the caller's drafter as a draft source. Its exceptions and
// ids outside the vocabulary are Error(kCallback); a longer draft is cut to k.
class CallbackDraft : public decode::DraftSource {
 public:
  CallbackDraft(const SpeculativeOptions& spec, int vocab) : spec_(spec), vocab_(vocab) {}
  std::vector<int32_t> Propose(std::span<const int32_t> history, int k) override {
    std::vector<int32_t> d =
        CallUser("speculative drafter", [&] { return spec_.drafter(history, k); });
    if (static_cast<int>(d.size()) > k) d.resize(k);
    for (const int32_t id : d) {
      if (id < 0 || id >= vocab_) {
        throw Error(ErrorCode::kCallback, "speculative drafter returned id " + std::to_string(id) +
                                              ", outside the vocabulary (0.." +
                                              std::to_string(vocab_ - 1) + ")");
      }
    }
    return d;
  }

 private:
  const SpeculativeOptions& spec_;
  int vocab_;
};

const char* SpeculativeModeName(SpeculativeOptions::Mode m) {
  switch (m) {
    case SpeculativeOptions::Mode::kOff:
      return "off";
    case SpeculativeOptions::Mode::kPromptLookup:
      return "prompt_lookup";
    case SpeculativeOptions::Mode::kDraftModel:
      return "draft_model";
    case SpeculativeOptions::Mode::kCustom:
      return "custom";
  }
  return "off";
}

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

OutputMode ToOutputMode(decode::StepOutput o) {
  switch (o) {
    case decode::StepOutput::kArgmax:
      return OutputMode::kArgmax;
    case decode::StepOutput::kSelect:
      return OutputMode::kSelect;
    case decode::StepOutput::kLogits:
      break;
  }
  return OutputMode::kLogits;
}

StopReason ToStopReason(decode::StopCause c) {
  switch (c) {
    case decode::StopCause::kEos:
      return StopReason::kEos;
    case decode::StopCause::kStopId:
      return StopReason::kStopId;
    case decode::StopCause::kStopString:
      return StopReason::kStopString;
    case decode::StopCause::kConstraintComplete:
      return StopReason::kConstraintComplete;
    case decode::StopCause::kNone:
      break;
  }
  return StopReason::kLength;
}

// The compiled constraint's state as the token policy sees it.
class ConstraintAdapter : public decode::TokenConstraint {
 public:
  explicit ConstraintAdapter(std::shared_ptr<const constrain::Constraint> c) : state_(std::move(c)) {}
  void AllowedTokens(std::vector<uint64_t>* mask) override { state_.AllowedTokens(mask); }
  void Accept(int32_t token) override { state_.Accept(token); }
  bool IsComplete() const override { return state_.IsComplete(); }
  constrain::ConstraintState::Forced Forced(int max_bytes) const {
    return state_.ForcedContinuation(max_bytes);
  }

 private:
  constrain::ConstraintState state_;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(idx));
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - lo);
}

// Marks a session busy for one call; a concurrent call is refused.
class BusyGuard {
 public:
  explicit BusyGuard(std::atomic<bool>& busy) : busy_(busy) {
    if (busy_.exchange(true, std::memory_order_acquire)) {
      throw Error(ErrorCode::kBusy,
                  "this session is already running a request on another thread (use one session "
                  "per thread)");
    }
  }
  ~BusyGuard() { busy_.store(false, std::memory_order_release); }
  BusyGuard(const BusyGuard&) = delete;
  BusyGuard& operator=(const BusyGuard&) = delete;

 private:
  std::atomic<bool>& busy_;
};

class SessionImpl : public Session {
 public:
  SessionImpl(std::shared_ptr<const EngineImpl> engine, std::unique_ptr<Backend> backend)
      : engine_(std::move(engine)), backend_(std::move(backend)) {}

  Result Generate(const Input& input, const GenerateOptions& options, const TokenCallback& on_token,
                  std::stop_token stop) override;
  ScoreResult Score(const std::vector<int32_t>& tokens, bool return_logits,
                    std::stop_token stop) override;
  void Reset() override {
    BusyGuard guard(busy_);
    backend_->Reset();
    evaluated_.clear();
    media_.clear();
  }
  const std::vector<int32_t>& evaluated() const override { return evaluated_; }
  ScoreResult ScoreInput(const Input& input, bool return_logits, std::stop_token stop) override;
  ScoreResult ScorePrepared(const PreparedPrompt& prep, bool return_logits, std::stop_token stop);

 private:
  // An image's soft tokens among the evaluated tokens: positions [begin, begin + count) hold the
  // image with this digest (pixels, geometry, budget). Part of the prefix identity.
  struct MediaSpan {
    int begin = 0, count = 0;
    std::array<uint8_t, 32> digest{};
    bool operator==(const MediaSpan&) const = default;
  };

  // Keeps only the first n evaluated tokens (n <= evaluated_.size()).
  void Rollback(size_t n) {
    n = std::min({n, evaluated_.size(), static_cast<size_t>(backend_->cached())});
    if (!backend_->Truncate(static_cast<int>(n))) n = 0;
    evaluated_.resize(n);
    std::erase_if(media_, [&](const MediaSpan& m) { return static_cast<size_t>(m.begin) >= n; });
  }
  // Keeps the first n evaluated tokens exactly: a rewind the sliding rings cannot restore
  // re-evaluates them (text only: callers hold no images in the caches).
  void TruncateExact(size_t n) {
    if (backend_->Truncate(static_cast<int>(n))) {
      evaluated_.resize(n);
      return;
    }
    const int chunk = std::max(1, backend_->capabilities().max_chunk);
    ForwardResult ignored;
    for (size_t b = 0; b < n; b += chunk) {
      const size_t e = std::min(n, b + static_cast<size_t>(chunk));
      backend_->Forward({.tokens = std::span<const int32_t>(evaluated_.data() + b, e - b),
                         .mode = OutputMode::kNone},
                        &ignored);
    }
    evaluated_.resize(n);
  }
  // The longest prefix of `prep` the caches hold: equal ids, and every image overlapping it the
  // same image at the same place.
  size_t ReusablePrefix(const PreparedPrompt& prep) const {
    size_t keep = 0;
    while (keep < evaluated_.size() && keep < prep.ids.size() && evaluated_[keep] == prep.ids[keep])
      ++keep;
    for (int pass = 0; pass < 2; ++pass) {  // a cut may expose another span: settle it
      for (const MediaSpan& m : media_) {
        if (static_cast<size_t>(m.begin) >= keep) continue;
        const bool same = std::any_of(prep.images.begin(), prep.images.end(), [&](const PreparedImage& im) {
          return im.begin == m.begin && im.patched.soft_tokens == m.count && im.patched.digest == m.digest;
        });
        if (!same) keep = m.begin;
      }
      for (const PreparedImage& im : prep.images) {
        if (static_cast<size_t>(im.begin) >= keep) continue;
        const MediaSpan want{im.begin, im.patched.soft_tokens, im.patched.digest};
        if (std::find(media_.begin(), media_.end(), want) == media_.end()) keep = im.begin;
      }
    }
    return keep;
  }
  // Runs the vision tower for every image with soft tokens at or after `from` and returns one
  // pointer per prompt token (null for text), pointing into `storage`.
  std::vector<const float*> EncodeImages(const PreparedPrompt& prep, size_t from,
                                         std::vector<std::vector<float>>* storage, Telemetry* tel);
  // Evaluates prompt[evaluated_.size() ..] in chunks (cancellation checked before each); the last
  // chunk produces `mode` for its last position (or every position with all_positions).
  void Prefill(const PreparedPrompt& prep, std::span<const float* const> soft, size_t chunk,
               OutputMode mode, const std::vector<uint64_t>* allowed, std::stop_token stop,
               ForwardResult* fr);
  // `total` started before the prompt was prepared (media decoding counts in TTFT and total_ms).
  Result Run(const PreparedPrompt& prep, const Timer& total, const Input& input,
             const GenerateOptions& options, const TokenCallback& on_token, std::stop_token stop);

  std::shared_ptr<const EngineImpl> engine_;
  std::unique_ptr<Backend> backend_;
  std::vector<int32_t> evaluated_;
  std::vector<MediaSpan> media_;  // images among evaluated_
  size_t safe_ = 0;  // evaluated_ entries a failure of the running request keeps
  std::atomic<bool> busy_{false};
  // The draft model's context, made by the first request that drafts with it; it keeps its own
  // evaluated tokens across requests (ModelDraft re-syncs them with each history).
  std::unique_ptr<ModelDraft> model_draft_;
};

std::vector<const float*> SessionImpl::EncodeImages(const PreparedPrompt& prep, size_t from,
                                                    std::vector<std::vector<float>>* storage,
                                                    Telemetry* tel) {
  std::vector<const float*> soft;
  tel->images = 0;
  tel->audios = 0;
  for (const PreparedImage& im : prep.images) ++(im.audio ? tel->audios : tel->images);
  tel->media_ms = prep.prepare_ms;
  tel->vision_ms = 0;
  tel->audio_ms = 0;
  storage->clear();
  storage->reserve(prep.images.size());
  const int H = engine_->model().text().hidden_size;
  for (const PreparedImage& im : prep.images) {
    const media::PatchedImage& p = im.patched;
    if (static_cast<size_t>(im.begin + p.soft_tokens) <= from) continue;  // fully reused
    if (!backend_->capabilities().soft_tokens) {
      throw Error(ErrorCode::kUnsupported, "the " + backend_->name() + " backend cannot take " +
                                               (im.audio ? "audio" : "image") +
                                               " input yet: use --backend cpu or cpu-ref");
    }
    Timer t;
    storage->emplace_back();
    if (im.audio) {
      // Each 30 s chunk through the tower on its own; their soft tokens follow each other.
      std::vector<float> chunk;
      for (const media::AudioFeatures& f : im.audio->chunks) {
        engine_->backend_model().EncodeAudio({f.frames, f.mel.data(), f.mask.data()}, &chunk);
        if (chunk.size() != static_cast<size_t>(f.soft_tokens) * H)
          throw Error(ErrorCode::kInternal, "audio tower: wrong number of soft tokens");
        storage->back().insert(storage->back().end(), chunk.begin(), chunk.end());
      }
      tel->audio_ms += t.Ms();
      ++tel->audios_encoded;
    } else {
      engine_->backend_model().EncodeImage({p.patches_h, p.patches_w, p.pixels.data()},
                                           &storage->back());
      tel->vision_ms += t.Ms();
      ++tel->images_encoded;
    }
    if (storage->back().size() != static_cast<size_t>(p.soft_tokens) * H)
      throw Error(ErrorCode::kInternal, "media tower: wrong number of soft tokens");
    if (soft.empty()) soft.assign(prep.ids.size(), nullptr);
    for (int i = 0; i < p.soft_tokens; ++i)
      soft[im.begin + i] = storage->back().data() + static_cast<size_t>(i) * H;
  }
  return soft;
}

void SessionImpl::Prefill(const PreparedPrompt& prep, std::span<const float* const> soft,
                          size_t chunk, OutputMode mode, const std::vector<uint64_t>* allowed,
                          std::stop_token stop, ForwardResult* fr) {
  const std::vector<int32_t>& prompt = prep.ids;
  for (size_t b = evaluated_.size(); b < prompt.size(); b += chunk) {
    if (stop.stop_requested()) throw Error(ErrorCode::kCancelled, "cancelled during prefill");
    const size_t e = std::min(prompt.size(), b + chunk);
    const bool last = e == prompt.size();
    backend_->Forward({.tokens = std::span<const int32_t>(prompt.data() + b, e - b),
                       .soft = soft.empty() ? soft : soft.subspan(b, e - b),
                       .mode = last ? mode : OutputMode::kNone,
                       .allowed = last ? allowed : nullptr},
                      fr);
    evaluated_.insert(evaluated_.end(), prompt.begin() + b, prompt.begin() + e);
    for (const PreparedImage& im : prep.images) {
      // An image enters the identity once its first soft token is evaluated.
      if (static_cast<size_t>(im.begin) >= b && static_cast<size_t>(im.begin) < e)
        media_.push_back({im.begin, im.patched.soft_tokens, im.patched.digest});
    }
    safe_ = evaluated_.size();
  }
}

Result SessionImpl::Generate(const Input& input, const GenerateOptions& options,
                             const TokenCallback& on_token, std::stop_token stop) {
  BusyGuard guard(busy_);
  const Timer total;
  const PreparedPrompt prep = engine_->Prepare(input);
  // Until the caches are touched, a failure keeps everything as it was; after, only fully
  // evaluated prompt tokens are kept (a half-finished generation is never reused).
  safe_ = evaluated_.size();
  try {
    return Run(prep, total, input, options, on_token, stop);
  } catch (...) {
    Rollback(safe_);
    throw;
  }
}

Result SessionImpl::Run(const PreparedPrompt& prep, const Timer& total, const Input& input,
                        const GenerateOptions& options, const TokenCallback& on_token,
                        std::stop_token stop) {
  const std::vector<int32_t>& prompt = prep.ids;
  const Model& model = engine_->model();
  if (options.max_new_tokens < 1) {
    throw Error(ErrorCode::kInvalidArgument, "max_new_tokens must be >= 1");
  }
  if (options.prefill_chunk < 1)
    throw Error(ErrorCode::kInvalidArgument, "prefill_chunk must be >= 1");
  const int capacity = engine_->context_capacity();
  if (static_cast<int64_t>(prompt.size()) + options.max_new_tokens > capacity) {
    throw Error(ErrorCode::kCapacity,
                "prompt (" + std::to_string(prompt.size()) + " tokens) + max_new_tokens (" +
                    std::to_string(options.max_new_tokens) + ") exceeds the context capacity " +
                    std::to_string(capacity));
  }
  if (engine_->host_memory_checks()) {
    // The caches grow with use: what this request adds must fit before it starts (with a draft
    // model, its context's growth too).
    const int target = static_cast<int>(prompt.size()) + options.max_new_tokens;
    const CpuContextBytes b = PlanCpuContextBytes(model, {.capacity = capacity}, target, 1);
    const size_t have = backend_->resident_bytes();
    size_t grow = b.kv > have ? b.kv - have : 0;
    if (options.speculative.mode == SpeculativeOptions::Mode::kDraftModel &&
        engine_->draft_model()) {
      const int dc = engine_->DraftCapacity(capacity);
      const size_t d =
          PlanCpuContextBytes(*engine_->draft_model(), {.capacity = dc}, std::min(target, dc), 1)
              .kv;
      const size_t dhave = model_draft_ ? model_draft_->resident_bytes() : 0;
      grow += d > dhave ? d - dhave : 0;
    }
    const size_t available = grow ? AvailableMemoryBytes() : 0;
    if (grow && available && grow > available) {
      throw Error(ErrorCode::kCapacity,
                  "this request (" + std::to_string(target) + " tokens in context) needs " +
                      std::to_string(grow) + " more bytes (" +
                      FormatBytes(static_cast<double>(grow)) + ") of K/V cache but " +
                      std::to_string(available) + " bytes (" +
                      FormatBytes(static_cast<double>(available)) + ") are available");
    }
  }
  const SpeculativeOptions& spec = options.speculative;
  if ((spec.mode != SpeculativeOptions::Mode::kOff || spec.jump_forward) &&
      (spec.max_draft < 1 || spec.max_draft > 6))
    throw Error(ErrorCode::kInvalidArgument, "speculative.max_draft must be in 1..6");
  if (spec.mode == SpeculativeOptions::Mode::kDraftModel && !engine_->has_draft_model()) {
    throw Error(ErrorCode::kInvalidArgument,
                "speculative mode draft_model: the engine has no draft model "
                "(EngineOptions::draft_model_path, --draft-model)");
  }
  if (spec.mode == SpeculativeOptions::Mode::kCustom && !spec.drafter)
    throw Error(ErrorCode::kInvalidArgument, "speculative mode custom needs a drafter");
  const decode::SamplingOptions sopt = ToSampling(options);
  const std::vector<int32_t>& eos = model.text().eos_token_ids;
  // A constraint may always end with an EOS or stop id, even with ignore_eos.
  std::vector<int> all_stops(eos.begin(), eos.end());
  all_stops.insert(all_stops.end(), options.stop_ids.begin(), options.stop_ids.end());
  std::optional<ConstraintAdapter> constraint;
  if (auto c = engine_->CompileConstraint(options.constraint, input, all_stops))
    constraint.emplace(std::move(c));
  // Validates every sampling option, naming the bad field, before the caches are touched.
  decode::TokenPolicy policy(sopt, eos, options.ignore_eos, constraint ? &*constraint : nullptr);
  const Tokenizer* tok = engine_->has_tokenizer() ? &engine_->tokenizer() : nullptr;

  Result result;
  Telemetry& tel = result.telemetry;
  tel.backend = backend_->name();
  tel.load_ms = engine_->load_ms();
  tel.prompt_tokens = static_cast<int>(prompt.size());

  // Exact prefix reuse: keep the longest common prefix, but always evaluate at least the last
  // prompt token (its outputs are not stored).
  size_t keep = 0;
  if (options.reuse_prompt_cache) keep = std::min(ReusablePrefix(prep), prompt.size() - 1);
  Rollback(keep);
  safe_ = evaluated_.size();
  tel.reused_tokens = static_cast<int>(evaluated_.size());
  std::vector<std::vector<float>> soft_storage;
  const std::vector<const float*> soft = EncodeImages(prep, evaluated_.size(), &soft_storage, &tel);

  const OutputMode mode = ToOutputMode(policy.Output());
  const std::vector<uint64_t>* mask = mode == OutputMode::kSelect ? policy.Mask() : nullptr;
  // Speculative decoding and jump-forward: drafted tokens verified in one step.
  // Prompt lookup and the draft model: greedy (argmax) and sampled (logits) steps; not constrained
  // greedy (kSelect: its select carries one mask, and each position's depends on the tokens before
  // it). Jump-forward (a constraint's forced text): any mode, verified on logits. Not with media
  // prompts.
  const bool text_only = prep.images.empty() && media_.empty();
  const bool speculate = spec.mode != SpeculativeOptions::Mode::kOff &&
                         (mode == OutputMode::kArgmax || mode == OutputMode::kLogits) && text_only;
  const bool jump = spec.jump_forward && constraint && tok && text_only;
  // Verification steps' output: logits where a select would need a mask per position.
  const OutputMode verify_mode = mode == OutputMode::kSelect ? OutputMode::kLogits : mode;
  if (options.on_accepted) CallUser("on_accepted", options.on_accepted);
  ForwardResult fr;
  Timer prefill;
  {
    size_t chunk = prompt.size();
    if (options.prefill == PrefillStrategy::kSequential) chunk = 1;
    if (options.prefill == PrefillStrategy::kChunked)
      chunk = static_cast<size_t>(options.prefill_chunk);
    // kAuto: the largest chunk the backend evaluates at once, so a cancellation is honored within
    // one chunk and the backend splits nothing itself.
    const int max_chunk = backend_->capabilities().max_chunk;
    if (options.prefill == PrefillStrategy::kAuto && max_chunk > 0)
      chunk = static_cast<size_t>(max_chunk);
    Prefill(prep, soft, chunk, mode, mask, stop, &fr);
  }
  tel.prefill_ms = prefill.Ms();
  policy.SetPrompt(prompt);

  std::optional<StreamDecoder> stream;
  if (tok) stream.emplace(*tok);
  std::string emitted;  // raw text released to the caller (stop strings held back)
  Timer step;
  decode::PromptLookupDraft lookup;
  CallbackDraft custom(spec, engine_->vocab_size());
  decode::DraftSource* source = &lookup;
  if (speculate && spec.mode == SpeculativeOptions::Mode::kDraftModel) {
    if (!model_draft_)
      model_draft_ = std::make_unique<ModelDraft>(engine_->NewDraftContext(backend_->capacity()),
                                                  engine_->draft_batcher(),
                                                  engine_->draft_batches_multi_token_steps());
    model_draft_->set_stop(stop);
    source = model_draft_.get();
  } else if (speculate && spec.mode == SpeculativeOptions::Mode::kCustom) {
    source = &custom;
  }
  decode::DraftPolicy drafts(spec.max_draft);
  std::vector<int32_t> history;
  // Speculation. A verification step evaluates the token and its draft and returns the output
  // (argmax id or logits) after each. The draft is a point mass, so the standard rule (accept
  // draft d with probability p(d), else draw from the residual p without d) is carried out by
  // drawing the next token from p as plain decoding does and accepting d when the draw is d: the
  // emitted tokens have exactly plain decoding's distribution and, with a seed, are plain
  // decoding's tokens (one draw per token either way, on logits the backends give bit for bit).
  ForwardResult vr;
  const int V = engine_->vocab_size();
  int row = -1;  // the output the next choice reads: -1 = fr, else row `row` of vr
  std::deque<int32_t> ahead;  // drafted tokens the caches hold past the emitted ones
  // Jump-forward drafts have their own adaptive policy: a model that does not tokenize the forced
  // text canonically rejects them, and drafting pauses.
  decode::DraftPolicy forced_drafts(spec.max_draft);
  int run_drafted = 0, run_accepted = 0;  // the current draft's length and tokens accepted
  bool run_forced = false;                // ... and whether it is a constraint's forced text
  auto end_run = [&] {
    if (run_drafted == 0) return;
    tel.accepted += run_accepted;
    (run_forced ? forced_drafts : drafts).Record(run_drafted, run_accepted);
    run_drafted = run_accepted = 0;
  };
  auto drop_ahead = [&] {
    end_run();
    if (ahead.empty()) return;
    TruncateExact(evaluated_.size() - ahead.size());
    ahead.clear();
  };
  // Batched decode: plain one-token steps go through the engine's batcher (with other sessions'
  // steps pending at the same time); this session leaves it when the loop ends, however it ends.
  StepBatcher* const batcher = engine_->batcher();
  const bool batch_verify = batcher && engine_->backend_model().batches_multi_token_steps();
  const StepBatcher::LeaveOnExit leave_batcher{batcher, backend_.get()};
  result.stop_reason = StopReason::kLength;
  for (int i = 0; i < options.max_new_tokens; ++i) {
    decode::SampleResult s;
    if (row < 0) {
      s = policy.Choose(fr.logits, fr.ids.empty() ? -1 : fr.ids.back(),
                        fr.logprobs.empty() ? 0.f : fr.logprobs.back());
    } else if (verify_mode == OutputMode::kLogits) {
      const std::span<const float> z =
          std::span<const float>(vr.logits).subspan(static_cast<size_t>(row) * V, V);
      s = mode == OutputMode::kLogits ? policy.Choose(z, -1, 0.f) : policy.ChooseFromLogits(z);
    } else {
      s = policy.Choose({}, vr.ids[row], 0.f);
    }
    const int32_t token = s.token;
    if (options.logprobs) {
      TokenLogprob lp{token, s.logprob, {}};
      for (int k = 0; k < s.num_top; ++k) lp.top.emplace_back(s.top[k].token, s.top[k].logprob);
      result.logprobs.push_back(std::move(lp));
    }
    const decode::StopCause by_id = policy.Accept(token);
    if (stop.stop_requested())
      throw Error(ErrorCode::kCancelled, "cancelled before emitting a token");
    if (by_id != decode::StopCause::kNone) {
      result.stop_reason = ToStopReason(by_id);
      tel.token_ms.push_back(step.Ms());
      break;
    }
    result.tokens.push_back(token);
    const std::string piece = stream ? stream->Push(token) : std::string();
    const size_t before = emitted.size();
    const decode::StopCause by_text = policy.PushText(piece, &emitted);
    tel.token_ms.push_back(step.Ms());
    if (i == 0) tel.ttft_ms = total.Ms();
    if (on_token) {
      CallUser("token callback", [&] {
        on_token(TokenEvent{token, i, std::string_view(emitted).substr(before), emitted,
                            options.logprobs ? &result.logprobs.back() : nullptr});
      });
    }
    // An emitted token its draft guessed counts as accepted, the last one too (whose K/V plain
    // decoding would not hold: the caches drop it below).
    const bool drafted_right = !ahead.empty() && ahead.front() == token;
    if (by_text == decode::StopCause::kStopString || i + 1 == options.max_new_tokens) {
      if (drafted_right) ++run_accepted;
      if (by_text == decode::StopCause::kStopString) result.stop_reason = StopReason::kStopString;
      break;
    }
    if (stop.stop_requested())
      throw Error(ErrorCode::kCancelled, "cancelled before evaluating a token");
    step.Reset();
    if (drafted_right) {
      // The draft's token: the caches hold it and the verification step gave the output after it.
      ahead.pop_front();
      ++row;
      ++run_accepted;
      if (ahead.empty()) end_run();  // (all accepted)
      continue;
    }
    drop_ahead();  // the draw departed from the draft: its remaining tokens leave the caches
    row = -1;
    // (a verification step's cost, weighed against a plain step's, includes the drafting)
    const auto d0 = std::chrono::steady_clock::now();
    const int room = std::min(options.max_new_tokens - i - 1,
                              backend_->capacity() - backend_->cached() - 1);
    std::vector<int32_t> draft;
    bool forced = false;
    if (const int fk = jump && room > 0 ? forced_drafts.Next() : 0; fk > 0) {
      // The text the constraint forces after `token`, tokenized canonically.
      const constrain::ConstraintState::Forced f = constraint->Forced(64);
      if (!f.bytes.empty()) draft = engine_->Tokenize(f.bytes);
      if (f.special >= 0) draft.push_back(f.special);
      if (static_cast<int>(draft.size()) > std::min(fk, room)) draft.resize(std::min(fk, room));
      forced = !draft.empty();
    }
    const int k = std::min(speculate && !forced ? drafts.Next() : 0, room);
    if (k > 0) {
      history.assign(evaluated_.begin(), evaluated_.end());
      history.push_back(token);
      draft = source->Propose(history, k);
      if (source != &lookup)
        tel.draft_ms +=
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - d0)
                .count();
    }
    if (draft.empty()) {
      const std::vector<uint64_t>* step_mask =
          mode == OutputMode::kSelect ? policy.Mask() : nullptr;
      const ForwardRequest one{
          .tokens = std::span<const int32_t>(&token, 1), .mode = mode, .allowed = step_mask};
      const auto t0 = std::chrono::steady_clock::now();
      if (batcher) {
        const int size = batcher->Step(backend_.get(), one, &fr);
        if (size > 1) ++tel.batched_steps;
        tel.max_batch = std::max(tel.max_batch, size);
      } else {
        backend_->Forward(one, &fr);
      }
      // (the drafting policies weigh verification steps against this cost)
      const double plain_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      drafts.RecordPlainCost(plain_s);
      forced_drafts.RecordPlainCost(plain_s);
      evaluated_.push_back(token);
      continue;
    }
    // One step over the token and its draft, the output after each; the choices then walk the
    // rows while they draw the drafted tokens. Batched with other sessions' steps where the
    // backend takes steps of several tokens in a batch (the fast CPU backend), else alone.
    std::vector<int32_t> seq = {token};
    seq.insert(seq.end(), draft.begin(), draft.end());
    const ForwardRequest verify{.tokens = seq, .mode = verify_mode, .all_positions = true};
    if (batch_verify) {
      const int size = batcher->Step(backend_.get(), verify, &vr);
      if (size > 1) ++tel.batched_steps;
      tel.max_batch = std::max(tel.max_batch, size);
    } else {
      if (batcher) batcher->Leave(backend_.get());
      backend_->Forward(verify, &vr);
    }
    (forced ? forced_drafts : drafts)
        .RecordVerifyCost(
            static_cast<int>(draft.size()),
            std::chrono::duration<double>(std::chrono::steady_clock::now() - d0).count());
    evaluated_.insert(evaluated_.end(), seq.begin(), seq.end());
    ahead.assign(draft.begin(), draft.end());
    row = 0;
    run_drafted = static_cast<int>(draft.size());
    run_forced = forced;
    ++tel.verify_steps;
    if (forced) ++tel.jump_forward_steps;
    tel.drafted += static_cast<int>(draft.size());
  }
  // Verified tokens past the last one evaluated as plain decoding would have it: dropped.
  drop_ahead();
  if (result.stop_reason != StopReason::kStopString)
    policy.Finish(stream ? stream->Flush() : std::string(), &emitted);
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
  result.resolved_config =
      nlohmann::json::parse(decode::ResolvedConfigJson(sopt, policy.sampler().seed()));
  result.resolved_config["max_new_tokens"] = options.max_new_tokens;
  result.resolved_config["reuse_prompt_cache"] = options.reuse_prompt_cache;
  result.resolved_config["ignore_eos"] = options.ignore_eos;
  result.resolved_config["speculative"] = {{"mode", SpeculativeModeName(spec.mode)},
                                           {"max_draft", spec.max_draft},
                                           {"applied", speculate},
                                           {"jump_forward", spec.jump_forward},
                                           {"jump_forward_applied", jump}};
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

ScoreResult SessionImpl::Score(const std::vector<int32_t>& tokens, bool return_logits,
                               std::stop_token stop) {
  // Raw ids, no media: placeholder ids are scored as the pad embedding they look up.
  PreparedPrompt prep;
  prep.ids = tokens;
  return ScorePrepared(prep, return_logits, stop);
}

ScoreResult SessionImpl::ScoreInput(const Input& input, bool return_logits, std::stop_token stop) {
  return ScorePrepared(engine_->Prepare(input), return_logits, stop);
}

ScoreResult SessionImpl::ScorePrepared(const PreparedPrompt& prep, bool return_logits,
                                       std::stop_token stop) {
  BusyGuard guard(busy_);
  Timer total;
  const std::vector<int32_t>& tokens = prep.ids;
  const int V = engine_->vocab_size();
  if (tokens.size() < 2) throw Error(ErrorCode::kInvalidArgument, "Score needs at least 2 tokens");
  if (static_cast<int64_t>(tokens.size()) > engine_->context_capacity()) {
    throw Error(ErrorCode::kCapacity, std::to_string(tokens.size()) +
                                          " tokens exceed the context capacity " +
                                          std::to_string(engine_->context_capacity()));
  }
  for (int32_t id : tokens) {
    if (id < 0 || id >= V) {
      throw Error(ErrorCode::kInvalidArgument,
                  "token id " + std::to_string(id) + " outside the vocabulary");
    }
  }
  // Earlier positions' logits are not kept, so scoring evaluates from the start, in chunks of at
  // most 64 positions (64 x vocab floats of logits at a time).
  Rollback(0);
  Telemetry tel;
  std::vector<std::vector<float>> soft_storage;
  const std::vector<const float*> soft = EncodeImages(prep, 0, &soft_storage, &tel);
  ScoreResult out;
  out.logprobs.reserve(tokens.size() - 1);
  const int max_chunk = backend_->capabilities().max_chunk;
  const size_t chunk = static_cast<size_t>(max_chunk > 0 ? std::min(max_chunk, 64) : 64);
  ForwardResult fr;
  {
    for (size_t b = 0; b < tokens.size(); b += chunk) {
      if (stop.stop_requested()) throw Error(ErrorCode::kCancelled, "cancelled while scoring");
      const size_t e = std::min(tokens.size(), b + chunk);
      backend_->Forward({.tokens = std::span<const int32_t>(tokens.data() + b, e - b),
                         .soft = soft.empty() ? std::span<const float* const>()
                                              : std::span<const float* const>(soft).subspan(b, e - b),
                         .mode = OutputMode::kLogits,
                         .all_positions = true},
                        &fr);
      evaluated_.insert(evaluated_.end(), tokens.begin() + b, tokens.begin() + e);
      for (const PreparedImage& im : prep.images) {
        if (static_cast<size_t>(im.begin) >= b && static_cast<size_t>(im.begin) < e)
          media_.push_back({im.begin, im.patched.soft_tokens, im.patched.digest});
      }
      for (size_t p = b; p < e; ++p) {
        const float* row = fr.logits.data() + (p - b) * V;
        if (return_logits) out.logits.insert(out.logits.end(), row, row + V);
        if (p + 1 == tokens.size()) break;
        double mx = -std::numeric_limits<double>::infinity();
        for (int i = 0; i < V; ++i) mx = std::max(mx, static_cast<double>(row[i]));
        double sum = 0;
        for (int i = 0; i < V; ++i) sum += std::exp(static_cast<double>(row[i]) - mx);
        out.logprobs.push_back(static_cast<double>(row[tokens[p + 1]]) - mx - std::log(sum));
      }
    }
  }
  out.total_ms = total.Ms();
  return out;
}

}  // namespace

std::unique_ptr<Session> NewSessionImpl(std::shared_ptr<const EngineImpl> engine,
                                        std::unique_ptr<Backend> context) {
  return std::make_unique<SessionImpl>(std::move(engine), std::move(context));
}

}  // namespace gemma
