#include "format/module_pattern.h"

#include <array>
#include <set>

#include "gemma/error.h"

namespace gemma {

namespace {

using Node = ModulePattern::Node;
using Kind = ModulePattern::Kind;

enum AssertKind : uint8_t { kBegin, kEndOrNewline, kEnd, kWordBoundary, kNotWordBoundary };

// Python's MAXREPEAT: counts at or above it are refused ("the repetition number is too large").
constexpr uint64_t kMaxRepeat = 4294967295u;
constexpr uint32_t kInfinite = 4294967295u;
constexpr int kMaxDepth = 100;
// Work units (64-position words touched) one Search or MatchesAtStart may spend. Real patterns on
// real names need far less (the E2B rules on every E2B module: milliseconds); this is < 0.1 s.
constexpr uint64_t kMaxWork = 10'000'000;

void Add(uint64_t* set, unsigned c) { set[c >> 6] |= uint64_t{1} << (c & 63); }
bool Has(const uint64_t* set, unsigned c) { return (set[c >> 6] >> (c & 63)) & 1; }
void AddRange(uint64_t* set, unsigned lo, unsigned hi) {
  for (unsigned c = lo; c <= hi; ++c) Add(set, c);
}
bool IsWord(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
bool IsOct(char c) { return c >= '0' && c <= '7'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
bool IsAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// \d \w \s and their complements as Python reads them in a str pattern, restricted to bytes
// (str.isspace() holds for \x1c-\x1f too).
void AddCategory(uint64_t* set, char c) {
  uint64_t tmp[4] = {0, 0, 0, 0};
  const char lower = static_cast<char>(c | 0x20);
  if (lower == 'd') {
    AddRange(tmp, '0', '9');
  } else if (lower == 'w') {
    AddRange(tmp, 'a', 'z');
    AddRange(tmp, 'A', 'Z');
    AddRange(tmp, '0', '9');
    Add(tmp, '_');
  } else {
    for (unsigned s : {' ', '\t', '\n', '\r', '\f', '\v'}) Add(tmp, s);
    AddRange(tmp, 0x1c, 0x1f);
  }
  const bool complement = c >= 'A' && c <= 'Z';
  for (int i = 0; i < 4; ++i) set[i] |= complement ? ~tmp[i] : tmp[i];
}

}  // namespace

class ModulePatternParser {
 public:
  ModulePatternParser(ModulePattern& out, std::string_view p) : out_(out), p_(p) {}

  int Parse() {
    if (p_.size() > ModulePattern::kMaxPatternBytes)
      Fail("is longer than " + std::to_string(ModulePattern::kMaxPatternBytes) + " bytes");
    for (char c : p_) {
      if (static_cast<unsigned char>(c) >= 0x80) Fail("holds a non-ASCII character (not supported)");
    }
    const int root = ParseAlt(0);
    if (i_ < p_.size()) Fail("unbalanced parenthesis at position " + std::to_string(i_));
    return root;
  }

 private:
  [[noreturn]] void Fail(const std::string& why) const {
    throw Error(ErrorCode::kConfig, "pattern \"" + std::string(p_) + "\" " + why);
  }
  bool AtEnd() const { return i_ >= p_.size(); }
  char Peek(size_t k = 0) const { return i_ + k < p_.size() ? p_[i_ + k] : '\0'; }

  int NewNode(Kind kind) {
    out_.nodes_.emplace_back();
    out_.nodes_.back().kind = kind;
    return static_cast<int>(out_.nodes_.size() - 1);
  }
  int NewSet(const uint64_t* set) {
    const int n = NewNode(Kind::kSet);
    for (int k = 0; k < 4; ++k) out_.nodes_[n].set[k] = set[k];
    return n;
  }
  int NewChar(unsigned c) {
    uint64_t set[4] = {0, 0, 0, 0};
    Add(set, c);
    return NewSet(set);
  }
  int NewAssert(uint8_t kind) {
    const int n = NewNode(Kind::kAssert);
    out_.nodes_[n].assert_kind = kind;
    return n;
  }

  int ParseAlt(int depth) {
    if (depth > kMaxDepth) Fail("nests groups more than " + std::to_string(kMaxDepth) + " deep");
    std::vector<int> branches = {ParseConcat(depth)};
    while (!AtEnd() && Peek() == '|') {
      ++i_;
      branches.push_back(ParseConcat(depth));
    }
    if (branches.size() == 1) return branches[0];
    const int n = NewNode(Kind::kAlt);
    out_.nodes_[n].kids = std::move(branches);
    return n;
  }

  // A `{` at i_ that forms a repetition count as Python reads one: {m}, {m,}, {,n}, {m,n}, {,}.
  bool ReadCount(uint32_t* lo, uint32_t* hi, size_t* end) const {
    size_t j = i_ + 1;
    if (j < p_.size() && p_[j] == '}') return false;  // "{}" is literal
    auto digits = [&](uint64_t* v, bool* any) {
      *v = 0;
      *any = false;
      while (j < p_.size() && IsDigit(p_[j])) {
        *v = std::min<uint64_t>(*v * 10 + static_cast<uint64_t>(p_[j] - '0'), kMaxRepeat);
        *any = true;
        ++j;
      }
    };
    uint64_t a = 0, b = 0;
    bool has_a = false, has_b = false;
    digits(&a, &has_a);
    if (j < p_.size() && p_[j] == ',') {
      ++j;
      digits(&b, &has_b);
    } else {
      b = a;
      has_b = has_a;
    }
    if (j >= p_.size() || p_[j] != '}') return false;
    if (a >= kMaxRepeat || (has_b && b >= kMaxRepeat))
      Fail("has a repetition count of 2^32 - 1 or more (Python: the repetition number is too large)");
    if (has_b && b < a) Fail("has a min repeat greater than max repeat");
    *lo = static_cast<uint32_t>(a);
    *hi = has_b ? static_cast<uint32_t>(b) : kInfinite;
    *end = j + 1;
    return true;
  }

  int ParseConcat(int depth) {
    std::vector<int> items;
    bool last_repeatable = false;  // the last item exists and is not an anchor
    bool last_is_repeat = false;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      const char c = Peek();
      uint32_t lo = 0, hi = 0;
      size_t end = 0;
      const bool count = c == '{' && ReadCount(&lo, &hi, &end);
      if (c == '*' || c == '+' || c == '?' || count) {
        if (last_is_repeat) Fail("has a multiple repeat at position " + std::to_string(i_));
        if (!last_repeatable) Fail("has nothing to repeat at position " + std::to_string(i_));
        if (c == '*') lo = 0, hi = kInfinite;
        if (c == '+') lo = 1, hi = kInfinite;
        if (c == '?') lo = 0, hi = 1;
        i_ = count ? end : i_ + 1;
        if (Peek() == '+' && !AtEnd()) Fail("has a possessive quantifier (not supported)");
        if (Peek() == '?' && !AtEnd()) ++i_;  // lazy: the same set of matches
        const int n = NewNode(Kind::kRepeat);
        out_.nodes_[n].min = lo;
        out_.nodes_[n].max = hi;
        out_.nodes_[n].kids = {items.back()};
        items.back() = n;
        last_is_repeat = true;
        continue;
      }
      bool repeatable = true;
      const int item = ParseAtom(depth, &repeatable);
      if (item < 0) continue;  // a comment: Python's next quantifier applies to the item before
      last_is_repeat = false;
      last_repeatable = repeatable;
      items.push_back(item);
    }
    if (items.size() == 1) return items[0];
    const int n = NewNode(items.empty() ? Kind::kEmpty : Kind::kConcat);
    out_.nodes_[n].kids = std::move(items);
    return n;
  }

  // One atom; -1 for a comment. *repeatable is false for anchors.
  int ParseAtom(int depth, bool* repeatable) {
    const char c = p_[i_++];
    switch (c) {
      case '.': {
        uint64_t set[4] = {~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}};
        set[0] &= ~(uint64_t{1} << '\n');
        return NewSet(set);
      }
      case '^':
        *repeatable = false;
        return NewAssert(kBegin);
      case '$':
        *repeatable = false;
        return NewAssert(kEndOrNewline);
      case '[':
        return ParseClass();
      case '(':
        return ParseGroup(depth);
      case '\\':
        return ParseEscape(repeatable);
      default:
        return NewChar(static_cast<unsigned char>(c));
    }
  }

