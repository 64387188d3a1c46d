// Randomized differential decode test of the fast CPU backend against the CPU reference (issue
// 34): see tests/decode_diff_util.h. GEMMA_DIFF_CONFIGS=N runs N configurations of each format.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>

#include "backend/cpu/fast/cpu_fast_backend.h"
#include "decode_diff_util.h"
#include "gemma/error.h"

namespace gemma {
namespace {

// Dense logits against the reference: design.md section 4's target.
constexpr double kDenseTol = 1e-4;

std::unique_ptr<Backend> MakeFast(const Model& model, const BackendOptions& opt) {
  return CreateCpuFastBackend(model, opt, /*threads=*/2);
}

TEST(CpuFastDecodeDiff, IssueLayoutDecodesLikeTheReference) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("gemma_fast_diff_issue_" + std::to_string(::getpid())))
                              .string();
  Synthesize({.out_dir = dir, .seed = 1, .shape = IssueSynthShape()});
  auto model = Model::Load(dir);
  const DiffOutcome o =
      RunDecodeDiff(*model, 1, DiffEnvInt("GEMMA_DIFF_STEPS", 300), kDenseTol,
                    [&](const BackendOptions& opt) { return MakeFast(*model, opt); });
  std::filesystem::remove_all(dir);
  std::printf("worst rel L2 %.3g, SRQ-flip positions %d, first inexact %d\n", o.worst, o.srq_flips,
              o.first_inexact);
}

TEST(CpuFastDecodeDiff, RandomConfigsDecodeLikeTheReference) {
  RunDiffConfigs(/*configs=*/6, /*first_seed=*/100, /*steps=*/250, kDenseTol, MakeFast);
}

// Batched decode (issue 43): contexts of one model advanced together by ForwardBatch give bit for
// bit what each gives alone, in every output mode, as sequences join and leave between steps, with
// caches wrapping their sliding rings; a bad step fails alone and leaves its context unchanged.
TEST(CpuFastBatch, BatchedStepsAreBitIdenticalToSoloSteps) {
  for (uint64_t seed : {300u, 301u}) {
    for (bool qat : {false, true}) {
      DiffModel dm(seed, qat);
      const Model& model = *dm.model;
      const int V = model.text().vocab_size;
      auto batched = CreateCpuFastModel(model, 2);
      auto solo = CreateCpuFastModel(model, 2);
      constexpr int kSeqs = 6;
      std::mt19937_64 rng(seed * 7 + qat);
      std::vector<std::unique_ptr<Backend>> b, s;
      for (int i = 0; i < kSeqs; ++i) {
        b.push_back(batched->NewContext({.capacity = 256, .slack = 4}));
        s.push_back(solo->NewContext({.capacity = 256, .slack = 4}));
        std::vector<int32_t> prompt(1 + rng() % 40);
        for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % V);
        ForwardResult r1, r2;
        b[i]->Forward({.tokens = prompt, .mode = OutputMode::kNone}, &r1);
        s[i]->Forward({.tokens = prompt, .mode = OutputMode::kNone}, &r2);
      }
      std::vector<uint64_t> mask((V + 63) / 64);
      for (int step = 0; step < 60; ++step) {
        for (uint64_t& w : mask) w = rng() | rng();
        std::vector<BatchStep> steps;
        std::vector<int32_t> tokens(kSeqs);
        std::vector<int> who;
        std::vector<ForwardResult> got(kSeqs + 1), want(kSeqs);
        std::vector<OutputMode> modes(kSeqs);
        for (int i = 0; i < kSeqs; ++i) {
          if (rng() % 10 < 3) continue;  // this sequence sits the step out
          tokens[i] = static_cast<int32_t>(rng() % V);
          const OutputMode modes_all[] = {OutputMode::kArgmax, OutputMode::kLogits,
                                          OutputMode::kSelect};
          modes[i] = modes_all[rng() % 3];
          who.push_back(i);
        }
        for (int i : who) {
          steps.push_back({.context = b[i].get(),
                           .request = {.tokens = std::span<const int32_t>(&tokens[i], 1),
                                       .mode = modes[i],
                                       .allowed = modes[i] == OutputMode::kSelect ? &mask : nullptr},
                           .result = &got[i]});
        }
        // Every fifth step a bad one (a token outside the vocabulary) on a sitting-out context.
        const int32_t bad = V;
        int bad_ctx = -1;
        if (step % 5 == 0 && static_cast<int>(who.size()) < kSeqs) {
          for (int i = 0; i < kSeqs && bad_ctx < 0; ++i)
            if (std::find(who.begin(), who.end(), i) == who.end()) bad_ctx = i;
          steps.push_back({.context = b[bad_ctx].get(),
                           .request = {.tokens = std::span<const int32_t>(&bad, 1)},
                           .result = &got[kSeqs]});
        }
        std::shuffle(steps.begin(), steps.end(), rng);
        const int bad_cached = bad_ctx >= 0 ? b[bad_ctx]->cached() : 0;
        batched->ForwardBatch(steps);
        for (const BatchStep& st : steps) {
          if (st.context == (bad_ctx >= 0 ? b[bad_ctx].get() : nullptr)) {
            ASSERT_TRUE(st.error) << "the bad step did not fail";
            EXPECT_THROW(std::rethrow_exception(st.error), Error);
          } else {
            ASSERT_FALSE(st.error) << "a good step failed";
          }
        }
        if (bad_ctx >= 0) EXPECT_EQ(b[bad_ctx]->cached(), bad_cached);
        for (int i : who) {
          s[i]->Forward({.tokens = std::span<const int32_t>(&tokens[i], 1),
                         .mode = modes[i],
                         .allowed = modes[i] == OutputMode::kSelect ? &mask : nullptr},
                        &want[i]);
          ASSERT_EQ(b[i]->cached(), s[i]->cached());
          ASSERT_EQ(got[i].ids, want[i].ids) << "seed " << seed << " step " << step << " seq " << i;
          ASSERT_EQ(got[i].logprobs, want[i].logprobs) << "seed " << seed << " step " << step;
          ASSERT_EQ(got[i].logits.size(), want[i].logits.size());
          ASSERT_TRUE(got[i].logits.empty() ||  // (memcmp must not see a null pointer)
                      std::memcmp(got[i].logits.data(), want[i].logits.data(),
                                  got[i].logits.size() * sizeof(float)) == 0)
              << "seed " << seed << (qat ? " qat" : " dense") << " step " << step << " seq " << i;
        }
      }
      // Contexts of another model are refused.
      auto other = solo->NewContext({.capacity = 16});
      const int32_t t0 = 0;
      ForwardResult r;
      std::vector<BatchStep> foreign = {
          {.context = other.get(), .request = {.tokens = std::span<const int32_t>(&t0, 1)},
           .result = &r}};
      batched->ForwardBatch(foreign);
      EXPECT_TRUE(foreign[0].error);
      EXPECT_EQ(other->cached(), 0);
    }
  }
}

