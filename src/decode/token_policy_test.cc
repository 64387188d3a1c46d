#include "decode/token_policy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gemma/error.h"

namespace gemma::decode {
namespace {

// A constraint over a 128-token vocabulary that allows only `allowed_` and completes when token
// 0 (its stop id) is accepted.
class FakeConstraint : public TokenConstraint {
 public:
  void AllowedTokens(std::vector<uint64_t>* mask) override {
    ++mask_calls;
    mask->assign(2, 0);
    for (int32_t t : allowed) (*mask)[t >> 6] |= uint64_t{1} << (t & 63);
  }
  void Accept(int32_t token) override {
    bool ok = false;
    for (int32_t t : allowed) ok |= t == token;
    if (!ok) throw Error(ErrorCode::kConstraint, "not allowed");
    complete = token == 0;
  }
  bool IsComplete() const override { return complete; }
  std::vector<int32_t> allowed = {0, 7, 9};
  bool complete = false;
  int mask_calls = 0;
};

SamplingOptions GreedyOptions() {
  SamplingOptions o;
  o.temperature = 0;
  return o;
}

TEST(TokenPolicy, OutputIsTheLeastTheChoiceNeeds) {
  FakeConstraint c;
  EXPECT_EQ(TokenPolicy(GreedyOptions(), {1}, false, nullptr).Output(), StepOutput::kArgmax);
  EXPECT_EQ(TokenPolicy(GreedyOptions(), {1}, false, &c).Output(), StepOutput::kSelect);
  SamplingOptions lp = GreedyOptions();
  lp.logprobs = true;
  EXPECT_EQ(TokenPolicy(lp, {1}, false, &c).Output(), StepOutput::kLogits);
  SamplingOptions pen = GreedyOptions();
  pen.repetition_penalty = 1.3;
  EXPECT_EQ(TokenPolicy(pen, {1}, false, nullptr).Output(), StepOutput::kLogits);
  pen.penalty_window = 0;  // a penalty over no tokens is no penalty
  EXPECT_EQ(TokenPolicy(pen, {1}, false, nullptr).Output(), StepOutput::kArgmax);
  EXPECT_EQ(TokenPolicy(SamplingOptions(), {1}, false, nullptr).Output(), StepOutput::kLogits);
}

TEST(TokenPolicy, SelectAndLogitsPathsPickTheSameConstrainedToken) {
  std::vector<float> logits(128, 0.f);
  logits[3] = 5.f;  // the unconstrained argmax, not allowed
  logits[9] = 2.f;  // the best allowed token
  logits[7] = 2.f;  // tied with 9: the lower id wins
  FakeConstraint c1, c2;
  TokenPolicy select(GreedyOptions(), {1}, false, &c1);
  SamplingOptions lp = GreedyOptions();
  lp.logprobs = true;
  TokenPolicy full(lp, {1}, false, &c2);
  ASSERT_NE(select.Mask(), nullptr);
  const int32_t backend_pick = 7;  // what a backend's select returns for this mask
  EXPECT_EQ(select.Choose({}, backend_pick, -1.f).token, 7);
  EXPECT_EQ(full.Choose(logits, -1, 0.f).token, 7);
  EXPECT_EQ(c1.mask_calls, 1);
  select.Mask();  // cached until the next Accept
  EXPECT_EQ(c1.mask_calls, 1);
  EXPECT_EQ(select.Accept(7), StopCause::kNone);
  select.Mask();
  EXPECT_EQ(c1.mask_calls, 2);
}

TEST(TokenPolicy, StopsByIdInOneOrder) {
  SamplingOptions o = GreedyOptions();
  o.stop_ids = {5};
  FakeConstraint c;
  c.allowed = {0, 1, 5, 6};
  // The constraint's completion outranks EOS; EOS outranks a stop id.
  {
    TokenPolicy p(o, {0, 1}, false, &c);
    EXPECT_EQ(p.Accept(0), StopCause::kConstraintComplete);
  }
  {
    TokenPolicy p(o, {1}, false, nullptr);
    EXPECT_EQ(p.Accept(6), StopCause::kNone);
    EXPECT_EQ(p.Accept(1), StopCause::kEos);
  }
  {
    TokenPolicy p(o, {1}, /*ignore_eos=*/true, nullptr);
    EXPECT_EQ(p.Accept(1), StopCause::kNone);
    EXPECT_EQ(p.Accept(5), StopCause::kStopId);
  }
}

TEST(TokenPolicy, StopStringsAreHeldBackAndNeverEmitted) {
  SamplingOptions o = GreedyOptions();
  o.stop_strings = {"END"};
  TokenPolicy p(o, {}, false, nullptr);
  std::string out;
  EXPECT_EQ(p.PushText("abc E", &out), StopCause::kNone);
  EXPECT_EQ(out, "abc ");
  EXPECT_EQ(p.PushText("N", &out), StopCause::kNone);
  EXPECT_EQ(p.PushText("Dxyz", &out), StopCause::kStopString);
  EXPECT_EQ(out, "abc ");
  TokenPolicy q(o, {}, false, nullptr);
  std::string out2;
  q.PushText("tail E", &out2);
  q.Finish("N", &out2);  // generation ended: held text is released
  EXPECT_EQ(out2, "tail EN");
}

TEST(TokenPolicy, BadOptionsAreTypedErrors) {
  SamplingOptions o;
  o.top_p = 1.5;
  try {
    TokenPolicy p(o, {}, false, nullptr);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace gemma::decode
