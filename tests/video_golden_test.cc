// The video path against independent references (tests/goldens/video/):
// - frames.json, from the ffmpeg command run directly (tools/fixtures/video_frames.py): the SHA-256
//   of every decoded frame of each committed video, its frame count and frame rate. Our decoder
//   must return exactly the frame it says it took.
// - goldens.json and the .f32 files, from transformers 5.17 (tools/fixtures/video_goldens.py on
//   those frames): Gemma4VideoProcessor's sampled frame numbers and timestamps (also for many frame
//   counts and rates without a video), its resized frames, the vision tower on sampled frames,
//   Gemma4Processor's prompt ids with the "<|video|>" expansion, and the text model's logits with a
//   video spliced in. Skipped while those goldens are absent.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>

#include "backend/cpu/vision_ops.h"
#include "core/sha256.h"
#include "gemma/engine.h"
#include "golden_util.h"
#include "media/image.h"
#include "media/image_processor.h"
#include "media/video.h"
#include "model/model.h"

namespace gemma {
namespace {

const std::string kDir = std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/video/";

bool HaveFfmpeg() { return std::system("ffmpeg -version > /dev/null 2>&1") == 0; }

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

std::string Hex(const std::vector<uint8_t>& bytes) {
  return Sha256::Hex(
      Sha256::Of(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size())));
}

// transformers' arguments as our options. num_frames is max_frames. fps counts in transformers
// only on a processor whose num_frames is None (its preprocess fills num_frames from the processor
// otherwise, and sample_frames then ignores fps or refuses both): that is our fps rule with no
// frame limit, as transformers has none then.
media::VideoOptions Options(const nlohmann::json& kwargs,
                            const nlohmann::json& processor = nlohmann::json::object()) {
  media::VideoOptions o;
  if (processor.contains("num_frames") && processor["num_frames"].is_null() &&
      kwargs.contains("fps")) {
    o.fps = kwargs["fps"].get<double>();
    o.max_frames = INT_MAX / 2;
  } else if (kwargs.contains("num_frames") && kwargs["num_frames"].is_number()) {
    o.max_frames = kwargs["num_frames"].get<int>();
  }
  return o;
}

#define REQUIRE_TRANSFORMERS_GOLDENS()                                                       \
  if (!std::filesystem::exists(kDir + "goldens.json"))                                       \
    GTEST_SKIP() << "no transformers video goldens in " << kDir                              \
                 << " yet: tools/fixtures/video_goldens.py makes them (docs/multimodal.md)"; \
  if (!HaveFfmpeg()) GTEST_SKIP() << "ffmpeg is not installed"

// Every frame of every committed video, through our decoder, is the frame the ffmpeg command gives
// for that number; the frame count and rate are ffprobe's.
TEST(VideoGolden, FramesAreTheFfmpegCommandsFrames) {
  if (!HaveFfmpeg()) GTEST_SKIP() << "ffmpeg is not installed";
  const nlohmann::json g = ReadJson(kDir + "frames.json");
  ASSERT_GE(g["videos"].size(), 3u);
  for (const auto& [name, m] : g["videos"].items()) {
    SCOPED_TRACE(name);
    const auto want = m["frame_sha256"].get<std::vector<std::string>>();
    for (const media::VideoOptions& o :
         {media::VideoOptions{}, media::VideoOptions{.max_frames = INT_MAX / 2}}) {
      const media::VideoFrames v = media::DecodeVideo(kDir + "videos/" + name, o);
      EXPECT_EQ(v.total_frames, m["frames"].get<int>());
      EXPECT_DOUBLE_EQ(v.video_fps, m["fps"].get<double>());
      ASSERT_EQ(v.frames.size(), v.indices.size());
      ASSERT_EQ(v.frames.size(), std::min<size_t>(want.size(), o.max_frames));
      for (size_t k = 0; k < v.frames.size(); ++k) {
        ASSERT_EQ(v.frames[k].width, m["width"].get<int>());
        ASSERT_EQ(v.frames[k].height, m["height"].get<int>());
        ASSERT_EQ(Hex(v.frames[k].rgb), want[v.indices[k]]) << "frame " << v.indices[k];
      }
    }
  }
}

// The sampling rule on transformers' probes: frame numbers, timestamps, mm:ss strings.
TEST(VideoGolden, SamplingMatchesTransformers) {
  REQUIRE_TRANSFORMERS_GOLDENS();
  const nlohmann::json g = ReadJson(kDir + "goldens.json");
  ASSERT_TRUE(g.contains("probes") && g["probes"].is_object()) << "the probes section failed";
  int compared = 0, refused = 0;
  for (const auto& c : g["probes"]["cases"]) {
    const int n = c["total_num_frames"];
    const double fps = c["fps"];
    SCOPED_TRACE(std::to_string(n) + " frames at " + std::to_string(fps) + " fps, " +
                 c["processor"].dump() + " " + c["kwargs"].dump());
    if (c.contains("error")) {
      ++refused;  // e.g. more frames wanted than the video has: we take every frame instead
      continue;
    }
    ASSERT_TRUE(c["frames_follow_indices"].get<bool>());
    const std::vector<int> want = c["indices"].get<std::vector<int>>();
    EXPECT_EQ(media::SampleFrameIndices(n, fps, Options(c["kwargs"], c["processor"])), want);
    for (size_t k = 0; k < want.size(); ++k) {
      const double t = media::FrameTimestamp(want[k], fps);
      EXPECT_EQ(static_cast<float>(t), static_cast<float>(c["timestamps"][k].get<double>()))
          << "frame " << want[k];
      EXPECT_EQ(media::VideoTimestamp(t), c["timestamp_strings"][k].get<std::string>());
    }
    ++compared;
  }
  std::printf("sampling: %d probes identical, %d refused by transformers\n", compared, refused);
  EXPECT_GT(compared, 20);
}

// Each committed video as transformers processed it: the same frames taken (decoded pixels
// identical), the same timestamps, and each frame resized to the same uint8 pixels.
TEST(VideoGolden, FramesAndResizeMatchTransformers) {
  REQUIRE_TRANSFORMERS_GOLDENS();
  const nlohmann::json g = ReadJson(kDir + "goldens.json");
  ASSERT_TRUE(g.contains("videos") && !g["videos"].empty()) << "the videos section failed";
  for (const auto& rec : g["videos"]) {
    const std::string tag = rec["tag"];
    SCOPED_TRACE(tag);
    const media::VideoFrames v = media::DecodeVideo(
        kDir + "videos/" + rec["video"].get<std::string>(), Options(rec["kwargs"]));
    EXPECT_EQ(v.total_frames, rec["metadata"]["total_num_frames"].get<int>());
    if (rec.contains("error")) {
      // transformers refuses (fewer frames than num_frames); we take every frame.
      EXPECT_EQ(v.frames.size(), static_cast<size_t>(v.total_frames)) << rec["error"];
      std::printf("%s: transformers refuses (%s); we take all %zu frames\n", tag.c_str(),
                  rec["error"].get<std::string>().c_str(), v.frames.size());
      continue;
    }
    ASSERT_EQ(v.indices, rec["indices"].get<std::vector<int>>());
    ASSERT_EQ(v.frames.size(), v.indices.size());
    for (size_t k = 0; k < v.frames.size(); ++k) {
      SCOPED_TRACE("frame " + std::to_string(v.indices[k]));
      EXPECT_EQ(media::VideoTimestamp(v.timestamps[k]),
                rec["timestamp_strings"][k].get<std::string>());
      EXPECT_EQ(Hex(v.frames[k].rgb), rec["decoded_sha256"][k].get<std::string>());
      const media::PatchedImage p = media::PreprocessImage(v.frames[k], 70);
      EXPECT_EQ(p.height, rec["resized_height"].get<int>());
      EXPECT_EQ(p.width, rec["resized_width"].get<int>());
      EXPECT_EQ(p.soft_tokens, rec["soft_tokens_per_frame"].get<int>());
      EXPECT_EQ(Hex(p.resized.rgb), rec["resized_sha256"][k].get<std::string>());
    }
    std::printf("%s: %zu frames of %d, identical frames, timestamps and resize (%dx%d)\n",
                tag.c_str(), v.frames.size(), v.total_frames, rec["resized_width"].get<int>(),
                rec["resized_height"].get<int>());
  }
}

// The soft tokens of sampled frames (first two, middle, last) through the committed vision tower.
TEST(VideoGolden, TowerMatchesTransformers) {
  REQUIRE_TRANSFORMERS_GOLDENS();
  const nlohmann::json g = ReadJson(kDir + "goldens.json");
  ASSERT_TRUE(g.contains("towers") && g["towers"].is_array()) << "the towers section failed";
  auto model = Model::Load(kDir + "model");
  ASSERT_NE(model->vision(), nullptr) << model->vision_error();
  const VisionTower& t = *model->vision();
  const int H = model->text().hidden_size;
  std::map<std::string, nlohmann::json> recs;
  for (const auto& r : g["videos"]) recs[r["tag"]] = r;
  for (const auto& tw : g["towers"]) {
    const std::string tag = tw["tag"];
    SCOPED_TRACE(tag);
    const nlohmann::json& rec = recs.at(tag);
    const media::VideoFrames v = media::DecodeVideo(
        kDir + "videos/" + rec["video"].get<std::string>(), Options(rec["kwargs"]));
    const std::vector<float> want = ReadF32(kDir + "tower_" + tag + ".f32");
    const std::vector<int> pick = tw["frames"].get<std::vector<int>>();
    const int n = rec["soft_tokens_per_frame"];
    ASSERT_EQ(want.size(), pick.size() * n * H);
    double worst = 0;
    for (size_t j = 0; j < pick.size(); ++j) {
      const media::PatchedImage p = media::PreprocessImage(v.frames.at(pick[j]), 70);
      const VisionPatches in{p.patches_h, p.patches_w, p.pixels.data()};
      const std::vector<float> soft = ref::EmbedVision(t, ref::VisionTowerForward(t, in), n);
      ASSERT_EQ(soft.size(), static_cast<size_t>(n * H));
      const float* w = &want[j * n * H];
      worst = std::max(worst, RelL2(soft.data(), w, soft.size()));
      EXPECT_LE(RelL2(soft.data(), w, soft.size()), 1e-4) << "frame " << pick[j];
      for (int i = 0; i < n; ++i)
        ASSERT_LE(RelL2(&soft[i * H], &w[i * H], H), 1e-4) << "frame " << pick[j] << " token " << i;
    }
    std::printf("tower %s: frames %s, worst rel L2 %.2e\n", tag.c_str(),
                tw["frames"].dump().c_str(), worst);
  }
}

EngineOptions EngineFor(const std::string& backend) {
  EngineOptions o;
  o.model_path = kDir + "model";  // its tokenizer.json is models/tiny-trained's
  o.backend = backend;
  o.context_capacity = 8192;
  return o;
}

Input VideoPrompt(const nlohmann::json& pr) {
  Input in = Input::Text(pr["text"]);
  in.add_bos = false;  // the text starts with <bos>, as transformers was given it
  for (const auto& name : pr["videos"]) {
    VideoInput v = VideoInput::File(kDir + "videos/" + name.get<std::string>(), 70);
    const media::VideoOptions o = Options(pr["kwargs"]);
    v.fps = o.fps;
    v.max_frames = o.max_frames;
    in.videos.push_back(v);
  }
  return in;
}

// Gemma4Processor's ids for prompt text with "<|video|>": our expansion (timestamps, runs) and
// tokenization give the same ids.
TEST(VideoGolden, PromptIdsMatchTransformers) {
  REQUIRE_TRANSFORMERS_GOLDENS();
  const nlohmann::json g = ReadJson(kDir + "goldens.json");
  ASSERT_TRUE(g.contains("prompts") && g["prompts"].is_array()) << "the prompts section failed";
  auto engine = Engine::Load(EngineFor("cpu-ref"));
  ASSERT_TRUE(engine->has_tokenizer());
  int compared = 0;
  for (const auto& pr : g["prompts"]) {
    const std::string tag = pr["tag"];
    SCOPED_TRACE(tag);
    if (pr.contains("error")) {
      std::printf("%s: transformers refuses (%s)\n", tag.c_str(),
                  pr["error"].get<std::string>().c_str());
      continue;
    }
    const std::vector<int32_t> ids = engine->PromptTokens(VideoPrompt(pr));
    const std::vector<int32_t> want = pr["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(ids.size(), want.size());
    size_t first = 0;
    while (first < std::min(ids.size(), want.size()) && ids[first] == want[first]) ++first;
    EXPECT_EQ(ids, want) << "first difference at " << first << ": "
                         << engine->Detokenize(std::vector<int32_t>(
                                ids.begin() + std::min(first, ids.size()),
                                ids.begin() + std::min(first + 12, ids.size())))
                         << " vs "
                         << engine->Detokenize(std::vector<int32_t>(
                                want.begin() + std::min(first, want.size()),
                                want.begin() + std::min(first + 12, want.size())));
    std::printf("%s: %zu ids %s\n", tag.c_str(), want.size(),
                ids == want ? "identical" : "DIFFERENT");
    ++compared;
  }
  EXPECT_GE(compared, 2);
}

// A video given as bytes (VideoInput::Bytes, a data: URL part, a base64 "bytes" part, vLLM's
// "video_url" part) expands to the ids the same file gives by path.
TEST(VideoGolden, BytesDataUrlsAndPathsGiveTheSameIds) {
  if (!HaveFfmpeg()) GTEST_SKIP() << "ffmpeg is not installed";
  auto engine = Engine::Load(EngineFor("cpu-ref"));
  const std::string file = kDir + "videos/d_testsrc_64x48_8fps_2s.mp4";
  std::ifstream f(file, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)),
                                   std::istreambuf_iterator<char>());
  ASSERT_FALSE(bytes.empty());
  Input by_path = Input::Text("<bos>Watch <|video|> closely.");
  by_path.add_bos = false;
  by_path.videos = {VideoInput::File(file)};
  Input by_bytes = by_path;
  by_bytes.videos = {VideoInput::Bytes(bytes)};
  const std::vector<int32_t> want = engine->PromptTokens(by_path);
  EXPECT_EQ(engine->PromptTokens(by_bytes), want);
  const std::string b64 = media::EncodeBase64(bytes);
  const nlohmann::json parts[] = {
      {{"type", "video"}, {"path", file}},
      {{"type", "video"}, {"url", "data:video/mp4;base64," + b64}},
      {{"type", "video"}, {"bytes", b64}},
      {{"type", "video_url"}, {"video_url", {{"url", "data:video/mp4;base64," + b64}}}},
  };
  std::vector<int32_t> first;
  for (const nlohmann::json& part : parts) {
    const nlohmann::json msgs = {
        {{"role", "user"}, {"content", {part, {{"type", "text"}, {"text", "What happens?"}}}}}};
    const std::vector<int32_t> ids = engine->PromptTokens(Input::Messages(msgs));
    if (first.empty()) first = ids;
    EXPECT_EQ(ids, first) << part.dump().substr(0, 80);
  }
  // The messages' video run is the text's: the same count of its most frequent id (the frames'
  // soft-token placeholder).
  std::map<int32_t, int> counts;
  for (int32_t id : want) ++counts[id];
  const auto soft = std::max_element(counts.begin(), counts.end(),
                                     [](auto& a, auto& b) { return a.second < b.second; });
  EXPECT_GT(soft->second, 50);
  EXPECT_EQ(std::count(first.begin(), first.end(), soft->first), soft->second);
  const nlohmann::json remote = {
      {{"role", "user"},
       {"content", {{{"type", "video_url"}, {"video_url", {{"url", "https://x/v.mp4"}}}}}}}};
  EXPECT_THROW(engine->PromptTokens(Input::Messages(remote)), Error);
}