// Speculative verification steps (several tokens, every position's output) batched with other
// contexts' one-token steps give bit for bit what each context's own Forward gives, and leave the
// caches as it does (the steps after them agree too).
TEST(CpuFastBatch, VerificationStepsInABatchAreBitIdenticalToSoloSteps) {
  for (const bool qat : {false, true}) {
    DiffModel dm(310, qat);
    const Model& model = *dm.model;
    const int V = model.text().vocab_size;
    auto batched = CreateCpuFastModel(model, 2);
    auto solo = CreateCpuFastModel(model, 2);
    ASSERT_TRUE(batched->batches_multi_token_steps());
    constexpr int kSeqs = 5;
    std::mt19937_64 rng(17 + qat);
    std::vector<std::unique_ptr<Backend>> b, s;
    for (int i = 0; i < kSeqs; ++i) {
      b.push_back(batched->NewContext({.capacity = 256, .slack = 8}));
      s.push_back(solo->NewContext({.capacity = 256, .slack = 8}));
      std::vector<int32_t> prompt(1 + rng() % 30);
      for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % V);
      ForwardResult r;
      b[i]->Forward({.tokens = prompt, .mode = OutputMode::kNone}, &r);
      s[i]->Forward({.tokens = prompt, .mode = OutputMode::kNone}, &r);
    }
    for (int step = 0; step < 30; ++step) {
      std::vector<std::vector<int32_t>> tokens(kSeqs);
      std::vector<ForwardRequest> req(kSeqs);
      std::vector<ForwardResult> got(kSeqs), want(kSeqs);
      std::vector<BatchStep> steps;
      for (int i = 0; i < kSeqs; ++i) {
        if (rng() % 5 == 0) continue;  // sits the step out
        // One token (any output mode) or a verification step of 2..7 tokens.
        const bool verify = rng() % 2 == 0;
        tokens[i].resize(verify ? 2 + rng() % 6 : 1);
        for (int32_t& t : tokens[i]) t = static_cast<int32_t>(rng() % V);
        req[i] = {.tokens = tokens[i],
                  .mode = rng() % 2 ? OutputMode::kArgmax : OutputMode::kLogits,
                  .all_positions = verify};
        steps.push_back({.context = b[i].get(), .request = req[i], .result = &got[i]});
      }
      std::shuffle(steps.begin(), steps.end(), rng);
      batched->ForwardBatch(steps);
      for (const BatchStep& st : steps) ASSERT_FALSE(st.error) << "step " << step;
      for (int i = 0; i < kSeqs; ++i) {
        if (tokens[i].empty()) continue;
        s[i]->Forward(req[i], &want[i]);
        ASSERT_EQ(b[i]->cached(), s[i]->cached());
        ASSERT_EQ(got[i].ids, want[i].ids) << "step " << step << " seq " << i;
        ASSERT_EQ(got[i].logits.size(), want[i].logits.size()) << "step " << step << " seq " << i;
        ASSERT_TRUE(got[i].logits.empty() ||
                    std::memcmp(got[i].logits.data(), want[i].logits.data(),
                                got[i].logits.size() * sizeof(float)) == 0)
            << (qat ? "qat" : "dense") << " step " << step << " seq " << i << " of "
            << tokens[i].size() << " tokens";
      }
    }
    // A step of several tokens must ask for every position's output.
    const int32_t two[2] = {1, 2};
    ForwardResult r;
    std::vector<BatchStep> bad = {
        {.context = b[0].get(),
         .request = {.tokens = std::span<const int32_t>(two, 2), .mode = OutputMode::kArgmax},
         .result = &r}};
    const int cached = b[0]->cached();
    batched->ForwardBatch(bad);
    EXPECT_TRUE(bad[0].error);
    EXPECT_EQ(b[0]->cached(), cached);
  }
}

