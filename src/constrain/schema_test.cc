// JSON Schema and tool-call constraints against independent judges: AJV (npm) validates every
// generated output, JSON-Schema-Test-Suite's verdicts check what the constraint accepts, and a
// small independent parser reads Gemma's tool-call syntax.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "constrain/constraint.h"
#include "constrain/test_corpus.h"
#include "constrain/test_vocab.h"
#include "gemma/error.h"

namespace gemma::constrain {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

const std::string kModules = std::string(GEMMA_SOURCE_DIR) + "/.cache/npm-assets/node_modules";

bool HaveNode() {
  return std::system("node --version > /dev/null 2>&1") == 0 && fs::exists(kModules + "/ajv");
}

// Runs tests/constrain/ajv_validate.js once over all cases.
Json AjvValidate(const std::vector<std::pair<Json, std::vector<std::string>>>& cases) {
  Json in = Json::array();
  for (const auto& [schema, outputs] : cases)
    in.push_back({{"schema", schema}, {"outputs", outputs}});
  const std::string path = std::string(GEMMA_BINARY_DIR) + "/constrain_ajv_input_" +
                           std::to_string(::getpid()) + ".json";
  {
    std::ofstream f(path);
    f << in.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  const std::string cmd = "node " + std::string(GEMMA_SOURCE_DIR) +
                          "/tests/constrain/ajv_validate.js " + kModules + " " + path;
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = pclose(p);
  fs::remove(path);
  EXPECT_EQ(rc, 0) << out;
  return Json::parse(out);
}

using testing::CompileSchema;

TEST(SchemaTest, GeneratedOutputsValidateUnderAjv) {
  if (!HaveNode()) GTEST_SKIP() << "node or AJV (.cache/npm-assets) missing: run tools/setup.sh";
  std::vector<Json> schemas = testing::SchemaCorpus(320, 2026);
  std::mt19937_64 rng(5);
  std::vector<std::pair<Json, std::vector<std::string>>> cases;
  const Whitespace modes[] = {Whitespace::kNone, Whitespace::kCompact, Whitespace::kAny};
  for (size_t i = 0; i < schemas.size(); ++i) {
    std::shared_ptr<const Constraint> c;
    try {
      c = CompileSchema(schemas[i], modes[i % 3]);
    } catch (const Error& e) {
      ADD_FAILURE() << "schema " << i << " " << schemas[i].dump() << ": " << e.what();
      continue;
    }
    std::vector<std::string> outs;
    for (int k = 0; k < 3; ++k) {
      auto g = testing::Generate(c, &rng, 40);
      ASSERT_TRUE(g.complete) << schemas[i].dump();
      EXPECT_TRUE(Json::accept(g.text)) << schemas[i].dump() << "\n" << g.text;
      outs.push_back(g.text);
    }
    cases.push_back({schemas[i], outs});
  }
  Json r = AjvValidate(cases);
  EXPECT_GE(r["schemas"].get<int>(), 300);
  EXPECT_TRUE(r["ajv_rejected"].empty()) << r["ajv_rejected"].dump(1);
  for (const auto& f : r["failures"]) {
    ADD_FAILURE() << "AJV rejects output of schema " << cases[f["index"].get<int>()].first.dump()
                  << "\noutput: " << f["output"].get<std::string>() << "\nerrors: " << f["errors"];
  }
}

TEST(SchemaTest, RealGemmaVocabularyOutputsValidateUnderAjv) {
  auto v = testing::CachedGemmaVocab(testing::DefaultGemmaTokenizerPath(GEMMA_SOURCE_DIR));
  if (!v) GTEST_SKIP() << "Gemma tokenizer.json missing: run tools/setup.sh";
  if (!HaveNode()) GTEST_SKIP() << "node or AJV (.cache/npm-assets) missing: run tools/setup.sh";
  std::mt19937_64 rng(8);
  std::vector<std::pair<Json, std::vector<std::string>>> cases;
  for (const Json& schema : testing::SchemaCorpus(23, 99)) {
    ConstraintOptions o;
    o.kind = ConstraintKind::kJsonSchema;
    o.schema = schema;
    auto c = Constraint::Compile(v, o);
    std::vector<std::string> outs;
    for (int k = 0; k < 2; ++k) {
      auto g = testing::Generate(c, &rng, 24);
      ASSERT_TRUE(g.complete) << schema.dump();
      EXPECT_TRUE(Json::accept(g.text)) << g.text;
      outs.push_back(g.text);
    }
    cases.push_back({schema, outs});
  }
  Json r = AjvValidate(cases);
  EXPECT_EQ(r["schemas"].get<int>(), 50);
  for (const auto& f : r["failures"]) {
    ADD_FAILURE() << "AJV rejects " << f["output"] << " for "
                  << cases[f["index"].get<int>()].first.dump() << ": " << f["errors"];
  }
}

// With the 262k vocabulary: the text-split and full walks agree with stepping each token alone.
TEST(SchemaTest, RealGemmaVocabularyMasksAgreeWithPerTokenAcceptance) {
  auto v = testing::CachedGemmaVocab(testing::DefaultGemmaTokenizerPath(GEMMA_SOURCE_DIR));
  if (!v) GTEST_SKIP() << "Gemma tokenizer.json missing: run tools/setup.sh";
  ConstraintOptions o;
  o.kind = ConstraintKind::kJsonSchema;
  o.schema = Json::parse(
      R"({"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer","maximum":300},"tags":{"type":"array","items":{}}},"required":["name","n","tags"]})");
  auto c = Constraint::Compile(v, o);
  ConstraintState st(c);
  for (const char* prefix :
       {"", "{\"name\":\"ab", "c \\u00e9\u00e9\",\"n\":2", "9,\"tags\":[{\"k\":[\""}) {
    st.AcceptBytes(prefix);
    const uint64_t* m = st.AllowedTokens();
    int allowed = 0;
    for (int32_t id = 0; id < v->size(); ++id) {
      if (v->is_special(id)) continue;
      ConstraintState copy = st;
      bool ok = true;
      try {
        copy.Accept(id);
      } catch (const Error&) {
        ok = false;
      }
      allowed += ok;
      ASSERT_EQ(((m[id >> 6] >> (id & 63)) & 1) != 0, ok)
          << "after '" << prefix << "' token " << id;
    }
    EXPECT_GT(allowed, 0);
  }
  // A counted repetition: deep in the count, states share the short-token part of their masks.
  ConstraintOptions r;
  r.kind = ConstraintKind::kRegex;
  r.regex = "[^\\n]{1,40}\\.";
  auto rc = Constraint::Compile(v, r);
  ConstraintState rs(rc);
  for (int step = 0; step < 40; ++step) {
    const uint64_t* m = rs.AllowedTokens();
    if (step == 8 || step == 20 || step == 37) {
      for (int32_t id = 0; id < v->size(); ++id) {
        if (v->is_special(id)) continue;
        ConstraintState copy = rs;
        bool ok = true;
        try {
          copy.Accept(id);
        } catch (const Error&) {
          ok = false;
        }
        ASSERT_EQ(((m[id >> 6] >> (id & 63)) & 1) != 0, ok) << "step " << step << " token " << id;
      }
    }
    rs.AcceptBytes("x");
  }
}

TEST(SchemaTest, JsonSchemaTestSuiteInsideTheSubset) {
  const fs::path dir = kModules + "/json-schema-test-suite/tests/draft4";
  if (!HaveNode() || !fs::exists(dir)) GTEST_SKIP() << "JSON-Schema-Test-Suite or node missing";
  std::mt19937_64 rng(11);
  std::vector<std::pair<Json, std::vector<std::string>>> cases;
  int groups = 0, compiled = 0, accepted_valid = 0, data_checked = 0;
  std::map<std::string, int> rejected_by;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    Json file = Json::parse(in);
    for (const auto& group : file) {
      ++groups;
      std::shared_ptr<const Constraint> c;
      try {
        c = CompileSchema(group["schema"]);
      } catch (const Error& e) {
        std::string msg = e.what();
        // Rejections must say what: a keyword and a pointer, or why nothing is admitted.
        EXPECT_TRUE(msg.find("keyword '") != std::string::npos ||
                    msg.find("admits no value") != std::string::npos ||
                    msg.find("ambiguous") != std::string::npos)
            << msg;
        rejected_by[entry.path().filename().string()]++;
        continue;
      }
      ++compiled;
      std::vector<std::string> outs;
      for (int k = 0; k < 3; ++k) outs.push_back(testing::Generate(c, &rng, 30).text);
      cases.push_back({group["schema"], outs});
      // Soundness on the suite's own data: whatever the constraint accepts must be valid.
      for (const auto& t : group["tests"]) {
        ConstraintState st(c);
        bool accepts = true;
        try {
          st.AcceptBytes(t["data"].dump());
          accepts = st.CanStop();
        } catch (const Error&) {
          accepts = false;
        }
        ++data_checked;
        if (accepts) {
          EXPECT_TRUE(t["valid"].get<bool>())
              << entry.path().filename() << ": " << group["description"] << " / "
              << t["description"] << " accepted invalid data " << t["data"].dump();
          ++accepted_valid;
        }
      }
    }
  }
  Json r = AjvValidate(cases);
  for (const auto& f : r["failures"]) {
    ADD_FAILURE() << "AJV rejects output for suite schema "
                  << cases[f["index"].get<int>()].first.dump() << "\noutput: " << f["output"]
                  << "\nerrors: " << f["errors"];
  }
  for (const auto& [file, n] : rejected_by)
    std::printf("[suite] %s: %d groups outside the subset\n", file.c_str(), n);
  std::printf(
      "[suite] groups %d, compiled %d, AJV-validated outputs %d, suite data accepted %d/%d\n",
      groups, compiled, r["outputs"].get<int>(), accepted_valid, data_checked);
  EXPECT_GE(compiled, 35);  // 38 of the 73 draft-4 groups are inside the subset
  EXPECT_GE(accepted_valid, 40);
}

TEST(SchemaTest, UnsupportedKeywordsNameKeywordAndPointer) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type":"object","properties":{"a":{"type":"string","format":"email"}}})",
       "'format' at '#/properties/a'"},
      {R"({"type":"array","items":{"type":"integer","multipleOf":3}})",
       "'multipleOf' at '#/items'"},
      {R"({"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"})",
       "recursive"},
      {R"({"type":"object","patternProperties":{"^x":{}}})", "'patternProperties' at '#'"},
      {R"({"not":{"type":"string"}})", "'not' at '#'"},
      {R"({"allOf":[{"additionalProperties":false},{"properties":{"a":{}}}]})", "'allOf' at '#'"},
      {R"({"type":"object","properties":{"a":{}},"anyOf":[{"properties":{"b":{}}},{"additionalProperties":false}]})",
       "'anyOf' at '#'"},
      {R"({"oneOf":[{"type":"integer"},{"type":"integer","minimum":3}]})", "'oneOf' at '#'"},
      {R"({"type":"array","uniqueItems":true})", "'uniqueItems'"},
      {R"({"$ref":"http://example.com/s.json"})", "'$ref'"},
      {R"({"type":"integer","minimum":5,"maximum":3})", "admits no value"},
      {R"({"type":"string","pattern":"(?=a)b"})", "'pattern' at '#'"},
      {R"({"anyOf":[{},{"const":[[[[[1]]]]]}]})", "ambiguous"},
  };
  for (auto [schema, what] : cases) {
    try {
      CompileSchema(Json::parse(schema));
      ADD_FAILURE() << "accepted " << schema;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos)
          << schema << " -> " << e.what();
    }
  }
}

