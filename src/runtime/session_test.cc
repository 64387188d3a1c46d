// Session behaviour on the transformers fixtures (tests/goldens/model): greedy parity, seeds,
// cancellation, prefix reuse, capacity, callback failures.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <stop_token>

#include "../../tests/golden_util.h"
#include "backend/backend.h"
#include "gemma/engine.h"
#include "model/synth.h"
#include "runtime/test_support.h"
#include "tokenizer/test_support.h"

namespace gemma {
namespace {

std::shared_ptr<Engine> LoadEngine(const std::string& name, int capacity = 4096,
                                   const std::string& backend = "cpu-ref") {
  return Engine::Load(
      {.model_path = Fixture(name), .backend = backend, .context_capacity = capacity});
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

TEST(Session, EventsCarryTheirLogprobAndAcceptanceComesBeforeThem) {
  const Golden g = LoadGolden("tiny_dense_bf16");
  auto engine = LoadEngine("tiny_dense_bf16");
  auto session = engine->NewSession();
  GenerateOptions o = Greedy(6);
  o.logprobs = true;
  o.top_logprobs = 2;
  int accepted = 0, events = 0;
  std::vector<TokenLogprob> seen;
  o.on_accepted = [&] {
    EXPECT_EQ(events, 0);
    ++accepted;
  };
  Result r = session->Generate(Input::Ids(g.prompts[1]), o, [&](const TokenEvent& ev) {
    ++events;
    ASSERT_NE(ev.logprob, nullptr);
    EXPECT_EQ(ev.logprob->id, ev.id);
    seen.push_back(*ev.logprob);
  });
  EXPECT_EQ(accepted, 1);
  ASSERT_EQ(seen.size(), r.logprobs.size());
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].id, r.logprobs[i].id);
    EXPECT_EQ(seen[i].logprob, r.logprobs[i].logprob);
    EXPECT_EQ(seen[i].top, r.logprobs[i].top);
  }
  // Without logprobs, no entry; a request refused by its options is never accepted; a throwing
  // acceptance fails the request like a throwing token callback.
  o.logprobs = false;
  o.top_logprobs = 0;
  events = 0;
  session->Generate(Input::Ids(g.prompts[1]), o,
                    [&](const TokenEvent& ev) {
                      ++events;
                      EXPECT_EQ(ev.logprob, nullptr);
                    });
  EXPECT_EQ(accepted, 2);
  GenerateOptions bad = o;
  bad.top_p = 1.5;
  EXPECT_THROW(session->Generate(Input::Ids(g.prompts[1]), bad), Error);
  EXPECT_EQ(accepted, 2);
  bad = Greedy(4);
  bad.on_accepted = [] { throw std::runtime_error("no"); };
  try {
    session->Generate(Input::Ids(g.prompts[1]), bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCallback);
  }
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

// Constrained generation on the tiny synthetic model with the Gemma 4 test tokenizer: whatever the
// (random) model prefers, the output must match the constraint.
namespace gemma {
namespace {

class ConstrainedSession : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!testing::HaveGemma3Tokenizer()) return;
    // One directory per test process: ctest runs these tests as parallel processes.
    dir_ = (std::filesystem::temp_directory_path() /
            ("gemma_runtime_tiny_" + std::to_string(::getpid())))
               .string();
    if (!std::filesystem::exists(dir_ + "/model.safetensors")) {
      Synthesize({.preset = "tiny", .out_dir = dir_, .seed = 5});
    }
    std::filesystem::copy_file(testing::Gemma4TestTokenizerPath(), dir_ + "/tokenizer.json",
                               std::filesystem::copy_options::overwrite_existing);
    engine_ = Engine::Load({.model_path = dir_, .backend = "cpu-ref", .context_capacity = 1024});
  }
  static void TearDownTestSuite() {
    engine_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  void SetUp() override {
    if (!engine_) GTEST_SKIP() << testing::kNoTokenizer;
  }
  static inline std::string dir_;
  static inline std::shared_ptr<Engine> engine_;
};

TEST_F(ConstrainedSession, RegexOutputFullyMatches) {
  GenerateOptions o;
  o.max_new_tokens = 40;
  o.temperature = 1.0;
  o.seed = 3;
  o.constraint.kind = OutputConstraint::Kind::kRegex;
  o.constraint.regex = "(yes|no), [0-9]{2,4} (apples|pears)";
  const nlohmann::json msgs = {{{"role", "user"}, {"content", "Answer."}}};
  for (uint64_t seed : {1, 2, 3}) {
    o.seed = seed;
    Result r = engine_->NewSession()->Generate(Input::Messages(msgs), o);
    EXPECT_TRUE(std::regex_match(r.text, std::regex("(yes|no), [0-9]{2,4} (apples|pears)")))
        << r.text << " | raw: " << r.raw_text << " | tokens: " << r.tokens.size();
    EXPECT_EQ(r.stop_reason, StopReason::kConstraintComplete);
  }
}

TEST_F(ConstrainedSession, JsonSchemaOutputParsesAndHasTheRequiredShape) {
  GenerateOptions o;
  o.max_new_tokens = 120;
  o.temperature = 0.0;
  o.constraint.kind = OutputConstraint::Kind::kJsonSchema;
  o.constraint.schema_json =
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},
      "age":{"type":"integer","minimum":0,"maximum":120}},"required":["name","age"],
      "additionalProperties":false})";
  const nlohmann::json msgs = {{{"role", "user"}, {"content", "Who?"}}};
  Result r = engine_->NewSession()->Generate(Input::Messages(msgs), o);
  ASSERT_EQ(r.stop_reason, StopReason::kConstraintComplete) << r.text;
  const nlohmann::json j = nlohmann::json::parse(r.text);
  ASSERT_TRUE(j.is_object());
  EXPECT_TRUE(j["name"].is_string());
  size_t code_points = 0;  // maxLength counts characters, not bytes
  for (unsigned char ch : j["name"].get<std::string>()) code_points += (ch & 0xC0) != 0x80;
  EXPECT_LE(code_points, 8u) << r.text;
  EXPECT_TRUE(j["age"].is_number_integer());
  EXPECT_EQ(j.size(), 2u);
}

