// QAT module patterns: the keys of quantization_config.module_quant_configs and the entries of
// modules_to_not_convert. transformers matches them with Python's `re` (integrations/
// gemma_quant.py: one alternation `(?P<g0>p0)|(?P<g1>p1)|...` searched with `re.search`;
// quantizers_utils.should_convert_module: `re.match(key + r"\.")`, `re.match(key)` or
// `name.endswith(key)`). This is a matcher for that syntax whose time is bounded: no
// backtracking (libstdc++'s std::regex took seconds on a fuzzed 100-byte pattern, and a
// config.json is untrusted input). It computes, for each start, the set of positions where a match
// can end (bit sets over the name, lookarounds memoized per position), so the answer is the
// existence answer Python's exhaustive backtracking gives.
//
// The real E2B config needs a negative lookahead (`audio_tower(?!.*lconv1d\.linear_start)`),
// which RE2 and other linear-time engines refuse; that is why this is not RE2.
//
// Supported: literals, `.`, classes (`[...]`, `[^...]`, ranges, `\d\w\s\D\W\S`), groups
// (capturing, `(?:...)`, `(?P<name>...)`, `(?#...)`), alternation, `* + ? {m} {m,} {,n} {m,n}`
// (greedy or lazy: the same for existence), anchors `^ $ \A \Z \b \B`, lookahead `(?=...)`
// `(?!...)`, fixed-width lookbehind `(?<=...)` `(?<!...)`, escapes as Python reads them.
// Refused with Error(kConfig): what Python refuses (bad escapes, "nothing to repeat", "multiple
// repeat", unbalanced parentheses, bad ranges, variable-width lookbehind, repetition counts of
// 2^32 - 1 or more), and what this matcher does not do: backreferences (`\1`, `(?P=name)`),
// conditionals `(?(1)..)`, atomic groups `(?>...)`, possessive quantifiers (`a*+`), inline flags
// (`(?i)`), `\N{...}`, non-ASCII characters in the pattern, patterns over 1,024 bytes or nested
// more than 100 groups deep. Names are matched as bytes (module names are ASCII).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gemma {

class ModulePattern {
 public:
  static constexpr size_t kNoMatch = static_cast<size_t>(-1);
  static constexpr size_t kMaxPatternBytes = 1024;
  static constexpr size_t kMaxNameBytes = 1023;

  // Throws Error(kConfig) naming what is wrong.
  explicit ModulePattern(std::string_view pattern);

  const std::string& pattern() const { return pattern_; }
  // Names of the pattern's (?P<name>...) groups (transformers joins all rules into one regex,
  // where a name defined twice is an error).
  const std::vector<std::string>& group_names() const { return group_names_; }

  // Python's re.search(pattern, name): the start of the leftmost match, or kNoMatch. Only starts
  // <= last_start are tried. Throws Error(kConfig) for a name over kMaxNameBytes or when the
  // matching work exceeds its bound (a pathological pattern; far beyond any real one).
  size_t Search(std::string_view name, size_t last_start = kNoMatch) const;
  // Python's re.match(pattern, name) is not None: a match starting at 0.
  bool MatchesAtStart(std::string_view name) const;

  enum class Kind : uint8_t { kEmpty, kSet, kConcat, kAlt, kRepeat, kLook, kAssert };
  struct Node {
    Kind kind = Kind::kEmpty;
    bool negate = false;      // kLook: (?! or (?<!
    bool behind = false;      // kLook: lookbehind
    uint8_t assert_kind = 0;  // kAssert
    uint32_t min = 0, max = 0;
    int width = 0;            // kLook behind: the fixed width
    uint64_t set[4] = {0, 0, 0, 0};  // kSet: bytes
    std::vector<int> kids;
  };

 private:
  friend class ModulePatternParser;
  friend class ModulePatternEval;
  std::string pattern_;
  std::vector<Node> nodes_;
  std::vector<std::string> group_names_;
  int root_ = -1;
  uint64_t first_[4] = {0, 0, 0, 0};  // bytes a match can start with, when !any_first_
  bool any_first_ = true;             // a match may be empty or start with an assertion
};

}  // namespace gemma
