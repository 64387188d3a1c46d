#include "soak/soak.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <stop_token>
#include <thread>
#include <vector>

#include "core/timer.h"
#include "gemma/engine.h"
#include "gemma/error.h"
#include "media/image.h"  // EncodeBase64
#include "model/model.h"  // UncappedLogit
#include "runtime/fault_injection.h"
#include "soak/watchdog.h"

#if GEMMA_HAVE_RE2
#include <re2/re2.h>
#endif

namespace gemma::soak {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// A failed check: what was expected and what came instead (goes into the reproducer).
struct Failure {
  std::string what;
  json details;
};

[[noreturn]] void Fail(const std::string& what, json details = json::object()) {
  throw Failure{what, std::move(details)};
}

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Profile {
  int golden_tokens;    // greedy tokens per golden
  int pool_sessions;    // sessions kept alive between steps
  int concurrent;       // threads in the concurrent scenario
  int context;          // engine context capacity
  int constrained_max;  // max_new_tokens of constrained requests
  int reload_weight;    // relative frequency of engine_reload
};

Profile GetProfile(const std::string& name) {
  if (name == "smoke") return {12, 3, 3, 1024, 64, 1};
  if (name == "full") return {32, 8, 4, 4096, 96, 1};
  throw Error(ErrorCode::kInvalidArgument, "soak --profile: smoke or full, not '" + name + "'");
}

// Prompts of the golden and cancellation scenarios (user messages; the tiny model answers them
// in English about Debian, the E2B-width checkpoints with noise: the goldens hold either way).
const std::vector<std::string>& Prompts() {
  static const std::vector<std::string> p = {
      "Hello! Who are you?",
      "What is Debian?",
      "How do I install a package with apt?",
      "Explain what a shell script is.",
      "What does the command ls -l show?",
      "Write one sentence about free software.",
      "What is Python used for?",
      "How can I see which services are running?",
      "Tell me about the Linux kernel in two sentences.",
      "What is a man page?",
  };
  return p;
}

json UserMessages(const std::string& text) {
  return json::array({{{"role", "user"}, {"content", text}}});
}

const std::vector<std::string>& Regexes() {
  static const std::vector<std::string> r = {
      "(yes|no|maybe)",
      "[0-9]{1,4}-[0-9]{2}",
      "[A-Z][a-z]{1,8}( [a-z]{1,8}){0,4}\\.",
      "(apt|dpkg|snap) (install|remove) [a-z]{2,10}",
      "\\d{3}\\.\\d{1,3}",
      "[a-z_]{1,12}\\(\\)",
  };
  return r;
}

const std::vector<std::string>& Schemas() {
  static const std::vector<std::string> s = {
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},)"
      R"("age":{"type":"integer","minimum":0,"maximum":150}},"required":["name","age"],)"
      R"("additionalProperties":false})",
      R"({"type":"array","items":{"enum":["apt","dpkg","snap",1,2,null]},"minItems":1,"maxItems":4})",
      R"({"type":"object","properties":{"ok":{"type":"boolean"},"tags":{"type":"array",)"
      R"("items":{"type":"string","maxLength":6},"maxItems":3}},"required":["ok"],)"
      R"("additionalProperties":false})",
      R"({"anyOf":[{"type":"integer","minimum":-5,"maximum":5},{"enum":["none","all"]}]})",
  };
  return s;
}

json Tools() {
  return json::parse(R"([
    {"type":"function","function":{"name":"get_weather","description":"Weather in a city",
      "parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":16},
        "unit":{"enum":["celsius","fahrenheit"]}},"required":["city"],"additionalProperties":false}}},
    {"type":"function","function":{"name":"add","description":"Adds two numbers",
      "parameters":{"type":"object","properties":{"a":{"type":"integer","minimum":0,"maximum":999},
        "b":{"type":"integer","minimum":0,"maximum":999}},"required":["a","b"],
        "additionalProperties":false}}}])");
}

// Media made here, deterministic: a 24-bit BMP of bands, a disc and seeded noise, and a 16 kHz
// mono PCM WAV of a tone sweep with seeded noise (the engine's decoders read both).
void PutLittleEndian(std::vector<uint8_t>& b, size_t at, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

std::vector<uint8_t> Bmp(int w, int h, uint32_t seed) {
  const int stride = (w * 3 + 3) / 4 * 4;
  const uint32_t size = 54 + static_cast<uint32_t>(stride) * h;
  std::vector<uint8_t> b(size, 0);
  const auto put = [&b](size_t at, uint32_t v, int bytes) { PutLittleEndian(b, at, v, bytes); };
  b[0] = 'B', b[1] = 'M';
  put(2, size, 4), put(10, 54, 4), put(14, 40, 4), put(18, w, 4), put(22, h, 4);
  put(26, 1, 2), put(28, 24, 2), put(34, size - 54, 4);
  std::mt19937 rng(seed);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const int dx = x - w / 2, dy = y - h / 2;
      const bool disc = dx * dx + dy * dy < (std::min(w, h) / 3) * (std::min(w, h) / 3);
      uint8_t* px = &b[54 + static_cast<size_t>(h - 1 - y) * stride + x * 3];  // bottom-up, BGR
      px[0] = static_cast<uint8_t>(disc ? 40 : (x * 255) / std::max(1, w - 1));
      px[1] = static_cast<uint8_t>(disc ? 200 : ((y / 8 + seed) % 2) * 180);
      px[2] = static_cast<uint8_t>(rng() % 256);
    }
  }
  return b;
}

std::vector<uint8_t> Wav(double seconds, double f0, uint32_t seed) {
  const uint32_t n = static_cast<uint32_t>(seconds * 16000);
  std::vector<uint8_t> b(44 + 2 * static_cast<size_t>(n), 0);
  const auto put = [&b](size_t at, uint32_t v, int bytes) { PutLittleEndian(b, at, v, bytes); };
  std::memcpy(&b[0], "RIFF", 4), put(4, 36 + 2 * n, 4), std::memcpy(&b[8], "WAVEfmt ", 8);
  put(16, 16, 4), put(20, 1, 2), put(22, 1, 2), put(24, 16000, 4), put(28, 32000, 4);
  put(32, 2, 2), put(34, 16, 2), std::memcpy(&b[36], "data", 4), put(40, 2 * n, 4);
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.05);
  double phase = 0;
  for (uint32_t i = 0; i < n; ++i) {
    phase += 2 * M_PI * f0 * (1.0 + i / static_cast<double>(n)) / 16000;  // up an octave
    const double v = 0.4 * std::sin(phase) + noise(rng);
    put(44 + 2 * static_cast<size_t>(i),
        static_cast<uint16_t>(static_cast<int16_t>(std::clamp(v, -1.0, 1.0) * 32767)), 2);
  }
  return b;
}

// The media scenario's requests: a user message with image and audio parts (base64 bytes), and
// the same media as Input lists (scoring a tie with token ids fills their runs in order).
struct MediaRequest {
  std::string name;
  json messages;
  std::vector<ImageInput> images;
  std::vector<AudioInput> audios;
};

