// E2B's towers at full size: the vision tower (16 layers of 768, 12 heads) with embed_vision into
// 1,536 and the audio tower (12 conformer layers of 1,024) with embed_audio, in bf16 (synth preset
// e2b-towers) and in the mobile-QAT layout (e2b-towers-qat: int8 vision, int2/int4 audio).
// - Against transformers 5.17 float32 (tools/fixtures/tower_goldens.py, run on the GPU machine on
//   checkpoints the same synth wrote there): every soft token within 1e-4 relative L2, on each CPU
//   backend. Skipped until tests/goldens/towers/ holds those goldens.
// - The fast backend against the reference at full size (no goldens needed).
// All label "slow" (the reference backend takes minutes at these sizes): bench/run_slow_tests.sh,
// or `ctest -R Tower`.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "golden_util.h"
#include "long_audio.h"
#include "media/audio.h"
#include "media/audio_features.h"
#include "media/image_processor.h"
#include "model/model.h"
#include "model/synth.h"
#ifdef GEMMA_HAVE_CPU_FAST
#include "backend/cpu/fast/cpu_fast_backend.h"
#endif
#ifdef GEMMA_HAVE_VULKAN
#include "backend/vulkan/vulkan_backend.h"
#endif

namespace gemma {
namespace {

const std::string kSrc = std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/";
const std::string kDir = kSrc + "towers/";

// The checkpoints, written once per test binary (~0.9 GB each; the QAT one is smaller).
const Model& Towers(bool qat) {
  static std::unique_ptr<Model> models[2];
  std::unique_ptr<Model>& m = models[qat ? 1 : 0];
  if (!m) {
    const std::string preset = qat ? "e2b-towers-qat" : "e2b-towers";
    const std::string dir = ::testing::TempDir() + "/" + preset;
    Synthesize({.preset = preset, .out_dir = dir});
    m = Model::Load(dir);
  }
  return *m;
}

bool HaveGoldens(bool qat) {
  return std::ifstream(kDir + (qat ? "qat/" : "") + "goldens.json").good();
}

nlohmann::json Goldens(bool qat) {
  std::ifstream f(kDir + (qat ? "qat/" : "") + "goldens.json");
  return nlohmann::json::parse(f);
}

// (null: "vulkan" without a usable device)
std::shared_ptr<BackendModel> Backend(const Model& model, const std::string& name) {
#ifdef GEMMA_HAVE_CPU_FAST
  if (name == "cpu") return CreateCpuFastModel(model, 2);
#endif
#ifdef GEMMA_HAVE_VULKAN
  if (name == "vulkan") {
    try {
      return CreateVulkanModel(model, {});
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kDevice) return nullptr;
      throw;
    }
  }
#endif
  return CreateCpuReferenceModel(model);
}

// Every soft token within 1e-4 relative L2 of transformers' (the bound for the tower).
void ExpectTokens(const std::vector<float>& got, const std::vector<float>& want, int width,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const size_t n = want.size() / width;
  double worst = 0;
  for (size_t i = 0; i < n; ++i)
    worst = std::max(worst, RelL2(&got[i * width], &want[i * width], width));
  const double all = RelL2(got.data(), want.data(), want.size());
  std::printf("%s: %zu tokens, rel L2 %.2e, worst token %.2e\n", what.c_str(), n, all, worst);
  EXPECT_LE(worst, 1e-4) << what;
}

void CheckVision(bool qat, const std::string& backend, int max_budget, int min_budget = 0) {
  if (!HaveGoldens(qat)) GTEST_SKIP() << "no goldens yet: tools/fixtures/tower_goldens.py";
  const Model& model = Towers(qat);
  ASSERT_NE(model.vision(), nullptr) << model.vision_error();
  const VisionConfig& vc = model.vision()->config;
  ASSERT_EQ(vc.num_layers, 16);
  ASSERT_EQ(vc.hidden_size, 768);
  if (qat) ASSERT_EQ(model.vision()->layers[0].q.lin.kind, WeightKind::kQ8);
  const nlohmann::json g = Goldens(qat);
  ASSERT_EQ(g["load_eager"].size(), 0u) << g["load_eager"].dump();
  auto bm = Backend(model, backend);
  if (!bm) GTEST_SKIP() << "SKIPPED: no usable Vulkan device";
  int cases = 0;
  for (const auto& c : g["vision"]) {
    const int budget = c["budget"];
    if (budget > max_budget || budget < min_budget) continue;
    const std::string tag = c["tag"];
    SCOPED_TRACE(tag);
    const media::PatchedImage p = media::PreprocessImage(
        media::LoadImageFile(kSrc + "vision/images/" + c["image"].get<std::string>()), budget);
    ASSERT_EQ(p.soft_tokens, c["soft_tokens"].get<int>());
    std::vector<float> soft;
    bm->EncodeImage({p.patches_h, p.patches_w, p.pixels.data()}, &soft);
    ExpectTokens(soft, ReadF32(kDir + (qat ? "qat/" : "") + "tower_" + tag + ".f32"),
                 model.text().hidden_size,
                 std::string(qat ? "qat " : "") + backend + " vision " + tag);
    ++cases;
  }
  EXPECT_GT(cases, 0);
}

void CheckAudio(bool qat, const std::string& backend) {
  if (!HaveGoldens(qat)) GTEST_SKIP() << "no goldens yet: tools/fixtures/tower_goldens.py";
  const Model& model = Towers(qat);
  ASSERT_NE(model.audio(), nullptr) << model.audio_error();
  ASSERT_EQ(model.audio()->config.num_layers, 12);
  const nlohmann::json g = Goldens(qat);
  ASSERT_EQ(g["load_sdpa"].size(), 0u) << g["load_sdpa"].dump();
  auto bm = Backend(model, backend);
  if (!bm) GTEST_SKIP() << "SKIPPED: no usable Vulkan device";
  ASSERT_GT(g["audio"].size(), 0u);
  for (const auto& c : g["audio"]) {
    const std::string clip = c["clip"];
    SCOPED_TRACE(clip);
    // The engine's own front end (bit-exact with the feature extractor: audio_golden_test).
    const media::Audio a = media::LoadAudioFile(kSrc + "audio/clips/" + clip + ".wav");
    const media::AudioFeatures f = media::ExtractAudioFeatures(a.samples);
    ASSERT_EQ(f.soft_tokens, c["tokens"].get<int>());
    std::vector<float> soft;
    bm->EncodeAudio({f.frames, f.mel.data(), f.mask.data()}, &soft);
    ExpectTokens(soft, ReadF32(kDir + (qat ? "qat/" : "") + "atower_" + clip + ".f32"),
                 model.text().hidden_size,
                 std::string(qat ? "qat " : "") + backend + " audio " + clip);
  }
  // The clip lengths (long.json): 0.1 s, and 2.7, 29.9, 30 and 45 s made from the speech
  // clip (two 30 s chunks for 45 s, each through the tower alone), and the speech saturated
  // ("clipped"); the soft tokens at the rows kept.
  std::ifstream lf(kDir + (qat ? "qat/" : "") + "long.json");
  ASSERT_TRUE(lf.good()) << "no long-clip goldens: tower_goldens.py --long";
  const nlohmann::json lg = nlohmann::json::parse(lf);
  ASSERT_EQ(lg["load_sdpa"].size(), 0u) << lg["load_sdpa"].dump();
  const int H = model.text().hidden_size;
  for (const auto& c : lg["audio"]) {
    const std::string clip = c["clip"];
    SCOPED_TRACE(clip);
    const std::vector<float> samples =
        clip == "short"
            ? media::LoadAudioFile(kSrc + "audio/clips/short.wav").samples
            : MakeLongClip(kSrc + "audio/clips/speech.wav", clip, c["samples"].get<int>()).samples;
    ASSERT_EQ(samples.size(), c["samples"].get<size_t>());
    const media::PreparedAudio p = media::PrepareAudio(samples, clip);
    ASSERT_EQ(p.soft_tokens, c["tokens"].get<int>());
    std::vector<float> all, soft;
    for (const media::AudioFeatures& f : p.chunks) {
      bm->EncodeAudio({f.frames, f.mel.data(), f.mask.data()}, &soft);
      all.insert(all.end(), soft.begin(), soft.end());
    }
    std::vector<float> kept;
    for (int r : c["rows"].get<std::vector<int>>())
      kept.insert(kept.end(), all.begin() + static_cast<size_t>(r) * H,
                  all.begin() + static_cast<size_t>(r + 1) * H);
    ExpectTokens(kept, ReadF32(kDir + (qat ? "qat/" : "") + "along_" + clip + ".f32"), H,
                 std::string(qat ? "qat " : "") + backend + " audio " + clip);
  }
}

#ifdef GEMMA_HAVE_CPU_FAST
TEST(TowerGolden, VisionFast) { CheckVision(false, "cpu", 1 << 20); }
TEST(TowerGolden, AudioFast) { CheckAudio(false, "cpu"); }
TEST(TowerGolden, QatVisionFast) { CheckVision(true, "cpu", 1 << 20); }
TEST(TowerGolden, QatAudioFast) { CheckAudio(true, "cpu"); }

// The fast backend's towers against the reference's at full size: a 300 x 200 image at budget 70
// and 4 s of speech, bf16 and QAT (the tiny towers' version: audio_golden_test,
// vision_golden_test).
TEST(TowerFullSize, FastMatchesReference) {
  const media::PatchedImage p =
      media::PreprocessImage(media::LoadImageFile(kSrc + "vision/images/photo_300x200.png"), 70);
  const media::AudioFeatures f =
      media::ExtractAudioFeatures(media::LoadAudioFile(kSrc + "audio/clips/speech.wav").samples);
  for (bool qat : {false, true}) {
    SCOPED_TRACE(qat ? "e2b-towers-qat" : "e2b-towers");
    const Model& model = Towers(qat);
    auto ref = CreateCpuReferenceModel(model);
    auto fast = CreateCpuFastModel(model, 2);
    std::vector<float> a, b;
    ref->EncodeImage({p.patches_h, p.patches_w, p.pixels.data()}, &a);
    fast->EncodeImage({p.patches_h, p.patches_w, p.pixels.data()}, &b);
    ExpectTokens(b, a, model.text().hidden_size,
                 std::string(qat ? "qat " : "") + "vision fast vs ref");
    ref->EncodeAudio({f.frames, f.mel.data(), f.mask.data()}, &a);
    fast->EncodeAudio({f.frames, f.mel.data(), f.mask.data()}, &b);
    ExpectTokens(b, a, model.text().hidden_size,
                 std::string(qat ? "qat " : "") + "audio fast vs ref");
  }
}
#endif
#ifdef GEMMA_HAVE_VULKAN
TEST(TowerGolden, VisionVulkan) { CheckVision(false, "vulkan", 1 << 20); }
TEST(TowerGolden, AudioVulkan) { CheckAudio(false, "vulkan"); }
TEST(TowerGolden, QatVisionVulkan) { CheckVision(true, "vulkan", 1 << 20); }
TEST(TowerGolden, QatAudioVulkan) { CheckAudio(true, "vulkan"); }
#endif

TEST(TowerGolden, VisionReference) { CheckVision(false, "cpu-ref", 1 << 20); }
TEST(TowerGolden, AudioReference) { CheckAudio(false, "cpu-ref"); }
TEST(TowerGolden, QatVisionReference) { CheckVision(true, "cpu-ref", 1 << 20); }
TEST(TowerGolden, QatAudioReference) { CheckAudio(true, "cpu-ref"); }

}  // namespace
}  // namespace gemma
