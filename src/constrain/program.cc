#include "constrain/program.h"

#include <algorithm>
#include <map>
#include <string>

#include "gemma/error.h"

namespace gemma::constrain {

Program Program::Build(const Nfa& nfa, std::span<const Fragment> rules, int max_frames,
                       size_t max_states) {
  int nc = 0;
  auto cls = ComputeClasses(nfa, &nc);
  std::vector<Dfa> dfas;
  size_t total = 0;
  for (size_t r = 0; r < rules.size(); ++r) {
    dfas.push_back(Determinize(nfa, rules[r], cls, nc, max_states));
    if (dfas.back().Empty()) {
      throw Error(ErrorCode::kConstraint, r == 0 ? "the constraint admits no output"
                                                 : "a nested rule admits no output");
    }
    total += dfas.back().size();
    if (total > max_states) throw Error(ErrorCode::kConstraint, "automaton too large");
  }
  Program p;
  p.max_frames_ = max_frames;
  std::vector<uint32_t> offset;
  for (const auto& d : dfas) {
    offset.push_back(static_cast<uint32_t>(p.accept_.size()));
    p.accept_.insert(p.accept_.end(), d.accept.begin(), d.accept.end());
  }
  const uint32_t n = static_cast<uint32_t>(p.accept_.size());
  p.call_rule_.assign(n, 0);
  p.call_ret_.assign(n, kDead);
  std::vector<uint32_t> table(static_cast<size_t>(n) * nc, kDead);
  for (size_t r = 0; r < dfas.size(); ++r) {
    const Dfa& d = dfas[r];
    p.rule_start_.push_back(offset[r]);
    for (uint32_t s = 0; s < d.size(); ++s) {
      const uint32_t g = offset[r] + s;
      for (int c = 0; c < nc; ++c) {
        uint32_t t = d.next[s * nc + c];
        table[static_cast<size_t>(g) * nc + c] = t == kDead ? kDead : offset[r] + t;
      }
      for (int callee = 1; callee < kMaxRules; ++callee) {
        int c = cls[kCallBase + callee];
        uint32_t t = d.next[s * nc + c];
        if (t == kDead) continue;
        if (callee >= static_cast<int>(rules.size())) {
          throw Error(ErrorCode::kInternal, "call of an undefined rule");
        }
        if (p.call_rule_[g] != 0) {
          throw Error(ErrorCode::kUnsupported, "two different nested value rules at one position");
        }
        p.call_rule_[g] = static_cast<int8_t>(callee);
        p.call_ret_[g] = offset[r] + t;
        p.has_calls_ = true;
      }
    }
  }
  // Call symbols never reach the table at run time.
  for (int callee = 0; callee < kMaxRules; ++callee) {
    int c = cls[kCallBase + callee];
    bool only_calls = true;
    for (int sym = 0; sym < kCallBase; ++sym) only_calls &= cls[sym] != c;
    if (only_calls) {
      for (uint32_t s = 0; s < n; ++s) table[static_cast<size_t>(s) * nc + c] = kDead;
    }
  }
  // FIRST sets of callable rules, and the determinism check.
  p.first_.assign(rules.size(), {});
  for (size_t r = 1; r < rules.size(); ++r) {
    uint32_t st = p.rule_start_[r];
    if (p.accept_[st]) throw Error(ErrorCode::kInternal, "a nested rule accepts the empty string");
    if (p.call_rule_[st] != 0) throw Error(ErrorCode::kInternal, "a nested rule starts with a call");
    for (int sym = 0; sym < kCallBase; ++sym) {
      p.first_[r][sym] = table[static_cast<size_t>(st) * nc + cls[sym]] != kDead;
    }
  }
  for (uint32_t s = 0; s < n; ++s) {
    int r = p.call_rule_[s];
    if (r == 0) continue;
    for (int sym = 0; sym < kCallBase; ++sym) {
      if (p.first_[r][sym] && table[static_cast<size_t>(s) * nc + cls[sym]] != kDead) {
        throw Error(ErrorCode::kUnsupported,
                    "ambiguous grammar: an unconstrained JSON value competes with another "
                    "alternative starting with the same character (e.g. anyOf with {} or true)");
      }
    }
  }
  // Merge symbol classes whose columns are identical.
  std::map<std::vector<uint32_t>, int> cols;
  std::vector<int> remap(nc);
  for (int c = 0; c < nc; ++c) {
    std::vector<uint32_t> col(n);
    for (uint32_t s = 0; s < n; ++s) col[s] = table[static_cast<size_t>(s) * nc + c];
    auto it = cols.emplace(std::move(col), static_cast<int>(cols.size())).first;
    remap[c] = it->second;
  }
  p.num_classes_ = static_cast<int>(cols.size());
  p.next_.assign(static_cast<size_t>(n) * p.num_classes_, kDead);
  for (uint32_t s = 0; s < n; ++s) {
    for (int c = 0; c < nc; ++c) {
      p.next_[static_cast<size_t>(s) * p.num_classes_ + remap[c]] = table[static_cast<size_t>(s) * nc + c];
    }
  }
  for (int sym = 0; sym < kNumSymbols; ++sym) p.cls_[sym] = static_cast<uint16_t>(remap[cls[sym]]);
  return p;
}

std::vector<uint32_t> Program::Distances() const {
  const uint32_t n = num_states();
  std::vector<uint32_t> d(n, kDead);
  for (uint32_t s = 0; s < n; ++s) {
    if (accept_[s]) d[s] = 0;
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t s = 0; s < n; ++s) {
      uint64_t best = d[s];
      for (int c = 0; c < num_classes_; ++c) {
        uint32_t t = next_[static_cast<size_t>(s) * num_classes_ + c];
        if (t != kDead && d[t] != kDead) best = std::min<uint64_t>(best, uint64_t{d[t]} + 1);
      }
      int r = call_rule_[s];
      if (r > 0 && d[rule_start_[r]] != kDead && d[call_ret_[s]] != kDead) {
        best = std::min<uint64_t>(best, uint64_t{d[rule_start_[r]]} + d[call_ret_[s]]);
      }
      if (best < d[s]) {
        d[s] = static_cast<uint32_t>(best);
        changed = true;
      }
    }
  }
  return d;
}

size_t Program::MemoryBytes() const {
  return sizeof(*this) + next_.capacity() * 4 + accept_.capacity() + call_rule_.capacity() +
         call_ret_.capacity() * 4 + rule_start_.capacity() * 4 + first_.capacity() * kCallBase;
}

}  // namespace gemma::constrain
