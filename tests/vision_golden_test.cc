// The vision path against transformers 5.17 float32 (tools/fixtures/vision_goldens.py): a tiny
// random Gemma4ForConditionalGeneration (2-layer ViT with clipped linears, 5-layer text model with
// PLE, KV sharing and a double-wide MLP), its tower outputs for five images (wide, 1x500 strip,
// alpha dropped, tall, budget 280) and the text logits with one and two images spliced in.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/cpu/vision_ops.h"
#include "gemma/engine.h"
#include "golden_util.h"
#include "media/image_processor.h"
#include "model/model.h"

namespace gemma {
namespace {

const std::string kDir = std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/vision/";

nlohmann::json Goldens() {
  std::ifstream f(kDir + "goldens.json");
  return nlohmann::json::parse(f);
}

media::PatchedImage Prep(const std::string& image, int budget) {
  return media::PreprocessImage(media::LoadImageFile(kDir + "images/" + image), budget);
}

TEST(VisionGolden, TowerMatchesTransformers) {
  auto model = Model::Load(kDir + "model");
  ASSERT_NE(model->vision(), nullptr) << model->vision_error();
  const VisionTower& t = *model->vision();
  const nlohmann::json g = Goldens();
  ASSERT_EQ(g["tower"].size(), 5u);
  for (const auto& c : g["tower"]) {
    const std::string tag = c["tag"];
    SCOPED_TRACE(tag);
    const media::PatchedImage p = Prep(c["image"], c["budget"]);
    ASSERT_EQ(p.soft_tokens, c["soft_tokens"].get<int>());
    const VisionPatches in{p.patches_h, p.patches_w, p.pixels.data()};
    const std::vector<float> pooled = ref::VisionTowerForward(t, in);
    const std::vector<float> want_pooled = ReadF32(kDir + "vision_" + tag + ".f32");
    ASSERT_EQ(pooled.size(), want_pooled.size());
    EXPECT_LE(RelL2(pooled.data(), want_pooled.data(), pooled.size()), 1e-4);
    const std::vector<float> soft = ref::EmbedVision(t, pooled, p.soft_tokens);
    const std::vector<float> want = ReadF32(kDir + "tower_" + tag + ".f32");
    ASSERT_EQ(soft.size(), want.size());
    EXPECT_LE(RelL2(soft.data(), want.data(), soft.size()), 1e-4);
    std::printf("tower %s: rel L2 pooled %.2e, soft tokens %.2e\n", tag.c_str(),
                RelL2(pooled.data(), want_pooled.data(), pooled.size()),
                RelL2(soft.data(), want.data(), soft.size()));
    // Per soft token too: no token may hide behind the whole image's norm.
    const int H = model->text().hidden_size;
    for (int i = 0; i < p.soft_tokens; ++i)
      ASSERT_LE(RelL2(&soft[i * H], &want[i * H], H), 1e-4) << "soft token " << i;
  }
}

// Logits at every position of prompt + greedy[:-1] through the engine's own splicing (Input ids
// with the placeholder runs + images) and identical greedy continuations, on every backend.
TEST(VisionGolden, LogitsWithImagesMatchTransformers) {
  const nlohmann::json g = Goldens();
  for (const std::string& backend : GoldenBackends()) {
    auto engine =
        LoadForGolden({.model_path = kDir + "model", .backend = backend, .context_capacity = 1024});
    if (!engine) continue;
    for (const auto& pr : g["prompts"]) {
      const std::string tag = pr["tag"];
      SCOPED_TRACE(backend + " " + tag);
      std::vector<int32_t> ids = pr["ids"].get<std::vector<int32_t>>();
      const std::vector<int32_t> greedy = pr["greedy"].get<std::vector<int32_t>>();
      Input in = Input::Ids(ids);
      for (size_t i = 0; i < pr["images"].size(); ++i) {
        in.images.push_back(ImageInput::File(kDir + "images/" + pr["images"][i].get<std::string>(),
                                             pr["budgets"][i].get<int>()));
      }
      auto session = engine->NewSession();
      GenerateOptions opt;
      opt.max_new_tokens = static_cast<int>(greedy.size());
      opt.ignore_eos = true;
      const Result r = session->Generate(in, opt);
      EXPECT_EQ(r.tokens, greedy);

      std::vector<int32_t> full = ids;
      full.insert(full.end(), greedy.begin(), greedy.end() - 1);
      Input all = in;
      all.token_ids = full;
      const ScoreResult s = session->ScoreInput(all, /*return_logits=*/true);
      const std::vector<float> want = ReadF32(kDir + "logits_" + tag + ".f32");
      ASSERT_EQ(s.logits.size(), want.size());
      const int V = engine->vocab_size();
      double worst = 0;
      for (size_t pos = 0; pos < full.size(); ++pos) {
        const double e = RelL2(&s.logits[pos * V], &want[pos * V], V);
        worst = std::max(worst, e);
        ASSERT_LE(e, 1e-4) << "position " << pos;
      }
      std::printf("%s %s: %zu positions, worst rel L2 %.2e, greedy %s\n", backend.c_str(),
                  tag.c_str(), full.size(), worst, r.tokens == greedy ? "identical" : "DIFFERENT");
    }
  }
}

}  // namespace
}  // namespace gemma

