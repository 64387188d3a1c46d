#include "constrain/automaton.h"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>

#include "gemma/error.h"

namespace gemma::constrain {
namespace {

struct VecHash {
  size_t operator()(const std::vector<uint32_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (uint32_t x : v) h = (h ^ x) * 1099511628211ull;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

void Closure(const Nfa& nfa, std::vector<uint32_t>* set, std::vector<uint8_t>* mark) {
  std::vector<uint32_t> stack(set->begin(), set->end());
  for (uint32_t s : *set) (*mark)[s] = 1;
  while (!stack.empty()) {
    uint32_t s = stack.back();
    stack.pop_back();
    for (uint32_t t : nfa.eps(s)) {
      if (!(*mark)[t]) {
        (*mark)[t] = 1;
        set->push_back(t);
        stack.push_back(t);
      }
    }
  }
  for (uint32_t s : *set) (*mark)[s] = 0;
  std::sort(set->begin(), set->end());
}

}  // namespace

uint32_t Nfa::AddState() {
  edges_.emplace_back();
  eps_.emplace_back();
  return static_cast<uint32_t>(edges_.size() - 1);
}

void Nfa::AddEdge(uint32_t from, int lo, int hi, uint32_t to) {
  edges_[from].push_back({static_cast<uint16_t>(lo), static_cast<uint16_t>(hi), to});
}

void Nfa::AddEpsilon(uint32_t from, uint32_t to) { eps_[from].push_back(to); }

Fragment Nfa::Empty() {
  uint32_t s = AddState();
  return {s, s};
}

Fragment Nfa::Range(int lo, int hi) {
  uint32_t s = AddState(), e = AddState();
  AddEdge(s, lo, hi, e);
  return {s, e};
}

Fragment Nfa::Literal(std::string_view bytes) {
  uint32_t s = AddState(), cur = s;
  for (unsigned char c : bytes) {
    uint32_t n = AddState();
    AddEdge(cur, c, c, n);
    cur = n;
  }
  return {s, cur};
}

Fragment Nfa::Concat(Fragment a, Fragment b) {
  AddEpsilon(a.end, b.start);
  return {a.start, b.end};
}

Fragment Nfa::Concat(std::span<const Fragment> parts) {
  if (parts.empty()) return Empty();
  Fragment f = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) f = Concat(f, parts[i]);
  return f;
}

Fragment Nfa::Alt(std::span<const Fragment> alts) {
  if (alts.empty()) return {AddState(), AddState()};  // the empty language
  if (alts.size() == 1) return alts[0];
  uint32_t s = AddState(), e = AddState();
  for (const Fragment& f : alts) {
    AddEpsilon(s, f.start);
    AddEpsilon(f.end, e);
  }
  return {s, e};
}

Fragment Nfa::Star(Fragment f) {
  uint32_t s = AddState(), e = AddState();
  AddEpsilon(s, f.start);
  AddEpsilon(s, e);
  AddEpsilon(f.end, f.start);
  AddEpsilon(f.end, e);
  return {s, e};
}

Fragment Nfa::Plus(Fragment f) {
  uint32_t e = AddState();
  AddEpsilon(f.end, f.start);
  AddEpsilon(f.end, e);
  return {f.start, e};
}

Fragment Nfa::UpTo(int n, const std::function<Fragment()>& make) {
  uint32_t start = AddState(), end = AddState(), cur = start;
  AddEpsilon(cur, end);
  for (int i = 0; i < n; ++i) {
    Fragment f = make();
    AddEpsilon(cur, f.start);
    cur = f.end;
    AddEpsilon(cur, end);
  }
  return {start, end};
}

Fragment Nfa::Optional(Fragment f) {
  uint32_t s = AddState(), e = AddState();
  AddEpsilon(s, f.start);
  AddEpsilon(s, e);
  AddEpsilon(f.end, e);
  return {s, e};
}

namespace {
int Utf8Len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }
void EncodeUtf8(uint32_t cp, uint8_t* out) {
  int n = Utf8Len(cp);
  if (n == 1) {
    out[0] = static_cast<uint8_t>(cp);
  } else if (n == 2) {
    out[0] = 0xC0 | (cp >> 6);
    out[1] = 0x80 | (cp & 0x3F);
  } else if (n == 3) {
    out[0] = 0xE0 | (cp >> 12);
    out[1] = 0x80 | ((cp >> 6) & 0x3F);
    out[2] = 0x80 | (cp & 0x3F);
  } else {
    out[0] = 0xF0 | (cp >> 18);
    out[1] = 0x80 | ((cp >> 12) & 0x3F);
    out[2] = 0x80 | ((cp >> 6) & 0x3F);
    out[3] = 0x80 | (cp & 0x3F);
  }
}
}  // namespace

// Splits [lo, hi] until every byte position of the encodings is a plain range, then adds one path.
void Nfa::AddUtf8(uint32_t lo, uint32_t hi, uint32_t from, uint32_t to) {
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {  // no surrogates in UTF-8
    if (lo < 0xD800) AddUtf8(lo, 0xD7FF, from, to);
    if (hi > 0xDFFF) AddUtf8(0xE000, hi, from, to);
    return;
  }
  for (uint32_t max : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= max && hi > max) {
      AddUtf8(lo, max, from, to);
      AddUtf8(max + 1, hi, from, to);
      return;
    }
  }
  int n = Utf8Len(lo);
  for (int i = 1; i < n; ++i) {
    uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        AddUtf8(lo, lo | m, from, to);
        AddUtf8((lo | m) + 1, hi, from, to);
        return;
      }
      if ((hi & m) != m) {
        AddUtf8(lo, (hi & ~m) - 1, from, to);
        AddUtf8(hi & ~m, hi, from, to);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  EncodeUtf8(lo, a);
  EncodeUtf8(hi, b);
  uint32_t cur = from;
  for (int i = 0; i < n; ++i) {
    uint32_t nx = (i + 1 == n) ? to : AddState();
    AddEdge(cur, a[i], b[i], nx);
    cur = nx;
  }
}

Fragment Nfa::CodePoints(uint32_t lo, uint32_t hi) {
  uint32_t s = AddState(), e = AddState();
  AddUtf8(lo, std::min<uint32_t>(hi, 0x10FFFF), s, e);
  return {s, e};
}

Fragment Nfa::CodePointSet(std::span<const std::pair<uint32_t, uint32_t>> ranges) {
  uint32_t s = AddState(), e = AddState();
  for (auto [lo, hi] : ranges) AddUtf8(lo, std::min<uint32_t>(hi, 0x10FFFF), s, e);
  return {s, e};
}

bool Dfa::Matches(std::string_view bytes) const {
  if (Empty()) return false;
  uint32_t s = 0;
  for (unsigned char c : bytes) {
    s = Step(s, c);
    if (s == kDead) return false;
  }
  return accept[s];
}

std::array<uint16_t, kNumSymbols> ComputeClasses(const Nfa& nfa, int* num_classes) {
  std::vector<uint8_t> boundary(kNumSymbols + 1, 0);
  for (uint32_t s = 0; s < nfa.size(); ++s) {
    for (const auto& e : nfa.edges(s)) {
      boundary[e.lo] = 1;
      boundary[e.hi + 1] = 1;
    }
  }
  std::array<uint16_t, kNumSymbols> cls{};
  int c = 0;
  for (int sym = 0; sym < kNumSymbols; ++sym) {
    if (sym > 0 && boundary[sym]) ++c;
    cls[sym] = static_cast<uint16_t>(c);
  }
  *num_classes = c + 1;
  return cls;
}

Dfa Determinize(const Nfa& nfa, Fragment f, size_t max_states) {
  int nc = 0;
  auto cls = ComputeClasses(nfa, &nc);
  return Determinize(nfa, f, cls, nc, max_states);
}

Dfa Determinize(const Nfa& nfa, Fragment f, const std::array<uint16_t, kNumSymbols>& cls,
                int num_classes, size_t max_states) {
  Dfa d;
  d.cls = cls;
  d.num_classes = num_classes;
  std::vector<uint8_t> mark(nfa.size(), 0);
  std::unordered_map<std::vector<uint32_t>, uint32_t, VecHash> ids;
  std::vector<std::vector<uint32_t>> sets;
  std::vector<uint32_t> init{f.start};
  Closure(nfa, &init, &mark);
  ids.emplace(init, 0);
  sets.push_back(std::move(init));
  std::vector<std::vector<uint32_t>> targets(num_classes);
  // The state bound alone does not bound the work: with large subsets (a pattern like
  // `.{20}.*x.{30}` inside a JSON string) 200,000 states took minutes and gigabytes. NFA states
  // visited (which also bounds the subsets kept) are capped too; fuzz_schema found a 150-byte
  // schema pattern that compiled for 3 min 41 s.
  constexpr size_t kMaxWork = size_t{100} << 20;
  size_t work = 0;
  for (size_t i = 0; i < sets.size(); ++i) {
    for (auto& t : targets) t.clear();
    work += sets[i].size();
    bool acc = false;
    for (uint32_t s : sets[i]) {
      if (s == f.end) acc = true;
      for (const auto& e : nfa.edges(s)) {
        for (int c = cls[e.lo]; c <= cls[e.hi]; ++c) targets[c].push_back(e.to);
      }
    }
    d.accept.push_back(acc);
    for (int c = 0; c < num_classes; ++c) {
      auto& t = targets[c];
      if (t.empty()) {
        d.next.push_back(Dfa::kDead);
        continue;
      }
      std::sort(t.begin(), t.end());
      t.erase(std::unique(t.begin(), t.end()), t.end());
      Closure(nfa, &t, &mark);
      work += t.size();
      if (work > kMaxWork) {
        throw Error(ErrorCode::kConstraint,
                    "automaton construction exceeds its work bound (" + std::to_string(sets.size()) +
                        " states so far); simplify the regex/schema (many '.' around '.*'?)");
      }
      auto it = ids.find(t);
      if (it == ids.end()) {
        if (sets.size() >= max_states) {
          throw Error(ErrorCode::kConstraint,
                      "automaton exceeds " + std::to_string(max_states) +
                          " states; simplify the regex/schema (large counted repetitions?)");
        }
        it = ids.emplace(t, static_cast<uint32_t>(sets.size())).first;
        sets.push_back(t);
      }
      d.next.push_back(it->second);
    }
  }
  return Minimize(Trim(d));
}

Dfa Trim(const Dfa& dfa) {
  const uint32_t n = dfa.size();
  const int nc = dfa.num_classes;
  // Reachable from 0.
  std::vector<uint8_t> reach(n, 0);
  std::vector<uint32_t> stack{0};
  reach[0] = 1;
  std::vector<std::vector<uint32_t>> rev(n);
  while (!stack.empty()) {
    uint32_t s = stack.back();
    stack.pop_back();
    for (int c = 0; c < nc; ++c) {
      uint32_t t = dfa.next[s * nc + c];
      if (t == Dfa::kDead) continue;
      if (!reach[t]) {
        reach[t] = 1;
        stack.push_back(t);
      }
    }
  }
  for (uint32_t s = 0; s < n; ++s) {
    if (!reach[s]) continue;
    for (int c = 0; c < nc; ++c) {
      uint32_t t = dfa.next[s * nc + c];
      if (t != Dfa::kDead) rev[t].push_back(s);
    }
  }
  std::vector<uint8_t> live(n, 0);
  for (uint32_t s = 0; s < n; ++s) {
    if (reach[s] && dfa.accept[s]) {
      live[s] = 1;
      stack.push_back(s);
    }
  }
  while (!stack.empty()) {
    uint32_t s = stack.back();
    stack.pop_back();
    for (uint32_t p : rev[s]) {
      if (!live[p]) {
        live[p] = 1;
        stack.push_back(p);
      }
    }
  }
  Dfa out;
  out.cls = dfa.cls;
  out.num_classes = nc;
  if (!live[0]) return out;
  std::vector<uint32_t> remap(n, Dfa::kDead);
  uint32_t m = 0;
  for (uint32_t s = 0; s < n; ++s) {
    if (live[s]) remap[s] = m++;
  }
  out.accept.resize(m);
  out.next.assign(static_cast<size_t>(m) * nc, Dfa::kDead);
  for (uint32_t s = 0; s < n; ++s) {
    if (!live[s]) continue;
    out.accept[remap[s]] = dfa.accept[s];
    for (int c = 0; c < nc; ++c) {
      uint32_t t = dfa.next[s * nc + c];
      out.next[remap[s] * nc + c] = t == Dfa::kDead ? Dfa::kDead : remap[t];
    }
  }
  return out;
}

// Hopcroft's partition refinement, O(k n log n). A sink state stands for the missing transitions;
// the start state's block is renumbered to 0.
Dfa Minimize(const Dfa& dfa) {
  const uint32_t n = dfa.size();
  if (n == 0) return dfa;
  const int nc = dfa.num_classes;
  const uint32_t m = n + 1;  // + sink
  const uint32_t sink = n;
  auto target = [&](uint32_t s, int c) -> uint32_t {
    if (s == sink) return sink;
    uint32_t t = dfa.next[static_cast<size_t>(s) * nc + c];
    return t == Dfa::kDead ? sink : t;
  };
  // Inverse transitions in CSR form per class: preds of t under c.
  std::vector<uint32_t> inv_begin(static_cast<size_t>(nc) * m + 1, 0), inv;
  for (uint32_t s = 0; s < m; ++s) {
    for (int c = 0; c < nc; ++c) ++inv_begin[static_cast<size_t>(c) * m + target(s, c) + 1];
  }
  for (size_t i = 1; i < inv_begin.size(); ++i) inv_begin[i] += inv_begin[i - 1];
  inv.resize(inv_begin.back());
  {
    std::vector<uint32_t> fill(inv_begin.begin(), inv_begin.end() - 1);
    for (uint32_t s = 0; s < m; ++s) {
      for (int c = 0; c < nc; ++c) inv[fill[static_cast<size_t>(c) * m + target(s, c)]++] = s;
    }
  }
  // Blocks are ranges of `elems`.
  std::vector<uint32_t> elems(m), loc(m), block(m);
  std::vector<uint32_t> first, last, marked;
  {
    uint32_t k = 0;
    for (int acc = 1; acc >= 0; --acc) {
      uint32_t b = static_cast<uint32_t>(first.size());
      first.push_back(k);
      for (uint32_t s = 0; s < m; ++s) {
        bool a = s != sink && dfa.accept[s];
        if (a == static_cast<bool>(acc)) {
          elems[k] = s;
          loc[s] = k++;
          block[s] = b;
        }
      }
      last.push_back(k);
      marked.push_back(0);
      if (last.back() == first.back()) {  // empty block: drop it
        first.pop_back();
        last.pop_back();
        marked.pop_back();
      }
    }
  }
  std::vector<std::pair<uint32_t, int>> work;
  std::vector<uint8_t> in_work;  // block * nc + c
  auto add_work = [&](uint32_t b, int c) {
    if (in_work.size() < (static_cast<size_t>(b) + 1) * nc) in_work.resize((b + 1) * nc, 0);
    if (!in_work[static_cast<size_t>(b) * nc + c]) {
      in_work[static_cast<size_t>(b) * nc + c] = 1;
      work.push_back({b, c});
    }
  };
  for (uint32_t b = 0; b < first.size(); ++b) {
    for (int c = 0; c < nc; ++c) add_work(b, c);
  }
  std::vector<uint32_t> preds, touched;
  while (!work.empty()) {
    auto [b, c] = work.back();
    work.pop_back();
    in_work[static_cast<size_t>(b) * nc + c] = 0;
    preds.clear();
    for (uint32_t i = first[b]; i < last[b]; ++i) {
      uint32_t t = elems[i];
      for (uint32_t k = inv_begin[static_cast<size_t>(c) * m + t];
           k < inv_begin[static_cast<size_t>(c) * m + t + 1]; ++k) {
        preds.push_back(inv[k]);
      }
    }
    touched.clear();
    for (uint32_t s : preds) {
      uint32_t d = block[s];
      uint32_t pos = first[d] + marked[d];
      if (loc[s] < pos) continue;  // already marked
      if (marked[d] == 0) touched.push_back(d);
      // Swap s to the marked front of its block.
      uint32_t other = elems[pos];
      std::swap(elems[pos], elems[loc[s]]);
      loc[other] = loc[s];
      loc[s] = pos;
      ++marked[d];
    }
    for (uint32_t d : touched) {
      const uint32_t size = last[d] - first[d], mk = marked[d];
      marked[d] = 0;
      if (mk == size) continue;
      // The marked prefix becomes a new block.
      uint32_t nb = static_cast<uint32_t>(first.size());
      first.push_back(first[d]);
      last.push_back(first[d] + mk);
      marked.push_back(0);
      first[d] += mk;
      for (uint32_t i = first[nb]; i < last[nb]; ++i) block[elems[i]] = nb;
      const bool nb_smaller = mk <= size - mk;
      for (int a = 0; a < nc; ++a) {
        if (in_work.size() > static_cast<size_t>(d) * nc + a &&
            in_work[static_cast<size_t>(d) * nc + a]) {
          add_work(nb, a);
        } else {
          add_work(nb_smaller ? nb : d, a);
        }
      }
    }
  }
  // Renumber: start state's block first, the sink's block dropped.
  const uint32_t dead_block = block[sink];
  std::vector<uint32_t> id(first.size(), Dfa::kDead);
  uint32_t count = 0;
  id[block[0]] = count++;
  for (uint32_t s = 0; s < n; ++s) {
    if (block[s] != dead_block && id[block[s]] == Dfa::kDead) id[block[s]] = count++;
  }
  Dfa out;
  out.cls = dfa.cls;
  out.num_classes = nc;
  out.accept.assign(count, 0);
  out.next.assign(static_cast<size_t>(count) * nc, Dfa::kDead);
  for (uint32_t s = 0; s < n; ++s) {
    if (block[s] == dead_block) continue;
    uint32_t b = id[block[s]];
    out.accept[b] = dfa.accept[s];
    for (int c = 0; c < nc; ++c) {
      uint32_t t = target(s, c);
      out.next[static_cast<size_t>(b) * nc + c] =
          block[t] == dead_block ? Dfa::kDead : id[block[t]];
    }
  }
  return out;
}

Dfa Intersect(const Dfa& a, const Dfa& b) {
  Dfa out;
  if (a.Empty() || b.Empty()) return out;
  // Joint classes.
  std::map<std::pair<int, int>, int> joint;
  std::vector<std::pair<int, int>> rep;
  for (int sym = 0; sym < kNumSymbols; ++sym) {
    auto key = std::make_pair<int, int>(a.cls[sym], b.cls[sym]);
    auto it = joint.find(key);
    if (it == joint.end()) {
      it = joint.emplace(key, static_cast<int>(rep.size())).first;
      rep.push_back(key);
    }
    out.cls[sym] = static_cast<uint16_t>(it->second);
  }
  const int nc = static_cast<int>(rep.size());
  out.num_classes = nc;
  std::unordered_map<uint64_t, uint32_t> ids;
  std::vector<std::pair<uint32_t, uint32_t>> states{{0, 0}};
  ids.emplace(0, 0);
  for (size_t i = 0; i < states.size(); ++i) {
    auto [x, y] = states[i];
    out.accept.push_back(a.accept[x] && b.accept[y]);
    for (int c = 0; c < nc; ++c) {
      uint32_t tx = a.next[x * a.num_classes + rep[c].first];
      uint32_t ty = b.next[y * b.num_classes + rep[c].second];
      if (tx == Dfa::kDead || ty == Dfa::kDead) {
        out.next.push_back(Dfa::kDead);
        continue;
      }
      uint64_t key = (static_cast<uint64_t>(tx) << 32) | ty;
      auto it = ids.find(key);
      if (it == ids.end()) {
        it = ids.emplace(key, static_cast<uint32_t>(states.size())).first;
        states.push_back({tx, ty});
      }
      out.next.push_back(it->second);
    }
  }
  return Minimize(Trim(out));
}

Fragment EmbedDfa(Nfa* nfa, const Dfa& dfa) {
  if (dfa.Empty()) return {nfa->AddState(), nfa->AddState()};  // no path: the empty language
  uint32_t base = static_cast<uint32_t>(nfa->size());
  for (uint32_t s = 0; s < dfa.size(); ++s) nfa->AddState();
  uint32_t end = nfa->AddState();
  // Class -> symbol ranges.
  std::vector<std::vector<std::pair<int, int>>> ranges(dfa.num_classes);
  for (int sym = 0; sym < kNumSymbols; ++sym) {
    auto& r = ranges[dfa.cls[sym]];
    if (!r.empty() && r.back().second == sym - 1) {
      r.back().second = sym;
    } else {
      r.push_back({sym, sym});
    }
  }
  for (uint32_t s = 0; s < dfa.size(); ++s) {
    if (dfa.accept[s]) nfa->AddEpsilon(base + s, end);
    for (int c = 0; c < dfa.num_classes; ++c) {
      uint32_t t = dfa.next[s * dfa.num_classes + c];
      if (t == Dfa::kDead) continue;
      for (auto [lo, hi] : ranges[c]) nfa->AddEdge(base + s, lo, hi, base + t);
    }
  }
  return {base, end};
}

}  // namespace gemma::constrain
