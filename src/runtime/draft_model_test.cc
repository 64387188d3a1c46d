// Speculative decoding with a draft model (EngineOptions::draft_model_path): ModelDraft's drafts
// are the draft model's own greedy continuation whatever it evaluated before; greedy and seeded
// sampled output are plain decoding's token for token (the trained tiny model drafted by its QAT
// variant and the reverse, drafts accepted and rejected); the caches are left as plain decoding
// leaves them; cancellation and bad settings lose nothing.
#include <gtest/gtest.h>

#include <barrier>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/fast/cpu_fast_backend.h"
#include "gemma/engine.h"
#include "gemma/error.h"
#include "model/model.h"
#include "runtime/backend_factory.h"
#include "runtime/model_draft.h"
#include "runtime/test_support.h"

namespace gemma {
namespace {

namespace fs = std::filesystem;

const std::string kTrained = std::string(GEMMA_SOURCE_DIR) + "/models/tiny-trained";
const std::string kTrainedQat = kTrained + "/qat";

GenerateOptions Drafted(GenerateOptions o, int k) {
  o.speculative.mode = SpeculativeOptions::Mode::kDraftModel;
  o.speculative.max_draft = k;
  return o;
}

// A fresh context's greedy continuation: what a draft must be, computed independently.
std::vector<int32_t> Greedy(Backend& b, const std::vector<int32_t>& history, int k) {
  b.Reset();
  ForwardResult r;
  b.Forward({.tokens = history, .mode = OutputMode::kArgmax}, &r);
  std::vector<int32_t> out = {r.ids.back()};
  while (static_cast<int>(out.size()) < k) {
    b.Forward({.tokens = std::span<const int32_t>(&out.back(), 1), .mode = OutputMode::kArgmax},
              &r);
    out.push_back(r.ids.back());
  }
  return out;
}

// Histories that share a prefix with what the draft context holds, extend it, diverge from it,
// are shorter than it, and rewind past the sliding window's ring (64 + slack): every draft equals
// a fresh context's greedy continuation.
TEST(ModelDraft, ProposesTheDraftModelsGreedyContinuationAfterAnyHistory) {
  const auto model = Model::Load(kTrainedQat);
  for (const std::string backend : {"cpu", "cpu-ref"}) {
    SCOPED_TRACE(backend);
    ModelDraft draft(CreateBackend(backend, *model, {.capacity = 400}, 2));
    auto fresh = CreateBackend(backend, *model, {.capacity = 400}, 2);
    std::vector<int32_t> h = {2};
    uint32_t x = 12345;
    auto next = [&] {
      x = x * 1664525u + 1013904223u;
      return static_cast<int32_t>(3 + (x >> 8) % 4000);
    };
    for (int i = 0; i < 20; ++i) h.push_back(next());
    const int steps = backend == "cpu" ? 14 : 6;
    for (int step = 0; step < steps; ++step) {
      const int k = 1 + step % 6;
      const std::vector<int32_t> got = draft.Propose(h, k);
      ASSERT_EQ(got, Greedy(*fresh, h, k)) << "step " << step;
      switch (step % 4) {
        case 0:  // the draft accepted in part, then the model's own token
          h.insert(h.end(), got.begin(), got.begin() + (k + 1) / 2);
          h.push_back(next());
          break;
        case 1:  // the whole draft and more text
          h.insert(h.end(), got.begin(), got.end());
          for (int j = 0; j < 60; ++j) h.push_back(next());
          break;
        case 2:  // an edit 3 tokens back (a new request sharing most of the prefix)
          h.resize(h.size() - 3);
          h.push_back(next());
          break;
        case 3:  // a rewind of 100 tokens (past the sliding ring), then a new tail
          h.resize(h.size() > 102 ? h.size() - 100 : 2);
          for (int j = 0; j < 5; ++j) h.push_back(next());
          break;
      }
    }
    EXPECT_EQ(draft.Propose(h, 0), std::vector<int32_t>());
  }
}

// Drafting sessions of one engine share a batcher over the draft model: drafts proposed at the
// same time on several threads, histories extended by parts of their drafts (short catch-ups that
// join the batch too), are each the fresh context's greedy continuation, and the draft steps met in
// batches.
TEST(ModelDraft, DraftStepsOfSeveralSessionsAreBatched) {
  const auto model = Model::Load(kTrainedQat);
  auto backend = CreateCpuFastModel(*model, 2);
  StepBatcher batcher(*backend, 16);
  constexpr int kDrafts = 3;
  std::vector<std::unique_ptr<ModelDraft>> drafts;
  std::vector<std::unique_ptr<Backend>> fresh;
  std::vector<std::vector<int32_t>> h(kDrafts);
  for (int i = 0; i < kDrafts; ++i) {
    drafts.push_back(std::make_unique<ModelDraft>(backend->NewContext({.capacity = 400}), &batcher,
                                                  backend->batches_multi_token_steps()));
    fresh.push_back(CreateBackend("cpu", *model, {.capacity = 400}, 1));
    h[i] = {2};
    for (int j = 0; j < 12 + 5 * i; ++j) h[i].push_back(3 + (j * 7919 + i * 131) % 4000);
  }
  for (int round = 0; round < 6; ++round) {
    const int k = 2 + round % 5;
    std::vector<std::vector<int32_t>> got(kDrafts);
    std::barrier start(kDrafts);
    std::vector<std::thread> threads;
    for (int i = 0; i < kDrafts; ++i) {
      threads.emplace_back([&, i] {
        start.arrive_and_wait();
        got[i] = drafts[i]->Propose(h[i], k);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int i = 0; i < kDrafts; ++i) {
      ASSERT_EQ(got[i], Greedy(*fresh[i], h[i], k)) << "round " << round << " draft " << i;
      // Part of the draft accepted, then the model's own token.
      h[i].insert(h[i].end(), got[i].begin(), got[i].begin() + (i + round) % k);
      h[i].push_back(3 + (round * 97 + i) % 4000);
    }
  }
  EXPECT_GE(batcher.stats().max_size, 2);
  EXPECT_LT(batcher.stats().batches, batcher.stats().steps);
}

TEST(ModelDraft, StopsBetweenStepsAndThenDraftsAsBefore) {
  const auto model = Model::Load(kTrainedQat);
  ModelDraft draft(CreateBackend("cpu", *model, {.capacity = 256}, 2));
  auto fresh = CreateBackend("cpu", *model, {.capacity = 256}, 2);
  const std::vector<int32_t> h = {2, 100, 200, 300, 400, 500, 600, 700};
  std::stop_source stop;
  stop.request_stop();
  draft.set_stop(stop.get_token());
  try {
    draft.Propose(h, 4);
    FAIL() << "a requested stop was not honored";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCancelled);
  }
  EXPECT_TRUE(draft.evaluated().empty());
  draft.set_stop({});
  EXPECT_EQ(draft.Propose(h, 4), Greedy(*fresh, h, 4));
}

// The trained tiny model drafted by its QAT variant and the reverse (the two agree on most but not
// all tokens): greedy tokens, the caches and the next turn as plain decoding's, on every backend
// built in (Vulkan where a device exists, lavapipe included).
TEST(DraftModel, GreedyTokensEqualPlainDecoding) {
  int drafted = 0, accepted = 0;
  std::vector<std::string> backends = {"cpu", "cpu-ref"};
  try {
    Engine::Load({.model_path = kTrainedQat, .backend = "vulkan", .context_capacity = 64});
    backends.push_back("vulkan");
  } catch (const Error&) {
  }
  for (const std::string& backend : backends) {
    const bool slow = backend != "cpu";  // (one pair and one length there)
    for (const auto& [target, drafter] :
         {std::pair{kTrained, kTrainedQat}, std::pair{kTrainedQat, kTrained}}) {
      if (slow && target == kTrainedQat) continue;
      SCOPED_TRACE(backend + " " + target);
      auto engine = Engine::Load({.model_path = target,
                                  .backend = backend,
                                  .context_capacity = 512,
                                  .draft_model_path = drafter});
      ASSERT_TRUE(engine->has_draft_model());
      for (const char* text : {"Debian is a free operating system. It", "The package manager"}) {
        for (int n : {48, 1, 9}) {
          if (backend == "vulkan" && (n != 48 || text[0] != 'D')) continue;
          if (slow && n != 48) continue;
          GenerateOptions o = gemma::Greedy(n);
          auto plain_session = engine->NewSession();
          const Result plain = plain_session->Generate(Input::Text(text), o);
          const std::string next = std::string(text) + " and";
          const Result plain_next = plain_session->Generate(Input::Text(next), gemma::Greedy(12));
          for (int k : {6, 2}) {
            if (backend == "vulkan" && k != 6) continue;
            auto session = engine->NewSession();
            const Result r = session->Generate(Input::Text(text), Drafted(o, k));
            ASSERT_EQ(r.tokens, plain.tokens) << "n " << n << " k " << k;
            EXPECT_EQ(r.resolved_config["speculative"]["mode"], "draft_model");
            EXPECT_TRUE(r.resolved_config["speculative"]["applied"].get<bool>());
            EXPECT_LE(r.telemetry.accepted, r.telemetry.drafted);
            if (r.telemetry.drafted > 0) EXPECT_GT(r.telemetry.draft_ms, 0);
            drafted += r.telemetry.drafted;
            accepted += r.telemetry.accepted;
            // The next turn reuses the caches (and the draft context its own).
            const Result rn = session->Generate(Input::Text(next), Drafted(gemma::Greedy(12), k));
            EXPECT_EQ(rn.tokens, plain_next.tokens);
            EXPECT_GT(rn.telemetry.reused_tokens, 0);
            EXPECT_EQ(session->evaluated(), plain_session->evaluated());
          }
        }
      }
    }
  }
  RecordProperty("drafted", drafted);
  RecordProperty("accepted", accepted);
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted);
}

// A model drafting for itself agrees with every token (the drafts are its own greedy choices, and
// one- and several-token steps give the same outputs): only drafts cut by the end of the answer
// go unused.
// Sessions drafting at the same time on their own threads (their draft steps batched on the draft
// model, their verification steps on the model) give plain decoding's tokens.
TEST(DraftModel, ConcurrentDraftingSessionsGiveTheirSoloTokens) {
  auto engine = Engine::Load({.model_path = kTrained,
                              .backend = "cpu",
                              .context_capacity = 256,
                              .threads = 2,
                              .draft_model_path = kTrainedQat});
  const std::vector<std::string> texts = {"The package manager", "A file system is",
                                          "The kernel schedules", "Debian is"};
  GenerateOptions o;
  o.max_new_tokens = 32;
  o.ignore_eos = true;
  std::vector<std::vector<int32_t>> want;
  for (const std::string& t : texts)
    want.push_back(engine->NewSession()->Generate(Input::Text(t), o).tokens);
  std::vector<Result> got(texts.size());
  std::barrier start(static_cast<std::ptrdiff_t>(texts.size()));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < texts.size(); ++i) {
    threads.emplace_back([&, i] {
      auto session = engine->NewSession();
      start.arrive_and_wait();
      got[i] = session->Generate(Input::Text(texts[i]), Drafted(o, 1 + i % 4));
    });
  }
  for (std::thread& t : threads) t.join();
  int drafted = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i]) << texts[i];
    drafted += got[i].telemetry.drafted;
  }
  EXPECT_GT(drafted, 0);
}

