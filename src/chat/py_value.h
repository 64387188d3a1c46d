// Python/Jinja value semantics that the Gemma 4 chat template relies on.
//
// The template is rendered by transformers with Jinja2, on values produced by json.loads. To
// produce the same bytes natively we need Python's view of those values: truthiness, str(), float
// repr, str.strip(), Jinja's case-insensitive dictsort, iteration and subscripting with Undefined.
// A null `const Json*` stands for Jinja's Undefined (a missing key).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gemma::chat {

// Insertion-ordered, like a Python dict: ties in dictsort keep the input order.
using Json = nlohmann::ordered_json;

// Python bool(value); Undefined (nullptr) is false.
bool PyTruthy(const Json* value);
inline bool PyTruthy(const Json& value) { return PyTruthy(&value); }

// Python str(value) as Jinja's `{{ value }}` prints it: None -> "None", True -> "True", 1.0 ->
// "1.0", lists/dicts as their repr. Undefined prints as "".
std::string PyStr(const Json* value);
inline std::string PyStr(const Json& value) { return PyStr(&value); }

// Python repr() of a float (shortest round-trip digits, exponent outside [1e-4, 1e16)).
std::string PyFloatRepr(double value);

// Python str.strip() with no arguments (Unicode whitespace), i.e. Jinja's `| trim`.
std::string PyStrip(std::string_view text);

// Python str.upper()/str.lower() (Jinja's `| upper`, dictsort's case folding) for Basic Latin,
// Latin-1, Latin Extended-A, Greek and Cyrillic ("ß" upper-cases to "SS"); other scripts unchanged.
std::string PyUpper(std::string_view text);
std::string PyLower(std::string_view text);

// Jinja `dictsort` (case-insensitive, by key, stable). `object` must be an object.
std::vector<std::pair<std::string, const Json*>> DictSort(const Json& object);

// Jinja `for x in value`: list items, object keys, string code points; Undefined iterates as empty.
// Anything else (None, numbers, booleans) is not iterable: throws gemma::Error(kTemplate) naming
// `where`.
std::vector<Json> PyIterate(const Json* value, std::string_view where);

// Jinja `value[key]` for a string key: the member of an object, otherwise Undefined (nullptr).
const Json* GetItem(const Json* value, std::string_view key);

// Python `a == b` for JSON values (None == None; 1 == 1.0; True == 1). Undefined equals nothing but
// another Undefined... which the template never compares; dict.get() gives None for missing keys.
bool PyEquals(const Json* a, const Json* b);

// Jinja's `is mapping`, `is string`, `is sequence` tests. Strings and mappings are sequences too.
inline bool IsMapping(const Json* v) { return v != nullptr && v->is_object(); }
inline bool IsString(const Json* v) { return v != nullptr && v->is_string(); }
inline bool IsSequence(const Json* v) {
  return v == nullptr || v->is_array() || v->is_object() || v->is_string();
}

// A short description of a value's JSON type for error messages ("number", "object", ...).
std::string TypeName(const Json* value);

}  // namespace gemma::chat