// ---- Gemma 4 tool calls ----

// Independent reader of Gemma's tool-call argument syntax over a token sequence: bytes are 0..255,
// special tokens are 256 + id.
class GemmaArgsParser {
 public:
  GemmaArgsParser(const std::vector<int>& sym, size_t pos, int quote)
      : s_(sym), i_(pos), quote_(quote) {}
  Json Value() {
    if (s_[i_] == quote_) {
      ++i_;
      std::string out;
      while (s_[i_] != quote_) out.push_back(static_cast<char>(s_[i_++]));
      ++i_;
      return out;
    }
    if (s_[i_] == '{') {
      ++i_;
      Json o = Json::object();
      if (s_[i_] == '}') return ++i_, o;
      for (;;) {
        std::string key;
        while (s_[i_] != ':') key.push_back(static_cast<char>(s_[i_++]));
        ++i_;
        o[key] = Value();
        if (s_[i_++] == '}') return o;
      }
    }
    if (s_[i_] == '[') {
      ++i_;
      Json a = Json::array();
      if (s_[i_] == ']') return ++i_, a;
      for (;;) {
        a.push_back(Value());
        if (s_[i_++] == ']') return a;
      }
    }
    std::string lit;
    while (s_[i_] < 256 &&
           std::string(",}]").find(static_cast<char>(s_[i_])) == std::string::npos) {
      lit.push_back(static_cast<char>(s_[i_++]));
    }
    return Json::parse(lit);
  }
  size_t pos() const { return i_; }