TEST(DraftModel, TheModelDraftingForItselfHasEveryDraftAccepted) {
  auto engine = Engine::Load({.model_path = kTrained,
                              .backend = "cpu",
                              .context_capacity = 512,
                              .draft_model_path = kTrained});
  // The draft model's weight copy counts in the engine's shared bytes.
  EXPECT_GT(engine->shared_bytes(),
            Engine::Load({.model_path = kTrained, .backend = "cpu", .context_capacity = 512})
                ->shared_bytes());
  GenerateOptions o;
  o.max_new_tokens = 80;
  const int k = 4;
  const Result r =
      engine->NewSession()->Generate(Input::Text("The package manager"), Drafted(o, k));
  EXPECT_GT(r.telemetry.verify_steps, 5);
  EXPECT_GE(r.telemetry.accepted, r.telemetry.drafted - k);
  EXPECT_EQ(r.tokens, engine->NewSession()->Generate(Input::Text("The package manager"), o).tokens);
}

// Sampling: drafts are point masses, accepted when the sampler's own draw equals them, so a seeded
// request gives plain sampling's tokens, log-probs and caches under filters, penalties and a
// constraint on the logits.
TEST(DraftModel, SeededSamplingGivesPlainSamplingsTokens) {
  auto engine = Engine::Load({.model_path = kTrained,
                              .backend = "cpu",
                              .context_capacity = 512,
                              .draft_model_path = kTrainedQat});
  const Input input = Input::Messages(nlohmann::json::array(
      {{{"role", "user"}, {"content", "Describe what the package manager does."}}}));
  int drafted = 0, accepted = 0;
  for (int variant = 0; variant < 3; ++variant) {
    GenerateOptions o = SampledVariant(variant);
    for (uint64_t seed : {1u, 2u, 3u}) {
      SCOPED_TRACE("variant " + std::to_string(variant) + " seed " + std::to_string(seed));
      o.seed = seed;
      auto plain_session = engine->NewSession();
      const Result plain = plain_session->Generate(input, o);
      auto session = engine->NewSession();
      const Result r = session->Generate(input, Drafted(o, 4));
      ASSERT_EQ(r.tokens, plain.tokens);
      ASSERT_EQ(r.logprobs.size(), plain.logprobs.size());
      for (size_t t = 0; t < r.logprobs.size(); ++t) {
        EXPECT_EQ(r.logprobs[t].logprob, plain.logprobs[t].logprob);
        EXPECT_EQ(r.logprobs[t].top, plain.logprobs[t].top);
      }
      EXPECT_EQ(r.stop_reason, plain.stop_reason);
      EXPECT_EQ(session->evaluated(), plain_session->evaluated());
      drafted += r.telemetry.drafted;
      accepted += r.telemetry.accepted;
    }
  }
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted);
}