const std::vector<MediaRequest>& MediaRequests() {
  static const std::vector<MediaRequest> requests = [] {
    struct Part {
      bool audio;
      std::vector<uint8_t> bytes;
      int budget;
    };
    auto make = [](std::string name, std::vector<Part> parts, const std::string& text) {
      MediaRequest r{std::move(name), json(), {}, {}};
      json content = json::array();
      for (Part& p : parts) {
        if (p.audio) {
          content.push_back({{"type", "audio"}, {"bytes", media::EncodeBase64(p.bytes)}});
          r.audios.push_back(AudioInput::Bytes(std::move(p.bytes)));
        } else {
          content.push_back(
              {{"type", "image"}, {"bytes", media::EncodeBase64(p.bytes)}, {"budget", p.budget}});
          r.images.push_back(ImageInput::Bytes(std::move(p.bytes), p.budget));
        }
      }
      content.push_back({{"type", "text"}, {"text", text}});
      r.messages = json::array({{{"role", "user"}, {"content", content}}});
      return r;
    };
    return std::vector<MediaRequest>{
        make("image", {{false, Bmp(96, 64, 1), 70}}, "Describe the image."),
        make("two_images", {{false, Bmp(40, 120, 2), 70}, {false, Bmp(64, 64, 3), 140}},
             "What differs between these pictures?"),
        make("audio", {{true, Wav(1.5, 220, 4), 0}}, "Transcribe the audio."),
        make("image_audio", {{false, Bmp(96, 64, 1), 70}, {true, Wav(0.8, 440, 5), 0}},
             "Does the sound fit the picture?"),
    };
  }();
  return requests;
}

// Validates JSON texts against schemas with AJV through node (tests/constrain/ajv_validate.js).
class AjvValidator {
 public:
  AjvValidator(std::string script, std::string modules, std::string tmp_dir)
      : script_(std::move(script)), modules_(std::move(modules)), tmp_(std::move(tmp_dir)) {
    available_ = !script_.empty() && fs::exists(script_) && fs::exists(modules_ + "/ajv") &&
                 std::system("node --version > /dev/null 2>&1") == 0;
  }
  bool available() const { return available_; }
  // "" when valid, else AJV's message.
  std::string Check(const json& schema, const std::string& text) {
    const std::string path = tmp_ + "/ajv_input.json";
    {
      std::ofstream f(path);
      f << json::array({{{"schema", schema}, {"outputs", json::array({text})}}}).dump();
    }
    const std::string cmd = "node '" + script_ + "' '" + modules_ + "' '" + path + "'";
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return "could not run node";
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    if (pclose(p) != 0) return "node failed: " + out;
    const json r = json::parse(out, nullptr, false);
    if (r.is_discarded()) return "unreadable AJV output: " + out;
    if (!r["ajv_rejected"].empty()) return "AJV rejected the schema: " + r["ajv_rejected"].dump();
    if (!r["failures"].empty()) return r["failures"][0]["errors"].get<std::string>();
    return "";
  }

 private:
  std::string script_, modules_, tmp_;
  bool available_ = false;
};

struct Golden {
  std::vector<int32_t> tokens;
  std::string stop;
};

class Soak {
 public:
  explicit Soak(const SoakOptions& o) : o_(o), prof_(GetProfile(o.profile)) {}

  json Run();

 private:
  void Log(const std::string& s) {
    if (o_.log) o_.log(s);
  }
  EngineOptions EngineOpts(const std::string& backend) const {
    return {.model_path = o_.model_path,
            .backend = backend,
            .context_capacity = prof_.context,
            .threads = o_.threads};
  }
  void LoadEngine() {
    pool_.clear();
    engine_.reset();
    EngineOptions eo = EngineOpts(o_.backend);
    if (o_.draft_model_path != "none")
      eo.draft_model_path = o_.draft_model_path.empty() ? o_.model_path : o_.draft_model_path;
    engine_ = Engine::Load(eo);
    for (int i = 0; i < prof_.pool_sessions; ++i) pool_.push_back(engine_->NewSession());
    has_device_ = !engine_->backend_device().empty();
  }
  GenerateOptions Greedy(int max_new) const {
    GenerateOptions g;
    g.max_new_tokens = max_new;
    return g;
  }
  // Speculative decoding drawn for a request (it must not change the output); its name for events.
  std::string DrawSpeculative(std::mt19937_64& rng, GenerateOptions* g) const {
    using Mode = SpeculativeOptions::Mode;
    const int pick = static_cast<int>(rng() % 3);
    g->speculative.max_draft = 1 + static_cast<int>(rng() % 6);
    if (pick == 1) {
      g->speculative.mode = Mode::kPromptLookup;
      return "prompt_lookup";
    }
    if (pick == 2 && engine_->has_draft_model()) {
      g->speculative.mode = Mode::kDraftModel;
      return "draft_model";
    }
    g->speculative.mode = Mode::kOff;
    return "off";
  }
  void RecordGoldens();
  // Whether greedy paths `a` and `b` after `prompt` part at a tie of the reference (device
  // backends only: see kTieBound); records the tie in `ev`.
  // With `media`, the prompt's media runs are filled with its images and audio clips.
  bool IsTie(const std::vector<int32_t>& prompt, const std::vector<int32_t>& a,
             const std::vector<int32_t>& b, json* ev, const MediaRequest* media = nullptr);
  void ExpectGolden(Session& s, size_t prompt, const GenerateOptions& g, json* ev,
                    const char* where);

  struct Kind {
    const char* name;
    int weight;
    void (Soak::*fn)(std::mt19937_64&, json*);
  };
  // The scenarios with their weights for this engine and the chosen ones (others weigh 0).
  std::vector<Kind> Kinds() const;
  bool HasMedia() const {
    return std::any_of(media_goldens_.begin(), media_goldens_.end(),
                       [](const std::optional<Golden>& g) { return g.has_value(); });
  }
  void CheckScenarios() const;  // Error(kInvalidArgument) for unknown or inapplicable ones
  json Step(int64_t k, std::mt19937_64& rng, std::string* scenario);
  void GreedyGolden(std::mt19937_64& rng, json* ev);
  void SamplingRepeat(std::mt19937_64& rng, json* ev);
  void RegexScenario(std::mt19937_64& rng, json* ev);
  void JsonScenario(std::mt19937_64& rng, json* ev);
  void SchemaScenario(std::mt19937_64& rng, json* ev);
  void ToolCallScenario(std::mt19937_64& rng, json* ev);
  void MultiTurn(std::mt19937_64& rng, json* ev);
  json FirstTurn(Session& s, size_t p1, size_t p2, const GenerateOptions& g);
  Result FreshTurn(const json& messages, GenerateOptions g);
  void CancelDecode(std::mt19937_64& rng, json* ev);
  void CancelPrefill(std::mt19937_64& rng, json* ev);
  void SessionDestroy(std::mt19937_64& rng, json* ev);
  void EngineReload(std::mt19937_64& rng, json* ev);
  void Concurrent(std::mt19937_64& rng, json* ev);
  void DeviceLoss(std::mt19937_64& rng, json* ev);
  void DeviceOutOfMemory(std::mt19937_64& rng, json* ev);
  void Media(std::mt19937_64& rng, json* ev);

  void WriteProgress(bool final);
  void WriteSummary(const json& summary);
  // summary.json's fields every run has (seed, profile, backend, model, steps, scenarios, command).
  json SummaryHead(double elapsed, const std::string& backend) const;
  void Event(const json& ev) {
    std::lock_guard<std::mutex> lock(io_mu_);
    events_ << ev.dump() << '\n';
    events_.flush();
  }
  // A step past --step-timeout: its reproducer and every thread's stack into the files, then the
  // process ends (exit status 3: the hung step cannot be stopped).
  [[noreturn]] void Hung(int64_t step, const std::string& scenario, double seconds);