namespace gemma {
namespace {

// Prefix reuse keys images by their digest: the same image in a follow-up request skips the
// tower; a changed image, budget or order re-encodes from the first differing image.
TEST(VisionReuse, SameImageSkipsTheTowerChangedImageReencodes) {
  auto engine =
      Engine::Load({.model_path = kDir + "model", .backend = "cpu-ref", .context_capacity = 2048});
  auto session = engine->NewSession();
  GenerateOptions opt;
  opt.max_new_tokens = 2;
  const std::string a = kDir + "images/photo_300x200.png", b = kDir + "images/alpha_120x80.png";
  // No tokenizer in this fixture: token-id prompts with the runs expanded by hand.
  const int boi = 501, img = 500, eoi = 502;
  auto ids = [&](int n1, int n2, int tail) {
    std::vector<int32_t> v = {2, 10, 11, boi};
    v.insert(v.end(), n1, img);
    v.insert(v.end(), {eoi, 12, boi});
    v.insert(v.end(), n2, img);
    v.insert(v.end(), {eoi, 13});
    for (int i = 0; i < tail; ++i) v.push_back(20 + i);
    return v;
  };
  auto req = [&](const std::string& i1, int b1, const std::string& i2, int tail) {
    Input in = Input::Ids(ids(b1 == 70 ? 60 : 126, 60, tail));
    in.images = {ImageInput::File(i1, b1), ImageInput::File(i2, 70)};
    return in;
  };
  Result r = session->Generate(req(a, 70, b, 1), opt);
  EXPECT_EQ(r.telemetry.images, 2);
  EXPECT_EQ(r.telemetry.images_encoded, 2);
  const std::vector<int32_t> first = r.tokens;
  // The same images and more text: both reused.
  r = session->Generate(req(a, 70, b, 3), opt);
  EXPECT_EQ(r.telemetry.images_encoded, 0);
  EXPECT_GT(r.telemetry.reused_tokens, 120);
  // What a fresh session answers: reuse must never change it.
  auto fresh = [&](const Input& in) { return engine->NewSession()->Generate(in, opt).tokens; };
  // The second image changed (same size, other pixels): the prefix ends before it (this model's
  // sliding window of 16 makes a longer rewind restart from 0, so the first may be re-encoded).
  const Input changed = req(a, 70, kDir + "images/palette_60x40.png", 3);
  r = session->Generate(changed, opt);
  EXPECT_GE(r.telemetry.images_encoded, 1);
  EXPECT_LE(r.telemetry.reused_tokens, 67);
  EXPECT_EQ(r.tokens, fresh(changed));
  // The same request again: nothing to encode.
  r = session->Generate(changed, opt);
  EXPECT_EQ(r.telemetry.images_encoded, 0);
  // Swapped order: everything from the first image on is re-encoded.
  const Input swapped = req(b, 70, a, 3);
  r = session->Generate(swapped, opt);
  EXPECT_EQ(r.telemetry.images_encoded, 2);
  EXPECT_LE(r.telemetry.reused_tokens, 4);
  EXPECT_EQ(r.tokens, fresh(swapped));
  // The first image at another budget: a different run length, re-encoded.
  r = session->Generate(req(a, 140, b, 3), opt);
  EXPECT_EQ(r.telemetry.images_encoded, 2);
  // And back to the first request: the answer is the one a fresh session gives.
  r = session->Generate(req(a, 70, b, 1), opt);
  EXPECT_EQ(r.tokens, first);
  // Placeholder runs that do not match the images are refused.
  Input bad = req(a, 70, b, 1);
  bad.images.pop_back();
  EXPECT_THROW(session->Generate(bad, opt), Error);
  Input wrong_budget = req(a, 140, b, 1);
  wrong_budget.images[0].budget = 70;
  EXPECT_THROW(session->Generate(wrong_budget, opt), Error);
}

}  // namespace
}  // namespace gemma

