// Engine: loads the checkpoint, the tokenizer and the backend model once; renders and tokenizes
// prompts; compiles constraints. Sessions (session.cc) share all of it.
#include "gemma/engine.h"

#include <algorithm>
#include <filesystem>
#include <thread>

#include "backend/cache_window.h"
#include "chat/chat_template.h"
#include "constrain/vocabulary.h"
#include "core/memory.h"
#include "core/timer.h"
#include "format/generation_config.h"
#include "gemma/text.h"
#include "media/audio.h"
#include "media/audio_features.h"
#include "media/image.h"
#include "media/video.h"
#include "runtime/backend_factory.h"
#include "runtime/engine_impl.h"
#include "runtime/fault_injection.h"
#include "runtime/step_batcher.h"

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
  model_ = Model::Load(options.model_path, options.mmap);
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
  template_info_ = ChatTemplateInfo::Read(options.model_path);
  capacity_ = std::min(options.context_capacity, model_->text().max_position_embeddings);
  if (capacity_ <= 0) throw Error(ErrorCode::kInvalidArgument, "context_capacity must be positive");
  if (options.max_batch < 1 || options.max_batch > 256)
    throw Error(ErrorCode::kInvalidArgument, "max_batch must be in 1..256");
  // A CPU context that could not grow to its capacity on this machine is refused now, naming the
  // bytes, instead of being killed for memory in the middle of a long prefill.
  // (with a draft model, a drafting session holds a context of it too: loaded first, checked
  // together)
  if (!options.draft_model_path.empty()) LoadDraftModel(options, tok);
  host_memory_checks_ = options.backend == "cpu" || options.backend == "cpu-ref";
  if (host_memory_checks_) CheckHostMemory(options);
  // The backend model holds the weights once; its first context is made now so a bad backend
  // name or a missing device fails at load time, and the first session takes it.
  BackendStart start = StartBackend(
      {.name = options.backend,
       .threads = options.threads,
       .device_index = options.device_index,
       .device_memory_limit = options.device_memory_limit,
       .device_step_timeout_s = options.device_step_timeout_s},
      *model_, {.capacity = capacity_});
  backend_model_ = std::move(start.model);
  first_context_ = std::move(start.context);
  backend_name_ = first_context_->name();
  if (draft_model_) StartDraftBackend(options);
  if (options.max_batch > 1 && backend_model_->batches_steps())
    batcher_ = std::make_unique<StepBatcher>(*backend_model_, options.max_batch);
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

void EngineImpl::LoadDraftModel(const EngineOptions& options, const std::string& tokenizer_path) {
  const std::string& path = options.draft_model_path;
  draft_model_ = Model::Load(path, options.mmap);
  const int vocab = model_->text().vocab_size, draft_vocab = draft_model_->text().vocab_size;
  if (draft_vocab != vocab) {
    throw Error(ErrorCode::kConfig, "draft model " + path + " has a vocabulary of " +
                                        std::to_string(draft_vocab) + " ids, the model " +
                                        std::to_string(vocab) + ": drafts must use the same ids");
  }
  // Where both have a tokenizer, the ids must mean the same text.
  std::error_code ec;
  const fs::path dir = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
  if (tokenizer_ && fs::exists(dir / "tokenizer.json") &&
      fs::weakly_canonical(dir / "tokenizer.json", ec) !=
          fs::weakly_canonical(tokenizer_path, ec)) {
    const Tokenizer draft_tok = Tokenizer::FromFile((dir / "tokenizer.json").string());
    const int n = std::max(draft_tok.vocab_size(), tokenizer_->vocab_size());
    for (int id = 0; id < n; ++id) {
      if (id >= draft_tok.vocab_size() || id >= tokenizer_->vocab_size() ||
          draft_tok.TokenBytes(id) != tokenizer_->TokenBytes(id) ||
          draft_tok.IsSpecial(id) != tokenizer_->IsSpecial(id)) {
        throw Error(ErrorCode::kConfig, "draft model " + path +
                                            ": its tokenizer differs from the model's at id " +
                                            std::to_string(id));
      }
    }
  }
}