 private:
  const std::vector<int>& s_;
  size_t i_;
  int quote_;
};

Json Tools() {
  return Json::parse(R"([
    {"type":"function","function":{"name":"get_weather","description":"Weather",
      "parameters":{"type":"object","properties":{"city":{"type":"string","minLength":1},
        "unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":7}},
        "required":["city"]}}},
    {"type":"function","function":{"name":"search","parameters":{"type":"object",
      "properties":{"query":{"type":"string"},"limit":{"type":"integer","minimum":1},
        "filters":{"type":"object","properties":{"lang":{"type":"string","pattern":"^[a-z]{2}$"},
          "tags":{"type":"array","items":{"type":"string"},"maxItems":3}},"additionalProperties":false},
        "extra":{}},
      "required":["query","filters"]}}},
    {"name":"ping"}
  ])");
}

std::shared_ptr<const Constraint> CompileTools(bool required, bool thinking) {
  static auto vocab = testing::SyntheticVocab();
  ConstraintOptions o;
  o.kind = ConstraintKind::kToolCalls;
  o.tools = Tools();
  o.require_tool_call = required;
  o.thinking = thinking;
  return Constraint::Compile(vocab, o);
}

TEST(ToolCallTest, CallsNameDeclaredToolsAndArgumentsValidateUnderAjv) {
  if (!HaveNode()) GTEST_SKIP() << "node or AJV (.cache/npm-assets) missing: run tools/setup.sh";
  const Json tools = Tools();
  std::map<std::string, Json> params;
  for (const auto& t : tools) {
    const Json& fn = t.contains("function") ? t["function"] : t;
    params[fn["name"].get<std::string>()] =
        fn.value("parameters", Json{{"type", "object"}, {"additionalProperties", false}});
  }
  std::mt19937_64 rng(3);
  std::vector<std::pair<Json, std::vector<std::string>>> cases;
  int calls = 0;
  for (bool thinking : {false, true}) {
    auto c = CompileTools(true, thinking);
    const auto& v = c->vocab();
    for (int n = 0; n < 60; ++n) {
      auto g = testing::Generate(c, &rng, 30);
      ASSERT_TRUE(g.complete);
      std::vector<int> sym;
      for (int32_t t : g.tokens) {
        if (v.is_special(t)) {
          sym.push_back(256 + t);
        } else {
          for (unsigned char ch : v.bytes(t)) sym.push_back(ch);
        }
      }
      sym.push_back(-1);
      size_t i = 0;
      if (sym[0] == 256 + 100) {  // reasoning channel first
        while (sym[i] != 256 + 101) ++i;
        ++i;
      }
      ASSERT_EQ(sym[i], 256 + 48) << g.text;
      while (sym[i] == 256 + 48) {
        ++i;
        std::string head;
        while (sym[i] != '{') head.push_back(static_cast<char>(sym[i++]));
        ASSERT_EQ(head.rfind("call:", 0), 0u) << g.text;
        std::string name = head.substr(5);
        ASSERT_TRUE(params.count(name)) << "undeclared tool '" << name << "'";
        GemmaArgsParser p(sym, i, 256 + 52);
        Json args = p.Value();
        i = p.pos();
        ASSERT_EQ(sym[i], 256 + 49) << g.text;
        ++i;
        cases.push_back({params[name], {args.dump()}});
        ++calls;
        // Gemma's template writes arguments in sorted key order.
        std::vector<std::string> keys;
        for (auto it = args.begin(); it != args.end(); ++it) keys.push_back(it.key());
        EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end())) << args.dump();
      }
      EXPECT_EQ(sym[i], -1) << g.text;
    }
  }
  Json r = AjvValidate(cases);
  EXPECT_EQ(r["outputs"].get<int>(), calls);
  for (const auto& f : r["failures"]) {
    ADD_FAILURE() << "AJV rejects tool arguments " << f["output"] << ": " << f["errors"];
  }
}

