// One model, many sessions: sessions share the engine's weights and add only their caches; they
// run on different threads at once; one session refuses concurrent use; cancellation during an
// automatic prefill stops within a chunk; constrained greedy decoding through the backend's select
// output equals the full-logits path; Score against the transformers goldens.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <regex>
#include <stop_token>
#include <thread>

#include "../../tests/golden_util.h"
#include "gemma/engine.h"
#include "model/synth.h"
#include "runtime/test_support.h"
#include "tokenizer/test_support.h"

namespace gemma {
namespace {

size_t RssBytes() {
  std::ifstream f("/proc/self/statm");
  size_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

// The synthetic "tiny" preset (E2B structure, real 262,144-token vocabulary): its fast-CPU weight
// copy is tens of MiB, large against one session's caches.
class TinySynth : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = (std::filesystem::temp_directory_path() /
            ("gemma_shared_tiny_" + std::to_string(::getpid())))
               .string();
    Synthesize({.preset = "tiny", .out_dir = dir_, .seed = 11});
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }
  static inline std::string dir_;
};

TEST_F(TinySynth, TenSessionsShareTheWeightsAndAddOnlyTheirCaches) {
  auto engine = Engine::Load({.model_path = dir_, .backend = "cpu", .context_capacity = 512});
  const size_t shared = engine->shared_bytes();
  ASSERT_GT(shared, size_t{16} << 20) << "the fast CPU backend's weight copy";
  const std::vector<int32_t> prompt = {2, 105, 2364, 107, 9259, 106, 107, 105, 4368, 107};
  std::vector<std::unique_ptr<Session>> sessions;
  sessions.push_back(engine->NewSession());
  const Result first = sessions[0]->Generate(Input::Ids(prompt), Greedy(8));
  const size_t before = RssBytes();
  for (int i = 1; i < 10; ++i) {
    sessions.push_back(engine->NewSession());
    EXPECT_EQ(sessions.back()->Generate(Input::Ids(prompt), Greedy(8)).tokens, first.tokens);
  }
  const size_t added = RssBytes() - std::min(RssBytes(), before);
  // Nine more sessions, each with a weight copy, would add 9 x shared; they add caches only.
  // (Under a sanitizer RSS also counts its shadow memory and allocator: not measured there.)
#ifndef GEMMA_SANITIZED
  EXPECT_LT(added, shared / 2) << "nine sessions added " << (added >> 20) << " MiB; weights "
                               << (shared >> 20) << " MiB";
#endif
  EXPECT_EQ(engine->shared_bytes(), shared);
}

TEST_F(TinySynth, SessionsOnManyThreadsMatchSequentialRuns) {
  auto engine = Engine::Load({.model_path = dir_, .backend = "cpu", .context_capacity = 512});
  std::vector<std::vector<int32_t>> prompts;
  for (int t = 0; t < 4; ++t) prompts.push_back({2, 105, 2364, 107, 100 + 37 * t, 106, 107});
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : prompts) alone.push_back(engine->NewSession()->Generate(Input::Ids(p), Greedy(12)).tokens);
  std::vector<std::future<std::vector<int32_t>>> runs;
  for (const auto& p : prompts) {
    runs.push_back(std::async(std::launch::async, [&engine, p] {
      auto s = engine->NewSession();
      std::vector<int32_t> last;
      for (int turn = 0; turn < 3; ++turn) last = s->Generate(Input::Ids(p), Greedy(12)).tokens;
      return last;
    }));
  }
  for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i].get(), alone[i]) << "thread " << i;
}

TEST(SharedModel, OneSessionOnTwoThreadsRefusesTheSecondCall) {
  const Golden g = LoadGolden("tiny_dense_bf16");
  auto engine =
      Engine::Load({.model_path = Fixture("tiny_dense_bf16"), .backend = "cpu"});
  auto session = engine->NewSession();
  std::promise<void> inside;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  auto first = std::async(std::launch::async, [&] {
    return session->Generate(Input::Ids(g.prompts[1]), Greedy(6), [&](const TokenEvent& ev) {
      if (ev.index == 0) {
        inside.set_value();
        released.wait();  // hold the session busy until the second call has been refused
      }
    });
  });
  inside.get_future().wait();
  try {
    session->Generate(Input::Ids(g.prompts[0]), Greedy(4));
    ADD_FAILURE() << "a second concurrent Generate was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBusy) << e.what();
  }
  EXPECT_THROW(session->Reset(), Error);
  release.set_value();
  const Result r = first.get();
  EXPECT_EQ(r.tokens, std::vector<int32_t>(g.greedy[1].begin(), g.greedy[1].begin() + 6));
  // The refused calls changed nothing: the session continues as a fresh one would.
  EXPECT_EQ(session->Generate(Input::Ids(g.prompts[0]), Greedy(4)).tokens,
            std::vector<int32_t>(g.greedy[0].begin(), g.greedy[0].begin() + 4));
}