  const SoakOptions o_;
  const Profile prof_;
  std::shared_ptr<Engine> engine_;
  std::shared_ptr<Engine> ref_;  // the reference backend's engine (goldens, ties)
  std::mutex ties_mu_;
  int64_t ties_ = 0;
  std::vector<std::unique_ptr<Session>> pool_;
  std::vector<Golden> goldens_;
  std::vector<std::optional<Golden>> media_goldens_;     // per MediaRequests(); none: no such tower
  std::map<std::string, std::vector<int32_t>> sampled_;  // request -> tokens, across the run
  std::unique_ptr<AjvValidator> ajv_;
  std::ofstream events_;
  Clock::time_point start_;
  std::map<std::string, int64_t> counts_, incomplete_;
  std::vector<double> rss_t_, rss_bytes_, device_bytes_;
  std::vector<bool> after_reload_;  // the step was an engine reload
  bool has_device_ = false;         // the engine under test runs on a device (fault scenarios)
  int64_t steps_ = 0;
  json failure_;
  std::mutex io_mu_;  // events.jsonl and the JSON files (the watchdog's thread writes them too)
  std::unique_ptr<StepWatchdog> watchdog_;
};

void Soak::RecordGoldens() {
  Timer t;
  ref_ = Engine::Load(EngineOpts(o_.reference_backend));
  auto& ref = ref_;
  // (every scenario but media checks against these)
  const bool text =
      o_.scenarios.empty() || std::any_of(o_.scenarios.begin(), o_.scenarios.end(),
                                          [](const std::string& x) { return x != "media"; });
  for (size_t i = 0; text && i < Prompts().size(); ++i) {
    auto s = ref->NewSession();
    Result r =
        s->Generate(Input::Messages(UserMessages(Prompts()[i])), Greedy(prof_.golden_tokens));
    goldens_.push_back({r.tokens, StopReasonName(r.stop_reason)});
  }
  // The media requests the model's towers can take (a model without a vision or audio tower
  // refuses those with kUnsupported: they are left out of the media scenario).
  const bool with_media =
      o_.scenarios.empty() || std::count(o_.scenarios.begin(), o_.scenarios.end(), "media") > 0;
  int media = 0;
  for (const MediaRequest& m : MediaRequests()) {
    if (!with_media) {
      media_goldens_.push_back(std::nullopt);
      continue;
    }
    try {
      Result r =
          ref->NewSession()->Generate(Input::Messages(m.messages), Greedy(prof_.golden_tokens));
      media_goldens_.push_back(Golden{r.tokens, StopReasonName(r.stop_reason)});
      ++media;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kUnsupported) throw;
      media_goldens_.push_back(std::nullopt);
    }
  }
  Log("goldens: " + std::to_string(goldens_.size()) + " prompts and " + std::to_string(media) +
      " media requests x " + std::to_string(prof_.golden_tokens) + " greedy tokens on " +
      ref->backend_name() + " in " + std::to_string(static_cast<int>(t.Ms())) + " ms");
}

// Device backends are not bit-identical to the CPU reference: their contract is logits within
// 1e-3 relative L2 of the reference's (docs/vulkan.md, "Numerics": prompt attention sums in f32),
// and how a prompt is chunked (prefix reuse, chunk size) moves their roundings. On a checkpoint
// whose top logits are close (random weights), greedy paths then part now and then. Such a parting
// is a tie, not a failure, when the reference's own logits at that position put the two tokens
// within what the contract allows: |l[a] - l[b]| <= sqrt(2) * 1e-3 * ||l||_2 (two entries of a
// deviation of at most 1e-3 ||l||_2 move at most that much apart). With a quantized LM head (QAT)
// the contract also allows an SRQ flip: every logit moved by at most two head quanta before the
// softcap, so two tokens whose uncapped logits are within four quanta may swap. CPU backends are
// held to exact tokens.
constexpr double kTieBound = 1e-3;
constexpr double kTieQuanta = 4;

bool Soak::IsTie(const std::vector<int32_t>& prompt, const std::vector<int32_t>& a,
                 const std::vector<int32_t>& b, json* ev, const MediaRequest* media) {
  if (!has_device_ || !ref_) return false;
  size_t d = 0;
  while (d < a.size() && d < b.size() && a[d] == b[d]) ++d;
  if (d == a.size() || d == b.size()) return false;  // one ends early: not a tie of two tokens
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), a.begin(), a.begin() + d);
  if (seq.size() < 2) return false;
  ScoreResult sr;
  if (media) {
    Input in = Input::Ids(seq);
    in.images = media->images;
    in.audios = media->audios;
    sr = ref_->NewSession()->ScoreInput(in, /*return_logits=*/true);
  } else {
    sr = ref_->NewSession()->Score(seq, /*return_logits=*/true);
  }
  const int V = ref_->vocab_size();
  const float* row = sr.logits.data() + (seq.size() - 1) * static_cast<size_t>(V);
  double norm = 0;
  for (int i = 0; i < V; ++i) norm += static_cast<double>(row[i]) * row[i];
  const double margin = std::fabs(static_cast<double>(row[a[d]]) - row[b[d]]);
  const double bound = std::sqrt(2.0) * kTieBound * std::sqrt(norm);
  json tie = {{"position", d}, {"tokens", {a[d], b[d]}}, {"margin", margin}, {"bound", bound}};
  bool within = margin <= bound;
  const HeadQuantization hq = EngineHeadQuantization(*ref_);
  if (hq.quantum > 0) {
    const double quanta =
        std::fabs(UncappedLogit(row[a[d]], hq.softcap) - UncappedLogit(row[b[d]], hq.softcap)) /
        hq.quantum;
    tie["head_quanta"] = quanta;
    within = within || quanta <= kTieQuanta + 1e-3;
  }
  if (!within) {
    (*ev)["not_a_tie"] = tie;
    return false;
  }
  (*ev)["tie"] = tie;
  std::lock_guard lock(ties_mu_);
  ++ties_;
  return true;
}

void Soak::ExpectGolden(Session& s, size_t prompt, const GenerateOptions& g, json* ev,
                        const char* where) {
  const Input in = Input::Messages(UserMessages(Prompts()[prompt]));
  Result r = s.Generate(in, g);
  if (r.tokens != goldens_[prompt].tokens &&
      !IsTie(engine_->PromptTokens(in), goldens_[prompt].tokens, r.tokens, ev)) {
    Fail(std::string(where) + ": greedy tokens differ from the reference backend's golden",
         {{"prompt", Prompts()[prompt]},
          {"options", r.resolved_config},
          {"expected_tokens", goldens_[prompt].tokens},
          {"got_tokens", r.tokens},
          {"got_text", r.text},
          {"tie_check", ev->value("not_a_tie", json())}});
  }
  (*ev)["reused_tokens"] = r.telemetry.reused_tokens;
}

void Soak::GreedyGolden(std::mt19937_64& rng, json* ev) {
  const size_t p = rng() % Prompts().size();
  Session& s = *pool_[rng() % pool_.size()];
  GenerateOptions g = Greedy(prof_.golden_tokens);
  switch (rng() % 3) {  // every prefill path must give the same tokens
    case 0:
      g.prefill = PrefillStrategy::kAuto;
      break;
    case 1:
      g.prefill = PrefillStrategy::kSequential;
      break;
    case 2:
      g.prefill = PrefillStrategy::kChunked;
      g.prefill_chunk = 1 + static_cast<int>(rng() % 48);
      break;
  }
  g.reuse_prompt_cache = rng() % 4 != 0;
  (*ev)["speculative"] = DrawSpeculative(rng, &g);
  (*ev)["prompt"] = p;
  (*ev)["prefill_chunk"] = g.prefill == PrefillStrategy::kChunked ? g.prefill_chunk : 0;
  ExpectGolden(s, p, g, ev, "greedy_golden");
}