void EngineImpl::StartDraftBackend(const EngineOptions& options) {
  // The backend the model runs on ("auto" resolved), with the same threads and device.
  std::string backend = options.backend;
  if (backend == "auto") backend = backend_name_ == "vulkan" ? "vulkan" : "cpu";
  BackendStart start = StartBackend({.name = backend,
                                     .threads = options.threads,
                                     .device_index = options.device_index,
                                     .device_memory_limit = options.device_memory_limit,
                                     .device_step_timeout_s = options.device_step_timeout_s},
                                    *draft_model_, {.capacity = std::min(capacity_, 16)});
  draft_backend_ = std::move(start.model);
  if (options.max_batch > 1 && draft_backend_->batches_steps())
    draft_batcher_ = std::make_unique<StepBatcher>(*draft_backend_, options.max_batch);
}

std::unique_ptr<Backend> EngineImpl::NewDraftContext(int capacity) const {
  if (!draft_backend_) {
    throw Error(ErrorCode::kInvalidArgument,
                "speculative mode draft_model: the engine has no draft model "
                "(EngineOptions::draft_model_path)");
  }
  return draft_backend_->NewContext({.capacity = DraftCapacity(capacity)});
}

int EngineImpl::DraftCapacity(int capacity) const {
  return draft_model_ ? std::min(capacity, draft_model_->text().max_position_embeddings) : 0;
}

void EngineImpl::CheckHostMemory(const EngineOptions& options) const {
  const size_t available = AvailableMemoryBytes();
  if (!available) return;  // unknown here: nothing to compare with
  const int threads = options.threads > 0
                          ? options.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto draft = [&](int capacity) {
    if (!draft_model_) return size_t{0};
    const int c = DraftCapacity(capacity);
    const CpuContextBytes d = PlanCpuContextBytes(*draft_model_, {.capacity = c}, c, threads);
    return d.kv + d.scratch;
  };
  auto need = [&](int capacity) {
    const CpuContextBytes b =
        PlanCpuContextBytes(*model_, {.capacity = capacity}, capacity, threads);
    return b.kv + b.scratch + draft(capacity);
  };
  const size_t want = need(capacity_);
  if (want <= available) return;
  int lo = 0, hi = capacity_;  // the largest capacity that fits: need() grows with capacity
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (need(mid) <= available)
      lo = mid;
    else
      hi = mid - 1;
  }
  const CpuContextBytes b =
      PlanCpuContextBytes(*model_, {.capacity = capacity_}, capacity_, threads);
  throw Error(ErrorCode::kCapacity,
              "a session of " + std::to_string(capacity_) + " tokens needs " +
                  std::to_string(want) + " bytes (" + FormatBytes(static_cast<double>(want)) +
                  ": K/V caches " + FormatBytes(static_cast<double>(b.kv)) +
                  ", attention scratch " + FormatBytes(static_cast<double>(b.scratch)) +
                  (draft_model_ ? ", the draft model's context " +
                                      FormatBytes(static_cast<double>(draft(capacity_)))
                                : std::string()) +
                  ") but " + std::to_string(available) + " bytes (" +
                  FormatBytes(static_cast<double>(available)) +
                  ") are available; lower the context capacity to at most " + std::to_string(lo) +
                  " tokens");
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

// A media part's content: a file (its path, else a file:// URL), else base64 bytes, else a data:
// URL; `needs` is the error when there is none.
void SourceOf(std::string path, const std::string& b64, std::string url, const std::string& at,
              const char* needs, std::string* file, std::vector<uint8_t>* bytes) {
  if (path.rfind("file://", 0) == 0) path = path.substr(7);
  if (path.empty() && url.rfind("file://", 0) == 0) path = url.substr(7), url.clear();
  if (!path.empty()) {
    *file = path;
  } else if (!b64.empty()) {
    *bytes = media::DecodeBase64(b64, at + ".bytes");
  } else if (!url.empty()) {
    *bytes = media::DecodeDataUrl(url, at + ".url");
  } else {
    throw Error(ErrorCode::kInvalidArgument, at + ": " + needs);
  }
}

// The image, video and audio content parts of messages, in order.
struct MediaParts {
  std::vector<ImageInput> images;
  std::vector<VideoInput> videos;
  std::vector<AudioInput> audios;
};

