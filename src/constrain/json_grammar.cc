#include "constrain/json_grammar.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "constrain/regex.h"
#include "gemma/error.h"

namespace gemma::constrain {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kMaxListCopies = 256;  // array positions emitted one by one
constexpr int kMaxStringLength = 1024;
constexpr size_t kMaxBranchStates = 200000;
// Nesting of subschemas (items, properties, anyOf branches, $ref targets) compiled at once: bounds
// the recursion, including chains of $ref that the JSON's own nesting does not show.
constexpr int kMaxSchemaDepth = 128;
// NFA states a schema may produce before compilation stops: $ref graphs and repeated array items
// multiply subschemas, so the size of the schema text alone does not bound the work.
constexpr size_t kMaxSchemaStates = 4u << 20;

[[noreturn]] void Unsupported(const std::string& keyword, const std::string& ptr,
                              const std::string& why = "is not supported") {
  throw Error(ErrorCode::kUnsupported, "JSON Schema keyword '" + keyword + "' at '" +
                                           (ptr.empty() ? "#" : "#" + ptr) + "' " + why);
}

[[noreturn]] void Unsatisfiable(const std::string& ptr, const std::string& why) {
  throw Error(ErrorCode::kConstraint,
              "JSON Schema at '" + (ptr.empty() ? "#" : "#" + ptr) + "' admits no value: " + why);
}

std::string EscapePointer(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

const std::set<std::string>& Annotations() {
  static const std::set<std::string> k = {
      "title",      "description",   "default",          "examples",       "$comment",    "$schema",
      "deprecated", "readOnly",      "writeOnly",        "$defs",          "definitions", "$id",
      "example",    "discriminator", "contentMediaType", "contentEncoding"};
  return k;
}

const std::set<std::string>& Supported() {
  static const std::set<std::string> k = {"type",
                                          "const",
                                          "enum",
                                          "anyOf",
                                          "oneOf",
                                          "allOf",
                                          "$ref",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "items",
                                          "prefixItems",
                                          "additionalItems",
                                          "minItems",
                                          "maxItems",
                                          "uniqueItems",
                                          "pattern",
                                          "minLength",
                                          "maxLength",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum"};
  return k;
}

bool IsAnnotation(const std::string& k) { return Annotations().count(k) > 0; }

bool NonNegInt(const Json& v) {
  if (v.is_number_integer()) return v.get<int64_t>() >= 0 || v.is_number_unsigned();
  return v.is_number_float() && v.get<double>() >= 0 &&
         std::floor(v.get<double>()) == v.get<double>();
}

// Canonical decimal integers in [lo, hi] (nullopt = unbounded) as fragments.
class IntRanges {
 public:
  explicit IntRanges(Nfa* nfa) : nfa_(nfa) {}

  std::optional<Fragment> Range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
    if (lo && hi && *lo > *hi) return std::nullopt;
    std::vector<Fragment> alts;
    if (!lo || *lo < 0) {  // negatives: -v, v in [max(1, -hi), -lo]
      int64_t a = (hi && *hi < 0) ? -*hi : 1;
      std::optional<int64_t> b;
      if (lo) b = -*lo;
      if (!b || a <= *b) alts.push_back(nfa_->Concat(nfa_->Literal("-"), NonNeg(a, b)));
    }
    if (!hi || *hi >= 0) {
      int64_t a = lo ? std::max<int64_t>(0, *lo) : 0;
      if (!hi || a <= *hi) alts.push_back(NonNeg(a, hi));
    }
    if (alts.empty()) return std::nullopt;
    return nfa_->Alt(alts);
  }

 private:
  static int Digits(int64_t v) { return static_cast<int>(std::to_string(v).size()); }
  static int64_t Pow10(int n) {
    int64_t p = 1;
    while (n-- > 0) p *= 10;
    return p;
  }

  Fragment AnyDigits(int n) {
    std::vector<Fragment> parts;
    for (int i = 0; i < n; ++i) parts.push_back(nfa_->Range('0', '9'));
    return nfa_->Concat(parts);
  }

  Fragment NonNeg(int64_t a, std::optional<int64_t> b) {
    if (!b) {
      int d = Digits(a);
      std::vector<Fragment> alts;
      alts.push_back(Finite(a, Pow10(d) - 1));
      // Every number with more than d digits.
      Fragment longer = nfa_->Concat(nfa_->Range('1', '9'), AnyDigits(d));
      alts.push_back(nfa_->Concat(longer, nfa_->Star(nfa_->Range('0', '9'))));
      return nfa_->Alt(alts);
    }
    return Finite(a, *b);
  }

  Fragment Finite(int64_t a, int64_t b) {
    std::vector<Fragment> alts;
    for (int len = Digits(a); len <= Digits(b); ++len) {
      int64_t lo = std::max(a, len == 1 ? int64_t{0} : Pow10(len - 1));
      int64_t hi = std::min(b, Pow10(len) - 1);
      if (lo <= hi) alts.push_back(SameLen(std::to_string(lo), std::to_string(hi)));
    }
    return nfa_->Alt(alts);
  }

  Fragment SameLen(const std::string& lo, const std::string& hi) {
    if (lo.empty()) return nfa_->Empty();
    if (lo[0] == hi[0]) {
      return nfa_->Concat(nfa_->Literal(lo.substr(0, 1)), SameLen(lo.substr(1), hi.substr(1)));
    }
    const size_t n = lo.size() - 1;
    std::string rest_lo = lo.substr(1), rest_hi = hi.substr(1);
    if (rest_lo == std::string(n, '0') && rest_hi == std::string(n, '9')) {
      return nfa_->Concat(nfa_->Range(lo[0], hi[0]), AnyDigits(static_cast<int>(n)));
    }
    std::vector<Fragment> alts;
    alts.push_back(
        nfa_->Concat(nfa_->Literal(lo.substr(0, 1)), SameLen(rest_lo, std::string(n, '9'))));
    if (hi[0] - lo[0] >= 2) {
      alts.push_back(
          nfa_->Concat(nfa_->Range(lo[0] + 1, hi[0] - 1), AnyDigits(static_cast<int>(n))));
    }
    alts.push_back(
        nfa_->Concat(nfa_->Literal(hi.substr(0, 1)), SameLen(std::string(n, '0'), rest_hi)));
    return nfa_->Alt(alts);
  }

  Nfa* nfa_;
};

}  // namespace

JsonGrammar::JsonGrammar(Nfa* nfa, JsonGrammarConfig config)
    : nfa_(nfa), cfg_(config), inline_left_(config.inline_levels) {}

Fragment JsonGrammar::Ws() {
  if (cfg_.syntax == Syntax::kJson && cfg_.whitespace == Whitespace::kAny) {
    uint32_t s = nfa_->AddState();
    for (char c : {' ', '\t', '\n', '\r'}) nfa_->AddEdge(s, c, c, s);
    return {s, s};
  }
  return nfa_->Empty();
}

Fragment JsonGrammar::Open(char c) { return nfa_->Concat(nfa_->Literal(std::string(1, c)), Ws()); }
Fragment JsonGrammar::Close(char c) { return nfa_->Concat(Ws(), nfa_->Literal(std::string(1, c))); }

Fragment JsonGrammar::Sep(char c) {
  if (cfg_.syntax == Syntax::kJson && cfg_.whitespace == Whitespace::kCompact) {
    return nfa_->Literal(std::string(1, c) + " ");
  }
  Fragment parts[] = {Ws(), nfa_->Literal(std::string(1, c)), Ws()};
  return nfa_->Concat(parts);
}

Fragment JsonGrammar::Quote() {
  if (cfg_.syntax == Syntax::kGemma) return nfa_->Symbol(cfg_.quote_symbol);
  return nfa_->Literal("\"");
}

Fragment JsonGrammar::StringChar() {
  if (cfg_.syntax == Syntax::kGemma) return nfa_->CodePoints(0, 0x10FFFF);
  std::pair<uint32_t, uint32_t> plain[] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}};
  Fragment p = nfa_->CodePointSet(plain);
  // Escapes; \u excludes surrogates so that every parser accepts the result.
  uint32_t s = nfa_->AddState(), e = nfa_->AddState(), u = nfa_->AddState();
  uint32_t bs = nfa_->AddState();
  nfa_->AddEdge(s, '\\', '\\', bs);
  for (char c : std::string("\"\\/bfnrt")) nfa_->AddEdge(bs, c, c, e);
  nfa_->AddEdge(bs, 'u', 'u', u);
  uint32_t h1 = nfa_->AddState(), h1d = nfa_->AddState(), h2 = nfa_->AddState(),
           h3 = nfa_->AddState();
  auto hex = [&](uint32_t from, uint32_t to) {
    nfa_->AddEdge(from, '0', '9', to);
    nfa_->AddEdge(from, 'a', 'f', to);
    nfa_->AddEdge(from, 'A', 'F', to);
  };
  // First digit: not d/D -> any three; d/D -> second digit 0-7.
  nfa_->AddEdge(u, '0', '9', h1);
  nfa_->AddEdge(u, 'a', 'c', h1);
  nfa_->AddEdge(u, 'A', 'C', h1);
  nfa_->AddEdge(u, 'e', 'f', h1);
  nfa_->AddEdge(u, 'E', 'F', h1);
  nfa_->AddEdge(u, 'd', 'd', h1d);
  nfa_->AddEdge(u, 'D', 'D', h1d);
  hex(h1, h2);
  nfa_->AddEdge(h1d, '0', '7', h2);
  hex(h2, h3);
  hex(h3, e);
  Fragment esc{s, e};
  Fragment alts[] = {p, esc};
  return nfa_->Alt(alts);
}

