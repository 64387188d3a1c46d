// JSON Schema compilation: the keywords, $ref resolution and the combinators (anyOf, oneOf, allOf
// merged exactly). Each type's constraints: json_schema_types.cc.
#include "constrain/json_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "constrain/automaton.h"
#include "gemma/error.h"

namespace gemma::constrain {

[[noreturn]] void Unsupported(const std::string& keyword, const std::string& ptr,
                              const std::string& why) {
  throw Error(ErrorCode::kUnsupported, "JSON Schema keyword '" + keyword + "' at '" +
                                           (ptr.empty() ? "#" : "#" + ptr) + "' " + why);
}

[[noreturn]] void Unsatisfiable(const std::string& ptr, const std::string& why) {
  throw Error(ErrorCode::kConstraint,
              "JSON Schema at '" + (ptr.empty() ? "#" : "#" + ptr) + "' admits no value: " + why);
}

namespace {

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

}  // namespace

Fragment SchemaCompiler::Compile(const Json& s, const std::string& ptr) {
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

Fragment SchemaCompiler::CompileAt(const Json& s, const std::string& ptr) {
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
      if (!m) Unsupported("allOf", ptr, "has members that constrain the same keyword differently");
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
      if (!m) Unsupported(k, ptr, "with sibling keywords that its branches constrain differently");
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
      if (k == "minimum" || k == "maximum" || k == "exclusiveMinimum" || k == "exclusiveMaximum") {
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

bool SchemaCompiler::TypeMatches(const Json& v, const std::set<std::string>& types) {
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
const Json* SchemaCompiler::Resolve(const std::string& r) {
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

Fragment SchemaCompiler::Ref(const Json& ref, const std::string& ptr) {
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

Fragment SchemaCompiler::Alternatives(const Json& list, const std::string& ptr, bool one_of) {
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
std::optional<Json> SchemaCompiler::Merge(const Json& a0, const Json& b0, int depth) {
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

Fragment JsonGrammar::Schema(const Json& schema, const Json& root) {
  SchemaCompiler c(this, nfa_, root);
  return c.Compile(schema, "");
}

}  // namespace gemma::constrain
