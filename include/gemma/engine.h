// gemma-engine public API: Engine (a loaded model, shared, read-only) and Session (one
// conversation's caches and evaluated tokens).
//
// Threading: an Engine is thread-safe; NewSession, Tokenize, PromptTokens may be called from any
// thread. A Session is one conversation: use it from one thread at a time (a second concurrent
// Generate, Score or Reset is refused with Error(kBusy), never queued). Sessions of one engine may
// run on different threads at once; they share the weights (each session adds only its caches and
// scratch) and take turns where the backend cannot overlap work (one CPU thread pool).
//
//   auto engine = gemma::Engine::Load({.model_path = "/models/gemma-4-e2b"});
//   auto session = engine->NewSession();
//   gemma::GenerateOptions opt;  opt.max_new_tokens = 128;  opt.temperature = 0.7;  opt.seed = 42;
//   gemma::Result r = session->Generate(gemma::Input::Messages(messages), opt,
//       [](const gemma::TokenEvent& ev) { std::cout << ev.delta << std::flush; });
//
// Every failure a caller can cause is a gemma::Error (error.h). A failed or cancelled Generate
// leaves the session usable: its caches keep only fully evaluated prompt tokens, never a
// half-finished state.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "gemma/error.h"

namespace gemma {

struct EngineOptions {
  std::string model_path;  // checkpoint directory (config.json + safetensors) or .safetensors file
  std::string tokenizer_path;  // tokenizer.json; empty: <model dir>/tokenizer.json when present
  // "cpu" (fastest CPU backend built in), "cpu-ref" (the reference oracle), "vulkan", or "auto"
  // (vulkan when a device exists, else cpu).
  std::string backend = "cpu";
  int context_capacity = 32768;  // tokens; clamped to the model's max_position_embeddings
  int threads = 0;               // CPU threads, 0 = all cores (at most 1024)
  // Vulkan physical device index (-1: discrete > integrated > virtual GPU; a CPU-type device such
  // as lavapipe only with backend "vulkan"). GEMMA_VULKAN_DEVICE (index or name substring)
  // overrides it.
  int device_index = -1;
  // Batched decode: one-token steps of sessions decoding at the same time are evaluated together,
  // up to this many per step (the weights read once for all), each with exactly its solo result.
  // Backends that gain from it only (the fast CPU backend); 1 = every session steps alone.
  int max_batch = 16;
  // Vulkan: device-local memory the engine (weights and every session) may hold, in bytes (0: the
  // device's largest device-local heap). Past it, loading or a new session fails with
  // Error(kCapacity) naming what needs how much, before anything is allocated; the "auto" backend
  // then runs on the CPU. Raise it for a driver that spills device memory to system memory.
  size_t device_memory_limit = 0;
  // Vulkan: a submitted step not finished after this many seconds is a hung device. The request
  // fails with Error(kDevice), the device is given up, and the next request builds a new one and
  // replays each session's history (as after a lost device). 0: 60 s on a GPU, 600 s on a CPU
  // Vulkan device.
  double device_step_timeout_s = 0;
  // false: the checkpoint is read into memory instead of mapped (as on a file system that cannot
  // map it: the browser's, some network mounts), except the per-layer embedding table (E2B: 1.1 GiB
  // of QAT's 2.3), which stays in the file and is read a row per token. A file changed under a
  // loaded engine then costs a typed Error(kIo) at the next read, not a SIGBUS.
  bool mmap = true;
  // Speculative decoding's draft model (SpeculativeOptions::Mode::kDraftModel): a smaller
  // checkpoint with the same vocabulary (and the same tokenizer where both have one), e.g. E2B
  // drafting for E4B. Loaded beside the model, on the same backend (its own thread pool or
  // device queue; on Vulkan device_memory_limit bounds each model separately); each session that
  // drafts adds one context of it. Empty: none. Error(kConfig) at load when the vocabularies
  // differ.
  std::string draft_model_path;
};

// One image of a request. With Input::text or Input::messages every "<|image|>" placeholder (the
// template renders one per image content part) becomes <|image>, the image's soft tokens and
// <image|>, as transformers' Gemma4Processor expands it; with Input::token_ids the ids already hold
// those runs (<boi>, N image ids, <eoi>) and the images fill them in order. Decoded as
// transformers' load_image does (EXIF orientation applied, alpha dropped), resized and patched as
// Gemma4ImageProcessor does.
struct ImageInput {
  std::string path;            // a PNG, JPEG, WebP, BMP or GIF file, or
  std::vector<uint8_t> bytes;  // the file's bytes
  int budget = 0;  // soft tokens at most: 70, 140, 280, 560 or 1120; 0 = Input::vision_budget
  static ImageInput File(std::string p, int budget = 0) {
    ImageInput i;
    i.path = std::move(p);
    i.budget = budget;
    return i;
  }
  static ImageInput Bytes(std::vector<uint8_t> b, int budget = 0) {
    ImageInput i;
    i.bytes = std::move(b);
    i.budget = budget;
    return i;
  }
};

// One video: `max_frames` frames spread uniformly over the whole video by frame number (every
// frame of a shorter one), as Gemma4VideoProcessor samples them; `fps` > 0 takes int(duration *
// fps) frames instead (at most max_frames). Decoded by the ffmpeg command (Error(kUnsupported)
// when it is not installed), each frame preprocessed like an image. With text or messages every
// "<|video|>" becomes, per frame, "mm:ss <|image>" + N x "<|video|>" + "<image|>" (mm:ss = the
// frame's number / the video's frame rate), frames joined by spaces (Gemma4Processor).
struct VideoInput {
  std::string path;            // a video file, or
  std::vector<uint8_t> bytes;  // the file's bytes (written to a private temporary file for ffmpeg)
  int budget = 70;  // soft tokens per frame (Gemma4VideoProcessor's default)
  double fps = 0;   // 0: max_frames frames (transformers' num_frames)
  int max_frames = 32;
  static VideoInput File(std::string p, int budget = 70) {
    VideoInput v;
    v.path = std::move(p);
    v.budget = budget;
    return v;
  }
  static VideoInput Bytes(std::vector<uint8_t> b, int budget = 70) {
    VideoInput v;
    v.bytes = std::move(b);
    v.budget = budget;
    return v;
  }
};

// One audio clip. With Input::text or Input::messages every "<|audio|>" placeholder (the template
// renders one per audio content part) becomes <|audio>, the clip's soft tokens (one per 40 ms) and
// <audio|>, as transformers' Gemma4Processor expands it; with Input::token_ids the ids already
// hold those runs. Decoded with libsndfile (WAV, FLAC, OGG Vorbis/Opus, MP3, AIFF), mixed to mono,
// resampled to 16 kHz, then Gemma4AudioFeatureExtractor's log-mel frames. Clips longer than 30 s
// (transformers truncates there) are split into 30 s chunks, each through the tower on its own,
// their soft tokens in one run; at most 10 minutes per clip.
struct AudioInput {
  std::string path;            // an audio file, or
  std::vector<uint8_t> bytes;  // the file's bytes
  static AudioInput File(std::string p) {
    AudioInput a;
    a.path = std::move(p);
    return a;
  }
  static AudioInput Bytes(std::vector<uint8_t> b) {
    AudioInput a;
    a.bytes = std::move(b);
    return a;
  }
};

// What to generate from: exactly one of text, token ids or messages.
struct Input {
  std::optional<std::string> text;  // raw text; <bos> is prepended unless add_bos=false
  std::optional<std::vector<int32_t>> token_ids;  // used as given
  std::optional<nlohmann::json> messages;  // chat messages (OpenAI/HF shape), rendered with the
                                           // Gemma 4 canonical template
  nlohmann::json tools = nlohmann::json::array();  // function declarations (with messages)
  bool enable_thinking = false;                    // reasoning channel (with messages)
  bool add_bos = true;                             // with text
  // Images for the placeholders of text or token-id input, in order. Messages carry theirs as
  // content parts: {"type": "image", "path": FILE | "url": "data:image/...;base64,..." |
  // "bytes": BASE64} (also "image_url": {"url": ...}); each part may set "budget".
  std::vector<ImageInput> images;
  int vision_budget = 280;  // soft tokens per image unless the image sets its own
  // Videos for the "<|video|>" placeholders of text or token-id input; messages use content parts
  // {"type": "video", "path": FILE} (optional "budget", "fps", "max_frames").
  std::vector<VideoInput> videos;
  // Audio clips for the "<|audio|>" placeholders of text or token-id input; messages use content
  // parts {"type": "audio", "path": FILE | "bytes": BASE64 | "url": "data:audio/...;base64,..."}
  // or OpenAI's {"type": "input_audio", "input_audio": {"data": BASE64, "format": "wav"}}.
  std::vector<AudioInput> audios;