Fragment JsonGrammar::AnyString() {
  Fragment parts[] = {Quote(), nfa_->Star(StringChar()), Quote()};
  return nfa_->Concat(parts);
}

Fragment JsonGrammar::Number() {
  // At most 18 integer digits and 2 exponent digits: every output stays a finite double.
  return CompileRegex("-?(0|[1-9][0-9]{0,17})(\\.[0-9]+)?([eE][+-]?[0-9]{1,2})?", nfa_);
}

// At most 18 digits: fits int64 (and the JSON parsers that map integers to it).
Fragment JsonGrammar::Integer() { return CompileRegex("-?(0|[1-9][0-9]{0,17})", nfa_); }

Fragment JsonGrammar::StringBytes(const std::string& s) {
  if (cfg_.syntax == Syntax::kGemma) {
    Fragment parts[] = {Quote(), nfa_->Literal(s), Quote()};
    return nfa_->Concat(parts);
  }
  return nfa_->Literal(Json(s).dump(-1, ' ', false, Json::error_handler_t::replace));
}

Fragment JsonGrammar::Key(const std::string& name) {
  if (cfg_.syntax == Syntax::kGemma) {
    // A bare key runs to the ':' and may not hold a structural character or edge whitespace
    // (chat/output_parser.cc); any other name is written <|"|>-quoted, which the parser also
    // reads. (fuzz/fuzz_schema.cc found "locat]ion" written bare: a tool call nobody could parse.)
    if (name.find("<|\"|>") != std::string::npos) {
      throw Error(ErrorCode::kConstraint, "property name '" + name +
                                              "' holds <|\"|> and cannot be written as a Gemma "
                                              "tool-call key");
    }
    const bool bare = !name.empty() && name.find_first_of("{}[],:") == std::string::npos &&
                      !std::isspace(static_cast<unsigned char>(name.front())) &&
                      !std::isspace(static_cast<unsigned char>(name.back()));
    return bare ? nfa_->Literal(name) : StringBytes(name);
  }
  return StringBytes(name);
}

Fragment JsonGrammar::AnyKey() {
  if (cfg_.syntax == Syntax::kGemma) return CompileRegex("[A-Za-z_][A-Za-z0-9_]*", nfa_);
  return AnyString();
}

Fragment JsonGrammar::Value(const Json& v) {
  switch (v.type()) {
    case Json::value_t::string:
      return StringBytes(v.get<std::string>());
    case Json::value_t::array: {
      std::vector<Fragment> parts{Open('[')};
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) parts.push_back(Sep(','));
        parts.push_back(Value(v[i]));
      }
      parts.push_back(Close(']'));
      return nfa_->Concat(parts);
    }
    case Json::value_t::object: {
      std::vector<std::string> keys;
      for (auto it = v.begin(); it != v.end(); ++it) keys.push_back(it.key());
      if (cfg_.syntax == Syntax::kGemma) std::sort(keys.begin(), keys.end());
      std::vector<Fragment> parts{Open('{')};
      for (size_t i = 0; i < keys.size(); ++i) {
        if (i) parts.push_back(Sep(','));
        parts.push_back(Key(keys[i]));
        parts.push_back(Sep(':'));
        parts.push_back(Value(v[keys[i]]));
      }
      parts.push_back(Close('}'));
      return nfa_->Concat(parts);
    }
    default:
      return nfa_->Literal(v.dump());
  }
}

