#include "decode/sampling_options.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "gemma/error.h"

namespace gemma::decode {
namespace {

void ExpectInvalid(const std::function<void(SamplingOptions&)>& edit, const std::string& field) {
  SamplingOptions o;
  edit(o);
  try {
    ValidateSamplingOptions(o);
    ADD_FAILURE() << "no error for " << field;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(SamplingOptions, DefaultsAreValid) { EXPECT_NO_THROW(ValidateSamplingOptions({})); }

TEST(SamplingOptions, BoundaryValuesAreValid) {
  SamplingOptions o;
  o.temperature = 0;
  o.top_p = 0;
  o.min_p = 1;
  o.typical_p = 1;
  o.top_k = 1;
  o.penalty_window = 0;
  o.logit_bias[3] = -std::numeric_limits<float>::infinity();
  o.logprobs = true;
  o.top_logprobs = kMaxTopLogprobs;
  EXPECT_NO_THROW(ValidateSamplingOptions(o));
}

TEST(SamplingOptions, RejectsBadFieldsNamingThem) {
  const double nan = std::nan("");
  ExpectInvalid([](auto& o) { o.temperature = -0.1; }, "temperature");
  ExpectInvalid([&](auto& o) { o.temperature = nan; }, "temperature");
  ExpectInvalid([](auto& o) { o.temperature = INFINITY; }, "temperature");
  ExpectInvalid([](auto& o) { o.top_k = -1; }, "top_k");
  ExpectInvalid([](auto& o) { o.top_p = 1.5; }, "top_p");
  ExpectInvalid([](auto& o) { o.top_p = -0.01; }, "top_p");
  ExpectInvalid([&](auto& o) { o.top_p = nan; }, "top_p");
  ExpectInvalid([](auto& o) { o.min_p = 1.01; }, "min_p");
  ExpectInvalid([](auto& o) { o.typical_p = 0; }, "typical_p");
  ExpectInvalid([](auto& o) { o.typical_p = 1.2; }, "typical_p");
  ExpectInvalid([](auto& o) { o.repetition_penalty = 0; }, "repetition_penalty");
  ExpectInvalid([](auto& o) { o.repetition_penalty = -1; }, "repetition_penalty");
  ExpectInvalid([](auto& o) { o.frequency_penalty = INFINITY; }, "frequency_penalty");
  ExpectInvalid([&](auto& o) { o.presence_penalty = nan; }, "presence_penalty");
  ExpectInvalid([](auto& o) { o.penalty_window = -2; }, "penalty_window");
  ExpectInvalid([](auto& o) { o.logit_bias[-1] = 1; }, "logit_bias");
  ExpectInvalid([](auto& o) { o.logit_bias[5] = INFINITY; }, "logit_bias");
  ExpectInvalid([](auto& o) { o.logit_bias[5] = std::nanf(""); }, "logit_bias");
  ExpectInvalid([](auto& o) { o.top_logprobs = kMaxTopLogprobs + 1; }, "top_logprobs");
  ExpectInvalid([](auto& o) { o.top_logprobs = 2; }, "top_logprobs");  // logprobs false
  ExpectInvalid([](auto& o) { o.stop_ids = {3, -4}; }, "stop_ids");
  ExpectInvalid([](auto& o) { o.stop_strings = {"a", ""}; }, "stop_strings");
}

TEST(SamplingOptions, ResolvedConfigListsEveryFieldAsJson) {
  SamplingOptions o;
  o.temperature = 0.7;
  o.top_k = 40;
  o.top_p = 0.95;
  o.logit_bias[5] = -1.5f;
  o.logit_bias[2] = -std::numeric_limits<float>::infinity();
  o.stop_strings = {"\n\n", "say \"hi\""};
  o.stop_ids = {1, 106};
  o.seed = 99;
  const std::string json = ResolvedConfigJson(o, 99);
  EXPECT_EQ(json,
            "{\"mode\":\"sample\",\"temperature\":0.7,\"top_k\":40,\"top_p\":0.95,\"min_p\":0,"
            "\"typical_p\":1,\"repetition_penalty\":1,\"frequency_penalty\":0,"
            "\"presence_penalty\":0,\"penalty_window\":-1,"
            "\"penalty_scope\":\"prompt_and_generated\","
            "\"logit_bias\":{\"2\":\"-inf\",\"5\":-1.5},\"seed\":99,\"seed_source\":\"request\","
            "\"logprobs\":false,\"top_logprobs\":0,\"logprob_source\":\"raw\","
            "\"stop_ids\":[1,106],\"stop_strings\":[\"\\n\\n\",\"say \\\"hi\\\"\"]}");
  SamplingOptions g;
  g.temperature = 0;
  const auto kv = ResolvedConfig(g, 5);
  EXPECT_EQ(kv[0].first, "mode");
  EXPECT_EQ(kv[0].second, "\"greedy\"");
}

}  // namespace
}  // namespace gemma::decode
