// Speculative decoding with prompt-lookup drafts: greedy output token for token as plain decoding
// on every backend built in (the transformers fixtures and a synthetic checkpoint), with drafts
// accepted and rejected, every stopping cause, and the session's caches left as plain decoding
// leaves them (a following turn reuses them and decodes the same).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "gemma/engine.h"
#include "gemma/error.h"
#include "model/synth.h"
#include "runtime/test_support.h"

namespace gemma {
namespace {

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
          // (lavapipe is slow: the longest run on the QAT fixture there; the short ones exercise
          // host logic)
          if (backend == "vulkan" && (n != 40 || std::string(fixture) != "tiny_qat")) continue;
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

// Sampling: the draft is accepted when the sampler's own draw equals it, so with a seed the tokens,
// their log-probs and the caches are plain sampling's, under every filter and penalty and a
// constraint applied to the logits.
TEST(Speculative, SeededSamplingGivesPlainSamplingsTokens) {
  const std::string trained = std::string(GEMMA_SOURCE_DIR) + "/models/tiny-trained";
  int drafted = 0, accepted = 0;
  for (const std::string& backend : {"cpu-ref", "cpu"}) {
    for (const std::string& dir : {trained, trained + "/qat"}) {
      SCOPED_TRACE(backend + " " + dir);
      auto engine = Engine::Load({.model_path = dir, .backend = backend, .context_capacity = 512});
      const Input input = Input::Messages(nlohmann::json::array(
          {{{"role", "user"},
            {"content",
             "Repeat after me: the package manager installs the package and the package manager "
             "removes the package. The package manager installs the package."}}}));
      // (the reference backend is slow: one case there)
      const bool ref = backend == "cpu-ref";
      if (ref && dir == trained) continue;
      for (int variant = 0; variant < (ref ? 1 : 3); ++variant) {
        GenerateOptions o = SampledVariant(variant);
        for (uint64_t seed : {1u, 2u, 3u}) {
          if (ref && seed > 1) break;
          o.seed = seed;
          o.speculative.mode = SpeculativeOptions::Mode::kOff;
          auto plain_session = engine->NewSession();
          const Result plain = plain_session->Generate(input, o);
          o.speculative.mode = SpeculativeOptions::Mode::kPromptLookup;
          o.speculative.max_draft = 4;
          auto spec_session = engine->NewSession();
          const Result spec = spec_session->Generate(input, o);
          ASSERT_EQ(spec.tokens, plain.tokens) << "variant " << variant << " seed " << seed;
          ASSERT_EQ(spec.logprobs.size(), plain.logprobs.size());
          for (size_t t = 0; t < spec.logprobs.size(); ++t) {
            EXPECT_EQ(spec.logprobs[t].logprob, plain.logprobs[t].logprob);
            EXPECT_EQ(spec.logprobs[t].top, plain.logprobs[t].top);
          }
          EXPECT_EQ(spec.stop_reason, plain.stop_reason);
          EXPECT_EQ(spec_session->evaluated(), plain_session->evaluated());
          EXPECT_TRUE(spec.resolved_config["speculative"]["applied"].get<bool>());
          drafted += spec.telemetry.drafted;
          accepted += spec.telemetry.accepted;
        }
      }
    }
  }
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted);
}

// The same as a statistical statement, independent of seeds: the second generated token's
// distribution over 400 seeds with speculation and 400 other seeds without. Their total-variation
// distance must be within what two samples of one distribution show at the 0.1% level (its null
// distribution by a permutation test on the pooled samples, 2,000 permutations).
TEST(Speculative, SampledTokenDistributionEqualsPlainSampling) {
  auto engine = Engine::Load({.model_path = std::string(GEMMA_SOURCE_DIR) + "/models/tiny-trained",
                              .backend = "cpu",
                              .context_capacity = 1024});
  // A long, varied prompt: the first sampled token has most often occurred in it, so a draft
  // (what followed it there) is verified for the second.
  std::ifstream f(std::string(GEMMA_SOURCE_DIR) + "/models/tiny-trained/heldout_sample.txt");
  std::string text(1500, '\0');
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(f.gcount()));
  text.resize(text.rfind(". ") + 1);  // (a sentence's end: the next token starts a word)
  const Input input = Input::Text(text);
  int drafted = 0;
  constexpr int kSeeds = 400;
  auto sample = [&](bool spec, uint64_t seed0) {
    std::vector<int32_t> second;
    auto session = engine->NewSession();
    for (int i = 0; i < kSeeds; ++i) {
      GenerateOptions o;
      o.max_new_tokens = 2;
      o.ignore_eos = true;
      o.temperature = 1.0;
      o.seed = seed0 + i;
      if (spec) o.speculative.mode = SpeculativeOptions::Mode::kPromptLookup;
      const Result r = session->Generate(input, o);
      second.push_back(r.tokens.at(1));
      drafted += r.telemetry.drafted;
    }
    return second;
  };
  const std::vector<int32_t> a = sample(true, 0), b = sample(false, 100000);
  auto tv = [](const std::vector<int32_t>& x, const std::vector<int32_t>& y) {
    std::map<int32_t, double> d;
    for (int32_t t : x) d[t] += 1.0 / x.size();
    for (int32_t t : y) d[t] -= 1.0 / y.size();
    double s = 0;
    for (const auto& [t, v] : d) s += std::abs(v);
    return s / 2;
  };
  const double observed = tv(a, b);
  std::vector<int32_t> pool = a;
  pool.insert(pool.end(), b.begin(), b.end());
  std::mt19937_64 rng(7);
  int as_large = 0;
  constexpr int kPermutations = 2000;
  for (int p = 0; p < kPermutations; ++p) {
    std::shuffle(pool.begin(), pool.end(), rng);
    const std::vector<int32_t> x(pool.begin(), pool.begin() + kSeeds), y(pool.begin() + kSeeds, pool.end());
    if (tv(x, y) >= observed) ++as_large;
  }
  const double p_value = static_cast<double>(as_large + 1) / (kPermutations + 1);
  EXPECT_GT(drafted, kSeeds / 2) << "too few drafts for the test to see the rule: " << drafted;
  RecordProperty("tv", std::to_string(observed));
  EXPECT_GT(p_value, 0.001) << "total variation " << observed;
}