void Soak::SamplingRepeat(std::mt19937_64& rng, json* ev) {
  const size_t p = rng() % Prompts().size();
  GenerateOptions g = Greedy(prof_.golden_tokens);
  g.seed = rng() % 1000;  // few seeds: repeats across the run are compared too
  static const double kTemps[] = {0.6, 0.9, 1.2};
  static const int kTopK[] = {0, 20, 64};
  static const double kTopP[] = {1.0, 0.95, 0.8};
  g.temperature = kTemps[rng() % 3];
  g.top_k = kTopK[rng() % 3];
  g.top_p = kTopP[rng() % 3];
  g.min_p = rng() % 2 ? 0.05 : 0.0;
  g.repetition_penalty = rng() % 2 ? 1.1 : 1.0;
  // On a device the prompt is evaluated afresh, so both requests chunk it alike (see kTieBound):
  // the sampled tokens must then be identical.
  if (has_device_) g.reuse_prompt_cache = false;
  const Input in = Input::Messages(UserMessages(Prompts()[p]));
  Session& a = *pool_[rng() % pool_.size()];
  Session& b = *pool_[rng() % pool_.size()];
  const Result r1 = a.Generate(in, g);
  // The second request may decode speculatively: a seeded request gives the same tokens (on the
  // CPU backends, whose verification steps give every position's logits bit for bit; a device's
  // several-token steps are within its tolerance of one-token steps, which sampling may amplify).
  GenerateOptions g2 = g;
  (*ev)["speculative"] = has_device_ ? "off" : DrawSpeculative(rng, &g2);
  const Result r2 = b.Generate(in, g2);
  const json request = {{"prompt", Prompts()[p]}, {"options", r1.resolved_config}};
  if (r1.tokens != r2.tokens) {
    Fail("the same seeded request gave different tokens on two sessions",
         {{"request", request},
          {"first", r1.tokens},
          {"second", r2.tokens},
          {"second_speculative", r2.resolved_config["speculative"]}});
  }
  const std::string key = request.dump();
  auto [it, inserted] = sampled_.emplace(key, r1.tokens);
  if (!inserted && it->second != r1.tokens) {
    Fail("a seeded request repeated later in the run gave different tokens",
         {{"request", request}, {"earlier", it->second}, {"now", r1.tokens}});
  }
  (*ev)["prompt"] = p;
  (*ev)["seed"] = *g.seed;
  (*ev)["repeat_of_earlier"] = !inserted;
}

// A constrained output is checkable when generation ended where the grammar allows it.
bool Complete(const Result& r) {
  return r.stop_reason == StopReason::kConstraintComplete || r.stop_reason == StopReason::kEos ||
         r.stop_reason == StopReason::kStopId;
}

GenerateOptions Sampled(std::mt19937_64& rng, int max_new) {
  GenerateOptions g;
  g.max_new_tokens = max_new;
  if (rng() % 2) {
    g.temperature = 0.8;
    g.top_p = 0.95;
    g.seed = rng() % 100000;
  }
  return g;
}

void Soak::RegexScenario(std::mt19937_64& rng, json* ev) {
  const std::string& re = Regexes()[rng() % Regexes().size()];
  GenerateOptions g = Sampled(rng, prof_.constrained_max);
  g.constraint.kind = OutputConstraint::Kind::kRegex;
  g.constraint.regex = re;
  const std::string prompt = Prompts()[rng() % Prompts().size()];
  Result r = pool_[rng() % pool_.size()]->Generate(Input::Messages(UserMessages(prompt)), g);
  (*ev)["regex"] = re;
  (*ev)["complete"] = Complete(r);
  if (!Complete(r)) {
    ++incomplete_["regex"];
    return;
  }
#if GEMMA_HAVE_RE2
  RE2 oracle(re);
  if (!RE2::FullMatch(r.text, oracle)) {
    Fail("regex-constrained output does not match under RE2",
         {{"prompt", prompt}, {"options", r.resolved_config}, {"output", r.text}});
  }
  (*ev)["validator"] = "re2";
#else
  (*ev)["validator"] = "none (built without RE2)";
#endif
}

void Soak::JsonScenario(std::mt19937_64& rng, json* ev) {
  GenerateOptions g = Sampled(rng, prof_.constrained_max);
  g.constraint.kind = OutputConstraint::Kind::kJson;
  g.constraint.object_root = true;
  g.constraint.max_depth = 3;
  g.constraint.whitespace = rng() % 2 ? "none" : "compact";
  const std::string prompt = "Reply with a JSON object describing " + Prompts()[rng() % 4];
  Result r = pool_[rng() % pool_.size()]->Generate(Input::Messages(UserMessages(prompt)), g);
  (*ev)["complete"] = Complete(r);
  if (!Complete(r)) {
    ++incomplete_["json"];
    return;
  }
  const json v = json::parse(r.text, nullptr, false);
  if (v.is_discarded() || !v.is_object()) {
    Fail("JSON-constrained output is not a JSON object (nlohmann)",
         {{"prompt", prompt}, {"options", r.resolved_config}, {"output", r.text}});
  }
}

void Soak::SchemaScenario(std::mt19937_64& rng, json* ev) {
  const size_t si = rng() % Schemas().size();
  GenerateOptions g = Sampled(rng, prof_.constrained_max);
  g.constraint.kind = OutputConstraint::Kind::kJsonSchema;
  g.constraint.schema_json = Schemas()[si];
  g.constraint.whitespace = rng() % 2 ? "none" : "compact";  // "any" lets a model pad forever
  const std::string prompt = "Answer in JSON: " + Prompts()[rng() % Prompts().size()];
  Result r = pool_[rng() % pool_.size()]->Generate(Input::Messages(UserMessages(prompt)), g);
  (*ev)["schema"] = si;
  (*ev)["complete"] = Complete(r);
  if (!Complete(r)) {
    ++incomplete_["schema"];
    return;
  }
  const json schema = json::parse(Schemas()[si]);
  if (!json::accept(r.text)) {
    Fail("schema-constrained output is not JSON", {{"prompt", prompt},
                                                   {"schema", schema},
                                                   {"options", r.resolved_config},
                                                   {"output", r.text}});
  }
  if (ajv_->available()) {
    const std::string err = ajv_->Check(schema, r.text);
    if (!err.empty()) {
      Fail("schema-constrained output is invalid under AJV: " + err,
           {{"prompt", prompt},
            {"schema", schema},
            {"options", r.resolved_config},
            {"output", r.text}});
    }
    (*ev)["validator"] = "ajv";
  } else {
    (*ev)["validator"] = "json parse only (node/AJV missing)";
  }
}

void Soak::ToolCallScenario(std::mt19937_64& rng, json* ev) {
  GenerateOptions g = Sampled(rng, prof_.constrained_max);
  g.constraint.kind = OutputConstraint::Kind::kToolCalls;
  g.constraint.require_tool_call = true;
  static const char* kAsks[] = {"What is the weather in Paris?", "Add 12 and 30.",
                                "Is it cold in Oslo today?", "What is 7 plus 8?"};
  const std::string prompt = kAsks[rng() % 4];
  const json tools = Tools();
  Result r = pool_[rng() % pool_.size()]->Generate(Input::Messages(UserMessages(prompt), tools), g);
  (*ev)["complete"] = Complete(r);
  if (!Complete(r)) {
    ++incomplete_["tool_call"];
    return;
  }
  const json failure = {{"prompt", prompt}, {"options", r.resolved_config}, {"raw", r.raw_text}};
  if (r.tool_calls.empty()) Fail("a required tool call was not produced", failure);
  if (!r.parse_errors.empty()) Fail("the tool-call output has malformed blocks", failure);
  for (const ToolCall& c : r.tool_calls) {
    const json* params = nullptr;
    for (const json& t : tools)
      if (t["function"]["name"] == c.name) params = &t["function"]["parameters"];
    if (!params) Fail("a tool call names an undeclared tool '" + c.name + "'", failure);
    if (ajv_->available()) {
      const std::string err = ajv_->Check(*params, c.arguments.dump());
      if (!err.empty()) Fail("tool-call arguments invalid under AJV: " + err, failure);
    }
  }
  (*ev)["calls"] = r.tool_calls.size();
  (*ev)["validator"] = ajv_->available() ? "ajv" : "declared tool only (node/AJV missing)";
}

