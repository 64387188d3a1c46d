// The audio path against transformers 5.17 float32 (tools/fixtures/audio_goldens.py):
// Gemma4AudioFeatureExtractor's log-mel features and masks for five clips (espeak-ng speech, a
// tone, silence, 0.1 s and 0.01 s of speech; and long clips of 2.7, 29.9, 30 and 45 s made from the
// speech, long/), a tiny random audio tower (2 conformer layers, clipped linears, bf16 weights)
// with embed_audio: its outputs at the valid frames; and the text model's logits with audio
// spliced.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/cpu/audio_ops.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "gemma/engine.h"
#include "gemma/error.h"
#include "golden_util.h"
#include "long_audio.h"
#include "media/audio.h"
#include "media/audio_features.h"
#include "model/model.h"
#include "model/synth.h"
#ifdef GEMMA_HAVE_CPU_FAST
#include "backend/cpu/fast/cpu_fast_backend.h"
#endif

namespace gemma {
namespace {

const std::string kDir = std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/audio/";
const char* kClips[] = {"speech", "tone", "silence", "short", "tiny"};

std::vector<char> ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(f)), {});
}

bool Exists(const std::string& path) { return std::ifstream(path).good(); }

TEST(AudioGolden, FeaturesMatchTheFeatureExtractor) {
  for (const char* clip : kClips) {
    SCOPED_TRACE(clip);
    const media::Audio a = media::LoadAudioFile(kDir + "clips/" + clip + ".wav");
    const media::AudioFeatures f = media::ExtractAudioFeatures(a.samples);
    const std::vector<char> mask = ReadBytes(kDir + "mask_" + clip + ".u8");
    ASSERT_EQ(f.frames, static_cast<int>(mask.size()));
    for (int i = 0; i < f.frames; ++i) ASSERT_EQ(f.mask[i], mask[i]) << "frame " << i;
    const std::vector<float> want = ReadF32(kDir + "features_" + clip + ".f32");
    ASSERT_EQ(f.mel.size(), want.size());
    double worst = 0;
    for (int i = 0; i < f.frames; ++i) {
      for (int m = 0; m < media::kMelBins; ++m) {
        const size_t k = static_cast<size_t>(i) * media::kMelBins + m;
        if (!mask[i]) {
          ASSERT_EQ(f.mel[k], 0.0f);
          continue;
        }
        worst = std::max(worst, std::abs(double(f.mel[k]) - want[k]));
      }
    }
    std::printf("%s: %d frames, %d tokens, max abs diff %.2e on valid frames\n", clip, f.frames,
                f.soft_tokens, worst);
    EXPECT_LE(worst, 1e-5);
  }
}

// The tower alone, fed transformers' own features. The committed checkpoint's text config (the
// last, full-attention layer KV-shared with no earlier full layer) is one transformers 5.17 saves
// but cannot run, so the tower is bound on its own.
struct TowerModel {
  std::unique_ptr<TensorSource> source;
  ModelConfig config;
  AudioTower tower;
};
TowerModel LoadTowerModel() {
  TowerModel m;
  m.config = LoadModelConfig(kDir + "model/config.json");
  m.source = TensorSource::Open(kDir + "model");
  m.tower = BindAudioTower(m.config, *m.source);
  return m;
}

