// Regular expressions: an RE2-compatible subset, always full-match, compiled to byte automata.
//
// Supported: literals (UTF-8), `.` (any code point but \n), classes `[a-z]`, `[^...]` with ranges
// and escapes, `\d \w \s \D \W \S`, escapes `\n \r \t \f \v \0 \ooo (octal, as RE2) \xHH \x{H..}
// \uHHHH` and escaped punctuation, alternation `|`, groups `(...)`, `(?:...)`, `(?P<name>...)`,
// `(?<name>...)`, repetition `* + ? {n} {n,} {n,m}` (lazy `?` suffixes accepted; they do not change
// the language), and `^` / `$` as the first / last character (no-ops: matching is always anchored
// at both ends). Counted repetition is limited to 1000 (as in RE2). Rejected with
// Error(kConstraint): lookaround `(?=` `(?!` `(?<=` `(?<!`, backreferences `\1`
// `\k<..>`, word boundaries `\b \B`, other anchors, inline flags `(?i)`, and malformed patterns;
// the message names the construct and its byte offset.
#pragma once

#include <string_view>

#include "constrain/automaton.h"

namespace gemma::constrain {

enum class CharEncoding {
  kRaw,         // characters as plain UTF-8
  kJsonString,  // inside a JSON string literal: `"`, `\` and controls as their JSON escapes
};

// Adds the language of `pattern` to `nfa` and returns its fragment.
Fragment CompileRegex(std::string_view pattern, Nfa* nfa,
                      CharEncoding encoding = CharEncoding::kRaw);

// Convenience: a minimized DFA for the pattern.
Dfa RegexToDfa(std::string_view pattern, size_t max_states = 200000);

}  // namespace gemma::constrain