// A first turn (prompt p1) on `s`, then the conversation with its answer and a second question
// (prompt p2), not yet asked.
json Soak::FirstTurn(Session& s, size_t p1, size_t p2, const GenerateOptions& g) {
  json messages = UserMessages(Prompts()[p1]);
  const Result r1 = s.Generate(Input::Messages(messages), g);
  messages.push_back({{"role", "assistant"}, {"content", r1.text}});
  messages.push_back({{"role", "user"}, {"content", Prompts()[p2]}});
  return messages;
}

// `messages` on a new session, nothing reused: what a turn must equal.
Result Soak::FreshTurn(const json& messages, GenerateOptions g) {
  g.reuse_prompt_cache = false;
  return engine_->NewSession()->Generate(Input::Messages(messages), g);
}

// A request with images and audio (made here) equals the reference's greedy golden, through any
// prefill path, with or without prefix reuse; asked again on the same session it gives the same
// tokens, and where it reuses the whole prompt no tower runs.
void Soak::Media(std::mt19937_64& rng, json* ev) {
  std::vector<size_t> usable;
  for (size_t i = 0; i < media_goldens_.size(); ++i)
    if (media_goldens_[i]) usable.push_back(i);
  const size_t i = usable[rng() % usable.size()];
  const MediaRequest& m = MediaRequests()[i];
  const Golden& golden = *media_goldens_[i];
  Session& s = *pool_[rng() % pool_.size()];
  GenerateOptions g = Greedy(prof_.golden_tokens);
  if (rng() % 2) {
    g.prefill = PrefillStrategy::kChunked;
    g.prefill_chunk = 1 + static_cast<int>(rng() % 48);
  }
  g.reuse_prompt_cache = rng() % 4 != 0;
  const bool again = g.reuse_prompt_cache && rng() % 2;
  const Input in = Input::Messages(m.messages);
  (*ev)["request"] = m.name;
  (*ev)["prefill_chunk"] = g.prefill == PrefillStrategy::kChunked ? g.prefill_chunk : 0;
  for (int round = 0; round < (again ? 2 : 1); ++round) {
    const Result r = s.Generate(in, g);
    if (r.tokens != golden.tokens &&
        !IsTie(engine_->PromptTokens(in), golden.tokens, r.tokens, ev, &m)) {
      Fail("media request: greedy tokens differ from the reference backend's golden",
           {{"request", m.name},
            {"round", round},
            {"options", r.resolved_config},
            {"expected_tokens", golden.tokens},
            {"got_tokens", r.tokens},
            {"tie_check", ev->value("not_a_tie", json())}});
    }
    // Asked again, the session holds the prompt and the first answer: a backend that can rewind
    // past the answer (Backend::Truncate: within its sliding windows' slack) reuses the whole
    // prompt but its last token, and then no tower may run.
    const int encoded = r.telemetry.images_encoded + r.telemetry.audios_encoded;
    const bool all_reused = r.telemetry.reused_tokens + 1 >= r.telemetry.prompt_tokens;
    if (round == 1 && all_reused && encoded != 0) {
      Fail("media request asked again on the same session ran a tower again",
           {{"request", m.name},
            {"images_encoded", r.telemetry.images_encoded},
            {"audios_encoded", r.telemetry.audios_encoded},
            {"reused_tokens", r.telemetry.reused_tokens}});
    }
    (*ev)[round == 0 ? "encoded" : "encoded_again"] = encoded;
    (*ev)["reused_tokens"] = r.telemetry.reused_tokens;
  }
}

void Soak::MultiTurn(std::mt19937_64& rng, json* ev) {
  const size_t p1 = rng() % Prompts().size(), p2 = rng() % Prompts().size();
  Session& s = *pool_[rng() % pool_.size()];
  const GenerateOptions g = Greedy(prof_.golden_tokens);
  const json messages = FirstTurn(s, p1, p2, g);
  // What the session holds and how much of it the second turn's prompt repeats: the first turn's
  // text, rendered into the second prompt, need not tokenize to the ids it was generated as, and a
  // backend with short sliding windows cannot rewind far (Backend::Truncate), so reuse is owed only
  // where the prompt repeats everything the session holds but its last token.
  const std::vector<int32_t> held = s.evaluated();
  const std::vector<int32_t> next = engine_->PromptTokens(Input::Messages(messages));
  size_t common = 0;
  while (common < held.size() && common < next.size() && held[common] == next[common]) ++common;
  const Result reused = s.Generate(Input::Messages(messages), g);
  const Result fresh = FreshTurn(messages, g);
  if (reused.tokens != fresh.tokens &&
      !IsTie(engine_->PromptTokens(Input::Messages(messages)), fresh.tokens, reused.tokens, ev)) {
    Fail("a second turn on a session that reused its prefix differs from a fresh session",
         {{"messages", messages},
          {"reused_tokens", reused.telemetry.reused_tokens},
          {"with_reuse", reused.tokens},
          {"fresh", fresh.tokens}});
  }
  if (reused.telemetry.reused_tokens == 0 && common > 0 && common + 1 >= held.size()) {
    Fail("the second turn reused no prefix of the first",
         {{"messages", messages}, {"held", held.size()}, {"repeated", common}});
  }
  (*ev)["rewound"] = held.size() - common;
  (*ev)["reused_tokens"] = reused.telemetry.reused_tokens;
  (*ev)["prompt_tokens"] = reused.telemetry.prompt_tokens;
}

// The session must hold a prefix of what the failed request evaluated (its prompt, never a
// half-finished generation).
void ExpectPrefixOf(const Session& s, const std::vector<int32_t>& prompt, const char* where) {
  const auto& e = s.evaluated();
  if (e.size() > prompt.size() || !std::equal(e.begin(), e.end(), prompt.begin())) {
    Fail(std::string(where) + ": after cancellation the session holds tokens beyond the prompt",
         {{"evaluated", e}, {"prompt", prompt}});
  }
}

void Soak::CancelDecode(std::mt19937_64& rng, json* ev) {
  const size_t p = rng() % Prompts().size();
  const size_t next = rng() % Prompts().size();
  Session& s = *pool_[rng() % pool_.size()];
  const int after = 1 + static_cast<int>(rng() % std::max(1, prof_.golden_tokens / 2));
  std::stop_source stop;
  const Input in = Input::Messages(UserMessages(Prompts()[p]));
  bool cancelled = false;
  try {
    s.Generate(
        in, Greedy(prof_.golden_tokens),
        [&](const TokenEvent& e) {
          if (e.index + 1 >= after) stop.request_stop();
        },
        stop.get_token());
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kCancelled) throw;
    cancelled = true;
  }
  if (cancelled) ExpectPrefixOf(s, engine_->PromptTokens(in), "cancel_decode");
  (*ev)["cancelled_after"] = after;
  (*ev)["cancelled"] = cancelled;
  ExpectGolden(s, next, Greedy(prof_.golden_tokens), ev, "after cancel_decode");
}