MediaParts CollectMediaParts(const nlohmann::json& messages) {
  MediaParts media;
  std::vector<ImageInput>& out = media.images;
  if (!messages.is_array()) return media;
  for (size_t i = 0; i < messages.size(); ++i) {
    const nlohmann::json& m = messages[i];
    if (!m.is_object() || !m.contains("content") || !m["content"].is_array()) continue;
    for (size_t k = 0; k < m["content"].size(); ++k) {
      const nlohmann::json& part = m["content"][k];
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) continue;
      const std::string type = part["type"];
      const std::string at = "messages[" + std::to_string(i) + "].content[" + std::to_string(k) + "]";
      // A string field of j (the part, or its object `in`), "" when absent; any other type is
      // an error.
      auto str = [&](const nlohmann::json& j, const char* key, const char* in = "") -> std::string {
        if (!j.contains(key)) return "";
        if (!j[key].is_string())
          throw Error(ErrorCode::kInvalidArgument,
                      at + (*in ? std::string(".") + in : "") + "." + key + ": must be a string");
        return j[key].get<std::string>();
      };
      // An integer field of the part into *out where present (a budget, a frame count); any other
      // type or a value outside [0, 2^20] is an error (their ranges are checked where they are
      // used; this keeps a huge value from wrapping into a valid int).
      auto integer = [&](const char* key, int* out) {
        if (!part.contains(key)) return;
        const nlohmann::json& n = part[key];
        if (!n.is_number_integer() || n.get<int64_t>() < 0 || n.get<int64_t>() > (1 << 20))
          throw Error(ErrorCode::kInvalidArgument,
                      at + "." + key + ": must be an integer in [0, 1048576]");
        *out = n.get<int>();
      };
      if (chat::IsAudioPart(type)) {
        AudioInput a;
        std::string path = str(part, "path"), b64 = str(part, "bytes"), url = str(part, "url");
        if (type == "input_audio") {  // OpenAI: {"input_audio": {"data": BASE64, "format": "wav"}}
          if (!part.contains("input_audio") || !part["input_audio"].is_object())
            throw Error(ErrorCode::kInvalidArgument,
                        at + ": an input_audio part needs \"input_audio\": {\"data\": ...}");
          b64 = str(part["input_audio"], "data", "input_audio");
        } else if (type == "audio_url") {  // vLLM's shape: {"audio_url": {"url": "data:..."}}
          const nlohmann::json* au = part.contains("audio_url") ? &part["audio_url"] : nullptr;
          if (au && au->is_object())
            url = str(*au, "url", "audio_url");
          else if (au && au->is_string()) url = au->get<std::string>();
          if (url.empty())
            throw Error(ErrorCode::kInvalidArgument,
                        at + ": an audio_url part needs \"audio_url\": {\"url\": ...}");
        } else if (part.contains("audio") && part["audio"].is_string()) {
          path = part["audio"].get<std::string>();
        }
        SourceOf(path, b64, url, at,
                 "an audio part needs \"path\", \"bytes\" (base64) or \"url\" (a data URL)",
                 &a.path, &a.bytes);
        media.audios.push_back(std::move(a));
        continue;
      }
      if (chat::IsVideoPart(type)) {
        // {"path" | "video": FILE}, {"url": FILE | file:// | data:...}, {"bytes": BASE64}, or
        // vLLM's {"type": "video_url", "video_url": {"url": ...}}.
        VideoInput v;
        std::string path = str(part, "path"), url = str(part, "url"), b64 = str(part, "bytes");
        if (path.empty()) path = str(part, "video");
        if (part.contains("video_url")) {
          const nlohmann::json& vu = part["video_url"];
          if (vu.is_string()) {
            url = vu.get<std::string>();
          } else if (vu.is_object()) {
            url = str(vu, "url", "video_url");
          } else {
            throw Error(ErrorCode::kInvalidArgument,
                        at + ".video_url: must be a URL string or {\"url\": ...}");
          }
        }
        // (a video's "url" may name a file)
        if (path.empty() && !url.empty() && url.rfind("data:", 0) != 0) path = url, url.clear();
        if (path.find("://") != std::string::npos && path.rfind("file://", 0) != 0) {
          throw Error(ErrorCode::kInvalidArgument,
                      at + ": remote video URLs are not fetched (a local file, a data: URL or "
                           "base64 \"bytes\")");
        }
        SourceOf(path, b64, url, at,
                 "a video part needs \"path\", \"url\" (a file or a data URL) or \"bytes\" "
                 "(base64)",
                 &v.path, &v.bytes);
        integer("budget", &v.budget);
        integer("max_frames", &v.max_frames);
        if (part.contains("fps")) {
          if (!part["fps"].is_number())
            throw Error(ErrorCode::kInvalidArgument, at + ".fps: must be a number");
          v.fps = part["fps"].get<double>();
        }
        media.videos.push_back(std::move(v));
        continue;
      }
      if (!chat::IsImagePart(type)) continue;
      ImageInput img;
      std::string url = str(part, "url");
      if (part.contains("image_url")) {
        const nlohmann::json& iu = part["image_url"];
        url = iu.is_string()   ? iu.get<std::string>()
              : iu.is_object() ? str(iu, "url", "image_url")
                               : "";
      }
      const std::string path = !str(part, "path").empty() ? str(part, "path") : str(part, "image");
      const std::string b64 = str(part, "bytes");
      SourceOf(path, b64, url, at,
               "an image part needs \"path\", \"url\" (a data URL) or \"bytes\" (base64)",
               &img.path, &img.bytes);
      integer("budget", &img.budget);
      out.push_back(std::move(img));
    }
  }
  return media;
}