// Jump-forward: a constraint's forced text (a schema's keys and punctuation, a tool-call frame)
// drafted and verified; the tokens are token-by-token constrained decoding's, greedy (select
// steps without it) and sampled, with forced drafts taken.
TEST(Speculative, JumpForwardGivesTokenByTokenConstrainedOutput) {
  const std::string trained = std::string(GEMMA_SOURCE_DIR) + "/models/tiny-trained";
  int steps = 0, accepted = 0;
  for (const std::string& backend : {"cpu", "cpu-ref"}) {
    auto engine = Engine::Load({.model_path = trained, .backend = backend, .context_capacity = 512});
    const nlohmann::json tools = nlohmann::json::parse(R"([{"type":"function","function":{
        "name":"install_package","description":"Install a package",
        "parameters":{"type":"object","properties":{"package_name":{"type":"string"},
        "assume_yes":{"type":"boolean"}},"required":["package_name","assume_yes"]}}}])");
    for (int variant = 0; variant < 4; ++variant) {
      if (backend == "cpu-ref" && variant != 0) continue;  // (slow: one case)
      SCOPED_TRACE(backend + " variant " + std::to_string(variant));
      GenerateOptions o;
      o.max_new_tokens = 48;
      Input input = Input::Messages(nlohmann::json::array(
          {{{"role", "user"}, {"content", "Describe the package manager as JSON."}}}));
      if (variant < 2) {
        o.constraint.kind = OutputConstraint::Kind::kJsonSchema;
        o.constraint.schema_json = R"({"type":"object","properties":{
            "package_manager_name":{"type":"string","maxLength":12},
            "package_manager_kind":{"enum":["system-wide"]},
            "number_of_packages":{"type":"integer"}},
            "required":["package_manager_name","package_manager_kind","number_of_packages"],
            "additionalProperties":false})";
      } else {
        input = Input::Messages(nlohmann::json::array(
                                    {{{"role", "user"}, {"content", "Install the vim package."}}}),
                                tools);
        o.constraint.kind = OutputConstraint::Kind::kToolCalls;
        o.constraint.require_tool_call = true;
      }
      if (variant % 2 == 1) {
        o.temperature = 0.8;
        o.top_k = 30;
        o.seed = 11;
      }
      auto plain_session = engine->NewSession();
      const Result plain = plain_session->Generate(input, o);
      o.speculative.jump_forward = true;
      o.speculative.max_draft = 6;
      auto jump_session = engine->NewSession();
      const Result jump = jump_session->Generate(input, o);
      EXPECT_EQ(jump.tokens, plain.tokens);
      EXPECT_EQ(jump.stop_reason, plain.stop_reason);
      EXPECT_EQ(jump_session->evaluated(), plain_session->evaluated());
      EXPECT_TRUE(jump.resolved_config["speculative"]["jump_forward_applied"].get<bool>());
      steps += jump.telemetry.jump_forward_steps;
      accepted += jump.telemetry.accepted;
    }
  }
  RecordProperty("jump_forward_steps", steps);
  RecordProperty("accepted", accepted);
  EXPECT_GT(steps, 0);
  EXPECT_GT(accepted, 0);
}