void Soak::CancelPrefill(std::mt19937_64& rng, json* ev) {
  // A long prompt (every prompt in one message) in small chunks, cancelled from another thread
  // after a random delay: the request fails during prefill (or, when slow to cancel, decode).
  std::string text;
  for (const std::string& p : Prompts()) text += p + " ";
  const Input in = Input::Messages(UserMessages(text));
  Session& s = *pool_[rng() % pool_.size()];
  GenerateOptions g = Greedy(4);
  g.prefill = PrefillStrategy::kChunked;
  g.prefill_chunk = 4 + static_cast<int>(rng() % 12);
  g.reuse_prompt_cache = false;
  const int delay_us = static_cast<int>(rng() % 20000);
  std::stop_source stop;
  std::jthread canceller([&stop, delay_us] {
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    stop.request_stop();
  });
  bool cancelled = false;
  try {
    s.Generate(in, g, {}, stop.get_token());
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kCancelled) throw;
    cancelled = true;
  }
  canceller.join();
  const std::vector<int32_t> prompt = engine_->PromptTokens(in);
  if (cancelled) ExpectPrefixOf(s, prompt, "cancel_prefill");
  (*ev)["delay_us"] = delay_us;
  (*ev)["cancelled"] = cancelled;
  (*ev)["kept_tokens"] = s.evaluated().size();
  (*ev)["prompt_tokens"] = prompt.size();
  const size_t next = rng() % Prompts().size();
  ExpectGolden(s, next, Greedy(prof_.golden_tokens), ev, "after cancel_prefill");
}

void Soak::SessionDestroy(std::mt19937_64& rng, json* ev) {
  const size_t i = rng() % pool_.size();
  pool_[i].reset();
  pool_[i] = engine_->NewSession();
  const size_t p = rng() % Prompts().size();
  ExpectGolden(*pool_[i], p, Greedy(prof_.golden_tokens), ev, "session_destroy");
}

void Soak::EngineReload(std::mt19937_64& rng, json* ev) {
  Timer t;
  LoadEngine();
  (*ev)["load_ms"] = t.Ms();
  const size_t p = rng() % Prompts().size();
  ExpectGolden(*pool_[rng() % pool_.size()], p, Greedy(prof_.golden_tokens), ev, "engine_reload");
}

void Soak::Concurrent(std::mt19937_64& rng, json* ev) {
  const int n = std::min<int>(prof_.concurrent, static_cast<int>(pool_.size()));
  std::vector<size_t> prompts(n);
  for (size_t& p : prompts) p = rng() % Prompts().size();
  std::vector<std::optional<Failure>> failures(n);
  std::vector<std::string> errors(n);
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        try {
          json sub;
          ExpectGolden(*pool_[i], prompts[i], Greedy(prof_.golden_tokens), &sub, "concurrent");
        } catch (const Failure& f) {
          failures[i] = f;
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      });
    }
  }
  for (int i = 0; i < n; ++i) {
    if (failures[i]) throw *failures[i];
    if (!errors[i].empty())
      Fail("concurrent session " + std::to_string(i) + " failed: " + errors[i]);
  }
  // One session, two threads: the second Generate while the first is inside its token callback
  // must be refused with kBusy, and the first must finish with its golden.
  Session& s = *pool_[0];
  const size_t p = rng() % Prompts().size();
  std::mutex mu;
  std::condition_variable cv;
  bool in_callback = false, tried = false, first_done = false;
  std::string second;
  std::jthread other([&] {
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return in_callback || first_done; });
      if (!in_callback) {  // the first request emitted no token: nothing was concurrent
        second = "skipped";
        return;
      }
    }
    try {
      s.Generate(Input::Messages(UserMessages(Prompts()[p])), Greedy(2));
      second = "accepted";
    } catch (const Error& e) {
      second = e.code() == ErrorCode::kBusy ? "busy" : e.what();
    }
    std::lock_guard lock(mu);
    tried = true;
    cv.notify_all();
  });
  Result r = s.Generate(Input::Messages(UserMessages(Prompts()[p])), Greedy(prof_.golden_tokens),
                        [&](const TokenEvent& e) {
                          if (e.index != 0) return;
                          std::unique_lock lock(mu);
                          in_callback = true;
                          cv.notify_all();
                          cv.wait(lock, [&] { return tried; });
                        });
  {
    std::lock_guard lock(mu);
    first_done = true;
    cv.notify_all();
  }
  other.join();
  if (second != "busy" && second != "skipped") {
    Fail("a concurrent Generate on a busy session was not refused with kBusy: " + second);
  }
  json tie_ev;
  if (r.tokens != goldens_[p].tokens &&
      !IsTie(engine_->PromptTokens(Input::Messages(UserMessages(Prompts()[p]))), goldens_[p].tokens,
             r.tokens, &tie_ev)) {
    Fail("the request that held the session while another was refused differs from its golden",
         {{"prompt", Prompts()[p]},
          {"expected_tokens", goldens_[p].tokens},
          {"got_tokens", r.tokens}});
  }
  (*ev)["threads"] = n;
  (*ev)["busy_refused"] = second == "busy";
}

// The request in flight when the device is lost (or hangs: a submission past the step timeout)
// fails with kDevice and commits nothing; the next request on the same session continues its
// conversation exactly (reusing its prefix: the backend rebuilt the device and replayed the
// session's tokens), and the engine's other sessions go on.
void Soak::DeviceLoss(std::mt19937_64& rng, json* ev) {
  const size_t p1 = rng() % Prompts().size(), p2 = rng() % Prompts().size();
  Session& s = *pool_[rng() % pool_.size()];
  const GenerateOptions g = Greedy(prof_.golden_tokens);
  const json messages = FirstTurn(s, p1, p2, g);
  const std::vector<int32_t> before = s.evaluated();
  // During prefill (the fault hits the turn's first submission) or after a few decoded tokens.
  const int at_token = static_cast<int>(rng() % 3);  // 0: prefill
  const DeviceFault fault = rng() % 2 ? DeviceFault::kHang : DeviceFault::kDeviceLoss;
  bool failed = false;
  std::string error;
  if (at_token == 0 && !InjectDeviceFault(*engine_, fault)) {
    Fail("the engine under test has no device to lose");
  }
  // (EOS ignored: the turn goes on past the injection, so the fault hits this request)
  GenerateOptions failing = g;
  failing.ignore_eos = true;
  try {
    s.Generate(Input::Messages(messages), failing, [&](const TokenEvent& e) {
      if (at_token > 0 && e.index + 1 == at_token) {
        InjectDeviceFault(*engine_, fault);
      }
    });
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kDevice) throw;
    failed = true;
    error = e.what();
  }
  if (!failed) {
    Fail("a request during which the device was lost or hung did not fail with kDevice",
         {{"messages", messages}, {"at_token", at_token}, {"hang", fault == DeviceFault::kHang}});
  }
  // Nothing of the failed request is committed: the session holds a prefix of what it held
  // before plus the turn's prompt.
  const std::vector<int32_t> prompt = engine_->PromptTokens(Input::Messages(messages));
  ExpectPrefixOf(s, prompt, "device_loss");
  const Result again = s.Generate(Input::Messages(messages), g);
  const Result fresh = FreshTurn(messages, g);
  if (again.tokens != fresh.tokens &&
      !IsTie(engine_->PromptTokens(Input::Messages(messages)), fresh.tokens, again.tokens, ev)) {
    Fail("after a device loss or hang the session's next turn differs from a fresh session's",
         {{"messages", messages},
          {"at_token", at_token},
          {"hang", fault == DeviceFault::kHang},
          {"after_loss", again.tokens},
          {"fresh", fresh.tokens}});
  }
  (*ev)["at_token"] = at_token;
  (*ev)["hang"] = fault == DeviceFault::kHang;
  (*ev)["kept_tokens"] = s.evaluated().size();
  (*ev)["held_before"] = before.size();
  (*ev)["reused_tokens"] = again.telemetry.reused_tokens;
  (*ev)["error"] = error;
}

