// A deterministic pushdown automaton over bytes and special-token symbols: the rules (rule 0 is the
// main one) are minimized DFAs in one global table; a state may "call" a rule (push its return
// state) when the next symbol can start that rule, and an accepting state of a called rule returns
// (pops) when the next symbol has no transition. Priority: transition, then call, then return. The
// builder rejects grammars where a call competes with a transition on the same symbol.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "constrain/automaton.h"

namespace gemma::constrain {

class Program {
 public:
  static constexpr uint32_t kDead = Dfa::kDead;

  // rules[0] is the main rule; rules[r] for r >= 1 are reachable through kCallBase + r symbols.
  // max_frames bounds the pushdown stack.
  static Program Build(const Nfa& nfa, std::span<const Fragment> rules, int max_frames,
                       size_t max_states);

  uint32_t start() const { return rule_start_[0]; }
  uint32_t num_states() const { return static_cast<uint32_t>(accept_.size()); }
  bool has_calls() const { return has_calls_; }
  bool accepting(uint32_t s) const { return accept_[s]; }
  int max_frames() const { return max_frames_; }
  size_t MemoryBytes() const;

  uint32_t Next(uint32_t s, int symbol) const { return next_[s * num_classes_ + cls_[symbol]]; }

  // One symbol on (top, stack). Stack: push(ret), pop() -> ret, size(). Returns false (state
  // unspecified) when the symbol is illegal.
  template <class Stack>
  bool Step(uint32_t* top, Stack& stack, int symbol) const {
    uint32_t s = *top;
    for (;;) {
      uint32_t t = Next(s, symbol);
      if (t != kDead) {
        *top = t;
        return true;
      }
      int r = call_rule_[s];
      if (r > 0 && first_[r][symbol] && static_cast<int>(stack.size()) < max_frames_) {
        stack.push(call_ret_[s]);
        s = rule_start_[r];
        continue;
      }
      if (accept_[s] && stack.size() > 0) {
        s = stack.pop();
        continue;
      }
      return false;
    }
  }

  // True if the input may end here: the top accepts and every caller's return state accepts.
  template <class Stack>
  bool CanEnd(uint32_t top, Stack stack) const {
    uint32_t s = top;
    for (;;) {
      if (!accept_[s]) return false;
      if (stack.size() == 0) return true;
      s = stack.pop();
    }
  }

  // How s loops over text (*ascii receives the ASCII bytes that lead from s straight back to s):
  // 2 = at least 64 of them and every valid multi-byte UTF-8 character do (string content, free
  // text); 1 = no UTF-8 loop but at least 90 ASCII bytes ([^<]*); 0 = otherwise. Only then is the
  // residual trie of Vocabulary::Text much smaller than the full one.
  int TextLoop(uint32_t s, std::array<uint64_t, 2>* ascii) const;

  // Classes of states that no byte string of length <= horizon can tell apart by liveness: the
  // trie walk of such states is identical. Empty for programs with calls or too many states.
  std::vector<uint32_t> WalkClasses(int horizon) const;

  // Per state: the fewest symbols that finish its rule (a call counts its rule's shortest value).
  // Used to steer generators to completion in tests and benchmarks.
  std::vector<uint32_t> Distances() const;

  // Direct table access for the hot mask loop.
  const uint32_t* next_table() const { return next_.data(); }
  const uint16_t* classes() const { return cls_.data(); }
  int num_classes() const { return num_classes_; }

 private:
  int num_classes_ = 0;
  std::array<uint16_t, kNumSymbols> cls_{};
  std::vector<uint32_t> next_;
  std::vector<uint8_t> accept_;
  std::vector<int8_t> call_rule_;  // 0 = none
  std::vector<uint32_t> call_ret_;
  std::vector<uint32_t> rule_start_;
  std::vector<std::array<uint8_t, kCallBase>> first_;
  int max_frames_ = 0;
  bool has_calls_ = false;
};

}  // namespace gemma::constrain
