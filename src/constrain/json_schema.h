// Internal to the constrain room (not installed): the JSON Schema compiler behind
// JsonGrammar::Schema. json_schema.cc compiles keywords, $ref and the combinators (anyOf, oneOf,
// allOf); json_schema_types.cc compiles each type's constraints (strings, numbers, objects,
// arrays). The supported subset and the generation choices: json_grammar.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "constrain/automaton.h"
#include "constrain/json_grammar.h"

namespace gemma::constrain {

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
                              const std::string& why = "is not supported");
[[noreturn]] void Unsatisfiable(const std::string& ptr, const std::string& why);

// open item (sep item)* close with the item count in [min, max] (max < 0: unbounded). make(i)
// builds the item at position i; positions >= loop_from (when unbounded) share one looping
// fragment.
Fragment List(JsonGrammar* g, Nfa* nfa, const std::function<Fragment(char)>& open,
              const std::function<Fragment(char)>& close, const std::function<Fragment(char)>& sep,
              char o, char c, int min, int max, int loop_from,
              const std::function<Fragment(int)>& make);

class SchemaCompiler {
 public:
  SchemaCompiler(JsonGrammar* g, Nfa* nfa, const Json& root) : g_(g), nfa_(nfa), root_(root) {}

  Fragment Compile(const Json& s, const std::string& ptr);

 private:
  // json_schema.cc: keywords, references, combinators.
  Fragment CompileAt(const Json& s, const std::string& ptr);
  static bool TypeMatches(const Json& v, const std::set<std::string>& types);
  const Json* Resolve(const std::string& r);
  Fragment Ref(const Json& ref, const std::string& ptr);
  Fragment Alternatives(const Json& list, const std::string& ptr, bool one_of);
  std::optional<Json> Merge(const Json& a0, const Json& b0, int depth = 0);

  // json_schema_types.cc: each type's constraints.
  struct Bound {
    double v;
    bool strict;
  };
  static std::pair<int64_t, std::string> Decimal(double d);
  std::optional<Fragment> Fraction(const std::optional<std::pair<std::string, bool>>& at_least,
                                   const std::optional<std::pair<std::string, bool>>& at_most);
  std::optional<Fragment> Magnitudes(const std::optional<Bound>& mlo,
                                     const std::optional<Bound>& mhi);
  std::optional<int64_t> IntBound(const Json& s, const std::string& ptr, const char* key,
                                  bool lower);
  std::optional<Fragment> Numeric(const Json& s, const std::string& ptr, bool integer);
  std::optional<Fragment> String(const Json& s, const std::string& ptr);
  std::optional<Fragment> Object(const Json& s, const std::string& ptr);
  std::optional<Fragment> Array(const Json& s, const std::string& ptr);

  JsonGrammar* g_;
  Nfa* nfa_;
  const Json& root_;
  std::vector<std::string> ref_stack_;
  int depth_ = 0;  // Compile calls in progress
};

}  // namespace gemma::constrain