  int ParseGroup(int depth) {
    int kind = 0;  // 0 group, 1 lookahead, 2 lookbehind
    bool negate = false;
    if (Peek() == '?') {
      ++i_;
      const char e = Peek();
      if (e == ':') {
        ++i_;
      } else if (e == 'P' && Peek(1) == '<') {
        i_ += 2;
        const size_t close = p_.find('>', i_);
        if (close == std::string_view::npos) Fail("has an unterminated group name");
        const std::string name(p_.substr(i_, close - i_));
        bool ok = !name.empty() && !IsDigit(name[0]);
        for (char ch : name) ok = ok && (IsWord(static_cast<unsigned char>(ch)));
        if (!ok) Fail("has a bad character in group name '" + name + "'");
        for (const std::string& other : out_.group_names_)
          if (other == name) Fail("redefines group name '" + name + "'");
        out_.group_names_.push_back(name);
        i_ = close + 1;
      } else if (e == 'P' && Peek(1) == '=') {
        Fail("has a backreference (not supported)");
      } else if (e == 'P') {
        Fail("has an unknown extension ?P");
      } else if (e == '=' || e == '!') {
        ++i_;
        kind = 1;
        negate = e == '!';
      } else if (e == '<' && (Peek(1) == '=' || Peek(1) == '!')) {
        negate = Peek(1) == '!';
        i_ += 2;
        kind = 2;
      } else if (e == '#') {
        const size_t close = p_.find(')', i_);
        if (close == std::string_view::npos) Fail("has a missing ), unterminated comment");
        i_ = close + 1;
        return -1;
      } else if (e == '(') {
        Fail("has a conditional group (not supported)");
      } else if (e == '>') {
        Fail("has an atomic group (not supported)");
      } else if (IsAsciiLetter(e) || e == '-') {
        Fail("has inline flags (not supported)");
      } else {
        Fail("has an unknown extension ?" + std::string(1, e));
      }
    }
    const int inner = ParseAlt(depth + 1);
    if (AtEnd() || Peek() != ')') Fail("has a missing ), unterminated subpattern");
    ++i_;
    if (kind == 0) return inner;
    const int n = NewNode(Kind::kLook);
    out_.nodes_[n].negate = negate;
    out_.nodes_[n].behind = kind == 2;
    out_.nodes_[n].kids = {inner};
    if (kind == 2) {
      const int64_t w = Width(inner);
      if (w < 0) Fail("has a look-behind that is not fixed-width");
      out_.nodes_[n].width = static_cast<int>(w);
    }
    return n;
  }