// A cancelled request keeps only the prompt; the session then decodes as a fresh one, with and
// without drafts.
TEST(DraftModel, CancellationLeavesTheSessionExact) {
  auto engine = Engine::Load({.model_path = kTrained,
                              .backend = "cpu",
                              .context_capacity = 512,
                              .draft_model_path = kTrainedQat});
  const Input input = Input::Text("The package manager installs");
  const GenerateOptions o = gemma::Greedy(40);
  const Result plain = engine->NewSession()->Generate(input, o);
  auto session = engine->NewSession();
  for (int at : {0, 3, 11}) {
    std::stop_source stop;
    try {
      session->Generate(
          input, Drafted(o, 4),
          [&](const TokenEvent& ev) {
            if (ev.index == at) stop.request_stop();
          },
          stop.get_token());
      FAIL() << "not cancelled";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kCancelled);
    }
    EXPECT_EQ(session->evaluated(), engine->PromptTokens(input));
    EXPECT_EQ(session->Generate(input, Drafted(o, 4)).tokens, plain.tokens) << "at " << at;
  }
  EXPECT_EQ(session->Generate(input, o).tokens, plain.tokens);
}

TEST(DraftModel, RefusesMismatchedVocabulariesAndMissingDraftModels) {
  // Another vocabulary (512 ids against 4,096).
  try {
    Engine::Load(
        {.model_path = kTrained, .backend = "cpu", .draft_model_path = Fixture("tiny_qat")});
    FAIL() << "a draft model with another vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kConfig);
    EXPECT_NE(std::string(e.what()).find("vocabulary"), std::string::npos) << e.what();
  }
  // The same size, another tokenizer: two ids swapped.
  const fs::path dir = fs::temp_directory_path() / "gemma_draft_tokenizer_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kTrainedQat + "/config.json", dir / "config.json");
  fs::create_symlink(kTrainedQat + "/model.safetensors", dir / "model.safetensors");
  nlohmann::json tok;
  std::ifstream(kTrainedQat + "/tokenizer.json") >> tok;
  auto& vocab = tok["model"]["vocab"];
  std::string a, b;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (it.value() == 4094) a = it.key();
    if (it.value() == 4095) b = it.key();
  }
  ASSERT_FALSE(a.empty() || b.empty());
  vocab[a] = 4095;
  vocab[b] = 4094;
  std::ofstream(dir / "tokenizer.json") << tok.dump();
  try {
    Engine::Load({.model_path = kTrained, .backend = "cpu", .draft_model_path = dir.string()});
    FAIL() << "a draft model with another tokenizer was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kConfig);
    EXPECT_NE(std::string(e.what()).find("4094"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
  // No draft model: refused before the caches change.
  auto engine = Engine::Load({.model_path = kTrained, .backend = "cpu", .context_capacity = 256});
  EXPECT_FALSE(engine->has_draft_model());
  auto session = engine->NewSession();
  const Result first = session->Generate(Input::Text("The package manager"), gemma::Greedy(4));
  const std::vector<int32_t> cached = session->evaluated();
  try {
    session->Generate(Input::Text("Another prompt entirely"), Drafted(gemma::Greedy(4), 4));
    FAIL() << "draft_model without a draft model was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  EXPECT_EQ(session->evaluated(), cached);
}

}  // namespace
}  // namespace gemma
