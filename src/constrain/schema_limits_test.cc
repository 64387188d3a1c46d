// Hostile schemas: nesting and size limits end compilation with a typed error, never a stack
// overflow (issue 36: 100,000 nested arrays and 5,000 nested `items` crashed the process).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "constrain/constraint.h"
#include "constrain/test_vocab.h"
#include "gemma/error.h"

namespace gemma::constrain {
namespace {

using Json = nlohmann::ordered_json;

using testing::CompileSchema;

// {"type":"array","items":{...}} nested `levels` deep, built as text and parsed (nlohmann's parser
// is iterative, so any depth parses).
Json NestedItems(int levels) {
  std::string s;
  for (int i = 0; i < levels; ++i) s += R"({"type":"array","items":)";
  s += R"({"type":"integer"})";
  s += std::string(levels, '}');
  return Json::parse(s);
}

ErrorCode CodeOf(const std::function<void()>& f, std::string* what = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (what) *what = e.what();
    return e.code();
  }
  return ErrorCode::kInternal;  // no error: the tests treat that as a failure
}

TEST(SchemaLimitsTest, HundredThousandNestedArraysIsATypedError) {
  const int n = 100'000;
  Json deep = Json::parse(std::string(n, '[') + std::string(n, ']'));
  std::string what;
  EXPECT_EQ(CodeOf([&] { CompileSchema(std::move(deep)); }, &what), ErrorCode::kConstraint);
  EXPECT_NE(what.find("deeper than 256"), std::string::npos) << what;
}

TEST(SchemaLimitsTest, FiveThousandNestedItemsIsATypedErrorAndFast) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string what;
  EXPECT_EQ(CodeOf([&] { CompileSchema(NestedItems(5000)); }, &what), ErrorCode::kConstraint);
  EXPECT_NE(what.find("deeper than"), std::string::npos) << what;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

TEST(SchemaLimitsTest, SubschemaNestingLimitNamesThePointer) {
  // Within the JSON depth limit (200 < 256) but past the subschema limit (128).
  std::string what;
  EXPECT_EQ(CodeOf([&] { CompileSchema(NestedItems(200)); }, &what), ErrorCode::kConstraint);
  EXPECT_NE(what.find("128 subschemas"), std::string::npos) << what;
  EXPECT_NE(what.find("#/items/items/"), std::string::npos) << what;
}

TEST(SchemaLimitsTest, DeepButAllowedSchemaCompilesAndAcceptsItsValue) {
  auto c = CompileSchema(NestedItems(100));
  ConstraintState st(c);
  st.AcceptBytes(std::string(100, '[') + "7" + std::string(100, ']'));
  EXPECT_TRUE(st.CanStop());
  ConstraintState short_by_one(c);
  short_by_one.AcceptBytes(std::string(100, '[') + "7" + std::string(99, ']'));
  EXPECT_FALSE(short_by_one.CanStop());
}

TEST(SchemaLimitsTest, LongRefChainIsATypedError) {
  // Shallow JSON, but each $ref leads one level deeper: 2,000 compile levels without the limit.
  Json defs = Json::object();
  const int n = 2000;
  for (int i = 0; i < n; ++i)
    defs["d" + std::to_string(i)] = {{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
  defs["d" + std::to_string(n)] = {{"type", "integer"}};
  Json schema = {{"$defs", defs}, {"$ref", "#/$defs/d0"}};
  std::string what;
  EXPECT_EQ(CodeOf([&] { CompileSchema(schema); }, &what), ErrorCode::kConstraint);
  EXPECT_NE(what.find("subschemas"), std::string::npos) << what;
}

// Found by fuzz/fuzz_schema.cc: this 150-byte schema compiled for 3 min 41 s (the state bound
// alone does not bound the subset construction's work). Now it is refused, or compiled, quickly.
TEST(SchemaLimits, PathologicalPatternIsBoundedInTime) {
  static auto vocab = testing::SyntheticVocab();
  ConstraintOptions o;
  o.kind = ConstraintKind::kJsonSchema;
  o.schema = Json::parse(
      R"({"type": "string", "pattern": "ff-z]<<<<<<<<<a-]z<<<..............*.....................)"
      R"(j......../..........<<<<<<,<<<<<<<<<<<<yp{<<<yp{3,4}"})");
  const auto t0 = std::chrono::steady_clock::now();
  try {
    Constraint::Compile(vocab, o);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kConstraint) << e.what();
  }
#ifdef GEMMA_SANITIZED
  constexpr double kSeconds = 100;  // (the bound counts work; instrumented code is ~10x slower)
#else
  constexpr double kSeconds = 10;
#endif
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), kSeconds);
}

}  // namespace
}  // namespace gemma::constrain
