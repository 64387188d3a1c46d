// Session behaviour on the transformers fixtures (tests/goldens/model): greedy parity, seeds,
// cancellation, prefix reuse, capacity, callback failures.
#include <gtest/gtest.h>

#include <stop_token>

#include "../../tests/golden_util.h"
#include "backend/backend.h"
#include "gemma/engine.h"

namespace gemma {
namespace {

std::string Fixture(const std::string& name) {
  return std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/model/" + name;
}

std::shared_ptr<Engine> LoadEngine(const std::string& name, int capacity = 4096,
                                   const std::string& backend = "cpu-ref") {
  return Engine::Load(
      {.model_path = Fixture(name), .backend = backend, .context_capacity = capacity});
}

GenerateOptions Greedy(int n) {
  GenerateOptions o;
  o.max_new_tokens = n;
  o.ignore_eos = true;
  return o;
}

TEST(Session, GreedyMatchesTransformersThroughTheSession) {
  for (const std::string& name : Fixtures()) {
    const Golden g = LoadGolden(name);
    auto engine = LoadEngine(name);
    auto session = engine->NewSession();
    for (size_t i = 0; i < g.prompts.size(); ++i) {
      Result r =
          session->Generate(Input::Ids(g.prompts[i]), Greedy(static_cast<int>(g.greedy[i].size())));
      EXPECT_EQ(r.tokens, g.greedy[i]) << name << " prompt " << i;
      EXPECT_EQ(r.stop_reason, StopReason::kLength);
    }
  }
}

TEST(Session, SameSeedSameTokensDifferentSeedsDiffer) {
  auto engine = LoadEngine("tiny_dense_bf16");
  GenerateOptions o = Greedy(24);
  o.temperature = 1.5;
  o.seed = 1234;
  const std::vector<int32_t> prompt = LoadGolden("tiny_dense_bf16").prompts[2];
  auto a = engine->NewSession()->Generate(Input::Ids(prompt), o).tokens;
  auto b = engine->NewSession()->Generate(Input::Ids(prompt), o).tokens;
  EXPECT_EQ(a, b);
  o.seed = 99;
  auto c = engine->NewSession()->Generate(Input::Ids(prompt), o).tokens;
  EXPECT_NE(a, c);
  EXPECT_EQ(a.size(), 24u);
}

TEST(Session, ReusedPrefixGivesTheSameTokensAsAFreshSessionAcrossTheWindow) {
  // sliding_window is 8 in this fixture; turns are longer, so reuse crosses ring wrap-around.
  const Golden g = LoadGolden("tiny_dense_bf16");
  auto engine = LoadEngine("tiny_dense_bf16");
  auto chat = engine->NewSession();
  GenerateOptions o = Greedy(12);
  o.temperature = 0.8;
  o.seed = 7;
  o.logprobs = true;
  std::vector<int32_t> history = g.prompts[3];
  for (int turn = 0; turn < 3; ++turn) {
    Result reused = chat->Generate(Input::Ids(history), o);
    Result fresh = engine->NewSession()->Generate(Input::Ids(history), o);
    EXPECT_EQ(reused.tokens, fresh.tokens) << "turn " << turn;
    ASSERT_EQ(reused.logprobs.size(), fresh.logprobs.size());
    for (size_t k = 0; k < fresh.logprobs.size(); ++k) {
      EXPECT_EQ(reused.logprobs[k].logprob, fresh.logprobs[k].logprob)
          << "turn " << turn << " token " << k;
    }
    if (turn > 0) EXPECT_GT(reused.telemetry.reused_tokens, 8) << "turn " << turn;
    history.insert(history.end(), reused.tokens.begin(), reused.tokens.end());
    history.insert(history.end(), {5, 6, 7});  // the "user" adds a few tokens
  }
  // Turning reuse off gives the same answer with no reuse.
  o.reuse_prompt_cache = false;
  Result off = chat->Generate(Input::Ids(history), o);
  EXPECT_EQ(off.telemetry.reused_tokens, 0);
  EXPECT_EQ(off.tokens, engine->NewSession()->Generate(Input::Ids(history), o).tokens);
}

TEST(Session, PrefixReuseTruncatesAndLogitsEqualAFreshPrefill) {
  // Backend level: truncating into the middle of a long sequence (beyond the ring slack) must
  // either restore exactly or report a reset; either way the logits equal a fresh prefill.
  const Golden g = LoadGolden("tiny_e4b_like_f16");
  auto model = Model::Load(g.dir);
  std::vector<int32_t> seq = g.prompts[3];
  for (int cut : {static_cast<int>(seq.size()) - 1, static_cast<int>(seq.size()) - 4, 10, 3}) {
    auto b = CreateCpuReferenceBackend(*model, {.capacity = 256});
    ForwardResult r;
    b->Forward({.tokens = seq, .mode = OutputMode::kNone}, &r);
    const bool exact = b->Truncate(cut);
    EXPECT_EQ(b->cached(), exact ? cut : 0);
    std::vector<int32_t> rest(seq.begin() + b->cached(), seq.end());
    b->Forward({.tokens = rest, .mode = OutputMode::kLogits}, &r);
    auto fresh = CreateCpuReferenceBackend(*model, {.capacity = 256});
    ForwardResult f;
    fresh->Forward({.tokens = seq, .mode = OutputMode::kLogits}, &f);
    EXPECT_EQ(r.logits, f.logits) << "cut " << cut << (exact ? " (restored)" : " (re-prefilled)");
  }
}

TEST(Session, CancelAfterKTokensThenNextGreedyEqualsAFreshSession) {
  const Golden g = LoadGolden("tiny_e4b_like_f16");
  auto engine = LoadEngine("tiny_e4b_like_f16");
  auto session = engine->NewSession();
  std::stop_source src;
  int seen = 0;
  try {
    session->Generate(
        Input::Ids(g.prompts[2]), Greedy(30),
        [&](const TokenEvent&) {
          if (++seen == 5) src.request_stop();
        },
        src.get_token());
    FAIL() << "not cancelled";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCancelled);
  }
  EXPECT_EQ(seen, 5);
  EXPECT_LE(session->evaluated().size(), g.prompts[2].size());
  Result again = session->Generate(Input::Ids(g.prompts[1]), Greedy(20));
  Result fresh = engine->NewSession()->Generate(Input::Ids(g.prompts[1]), Greedy(20));
  EXPECT_EQ(again.tokens, fresh.tokens);
  EXPECT_EQ(again.tokens, std::vector<int32_t>(g.greedy[1].begin(), g.greedy[1].begin() + 20));
}

TEST(Session, CapacityIsCheckedBeforeAnyWork) {
  auto engine = LoadEngine("tiny_dense_f32_noshare", /*capacity=*/32);
  auto session = engine->NewSession();
  const std::vector<int32_t> prompt(20, 5);
  try {
    session->Generate(Input::Ids(prompt), Greedy(13));
    FAIL() << "capacity + 1 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCapacity);
  }
  EXPECT_TRUE(session->evaluated().empty());
  Result r = session->Generate(Input::Ids(prompt), Greedy(12));  // exactly at capacity
  EXPECT_EQ(r.tokens.size(), 12u);
}

TEST(Session, ThrowingCallbackFailsCleanlyAndTheSessionStaysUsable) {
  const Golden g = LoadGolden("tiny_dense_bf16");
  auto engine = LoadEngine("tiny_dense_bf16");
  auto session = engine->NewSession();
  try {
    session->Generate(Input::Ids(g.prompts[1]), Greedy(10), [](const TokenEvent& ev) {
      if (ev.index == 3) throw std::runtime_error("boom");
    });
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCallback);
    EXPECT_NE(std::string(e.what()).find("boom"), std::string::npos);
  }
  Result r = session->Generate(Input::Ids(g.prompts[1]), Greedy(10));
  EXPECT_EQ(r.tokens, std::vector<int32_t>(g.greedy[1].begin(), g.greedy[1].begin() + 10));
}

TEST(Session, BadOptionsAreTypedErrorsAndLoseNothing) {
  const Golden g = LoadGolden("tiny_dense_bf16");
  auto engine = LoadEngine("tiny_dense_bf16");
  auto session = engine->NewSession();
  session->Generate(Input::Ids(g.prompts[1]), Greedy(4));
  const auto before = session->evaluated();
  GenerateOptions bad = Greedy(4);
  bad.top_p = 1.5;
  EXPECT_THROW(session->Generate(Input::Ids(g.prompts[1]), bad), Error);
  bad = Greedy(0);
  EXPECT_THROW(session->Generate(Input::Ids(g.prompts[1]), bad), Error);
  EXPECT_THROW(session->Generate(Input::Ids({1, 99999}), Greedy(2)), Error);
  EXPECT_THROW(session->Generate(Input::Text("hi"), Greedy(2)), Error);  // no tokenizer
  EXPECT_EQ(session->evaluated(), before);
}

}  // namespace
}  // namespace gemma
