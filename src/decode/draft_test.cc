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

// Rejected drafts pause drafting; after the pause one token is drafted (a probe): drafting resumes
// when it is accepted, else the pause doubles (up to 256 plain steps) until a probe is accepted.
TEST(DraftPolicy, PausesWhenDraftsAreRejectedProbesAndBacksOff) {
  DraftPolicy p(4);
  auto plain_steps = [&] {
    int n = 0;
    while (p.Next() == 0) ++n;  // (the call that ends the loop asked for the next draft)
    return n;
  };
  EXPECT_EQ(p.Next(), 4);
  p.Record(4, 0);
  EXPECT_EQ(p.Next(), 4);
  p.Record(4, 0);
  for (const int pause : {16, 32, 64, 128, 256, 256}) {
    EXPECT_EQ(plain_steps(), pause);  // ... then a one-token probe
    p.Record(1, 0);
  }
  EXPECT_EQ(plain_steps(), 256);
  p.Record(1, 1);  // the probe's token was right: full drafts again
  EXPECT_EQ(p.Next(), 4);
  p.Record(4, 4);
  EXPECT_EQ(p.Next(), 4);
  // The next pause starts from 16 again.
  p.Record(4, 0);
  EXPECT_EQ(p.Next(), 4);
  p.Record(4, 0);
  EXPECT_EQ(plain_steps(), 16);
  // Accepted drafts keep drafting.
  DraftPolicy q(4);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(q.Next(), 4);
    q.Record(4, 3);
  }
  EXPECT_EQ(DraftPolicy(0).Next(), 0);
}

// A probe's step (two tokens) does not count as a verification step's cost.
TEST(DraftPolicy, AProbesCostIsNotAVerificationStepsCost) {
  DraftPolicy p(4);
  p.RecordPlainCost(1.0);
  p.RecordVerifyCost(4, 2.0);
  EXPECT_NEAR(p.threshold(), 0.25, 1e-12);
  p.Record(4, 0);
  p.Record(4, 0);
  while (p.Next() == 0) {
  }
  for (int i = 0; i < 8; ++i) p.RecordVerifyCost(1, 1.1);
  EXPECT_NEAR(p.threshold(), 0.25, 1e-12);
}

// With both kinds of step timed, the pause follows the break-even share (verify / plain - 1) / k:
// half the drafts accepted pays where a 4-draft verification step costs 1.9 plain steps (0.225)
// and loses where it costs 4.3 (0.825, Vulkan at 512 cached tokens).
TEST(DraftPolicy, PausesBelowTheBreakEvenOfTheMeasuredStepCosts) {
  for (const double verify : {1.9, 4.3}) {
    DraftPolicy p(4);
    p.RecordPlainCost(1.0);
    p.RecordVerifyCost(4, verify);
    EXPECT_NEAR(p.threshold(), (verify - 1.0) / 4, 1e-12);
    int drafted = 0;
    for (int i = 0; i < 20; ++i) {
      if (p.Next() == 0) continue;
      ++drafted;
      p.Record(4, 2);
    }
    if (verify < 2) {
      EXPECT_EQ(drafted, 20) << "verify " << verify;
    } else {
      EXPECT_LT(drafted, 10) << "verify " << verify;
    }
  }
  // Untimed: a quarter.
  EXPECT_EQ(DraftPolicy(4).threshold(), 0.25);
  // A verification step dearer than its tokens at full acceptance: drafting pauses, and an
  // accepted probe does not resume it.
  DraftPolicy q(4);
  q.RecordPlainCost(1.0);
  q.RecordVerifyCost(4, 6.0);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(q.Next(), 4);
    q.Record(4, 4);
  }
  int plain = 0;
  while (q.Next() == 0) ++plain;
  EXPECT_EQ(plain, 16);
  q.Record(1, 1);
  EXPECT_EQ(q.Next(), 0);
}

// A first verification step that also built the GPU's pipelines (seconds, not milliseconds) must
// not keep drafting paused: one ordinary step restores the break-even share, and an occasional slow
// step among ordinary ones does not move it.
TEST(DraftPolicy, OneSlowStepDoesNotMoveTheBreakEven) {
  DraftPolicy p(4);
  p.RecordPlainCost(0.010);
  p.RecordVerifyCost(4, 3.0);
  EXPECT_EQ(p.threshold(), 2.0);
  p.RecordVerifyCost(4, 0.020);
  EXPECT_NEAR(p.threshold(), (0.020 / 0.010 - 1.0) / 4, 1e-12);
  for (int i = 0; i < 20; ++i) {
    p.RecordPlainCost(i % 7 == 3 ? 0.5 : 0.010);
    p.RecordVerifyCost(4, i % 5 == 2 ? 2.0 : 0.020);
  }
  EXPECT_NEAR(p.threshold(), 0.25, 1e-12);
  // A lasting change of the costs (a longer context) is followed within the window.
  for (int i = 0; i < 8; ++i) p.RecordVerifyCost(4, 0.030);
  EXPECT_NEAR(p.threshold(), (0.030 / 0.010 - 1.0) / 4, 1e-12);
}

}  // namespace
}  // namespace gemma::decode
