// The audio path against transformers 5.17 float32 (tools/fixtures/audio_goldens.py):
// Gemma4AudioFeatureExtractor's log-mel features and masks for five clips (espeak-ng speech, a
// tone, silence, 0.1 s and 0.01 s of speech), and a tiny random audio tower (2 conformer layers,
// clipped linears, bf16 weights) with embed_audio: its outputs at the valid frames.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/cpu/audio_ops.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "gemma/error.h"
#include "media/audio.h"
#include "media/audio_features.h"
#include "model/model.h"

namespace gemma {
namespace {

const std::string kDir = std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/audio/";
const char* kClips[] = {"speech", "tone", "silence", "short", "tiny"};

std::vector<char> ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(f)), {});
}

std::vector<float> ReadF32(const std::string& path) {
  const std::vector<char> b = ReadBytes(path);
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

bool Exists(const std::string& path) { return std::ifstream(path).good(); }

double RelL2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

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

}  // namespace
}  // namespace gemma
