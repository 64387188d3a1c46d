// Constraint runtime: masks, stop ids, dead ends, UTF-8 across tokens, JSON, tool calls, thinking.
// Expected values come from nlohmann's JSON parser and from structural facts (which ids exist),
// never from the constraint's own output.
#include "constrain/constraint.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>

#include "constrain/test_vocab.h"
#include "gemma/error.h"

namespace gemma::constrain {
namespace {

using Json = nlohmann::ordered_json;
using testing::Generate;
using testing::SyntheticVocab;

using testing::Bit;

int32_t TokenOf(const Vocabulary& v, const std::string& bytes) {
  for (int32_t id = 0; id < v.size(); ++id) {
    if (!v.is_special(id) && v.bytes(id) == bytes) return id;
  }
  return -1;
}

TEST(VocabularyTest, TrieHoldsEveryNonSpecialToken) {
  auto v = SyntheticVocab();
  const TokenTrie& t = v->trie();
  int non_special = 0;
  for (int32_t id = 0; id < v->size(); ++id)
    non_special += !v->is_special(id) && !v->bytes(id).empty();
  EXPECT_EQ(static_cast<int>(t.num_tokens), non_special);
  // Rebuild each token's bytes from the DFS layout.
  std::vector<uint8_t> path;
  int found = static_cast<int>(t.duplicates.size());
  for (size_t i = 0; i < t.nodes(); ++i) {
    path.resize(t.depth[i] - 1);
    path.push_back(t.byte[i]);
    if (t.token[i] != t.none) {
      EXPECT_EQ(std::string(path.begin(), path.end()), v->bytes(t.token[i]));
      ++found;
    }
    EXPECT_GT(t.end[i], i);
  }
  EXPECT_EQ(found, non_special);
}

std::shared_ptr<const Constraint> Compile(std::shared_ptr<const Vocabulary> v,
                                          ConstraintOptions o) {
  return Constraint::Compile(std::move(v), o);
}

TEST(ConstraintTest, RegexMaskMatchesTokenByTokenAcceptance) {
  auto v = SyntheticVocab();
  ConstraintOptions o;
  o.kind = ConstraintKind::kRegex;
  o.regex = "(abc|xyz)+[0-9]{2,3}";
  auto c = Compile(v, o);
  ConstraintState st(c);
  const uint64_t* m = st.AllowedTokens();
  // Every non-special token is allowed exactly when Accept() takes it.
  for (int32_t id = 0; id < v->size(); ++id) {
    ConstraintState copy(c);
    bool ok = true;
    try {
      copy.Accept(id);
    } catch (const Error&) {
      ok = false;
    }
    EXPECT_EQ(Bit(m, id), ok) << "token " << id << " '" << v->bytes(id) << "'";
  }
  EXPECT_TRUE(Bit(m, TokenOf(*v, "abc")));
  EXPECT_TRUE(Bit(m, TokenOf(*v, "ab")));
  EXPECT_FALSE(Bit(m, TokenOf(*v, "12")));
  EXPECT_FALSE(Bit(m, 1));  // <eos> not before a match
}

// The trie walks (full and text-split) agree with stepping every token on its own, at every
// position of sampled outputs of several constraint kinds.
TEST(ConstraintTest, MasksAgreeWithPerTokenAcceptanceAlongGenerations) {
  auto v = SyntheticVocab();
  std::vector<ConstraintOptions> opts(5);
  opts[0].kind = ConstraintKind::kJson;
  opts[1].kind = ConstraintKind::kJsonSchema;
  opts[1].schema = Json::parse(
      R"({"type":"object","properties":{"s":{"type":"string"},"t":{"type":"string","pattern":"^[a-z]+$"},"n":{"type":"array","items":{}}},"required":["s","t","n"]})");
  opts[2].kind = ConstraintKind::kToolCalls;
  opts[2].tools = Json::parse(
      R"([{"name":"f","parameters":{"type":"object","properties":{"x":{"type":"string"}}}}])");
  opts[2].thinking = true;
  opts[3].kind = ConstraintKind::kRegex;
  opts[3].regex = "[^\\n]*\\n(.|\\n){0,8}";
  opts[4].kind = ConstraintKind::kJson;
  opts[4].whitespace = Whitespace::kAny;
  std::mt19937_64 rng(21);
  int checked = 0;
  for (const auto& o : opts) {
    auto c = Compile(v, o);
    for (int g = 0; g < 4; ++g) {
      auto gen = Generate(c, &rng, 25);
      ConstraintState st(c);
      for (int32_t t : gen.tokens) {
        const uint64_t* m = st.AllowedTokens();
        for (int32_t id = 0; id < v->size(); ++id) {
          if (v->is_special(id)) continue;
          ConstraintState copy = st;
          bool ok = true;
          try {
            copy.Accept(id);
          } catch (const Error&) {
            ok = false;
          }
          ASSERT_EQ(Bit(m, id), ok) << "token '" << v->bytes(id) << "' after " << checked;
        }
        ++checked;
        st.Accept(t);
      }
    }
  }
  EXPECT_GT(checked, 100);
}

TEST(ConstraintTest, StopIdsOnlyInAcceptingStatesAndStopEnds) {
  auto v = SyntheticVocab();
  ConstraintOptions o;
  o.kind = ConstraintKind::kRegex;
  o.regex = "ab(cd)?";
  auto c = Compile(v, o);
  ConstraintState st(c);
  EXPECT_FALSE(st.CanStop());
  EXPECT_THROW(st.Accept(1), Error);
  st.Accept(TokenOf(*v, "ab"));
  EXPECT_TRUE(st.CanStop());
  const uint64_t* m = st.AllowedTokens();
  EXPECT_TRUE(Bit(m, 1));
  EXPECT_TRUE(Bit(m, 106));
  EXPECT_TRUE(Bit(m, 50));
  EXPECT_FALSE(Bit(m, 2));  // <bos> is special, never allowed
  EXPECT_TRUE(Bit(m, TokenOf(*v, "cd")));
  st.Accept(TokenOf(*v, "cd"));
  m = st.AllowedTokens();
  size_t allowed = 0;
  for (size_t w = 0; w < v->mask_words(); ++w) allowed += __builtin_popcountll(m[w]);
  EXPECT_EQ(allowed, 3u);  // only the three stop ids
  st.Accept(106);
  EXPECT_TRUE(st.IsComplete());
  EXPECT_THROW(st.AllowedTokens(), Error);
  EXPECT_THROW(st.Accept(TokenOf(*v, "a")), Error);
}

TEST(ConstraintTest, DeadEndIsAnExplicitError) {
  // A vocabulary without the byte 'b': after "a" nothing can continue "ab".
  auto v = std::make_shared<Vocabulary>(std::vector<std::string>{"<pad>", "<eos>", "a", "c"},
                                        std::vector<bool>{true, true, false, false});
  ConstraintOptions o;
  o.kind = ConstraintKind::kRegex;
  o.regex = "ab";
  o.stop_ids = {1};
  o.ids = {0, 0, 0, 0, 0};
  auto c = Compile(v, o);
  ConstraintState st(c);
  st.Accept(2);
  EXPECT_TRUE(st.IsDeadEnd());
  try {
    st.AllowedTokens();
    FAIL() << "expected a dead-end error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kConstraint);
    EXPECT_NE(std::string(e.what()).find("dead end"), std::string::npos);
  }
}

TEST(ConstraintTest, Utf8SplitAcrossTokens) {
  auto v = SyntheticVocab();
  ConstraintOptions o;
  o.kind = ConstraintKind::kRegex;
  o.regex = "日本語+";
  auto c = Compile(v, o);
  ConstraintState st(c);
  const uint64_t* m = st.AllowedTokens();
  EXPECT_TRUE(Bit(m, TokenOf(*v, "日本")));
  EXPECT_TRUE(Bit(m, TokenOf(*v, "\xe6\x97")));  // first two bytes of 日
  EXPECT_TRUE(Bit(m, TokenOf(*v, "\xe6")));
  EXPECT_FALSE(Bit(m, TokenOf(*v, "\xa5")));
  st.Accept(TokenOf(*v, "\xe6\x97"));
  m = st.AllowedTokens();
  EXPECT_TRUE(Bit(m, TokenOf(*v, "\xa5")));  // completes 日 (E6 97 A5)
  EXPECT_FALSE(Bit(m, TokenOf(*v, "日本")));
  st.Accept(TokenOf(*v, "\xa5"));
  for (const char* b : {"\xe6", "\x9c", "\xac"}) st.Accept(TokenOf(*v, b));  // 本, byte by byte
  st.Accept(TokenOf(*v, "\xe8"));
  EXPECT_FALSE(st.CanStop());
  st.Accept(TokenOf(*v, "\xaa\x9e"));
  EXPECT_TRUE(st.CanStop());
}

TEST(ConstraintTest, SpecialTokensAreNeverMatchedByText) {
  auto v = SyntheticVocab();
  ConstraintOptions o;
  o.kind = ConstraintKind::kRegex;
  o.regex = "<\\|tool_call>|x";  // the text of a special token
  auto c = Compile(v, o);
  ConstraintState st(c);
  const uint64_t* m = st.AllowedTokens();
  EXPECT_FALSE(Bit(m, 48));
  EXPECT_TRUE(Bit(m, TokenOf(*v, "<")));
}

TEST(ConstraintTest, GeneratedJsonParses) {
  auto v = SyntheticVocab();
  std::mt19937_64 rng(7);
  for (Whitespace ws : {Whitespace::kNone, Whitespace::kCompact, Whitespace::kAny}) {
    for (bool object_root : {false, true}) {
      ConstraintOptions o;
      o.kind = ConstraintKind::kJson;
      o.whitespace = ws;
      o.object_root = object_root;
      o.max_depth = 4;
      auto c = Compile(v, o);
      for (int i = 0; i < 40; ++i) {
        auto g = Generate(c, &rng, 60);
        ASSERT_TRUE(g.complete);
        Json j;
        ASSERT_NO_THROW(j = Json::parse(g.text)) << g.text;
        if (object_root) {
          EXPECT_TRUE(j.is_object()) << g.text;
        }
        // Depth bound: containers nest at most 4 deep.
        std::function<int(const Json&)> depth = [&](const Json& x) {
          int d = 0;
          if (x.is_structured()) {
            for (const auto& e : x) d = std::max(d, depth(e));
            return d + 1;
          }
          return 0;
        };
        EXPECT_LE(depth(j), 4) << g.text;
        if (ws == Whitespace::kNone) {
          EXPECT_EQ(j.dump(), Json::parse(g.text).dump());
        }
      }
    }
  }
}

TEST(ConstraintTest, JsonWhitespaceModes) {
  auto v = SyntheticVocab();
  auto accepts = [&](Whitespace ws, const std::string& text) {
    ConstraintOptions o;
    o.kind = ConstraintKind::kJson;
    o.whitespace = ws;
    ConstraintState st(Compile(v, o));
    try {
      st.AcceptBytes(text);
    } catch (const Error&) {
      return false;
    }
    return st.CanStop();
  };
  EXPECT_TRUE(accepts(Whitespace::kNone, R"({"a":[1,2.5e3,"x"],"b":{}})"));
  EXPECT_FALSE(accepts(Whitespace::kNone, R"({"a": 1})"));
  EXPECT_TRUE(accepts(Whitespace::kCompact, R"({"a": [1, 2], "b": null})"));
  EXPECT_FALSE(accepts(Whitespace::kCompact, R"({"a":1})"));
  EXPECT_TRUE(accepts(Whitespace::kAny, " {\n  \"a\" :\t[ 1 , 2 ] } "));
  EXPECT_FALSE(accepts(Whitespace::kAny, R"({"a":01})"));
  EXPECT_FALSE(accepts(Whitespace::kNone, R"({"a":1,})"));
  EXPECT_FALSE(accepts(Whitespace::kNone, "\"\\ud800\""));  // lone surrogate escape
}

TEST(ConstraintTest, MaxDepthBoundsNesting) {
  auto v = SyntheticVocab();
  ConstraintOptions o;
  o.kind = ConstraintKind::kJson;
  o.max_depth = 2;
  ConstraintState ok(Compile(v, o));
  EXPECT_NO_THROW(ok.AcceptBytes(R"([[1,"x"],{"a":true}])"));
  EXPECT_TRUE(ok.CanStop());
  ConstraintState bad(Compile(v, o));
  EXPECT_THROW(bad.AcceptBytes("[[{}]]"), Error);
}

// User-supplied patterns and schemas: anything either compiles or throws gemma::Error.
// (Run once at 30x these counts without a failure.)
constexpr int kRegexFuzz = 3000;
constexpr int kSchemaFuzz = 2000;

TEST(ConstraintTest, RandomPatternsAndSchemasCompileOrThrowError) {
  auto v = SyntheticVocab();
  std::mt19937_64 rng(17);
  const std::string alphabet = "ab()[]{}|*+?.^$\\-,0123456789dwsxu:=!<>P";
  int compiled = 0;
  for (int i = 0; i < kRegexFuzz; ++i) {
    std::string p;
    for (int k = 0, n = 1 + rng() % 12; k < n; ++k) p += alphabet[rng() % alphabet.size()];
    ConstraintOptions o;
    o.kind = ConstraintKind::kRegex;
    o.regex = p;
    try {
      Compile(v, o);
      ++compiled;
    } catch (const Error&) {
    }
  }
  EXPECT_GT(compiled, 100);
  const char* keys[] = {
      "type",      "properties", "items",    "enum",        "const",
      "anyOf",     "oneOf",      "allOf",    "$ref",        "minimum",
      "maxLength", "pattern",    "required", "prefixItems", "additionalProperties",
      "minItems",  "format",     "$defs"};
  std::function<Json(int)> random_value = [&](int depth) -> Json {
    switch (rng() % (depth > 2 ? 5 : 8)) {
      case 0:
        return Json(static_cast<int>(rng() % 7) - 2);
      case 1:
        return Json(std::vector<std::string>{"string", "object", "integer"}[rng() % 3]);
      case 2:
        return Json(rng() % 2 == 0);
      case 3:
        return Json("#/$defs/a");
      case 4:
        return Json("^[a-z]{1,3}$");
      case 5:
        return Json::array({random_value(depth + 1), random_value(depth + 1)});
      default: {
        Json o = Json::object();
        for (int k = 0, n = rng() % 4; k < n; ++k) o[keys[rng() % 18]] = random_value(depth + 1);
        return o;
      }
    }
  };
  int schemas = 0;
  for (int i = 0; i < kSchemaFuzz; ++i) {
    ConstraintOptions o;
    o.kind = ConstraintKind::kJsonSchema;
    o.schema = random_value(0);
    try {
      Compile(v, o);
      ++schemas;
    } catch (const Error&) {
    }
  }
  EXPECT_GT(schemas, 50);
}

TEST(ConstraintTest, MaskLogits) {
  auto v = SyntheticVocab();
  ConstraintOptions o;
  o.kind = ConstraintKind::kRegex;
  o.regex = "a";
  ConstraintState st(Compile(v, o));
  std::vector<float> logits(v->size(), 1.0f);
  MaskLogits(st.AllowedTokens(), logits);
  std::vector<int32_t> ids;
  st.AllowedIds(&ids);
  int finite = 0;
  for (float x : logits) finite += std::isfinite(x);
  EXPECT_EQ(finite, static_cast<int>(ids.size()));
  EXPECT_EQ(ids, std::vector<int32_t>{TokenOf(*v, "a")});
}

}  // namespace
}  // namespace gemma::constrain