std::string RenderMessages(const Input& in) {
  CollectMediaParts(*in.messages);  // refuses bad media parts before rendering
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

std::vector<int32_t> EngineImpl::PromptTokens(const Input& in) const { return Prepare(in).ids; }

PreparedPrompt EngineImpl::Prepare(const Input& in) const {
  Timer timer;
  PreparedPrompt out;
  std::vector<ImageInput> images = in.images;
  std::vector<VideoInput> videos = in.videos;
  std::vector<AudioInput> audios = in.audios;
  if (in.messages) {
    if (!in.images.empty() || !in.videos.empty() || !in.audios.empty()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "the images, videos and audio of a messages request go in its content parts");
    }
    MediaParts parts = CollectMediaParts(*in.messages);
    images = std::move(parts.images);
    videos = std::move(parts.videos);
    audios = std::move(parts.audios);
  }
  const ModelConfig& mc = model_->config();
  const int image_id = mc.image_token_id, video_id = mc.video_token_id;
  const int audio_id = model_->audio() ? mc.audio_token_id : -1;
  if (images.empty() && videos.empty() && audios.empty()) {
    out.ids = RawPromptTokens(in);
    for (int32_t id : out.ids) {
      if ((id == image_id && image_id >= 0) || (id == video_id && video_id >= 0) ||
          (id == mc.audio_token_id && mc.audio_token_id >= 0 && mc.multimodal_wrapper)) {
        throw Error(ErrorCode::kInvalidArgument,
                    "the prompt has image, video or audio placeholder tokens (id " +
                        std::to_string(id) + ") but no images, videos or audio");
      }
    }
    return out;
  }
  // Audio clips: decoded, resampled, log-mel features in 30 s chunks.
  std::vector<PreparedImage> audio_items;
  if (!audios.empty() && (!model_->audio() || mc.audio_token_id < 0)) {
    throw Error(ErrorCode::kUnsupported, "this model cannot hear: " + model_->audio_error());
  }
  for (size_t i = 0; i < audios.size(); ++i) {
    const AudioInput& a = audios[i];
    const std::string origin = a.path.empty() ? "audio " + std::to_string(i + 1) : a.path;
    const media::Audio decoded =
        a.path.empty() ? media::DecodeAudio(a.bytes, origin) : media::LoadAudioFile(a.path);
    auto prepared =
        std::make_shared<media::PreparedAudio>(media::PrepareAudio(decoded.samples, origin));
    PreparedImage p;
    p.patched.soft_tokens = prepared->soft_tokens;
    p.patched.digest = prepared->digest;
    p.audio = std::move(prepared);
    audio_items.push_back(std::move(p));
  }
  const VisionTower* tower = model_->vision();
  if ((!images.empty() || !videos.empty()) && (!tower || image_id < 0)) {
    throw Error(ErrorCode::kUnsupported,
                "this model cannot read images: " + (tower ? std::string("no image token id in config.json")
                                                           : model_->vision_error()));
  }
  const VisionConfig vc = tower ? tower->config : VisionConfig{};
  auto prepare = [&](const media::Image& decoded, int budget, const std::string& origin) {
    if (!media::IsVisionBudget(budget)) {
      throw Error(ErrorCode::kInvalidArgument, origin + ": vision budget " + std::to_string(budget) +
                                                   " is not one of 70, 140, 280, 560, 1120");
    }
    PreparedImage p;
    p.patched = media::PreprocessImage(decoded, budget, vc.patch_size, vc.pooling_kernel_size);
    return p;
  };
  std::vector<PreparedImage> image_items, frame_items;
  for (size_t i = 0; i < images.size(); ++i) {
    const ImageInput& im = images[i];
    const std::string origin = im.path.empty() ? "image " + std::to_string(i + 1) : im.path;
    const media::Image decoded = im.path.empty() ? media::DecodeImage(im.bytes, origin)
                                                 : media::LoadImageFile(im.path);
    image_items.push_back(prepare(decoded, im.budget > 0 ? im.budget : in.vision_budget, origin));
  }
  // Each video's frames, and the text that replaces its placeholder (text and messages input).
  std::vector<std::string> video_text;
  for (size_t i = 0; i < videos.size(); ++i) {
    const VideoInput& v = videos[i];
    if (video_id < 0) throw Error(ErrorCode::kUnsupported, "this model has no video token id");
    const std::string origin = v.path.empty() ? "video " + std::to_string(i + 1) : v.path;
    const media::VideoOptions vo{.fps = v.fps, .max_frames = v.max_frames};
    const media::VideoFrames f = v.path.empty() ? media::DecodeVideoBytes(v.bytes, origin, vo)
                                                : media::DecodeVideo(v.path, vo);
    std::string text;
    for (size_t k = 0; k < f.frames.size(); ++k) {
      frame_items.push_back(prepare(f.frames[k], v.budget, origin));
      if (!in.token_ids) {
        const Tokenizer& tok = tokenizer();
        if (k > 0) text += " ";
        text += media::VideoTimestamp(f.timestamps[k]) + " " + tok.TokenBytes(mc.boi_token_id);
        for (int n = 0; n < frame_items.back().patched.soft_tokens; ++n)
          text += tok.TokenBytes(video_id);
        text += tok.TokenBytes(mc.eoi_token_id);
      }
    }
    video_text.push_back(std::move(text));
  }
  std::vector<int32_t> ids;
  if (in.token_ids || videos.empty()) {
    ids = RawPromptTokens(in);
  } else {
    // Gemma4Processor replaces each "<|video|>" in the prompt text before tokenizing.
    const std::string placeholder = tokenizer().TokenBytes(video_id);
    ids = RawPromptTokens(in, [&](const std::string& text) {
      std::string outt;
      size_t pos = 0, k = 0;
      for (size_t at; (at = text.find(placeholder, pos)) != std::string::npos; pos = at + placeholder.size()) {
        if (k >= video_text.size()) {
          throw Error(ErrorCode::kInvalidArgument,
                      "the prompt has more video placeholders than videos (" +
                          std::to_string(video_text.size()) + ")");
        }
        outt.append(text, pos, at - pos);
        outt += video_text[k++];
      }
      outt.append(text, pos);
      if (k != video_text.size()) {
        throw Error(ErrorCode::kInvalidArgument,
                    "the prompt has " + std::to_string(k) + " video placeholder(s) but " +
                        std::to_string(video_text.size()) + " video(s) were given");
      }
      return outt;
    });
  }
  if (!in.token_ids) {
    // Each <|image|> becomes <|image>, the image's soft tokens, <image|>.
    size_t placeholders = std::count(ids.begin(), ids.end(), image_id);
    if (placeholders != image_items.size()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "the prompt has " + std::to_string(placeholders) + " image placeholder(s) but " +
                      std::to_string(image_items.size()) + " image(s) were given");
    }
    std::vector<int32_t> expanded;
    size_t k = 0;
    for (int32_t id : ids) {
      if (id != image_id) {
        expanded.push_back(id);
        continue;
      }
      expanded.push_back(mc.boi_token_id);
      expanded.insert(expanded.end(), image_items[k++].patched.soft_tokens, image_id);
      expanded.push_back(mc.eoi_token_id);
    }
    ids = std::move(expanded);
    // Each <|audio|> becomes <|audio>, the clip's soft tokens, <audio|>.
    if (audio_id >= 0) {
      const size_t audio_placeholders = std::count(ids.begin(), ids.end(), audio_id);
      if (audio_placeholders != audio_items.size()) {
        throw Error(ErrorCode::kInvalidArgument,
                    "the prompt has " + std::to_string(audio_placeholders) +
                        " audio placeholder(s) but " + std::to_string(audio_items.size()) +
                        " audio clip(s) were given");
      }
      std::vector<int32_t> with_audio;
      size_t a = 0;
      for (int32_t id : ids) {
        if (id != audio_id) {
          with_audio.push_back(id);
          continue;
        }
        with_audio.push_back(mc.boa_token_id);
        with_audio.insert(with_audio.end(), audio_items[a++].patched.soft_tokens, audio_id);
        with_audio.push_back(mc.eoa_token_id);
      }
      ids = std::move(with_audio);
    }
  }
  // Every maximal run of image ids is the next image, every run of video ids the next frame,
  // every run of audio ids the next clip.
  size_t next_image = 0, next_frame = 0, next_audio = 0;
  for (size_t i = 0; i < ids.size();) {
    const bool is_image = ids[i] == image_id, is_video = video_id >= 0 && ids[i] == video_id;
    const bool is_audio = audio_id >= 0 && ids[i] == audio_id;
    if (!is_image && !is_video && !is_audio) {
      ++i;
      continue;
    }
    size_t e = i;
    while (e < ids.size() && ids[e] == ids[i]) ++e;
    std::vector<PreparedImage>& items = is_image   ? image_items
                                        : is_video ? frame_items
                                                   : audio_items;
    size_t& next = is_image ? next_image : is_video ? next_frame : next_audio;
    const char* what = is_image ? "image" : is_video ? "video frame" : "audio clip";
    if (next >= items.size()) {
      throw Error(ErrorCode::kInvalidArgument,
                  std::string("the prompt has more ") + what + " placeholder runs than " + what +
                      "s (" + std::to_string(items.size()) + ")");
    }
    const int want = items[next].patched.soft_tokens;
    if (static_cast<int>(e - i) != want) {
      throw Error(ErrorCode::kInvalidArgument,
                  std::string(what) + " " + std::to_string(next + 1) + " has " +
                      std::to_string(want) + " soft tokens but its run of placeholder ids has " +
                      std::to_string(e - i));
    }
    items[next].begin = static_cast<int>(i);
    out.images.push_back(std::move(items[next++]));
    i = e;
  }
  if (next_audio != audio_items.size()) {
    throw Error(ErrorCode::kInvalidArgument,
                "the prompt has " + std::to_string(next_audio) + " audio placeholder runs for " +
                    std::to_string(audio_items.size()) + " audio clip(s)");
  }
  if (next_image != image_items.size() || next_frame != frame_items.size()) {
    throw Error(ErrorCode::kInvalidArgument,
                "the prompt has " + std::to_string(next_image) + " image and " +
                    std::to_string(next_frame) + " video-frame placeholder runs for " +
                    std::to_string(image_items.size()) + " image(s) and " +
                    std::to_string(frame_items.size()) + " video frame(s)");
  }
  for (int32_t id : ids) {
    if (id < 0 || id >= model_->text().vocab_size) {
      throw Error(ErrorCode::kInvalidArgument,
                  "prompt token id " + std::to_string(id) + " outside the vocabulary");
    }
  }
  out.ids = std::move(ids);
  out.prepare_ms = timer.Ms();
  return out;
}