TEST(AudioGolden, TowerMatchesTransformers) {
  const TowerModel model = LoadTowerModel();
  const AudioTower& t = model.tower;
  const int H = model.config.text.hidden_size, O = t.config.output_proj_dims;
  int cases = 0;
  for (const char* clip : kClips) {
    SCOPED_TRACE(clip);
    if (!Exists(kDir + "tower_" + clip + ".f32")) {
      // No soft token: transformers kept none, and the engine refuses the clip.
      const media::Audio a = media::LoadAudioFile(kDir + "clips/" + clip + ".wav");
      EXPECT_EQ(media::ExtractAudioFeatures(a.samples).soft_tokens, 0);
      EXPECT_THROW(media::PrepareAudio(a.samples, clip), Error);
      continue;
    }
    ++cases;
    const std::vector<float> feats = ReadF32(kDir + "features_" + clip + ".f32");
    const std::vector<char> mask_c = ReadBytes(kDir + "mask_" + clip + ".u8");
    const std::vector<uint8_t> mask(mask_c.begin(), mask_c.end());
    const AudioMel in{static_cast<int>(mask.size()), feats.data(), mask.data()};
    const std::vector<float> out = ref::AudioTowerForward(t, in);
    const std::vector<float> want_out = ReadF32(kDir + "audio_" + clip + ".f32");
    ASSERT_EQ(out.size(), want_out.size());
    const int n = static_cast<int>(out.size() / O);
    EXPECT_EQ(n, media::AudioSoftTokens(mask));
    const std::vector<float> soft = ref::EmbedAudio(t, out, n);
    const std::vector<float> want = ReadF32(kDir + "tower_" + clip + ".f32");
    ASSERT_EQ(soft.size(), want.size());
    double worst_token = 0;
    for (int i = 0; i < n; ++i) {
      worst_token = std::max(worst_token, RelL2(&out[i * O], &want_out[i * O], O));
      worst_token = std::max(worst_token, RelL2(&soft[i * H], &want[i * H], H));
    }
    EXPECT_LE(worst_token, 1e-4);
    // End to end: the engine's own features into the tower.
    const media::Audio a = media::LoadAudioFile(kDir + "clips/" + clip + ".wav");
    const media::AudioFeatures f = media::ExtractAudioFeatures(a.samples);
    const AudioMel ours{f.frames, f.mel.data(), f.mask.data()};
    const std::vector<float> soft2 = ref::EmbedAudio(t, ref::AudioTowerForward(t, ours), n);
    const double e2e = RelL2(soft2.data(), want.data(), want.size());
    EXPECT_LE(e2e, 1e-4);
    std::printf("tower %s: %d tokens, worst token rel L2 %.2e; from our features %.2e\n", clip, n,
                worst_token, e2e);
  }
  EXPECT_EQ(cases, 4);
}

nlohmann::json LongGoldens() {
  std::ifstream f(kDir + "long/long.json");
  return nlohmann::json::parse(f);
}

LongClip LongClipOf(const nlohmann::json& clip) {
  LongClip c = MakeLongClip(kDir + "clips/speech.wav", clip["clip"], clip["samples"].get<int>());
  EXPECT_EQ(c.sha256, clip["sha256"].get<std::string>())
      << "not the clip the goldens were made from";
  return c;
}

// 2.7, 29.9, 30 and 45 s (two chunks under the engine's 30 s policy): every chunk's mask whole,
// its features at a sample of valid frames, and every soft token of the tower (reference backend)
// against transformers run on each 30 s chunk.
TEST(AudioGolden, LongClipsMatchTransformers) {
  const nlohmann::json g = LongGoldens();
  const TowerModel model = LoadTowerModel();
  const int H = model.config.text.hidden_size;
  ASSERT_EQ(g["chunk_samples"].get<int>(), media::kAudioChunkSamples);
  for (const auto& clip : g["clips"]) {
    const std::string name = clip["clip"];
    SCOPED_TRACE(name);
    const LongClip c = LongClipOf(clip);
    const media::PreparedAudio p = media::PrepareAudio(c.samples, name);
    ASSERT_EQ(p.chunks.size(), clip["chunks"].size());
    EXPECT_EQ(p.soft_tokens, clip["tokens"].get<int>());
    std::vector<float> soft;
    double worst_feature = 0;
    for (size_t k = 0; k < p.chunks.size(); ++k) {
      const media::AudioFeatures& f = p.chunks[k];
      const auto& want = clip["chunks"][k];
      const std::string tag = name + "_" + std::to_string(k);
      const std::vector<char> mask = ReadBytes(kDir + "long/mask_" + tag + ".u8");
      ASSERT_EQ(f.frames, static_cast<int>(mask.size()));
      for (int i = 0; i < f.frames; ++i)
        ASSERT_EQ(f.mask[i], mask[i]) << "chunk " << k << " frame " << i;
      EXPECT_EQ(f.soft_tokens, want["tokens"].get<int>());
      const std::vector<float> rows = ReadF32(kDir + "long/features_" + tag + ".f32");
      const std::vector<int> at = want["feature_rows"].get<std::vector<int>>();
      ASSERT_EQ(rows.size(), at.size() * media::kMelBins);
      for (size_t r = 0; r < at.size(); ++r)
        for (int m = 0; m < media::kMelBins; ++m)
          worst_feature =
              std::max(worst_feature,
                       std::abs(double(f.mel[static_cast<size_t>(at[r]) * media::kMelBins + m]) -
                                rows[r * media::kMelBins + m]));
      const AudioMel in{f.frames, f.mel.data(), f.mask.data()};
      const std::vector<float> out = ref::AudioTowerForward(model.tower, in);
      const std::vector<float> e = ref::EmbedAudio(model.tower, out, f.soft_tokens);
      soft.insert(soft.end(), e.begin(), e.end());
    }
    EXPECT_LE(worst_feature, 1e-5);
    const std::vector<float> want = ReadF32(kDir + "long/tower_" + name + ".f32");
    ASSERT_EQ(soft.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i * H < want.size(); ++i)
      worst = std::max(worst, RelL2(&soft[i * H], &want[i * H], H));
    EXPECT_LE(worst, 1e-4);
    std::printf("%s: %zu chunk(s), %d tokens, features max abs %.2e, worst token rel L2 %.2e\n",
                name.c_str(), p.chunks.size(), p.soft_tokens, worst_feature, worst);
  }
}

}  // namespace
}  // namespace gemma