  // The fixed width of a node, or -1.
  int64_t Width(int n) const {
    const Node& node = out_.nodes_[n];
    switch (node.kind) {
      case Kind::kSet:
        return 1;
      case Kind::kEmpty:
      case Kind::kLook:
      case Kind::kAssert:
        return 0;
      case Kind::kConcat: {
        int64_t w = 0;
        for (int k : node.kids) {
          const int64_t kw = Width(k);
          if (kw < 0) return -1;
          w += kw;
          if (w > 100000) return -1;
        }
        return w;
      }
      case Kind::kAlt: {
        const int64_t w = Width(node.kids[0]);  // each kid once: nested alternations stay linear
        for (size_t k = 1; k < node.kids.size(); ++k)
          if (w < 0 || Width(node.kids[k]) != w) return -1;
        return w;
      }
      case Kind::kRepeat: {
        if (node.min != node.max) return -1;
        const int64_t kw = Width(node.kids[0]);
        if (kw < 0 || kw * node.min > 100000) return -1;
        return kw * node.min;
      }
    }
    return -1;
  }

  // After a backslash, outside a class.
  int ParseEscape(bool* repeatable) {
    if (AtEnd()) Fail("has a bad escape (end of pattern)");
    const char c = p_[i_];
    switch (c) {
      case 'A':
        ++i_;
        *repeatable = false;
        return NewAssert(kBegin);
      case 'Z':
        ++i_;
        *repeatable = false;
        return NewAssert(kEnd);
      case 'b':
        ++i_;
        *repeatable = false;
        return NewAssert(kWordBoundary);
      case 'B':
        ++i_;
        *repeatable = false;
        return NewAssert(kNotWordBoundary);
      case 'd': case 'D': case 'w': case 'W': case 's': case 'S': {
        ++i_;
        uint64_t set[4] = {0, 0, 0, 0};
        AddCategory(set, c);
        return NewSet(set);
      }
      default:
        break;
    }
    if (c >= '1' && c <= '9') {
      // Python: three octal digits are an octal escape, anything else a group reference.
      if (IsOct(c) && IsOct(Peek(1)) && IsOct(Peek(2))) {
        const int v = (c - '0') * 64 + (Peek(1) - '0') * 8 + (Peek(2) - '0');
        if (v > 0377) Fail("has an octal escape value outside of range 0-0o377");
        i_ += 3;
        return Literal(v);
      }
      Fail("has a backreference (not supported)");
    }
    return Literal(CommonEscape(/*in_class=*/false));
  }

