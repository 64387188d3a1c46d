#include "decode/draft.h"

#include <gtest/gtest.h>

namespace gemma::decode {
namespace {

TEST(PromptLookupDraft, ProposesWhatFollowedTheLongestEarlierMatch) {
  PromptLookupDraft d(3, 1);
  // Suffix "7 8 9" occurred at 1..3, followed by 4 5 6 7.
  const std::vector<int32_t> h = {1, 7, 8, 9, 4, 5, 6, 7, 2, 7, 8, 9};
  EXPECT_EQ(d.Propose(h, 3), (std::vector<int32_t>{4, 5, 6}));
  // Bounded by the history's end: only what followed exists.
  EXPECT_EQ(d.Propose(std::vector<int32_t>{5, 6, 5}, 4), (std::vector<int32_t>{6, 5}));
  EXPECT_TRUE(d.Propose(h, 0).empty());
}

TEST(PromptLookupDraft, PrefersLongerSuffixesAndTheMostRecentOccurrence) {
  PromptLookupDraft d(2, 1);
  // "3 4" occurs once (followed by 9); "4" alone most recently is followed by 8.
  const std::vector<int32_t> h = {3, 4, 9, 1, 4, 8, 2, 3, 4};
  EXPECT_EQ(d.Propose(h, 1), (std::vector<int32_t>{9}));
  PromptLookupDraft unigram(1, 1);
  EXPECT_EQ(unigram.Propose(h, 2), (std::vector<int32_t>{8, 2}));
  // No earlier occurrence of any suffix: no draft.
  EXPECT_TRUE(d.Propose(std::vector<int32_t>{1, 2, 3}, 4).empty());
  EXPECT_TRUE(d.Propose(std::vector<int32_t>{}, 4).empty());
}

// Plain steps (each timed, as the session times them) until the policy drafts again; *next gets
// the draft length it then asks for.
int PlainSteps(DraftPolicy& p, int* next) {
  int n = 0;
  while ((*next = p.Next()) == 0) {
    p.RecordPlainCost(1.0);
    ++n;
  }
  return n;
}

// Rejected drafts pause drafting; after the pause one token is drafted (a probe): drafting resumes
// when it is accepted, else the pause doubles (up to 256 plain steps) until a probe is accepted.
TEST(DraftPolicy, PausesWhenDraftsAreRejectedProbesAndBacksOff) {
  DraftPolicy p(4);
  // At a = 1/2 and unmeasured costs (1 + k/4 plain steps) one drafted token is worth the most.
  EXPECT_EQ(p.Next(), 1);
  EXPECT_NEAR(p.Gain(1), 1.5 / 1.25, 1e-12);
  p.Record(1, 0);
  EXPECT_EQ(p.Next(), 1);
  p.Record(1, 0);  // a ~0.2: not worth a step
  int k = 0;
  for (const int pause : {16, 32, 64, 128, 256, 256}) {
    EXPECT_EQ(PlainSteps(p, &k), pause);
    EXPECT_EQ(k, 1);  // the probe
    p.Record(1, 0);
  }
  EXPECT_EQ(PlainSteps(p, &k), 256);
  p.Record(1, 1);  // the probe's token was right: drafting again
  EXPECT_GT(p.Next(), 0);
  // Drafts that stay right lengthen to max_draft.
  int longest = 0;
  for (int i = 0; i < 8; ++i) {
    k = p.Next();
    ASSERT_GT(k, 0);
    longest = std::max(longest, k);
    p.Record(k, k);
  }
  EXPECT_EQ(longest, 4);
  // The next pause starts from 16 again.
  while ((k = p.Next()) > 0) p.Record(k, 0);
  EXPECT_EQ(PlainSteps(p, &k) + 1, 16);  // (the call that ended the loop was the first)
  EXPECT_EQ(DraftPolicy(0).Next(), 0);
}

// With the step costs measured, the length with the most tokens per cost: every length on a GPU
// whose steps cost ~1 + k/5 plain steps when drafts are right, one or two when half the tokens are;
// on a CPU whose 4-token tile makes 3 drafts cheap and 4 dear, 3; none where a verification step
// costs more than its tokens can give.
TEST(DraftPolicy, ChoosesTheDraftLengthWithTheMostTokensPerCost) {
  auto timed = [](std::vector<double> cost) {  // cost[k]: a k-draft step, in plain steps
    DraftPolicy p(6);
    for (int i = 0; i < 2; ++i) {
      p.RecordPlainCost(1.0);
      for (int k = 1; k <= 6; ++k) p.RecordVerifyCost(k, cost[k]);
    }
    return p;
  };
  const std::vector<double> gpu = {1, 1.2, 1.4, 1.6, 1.8, 2.0, 2.2};
  const std::vector<double> cpu = {1, 1.15, 1.3, 1.5, 2.2, 2.4, 3.0};
  auto run = [](DraftPolicy& p, int steps, auto accept) {
    int k = 0;
    for (int i = 0; i < steps; ++i) {
      k = p.Next();
      if (k > 0) p.Record(k, accept(k));
    }
    return p.Next();
  };
  {
    DraftPolicy p = timed(gpu);
    EXPECT_NEAR(p.Cost(4), 1.8, 1e-12);
    EXPECT_EQ(run(p, 12, [](int k) { return k; }), 6);
  }
  {
    DraftPolicy p = timed(gpu);
    const int k = run(p, 12, [](int k) { return std::min(k, 1); });
    EXPECT_GE(k, 1);
    EXPECT_LE(k, 2);
    EXPECT_NEAR(p.acceptance(), 0.5, 0.05);
  }
  {
    DraftPolicy p = timed(cpu);
    EXPECT_EQ(run(p, 12, [](int k) { return k; }), 3);
  }
  {
    DraftPolicy p(4);
    p.RecordPlainCost(1.0);
    for (int i = 0; i < 2; ++i) p.RecordVerifyCost(4, 6.0);
    // (unmeasured lengths cost 1 + 1.25 k from the measured one)
    EXPECT_NEAR(p.Cost(2), 3.5, 1e-12);
    int drafted = 0;
    for (int i = 0; i < 20; ++i) {
      const int k = p.Next();
      if (k == 0) continue;
      ++drafted;
      p.Record(k, k);
    }
    EXPECT_LE(drafted, 3);  // two steps, then a pause; an accepted probe does not resume it
  }
}

// A first verification step that also built the GPU's pipelines (seconds, not milliseconds) does
// not count until its length has a second sample, and an occasional slow step among ordinary ones
// does not move the cost; a lasting change (a longer context) is followed within the window.
TEST(DraftPolicy, OneSlowStepDoesNotMoveTheCost) {
  DraftPolicy p(4);
  p.RecordPlainCost(0.010);
  p.RecordVerifyCost(4, 3.0);
  EXPECT_NEAR(p.Cost(4), 2.0, 1e-12);  // (unmeasured: 1 + k/4)
  p.RecordVerifyCost(4, 0.020);
  EXPECT_NEAR(p.Cost(4), 2.0, 1e-12);
  for (int i = 0; i < 20; ++i) {
    p.RecordPlainCost(i % 7 == 3 ? 0.5 : 0.010);
    p.RecordVerifyCost(4, i % 5 == 2 ? 2.0 : 0.025);
  }
  EXPECT_NEAR(p.Cost(4), 2.5, 1e-12);
  EXPECT_NEAR(p.Cost(2), 1.75, 1e-12);  // (from the nearest measured length: 1 + 1.5 / 4 x 2)
  for (int i = 0; i < 8; ++i) p.RecordVerifyCost(4, 0.030);
  EXPECT_NEAR(p.Cost(4), 3.0, 1e-12);
}

// A probe's step (two tokens) does not count as a verification step's cost.
TEST(DraftPolicy, AProbesCostIsNotAVerificationStepsCost) {
  DraftPolicy p(4);
  p.RecordPlainCost(1.0);
  for (int i = 0; i < 2; ++i) p.RecordVerifyCost(1, 1.1);
  EXPECT_NEAR(p.Cost(1), 1.1, 1e-12);
  int k = 0;
  while ((k = p.Next()) > 0) p.Record(k, 0);
  PlainSteps(p, &k);
  for (int i = 0; i < 8; ++i) p.RecordVerifyCost(1, 5.0);
  EXPECT_NEAR(p.Cost(1), 1.1, 1e-12);
}

}  // namespace
}  // namespace gemma::decode