namespace gemma {
namespace {

// A video through the engine: two ffmpeg frames (max_frames 2 of its 4), each frame's soft tokens
// in its run of video ids (token-id input: the runs are written here), the same as the frames given
// as images.
TEST(VisionVideo, FramesFillTheirRunsLikeImages) {
  if (std::system("ffmpeg -version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no ffmpeg";
  const std::string dir = ::testing::TempDir();
  const std::string png = kDir + "images/photo_300x200.png";
  const std::string clip = dir + "/vision_video.mkv";
  // Two seconds of the same picture (lossless), so each frame equals the PNG.
  const std::string cmd = "ffmpeg -nostdin -v error -y -loop 1 -framerate 2 -t 2 -i " + png +
                          " -c:v ffv1 -pix_fmt bgr0 " + clip;
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto engine =
      Engine::Load({.model_path = kDir + "model", .backend = "cpu", .context_capacity = 1024});
  const int boi = 501, img = 500, eoi = 502, vid = 503;
  std::vector<int32_t> vids = {2, 10}, imgs = {2, 10};
  for (int f = 0; f < 2; ++f) {
    vids.push_back(boi);
    vids.insert(vids.end(), 60, vid);
    vids.push_back(eoi);
    imgs.push_back(boi);
    imgs.insert(imgs.end(), 60, img);
    imgs.push_back(eoi);
  }
  vids.push_back(11);
  imgs.push_back(11);
  Input v = Input::Ids(vids);
  v.videos = {VideoInput::File(clip, 70)};
  v.videos[0].max_frames = 2;
  Input i = Input::Ids(imgs);
  i.images = {ImageInput::File(png, 70), ImageInput::File(png, 70)};
  GenerateOptions opt;
  opt.max_new_tokens = 4;
  const Result rv = engine->NewSession()->Generate(v, opt);
  EXPECT_EQ(rv.telemetry.images, 2);  // frames
  // Video placeholders embed as pad too, so the logits equal the image prompt's.
  const ScoreResult sv = engine->NewSession()->ScoreInput(v, true);
  const ScoreResult si = engine->NewSession()->ScoreInput(i, true);
  ASSERT_EQ(sv.logits.size(), si.logits.size());
  EXPECT_LE(RelL2(sv.logits.data(), si.logits.data(), sv.logits.size()), 1e-6);
  // A run that does not fit the frames is refused.
  Input bad = v;
  bad.token_ids->erase(bad.token_ids->begin() + 5);
  EXPECT_THROW(engine->NewSession()->Generate(bad, opt), Error);
}

}  // namespace
}  // namespace gemma

#include "model/synth.h"
#ifdef GEMMA_HAVE_CPU_FAST
#include "backend/cpu/fast/cpu_fast_backend.h"
#endif

namespace gemma {
namespace {

std::string Base64(const std::string& bytes) {
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

// Message parts name an image four ways (path, data URL, OpenAI image_url, base64 bytes); each
// becomes <|image>, its soft tokens, <image|> in the rendered prompt (synthetic "tiny": Gemma 4's
// special token ids and a 2-layer tower).
TEST(VisionMessages, EveryPartFormRendersAnImageRun) {
  const std::string dir = ::testing::TempDir() + "/vision_tiny";
  Synthesize({.preset = "tiny", .out_dir = dir, .seed = 9});
  auto engine = Engine::Load({.model_path = dir, .backend = "cpu", .context_capacity = 4096});
  const std::string file = kDir + "images/plain_50x40.bmp";
  std::ifstream f(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), {});
  const std::string url = "data:image/bmp;base64," + Base64(bytes);
  nlohmann::json parts = nlohmann::json::array({
      {{"type", "image"}, {"path", file}},
      {{"type", "image"}, {"url", url}},
      {{"type", "image_url"}, {"image_url", {{"url", url}}}},
      {{"type", "image"}, {"bytes", Base64(bytes)}, {"budget", 140}},
      {{"type", "text"}, {"text", "Which is different?"}},
  });
  Input in = Input::Messages({{{"role", "user"}, {"content", parts}}});
  in.vision_budget = 70;
  const std::vector<int32_t> ids = engine->PromptTokens(in);
  // 50x40 at 70 -> 336x432 (63 tokens); at 140 -> 480x624 (130 tokens).
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 258880), 3 * 63 + 130);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 255999), 4);  // <|image>
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 258882), 4);  // <image|>
  GenerateOptions opt;
  opt.max_new_tokens = 2;
  const Result r = engine->NewSession()->Generate(in, opt);
  EXPECT_EQ(r.telemetry.images, 4);
  // Bad parts are typed errors naming the part.
  parts[1]["url"] = "https://example.com/cat.png";
  EXPECT_THROW(engine->PromptTokens(Input::Messages({{{"role", "user"}, {"content", parts}}})),
               Error);
  nlohmann::json audio = {{{"role", "user"}, {"content", {{{"type", "input_audio"}}}}}};
  EXPECT_THROW(engine->PromptTokens(Input::Messages(audio)), Error);
  Input text_only = Input::Messages({{{"role", "user"}, {"content", "hi"}}});
  text_only.images = {ImageInput::File(file)};
  EXPECT_THROW(engine->PromptTokens(text_only), Error);  // images of messages go in the parts
}

}  // namespace
}  // namespace gemma