// A batch wide enough that the MLP's GELU products are split over the pool (issue 43: 4 rows x
// 8,192 in the double-wide layers, 2 x 8,192 and 4 x 4,096 elsewhere) gives each context's solo
// logits bit for bit, on 2 and 3 threads (other split points).
TEST(CpuFastBatch, WideBatchesSplitTheGeluAndStayBitIdentical) {
  SynthShape shape = IssueSynthShape();
  shape.inter = 4096;
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("gemma_fast_wide_batch_" + std::to_string(::getpid())))
                              .string();
  Synthesize({.out_dir = dir, .seed = 5, .shape = shape});
  auto model = Model::Load(dir);
  const int V = model->text().vocab_size;
  for (int threads : {2, 3}) {
    auto batched = CreateCpuFastModel(*model, threads);
    auto solo = CreateCpuFastModel(*model, 1);
    std::vector<std::unique_ptr<Backend>> b, s;
    for (int i = 0; i < 4; ++i) {
      b.push_back(batched->NewContext({.capacity = 64}));
      s.push_back(solo->NewContext({.capacity = 64}));
      std::vector<int32_t> prompt(2 + 3 * i);
      for (size_t t = 0; t < prompt.size(); ++t) prompt[t] = static_cast<int32_t>((t * 37 + i) % V);
      ForwardResult r;
      b[i]->Forward({.tokens = prompt, .mode = OutputMode::kNone}, &r);
      s[i]->Forward({.tokens = prompt, .mode = OutputMode::kNone}, &r);
    }
    for (int step = 0; step < 6; ++step) {
      const int n = step % 3 == 2 ? 2 : 4;  // batches of 4 and of 2
      std::vector<int32_t> tokens(n);
      std::vector<ForwardResult> got(n), want(n);
      std::vector<BatchStep> steps;
      for (int i = 0; i < n; ++i) {
        tokens[i] = static_cast<int32_t>((step * 101 + i * 7) % V);
        steps.push_back({.context = b[i].get(),
                         .request = {.tokens = std::span<const int32_t>(&tokens[i], 1),
                                     .mode = OutputMode::kLogits},
                         .result = &got[i]});
      }
      batched->ForwardBatch(steps);
      for (int i = 0; i < n; ++i) {
        ASSERT_FALSE(steps[i].error);
        s[i]->Forward(
            {.tokens = std::span<const int32_t>(&tokens[i], 1), .mode = OutputMode::kLogits},
            &want[i]);
        ASSERT_EQ(got[i].logits.size(), static_cast<size_t>(V));
        ASSERT_EQ(0, std::memcmp(got[i].logits.data(), want[i].logits.data(), V * sizeof(float)))
            << "threads " << threads << " step " << step << " seq " << i;
      }
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gemma