namespace gemma {
namespace {

// One prompt of goldens.json or long/long.json: greedy tokens, and the logits at every position (or
// at the positions the file lists).
void CheckLogitsPrompt(Engine& engine, const std::string& backend, const nlohmann::json& pr,
                       const std::vector<AudioInput>& audios, const std::string& logits_file) {
  const std::string tag = pr["tag"];
  SCOPED_TRACE(backend + " " + tag);
  const std::vector<int32_t> ids = pr["ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> greedy = pr["greedy"].get<std::vector<int32_t>>();
  Input in = Input::Ids(ids);
  in.audios = audios;
  auto session = engine.NewSession();
  GenerateOptions opt;
  opt.max_new_tokens = static_cast<int>(greedy.size());
  opt.ignore_eos = true;
  const Result r = session->Generate(in, opt);
  EXPECT_EQ(r.tokens, greedy);
  Input all = in;
  all.token_ids->insert(all.token_ids->end(), greedy.begin(), greedy.end() - 1);
  const ScoreResult sc = engine.NewSession()->ScoreInput(all, /*return_logits=*/true);
  const int V = engine.vocab_size();
  ASSERT_EQ(sc.logits.size(), all.token_ids->size() * V);
  std::vector<size_t> positions;
  if (pr.contains("positions")) {
    positions = pr["positions"].get<std::vector<size_t>>();
  } else {
    for (size_t pos = 0; pos < all.token_ids->size(); ++pos) positions.push_back(pos);
  }
  const std::vector<float> want = ReadF32(logits_file);
  ASSERT_EQ(want.size(), positions.size() * V);
  double worst = 0;
  for (size_t k = 0; k < positions.size(); ++k) {
    const double e = RelL2(&sc.logits[positions[k] * V], &want[k * V], V);
    worst = std::max(worst, e);
    ASSERT_LE(e, 1e-4) << "position " << positions[k];
  }
  std::printf("%s %s: %zu positions, worst rel L2 %.2e, greedy %s\n", backend.c_str(), tag.c_str(),
              all.token_ids->size(), worst, r.tokens == greedy ? "identical" : "DIFFERENT");
}

// Text logits with audio spliced, against transformers, on every backend: the short clips
// (goldens.json) and the long ones (long/long.json: 45 s as two chunks in one run, 2.7 s beside
// 29.9 s, and exactly 30 s).
TEST(AudioGolden, LogitsWithAudioMatchTransformers) {
  std::ifstream gf(kDir + "goldens.json");
  const nlohmann::json g = nlohmann::json::parse(gf);
  const nlohmann::json lg = LongGoldens();
  std::map<std::string, std::vector<uint8_t>> wavs;
  for (const auto& clip : lg["clips"]) wavs[clip["clip"]] = WavBytes(LongClipOf(clip).pcm);
  for (const std::string& backend : GoldenBackends()) {
    auto engine =
        LoadForGolden({.model_path = kDir + "model", .backend = backend, .context_capacity = 2048});
    if (!engine) continue;
    for (const auto& pr : g["prompts"]) {
      std::vector<AudioInput> audios;
      for (const auto& c : pr["clips"])
        audios.push_back(AudioInput::File(kDir + "clips/" + c.get<std::string>() + ".wav"));
      CheckLogitsPrompt(*engine, backend, pr, audios,
                        kDir + "logits_" + pr["tag"].get<std::string>() + ".f32");
    }
    if (engine->backend_device_is_cpu() && backend == "vulkan") {
      // Mesa's lavapipe takes ~45 s over the long prompts (its tiny-tower dispatches are slow);
      // the GPU machine runs them (docs/audio.md), lavapipe the short ones and the random towers.
      std::printf("vulkan on a CPU device: long prompts skipped\n");
      continue;
    }
    for (const auto& pr : lg["prompts"]) {
      // The fast CPU backend's tower equals the reference's (FastTowerMatchesTheReference): of the
      // long prompts it runs the two-chunk one only, for CI's time.
      if (backend == "cpu" && pr["tag"] != "long45") continue;
      std::vector<AudioInput> audios;
      for (const auto& c : pr["clips"]) audios.push_back(AudioInput::Bytes(wavs.at(c)));
      CheckLogitsPrompt(*engine, backend, pr, audios,
                        kDir + "long/logits_" + pr["tag"].get<std::string>() + ".f32");
    }
  }
}

}  // namespace
}  // namespace gemma

namespace gemma {
namespace {

// Gemma 4's audio ids (synthetic "tiny": the real 262,144-id vocabulary, a 2-layer audio tower).
constexpr int32_t kAudio = 258881, kBoa = 256000, kEoa = 258883;

std::string Base64(const std::vector<char>& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = uint8_t(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= uint8_t(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) v |= uint8_t(bytes[i + 2]);
    out += k[v >> 18];
    out += k[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? k[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? k[v & 63] : '=';
  }
  return out;
}

class AudioEngine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/audio_tiny");
    Synthesize({.preset = "tiny", .out_dir = *dir_, .seed = 11});
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string* dir_;
};
std::string* AudioEngine::dir_ = nullptr;

// Every part form becomes <|audio>, the clip's soft tokens (41 for the speech clip, as
// transformers' mask gives), <audio|>; bad parts are typed errors naming the part.
TEST_F(AudioEngine, MessagePartsRenderAudioRuns) {
  auto engine = Engine::Load({.model_path = *dir_, .backend = "cpu", .context_capacity = 4096});
  const std::string file = kDir + "clips/speech.wav";
  const std::string b64 = Base64(ReadBytes(file));
  nlohmann::json parts = nlohmann::json::array({
      {{"type", "audio"}, {"path", file}},
      {{"type", "audio"}, {"bytes", b64}},
      {{"type", "audio"}, {"url", "data:audio/wav;base64," + b64}},
      {{"type", "input_audio"}, {"input_audio", {{"data", b64}, {"format", "wav"}}}},
      {{"type", "audio_url"}, {"audio_url", {{"url", "data:audio/wav;base64," + b64}}}},
      {{"type", "text"}, {"text", "Transcribe these."}},
  });
  const Input in = Input::Messages({{{"role", "user"}, {"content", parts}}});
  const std::vector<int32_t> ids = engine->PromptTokens(in);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), kAudio), 5 * 41);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), kBoa), 5);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), kEoa), 5);
  GenerateOptions opt;
  opt.max_new_tokens = 2;
  const Result r = engine->NewSession()->Generate(in, opt);
  EXPECT_EQ(r.telemetry.audios, 5);
  EXPECT_EQ(r.telemetry.audios_encoded, 5);
  auto code = [&](nlohmann::json part) {
    try {
      engine->PromptTokens(Input::Messages({{{"role", "user"}, {"content", {part}}}}));
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::kInternal;
  };
  EXPECT_EQ(code({{"type", "audio"}}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code({{"type", "audio"}, {"url", "https://example.com/a.wav"}}),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code({{"type", "input_audio"}, {"input_audio", {{"data", "@@@"}}}}),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code({{"type", "audio_url"}}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code({{"type", "audio_url"}, {"audio_url", {{"url", "https://example.com/a.wav"}}}}),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code({{"type", "audio"}, {"path", kDir + "clips/tiny.wav"}}),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code({{"type", "audio"}, {"path", kDir + "model/config.json"}}),
            ErrorCode::kUnsupported);
  // Text input: each <|audio|> in the text is a clip; the count must match.
  Input text = Input::Text("<|audio|>Hi");
  EXPECT_THROW(engine->PromptTokens(text), Error);  // no clip given
  text.audios = {AudioInput::File(file)};
  const std::vector<int32_t> t = engine->PromptTokens(text);
  EXPECT_EQ(std::count(t.begin(), t.end(), kAudio), 41);
}

// The soft tokens land on their run: the engine's logits equal a forward pass fed the tower's
// output (the tower itself is checked against transformers above) at the placeholder rows.
TEST_F(AudioEngine, SoftTokensFillTheirRun) {
  auto model = Model::Load(*dir_);
  ASSERT_NE(model->audio(), nullptr) << model->audio_error();
  const media::Audio a = media::LoadAudioFile(kDir + "clips/tone.wav");
  const media::AudioFeatures f = media::ExtractAudioFeatures(a.samples);
  const std::vector<float> soft = ref::EmbedAudio(
      *model->audio(),
      ref::AudioTowerForward(*model->audio(), {f.frames, f.mel.data(), f.mask.data()}),
      f.soft_tokens);
  std::vector<int32_t> ids = {2, 10, 11, kBoa};
  ids.insert(ids.end(), f.soft_tokens, kAudio);
  ids.insert(ids.end(), {kEoa, 12, 13});
  std::vector<const float*> rows(ids.size(), nullptr);
  const int H = model->text().hidden_size;
  for (int i = 0; i < f.soft_tokens; ++i) rows[4 + i] = &soft[static_cast<size_t>(i) * H];
  auto backend = CreateCpuReferenceBackend(*model, {.capacity = 256});
  ForwardResult fr;
  backend->Forward(
      {.tokens = ids, .soft = rows, .mode = OutputMode::kLogits, .all_positions = true}, &fr);
  auto engine = Engine::Load({.model_path = *dir_, .backend = "cpu-ref", .context_capacity = 256});
  Input in = Input::Ids(ids);
  in.audios = {AudioInput::File(kDir + "clips/tone.wav")};
  const ScoreResult s = engine->NewSession()->ScoreInput(in, /*return_logits=*/true);
  ASSERT_EQ(s.logits.size(), fr.logits.size());
  EXPECT_EQ(std::memcmp(s.logits.data(), fr.logits.data(), s.logits.size() * 4), 0);
  // A run whose length does not match the clip is refused.
  in.token_ids->erase(in.token_ids->begin() + 5);
  EXPECT_THROW(engine->NewSession()->ScoreInput(in), Error);
}

// Prefix reuse keys clips by the SHA-256 of their 16 kHz samples: the same clip skips the tower,
// a changed clip re-encodes, and the answer is always a fresh session's.
TEST_F(AudioEngine, SameClipIsReusedChangedClipReencodes) {
  auto engine = Engine::Load({.model_path = *dir_, .backend = "cpu", .context_capacity = 1024});
  auto session = engine->NewSession();
  GenerateOptions opt;
  opt.max_new_tokens = 2;
  auto req = [&](const std::string& clip, int tail) {
    std::vector<int32_t> ids = {2, 10, kBoa};
    ids.insert(ids.end(), 13, kAudio);  // tone and silence: 13 soft tokens each
    ids.push_back(kEoa);
    for (int i = 0; i < tail; ++i) ids.push_back(20 + i);
    Input in = Input::Ids(ids);
    in.audios = {AudioInput::File(kDir + "clips/" + clip + ".wav")};
    return in;
  };
  auto fresh = [&](const Input& in) { return engine->NewSession()->Generate(in, opt).tokens; };
  Result r = session->Generate(req("tone", 1), opt);
  EXPECT_EQ(r.telemetry.audios_encoded, 1);
  r = session->Generate(req("tone", 3), opt);
  EXPECT_EQ(r.telemetry.audios_encoded, 0);
  EXPECT_GE(r.telemetry.reused_tokens, 16);
  r = session->Generate(req("silence", 3), opt);
  EXPECT_EQ(r.telemetry.audios_encoded, 1);
  EXPECT_LE(r.telemetry.reused_tokens, 3);
  EXPECT_EQ(r.tokens, fresh(req("silence", 3)));
}

// Longer than 30 s: 30 s chunks, each through the tower on its own, in one run (750 + 25 tokens
// for 31 s).
TEST_F(AudioEngine, LongClipsAreChunkedIntoOneRun) {
  const std::string path = ::testing::TempDir() + "/tone31.wav";
  {
    // 31 s of a 440 Hz tone, PCM16 mono 16 kHz, written here.
    std::vector<int16_t> pcm(31 * 16000);
    for (size_t i = 0; i < pcm.size(); ++i)
      pcm[i] = static_cast<int16_t>(8000 * std::sin(2 * M_PI * 440 * i / 16000.0));
    const std::vector<uint8_t> wav = WavBytes(pcm);
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(wav.data()), static_cast<std::streamsize>(wav.size()));
  }
  auto engine = Engine::Load({.model_path = *dir_, .backend = "cpu", .context_capacity = 2048});
  Input in = Input::Text("<|audio|>");
  in.audios = {AudioInput::File(path)};
  const std::vector<int32_t> ids = engine->PromptTokens(in);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), kAudio), 775);
  GenerateOptions opt;
  opt.max_new_tokens = 1;
  const Result r = engine->NewSession()->Generate(in, opt);
  EXPECT_EQ(r.telemetry.audios_encoded, 1);
  std::printf("31 s clip: %d prompt tokens, audio tower %.0f ms, decode+features %.0f ms\n",
              r.telemetry.prompt_tokens, r.telemetry.audio_ms, r.telemetry.vision_ms);
}