namespace gemma {
namespace {

// The QAT layout's int8 vision tower (synthetic "tiny-qat"): the fast backend's tower matches the
// reference's.
TEST(VisionQat, FastTowerMatchesTheReference) {
  const std::string dir = ::testing::TempDir() + "/vision_tiny_qat";
  Synthesize({.preset = "tiny-qat", .out_dir = dir, .seed = 4});
  auto model = Model::Load(dir);
  ASSERT_NE(model->vision(), nullptr) << model->vision_error();
  ASSERT_TRUE(IsQuantized(model->vision()->layers[0].q.lin.kind));
  const media::PatchedImage p = Prep("photo_300x200.png", 70);
  const VisionPatches in{p.patches_h, p.patches_w, p.pixels.data()};
  std::vector<float> a, b;
  CreateCpuReferenceModel(*model)->EncodeImage(in, &a);
#ifdef GEMMA_HAVE_CPU_FAST
  CreateCpuFastModel(*model, 2)->EncodeImage(in, &b);
  ASSERT_EQ(a.size(), b.size());
  const double e = RelL2(b.data(), a.data(), a.size());
  std::printf("tiny-qat tower, cpu vs cpu-ref: rel L2 %.2e\n", e);
  EXPECT_LE(e, 1e-5);  // f32 rounding of the integer sums before the row scale
#endif
  EXPECT_EQ(a.size(), static_cast<size_t>(p.soft_tokens) * model->text().hidden_size);
}

}  // namespace
}  // namespace gemma