// A session whose device memory cannot be allocated is refused with kCapacity; the engine and the
// sessions it has go on, and the next new session works.
void Soak::DeviceOutOfMemory(std::mt19937_64& rng, json* ev) {
  const size_t i = rng() % pool_.size();
  if (!InjectDeviceFault(*engine_, DeviceFault::kOutOfDeviceMemory)) {
    Fail("the engine under test has no device");
  }
  std::string error;
  try {
    auto s = engine_->NewSession();
    Fail("a new session was made although its device memory could not be allocated");
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kCapacity) throw;
    error = e.what();
  }
  const size_t p = rng() % Prompts().size();
  ExpectGolden(*pool_[(i + 1) % pool_.size()], p, Greedy(prof_.golden_tokens), ev,
               "an existing session after device_oom");
  pool_[i].reset();
  pool_[i] = engine_->NewSession();
  ExpectGolden(*pool_[i], p, Greedy(prof_.golden_tokens), ev, "a new session after device_oom");
  (*ev)["error"] = error;
}

std::vector<Soak::Kind> Soak::Kinds() const {
  std::vector<Kind> kinds = {
      {"greedy_golden", 6, &Soak::GreedyGolden},
      {"sampling_repeat", 4, &Soak::SamplingRepeat},
      {"regex", 3, &Soak::RegexScenario},
      {"json", 2, &Soak::JsonScenario},
      {"schema", 3, &Soak::SchemaScenario},
      {"tool_call", 3, &Soak::ToolCallScenario},
      {"multi_turn", 3, &Soak::MultiTurn},
      {"cancel_decode", 3, &Soak::CancelDecode},
      {"cancel_prefill", 3, &Soak::CancelPrefill},
      {"session_destroy", 2, &Soak::SessionDestroy},
      {"engine_reload", prof_.reload_weight, &Soak::EngineReload},
      {"concurrent", 2, &Soak::Concurrent},
      {"device_loss", has_device_ ? 2 : 0, &Soak::DeviceLoss},
      {"device_oom", has_device_ ? 1 : 0, &Soak::DeviceOutOfMemory},
      {"media", HasMedia() ? 3 : 0, &Soak::Media},
  };
  if (!o_.scenarios.empty()) {  // only those chosen
    for (Kind& x : kinds) {
      if (std::find(o_.scenarios.begin(), o_.scenarios.end(), x.name) == o_.scenarios.end())
        x.weight = 0;
    }
  }
  return kinds;
}

void Soak::CheckScenarios() const {
  const std::vector<Kind> kinds = Kinds();
  for (const std::string& name : o_.scenarios) {
    if (std::none_of(kinds.begin(), kinds.end(), [&](const Kind& x) { return name == x.name; }))
      throw Error(ErrorCode::kInvalidArgument,
                  "soak --scenarios: no scenario named '" + name + "'");
  }
  int total = 0;
  for (const Kind& x : kinds) total += x.weight;
  if (total == 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "soak --scenarios: none of them applies to backend " + engine_->backend_name() +
                    " (device_loss and device_oom need a device, media a vision or audio tower)");
  }
}