// Greedy tokens and logits (at the end of each frame and at the prompt's end and continuation) with
// a video spliced in, on every backend.
TEST(VideoGolden, LogitsWithVideoMatchTransformers) {
  REQUIRE_TRANSFORMERS_GOLDENS();
  const nlohmann::json g = ReadJson(kDir + "goldens.json");
  ASSERT_TRUE(g.contains("prompts") && g["prompts"].is_array()) << "the prompts section failed";
  int compared = 0;
  for (const std::string& backend : GoldenBackends()) {
    auto engine = LoadForGolden(EngineFor(backend));
    if (!engine) continue;
    for (const auto& pr : g["prompts"]) {
      if (!pr.contains("greedy")) continue;
      const std::string tag = pr["tag"];
      SCOPED_TRACE(backend + " " + tag);
      const Input in = VideoPrompt(pr);
      const std::vector<int32_t> ids = pr["ids"].get<std::vector<int32_t>>();
      const std::vector<int32_t> greedy = pr["greedy"].get<std::vector<int32_t>>();
      GenerateOptions opt;
      opt.max_new_tokens = static_cast<int>(greedy.size());
      opt.ignore_eos = true;
      const Result r = engine->NewSession()->Generate(in, opt);
      EXPECT_EQ(r.tokens, greedy);
      std::vector<int32_t> full = ids;
      full.insert(full.end(), greedy.begin(), greedy.end() - 1);
      Input all = Input::Ids(full);
      all.videos = in.videos;
      const ScoreResult s = engine->NewSession()->ScoreInput(all, /*return_logits=*/true);
      const int V = engine->vocab_size();
      ASSERT_EQ(s.logits.size(), full.size() * V);
      const std::vector<int> positions = pr["logit_positions"].get<std::vector<int>>();
      const std::vector<float> want = ReadF32(kDir + "logits_" + tag + ".f32");
      ASSERT_EQ(want.size(), positions.size() * V);
      double worst = 0;
      for (size_t j = 0; j < positions.size(); ++j) {
        const double e = RelL2(&s.logits[static_cast<size_t>(positions[j]) * V], &want[j * V], V);
        worst = std::max(worst, e);
        EXPECT_LE(e, 1e-4) << "position " << positions[j];
      }
      std::printf("%s %s: %zu ids, %zu positions compared, worst rel L2 %.2e, greedy %s\n",
                  backend.c_str(), tag.c_str(), ids.size(), positions.size(), worst,
                  r.tokens == greedy ? "identical" : "DIFFERENT");
      ++compared;
    }
  }
  EXPECT_GE(compared, 1);
}

}  // namespace
}  // namespace gemma