  int Literal(int v) {
    if (v >= 0x80) Fail("has an escape for a non-ASCII character (not supported)");
    return NewChar(static_cast<unsigned>(v));
  }

  // Escapes that are literal characters inside and outside classes; i_ at the character after
  // the backslash. Letters Python does not know are errors.
  int CommonEscape(bool in_class) {
    const char c = p_[i_++];
    switch (c) {
      case 'a': return 7;
      case 'f': return 12;
      case 'n': return 10;
      case 'r': return 13;
      case 't': return 9;
      case 'v': return 11;
      case 'x': case 'u': case 'U': {
        const int len = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        int64_t v = 0;
        for (int k = 0; k < len; ++k) {
          const int h = HexValue(Peek());
          if (h < 0 || AtEnd()) Fail(std::string("has an incomplete escape \\") + c);
          v = v * 16 + h;
          ++i_;
        }
        if (v > 0x10FFFF) Fail("has a bad escape (code point out of range)");
        return static_cast<int>(std::min<int64_t>(v, 0x110000));
      }
      case '0': {
        int v = 0;
        for (int k = 0; k < 2 && IsOct(Peek()) && !AtEnd(); ++k) v = v * 8 + (p_[i_++] - '0');
        return v;
      }
      case 'N':
        Fail("has a named character escape \\N (not supported)");
      default:
        break;
    }
    if (in_class && c == 'b') return 8;
    if (IsAsciiLetter(c) || IsDigit(c)) Fail(std::string("has a bad escape \\") + c);
    return static_cast<unsigned char>(c);
  }

  int ParseClass() {
    uint64_t set[4] = {0, 0, 0, 0};
    const bool negate = Peek() == '^' && !AtEnd();
    if (negate) ++i_;
    bool any = false;
    // One class item: a character (>= 0) or a category added to `set` (-1).
    auto item = [&]() -> int {
      const char c = p_[i_++];
      if (c != '\\') return static_cast<unsigned char>(c);
      if (AtEnd()) Fail("has an unterminated character set");
      const char e = Peek();
      if (e == 'd' || e == 'D' || e == 'w' || e == 'W' || e == 's' || e == 'S') {
        ++i_;
        AddCategory(set, e);
        return -1;
      }
      if (IsOct(e) && e != '0') {
        int v = 0;
        for (int k = 0; k < 3 && IsOct(Peek()) && !AtEnd(); ++k) v = v * 8 + (p_[i_++] - '0');
        if (v > 0377) Fail("has an octal escape value outside of range 0-0o377");
        return v;
      }
      return CommonEscape(/*in_class=*/true);
    };
    while (true) {
      if (AtEnd()) Fail("has an unterminated character set");
      if (Peek() == ']' && any) {
        ++i_;
        break;
      }
      const int lo = item();
      any = true;
      if (Peek() == '-' && !AtEnd()) {
        ++i_;
        if (AtEnd()) Fail("has an unterminated character set");
        if (Peek() == ']') {  // "a-]": both literal
          if (lo >= 0) AddLiteral(set, lo);
          Add(set, '-');
          ++i_;
          break;
        }
        const int hi = item();
        if (lo < 0 || hi < 0 || hi < lo) Fail("has a bad character range");
        if (hi >= 0x80) Fail("has an escape for a non-ASCII character (not supported)");
        AddRange(set, static_cast<unsigned>(lo), static_cast<unsigned>(hi));
      } else if (lo >= 0) {
        AddLiteral(set, lo);
      }
    }
    if (negate)
      for (uint64_t& w : set) w = ~w;
    return NewSet(set);
  }

  void AddLiteral(uint64_t* set, int v) {
    if (v >= 0x80) Fail("has an escape for a non-ASCII character (not supported)");
    Add(set, static_cast<unsigned>(v));
  }