json Soak::Step(int64_t k, std::mt19937_64& rng, std::string* scenario) {
  const std::vector<Kind> kinds = Kinds();
  int total = 0;
  for (const Kind& x : kinds) total += x.weight;
  int pick = static_cast<int>(rng() % total);
  const Kind* kind = &kinds[0];
  for (const Kind& x : kinds) {
    if (pick < x.weight) {
      kind = &x;
      break;
    }
    pick -= x.weight;
  }
  *scenario = kind->name;
  if (watchdog_) watchdog_->Begin(k, kind->name);
  if (k == o_.inject_hang_step) {  // (the watchdog's own test: this step never returns)
    while (true) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  json ev = {{"step", k}, {"scenario", kind->name}};
  (this->*(kind->fn))(rng, &ev);
  return ev;
}

void Soak::WriteProgress(bool final) {
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  json p = {{"elapsed_s", elapsed},
            {"steps", steps_},
            {"scenarios", counts_},
            {"incomplete_constrained", incomplete_},
            {"rss_bytes", rss_bytes_.empty() ? 0.0 : rss_bytes_.back()},
            {"failed", !failure_.is_null()},
            {"done", final}};
  std::lock_guard<std::mutex> lock(io_mu_);
  const fs::path tmp = fs::path(o_.out_dir) / "progress.json.tmp";
  {
    std::ofstream f(tmp);
    f << p.dump(2) << '\n';
  }
  fs::rename(tmp, fs::path(o_.out_dir) / "progress.json");  // atomic on one file system
}

json Soak::SummaryHead(double elapsed, const std::string& backend) const {
  return {{"seed", o_.seed},
          {"profile", o_.profile},
          {"backend", backend},
          {"reference_backend", o_.reference_backend},
          {"model", o_.model_path},
          {"minutes_requested", o_.minutes},
          {"elapsed_s", elapsed},
          {"steps", steps_},
          {"scenarios", counts_},
          {"command", o_.command}};
}

void Soak::WriteSummary(const json& summary) {
  std::lock_guard<std::mutex> lock(io_mu_);
  const fs::path tmp = fs::path(o_.out_dir) / "summary.json.tmp";
  {
    std::ofstream f(tmp);
    f << summary.dump(2) << '\n';
  }
  fs::rename(tmp, fs::path(o_.out_dir) / "summary.json");
}

void Soak::Hung(int64_t step, const std::string& scenario, double seconds) {
  char what[256];
  std::snprintf(what, sizeof what, "step %lld (%s) has run for %.1f s (--step-timeout %g s): hung",
                static_cast<long long>(step), scenario.c_str(), seconds, o_.step_timeout_s);
  Log(std::string("HUNG: ") + what + "; every thread's stack is in summary.json");
  json reproducer = {{"seed", o_.seed},
                     {"step", step},
                     {"scenario", scenario},
                     {"error", what},
                     {"threads", ThreadReport()},
                     {"rerun", o_.command + " --only-step " + std::to_string(step)}};
  Event({{"step", step}, {"scenario", scenario}, {"ok", false}, {"error", what}});
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  // (the main thread is inside the step: what it updates between steps stays as it was)
  json summary = SummaryHead(elapsed, o_.backend);
  summary["ok"] = false;
  summary["hung"] = true;
  summary["failures"] = 1;
  summary["reproducer"] = reproducer;
  WriteSummary(summary);
  std::_Exit(kHungExitStatus);
}

json Soak::Run() {
  fs::create_directories(o_.out_dir);
  events_.open(fs::path(o_.out_dir) / "events.jsonl", std::ios::app);
  if (!events_) throw Error(ErrorCode::kIo, "cannot write " + o_.out_dir + "/events.jsonl");
  ajv_ = std::make_unique<AjvValidator>(o_.ajv_script, o_.node_modules, o_.out_dir);
  start_ = Clock::now();
  Event({{"event", "start"},
         {"seed", o_.seed},
         {"profile", o_.profile},
         {"backend", o_.backend},
         {"model", o_.model_path},
         {"minutes", o_.minutes},
         {"only_step", o_.only_step}});
  LoadEngine();
  RecordGoldens();  // (first: which media requests the model takes)
  CheckScenarios();
  Log("engine under test: " + engine_->backend_name() + ", " + std::to_string(pool_.size()) +
      " sessions, schema validator: " + (ajv_->available() ? "AJV" : "none (JSON parse only)"));
  if (o_.step_timeout_s > 0) {
    watchdog_ = std::make_unique<StepWatchdog>(
        o_.step_timeout_s,
        [this](int64_t step, const std::string& scenario, double s) { Hung(step, scenario, s); });
  }
  const auto deadline = start_ + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(o_.minutes * 60));
  const double warmup_s = o_.minutes * 60 * 0.25;
  int64_t k = o_.only_step >= 0 ? o_.only_step : 0;
  json last_failed_step;
  while (true) {
    if (o_.only_step >= 0 ? steps_ == 1 : Clock::now() >= deadline) break;
    if (o_.max_steps > 0 && steps_ >= o_.max_steps) break;
    std::mt19937_64 rng(SplitMix(o_.seed * 0x100000001b3ull + static_cast<uint64_t>(k)));
    std::string scenario;
    Timer t;
    json ev;
    try {
      ev = Step(k, rng, &scenario);
      ev["ok"] = true;
    } catch (const Failure& f) {
      ev = {{"step", k},
            {"scenario", scenario},
            {"ok", false},
            {"error", f.what},
            {"details", f.details}};
    } catch (const std::exception& e) {
      ev = {{"step", k},
            {"scenario", scenario},
            {"ok", false},
            {"error", std::string("unexpected: ") + e.what()}};
    }
    // (a step that ends just after the watchdog called it hung: Hung is writing the files and
    // ending the process; this thread leaves them alone)
    if (watchdog_ && watchdog_->End()) {
      while (true) std::this_thread::sleep_for(std::chrono::hours(1));
    }
    ev["ms"] = t.Ms();
    ++steps_;
    ++counts_[scenario];
    const double now = std::chrono::duration<double>(Clock::now() - start_).count();
    rss_t_.push_back(now);
    rss_bytes_.push_back(static_cast<double>(ResidentBytes()));
    device_bytes_.push_back(engine_ ? static_cast<double>(engine_->device_memory_bytes()) : 0.0);
    after_reload_.push_back(scenario == "engine_reload");
    ev["t_s"] = now;
    ev["rss"] = rss_bytes_.back();
    if (has_device_) ev["device_bytes"] = device_bytes_.back();
    Event(ev);
    if (!ev["ok"].get<bool>()) {
      failure_ = {{"seed", o_.seed},
                  {"step", k},
                  {"scenario", scenario},
                  {"error", ev["error"]},
                  {"details", ev.value("details", json::object())},
                  {"rerun", o_.command + " --only-step " + std::to_string(k)}};
      Log("FAILED at step " + std::to_string(k) + " (" + scenario +
          "): " + ev["error"].get<std::string>());
      WriteProgress(false);
      break;
    }
    WriteProgress(false);
    ++k;
  }
  // Memory: the slope of RSS (and of device memory) over time after warm-up (the first quarter of
  // the run), over every step and over the steps right after an engine reload (the baseline: what
  // a fresh engine holds then; pooled sessions' caches come and go between reloads, so the
  // baseline is what shows a leak). The limit applies to the baseline where it has 3+ samples.
  const auto plateau = [&](const std::vector<double>& bytes, const char* what) {
    std::vector<double> xt, yb, xr, yr;
    for (size_t i = 0; i < rss_t_.size(); ++i) {
      if (rss_t_[i] < warmup_s) continue;
      xt.push_back(rss_t_[i] / 60.0);
      yb.push_back(bytes[i] / (1 << 20));
      if (after_reload_[i]) {
        xr.push_back(xt.back());
        yr.push_back(yb.back());
      }
    }
    const double slope = Slope(xt, yb), baseline = Slope(xr, yr);
    const double checked = xr.size() >= 3 ? baseline : slope;
    if (failure_.is_null() && o_.max_rss_slope_mib_per_min > 0 &&
        checked > o_.max_rss_slope_mib_per_min) {
      failure_ = {{"seed", o_.seed},
                  {"scenario", "memory_plateau"},
                  {"error", std::string(what) + " grows " + std::to_string(checked) +
                                " MiB/min after warm-up" +
                                (xr.size() >= 3 ? " (after engine reloads)" : "") + " (limit " +
                                std::to_string(o_.max_rss_slope_mib_per_min) + ")"},
                  {"rerun", o_.command}};
    }
    json j = {
        {"samples", bytes.size()},
        {"warmup_s", warmup_s},
        {"first_mib", bytes.empty() ? 0 : bytes.front() / (1 << 20)},
        {"after_warmup_first_mib", yb.empty() ? 0 : yb.front()},
        {"last_mib", bytes.empty() ? 0 : bytes.back() / (1 << 20)},
        {"max_mib", bytes.empty() ? 0 : *std::max_element(bytes.begin(), bytes.end()) / (1 << 20)},
        {"slope_mib_per_min", slope},
        {"after_reload_samples", xr.size()}};
    if (!yr.empty()) {
      j["after_reload_first_mib"] = yr.front();
      j["after_reload_last_mib"] = yr.back();
      j["after_reload_slope_mib_per_min"] = baseline;
    }
    return j;
  };
  const json rss = plateau(rss_bytes_, "RSS");
  const json device = has_device_ ? plateau(device_bytes_, "device memory") : json();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  json summary = SummaryHead(elapsed, engine_ ? engine_->backend_name() : o_.backend);
  summary.update({
    {"ok", failure_.is_null()},
    {"incomplete_constrained", incomplete_},
    {"schema_validator", ajv_->available() ? "ajv" : "json parse only"},
#if GEMMA_HAVE_RE2
    {"regex_validator", "re2"},
#else
    {"regex_validator", "none"},
#endif
    {"failures", failure_.is_null() ? 0 : 1},
    {"greedy_ties", ties_},
    {"rss", rss},
  });
  if (has_device_) summary["device_memory"] = device;
  if (!failure_.is_null()) summary["reproducer"] = failure_;
  watchdog_.reset();
  Event({{"event", "end"}, {"ok", summary["ok"]}, {"steps", steps_}});
  WriteProgress(true);
  WriteSummary(summary);
  return summary;
}

}  // namespace

double Slope(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n = std::min(x.size(), y.size());
  if (n < 2) return 0;
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; ++i) mx += x[i], my += y[i];
  mx /= n;
  my /= n;
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < n; ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
  }
  return sxx > 0 ? sxy / sxx : 0;
}

size_t ResidentBytes() {
  std::ifstream f("/proc/self/statm");
  size_t pages_total = 0, pages_resident = 0;
  if (!(f >> pages_total >> pages_resident)) return 0;
  return pages_resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

json RunSoak(const SoakOptions& options) {
  if (options.model_path.empty()) throw Error(ErrorCode::kInvalidArgument, "soak needs --model");
  if (options.out_dir.empty()) throw Error(ErrorCode::kInvalidArgument, "soak needs --out");
  if (!(options.minutes > 0))
    throw Error(ErrorCode::kInvalidArgument, "soak --minutes must be > 0");
  Soak s(options);
  return s.Run();
}

}  // namespace gemma::soak