int Count(const uint64_t* m, size_t words) {
  int n = 0;
  for (size_t w = 0; w < words; ++w) n += __builtin_popcountll(m[w]);
  return n;
}
using testing::Bit;

TEST(ToolCallTest, ThinkingChannelIsUnconstrainedThenGrammarResumes) {
  auto c = CompileTools(true, true);
  const auto& v = c->vocab();
  ConstraintState st(c);
  const uint64_t* m = st.AllowedTokens();
  // Start: the channel opener or the tool-call opener, nothing else.
  EXPECT_TRUE(Bit(m, 100));
  EXPECT_TRUE(Bit(m, 48));
  EXPECT_EQ(Count(m, v.mask_words()), 2);
  st.Accept(100);
  m = st.AllowedTokens();
  int text_tokens = static_cast<int>(v.trie().num_tokens);
  EXPECT_EQ(Count(m, v.mask_words()), text_tokens + 1);  // any text token, or <channel|>
  EXPECT_TRUE(Bit(m, 101));
  EXPECT_FALSE(Bit(m, 1));  // cannot stop inside the channel
  st.AcceptBytes("Let me think: call:nothing{<|\"|>}");
  st.Accept(101);
  m = st.AllowedTokens();
  EXPECT_EQ(Count(m, v.mask_words()), 1);
  EXPECT_TRUE(Bit(m, 48));
  st.Accept(48);
  st.AcceptBytes("call:");
  m = st.AllowedTokens();
  int32_t get_weather = -1, foo = -1;
  for (int32_t id = 0; id < v.size(); ++id) {
    if (v.bytes(id) == "get_weather") get_weather = id;
    if (v.bytes(id) == "foo") foo = id;
  }
  EXPECT_TRUE(Bit(m, get_weather));
  EXPECT_FALSE(Bit(m, foo));
  st.AcceptBytes("ping{}");
  EXPECT_FALSE(st.CanStop());
  st.Accept(49);
  EXPECT_TRUE(st.CanStop());
  m = st.AllowedTokens();
  EXPECT_TRUE(Bit(m, 50));   // <|tool_response> ends generation after a call
  EXPECT_TRUE(Bit(m, 48));   // or another call
  EXPECT_FALSE(Bit(m, 52));  // a quote is not text
}

