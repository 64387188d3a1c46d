// Batched decode across sessions (issue 43): sessions generating on their own threads at the same
// time, their one-token steps evaluated together by the engine's batcher, give exactly the tokens,
// log-probs and stops each gives alone (greedy, seeded sampling, constraints, logprobs, joining
// and leaving at different times, one running out of context), on the trained model (bf16, QAT).
#include <gtest/gtest.h>

#include <barrier>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "gemma/engine.h"
#include "gemma/error.h"

namespace gemma {
namespace {

struct Request {
  Input input;
  GenerateOptions options;
};

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  StopReason stop = StopReason::kLength;
  std::string error;
  Telemetry telemetry;
};

Outcome RunOne(Session& s, const Request& r) {
  Outcome o;
  try {
    Result res = s.Generate(r.input, r.options);
    o.tokens = res.tokens;
    o.logprobs = res.logprobs;
    o.stop = res.stop_reason;
    o.telemetry = res.telemetry;
  } catch (const Error& e) {
    o.error = e.what();
  }
  return o;
}

std::vector<Request> Requests(int capacity) {
  std::vector<Request> r;
  auto chat = [](const std::string& q) {
    return Input::Messages(nlohmann::json::array({{{"role", "user"}, {"content", q}}}));
  };
  GenerateOptions greedy;
  greedy.max_new_tokens = 48;
  r.push_back({chat("What is a package manager?"), greedy});
  GenerateOptions sampled;
  sampled.max_new_tokens = 40;
  sampled.temperature = 0.9;
  sampled.top_k = 40;
  sampled.top_p = 0.95;
  sampled.seed = 1234;
  sampled.repetition_penalty = 1.1;
  r.push_back({chat("Tell me about the kernel."), sampled});
  GenerateOptions lp = greedy;
  lp.max_new_tokens = 17;  // leaves early
  lp.logprobs = true;
  lp.top_logprobs = 3;
  r.push_back({Input::Text("The system starts"), lp});
  GenerateOptions date;
  date.max_new_tokens = 30;
  date.constraint.kind = OutputConstraint::Kind::kRegex;
  date.constraint.regex = "[0-9]{4}-[0-9]{2}-[0-9]{2}";
  r.push_back({chat("When was the release? Answer with a date."), date});
  GenerateOptions sampled2 = sampled;
  sampled2.seed = 99;
  sampled2.max_new_tokens = 64;
  sampled2.min_p = 0.05;
  r.push_back({chat("How do I copy a file?"), sampled2});
  // Runs out of context while the others decode.
  GenerateOptions longer = greedy;
  longer.max_new_tokens = 200;
  longer.ignore_eos = true;
  std::string words;
  for (int i = 0; i < capacity; ++i) words += " the file";
  Request full{Input::Text(words), longer};
  r.push_back(full);
  return r;
}

void ExpectSame(const Outcome& got, const Outcome& want, size_t i) {
  EXPECT_EQ(got.error.empty(), want.error.empty()) << "request " << i << ": " << got.error << " / "
                                                   << want.error;
  EXPECT_EQ(got.tokens, want.tokens) << "request " << i;
  EXPECT_EQ(got.stop, want.stop) << "request " << i;
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << "request " << i;
  for (size_t t = 0; t < got.logprobs.size(); ++t) {
    EXPECT_EQ(got.logprobs[t].id, want.logprobs[t].id);
    EXPECT_EQ(got.logprobs[t].logprob, want.logprobs[t].logprob) << "request " << i << " token " << t;
    EXPECT_EQ(got.logprobs[t].top, want.logprobs[t].top);
  }
}

TEST(BatchedDecode, ConcurrentSessionsGiveTheirSoloResults) {
  for (const char* sub : {"", "/qat"}) {
    const std::string dir = std::string(GEMMA_SOURCE_DIR) + "/models/tiny-trained" + sub;
    SCOPED_TRACE(dir);
    constexpr int kCapacity = 160;
    const std::vector<Request> requests = Requests(kCapacity - 40);
    // Alone: one engine without batching, one request after another.
    auto solo_engine = Engine::Load(
        {.model_path = dir, .context_capacity = kCapacity, .threads = 2, .max_batch = 1});
    std::vector<Outcome> want;
    for (const Request& r : requests) {
      auto s = solo_engine->NewSession();
      want.push_back(RunOne(*s, r));
    }
    ASSERT_EQ(want.back().error.empty(), false) << "the long request should run out of context";
    // Together: every request on its own thread and session, two rounds (the second reuses the
    // sessions' caches as a prefix where the prompt allows).
    auto engine =
        Engine::Load({.model_path = dir, .context_capacity = kCapacity, .threads = 2});
    std::vector<std::unique_ptr<Session>> sessions;
    for (size_t i = 0; i < requests.size(); ++i) sessions.push_back(engine->NewSession());
    int batched = 0, largest = 0;
    for (int round = 0; round < 2; ++round) {
      std::vector<Outcome> got(requests.size());
      std::barrier start(static_cast<std::ptrdiff_t>(requests.size()));
      std::vector<std::thread> threads;
      for (size_t i = 0; i < requests.size(); ++i) {
        threads.emplace_back([&, i] {
          start.arrive_and_wait();
          got[i] = RunOne(*sessions[i], requests[i]);
        });
      }
      for (std::thread& t : threads) t.join();
      for (size_t i = 0; i < requests.size(); ++i) {
        ExpectSame(got[i], want[i], i);
        batched += got[i].telemetry.batched_steps;
        largest = std::max(largest, got[i].telemetry.max_batch);
      }
    }
    // (six sessions decoding at once on two cores: steps meet in batches)
    EXPECT_GT(batched, 0);
    EXPECT_GE(largest, 3);
    RecordProperty(std::string("batched_steps") + (*sub ? "_qat" : ""), batched);
  }
}

// Sessions decoding speculatively at the same time: their verification steps (the token and its
// draft) join the batches of the others' steps on the fast CPU backend, and every session still
// gets plain decoding's tokens (greedy and seeded sampling; prompt lookup and a caller's drafter
// that is always right, so that every one of its steps is a verification step).
TEST(BatchedDecode, SpeculativeSessionsBatchTheirVerificationSteps) {
  const std::string dir = std::string(GEMMA_SOURCE_DIR) + "/models/tiny-trained/qat";
  auto chat = [](const std::string& q) {
    return Input::Messages(nlohmann::json::array({{{"role", "user"}, {"content", q}}}));
  };
  const Input quote = chat(
      "Repeat after me: the package manager installs the package and the package manager "
      "removes the package. The package manager installs the package.");
  std::vector<Request> requests;
  GenerateOptions greedy;
  greedy.max_new_tokens = 48;
  greedy.ignore_eos = true;
  requests.push_back({quote, greedy});
  GenerateOptions sampled = greedy;
  sampled.temperature = 0.7;
  sampled.top_k = 20;
  sampled.seed = 5;
  requests.push_back({quote, sampled});
  requests.push_back({chat("What is a package manager?"), greedy});
  requests.push_back({chat("Tell me about the kernel."), greedy});
  auto solo_engine =
      Engine::Load({.model_path = dir, .context_capacity = 256, .threads = 2, .max_batch = 1});
  std::vector<Outcome> want;
  for (const Request& r : requests) want.push_back(RunOne(*solo_engine->NewSession(), r));
  // Speculative: prompt lookup for the first two, a drafter right by construction for the third
  // (it drafts the solo run's continuation), plain decoding for the last.
  std::vector<Request> spec = requests;
  for (int i = 0; i < 2; ++i) {
    spec[i].options.speculative.mode = SpeculativeOptions::Mode::kPromptLookup;
    spec[i].options.speculative.max_draft = 4;
  }
  const std::vector<int32_t> prompt = solo_engine->PromptTokens(requests[2].input);
  const std::vector<int32_t>& right = want[2].tokens;
  spec[2].options.speculative.mode = SpeculativeOptions::Mode::kCustom;
  spec[2].options.speculative.max_draft = 3;
  spec[2].options.speculative.drafter = [&](std::span<const int32_t> ctx, int k) {
    std::vector<int32_t> d;
    for (size_t j = ctx.size() - prompt.size();
         d.size() < static_cast<size_t>(k) && j < right.size(); ++j)
      d.push_back(right[j]);
    return d;
  };
  auto engine = Engine::Load({.model_path = dir, .context_capacity = 256, .threads = 2});
  int verify = 0, drafter_batched = 0;
  for (int round = 0; round < 3; ++round) {
    std::vector<Outcome> got(spec.size());
    std::barrier start(static_cast<std::ptrdiff_t>(spec.size()));
    std::vector<std::thread> threads;
    for (size_t i = 0; i < spec.size(); ++i) {
      threads.emplace_back([&, i] {
        auto session = engine->NewSession();
        start.arrive_and_wait();
        got[i] = RunOne(*session, spec[i]);
      });
    }
    for (std::thread& t : threads) t.join();
    for (size_t i = 0; i < spec.size(); ++i) {
      ExpectSame(got[i], want[i], i);
      verify += got[i].telemetry.verify_steps;
    }
    EXPECT_EQ(got[2].telemetry.accepted, got[2].telemetry.drafted);
    drafter_batched += got[2].telemetry.batched_steps;
  }
  EXPECT_GT(verify, 0);
  // (the drafting session's steps are all verification steps: some ran in batches)
  EXPECT_GT(drafter_batched, 0);
}

TEST(BatchedDecode, MaxBatchIsValidated) {
  const std::string dir = std::string(GEMMA_SOURCE_DIR) + "/models/tiny-trained";
  EXPECT_THROW(Engine::Load({.model_path = dir, .context_capacity = 64, .max_batch = 0}), Error);
  EXPECT_THROW(Engine::Load({.model_path = dir, .context_capacity = 64, .max_batch = 1000}),
               Error);
}

}  // namespace
}  // namespace gemma
