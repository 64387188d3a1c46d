// JSON Schema and tool-call constraints against independent judges: AJV (npm) validates every
// generated output, JSON-Schema-Test-Suite's verdicts check what the constraint accepts, and a small
// independent parser reads Gemma's tool-call syntax.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "constrain/constraint.h"
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
  for (const auto& [schema, outputs] : cases) in.push_back({{"schema", schema}, {"outputs", outputs}});
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

std::shared_ptr<const Constraint> CompileSchema(const Json& schema, Whitespace ws = Whitespace::kNone) {
  static auto vocab = testing::SyntheticVocab();
  ConstraintOptions o;
  o.kind = ConstraintKind::kJsonSchema;
  o.schema = schema;
  o.whitespace = ws;
  return Constraint::Compile(vocab, o);
}

// ---- random schemas over the supported subset ----

class SchemaGen {
 public:
  explicit SchemaGen(uint64_t seed) : rng_(seed) {}

  Json Root() {
    defs_ = Json::object();
    Json s = Any(0);
    if (Pick(3) == 0) {
      // Route a property through $defs.
      Json def = Any(1);
      Json root = {{"type", "object"},
                   {"properties", {{"ref", {{"$ref", "#/$defs/d0"}}}, {"plain", Any(2)}}},
                   {"required", Json::array({"ref"})}};
      root["$defs"] = {{"d0", def}};
      return root;
    }
    return s;
  }

 private:
  int Pick(int n) { return static_cast<int>(rng_() % n); }

  Json Scalar() {
    switch (Pick(12)) {
      case 0: return {{"type", "string"}};
      case 1: {
        static const char* pats[] = {"^[a-z]{2,5}$", "^[A-Z][0-9]{3}$", "^(red|green|blue)$",
                                     "^\\d{3}-\\d{4}$", "^[a-c\"\\\\]{1,3}$", "^é+ü?$",
                                     "[0-9a-f]{4}", "^\\w+@\\w+\\.com$"};
        return {{"type", "string"}, {"pattern", pats[Pick(8)]}};
      }
      case 2: {
        int mn = Pick(4);
        Json s = {{"type", "string"}, {"minLength", mn}};
        if (Pick(2)) s["maxLength"] = mn + Pick(5);
        return s;
      }
      case 3: return {{"type", "integer"}};
      case 4: {
        Json s = {{"type", "integer"}};
        int lo = Pick(200) - 100;
        if (Pick(2)) s[Pick(2) ? "minimum" : "exclusiveMinimum"] = lo;
        if (Pick(2)) s[Pick(2) ? "maximum" : "exclusiveMaximum"] = lo + 2 + Pick(1000);
        return s;
      }
      case 5: return {{"type", "number"}};
      case 6: {
        Json s = {{"type", "number"}};
        double lo = (Pick(400) - 200) / 4.0;
        s[Pick(2) ? "minimum" : "exclusiveMinimum"] = lo;
        s[Pick(2) ? "maximum" : "exclusiveMaximum"] = lo + 1.5 + Pick(100);
        return s;
      }
      case 7: return {{"type", "boolean"}};
      case 8: return {{"type", Json::array({"string", "null"})}};
      case 9: return {{"enum", Json::array({"a", 1, nullptr, true, Json::array({1, "x"}), Json{{"k", 2}}})}};
      case 10: return {{"const", Json{{"fixed", Json::array({1, 2})}}}};
      default: return {{"type", "null"}};
    }
  }

  Json Any(int depth) {
    int k = depth >= 3 ? 0 : Pick(10);
    if (k <= 3) return Scalar();
    if (k <= 5) return Object(depth);
    if (k <= 7) return Array(depth);
    if (k == 8) {
      return {{"anyOf", Json::array({Scalar(), Object(depth + 1)})}};
    }
    // oneOf with provably disjoint branches.
    return {{"oneOf", Json::array({{{"type", "integer"}, {"maximum", 5}},
                                   {{"type", "integer"}, {"minimum", 10}},
                                   {{"type", "string"}, {"maxLength", 3}}})}};
  }

  Json Object(int depth) {
    static const char* names[] = {"id", "name", "tags", "we\"ird", "ключ", "a b", "x", "nested"};
    Json s = {{"type", "object"}};
    if (Pick(6) == 0) {  // a map
      s["additionalProperties"] = Pick(2) ? Any(depth + 1) : Json::object();
      return s;
    }
    Json props = Json::object();
    Json req = Json::array();
    int n = 1 + Pick(4);
    for (int i = 0; i < n; ++i) {
      std::string name = names[Pick(8)];
      if (props.contains(name)) continue;
      props[name] = Any(depth + 1);
      if (Pick(2)) req.push_back(name);
    }
    s["properties"] = props;
    if (!req.empty()) s["required"] = req;
    if (Pick(2)) s["additionalProperties"] = false;
    return s;
  }

  Json Array(int depth) {
    Json s = {{"type", "array"}};
    if (Pick(4) == 0) {
      s["prefixItems"] = Json::array({Scalar(), Scalar()});
      if (Pick(2)) s["items"] = false;
    } else {
      s["items"] = Any(depth + 1);
    }
    int mn = Pick(3);
    if (Pick(2)) s["minItems"] = mn;
    if (Pick(2)) s["maxItems"] = mn + Pick(4);
    return s;
  }

  std::mt19937_64 rng_;
  Json defs_;
};

