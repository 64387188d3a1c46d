#include "constrain/program.h"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>

#include "gemma/error.h"

namespace gemma::constrain {
namespace {
struct SigHash {
  size_t operator()(const std::vector<uint32_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (uint32_t x : v) h = (h ^ x) * 1099511628211ull;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};
}  // namespace

Program Program::Build(const Nfa& nfa, std::span<const Fragment> rules, int max_frames,
                       size_t max_states) {
  int nc = 0;
  auto cls = ComputeClasses(nfa, &nc);
  std::vector<Dfa> dfas;
  size_t total = 0;
  for (size_t r = 0; r < rules.size(); ++r) {
    dfas.push_back(Determinize(nfa, rules[r], cls, nc, max_states));
    if (dfas.back().Empty()) {
      throw Error(ErrorCode::kConstraint,
                  r == 0 ? "the constraint admits no output" : "a nested rule admits no output");
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
    if (p.call_rule_[st] != 0)
      throw Error(ErrorCode::kInternal, "a nested rule starts with a call");
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
      p.next_[static_cast<size_t>(s) * p.num_classes_ + remap[c]] =
          table[static_cast<size_t>(s) * nc + c];
    }
  }
  for (int sym = 0; sym < kNumSymbols; ++sym) p.cls_[sym] = static_cast<uint16_t>(remap[cls[sym]]);
  return p;
}

int Program::TextLoop(uint32_t s, std::array<uint64_t, 2>* ascii) const {
  *ascii = {0, 0};
  int count = 0;
  for (int b = 0; b < 0x80; ++b) {
    if (Next(s, b) == s) {
      (*ascii)[b >> 6] |= uint64_t{1} << (b & 63);
      ++count;
    }
  }
  if (count < 64) return 0;
  // Lead byte ranges and the range of their first continuation byte (RFC 3629).
  struct Lead {
    int lo, hi, n, first_lo, first_hi;
  };
  const Lead leads[] = {{0xC2, 0xDF, 1, 0x80, 0xBF}, {0xE0, 0xE0, 2, 0xA0, 0xBF},
                        {0xE1, 0xEC, 2, 0x80, 0xBF}, {0xED, 0xED, 2, 0x80, 0x9F},
                        {0xEE, 0xEF, 2, 0x80, 0xBF}, {0xF0, 0xF0, 3, 0x90, 0xBF},
                        {0xF1, 0xF3, 3, 0x80, 0xBF}, {0xF4, 0xF4, 3, 0x80, 0x8F}};
  // Continuations: visit one byte per symbol class (transitions depend only on the class).
  auto loops = [&](auto&& self, uint32_t t, int left, int lo, int hi) -> bool {
    if (t == kDead) return false;
    if (left == 0) return t == s;
    std::vector<uint8_t> seen(num_classes_, 0);
    for (int b = lo; b <= hi; ++b) {
      if (seen[cls_[b]]) continue;
      seen[cls_[b]] = 1;
      if (!self(self, Next(t, b), left - 1, 0x80, 0xBF)) return false;
    }
    return true;
  };
  for (const Lead& l : leads) {
    std::vector<uint8_t> seen(num_classes_, 0);
    for (int b = l.lo; b <= l.hi; ++b) {
      if (seen[cls_[b]]) continue;
      seen[cls_[b]] = 1;
      if (!loops(loops, Next(s, b), l.n, l.first_lo, l.first_hi)) return count >= 90 ? 1 : 0;
    }
  }
  return 2;
}

std::vector<uint32_t> Program::WalkClasses(int horizon) const {
  const uint32_t n = num_states();
  if (has_calls_ || static_cast<size_t>(n) * num_classes_ * horizon > 4000000)
    return {};  // cost cap
  // Byte classes only: special symbols never occur inside tokens.
  std::vector<int> byte_classes;
  {
    std::vector<uint8_t> seen(num_classes_, 0);
    for (int b = 0; b < 256; ++b) {
      if (!seen[cls_[b]]) {
        seen[cls_[b]] = 1;
        byte_classes.push_back(cls_[b]);
      }
    }
  }
  std::vector<uint32_t> block(n, 0), nb(n);
  uint32_t count = 1;
  std::vector<uint32_t> sig(byte_classes.size() + 1);
  for (int round = 0; round < horizon; ++round) {
    std::unordered_map<std::vector<uint32_t>, uint32_t, SigHash> ids;
    ids.reserve(count * 2);
    for (uint32_t s = 0; s < n; ++s) {
      sig[0] = block[s];
      for (size_t k = 0; k < byte_classes.size(); ++k) {
        uint32_t t = next_[static_cast<size_t>(s) * num_classes_ + byte_classes[k]];
        sig[k + 1] = t == kDead ? kDead : block[t];
      }
      nb[s] = ids.emplace(sig, static_cast<uint32_t>(ids.size())).first->second;
    }
    block.swap(nb);
    if (ids.size() == count) break;
    count = static_cast<uint32_t>(ids.size());
  }
  if (count == n) return {};  // nothing shared: per-state caching already covers it
  return block;
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
