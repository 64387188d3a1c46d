// Finite automata over an extended byte alphabet: Thompson NFA fragments, subset construction,
// trimming, minimization and products. Every constraint (regex, JSON, schema, tool calls) is built
// as NFA fragments and compiled to deterministic tables here.
//
// Alphabet ("symbols"): 0..255 are bytes; kSpecialBase + k is the k-th special token of a grammar
// (a single token id such as <|"|>, never its text); kCallBase + r means "a complete value of rule
// r" and becomes a push of the pushdown runtime (see program.h).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

namespace gemma::constrain {

inline constexpr int kSpecialBase = 256;
inline constexpr int kMaxSpecials = 8;
inline constexpr int kCallBase = kSpecialBase + kMaxSpecials;
inline constexpr int kMaxRules = 4;
inline constexpr int kNumSymbols = kCallBase + kMaxRules;

// A piece of an NFA with one entry and one exit state (Thompson construction). Each fragment may be
// wired into the automaton exactly once; build a fresh one for every repetition.
struct Fragment {
  uint32_t start = 0;
  uint32_t end = 0;
};

class Nfa {
 public:
  struct Edge {
    uint16_t lo, hi;  // inclusive symbol range
    uint32_t to;
  };

  uint32_t AddState();
  void AddEdge(uint32_t from, int lo, int hi, uint32_t to);
  void AddEpsilon(uint32_t from, uint32_t to);

  Fragment Empty();  // the empty string
  Fragment Range(int lo, int hi);
  Fragment Symbol(int s) { return Range(s, s); }
  Fragment Literal(std::string_view bytes);
  Fragment Concat(Fragment a, Fragment b);
  Fragment Concat(std::span<const Fragment> parts);
  Fragment Alt(std::span<const Fragment> alts);  // alts must be non-empty
  Fragment Star(Fragment f);
  Fragment Plus(Fragment f);
  Fragment Optional(Fragment f);
  // Zero to n copies of make(): every junction has one epsilon edge to the exit, so closures stay
  // O(1) and subset construction stays linear in n (nested optionals would make it quadratic).
  Fragment UpTo(int n, const std::function<Fragment()>& make);
  // All UTF-8 encodings of code points in [lo, hi] (surrogates excluded).
  Fragment CodePoints(uint32_t lo, uint32_t hi);
  Fragment CodePointSet(std::span<const std::pair<uint32_t, uint32_t>> ranges);

  size_t size() const { return edges_.size(); }
  const std::vector<Edge>& edges(uint32_t s) const { return edges_[s]; }
  const std::vector<uint32_t>& eps(uint32_t s) const { return eps_[s]; }

 private:
  void AddUtf8(uint32_t lo, uint32_t hi, uint32_t from, uint32_t to);
  std::vector<std::vector<Edge>> edges_;
  std::vector<std::vector<uint32_t>> eps_;
};

// Deterministic automaton with symbol classes. State 0 is the start; kDead means no transition.
// Every state can reach an accepting state (the automaton is trimmed).
struct Dfa {
  static constexpr uint32_t kDead = 0xffffffffu;
  int num_classes = 0;
  std::array<uint16_t, kNumSymbols> cls{};  // symbol -> class
  std::vector<uint32_t> next;               // state * num_classes + class
  std::vector<uint8_t> accept;

  uint32_t size() const { return static_cast<uint32_t>(accept.size()); }
  uint32_t Step(uint32_t s, int symbol) const { return next[s * num_classes + cls[symbol]]; }
  bool Empty() const { return accept.empty(); }
  bool Matches(std::string_view bytes) const;
};

// Symbol classes that every edge of `nfa` respects (shared by all rules built from one NFA).
std::array<uint16_t, kNumSymbols> ComputeClasses(const Nfa& nfa, int* num_classes);

// Subset construction from fragment f (accepting = f.end), then trim and minimize.
// Throws Error(kConstraint) past max_states.
Dfa Determinize(const Nfa& nfa, Fragment f, const std::array<uint16_t, kNumSymbols>& cls,
                int num_classes, size_t max_states);
Dfa Determinize(const Nfa& nfa, Fragment f, size_t max_states);
// Removes states that cannot reach acceptance or are unreachable; state 0 stays the start.
// Returns an empty Dfa when the language is empty.
Dfa Trim(const Dfa& dfa);
Dfa Minimize(const Dfa& dfa);
// Language intersection (both must use the same class map, e.g. from one Nfa).
Dfa Intersect(const Dfa& a, const Dfa& b);
// Copies a DFA into `nfa` as a fragment.
Fragment EmbedDfa(Nfa* nfa, const Dfa& dfa);

}  // namespace gemma::constrain
