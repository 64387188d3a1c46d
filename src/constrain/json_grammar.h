// JSON grammars as NFA fragments: generic values (a pushdown rule, bounded by depth), and the JSON
// Schema subset compiled to fragments, in two syntaxes: standard JSON and Gemma 4's tool-call
// argument syntax (bare keys, strings between <|"|> tokens, no escapes, no whitespace).
//
// JSON Schema subset (anything else is rejected at compile time with the keyword and JSON pointer):
//   boolean schemas; type (string or array); const; enum; anyOf; oneOf (branches must be provably
//   disjoint: their serializations may not intersect); allOf, and anyOf/oneOf next to other
//   keywords, where the schemas merge exactly (keywords on one side only, equal values, unions of
//   required, intersections of type/enum, the tighter bound, properties merged per key without
//   additionalProperties); properties, required, additionalProperties (false, true or a schema);
//   items (schema), prefixItems / array-form items with additionalItems, minItems, maxItems;
//   string pattern (RE2-style syntax of regex.h, treated as anchored), minLength, maxLength;
//   integer and number minimum, maximum, exclusiveMinimum, exclusiveMaximum (numeric form, |x| <=
//   1e15); $ref to any local JSON pointer ("#", "#/$defs/..", "#/definitions/..") as long as
//   references are not recursive. Annotations are ignored: title, description, default, examples,
//   example, $comment, $schema, $id (root only), deprecated, readOnly, writeOnly, discriminator,
//   contentMediaType, contentEncoding, uniqueItems: false.
// Generation choices (sound, not complete): declared properties in schema order (JSON) or sorted
// order (Gemma), no undeclared keys when `properties` is given; integers of at most 18 digits,
// number exponents of at most 2 digits, no exponent under bounds; strings under `pattern` use
// canonical escapes; maxLength above 1024 generates at most 1024 characters.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "constrain/automaton.h"
#include "constrain/constraint.h"

namespace gemma::constrain {

enum class Syntax { kJson, kGemma };

struct JsonGrammarConfig {
  Syntax syntax = Syntax::kJson;
  Whitespace whitespace = Whitespace::kNone;
  int quote_symbol = -1;  // kGemma: symbol of <|"|>
  int any_rule = 1;       // rule number of the generic value rule
  // Generic values expanded inline this many container levels before becoming calls; raised when
  // a schema alternative competes with a generic value on the same character (anyOf [{..}, {}]).
  int inline_levels = 0;
};

class JsonGrammar {
 public:
  JsonGrammar(Nfa* nfa, JsonGrammarConfig config);

  // Generic values. Nested containers are calls of the rule config.any_rule, whose body is
  // AnyValueBody(Root::kContainer); scalars stay inline, so the depth bound (the pushdown stack
  // limit) never leaves a dead end: at the limit only scalars and empty containers remain.
  enum class Root { kAny, kObject, kContainer };
  Fragment AnyValueBody(Root root);
  // A generic value nested here: a scalar or a call of the container rule; sets used_any().
  Fragment AnyValueCall();
  Fragment Scalar();
  bool used_any() const { return used_any_; }

  // Compiles `schema` (resolving $ref against `root`). Throws on unsupported constructs.
  Fragment Schema(const nlohmann::ordered_json& schema, const nlohmann::ordered_json& root);

  Fragment Ws();  // optional whitespace (kAny only)

 private:
  friend class SchemaCompiler;
  Fragment Open(char c);
  Fragment Close(char c);
  Fragment Sep(char c);
  Fragment Quote();
  Fragment StringChar();
  Fragment AnyString();
  Fragment Number();
  Fragment Integer();
  Fragment Key(const std::string& name);
  Fragment AnyKey();
  Fragment Value(const nlohmann::ordered_json& v);
  Fragment StringBytes(const std::string& s);

  Nfa* nfa_;
  JsonGrammarConfig cfg_;
  bool used_any_ = false;
  int inline_left_ = 0;
};

}  // namespace gemma::constrain