TEST_F(TinySynth, CancelDuringAutomaticPrefillStopsWithinAChunk) {
  // The CPU backends evaluate at most their ring slack (one window) per chunk; a long prompt is
  // many chunks. A stop requested while the prefill runs ends it at the next chunk boundary,
  // keeping the chunks already evaluated.
  auto engine = Engine::Load({.model_path = dir_, .backend = "cpu", .context_capacity = 4096});
  std::vector<int32_t> prompt(3000);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(3 + (i * 7) % 200);
  GenerateOptions o = Greedy(1);
  o.prefill = PrefillStrategy::kAuto;
  const auto t0 = std::chrono::steady_clock::now();
  engine->NewSession()->Generate(Input::Ids(prompt), o);
  const auto whole = std::chrono::steady_clock::now() - t0;

  auto session = engine->NewSession();
  std::stop_source src;
  std::thread stopper([&] {
    std::this_thread::sleep_for(whole / 4);
    src.request_stop();
  });
  const auto t1 = std::chrono::steady_clock::now();
  try {
    session->Generate(Input::Ids(prompt), o, {}, src.get_token());
    ADD_FAILURE() << "the prefill finished before the stop";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCancelled) << e.what();
  }
  const auto stopped = std::chrono::steady_clock::now() - t1;
  stopper.join();
  EXPECT_LT(stopped, whole * 3 / 4) << "the stop was honored late";
  const size_t kept = session->evaluated().size();
  EXPECT_GT(kept, 0u) << "nothing was evaluated before the stop";
  EXPECT_LT(kept, prompt.size()) << "the stop was honored only after the whole prompt";
  // The kept chunks are exact: continuing gives a fresh session's answer.
  const std::vector<int32_t> shorter(prompt.begin(), prompt.begin() + 300);
  EXPECT_EQ(session->Generate(Input::Ids(shorter), Greedy(4)).tokens,
            engine->NewSession()->Generate(Input::Ids(shorter), Greedy(4)).tokens);
}

TEST(SharedModel, ScoreMatchesTheTransformersLogits) {
  for (const std::string name : {"tiny_dense_f32_noshare", "tiny_e4b_like_f16"}) {
    const Golden g = LoadGolden(name);
    auto engine = Engine::Load({.model_path = Fixture(name), .backend = "cpu"});
    auto session = engine->NewSession();
    const int V = engine->vocab_size();
    // The goldens hold logits for the prompt and its greedy continuation.
    const std::vector<float>& want = g.logits[2];
    std::vector<int32_t> p = g.prompts[2];
    p.insert(p.end(), g.greedy[2].begin(), g.greedy[2].end());
    ASSERT_GE(p.size() * V, want.size());
    p.resize(want.size() / V);
    const ScoreResult s = session->Score(p, /*return_logits=*/true);
    ASSERT_EQ(s.logprobs.size(), p.size() - 1);
    ASSERT_EQ(s.logits.size(), want.size());
    EXPECT_LT(RelL2(s.logits.data(), want.data(), static_cast<int>(want.size())), 1e-4) << name;
    for (size_t i = 0; i + 1 < p.size(); ++i) {
      double mx = -1e300, sum = 0;
      for (int k = 0; k < V; ++k) mx = std::max(mx, static_cast<double>(want[i * V + k]));
      for (int k = 0; k < V; ++k) sum += std::exp(want[i * V + k] - mx);
      const double lp = want[i * V + p[i + 1]] - mx - std::log(sum);
      EXPECT_NEAR(s.logprobs[i], lp, 1e-3) << name << " position " << i;
    }
    // The session holds the scored tokens: a Generate on them reuses all but the last.
    const Result r = session->Generate(Input::Ids(p), Greedy(3));
    EXPECT_EQ(r.telemetry.reused_tokens, static_cast<int>(p.size()) - 1);
  }
}