  static Input Text(std::string t) {
    Input i;
    i.text = std::move(t);
    return i;
  }
  static Input Ids(std::vector<int32_t> ids) {
    Input i;
    i.token_ids = std::move(ids);
    return i;
  }
  static Input Messages(nlohmann::json m, nlohmann::json tools = nlohmann::json::array(),
                        bool enable_thinking = false) {
    Input i;
    i.messages = std::move(m);
    i.tools = std::move(tools);
    i.enable_thinking = enable_thinking;
    return i;
  }
};

enum class PrefillStrategy { kAuto, kSequential, kChunked };

// Speculative decoding: tokens drafted ahead and verified by one backend step that evaluates them
// all (the caches roll back past the first rejected one). Greedy output is token for token what
// plain decoding gives; sampled output follows the standard accept/reject rule (a drafted token
// is accepted with its probability under the request's final distribution, after every filter
// and penalty, else the token is drawn from the rest), carried out with the sampler's own draw, so
// a seeded request gives plain decoding's tokens. Applied to text prompts decoded greedily without
// a constraint or from the logits (sampling, penalties, logprobs, constraints with sampling); off
// for constrained greedy decoding and media prompts, where Result::resolved_config says so.
// Drafts come from prompt lookup (n-gram matches in the prompt and output so far), from the
// engine's draft model (EngineOptions::draft_model_path), which drafts greedily on its own context,
// or from the caller's `drafter` (kCustom).
struct SpeculativeOptions {
  enum class Mode { kOff, kPromptLookup, kDraftModel, kCustom };
  Mode mode = Mode::kOff;
  // kCustom: called on the generating thread before a verification step with the context so far
  // (the prompt, the tokens generated so far and the one about to be evaluated, which is last) and
  // the number of tokens wanted, `k` (1..max_draft); returns up to k ids that likely follow
  // (longer: cut to k; empty: no guess, a plain step). Whatever it returns, the model's own choices
  // decide every token: the output is plain decoding's. An id outside the vocabulary is
  // Error(kCallback), as is an exception thrown by it; the session keeps its context exact either
  // way. Its time counts in Telemetry::draft_ms. A drafter over a retrieval corpus, an edit's
  // source file or a structured template goes here.
  std::function<std::vector<int32_t>(std::span<const int32_t> context, int k)> drafter;
  // The most tokens drafted per step (1..6: a step then evaluates at most 7 tokens, which every
  // backend computes as it does one-token steps). An adaptive policy drafts fewer where that gives
  // more tokens per unit of time (from the acceptance so far and the backend's measured step
  // costs), and none while drafts do not pay (docs/decoding.md).
  int max_draft = 4;
  // Constrained jump-forward: with a constraint, the text it forces next (a JSON Schema's fixed
  // keys and punctuation, a tool-call frame, a regex literal) is tokenized canonically and drafted
  // (up to max_draft tokens), ahead of prompt lookup and in any mode, constrained greedy included.
  // The model's own choices still decide every token (a forced draft is kept where the choice
  // equals it): output identical to token-by-token constrained decoding, with the model-chosen
  // tokenization of the forced text. Off by default (its steps return logits, not a select).
  bool jump_forward = false;
};

// Constrained decoding: the output must match a regex, be JSON, follow a JSON Schema (subset), or
// be Gemma 4 native tool calls for the request's tools. Masks apply before every other filter; EOS
// and stop ids are allowed only where the output is complete. An unsupported regex or schema is an
// Error(kConstraint / kUnsupported) at request time naming the construct and its JSON pointer.
struct OutputConstraint {
  enum class Kind { kNone, kRegex, kJson, kJsonSchema, kToolCalls };
  Kind kind = Kind::kNone;
  std::string regex;                // kRegex: full match, RE2-like subset (docs/constraints.md)
  std::string schema_json;          // kJsonSchema: the schema text (property order is kept)
  bool object_root = false;         // kJson: the root must be an object
  std::string whitespace = "none";  // none | compact | any
  int max_depth = 20;               // nesting allowed in unconstrained JSON
  bool require_tool_call = false;   // kToolCalls: the answer must be tool calls (else text first)
};

// Decoding options. The sampling chain, in order: logit bias -> repetition / frequency / presence
// penalties -> temperature -> top-k -> typical-p -> top-p -> min-p -> draw (see docs/decoding.md).
struct GenerateOptions {
  int max_new_tokens = 256;
  double temperature = 0.0;  // 0 = exact greedy
  int top_k = 0;             // 0 = off
  double top_p = 1.0;
  double min_p = 0.0;
  double typical_p = 1.0;
  double repetition_penalty = 1.0;  // transformers semantics
  double frequency_penalty = 0.0;   // OpenAI semantics
  double presence_penalty = 0.0;
  int penalty_window = -1;      // tokens looked at by the penalties; -1 = all
  bool penalize_prompt = true;  // penalties see the prompt too (transformers), else only output
  std::map<int32_t, float> logit_bias;    // id -> bias (-inf bans)
  std::optional<uint64_t> seed;           // absent: random, reported in Result::resolved_config
  std::vector<int32_t> stop_ids;          // in addition to the model's EOS ids (unless ignore_eos)
  std::vector<std::string> stop_strings;  // never appear in the returned text
  bool ignore_eos = false;
  bool logprobs = false;
  int top_logprobs = 0;            // alternatives per token (<= 20), needs logprobs
  bool reuse_prompt_cache = true;  // exact prefix reuse of the session's caches
  PrefillStrategy prefill = PrefillStrategy::kAuto;
  int prefill_chunk = 256;  // tokens per chunk for kChunked (kAuto picks)
  OutputConstraint constraint;  // kToolCalls uses Input::tools; thinking follows the input
  SpeculativeOptions speculative;
  // Called once, on the generating thread, when the request has passed every check (options,
  // constraint, capacity, images) and prefill is about to start; not called when Generate fails
  // before. Later failures are cancellation or the backend's own. A server answers its status here
  // (its headers then go out while the prompt is evaluated, off the time to first token).
  std::function<void()> on_accepted;
};

struct TokenLogprob;
struct TokenEvent {
  int32_t id;
  int index;               // 0-based among generated tokens
  std::string_view delta;  // newly completed raw text (complete UTF-8; may be empty)
  std::string_view text;   // raw text so far
  // With GenerateOptions::logprobs: this token's entry of Result::logprobs (valid during the
  // call); null otherwise. The entry of a token that ends generation (EOS, a stop id) has no
  // event: it is only in the Result.
  const TokenLogprob* logprob = nullptr;
};
// Called once per generated token, on the generating thread. A callback that blocks applies
// backpressure (generation waits); one that throws fails the request with ErrorCode::kCallback.
using TokenCallback = std::function<void(const TokenEvent&)>;

enum class StopReason { kEos, kStopId, kStopString, kLength, kCancelled, kConstraintComplete };
const char* StopReasonName(StopReason r);

struct ToolCall {
  std::string name;
  nlohmann::json arguments;
};

struct TokenLogprob {
  int32_t id;
  double logprob;
  std::vector<std::pair<int32_t, double>> top;  // alternatives, most likely first
};

struct Telemetry {
  std::string backend;
  double load_ms = 0;  // engine load (model mapping and validation)
  int prompt_tokens = 0;
  int reused_tokens = 0;  // prompt tokens served from the cache
  int images = 0;          // images in the prompt
  int images_encoded = 0;  // of them, run through the vision tower (the others were reused)
  double vision_ms = 0;    // the vision tower
  int audios = 0;          // audio clips in the prompt
  int audios_encoded = 0;  // of them, run through the audio tower (the others were reused)
  double audio_ms = 0;     // the audio tower
  double media_ms = 0;     // decoding and preprocessing the images, video frames and audio
                           // (log-mel features) of the prompt, before the towers
  double ttft_ms = 0;      // request start (before tokenizing and media decoding) -> first token
  double prefill_ms = 0;
  std::vector<double> token_ms;              // per generated token, decode step + sampling
  double itl_median_ms = 0, itl_p95_ms = 0;  // inter-token latency
  double tpot_ms = 0;                        // mean time per output token after the first
  double total_ms = 0;
  double decode_tok_s = 0;    // (tokens - 1) / decode time
  double overall_tok_s = 0;   // tokens / total time
  size_t resident_bytes = 0;  // process RSS at the end
  // Speculative decoding: verification steps, tokens drafted and of them accepted.
  int verify_steps = 0, drafted = 0, accepted = 0;
  double draft_ms = 0;         // of the decode time, in the draft model or the custom drafter
  int jump_forward_steps = 0;  // of the verification steps, those over a constraint's forced text
  // Batched decode: steps evaluated together with other sessions' steps, and the largest batch.
  int batched_steps = 0, max_batch = 0;
};

struct Result {
  std::string text;       // display text: reasoning, tool-call blocks and stop strings removed
  std::string raw_text;   // everything generated, special tokens included
  std::string reasoning;  // the reasoning channel's content
  std::vector<ToolCall> tool_calls;
  std::vector<std::string> parse_errors;  // malformed tool-call / channel blocks, verbatim
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;  // when requested
  StopReason stop_reason = StopReason::kLength;
  nlohmann::json resolved_config;  // every decoding option as used, incl. the seed
  Telemetry telemetry;
};

// The chat template that renders messages. The engine always renders the built-in Gemma 4
// canonical template natively (it does not evaluate Jinja); this says how the checkpoint's own
// template (chat_template.jinja, chat_template.json or tokenizer_config.json's chat_template)
// compares with the built-in one's Jinja source, trailing whitespace aside.
struct ChatTemplateInfo {
  enum class Repository { kNone, kIdentical, kDifferent };
  Repository repository = Repository::kNone;
  std::string repository_file;    // the file the repository's template was read from
  std::string repository_sha256;  // SHA-256 (hex) of the repository template's text
  std::string builtin_sha256;     // SHA-256 (hex) of the built-in template's Jinja source
  // One line: "repository template, identical to the built-in (chat_template.jinja)", "the
  // built-in Gemma 4 template is used instead of the repository's chat_template.jinja (...)", or
  // "the built-in Gemma 4 template (the repository has none)".
  std::string Describe() const;
  nlohmann::json ToJson() const;
  // Reads the template files beside a checkpoint (a directory or a .safetensors file) without
  // loading it. Error(kConfig) naming the file for a chat_template.json or tokenizer_config.json
  // that is not readable JSON.
  static ChatTemplateInfo Read(const std::string& model_path);
};

class Session;

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  static std::shared_ptr<Engine> Load(const EngineOptions& options);
  virtual ~Engine() = default;
  virtual std::unique_ptr<Session> NewSession() = 0;
  virtual bool has_tokenizer() const = 0;
  virtual int context_capacity() const = 0;
  virtual std::string backend_name() const = 0;
  // The GPU the backend runs on ("" for the CPU backends), and whether it is a CPU-type Vulkan
  // device such as Mesa's lavapipe (far slower than the "cpu" backend: worth a warning).
  virtual std::string backend_device() const = 0;
  virtual bool backend_device_is_cpu() const = 0;
  virtual double load_ms() const = 0;
  virtual int vocab_size() const = 0;
  // Whether a draft model was loaded (EngineOptions::draft_model_path).
  virtual bool has_draft_model() const = 0;
  // Whether the model has a vision tower (image and video input) and an audio tower (audio input).
  virtual bool has_vision() const = 0;
  virtual bool has_audio() const = 0;
  // Bytes the backend holds once for all sessions (weight copies, device weights; the draft
  // model's included).
  virtual size_t shared_bytes() const = 0;
  // Device-local memory (GPU memory) the engine and all its sessions hold now; 0 on the CPU
  // backends.
  virtual size_t device_memory_bytes() const = 0;
  // Text <-> ids with the engine's tokenizer (Error(kTokenizer) without one).
  virtual std::vector<int32_t> Tokenize(std::string_view text) const = 0;
  virtual std::string Detokenize(const std::vector<int32_t>& ids) const = 0;
  // The prompt a request would evaluate (template rendered and tokenized), without running it.
  virtual std::vector<int32_t> PromptTokens(const Input& input) const = 0;
  // GenerateOptions with the checkpoint's published sampling defaults (generation_config.json:
  // temperature, top-k, top-p, min-p, typical-p, repetition penalty, max_new_tokens; do_sample
  // false means greedy) applied over the library's defaults (greedy). Start from these to decode as
  // the model card says unless the request says otherwise; Generate itself never applies them.
  virtual GenerateOptions DefaultGenerateOptions() const = 0;
  // Which chat template renders messages (read at load).
  virtual ChatTemplateInfo chat_template_info() const = 0;
  // The rendered prompt text of a request (messages through the chat template; text as given,
  // with "<bos>" when add_bos); Error(kInvalidArgument) for token-id input.
  virtual std::string PromptText(const Input& input) const = 0;
};