std::vector<int32_t> EngineImpl::RawPromptTokens(
    const Input& in, const std::function<std::string(const std::string&)>& rewrite) const {
  if (CountInputs(in) != 1) {
    throw Error(ErrorCode::kInvalidArgument, "input needs exactly one of text, token_ids, messages");
  }
  std::vector<int32_t> ids;
  if (in.token_ids) {
    ids = *in.token_ids;
  } else if (in.text) {
    if (in.add_bos) ids.push_back(model_->text().bos_token_id);
    tokenizer().EncodeTo(rewrite ? rewrite(*in.text) : *in.text, &ids);
  } else {
    const std::string rendered = RenderMessages(in);  // input errors before a missing tokenizer
    ids = tokenizer().Encode(rewrite ? rewrite(rendered) : rendered);
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

bool InjectDeviceFault(Engine& engine, DeviceFault fault) {
  auto* impl = dynamic_cast<EngineImpl*>(&engine);
  return impl && impl->backend_model().InjectDeviceFault(fault);
}

HeadQuantization EngineHeadQuantization(const Engine& engine) {
  const auto* impl = dynamic_cast<const EngineImpl*>(&engine);
  if (!impl) return {};
  const Model& m = impl->model();
  return {.quantum = m.lm_head().out_scale,
          .softcap = m.text().final_logit_softcapping.value_or(0.0f)};
}

std::shared_ptr<Engine> Engine::Load(const EngineOptions& options) {
  return std::make_shared<EngineImpl>(options);
}

}  // namespace gemma