namespace gemma {
namespace {

// The mobile-QAT vision layout (int8 codes, per-row scales, SRQ scales on layer 1, clip bounds)
// loaded by transformers' own GemmaQuantizer: its tower output and the logits with the image.
TEST(VisionQat, MatchesTransformersQuantizer) {
  const std::string dir = kDir + "qat/";
  std::ifstream f(dir + "goldens.json");
  const nlohmann::json g = nlohmann::json::parse(f);
  auto model = Model::Load(dir + "model");
  ASSERT_NE(model->vision(), nullptr) << model->vision_error();
  ASSERT_EQ(model->vision()->layers[1].q.lin.kind, WeightKind::kQ8);
  ASSERT_GT(model->vision()->layers[1].q.lin.in_scale, 0.0f);
  const media::PatchedImage p = Prep(g["image"], g["budget"]);
  const VisionPatches in{p.patches_h, p.patches_w, p.pixels.data()};
  const std::vector<float> want = ReadF32(dir + "tower_photo_300x200_70.f32");
  for (const std::string& backend : GoldenBackends()) {
    SCOPED_TRACE(backend);
    auto engine =
        LoadForGolden({.model_path = dir + "model", .backend = backend, .context_capacity = 512});
    if (!engine) continue;
    Input in = Input::Ids(g["ids"].get<std::vector<int32_t>>());
    in.images = {ImageInput::File(kDir + "images/" + g["image"].get<std::string>(), g["budget"])};
    GenerateOptions opt;
    opt.max_new_tokens = static_cast<int>(g["greedy"].size());
    opt.ignore_eos = true;
    auto session = engine->NewSession();
    EXPECT_EQ(session->Generate(in, opt).tokens, g["greedy"].get<std::vector<int32_t>>());
    std::vector<int32_t> full = *in.token_ids;
    for (size_t i = 0; i + 1 < g["greedy"].size(); ++i) full.push_back(g["greedy"][i]);
    in.token_ids = full;
    const ScoreResult s = session->ScoreInput(in, true);
    const std::vector<float> logits = ReadF32(dir + "logits_one_image.f32");
    ASSERT_EQ(s.logits.size(), logits.size());
    const int V = engine->vocab_size();
    double worst = 0;
    for (size_t pos = 0; pos < full.size(); ++pos)
      worst = std::max(worst, RelL2(&s.logits[pos * V], &logits[pos * V], V));
    std::printf("qat %s: logits worst rel L2 %.2e over %zu positions\n", backend.c_str(), worst,
                full.size());
    // SRQ rounds activations to int8 steps: a value within float32 noise of a rounding boundary
    // rounds differently in transformers' float32 sums than in our exact integer ones (the text
    // QAT fixture's noise floor, README). The tower stays within 1e-4; the tiny random text model
    // amplifies that ~30x (its dense fixture: 2e-7 in, 1.2e-5 out), so the logits get 1e-3.
    EXPECT_LE(worst, 1e-3);
  }
  std::vector<float> soft;
  CreateCpuReferenceModel(*model)->EncodeImage(in, &soft);
  ASSERT_EQ(soft.size(), want.size());
  const double e = RelL2(soft.data(), want.data(), want.size());
  std::printf("qat tower (cpu-ref): rel L2 %.2e\n", e);
  EXPECT_LE(e, 1e-4);
  const int H = model->text().hidden_size;
  double worst_token = 0;
  for (int i = 0; i < p.soft_tokens; ++i)
    worst_token = std::max(worst_token, RelL2(&soft[i * H], &want[i * H], H));
  std::printf("qat tower: worst soft token rel L2 %.2e\n", worst_token);
}

}  // namespace
}  // namespace gemma