// Scores of given tokens (Session::Score).
struct ScoreResult {
  // logprobs[i] = log p(tokens[i + 1] | tokens[0..i]) under the full softmax of the model's
  // logits (after the final softcap): tokens.size() - 1 entries.
  std::vector<double> logprobs;
  std::vector<float> logits;  // with return_logits: [tokens.size()][vocab_size], every position
  double total_ms = 0;
};

class Session {
 public:
  virtual ~Session() = default;
  virtual Result Generate(const Input& input, const GenerateOptions& options,
                          const TokenCallback& on_token = {}, std::stop_token stop = {}) = 0;
  // Evaluates `tokens` from the start of a fresh context (the session's caches then hold them, so
  // a following Generate reuses them as a prefix) and scores every next token. At least 2 tokens;
  // Error(kCancelled) when stopped (the session keeps what was fully evaluated).
  virtual ScoreResult Score(const std::vector<int32_t>& tokens, bool return_logits = false,
                            std::stop_token stop = {}) = 0;
  // Score for a request's prompt (images included): the prompt ids as PromptTokens gives them.
  virtual ScoreResult ScoreInput(const Input& input, bool return_logits = false,
                                 std::stop_token stop = {}) = 0;
  virtual void Reset() = 0;
  // Tokens whose K/V are in the caches, oldest first.
  virtual const std::vector<int32_t>& evaluated() const = 0;
};

}  // namespace gemma