TEST(ToolCallTest, AutoModeAllowsTextAnswer) {
  auto c = CompileTools(false, false);
  ConstraintState st(c);
  const uint64_t* m = st.AllowedTokens();
  EXPECT_TRUE(Bit(m, 48));
  EXPECT_FALSE(Bit(m, 100));  // thinking off: no channel
  st.AcceptBytes("Sure, the weather is nice.");
  EXPECT_TRUE(st.CanStop());
  st.Accept(106);
  EXPECT_TRUE(st.IsComplete());
}

TEST(ToolCallTest, ArgumentsUseGemmaSyntax) {
  auto c = CompileTools(true, false);
  ConstraintState st(c);
  st.Accept(48);
  st.AcceptBytes("call:get_weather{city:");
  st.Accept(52);
  EXPECT_NO_THROW(st.AcceptBytes("Paris \"quoted\"\n"));  // raw text: no escaping inside <|"|>
  st.Accept(52);
  EXPECT_THROW(st.AcceptBytes(",\"unit\""), Error);  // keys are bare
  ConstraintState st2(c);
  st2.Accept(48);
  EXPECT_THROW(st2.AcceptBytes("call:get_weather{unit:"),
               Error);  // city is required and sorts first
}

// Found by fuzz/fuzz_schema.cc: a property name that is not a valid bare key ("locat]ion") was
// written bare, so the tool call could not be parsed back. Such names are <|"|>-quoted now (the
// parser reads quoted keys); one holding the quote token itself cannot be written and is refused.
TEST(ToolCallTest, KeysThatCannotBeBareAreQuoted) {
  static auto vocab = testing::SyntheticVocab();
  ConstraintOptions o;
  o.kind = ConstraintKind::kToolCalls;
  o.require_tool_call = true;
  o.tools = Json::parse(R"([{"name":"f","parameters":{"type":"object","properties":{
      "a]b":{"type":"integer"},"plain":{"type":"integer"}," lead":{"type":"integer"}},
      "required":["a]b","plain"," lead"]}}])");
  auto c = Constraint::Compile(vocab, o);
  ConstraintState st(c);
  st.Accept(48);
  st.AcceptBytes("call:f{");
  st.Accept(52);
  st.AcceptBytes(" lead");
  st.Accept(52);
  st.AcceptBytes(":1,");
  st.Accept(52);
  st.AcceptBytes("a]b");
  st.Accept(52);
  EXPECT_NO_THROW(st.AcceptBytes(":2,plain:3}"));
  ConstraintState bare(c);
  bare.Accept(48);
  bare.AcceptBytes("call:f{");
  EXPECT_THROW(bare.AcceptBytes(" lead:"), Error);
  o.tools = Json::parse(R"([{"name":"f","parameters":{"type":"object","properties":{
      "x<|\"|>y":{"type":"integer"}},"required":["x<|\"|>y"]}}])");
  EXPECT_THROW(Constraint::Compile(vocab, o), Error);
  // Tool names the output parser would not read back are refused the same way.
  for (const char* name : {"g,et", "a b", "x:y", "t\tab", "p}q"}) {
    o.tools = Json::array({{{"name", name}}});
    EXPECT_THROW(Constraint::Compile(vocab, o), Error) << name;
  }
}

}  // namespace
}  // namespace gemma::constrain