  ModulePattern& out_;
  std::string_view p_;
  size_t i_ = 0;
};

namespace {

// First bytes of a match; *nullable when a match can be empty.
void First(const std::vector<Node>& nodes, int n, uint64_t* set, bool* nullable) {
  const Node& node = nodes[n];
  switch (node.kind) {
    case Kind::kSet:
      for (int k = 0; k < 4; ++k) set[k] |= node.set[k];
      *nullable = false;
      return;
    case Kind::kEmpty:
    case Kind::kLook:
    case Kind::kAssert:
      *nullable = true;
      return;
    case Kind::kConcat:
      for (int kid : node.kids) {
        bool kn = false;
        First(nodes, kid, set, &kn);
        if (!kn) {
          *nullable = false;
          return;
        }
      }
      *nullable = true;
      return;
    case Kind::kAlt: {
      *nullable = false;
      for (int kid : node.kids) {
        bool kn = false;
        First(nodes, kid, set, &kn);
        *nullable = *nullable || kn;
      }
      return;
    }
    case Kind::kRepeat: {
      bool kn = false;
      First(nodes, node.kids[0], set, &kn);
      *nullable = kn || node.min == 0;
      return;
    }
  }
}

}  // namespace

class ModulePatternEval {
 public:
  static constexpr size_t kWords = (ModulePattern::kMaxNameBytes + 1 + 63) / 64;
  using Bits = std::array<uint64_t, kWords>;

  ModulePatternEval(const ModulePattern& p, std::string_view name)
      : p_(p), t_(name), n_(name.size()), words_((name.size() + 1 + 63) / 64),
        masks_(p.nodes_.size()), memo_(p.nodes_.size()) {
    if (n_ > ModulePattern::kMaxNameBytes)
      throw Error(ErrorCode::kConfig, "module name of " + std::to_string(n_) +
                                          " bytes is longer than the " +
                                          std::to_string(ModulePattern::kMaxNameBytes) +
                                          " bytes QAT patterns are matched against");
  }

  // Whether a match starts at a position in [lo, hi] allowed by `starts`.
  bool MatchesFrom(const Bits& starts, size_t lo, size_t hi) {
    Bits s{};
    for (size_t pos = lo; pos <= hi; ++pos)
      if (Test(starts, pos)) Set(s, pos);
    return Any(s) && Any(Eval(p_.root_, s));
  }

  // The leftmost start in `starts` (positions <= hi) of a match, or kNoMatch. Eval distributes
  // over unions of starts, so one evaluation answers for a whole range: a binary search.
  size_t Leftmost(const Bits& starts, size_t hi) {
    size_t lo = 0;
    if (!MatchesFrom(starts, lo, hi)) return ModulePattern::kNoMatch;
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (MatchesFrom(starts, lo, mid)) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return lo;
  }

  static void Set(Bits& b, size_t pos) { b[pos >> 6] |= uint64_t{1} << (pos & 63); }

 private:
  static bool Test(const Bits& b, size_t pos) { return (b[pos >> 6] >> (pos & 63)) & 1; }
  bool Any(const Bits& b) const {
    for (size_t w = 0; w < words_; ++w)
      if (b[w]) return true;
    return false;
  }
  bool Equal(const Bits& a, const Bits& b) const {
    for (size_t w = 0; w < words_; ++w)
      if (a[w] != b[w]) return false;
    return true;
  }
  void Charge(uint64_t units) {
    work_ += units;
    if (work_ > kMaxWork)
      throw Error(ErrorCode::kConfig, "pattern \"" + p_.pattern_ +
                                          "\" needs more than the bounded work to match module \"" +
                                          std::string(t_) + "\"");
  }

  const Bits& Mask(int n) {
    auto& m = masks_[n];
    if (m.empty()) {
      m.resize(1);
      Bits& bits = m[0];
      bits.fill(0);
      const Node& node = p_.nodes_[n];
      for (size_t i = 0; i < n_; ++i)
        if (Has(node.set, static_cast<unsigned char>(t_[i]))) Set(bits, i);
      Charge(n_ / 8 + 1);
    }
    return m[0];
  }

  bool AssertHolds(uint8_t kind, size_t pos) const {
    switch (kind) {
      case kBegin:
        return pos == 0;
      case kEnd:
        return pos == n_;
      case kEndOrNewline:
        return pos == n_ || (pos + 1 == n_ && t_[pos] == '\n');
      default: {
        const bool before = pos > 0 && IsWord(static_cast<unsigned char>(t_[pos - 1]));
        const bool after = pos < n_ && IsWord(static_cast<unsigned char>(t_[pos]));
        return (before != after) == (kind == kWordBoundary);
      }
    }
  }

  bool LookHolds(int n, size_t pos) {
    auto& memo = memo_[n];
    if (memo.empty()) memo.assign(n_ + 1, -1);
    if (memo[pos] >= 0) return memo[pos] != 0;
    const Node& node = p_.nodes_[n];
    bool found = false;
    if (!node.behind) {
      Bits s{};
      Set(s, pos);
      found = Any(Eval(node.kids[0], s));
    } else if (pos >= static_cast<size_t>(node.width)) {
      Bits s{};
      Set(s, pos - static_cast<size_t>(node.width));
      found = Test(Eval(node.kids[0], s), pos);
    }
    const bool holds = found != node.negate;
    memo[pos] = holds ? 1 : 0;
    return holds;
  }

