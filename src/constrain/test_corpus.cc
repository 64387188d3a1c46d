#include "constrain/test_corpus.h"

#include <random>

namespace gemma::constrain::testing {
namespace {

using Json = nlohmann::ordered_json;

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
      case 0:
        return {{"type", "string"}};
      case 1: {
        static const char* pats[] = {"^[a-z]{2,5}$",    "^[A-Z][0-9]{3}$",    "^(red|green|blue)$",
                                     "^\\d{3}-\\d{4}$", "^[a-c\"\\\\]{1,3}$", "^é+ü?$",
                                     "[0-9a-f]{4}",     "^\\w+@\\w+\\.com$"};
        return {{"type", "string"}, {"pattern", pats[Pick(8)]}};
      }
      case 2: {
        int mn = Pick(4);
        Json s = {{"type", "string"}, {"minLength", mn}};
        if (Pick(2)) s["maxLength"] = mn + Pick(5);
        return s;
      }
      case 3:
        return {{"type", "integer"}};
      case 4: {
        Json s = {{"type", "integer"}};
        int lo = Pick(200) - 100;
        if (Pick(2)) s[Pick(2) ? "minimum" : "exclusiveMinimum"] = lo;
        if (Pick(2)) s[Pick(2) ? "maximum" : "exclusiveMaximum"] = lo + 2 + Pick(1000);
        return s;
      }
      case 5:
        return {{"type", "number"}};
      case 6: {
        Json s = {{"type", "number"}};
        double lo = (Pick(400) - 200) / 4.0;
        s[Pick(2) ? "minimum" : "exclusiveMinimum"] = lo;
        s[Pick(2) ? "maximum" : "exclusiveMaximum"] = lo + 1.5 + Pick(100);
        return s;
      }
      case 7:
        return {{"type", "boolean"}};
      case 8:
        return {{"type", Json::array({"string", "null"})}};
      case 9:
        return {
            {"enum", Json::array({"a", 1, nullptr, true, Json::array({1, "x"}), Json{{"k", 2}}})}};
      case 10:
        return {{"const", Json{{"fixed", Json::array({1, 2})}}}};
      default:
        return {{"type", "null"}};
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
      Json::parse(
          R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150}},"required":["name","age"],"additionalProperties":false})"),
      Json::parse(
          R"({"type":"array","items":{"type":"number","minimum":-2.5,"exclusiveMaximum":3},"minItems":1,"maxItems":4})"),
      Json::parse(R"({"type":"string","pattern":"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"})"),
      Json::parse(R"({"type":"string","minLength":2,"maxLength":3,"pattern":"^[a-z\"]+$"})"),
      Json::parse(R"({"enum":["red","green",3,null,{"a":[1,2]}]})"),
      Json::parse(R"({"const":"he said \"hi\"\n"})"),
      Json::parse(
          R"({"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"object","properties":{"c":{"type":"boolean"}},"required":["c"]}},"required":["b"]}}})"),
      Json::parse(
          R"({"$defs":{"pt":{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"}},"required":["x","y"],"additionalProperties":false}},"type":"array","items":{"$ref":"#/$defs/pt"}})"),
      Json::parse(
          R"({"definitions":{"s":{"type":"string","maxLength":2}},"type":"object","properties":{"p":{"$ref":"#/definitions/s"}},"required":["p"]})"),
      Json::parse(
          R"({"anyOf":[{"type":"string"},{"type":"integer","exclusiveMinimum":-5,"maximum":5}]})"),
      Json::parse(R"({"oneOf":[{"type":"integer","maximum":-1},{"type":"integer","minimum":1}]})"),
      Json::parse(R"({"type":"object","additionalProperties":{"type":"integer"}})"),
      Json::parse(R"({"type":"object"})"),
      Json::parse(R"({})"),
      Json::parse(R"(true)"),
      Json::parse(
          R"({"type":"object","properties":{"meta":{},"list":{"type":"array"}},"required":["meta","list"]})"),
      Json::parse(R"({"type":["integer","string","null"]})"),
      Json::parse(R"({"type":"integer","minimum":-1234,"maximum":98765})"),
      Json::parse(R"({"type":"integer","exclusiveMinimum":1000000})"),
      Json::parse(R"({"type":"number","minimum":0.25,"maximum":0.75})"),
      Json::parse(
          R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false,"minItems":2})"),
      Json::parse(
          R"({"type":"array","items":[{"type":"boolean"}],"additionalItems":{"type":"null"},"maxItems":3})"),
      Json::parse(
          R"({"type":"object","properties":{"x":{"type":"integer"}},"required":["x","y"]})"),
      Json::parse(
          R"({"type":"string","pattern":"^(\\+|-)?[0-9]+(\\.[0-9]{1,2})?$","maxLength":6})"),
      Json::parse(
          R"({"type":"object","properties":{"emoji":{"type":"string","pattern":"^[😀-😂]{1,2}$"},"cjk":{"type":"string","pattern":"^[\\u4e00-\\u9fff]+$","maxLength":3}},"required":["emoji","cjk"]})"),
      Json::parse(R"({"allOf":[{"type":"integer","maximum":3,"minimum":3}]})"),
      Json::parse(
          R"({"type":"object","title":"t","description":"d","properties":{"a":{"type":"string","default":"x","examples":["y"]}},"$comment":"c"})"),
  };
}

}  // namespace

std::vector<Json> SchemaCorpus(int random_count, uint64_t seed) {
  std::vector<Json> out = HandWrittenSchemas();
  SchemaGen gen(seed);
  for (int i = 0; i < random_count; ++i) out.push_back(gen.Root());
  return out;
}

std::vector<std::string> RegexCorpus() {
  return {
      "[0-9]{3}-[0-9]{3}-[0-9]{4}",
      "[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]{2,4}",
      "(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
      "([01][0-9]|2[0-3]):[0-5][0-9]",
      "https?://[a-z0-9.-]+(/[a-zA-Z0-9_.-]*)*",
      "(yes|no|maybe)",
      "[A-Z][a-z]+( [A-Z][a-z]+){0,3}",
      "-?[0-9]+(\\.[0-9]{1,4})?",
      "#[0-9a-fA-F]{6}",
      "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
      "(\\d{1,3}\\.){3}\\d{1,3}",
      "[A-Z]{2}[0-9]{2}[A-Z0-9]{4}[0-9]{7}",
      "(Mon|Tue|Wed|Thu|Fri|Sat|Sun), [0-9]{1,2} (Jan|Feb|Mar|Apr|May|Jun)",
      "[^\\n]{1,80}",
      "The answer is (A|B|C|D)\\.",
      "(\\w+ ){2,6}\\w+\\.",
      "\\$[0-9]{1,3}(,[0-9]{3})*\\.[0-9]{2}",
      "[a-z]+(_[a-z]+)*\\(\\)",
      "(true|false)",
      "Step [1-9]: [a-z ]{5,40}\\n(Step [1-9]: [a-z ]{5,40}\\n){0,3}",
      "[\\x{4e00}-\\x{9fff}]{2,8}",
      "<[a-z]+>[^<]*</[a-z]+>",
  };
}

}  // namespace gemma::constrain::testing