Fragment JsonGrammar::Scalar() {
  Fragment alts[] = {AnyString(), Number(), nfa_->Literal("true"), nfa_->Literal("false"),
                     nfa_->Literal("null")};
  return nfa_->Alt(alts);
}

Fragment JsonGrammar::AnyValueCall() {
  if (inline_left_ > 0) {
    --inline_left_;
    Fragment alts[] = {Scalar(), AnyValueBody(Root::kContainer)};
    Fragment f = nfa_->Alt(alts);
    ++inline_left_;
    return f;
  }
  used_any_ = true;
  Fragment alts[] = {Scalar(), nfa_->Symbol(kCallBase + cfg_.any_rule)};
  return nfa_->Alt(alts);
}

namespace {

// open item (sep item)* close with the item count in [min, max] (max < 0: unbounded). make(i)
// builds the item at position i; positions >= loop_from (when unbounded) share one looping
// fragment.
Fragment List(JsonGrammar* g, Nfa* nfa, const std::function<Fragment(char)>& open,
              const std::function<Fragment(char)>& close, const std::function<Fragment(char)>& sep,
              char o, char c, int min, int max, int loop_from,
              const std::function<Fragment(int)>& make) {
  Fragment op = open(o);
  uint32_t close_state = nfa->AddState();
  std::optional<uint32_t> e = op.end, f;
  for (int i = 0;; ++i) {
    if (i >= min) {
      if (e) nfa->AddEpsilon(*e, close_state);
      if (f) nfa->AddEpsilon(*f, close_state);
    }
    if (max >= 0 && i >= max) break;
    uint32_t p = nfa->AddState();
    if (e) nfa->AddEpsilon(*e, p);
    if (f) {
      Fragment s = sep(',');
      nfa->AddEpsilon(*f, s.start);
      nfa->AddEpsilon(s.end, p);
    }
    Fragment item = make(i);
    nfa->AddEpsilon(p, item.start);
    e.reset();
    if (max < 0 && i >= loop_from && i >= min) {
      Fragment s = sep(',');
      nfa->AddEpsilon(item.end, s.start);
      nfa->AddEpsilon(s.end, p);
      nfa->AddEpsilon(item.end, close_state);
      break;
    }
    f = item.end;
  }
  Fragment cl = close(c);
  nfa->AddEpsilon(close_state, cl.start);
  return {op.start, cl.end};
}

}  // namespace

Fragment JsonGrammar::AnyValueBody(Root root) {
  auto open = [this](char c) { return Open(c); };
  auto close = [this](char c) { return Close(c); };
  auto sep = [this](char c) { return Sep(c); };
  std::vector<Fragment> alts;
  alts.push_back(List(this, nfa_, open, close, sep, '{', '}', 0, -1, 0, [this](int) {
    Fragment parts[] = {AnyKey(), Sep(':'), AnyValueCall()};
    return nfa_->Concat(parts);
  }));
  if (root == Root::kObject) return alts[0];
  alts.push_back(List(this, nfa_, open, close, sep, '[', ']', 0, -1, 0,
                      [this](int) { return AnyValueCall(); }));
  if (root == Root::kAny) alts.push_back(Scalar());
  return nfa_->Alt(alts);
}

class SchemaCompiler {
 public:
  SchemaCompiler(JsonGrammar* g, Nfa* nfa, const Json& root) : g_(g), nfa_(nfa), root_(root) {}

  Fragment Compile(const Json& s, const std::string& ptr) {
    if (depth_ >= kMaxSchemaDepth) {
      throw Error(ErrorCode::kConstraint, "JSON Schema at '#" + ptr + "' nests deeper than " +
                                              std::to_string(kMaxSchemaDepth) +
                                              " subschemas (the limit)");
    }
    if (nfa_->size() > kMaxSchemaStates) {
      throw Error(ErrorCode::kConstraint, "JSON Schema at '#" + ptr +
                                              "' makes the grammar too large (over " +
                                              std::to_string(kMaxSchemaStates) + " states)");
    }
    ++depth_;
    struct Leave {
      int* d;
      ~Leave() { --*d; }
    } leave{&depth_};
    return CompileAt(s, ptr);
  }