#ifdef GEMMA_HAVE_CPU_FAST
// The fast backend's tower (its linears) against the reference's, dense and in the QAT layout
// (2-bit audio linears, 4-bit linear_start).
TEST_F(AudioEngine, FastTowerMatchesTheReference) {
  const std::string qat = ::testing::TempDir() + "/audio_tiny_qat";
  Synthesize({.preset = "tiny-qat", .out_dir = qat, .seed = 12});
  const media::Audio a = media::LoadAudioFile(kDir + "clips/speech.wav");
  const media::AudioFeatures f = media::ExtractAudioFeatures(a.samples);
  for (const std::string& dir : {*dir_, qat}) {
    SCOPED_TRACE(dir);
    auto model = Model::Load(dir);
    ASSERT_NE(model->audio(), nullptr) << model->audio_error();
    std::vector<float> r, q;
    CreateCpuReferenceModel(*model)->EncodeAudio({f.frames, f.mel.data(), f.mask.data()}, &r);
    CreateCpuFastModel(*model, 2)->EncodeAudio({f.frames, f.mel.data(), f.mask.data()}, &q);
    ASSERT_EQ(r.size(), q.size());
    EXPECT_EQ(r.size(), static_cast<size_t>(41) * model->text().hidden_size);
    EXPECT_LE(RelL2(q.data(), r.data(), r.size()), 1e-5);
  }
}
#endif

// A model without an audio tower says so.
TEST(AudioEngineErrors, ModelWithoutAudioTower) {
  auto engine =
      Engine::Load({.model_path = std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/vision/model",
                    .backend = "cpu-ref",
                    .context_capacity = 256});
  Input in = Input::Ids({2, 10});
  in.audios = {AudioInput::File(kDir + "clips/tone.wav")};
  try {
    engine->PromptTokens(in);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
  }
}

}  // namespace
}  // namespace gemma

