// Speculative decoding with prompt-lookup drafts: greedy output token for token as plain decoding
// on every backend built in (the transformers fixtures and a synthetic checkpoint), with drafts
// accepted and rejected, every stopping cause, and the session's caches left as plain decoding
// leaves them (a following turn reuses them and decodes the same).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gemma/engine.h"
#include "gemma/error.h"

namespace gemma {
namespace {

std::string Fixture(const std::string& name) {
  return std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/model/" + name;
}

GenerateOptions Greedy(int n, bool speculative, int max_draft = 4) {
  GenerateOptions o;
  o.max_new_tokens = n;
  o.ignore_eos = true;
  if (speculative) {
    o.speculative.mode = SpeculativeOptions::Mode::kPromptLookup;
    o.speculative.max_draft = max_draft;
  }
  return o;
}

std::vector<std::string> Backends() {
  std::vector<std::string> b = {"cpu-ref", "cpu"};
  try {
    Engine::Load({.model_path = Fixture("tiny_qat"), .backend = "vulkan", .context_capacity = 64});
    b.push_back("vulkan");
  } catch (const Error&) {
  }
  return b;
}

// A prompt that repeats itself (drafts from the prompt) and one that does not.
std::vector<std::vector<int32_t>> Prompts(int vocab) {
  std::vector<int32_t> rep = {2};
  for (int r = 0; r < 4; ++r)
    for (int t : {17, 93, 5, 211, 48, 7}) rep.push_back(t % vocab);
  std::vector<int32_t> plain = {2};
  for (int i = 0; i < 12; ++i) plain.push_back((i * 7919 + 13) % vocab);
  return {rep, plain};
}

TEST(Speculative, GreedyTokensEqualPlainDecodingOnEveryBackend) {
  for (const std::string& backend : Backends()) {
    int drafted = 0, accepted = 0;
    for (const char* fixture : {"tiny_qat", "tiny_dense_bf16"}) {
      SCOPED_TRACE(backend + " " + fixture);
      auto engine = Engine::Load(
          {.model_path = Fixture(fixture), .backend = backend, .context_capacity = 256});
      for (const auto& prompt : Prompts(engine->vocab_size())) {
        for (int n : {1, 7, 40}) {
          // (lavapipe is slow: the longest run there; the short ones exercise host logic)
          if (backend == "vulkan" && n != 40) continue;
          auto plain_session = engine->NewSession();
          const Result plain = plain_session->Generate(Input::Ids(prompt), Greedy(n, false));
          // The next turn: the whole conversation so far and one more token.
          std::vector<int32_t> next = prompt;
          next.insert(next.end(), plain.tokens.begin(), plain.tokens.end());
          next.push_back(prompt[1]);
          const std::vector<int32_t> plain_cached = plain_session->evaluated();
          const Result plain_next = plain_session->Generate(Input::Ids(next), Greedy(8, false));
          for (int k : {2, 6}) {
            auto spec_session = engine->NewSession();
            const Result spec = spec_session->Generate(Input::Ids(prompt), Greedy(n, true, k));
            ASSERT_EQ(spec.tokens, plain.tokens) << "n " << n << " k " << k;
            EXPECT_TRUE(spec.resolved_config["speculative"]["applied"].get<bool>());
            EXPECT_LE(spec.telemetry.accepted, spec.telemetry.drafted);
            drafted += spec.telemetry.drafted;
            accepted += spec.telemetry.accepted;
            // The caches hold what plain decoding leaves: the next turn decodes the same.
            EXPECT_EQ(spec_session->evaluated(), plain_cached);
            EXPECT_EQ(spec_session->Generate(Input::Ids(next), Greedy(8, true, k)).tokens,
                      plain_next.tokens);
          }
        }
      }
    }
    // Both outcomes happened: drafts taken and drafts rolled back.
    EXPECT_GT(accepted, 0) << backend;
    EXPECT_LT(accepted, drafted) << backend;
  }
}

TEST(Speculative, OffWhereItCannotBeExactAndRejectsBadSettings) {
  auto engine = Engine::Load({.model_path = Fixture("tiny_qat"), .backend = "cpu-ref"});
  const std::vector<int32_t> prompt = {2, 17, 93, 5, 17, 93, 5};
  GenerateOptions o = Greedy(6, true);
  o.logprobs = true;  // needs every token's log-prob: plain steps
  const Result r = engine->NewSession()->Generate(Input::Ids(prompt), o);
  EXPECT_FALSE(r.resolved_config["speculative"]["applied"].get<bool>());
  EXPECT_EQ(r.telemetry.verify_steps, 0);
  EXPECT_EQ(r.tokens, engine->NewSession()->Generate(Input::Ids(prompt), Greedy(6, false)).tokens);
  GenerateOptions bad = Greedy(6, true, 7);
  try {
    engine->NewSession()->Generate(Input::Ids(prompt), bad);
    FAIL() << "max_draft 7 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace gemma