TEST_F(ConstrainedSession, ToolCallConstraintYieldsAParsedCall) {
  GenerateOptions o;
  o.max_new_tokens = 80;
  o.constraint.kind = OutputConstraint::Kind::kToolCalls;
  o.constraint.require_tool_call = true;
  const nlohmann::json tools = nlohmann::json::parse(R"([{"type":"function","function":{
      "name":"get_weather","description":"Weather for a city",
      "parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":12},
      "days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"]}}}])");
  const nlohmann::json msgs = {{{"role", "user"}, {"content", "Weather in Paris?"}}};
  Result r = engine_->NewSession()->Generate(Input::Messages(msgs, tools), o);
  ASSERT_EQ(r.tool_calls.size(), 1u) << r.raw_text;
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_TRUE(r.tool_calls[0].arguments["city"].is_string());
  EXPECT_TRUE(r.tool_calls[0].arguments["days"].is_number_integer());
  EXPECT_TRUE(r.parse_errors.empty());
}

TEST_F(ConstrainedSession, BadSchemaIsATypedErrorAtRequestTime) {
  GenerateOptions o;
  o.constraint.kind = OutputConstraint::Kind::kJsonSchema;
  o.constraint.schema_json = R"({"type":"object","patternProperties":{"x":{}}})";
  auto session = engine_->NewSession();
  try {
    session->Generate(Input::Text("hi"), o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(e.code() == ErrorCode::kConstraint || e.code() == ErrorCode::kUnsupported)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("patternProperties"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(session->evaluated().empty());
}

TEST_F(ConstrainedSession, StopStringNeverLeaksIntoStreamedText) {
  GenerateOptions o;
  o.max_new_tokens = 60;
  o.constraint.kind = OutputConstraint::Kind::kRegex;
  o.constraint.regex = "abc STOP def";
  o.stop_strings = {"STOP"};
  std::string streamed;
  Result r = engine_->NewSession()->Generate(Input::Text("x"), o,
                                             [&](const TokenEvent& ev) { streamed += ev.delta; });
  EXPECT_EQ(r.stop_reason, StopReason::kStopString);
  EXPECT_EQ(r.text, "abc ");
  EXPECT_EQ(streamed, "abc ");
}

}  // namespace
}  // namespace gemma

namespace gemma {
namespace {

TEST_F(ConstrainedSession, MultiTurnChatPaysOnlyForNewTokens) {
  GenerateOptions o;
  o.max_new_tokens = 8;
  o.ignore_eos = true;
  auto session = engine_->NewSession();
  nlohmann::json msgs = {
      {{"role", "user"}, {"content", "First question, fairly long to fill the window."}}};
  Result r1 = session->Generate(Input::Messages(msgs), o);
  EXPECT_EQ(r1.telemetry.reused_tokens, 0);
  msgs.push_back({{"role", "assistant"}, {"content", r1.text}});
  msgs.push_back({{"role", "user"}, {"content", "Second."}});
  Result r2 = session->Generate(Input::Messages(msgs), o);
  // Everything up to the first reply is served from the cache.
  EXPECT_GE(r2.telemetry.reused_tokens, r1.telemetry.prompt_tokens);
  Result fresh = engine_->NewSession()->Generate(Input::Messages(msgs), o);
  EXPECT_EQ(r2.tokens, fresh.tokens);
  EXPECT_EQ(fresh.telemetry.reused_tokens, 0);
}

}  // namespace
}  // namespace gemma