TEST(SharedModel, ConstrainedGreedyThroughSelectEqualsTheLogitsPath) {
  if (!testing::HaveGemma3Tokenizer()) GTEST_SKIP() << testing::kNoTokenizer;
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("gemma_select_tiny_" + std::to_string(::getpid())))
                              .string();
  Synthesize({.preset = "tiny", .out_dir = dir, .seed = 5});
  std::filesystem::copy_file(testing::Gemma4TestTokenizerPath(), dir + "/tokenizer.json",
                             std::filesystem::copy_options::overwrite_existing);
  for (const std::string backend : {"cpu-ref", "cpu"}) {
    auto engine = Engine::Load({.model_path = dir, .backend = backend, .context_capacity = 1024});
    const nlohmann::json msgs = {{{"role", "user"}, {"content", "Answer."}}};
    GenerateOptions o;
    o.max_new_tokens = 40;
    o.constraint.kind = OutputConstraint::Kind::kRegex;
    o.constraint.regex = "(yes|no), [0-9]{2,4} (apples|pears)";
    const Result select = engine->NewSession()->Generate(Input::Messages(msgs), o);
    o.logprobs = true;  // needs the full logits: the sampler picks on the host
    const Result logits = engine->NewSession()->Generate(Input::Messages(msgs), o);
    EXPECT_EQ(select.tokens, logits.tokens) << backend;
    EXPECT_EQ(select.text, logits.text) << backend;
    EXPECT_EQ(select.stop_reason, logits.stop_reason) << backend;
    EXPECT_TRUE(std::regex_match(select.text, std::regex("(yes|no), [0-9]{2,4} (apples|pears)")))
        << select.text;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gemma

namespace gemma {
namespace {

TEST(SharedModel, AutoNeverPicksACpuTypeVulkanDevice) {
  const std::string fixture = Fixture("tiny_dense_bf16");
  auto automatic = Engine::Load({.model_path = fixture, .backend = "auto"});
  if (automatic->backend_name() == "vulkan") {
    EXPECT_FALSE(automatic->backend_device_is_cpu()) << automatic->backend_device();
  } else {
    EXPECT_EQ(automatic->backend_name(), "cpu-fast");
  }
  // Asked for explicitly, a CPU-type device is used, and the engine says what it is.
  std::shared_ptr<Engine> vulkan;
  try {
    vulkan = Engine::Load({.model_path = fixture, .backend = "vulkan"});
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kDevice || e.code() == ErrorCode::kUnsupported)
      GTEST_SKIP() << "no Vulkan device: " << e.what();
    throw;
  }
  EXPECT_FALSE(vulkan->backend_device().empty());
  if (automatic->backend_name() != "vulkan") {
    // No GPU here: the only Vulkan device is a CPU-type one (lavapipe), which auto skipped.
    EXPECT_TRUE(vulkan->backend_device_is_cpu()) << vulkan->backend_device();
  }
}

}  // namespace
}  // namespace gemma

namespace gemma {
namespace {

TEST(SharedModel, DefaultGenerateOptionsFollowGenerationConfig) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("gemma_gencfg_" + std::to_string(::getpid())))
                              .string();
  std::filesystem::create_directories(dir);
  Synthesize({.preset = "tiny", .out_dir = dir, .seed = 3});
  {
    auto engine = Engine::Load({.model_path = dir, .backend = "cpu-ref"});
    const GenerateOptions d = engine->DefaultGenerateOptions();
    EXPECT_EQ(d.temperature, GenerateOptions().temperature);  // no file: the library's greedy
  }
  std::ofstream(dir + "/generation_config.json")
      << R"({"do_sample": true, "temperature": 1.0, "top_k": 64, "top_p": 0.95, "eos_token_id": [1, 106]})";
  {
    auto engine = Engine::Load({.model_path = dir, .backend = "cpu-ref"});
    const GenerateOptions d = engine->DefaultGenerateOptions();
    EXPECT_EQ(d.temperature, 1.0);
    EXPECT_EQ(d.top_k, 64);
    EXPECT_EQ(d.top_p, 0.95);
  }
  std::ofstream(dir + "/generation_config.json") << R"({"do_sample": false, "temperature": 0.7})";
  EXPECT_EQ(Engine::Load({.model_path = dir, .backend = "cpu-ref"})->DefaultGenerateOptions().temperature,
            0.0);  // do_sample false: greedy, as transformers
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gemma

namespace gemma {
namespace {

// A text-only checkpoint (no vision_config, no audio_config) refuses image and audio parts,
// saying why.
TEST(SharedModel, MediaPartsNeedTheirTower) {
  auto engine = Engine::Load({.model_path = Fixture("tiny_dense_bf16"), .backend = "cpu-ref"});
  const nlohmann::json msgs = {
      {{"role", "user"},
       {"content",
        {{{"type", "text"}, {"text", "What is this?"}},
         {{"type", "image"}, {"url", "data:image/png;base64,AAAA"}}}}}};
  try {
    engine->NewSession()->Generate(Input::Messages(msgs), Greedy(2));
    FAIL() << "an image part was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot read images"), std::string::npos) << e.what();
  }
  const nlohmann::json audio = {
      {{"role", "user"},
       {"content",
        {{{"type", "input_audio"}, {"input_audio", {{"data", "AAAA"}, {"format", "wav"}}}}}}}};
  try {
    engine->NewSession()->Generate(Input::Messages(audio), Greedy(2));
    FAIL() << "an audio part was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot hear"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gemma