namespace gemma::constrain {
namespace {

// Jump-forward: what a constraint forces, from the grammar's definition (whitespace none: the
// object's braces, quotes and colons, required keys in declared order, a fixed enum value's only
// continuation), stopping where anything else could follow or the output could end.
TEST(ConstraintTest, ForcedContinuationIsWhatTheGrammarFixes) {
  auto v = SyntheticVocab();
  ConstraintOptions o;
  o.kind = ConstraintKind::kJsonSchema;
  o.schema = Json::parse(R"({"type":"object","properties":{"name":{"type":"string"},
      "kind":{"enum":["alpha-one"]},"n":{"type":"integer"}},"required":["name","kind","n"],
      "additionalProperties":false})");
  ConstraintState st(Compile(v, o));
  EXPECT_EQ(st.ForcedContinuation(100).bytes, "{\"name\":\"");
  EXPECT_EQ(st.ForcedContinuation(3).bytes, "{\"n");  // (the byte limit)
  st.AcceptBytes("{\"name\":\"x");
  EXPECT_EQ(st.ForcedContinuation(100).bytes, "");  // string content is free
  st.AcceptBytes("\"");
  EXPECT_EQ(st.ForcedContinuation(100).bytes, ",\"kind\":\"alpha-one\",\"n\":");
  st.AcceptBytes(",\"kind\":\"alpha-one\",\"n\":12");
  EXPECT_EQ(st.ForcedContinuation(100).bytes, "");  // more digits or the closing brace
  st.AcceptBytes("}");
  EXPECT_EQ(st.ForcedContinuation(100).bytes, "");  // the output may end here

  ConstraintOptions r;
  r.kind = ConstraintKind::kRegex;
  r.regex = "caf\xC3\xA9 (au lait|noir)";
  ConstraintState rs(Compile(v, r));
  EXPECT_EQ(rs.ForcedContinuation(100).bytes, "caf\xC3\xA9 ");
  EXPECT_EQ(rs.ForcedContinuation(4).bytes, "caf");  // (no half of the two-byte character)
  rs.AcceptBytes("caf\xC3\xA9 a");
  EXPECT_EQ(rs.ForcedContinuation(100).bytes, "u lait");
  EXPECT_EQ(rs.ForcedContinuation(100).special, -1);
}

}  // namespace
}  // namespace gemma::constrain