  template <typename F>
  void ForEach(const Bits& b, F f) {
    for (size_t w = 0; w < words_; ++w) {
      uint64_t x = b[w];
      while (x) {
        const int bit = __builtin_ctzll(x);
        x &= x - 1;
        f(w * 64 + static_cast<size_t>(bit));
      }
    }
  }

  // The positions where a match of node n can end, starting from any position in s.
  Bits Eval(int n, const Bits& s) {
    Charge(words_ + 1);
    const Node& node = p_.nodes_[n];
    Bits out{};
    switch (node.kind) {
      case Kind::kEmpty:
        return s;
      case Kind::kSet: {
        const Bits& m = Mask(n);
        uint64_t carry = 0;
        for (size_t w = 0; w < words_; ++w) {
          const uint64_t x = s[w] & m[w];
          out[w] = (x << 1) | carry;
          carry = x >> 63;
        }
        return out;
      }
      case Kind::kAssert:
        ForEach(s, [&](size_t pos) {
          if (AssertHolds(node.assert_kind, pos)) Set(out, pos);
        });
        return out;
      case Kind::kLook:
        ForEach(s, [&](size_t pos) {
          if (LookHolds(n, pos)) Set(out, pos);
        });
        return out;
      case Kind::kConcat: {
        out = s;
        for (int kid : node.kids) {
          if (!Any(out)) break;
          out = Eval(kid, out);
        }
        return out;
      }
      case Kind::kAlt:
        for (int kid : node.kids) {
          const Bits r = Eval(kid, s);
          for (size_t w = 0; w < words_; ++w) out[w] |= r[w];
        }
        return out;
      case Kind::kRepeat: {
        const int kid = node.kids[0];
        Bits cur = s;
        for (uint32_t k = 0; k < node.min; ++k) {
          const Bits next = Eval(kid, cur);
          if (!Any(next)) return next;
          // A fixed point: every further iteration gives the same set.
          if (Equal(next, cur)) break;
          cur = next;
        }
        if (node.max == node.min) return cur;
        out = cur;
        if (node.max == kInfinite) {
          // Everything reachable from `cur` by more iterations (Eval distributes over unions).
          Bits frontier = cur;
          while (true) {
            Bits next = Eval(kid, frontier);
            bool fresh = false;
            for (size_t w = 0; w < words_; ++w) {
              next[w] &= ~out[w];
              out[w] |= next[w];
              fresh = fresh || next[w];
            }
            if (!fresh) break;
            frontier = next;
          }
          return out;
        }
        for (uint32_t k = node.min; k < node.max; ++k) {
          const Bits next = Eval(kid, cur);
          if (!Any(next) || Equal(next, cur)) break;
          for (size_t w = 0; w < words_; ++w) out[w] |= next[w];
          cur = next;
        }
        return out;
      }
    }
    return out;
  }

  const ModulePattern& p_;
  std::string_view t_;
  size_t n_;
  size_t words_;
  uint64_t work_ = 0;
  std::vector<std::vector<Bits>> masks_;
  std::vector<std::vector<int8_t>> memo_;
};

ModulePattern::ModulePattern(std::string_view pattern) : pattern_(pattern) {
  ModulePatternParser parser(*this, pattern);
  root_ = parser.Parse();
  bool nullable = false;
  First(nodes_, root_, first_, &nullable);
  any_first_ = nullable;
}

size_t ModulePattern::Search(std::string_view name, size_t last_start) const {
  ModulePatternEval eval(*this, name);
  const size_t last = std::min(last_start, name.size());
  ModulePatternEval::Bits starts{};
  for (size_t s = 0; s <= last; ++s) {
    if (any_first_ || (s < name.size() && Has(first_, static_cast<unsigned char>(name[s]))))
      ModulePatternEval::Set(starts, s);
  }
  return eval.Leftmost(starts, last);
}

bool ModulePattern::MatchesAtStart(std::string_view name) const {
  ModulePatternEval eval(*this, name);
  ModulePatternEval::Bits start{};
  ModulePatternEval::Set(start, 0);
  return eval.MatchesFrom(start, 0, 0);
}

}  // namespace gemma