 private:
  Fragment CompileAt(const Json& s, const std::string& ptr) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return g_->AnyValueCall();
      Unsatisfiable(ptr, "the schema is false");
    }
    if (!s.is_object()) {
      throw Error(ErrorCode::kConstraint,
                  "JSON Schema at '#" + ptr + "' must be an object or a boolean");
    }
    std::vector<std::string> active;  // non-annotation keywords
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      if (k == "$id" && !ptr.empty()) Unsupported(k, ptr, "is only supported at the root");
      if (IsAnnotation(k)) continue;
      if (!Supported().count(k)) Unsupported(k, ptr);
      if (k == "uniqueItems") {
        if (it->is_boolean() && !it->get<bool>()) continue;
        Unsupported(k, ptr, "is only supported as false");
      }
      active.push_back(k);
    }
    auto only = [&](const std::string& k, std::initializer_list<const char*> allowed) {
      for (const auto& a : active) {
        if (a == k) continue;
        bool ok = false;
        for (const char* x : allowed) ok |= (a == x);
        if (!ok) Unsupported(a, ptr, "next to '" + k + "' is not supported");
      }
    };
    if (s.contains("$ref")) {
      only("$ref", {});
      return Ref(s["$ref"], ptr);
    }
    if (s.contains("allOf")) {
      // A conjunction: merged into one schema where the members constrain different keywords.
      const Json& a = s["allOf"];
      if (!a.is_array() || a.empty()) Unsupported("allOf", ptr, "must be a non-empty array");
      Json merged = s;
      merged.erase("allOf");
      for (size_t i = 0; i < a.size(); ++i) {
        auto m = Merge(merged, a[i]);
        if (!m)
          Unsupported("allOf", ptr, "has members that constrain the same keyword differently");
        merged = std::move(*m);
      }
      return Compile(merged, ptr);
    }
    if (s.contains("anyOf") || s.contains("oneOf")) {
      if (s.contains("anyOf") && s.contains("oneOf")) Unsupported("oneOf", ptr, "next to anyOf");
      const std::string k = s.contains("anyOf") ? "anyOf" : "oneOf";
      Json siblings = s;
      siblings.erase(k);
      bool constrained = false;
      for (auto it = siblings.begin(); it != siblings.end(); ++it)
        constrained |= !IsAnnotation(it.key());
      if (!constrained) return Alternatives(s[k], ptr + "/" + k, k == "oneOf");
      // Siblings hold in every branch: distribute them (exact where they merge).
      if (!s[k].is_array()) Unsupported(k, ptr, "must be an array");
      Json branches = Json::array();
      for (const auto& b : s[k]) {
        auto m = Merge(siblings, b);
        if (!m)
          Unsupported(k, ptr, "with sibling keywords that its branches constrain differently");
        branches.push_back(std::move(*m));
      }
      return Alternatives(branches, ptr + "/" + k, k == "oneOf");
    }
    std::optional<std::set<std::string>> types;
    if (s.contains("type")) {
      types.emplace();
      const Json& t = s["type"];
      if (t.is_string()) {
        types->insert(t.get<std::string>());
      } else if (t.is_array()) {
        for (const auto& x : t) {
          if (!x.is_string()) Unsupported("type", ptr, "must be a string or an array of strings");
          types->insert(x.get<std::string>());
        }
      } else {
        Unsupported("type", ptr, "must be a string or an array of strings");
      }
      for (const auto& x : *types) {
        static const std::set<std::string> kTypes = {"null",   "boolean", "object", "array",
                                                     "number", "integer", "string"};
        if (!kTypes.count(x)) Unsupported("type", ptr, "has unknown type '" + x + "'");
      }
    }
    if (s.contains("const") || s.contains("enum")) {
      std::vector<Json> values;
      if (s.contains("const")) {
        only("const", {"type"});
        values.push_back(s["const"]);
      } else {
        only("enum", {"type"});
        if (!s["enum"].is_array()) Unsupported("enum", ptr, "must be an array");
        for (const auto& v : s["enum"]) values.push_back(v);
      }
      std::vector<Fragment> alts;
      for (const auto& v : values) {
        if (types && !TypeMatches(v, *types)) continue;
        alts.push_back(g_->Value(v));
      }
      if (alts.empty()) Unsatisfiable(ptr, "no const/enum value has an allowed type");
      return nfa_->Alt(alts);
    }
    if (!types) {
      // The types that the present keywords constrain; no keyword at all: any value.
      types.emplace();
      for (const auto& k : active) {
        if (k == "properties" || k == "required" || k == "additionalProperties")
          types->insert("object");
        if (k == "items" || k == "prefixItems" || k == "additionalItems" || k == "minItems" ||
            k == "maxItems") {
          types->insert("array");
        }
        if (k == "pattern" || k == "minLength" || k == "maxLength") types->insert("string");
        if (k == "minimum" || k == "maximum" || k == "exclusiveMinimum" ||
            k == "exclusiveMaximum") {
          types->insert("number");
        }
      }
      if (types->empty()) return g_->AnyValueCall();
    }
    if (types->count("number")) types->erase("integer");
    std::vector<Fragment> alts;
    for (const auto& t : *types) {
      std::optional<Fragment> f;
      if (t == "null") f = nfa_->Literal("null");
      if (t == "boolean") {
        Fragment b[] = {nfa_->Literal("true"), nfa_->Literal("false")};
        f = nfa_->Alt(b);
      }
      if (t == "string") f = String(s, ptr);
      if (t == "integer") f = Numeric(s, ptr, true);
      if (t == "number") f = Numeric(s, ptr, false);
      if (t == "object") f = Object(s, ptr);
      if (t == "array") f = Array(s, ptr);
      if (f) alts.push_back(*f);
    }
    if (alts.empty()) Unsatisfiable(ptr, "no type can satisfy the constraints");
    return nfa_->Alt(alts);
  }

  static bool TypeMatches(const Json& v, const std::set<std::string>& types) {
    switch (v.type()) {
      case Json::value_t::null:
        return types.count("null");
      case Json::value_t::boolean:
        return types.count("boolean");
      case Json::value_t::string:
        return types.count("string");
      case Json::value_t::array:
        return types.count("array");
      case Json::value_t::object:
        return types.count("object");
      case Json::value_t::number_integer:
      case Json::value_t::number_unsigned:
        return types.count("integer") || types.count("number");
      case Json::value_t::number_float: {
        double d = v.get<double>();
        return types.count("number") || (types.count("integer") && std::floor(d) == d);
      }
      default:
        return false;
    }
  }

  // The schema at a local reference "#/a/b", or nullptr.
  const Json* Resolve(const std::string& r) {
    if (r.empty() || r[0] != '#') return nullptr;
    const Json* cur = &root_;
    std::string p = r.substr(1);
    if (!p.empty() && p[0] != '/') return nullptr;
    size_t i = 0;
    while (i < p.size()) {
      size_t j = p.find('/', i + 1);
      std::string tok = p.substr(i + 1, j == std::string::npos ? std::string::npos : j - i - 1);
      std::string dec;
      for (size_t k = 0; k < tok.size(); ++k) {
        if (tok[k] == '~' && k + 1 < tok.size()) {
          dec += tok[k + 1] == '1' ? '/' : '~';
          ++k;
        } else if (tok[k] == '%' && k + 2 < tok.size() && isxdigit(tok[k + 1]) &&
                   isxdigit(tok[k + 2])) {
          dec += static_cast<char>(std::stoi(tok.substr(k + 1, 2), nullptr, 16));
          k += 2;
        } else {
          dec += tok[k];
        }
      }
      if (cur->is_object() && cur->contains(dec)) {
        cur = &(*cur)[dec];
      } else if (cur->is_array() && !dec.empty() && dec.size() < 9 &&
                 std::all_of(dec.begin(), dec.end(), [](char c) { return isdigit(c); }) &&
                 std::stoul(dec) < cur->size()) {
        cur = &(*cur)[std::stoul(dec)];
      } else {
        return nullptr;
      }
      i = j == std::string::npos ? p.size() : j;
    }
    return cur;
  }

  Fragment Ref(const Json& ref, const std::string& ptr) {
    if (!ref.is_string()) Unsupported("$ref", ptr, "must be a string");
    std::string r = ref.get<std::string>();
    if (r.empty() || r[0] != '#') {
      Unsupported("$ref", ptr, "to '" + r + "' (only local '#...' references)");
    }
    if (std::find(ref_stack_.begin(), ref_stack_.end(), r) != ref_stack_.end()) {
      Unsupported("$ref", ptr, "is recursive ('" + r + "')");
    }
    if (r.size() > 1 && r[1] != '/') Unsupported("$ref", ptr, "to an anchor ('" + r + "')");
    const Json* cur = Resolve(r);
    if (!cur) Unsupported("$ref", ptr, "points to a missing location ('" + r + "')");
    const std::string p = r.substr(1);
    ref_stack_.push_back(r);
    Fragment f = Compile(*cur, p);
    ref_stack_.pop_back();
    return f;
  }

  Fragment Alternatives(const Json& list, const std::string& ptr, bool one_of) {
    if (!list.is_array() || list.empty()) {
      Unsupported(one_of ? "oneOf" : "anyOf", ptr, "must be a non-empty array");
    }
    std::vector<Fragment> alts;
    std::vector<Dfa> dfas;
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string sub = ptr + "/" + std::to_string(i);
      if (list[i].is_boolean() && !list[i].get<bool>()) continue;
      if (one_of) {
        // Branches must not share any output, or a value could match two of them.
        Nfa tmp;
        JsonGrammar tg(&tmp, g_->cfg_);
        SchemaCompiler sc(&tg, &tmp, root_);
        sc.ref_stack_ = ref_stack_;
        sc.depth_ = depth_;
        Fragment f = sc.Compile(list[i], sub);
        dfas.push_back(Determinize(tmp, f, kMaxBranchStates));
        for (size_t j = 0; j + 1 < dfas.size(); ++j) {
          if (!Intersect(dfas[j], dfas.back()).Empty()) {
            Unsupported("oneOf", ptr.substr(0, ptr.rfind('/')),
                        "has branches that can produce the same value");
          }
        }
      }
      alts.push_back(Compile(list[i], sub));
    }
    if (alts.empty()) Unsatisfiable(ptr, "every branch is false");
    return nfa_->Alt(alts);
  }

  // The conjunction of two schemas as one schema, where that is exact: keywords on one side only,
  // equal values, unions of `required`, intersections of `type`/`enum`, the tighter of two bounds,
  // and `properties` merged per key when neither side has additionalProperties. nullopt otherwise.
  std::optional<Json> Merge(const Json& a0, const Json& b0, int depth = 0) {
    if (depth > 16) return std::nullopt;
    auto resolve = [&](const Json& x) -> std::optional<Json> {
      if (x.is_object() && x.size() == 1 && x.contains("$ref") && x["$ref"].is_string()) {
        const std::string r = x["$ref"].get<std::string>();
        if (std::find(ref_stack_.begin(), ref_stack_.end(), r) != ref_stack_.end())
          return std::nullopt;
        const Json* t = Resolve(r);
        if (!t) return std::nullopt;
        return *t;
      }
      return x;
    };
    auto ra = resolve(a0), rb = resolve(b0);
    if (!ra || !rb) return std::nullopt;
    const Json& a = *ra;
    const Json& b = *rb;
    if (a.is_boolean()) return a.get<bool>() ? b : a;
    if (b.is_boolean()) return b.get<bool>() ? a : b;
    if (!a.is_object() || !b.is_object()) return std::nullopt;
    if (a.contains("$ref") || b.contains("$ref")) return std::nullopt;
    static const std::vector<std::set<std::string>> groups = {
        {"properties", "additionalProperties", "patternProperties", "required"},
        {"items", "prefixItems", "additionalItems"}};
    auto has_any = [](const Json& x, const std::set<std::string>& g) {
      for (const auto& k : g) {
        if (x.contains(k)) return true;
      }
      return false;
    };
    if (has_any(a, groups[1]) && has_any(b, groups[1]) &&
        (a.contains("items") != b.contains("items") ||
         a.value("items", Json()) != b.value("items", Json()) || a.contains("prefixItems") ||
         b.contains("prefixItems") || a.contains("additionalItems") ||
         b.contains("additionalItems"))) {
      return std::nullopt;
    }
    if ((a.contains("additionalProperties") &&
         (b.contains("properties") || b.contains("additionalProperties") ||
          b.contains("required"))) ||
        (b.contains("additionalProperties") &&
         (a.contains("properties") || a.contains("required")))) {
      return std::nullopt;
    }
    Json out = a;
    for (auto it = b.begin(); it != b.end(); ++it) {
      const std::string& k = it.key();
      const Json& v = *it;
      if (!out.contains(k)) {
        out[k] = v;
        continue;
      }
      Json& o = out[k];
      if (o == v || IsAnnotation(k)) continue;
      if (k == "required") {
        for (const auto& r : v) {
          if (std::find(o.begin(), o.end(), r) == o.end()) o.push_back(r);
        }
      } else if (k == "type") {
        auto as_set = [](const Json& t) {
          std::set<std::string> r;
          if (t.is_string()) r.insert(t.get<std::string>());
          if (t.is_array()) {
            for (const auto& x : t) r.insert(x.get<std::string>());
          }
          return r;
        };
        std::set<std::string> x = as_set(o), y = as_set(v), both;
        for (const auto& t : x) {
          if (y.count(t) || (t == "number" && y.count("integer")))
            both.insert(t == "number" && y.count("integer") ? "integer" : t);
        }
        for (const auto& t : y) {
          if (t == "number" && x.count("integer")) both.insert("integer");
        }
        if (both.empty()) return std::nullopt;
        o = Json(std::vector<std::string>(both.begin(), both.end()));
      } else if (k == "enum") {
        Json keep = Json::array();
        for (const auto& x : o) {
          if (std::find(v.begin(), v.end(), x) != v.end()) keep.push_back(x);
        }
        o = keep;
      } else if (k == "minimum" || k == "exclusiveMinimum" || k == "minLength" || k == "minItems") {
        if (!o.is_number() || !v.is_number()) return std::nullopt;
        if (v.get<double>() > o.get<double>()) o = v;
      } else if (k == "maximum" || k == "exclusiveMaximum" || k == "maxLength" || k == "maxItems") {
        if (!o.is_number() || !v.is_number()) return std::nullopt;
        if (v.get<double>() < o.get<double>()) o = v;
      } else if (k == "properties" && o.is_object() && v.is_object()) {
        for (auto p = v.begin(); p != v.end(); ++p) {
          if (!o.contains(p.key())) {
            o[p.key()] = *p;
          } else {
            auto m = Merge(o[p.key()], *p, depth + 1);
            if (!m) return std::nullopt;
            o[p.key()] = std::move(*m);
          }
        }
      } else {
        return std::nullopt;
      }
    }
    return out;
  }

  struct Bound {
    double v;
    bool strict;
  };

  // Plain decimal digits of |d|: integer part and fraction digits without trailing zeros.
  static std::pair<int64_t, std::string> Decimal(double d) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.12f", std::fabs(d));
    std::string t = buf;
    size_t dot = t.find('.');
    std::string frac = t.substr(dot + 1);
    while (!frac.empty() && frac.back() == '0') frac.pop_back();
    return {std::stoll(t.substr(0, dot)), frac};
  }

  // Fraction digit strings F (non-empty) with 0.F >= 0.L (or >), and/or 0.F <= 0.H (or <).
  std::optional<Fragment> Fraction(const std::optional<std::pair<std::string, bool>>& at_least,
                                   const std::optional<std::pair<std::string, bool>>& at_most) {
    Nfa tmp;
    auto digits = [&] { return tmp.Star(tmp.Range('0', '9')); };
    Dfa d = Determinize(tmp, tmp.Plus(tmp.Range('0', '9')), kMaxBranchStates);
    if (at_least) {
      const auto& [l, strict] = *at_least;
      std::vector<Fragment> alts;
      for (size_t k = 0; k < l.size(); ++k) {
        if (l[k] == '9') continue;
        Fragment parts[] = {tmp.Literal(l.substr(0, k)), tmp.Range(l[k] + 1, '9'), digits()};
        alts.push_back(tmp.Concat(parts));
      }
      if (strict) {
        Fragment parts[] = {tmp.Literal(l), digits(), tmp.Range('1', '9')};
        alts.push_back(tmp.Concat(parts));
      } else {
        alts.push_back(tmp.Concat(tmp.Literal(l), digits()));
      }
      d = Intersect(d, Determinize(tmp, tmp.Alt(alts), kMaxBranchStates));
    }
    if (at_most) {
      const auto& [h, strict] = *at_most;
      std::vector<Fragment> alts;
      for (size_t k = 0; k < h.size(); ++k) {
        if (h[k] != '0') {
          Fragment parts[] = {tmp.Literal(h.substr(0, k)), tmp.Range('0', h[k] - 1), digits()};
          alts.push_back(tmp.Concat(parts));
        }
      }
      // A prefix of H followed by zeros (H itself only when not strict).
      for (size_t j = 0; j <= h.size(); ++j) {
        if (j == h.size() && strict) break;
        alts.push_back(tmp.Concat(tmp.Literal(h.substr(0, j)), tmp.Star(tmp.Literal("0"))));
      }
      if (alts.empty()) return std::nullopt;
      d = Intersect(d, Determinize(tmp, tmp.Alt(alts), kMaxBranchStates));
    }
    if (d.Empty()) return std::nullopt;
    return EmbedDfa(nfa_, d);
  }

  // "I.F" strings (I canonical non-negative integer) whose value lies within [mlo, mhi].
  std::optional<Fragment> Magnitudes(const std::optional<Bound>& mlo,
                                     const std::optional<Bound>& mhi) {
    if (mlo && mhi && (mlo->v > mhi->v || (mlo->v == mhi->v && (mlo->strict || mhi->strict)))) {
      return std::nullopt;
    }
    std::optional<std::pair<int64_t, std::string>> l, h;
    if (mlo) l = Decimal(mlo->v);
    if (mhi) h = Decimal(mhi->v);
    IntRanges ir(nfa_);
    std::vector<Fragment> alts;
    auto with_fraction = [&](Fragment i, std::optional<Fragment> f) {
      if (!f) return;
      Fragment parts[] = {i, nfa_->Literal("."), *f};
      alts.push_back(nfa_->Concat(parts));
    };
    // Integer parts strictly between the bounds' integer parts: any fraction.
    std::optional<int64_t> a = l ? std::optional<int64_t>(l->first + 1) : std::optional<int64_t>(0);
    std::optional<int64_t> b;
    if (h) b = h->first - 1;
    if (auto i = ir.Range(a, b)) with_fraction(*i, Fraction(std::nullopt, std::nullopt));
    if (l) {
      auto i = ir.Range(l->first, l->first);
      std::optional<std::pair<std::string, bool>> most;
      if (h && h->first == l->first) most = std::make_pair(h->second, mhi->strict);
      if (!h || h->first >= l->first)
        with_fraction(*i, Fraction(std::make_pair(l->second, mlo->strict), most));
    }
    if (h && (!l || h->first != l->first) && (!l || h->first > l->first)) {
      with_fraction(*ir.Range(h->first, h->first),
                    Fraction(std::nullopt, std::make_pair(h->second, mhi->strict)));
    }
    if (alts.empty()) return std::nullopt;
    return nfa_->Alt(alts);
  }

  std::optional<int64_t> IntBound(const Json& s, const std::string& ptr, const char* key,
                                  bool lower) {
    std::optional<int64_t> b;
    auto take = [&](const char* k, bool exclusive) {
      if (!s.contains(k)) return;
      const Json& v = s[k];
      if (!v.is_number())
        Unsupported(k, ptr, "must be a number (draft-04 boolean form unsupported)");
      double d = v.get<double>();
      if (std::fabs(d) > 1e15) Unsupported(k, ptr, "beyond +-1e15 is not supported");
      int64_t x;
      if (lower) {
        x = exclusive ? static_cast<int64_t>(std::floor(d)) + 1
                      : static_cast<int64_t>(std::ceil(d));
        if (!b || x > *b) b = x;
      } else {
        x = exclusive ? static_cast<int64_t>(std::ceil(d)) - 1
                      : static_cast<int64_t>(std::floor(d));
        if (!b || x < *b) b = x;
      }
    };
    take(lower ? "minimum" : "maximum", false);
    take(lower ? "exclusiveMinimum" : "exclusiveMaximum", true);
    (void)key;
    return b;
  }

  std::optional<Fragment> Numeric(const Json& s, const std::string& ptr, bool integer) {
    bool bounded = s.contains("minimum") || s.contains("maximum") ||
                   s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum");
    if (!bounded) return integer ? g_->Integer() : g_->Number();
    std::optional<int64_t> lo = IntBound(s, ptr, "", true), hi = IntBound(s, ptr, "", false);
    IntRanges ir(nfa_);
    std::vector<Fragment> alts;
    if (auto f = ir.Range(lo, hi)) alts.push_back(*f);
    if (!integer) {
      // Decimals "I.F" and "-I.F" (F non-empty digits) inside the bounds, exactly.
      auto bound = [&](const char* inc, const char* exc, bool lower) -> std::optional<Bound> {
        std::optional<Bound> r;
        for (const char* k : {inc, exc}) {
          if (!s.contains(k)) continue;
          double d = s[k].get<double>();
          bool strict = k == exc;
          if (!r ||
              (lower ? (d > r->v || (d == r->v && strict)) : (d < r->v || (d == r->v && strict)))) {
            r = Bound{d, strict};
          }
        }
        return r;
      };
      std::optional<Bound> lo_b = bound("minimum", "exclusiveMinimum", true);
      std::optional<Bound> hi_b = bound("maximum", "exclusiveMaximum", false);
      // Non-negative values: magnitude in [lo, hi] where a negative lo imposes nothing.
      if (!hi_b || hi_b->v >= 0) {
        std::optional<Bound> mlo = (lo_b && lo_b->v >= 0) ? lo_b : std::nullopt;
        if (auto f = Magnitudes(mlo, hi_b)) alts.push_back(*f);
      }
      // Negative values -m: m in [-hi, -lo]; a positive hi imposes nothing (hi == 0 strict: m > 0).
      if (!lo_b || lo_b->v < 0 || (lo_b->v == 0 && !lo_b->strict)) {
        std::optional<Bound> mlo, mhi;
        if (hi_b && hi_b->v <= 0) mlo = Bound{-hi_b->v, hi_b->strict};
        if (lo_b) mhi = Bound{-lo_b->v, lo_b->strict};
        if (auto f = Magnitudes(mlo, mhi)) alts.push_back(nfa_->Concat(nfa_->Literal("-"), *f));
      }
    }
    if (alts.empty()) return std::nullopt;
    return nfa_->Alt(alts);
  }

  std::optional<Fragment> String(const Json& s, const std::string& ptr) {
    int min = 0, max = -1;
    if (s.contains("minLength")) {
      if (!NonNegInt(s["minLength"]))
        Unsupported("minLength", ptr, "must be a non-negative integer");
      min = static_cast<int>(
          std::min<uint64_t>(static_cast<uint64_t>(s["minLength"].get<double>()), 1u << 30));
    }
    if (s.contains("maxLength")) {
      if (!NonNegInt(s["maxLength"]))
        Unsupported("maxLength", ptr, "must be a non-negative integer");
      max = static_cast<int>(
          std::min<uint64_t>(static_cast<uint64_t>(s["maxLength"].get<double>()), 1u << 30));
    }
    if (min > kMaxStringLength) Unsupported("minLength", ptr, "above 1024 is not supported");
    if (max > kMaxStringLength) max = kMaxStringLength;  // shorter strings stay valid
    if (max >= 0 && min > max) return std::nullopt;
    const CharEncoding enc =
        g_->cfg_.syntax == Syntax::kJson ? CharEncoding::kJsonString : CharEncoding::kRaw;
    auto lengths = [&](JsonGrammar* g, Nfa* nfa) {
      std::vector<Fragment> parts;
      for (int i = 0; i < min; ++i) parts.push_back(g->StringChar());
      if (max < 0) {
        parts.push_back(nfa->Star(g->StringChar()));
      } else if (max > min) {
        parts.push_back(nfa->UpTo(max - min, [&] { return g->StringChar(); }));
      }
      return nfa->Concat(parts);
    };
    Fragment content;
    if (!s.contains("pattern")) {
      content = lengths(g_, nfa_);
    } else {
      if (!s["pattern"].is_string()) Unsupported("pattern", ptr, "must be a string");
      const std::string pat = s["pattern"].get<std::string>();
      try {
        if (min == 0 && max < 0) {
          content = CompileRegex(pat, nfa_, enc);
        } else {
          Nfa tmp;
          JsonGrammar tg(&tmp, g_->cfg_);
          Fragment fp = CompileRegex(pat, &tmp, enc);
          Fragment fl = lengths(&tg, &tmp);
          Dfa d = Intersect(Determinize(tmp, fp, kMaxBranchStates),
                            Determinize(tmp, fl, kMaxBranchStates));
          if (d.Empty()) return std::nullopt;
          content = EmbedDfa(nfa_, d);
        }
      } catch (const Error& e) {
        Unsupported("pattern", ptr, std::string("cannot be compiled: ") + e.what());
      }
    }
    Fragment parts[] = {g_->Quote(), content, g_->Quote()};
    return nfa_->Concat(parts);
  }

  std::optional<Fragment> Object(const Json& s, const std::string& ptr) {
    // Pointers into the schema, not copies: copying each level's subtree made compilation
    // quadratic in depth (2.9 s and 1 GiB at 3,000 levels).
    static const Json kEmpty = Json::object(), kTrue = true;
    const Json& props = s.contains("properties") ? s["properties"] : kEmpty;
    if (!props.is_object()) Unsupported("properties", ptr, "must be an object");
    const Json& addl = s.contains("additionalProperties") ? s["additionalProperties"] : kTrue;
    if (!addl.is_boolean() && !addl.is_object())
      Unsupported("additionalProperties", ptr, "must be a schema");
    const bool addl_false = addl.is_boolean() && !addl.get<bool>();
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) Unsupported("required", ptr, "must be an array");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) Unsupported("required", ptr, "must hold strings");
        required.insert(r.get<std::string>());
      }
    }
    struct Member {
      std::string name;
      const Json* schema;
      std::string ptr;
      bool required;
    };
    std::vector<Member> members;
    for (auto it = props.begin(); it != props.end(); ++it) {
      bool req = required.count(it.key()) > 0;
      if (it->is_boolean() && !it->get<bool>()) {
        if (req) Unsatisfiable(ptr, "required property '" + it.key() + "' has schema false");
        continue;
      }
      members.push_back({it.key(), &*it, ptr + "/properties/" + EscapePointer(it.key()), req});
    }
    for (const auto& r : required) {
      if (props.contains(r)) continue;
      if (addl_false) Unsatisfiable(ptr, "required property '" + r + "' is not allowed");
      members.push_back({r, &addl, ptr + "/additionalProperties", true});
    }
    if (g_->cfg_.syntax == Syntax::kGemma) {
      std::sort(members.begin(), members.end(),
                [](const Member& a, const Member& b) { return a.name < b.name; });
    }
    if (members.empty() && !props.empty() && addl_false) {
      return nfa_->Concat(g_->Open('{'), g_->Close('}'));
    }
    if (props.empty() && required.empty() && !addl_false) {
      // A map: any keys, values under additionalProperties.
      auto open = [this](char c) { return g_->Open(c); };
      auto close = [this](char c) { return g_->Close(c); };
      auto sep = [this](char c) { return g_->Sep(c); };
      return List(g_, nfa_, open, close, sep, '{', '}', 0, -1, 0, [&](int) {
        Fragment parts[] = {g_->AnyKey(), g_->Sep(':'),
                            Compile(addl, ptr + "/additionalProperties")};
        return nfa_->Concat(parts);
      });
    }
    // Declared members in order; optional ones may be skipped.
    Fragment op = g_->Open('{');
    std::optional<uint32_t> e = op.end, f;
    for (const auto& m : members) {
      uint32_t p = nfa_->AddState();
      if (e) nfa_->AddEpsilon(*e, p);
      if (f) {
        Fragment sp = g_->Sep(',');
        nfa_->AddEpsilon(*f, sp.start);
        nfa_->AddEpsilon(sp.end, p);
      }
      Fragment parts[] = {g_->Key(m.name), g_->Sep(':'), Compile(*m.schema, m.ptr)};
      Fragment kv = nfa_->Concat(parts);
      nfa_->AddEpsilon(p, kv.start);
      std::optional<uint32_t> nf;
      if (m.required) {
        nf = kv.end;
        e.reset();
      } else {
        nf = nfa_->AddState();
        nfa_->AddEpsilon(kv.end, *nf);
        if (f) nfa_->AddEpsilon(*f, *nf);
      }
      f = nf;
    }
    Fragment cl = g_->Close('}');
    if (e) nfa_->AddEpsilon(*e, cl.start);
    if (f) nfa_->AddEpsilon(*f, cl.start);
    return Fragment{op.start, cl.end};
  }

  std::optional<Fragment> Array(const Json& s, const std::string& ptr) {
    std::vector<const Json*> prefix;
    std::string prefix_ptr;
    static const Json kTrue = true;
    const Json* rest_p = &kTrue;
    std::string rest_ptr = ptr + "/items";
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) Unsupported("prefixItems", ptr, "must be an array");
      for (const auto& x : s["prefixItems"]) prefix.push_back(&x);
      prefix_ptr = ptr + "/prefixItems/";
      if (s.contains("items")) rest_p = &s["items"];
      if (s.contains("additionalItems")) Unsupported("additionalItems", ptr, "next to prefixItems");
    } else if (s.contains("items") && s["items"].is_array()) {
      for (const auto& x : s["items"]) prefix.push_back(&x);
      prefix_ptr = ptr + "/items/";
      if (s.contains("additionalItems")) rest_p = &s["additionalItems"];
      rest_ptr = ptr + "/additionalItems";
    } else if (s.contains("items")) {
      rest_p = &s["items"];
    }
    const Json& rest = *rest_p;
    if (!rest.is_boolean() && !rest.is_object()) Unsupported("items", ptr, "must be a schema");
    int min = 0, max = -1;
    if (s.contains("minItems")) {
      if (!NonNegInt(s["minItems"])) Unsupported("minItems", ptr, "must be a non-negative integer");
      min = static_cast<int>(
          std::min<uint64_t>(static_cast<uint64_t>(s["minItems"].get<double>()), 1u << 20));
    }
    if (s.contains("maxItems")) {
      if (!NonNegInt(s["maxItems"])) Unsupported("maxItems", ptr, "must be a non-negative integer");
      max = static_cast<int>(
          std::min<uint64_t>(static_cast<uint64_t>(s["maxItems"].get<double>()), 1u << 20));
    }
    const int k = static_cast<int>(prefix.size());
    if (rest.is_boolean() && !rest.get<bool>()) max = max < 0 ? k : std::min(max, k);
    for (int i = 0; i < k; ++i) {
      if (prefix[i]->is_boolean() && !prefix[i]->get<bool>()) {
        max = max < 0 ? i : std::min(max, i);
        break;
      }
    }
    if (max >= 0 && min > max) return std::nullopt;
    const int copies = max >= 0 ? max : std::max(min, k) + 1;
    if (copies > kMaxListCopies) {
      Unsupported(max >= 0 ? "maxItems" : "minItems", ptr, "above 256 items is not supported");
    }
    auto open = [this](char c) { return g_->Open(c); };
    auto close = [this](char c) { return g_->Close(c); };
    auto sep = [this](char c) { return g_->Sep(c); };
    return List(g_, nfa_, open, close, sep, '[', ']', min, max, k, [&](int i) {
      if (i < k) return Compile(*prefix[i], prefix_ptr + std::to_string(i));
      return Compile(rest, rest_ptr);
    });
  }

  JsonGrammar* g_;
  Nfa* nfa_;
  const Json& root_;
  std::vector<std::string> ref_stack_;
  int depth_ = 0;  // Compile calls in progress
};

Fragment JsonGrammar::Schema(const Json& schema, const Json& root) {
  SchemaCompiler c(this, nfa_, root);
  return c.Compile(schema, "");
}

}  // namespace gemma::constrain