TEST(Speculative, OffWhereItCannotBeExactAndRejectsBadSettings) {
  auto engine = Engine::Load(
      {.model_path = std::string(GEMMA_SOURCE_DIR) + "/models/tiny-trained", .backend = "cpu-ref"});
  const std::vector<int32_t> prompt = {2, 17, 93, 5, 17, 93, 5};
  GenerateOptions o = Greedy(6, true);
  // Constrained greedy (select steps: each position's mask depends on the tokens before it).
  o.constraint.kind = OutputConstraint::Kind::kRegex;
  o.constraint.regex = "(.|\n)*";
  const Result r = engine->NewSession()->Generate(Input::Ids(prompt), o);
  EXPECT_FALSE(r.resolved_config["speculative"]["applied"].get<bool>());
  EXPECT_EQ(r.telemetry.verify_steps, 0);
  o.speculative.mode = SpeculativeOptions::Mode::kOff;
  EXPECT_EQ(r.tokens, engine->NewSession()->Generate(Input::Ids(prompt), o).tokens);
  GenerateOptions bad = Greedy(6, true, 7);
  try {
    engine->NewSession()->Generate(Input::Ids(prompt), bad);
    FAIL() << "max_draft 7 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

// A caller's drafter (kCustom): drafts right by construction (the model's own greedy continuation,
// computed beforehand) are all accepted; wrong ones never are and the policy stops drafting;
// either way, and with seeded sampling, the tokens are plain decoding's. A drafter that throws or
// returns an id outside the vocabulary fails the request with kCallback and leaves the session as
// plain decoding finds it.
TEST(Speculative, CustomDrafterRightWrongAndBroken) {
  auto engine =
      Engine::Load({.model_path = Fixture("tiny_qat"), .backend = "cpu", .context_capacity = 256});
  const int V = engine->vocab_size();
  const std::vector<int32_t> prompt = Prompts(V)[1];
  const int n = 40;
  const Result plain = engine->NewSession()->Generate(Input::Ids(prompt), Greedy(n, false));
  ASSERT_EQ(plain.tokens.size(), static_cast<size_t>(n));
  const std::vector<int32_t>& want = plain.tokens;
  // The drafter sees the context so far, the token about to be evaluated last: want[j].
  bool context_ok = true;
  int calls = 0;
  auto oracle = [&](int wrong_from) {
    return [&, wrong_from](std::span<const int32_t> ctx, int k) {
      ++calls;
      const int j = static_cast<int>(ctx.size() - prompt.size()) - 1;
      context_ok = context_ok && j >= 0 && j < n &&
                   std::equal(prompt.begin(), prompt.end(), ctx.begin()) &&
                   std::equal(want.begin(), want.begin() + j + 1, ctx.begin() + prompt.size());
      std::vector<int32_t> d;
      for (int i = 0; i < k + 2 && j + 1 + i < n; ++i)  // (2 more than asked: cut to k)
        d.push_back(i < wrong_from ? want[j + 1 + i] : (want[j + 1 + i] + 1) % V);
      return d;
    };
  };
  auto custom = [&](int max_draft, int wrong_from) {
    GenerateOptions o = Greedy(n, false);
    o.speculative.mode = SpeculativeOptions::Mode::kCustom;
    o.speculative.max_draft = max_draft;
    o.speculative.drafter = oracle(wrong_from);
    return o;
  };
  {
    const Result r = engine->NewSession()->Generate(Input::Ids(prompt), custom(4, 1 << 20));
    EXPECT_EQ(r.tokens, want);
    EXPECT_TRUE(context_ok);
    EXPECT_EQ(r.resolved_config["speculative"]["mode"], "custom");
    EXPECT_GT(r.telemetry.drafted, 0);
    EXPECT_EQ(r.telemetry.accepted, r.telemetry.drafted);
    EXPECT_LE(r.telemetry.drafted, 4 * r.telemetry.verify_steps);
    // All right: the drafts lengthen from one token (the policy starts at acceptance 1/2) to 4,
    // each step then giving 5 tokens.
    EXPECT_LE(r.telemetry.verify_steps, (n + 4) / 5 + 3);
    EXPECT_GT(r.telemetry.drafted, 2 * r.telemetry.verify_steps);
  }
  {
    calls = 0;
    const Result r = engine->NewSession()->Generate(Input::Ids(prompt), custom(3, 0));
    EXPECT_EQ(r.tokens, want);
    EXPECT_TRUE(context_ok);
    EXPECT_GT(r.telemetry.drafted, 0);
    EXPECT_EQ(r.telemetry.accepted, 0);
    EXPECT_LT(calls, n - 1);  // the policy paused drafting
  }
  {
    // Half right: the first two of four drafted tokens.
    const Result r = engine->NewSession()->Generate(Input::Ids(prompt), custom(4, 2));
    EXPECT_EQ(r.tokens, want);
    EXPECT_GT(r.telemetry.accepted, 0);
    EXPECT_LT(r.telemetry.accepted, r.telemetry.drafted);
  }
  {
    // Seeded sampling with drafts half right: plain sampling's tokens.
    GenerateOptions sampled = Greedy(n, false);
    sampled.temperature = 0.8;
    sampled.top_k = 40;
    sampled.seed = 7;
    const Result ps = engine->NewSession()->Generate(Input::Ids(prompt), sampled);
    GenerateOptions so = sampled;
    so.speculative.mode = SpeculativeOptions::Mode::kCustom;
    so.speculative.drafter = [&](std::span<const int32_t> ctx, int k) {
      const int j = static_cast<int>(ctx.size() - prompt.size()) - 1;
      std::vector<int32_t> d;
      for (int i = 0; i < k && j + 1 + i < n; ++i) d.push_back(i % 2 ? 5 : ps.tokens[j + 1 + i]);
      return d;
    };
    const Result r = engine->NewSession()->Generate(Input::Ids(prompt), so);
    EXPECT_EQ(r.tokens, ps.tokens);
    EXPECT_GT(r.telemetry.accepted, 0);
  }
  // Broken drafters: kCallback; the session then decodes as a fresh one.
  auto expect_callback_error =
      [&](const SpeculativeOptions::Mode mode,
          std::function<std::vector<int32_t>(std::span<const int32_t>, int)> drafter,
          const std::string& says) {
        auto session = engine->NewSession();
        GenerateOptions o = Greedy(n, false);
        o.speculative.mode = mode;
        o.speculative.drafter = std::move(drafter);
        try {
          session->Generate(Input::Ids(prompt), o);
          ADD_FAILURE() << "a broken drafter was accepted: " << says;
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::kCallback) << e.what();
          EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
        }
        EXPECT_LE(session->evaluated().size(), prompt.size());
        EXPECT_EQ(session->Generate(Input::Ids(prompt), Greedy(n, false)).tokens, want);
      };
  int seen = 0;
  expect_callback_error(
      SpeculativeOptions::Mode::kCustom,
      [&](std::span<const int32_t> ctx, int k) -> std::vector<int32_t> {
        if (++seen == 3) throw std::runtime_error("index offline");
        return oracle(1 << 20)(ctx, k);
      },
      "index offline");
  expect_callback_error(
      SpeculativeOptions::Mode::kCustom,
      [&](std::span<const int32_t>, int) { return std::vector<int32_t>{V}; }, "outside the vocab");
  try {
    GenerateOptions o = Greedy(4, false);
    o.speculative.mode = SpeculativeOptions::Mode::kCustom;
    engine->NewSession()->Generate(Input::Ids(prompt), o);
    FAIL() << "kCustom without a drafter accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

// Rollback across sliding-window boundaries and at the context limit. A window of 4 (a ring of 8:
// one window of slack) and drafts of up to 6 tokens rejected after 0..k of them: the caches rewind
// within the slack (Truncate) and past it (re-evaluation) over and over as the rings wrap; the
// request fills the context exactly, so the last drafts are cut by the room left. Tokens, the
// caches and the next turn are plain decoding's, on cpu and cpu-ref.
TEST(Speculative, RollbackAcrossSlidingRingsAndAtTheContextLimit) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("gemma_spec_ring_" + std::to_string(::getpid())))
          .string();
  Synthesize(
      {.preset = "tiny", .out_dir = dir, .seed = 9, .sliding_window = 4, .vocab_size = 1024});
  constexpr int kCapacity = 96;
  for (const std::string backend : {"cpu", "cpu-ref"}) {
    SCOPED_TRACE(backend);
    auto engine =
        Engine::Load({.model_path = dir, .backend = backend, .context_capacity = kCapacity});
    const int V = engine->vocab_size();
    std::vector<int32_t> prompt = {2};
    for (int i = 0; i < 19; ++i) prompt.push_back(3 + (i * 389 + 7) % (V - 3));
    const int n = kCapacity - static_cast<int>(prompt.size());  // fills the context
    auto plain_session = engine->NewSession();
    const Result plain = plain_session->Generate(Input::Ids(prompt), Greedy(n, false));
    ASSERT_EQ(plain.tokens.size(), static_cast<size_t>(n));
    const std::vector<int32_t> plain_cached = plain_session->evaluated();
    // The next turn: the context minus its last 30 positions, then new tokens.
    std::vector<int32_t> next(plain_cached.begin(), plain_cached.end() - 30);
    for (int i = 0; i < 5; ++i) next.push_back(3 + (i * 17) % (V - 3));
    const Result plain_next = plain_session->Generate(Input::Ids(next), Greedy(12, false));
    for (const int pattern : {0, 1}) {
      const int max_draft = pattern ? 6 : 3;
      SCOPED_TRACE("max_draft " + std::to_string(max_draft));
      int calls = 0;
      GenerateOptions o = Greedy(n, false);
      o.speculative.mode = SpeculativeOptions::Mode::kCustom;
      o.speculative.max_draft = max_draft;
      // Right for the first (call % (k + 1)) tokens, then wrong: rejections at every offset; or
      // mostly right (so the policy drafts 6) with every fifth draft wrong from its first token
      // and every fifth from its second: rewinds of 6 and 5 positions, past the ring's slack of 4.
      o.speculative.drafter = [&](std::span<const int32_t> ctx, int k) {
        const int c = calls++;
        const int right = pattern == 0 ? c % (k + 1) : c % 5 == 2 ? 0 : c % 5 == 4 ? 1 : k;
        std::vector<int32_t> d;
        for (size_t j = ctx.size() - prompt.size();
             static_cast<int>(d.size()) < k && j < plain.tokens.size(); ++j) {
          const int32_t t = plain.tokens[j];
          d.push_back(static_cast<int>(d.size()) < right ? t : (t + 1) % V);
        }
        return d;
      };
      // (no pauses: the policy's costs and acceptance are what they are; drafts still come often)
      auto session = engine->NewSession();
      const Result spec = session->Generate(Input::Ids(prompt), o);
      EXPECT_EQ(spec.tokens, plain.tokens);
      EXPECT_EQ(session->evaluated(), plain_cached);
      EXPECT_GT(spec.telemetry.accepted, 0);
      EXPECT_LT(spec.telemetry.accepted, spec.telemetry.drafted);
      const Result spec_next = session->Generate(Input::Ids(next), Greedy(12, false));
      EXPECT_EQ(spec_next.tokens, plain_next.tokens);
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gemma