std::vector<Json> HandWrittenSchemas() {
  return {
      Json::parse(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150}},"required":["name","age"],"additionalProperties":false})"),
      Json::parse(R"({"type":"array","items":{"type":"number","minimum":-2.5,"exclusiveMaximum":3},"minItems":1,"maxItems":4})"),
      Json::parse(R"({"type":"string","pattern":"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"})"),
      Json::parse(R"({"type":"string","minLength":2,"maxLength":3,"pattern":"^[a-z\"]+$"})"),
      Json::parse(R"({"enum":["red","green",3,null,{"a":[1,2]}]})"),
      Json::parse(R"({"const":"he said \"hi\"\n"})"),
      Json::parse(R"({"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"object","properties":{"c":{"type":"boolean"}},"required":["c"]}},"required":["b"]}}})"),
      Json::parse(R"({"$defs":{"pt":{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"}},"required":["x","y"],"additionalProperties":false}},"type":"array","items":{"$ref":"#/$defs/pt"}})"),
      Json::parse(R"({"definitions":{"s":{"type":"string","maxLength":2}},"type":"object","properties":{"p":{"$ref":"#/definitions/s"}},"required":["p"]})"),
      Json::parse(R"({"anyOf":[{"type":"string"},{"type":"integer","exclusiveMinimum":-5,"maximum":5}]})"),
      Json::parse(R"({"oneOf":[{"type":"integer","maximum":-1},{"type":"integer","minimum":1}]})"),
      Json::parse(R"({"type":"object","additionalProperties":{"type":"integer"}})"),
      Json::parse(R"({"type":"object"})"),
      Json::parse(R"({})"),
      Json::parse(R"(true)"),
      Json::parse(R"({"type":"object","properties":{"meta":{},"list":{"type":"array"}},"required":["meta","list"]})"),
      Json::parse(R"({"type":["integer","string","null"]})"),
      Json::parse(R"({"type":"integer","minimum":-1234,"maximum":98765})"),
      Json::parse(R"({"type":"integer","exclusiveMinimum":1000000})"),
      Json::parse(R"({"type":"number","minimum":0.25,"maximum":0.75})"),
      Json::parse(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false,"minItems":2})"),
      Json::parse(R"({"type":"array","items":[{"type":"boolean"}],"additionalItems":{"type":"null"},"maxItems":3})"),
      Json::parse(R"({"type":"object","properties":{"x":{"type":"integer"}},"required":["x","y"]})"),
      Json::parse(R"({"type":"string","pattern":"^(\\+|-)?[0-9]+(\\.[0-9]{1,2})?$","maxLength":6})"),
      Json::parse(R"({"type":"object","properties":{"emoji":{"type":"string","pattern":"^[😀-😂]{1,2}$"},"cjk":{"type":"string","pattern":"^[\\u4e00-\\u9fff]+$","maxLength":3}},"required":["emoji","cjk"]})"),
      Json::parse(R"({"allOf":[{"type":"integer","maximum":3,"minimum":3}]})"),
      Json::parse(R"({"type":"object","title":"t","description":"d","properties":{"a":{"type":"string","default":"x","examples":["y"]}},"$comment":"c"})"),
  };
}

TEST(SchemaTest, GeneratedOutputsValidateUnderAjv) {
  if (!HaveNode()) GTEST_SKIP() << "node or AJV (.cache/npm-assets) missing: run tools/setup.sh";
  std::vector<Json> schemas = HandWrittenSchemas();
  SchemaGen gen(2026);
  for (int i = 0; i < 320; ++i) schemas.push_back(gen.Root());
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
      EXPECT_NO_THROW((void)Json::parse(g.text)) << schemas[i].dump() << "\n" << g.text;
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
  for (const auto& [file, n] : rejected_by) std::printf("[suite] %s: %d groups outside the subset\n", file.c_str(), n);
  std::printf("[suite] groups %d, compiled %d, AJV-validated outputs %d, suite data accepted %d/%d\n",
              groups, compiled, r["outputs"].get<int>(), accepted_valid, data_checked);
  EXPECT_GE(compiled, 35);  // 38 of the 73 draft-4 groups are inside the subset
  EXPECT_GE(accepted_valid, 40);
}

TEST(SchemaTest, UnsupportedKeywordsNameKeywordAndPointer) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type":"object","properties":{"a":{"type":"string","format":"email"}}})",
       "'format' at '#/properties/a'"},
      {R"({"type":"array","items":{"type":"integer","multipleOf":3}})", "'multipleOf' at '#/items'"},
      {R"({"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"})",
       "recursive"},
      {R"({"type":"object","patternProperties":{"^x":{}}})", "'patternProperties' at '#'"},
      {R"({"not":{"type":"string"}})", "'not' at '#'"},
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
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << schema << " -> " << e.what();
    }
  }
}

// ---- Gemma 4 tool calls ----

// Independent reader of Gemma's tool-call argument syntax over a token sequence: bytes are 0..255,
// special tokens are 256 + id.
class GemmaArgsParser {
 public:
  GemmaArgsParser(const std::vector<int>& sym, size_t pos, int quote) : s_(sym), i_(pos), quote_(quote) {}
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
    while (s_[i_] < 256 && std::string(",}]").find(static_cast<char>(s_[i_])) == std::string::npos) {
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
    params[fn["name"].get<std::string>()] = fn.value("parameters", Json{{"type", "object"}, {"additionalProperties", false}});
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
bool Bit(const uint64_t* m, int32_t id) { return (m[id >> 6] >> (id & 63)) & 1; }

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
  int text_tokens = static_cast<int>(v.trie().token_ids.size());
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
  EXPECT_THROW(st2.AcceptBytes("call:get_weather{unit:"), Error);  // city is required and sorts first
}

}  // namespace
}  // namespace gemma::constrain
