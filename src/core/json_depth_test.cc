#include "core/json_depth.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace gemma {
namespace {

std::string Nested(int n) { return std::string(n, '[') + std::string(n, ']'); }

TEST(JsonDepth, TextAtTheLimitPassesAndOneMoreFailsAtThatBracket) {
  EXPECT_EQ(JsonTextDepthExceeded(Nested(kMaxJsonDepth)), std::string::npos);
  EXPECT_EQ(JsonTextDepthExceeded(Nested(kMaxJsonDepth + 1)), static_cast<size_t>(kMaxJsonDepth));
  EXPECT_EQ(JsonTextDepthExceeded(R"({"a":[{"b":1}]})", 3), std::string::npos);
  EXPECT_EQ(JsonTextDepthExceeded(R"({"a":[{"b":[1]}]})", 3), 11u);
}

TEST(JsonDepth, BracketsInsideStringsDoNotCount) {
  EXPECT_EQ(JsonTextDepthExceeded(R"(["[[[[\"[[[", 1])", 1), std::string::npos);
  // Siblings do not add up: depth is what is open at once.
  EXPECT_EQ(JsonTextDepthExceeded("[[1],[2],[3],{}]", 2), std::string::npos);
}

TEST(JsonDepth, DeepTextIsLinearAndDoesNotRecurse) {
  // 10 million levels: a recursive scanner would overflow the stack.
  const std::string deep(10'000'000, '[');
  EXPECT_EQ(JsonTextDepthExceeded(deep), static_cast<size_t>(kMaxJsonDepth));
}

TEST(JsonDepth, ParsedValues) {
  const auto at_limit = nlohmann::json::parse(Nested(kMaxJsonDepth));
  EXPECT_FALSE(JsonValueDepthExceeds(at_limit));
  EXPECT_TRUE(JsonValueDepthExceeds(nlohmann::json::parse(Nested(kMaxJsonDepth + 1))));
  const auto obj = nlohmann::ordered_json::parse(R"({"a":{"b":{"c":[]}},"d":1})");
  EXPECT_FALSE(JsonValueDepthExceeds(obj, 4));
  EXPECT_TRUE(JsonValueDepthExceeds(obj, 3));
  EXPECT_FALSE(JsonValueDepthExceeds(nlohmann::json(5), 0));
  // A value built 100,000 deep (nlohmann's parser is iterative) is checked without recursion.
  EXPECT_TRUE(JsonValueDepthExceeds(nlohmann::json::parse(Nested(100'000))));
}

}  // namespace
}  // namespace gemma
