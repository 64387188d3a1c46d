#include "constrain/regex.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gemma/error.h"

namespace gemma::constrain {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;
constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr int kMaxRepeat = 1000;

struct Node {
  enum Kind { kEmpty, kChars, kConcat, kAlt, kRepeat } kind = kEmpty;
  Ranges chars;
  std::vector<std::unique_ptr<Node>> kids;
  int min = 0, max = -1;  // kRepeat; max -1 = unbounded
};

Ranges Normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (auto& x : r) {
    if (!out.empty() && x.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, x.second);
    } else {
      out.push_back(x);
    }
  }
  return out;
}

Ranges Negate(const Ranges& r) {
  Ranges n = Normalize(r), out;
  uint32_t next = 0;
  for (auto [lo, hi] : n) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

Ranges Digit() { return {{'0', '9'}}; }
Ranges Word() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
Ranges Space() { return {{'\t', '\n'}, {'\f', '\r'}, {' ', ' '}}; }

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  std::unique_ptr<Node> Parse() {
    if (!p_.empty() && p_[0] == '^') pos_ = 1;
    if (p_.size() > pos_ && p_.back() == '$' && !EscapedAt(p_.size() - 1)) {
      end_ = p_.size() - 1;
    } else {
      end_ = p_.size();
    }
    auto n = ParseAlt();
    if (pos_ < end_) Fail("unbalanced ')'");
    // RE2's bound on nested counted repetition: dividing 1000 by each count on the way down (the
    // maximum, or the minimum when unbounded) must never reach 0, so /(a{100}){11}/ is refused.
    // Without it /((a{1000}){1000}){1000}/ would build a 10^9-state automaton.
    if (RepeatBudget(*n, kMaxRepeat) == 0) {
      pos_ = 0;
      Fail("nested repetition counts multiply past 1000 (the limit RE2 also applies)");
    }
    // Sequences of repetitions also add up (a{1000}b{1000}... in a long pattern): bound the
    // automaton the pattern expands to before building it.
    if (Expanded(*n) > kMaxExpanded) {
      pos_ = 0;
      Fail("the pattern expands to more than " + std::to_string(kMaxExpanded) +
           " automaton states");
    }
    return n;
  }

 private:
  [[noreturn]] void Fail(const std::string& what) const {
    throw Error(ErrorCode::kConstraint, "regex: " + what + " at offset " + std::to_string(pos_) +
                                            " in /" + std::string(p_) + "/");
  }

  static constexpr uint64_t kMaxExpanded = 1u << 20;

  static int RepeatBudget(const Node& n, int budget) {
    if (n.kind == Node::kRepeat) {
      const int m = n.max < 0 ? n.min : n.max;
      if (m > 0) budget /= m;
    }
    int least = budget;
    for (const auto& k : n.kids) least = std::min(least, RepeatBudget(*k, budget));
    return least;
  }

  // States the node expands to (an upper estimate: 4 per character range for UTF-8), saturating.
  static uint64_t Expanded(const Node& n) {
    uint64_t sum = n.kind == Node::kChars ? 4 * n.chars.size() + 1 : 1;
    for (const auto& k : n.kids) sum = std::min<uint64_t>(sum + Expanded(*k), kMaxExpanded + 1);
    if (n.kind == Node::kRepeat) {
      const uint64_t times = static_cast<uint64_t>(std::max(1, std::max(n.min, n.max)));
      sum = std::min<uint64_t>(sum * times, kMaxExpanded + 1);
    }
    return sum;
  }

  bool EscapedAt(size_t i) const {
    size_t n = 0;
    while (i > n && p_[i - n - 1] == '\\') ++n;
    return n % 2 == 1;
  }

  bool AtEnd() const { return pos_ >= end_; }
  char Peek() const { return p_[pos_]; }

  uint32_t DecodeUtf8() {
    unsigned char c = p_[pos_];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || pos_ + n > end_) Fail("invalid UTF-8 in pattern");
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < n; ++i) {
      unsigned char d = p_[pos_ + i];
      if ((d & 0xC0) != 0x80) Fail("invalid UTF-8 in pattern");
      cp = (cp << 6) | (d & 0x3F);
    }
    pos_ += n;
    return cp;
  }

  std::unique_ptr<Node> ParseAlt() {
    std::vector<std::unique_ptr<Node>> alts;
    alts.push_back(ParseConcat());
    while (!AtEnd() && Peek() == '|') {
      ++pos_;
      alts.push_back(ParseConcat());
    }
    if (alts.size() == 1) return std::move(alts[0]);
    auto n = std::make_unique<Node>();
    n->kind = Node::kAlt;
    n->kids = std::move(alts);
    return n;
  }

  std::unique_ptr<Node> ParseConcat() {
    auto n = std::make_unique<Node>();
    n->kind = Node::kConcat;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') n->kids.push_back(ParseRepeat());
    return n;
  }

  int ParseInt() {
    if (AtEnd() || !isdigit(static_cast<unsigned char>(Peek()))) Fail("expected a number");
    long v = 0;
    while (!AtEnd() && isdigit(static_cast<unsigned char>(Peek()))) {
      v = v * 10 + (Peek() - '0');
      if (v > kMaxRepeat) Fail("repetition count above 1000");
      ++pos_;
    }
    return static_cast<int>(v);
  }

  // A decimal count without a leading zero (RE2), or -1 (pos_ then undefined: callers restore).
  int TryParseCount() {
    if (AtEnd() || !isdigit(static_cast<unsigned char>(Peek()))) return -1;
    if (Peek() == '0' && pos_ + 1 < end_ && isdigit(static_cast<unsigned char>(p_[pos_ + 1])))
      return -1;
    return ParseInt();
  }

  // After '{' at pos_: the counts of a repetition and pos_ after its '}', or false.
  bool ParseCounts(int* mn, int* mx) {
    ++pos_;
    *mn = TryParseCount();
    if (*mn < 0) return false;
    *mx = *mn;
    if (!AtEnd() && Peek() == ',') {
      ++pos_;
      if (!AtEnd() && Peek() == '}') {
        *mx = -1;
      } else {
        *mx = TryParseCount();
        if (*mx < 0) return false;
      }
    }
    if (AtEnd() || Peek() != '}') return false;
    ++pos_;
    return true;
  }

  std::unique_ptr<Node> ParseRepeat() {
    auto atom = ParseAtom();
    for (;;) {
      if (AtEnd()) break;
      char c = Peek();
      int mn, mx;
      size_t save = pos_;
      if (c == '*') {
        mn = 0, mx = -1, ++pos_;
      } else if (c == '+') {
        mn = 1, mx = -1, ++pos_;
      } else if (c == '?') {
        mn = 0, mx = 1, ++pos_;
      } else if (c == '{') {
        // RE2's rule: `{n}`, `{n,}` or `{n,m}` with decimal counts without leading zeros is a
        // repetition; anything else (`{`, `{x}`, `{01,3}`, `{1,2`) is a literal '{'.
        if (!ParseCounts(&mn, &mx)) {
          pos_ = save;
          break;
        }
        if (mx != -1 && mx < mn) Fail("bad repetition range");
      } else {
        break;
      }
      if (!AtEnd() && Peek() == '?') ++pos_;  // lazy: same language
      if (!AtEnd() && (Peek() == '*' || Peek() == '+' || Peek() == '?'))
        Fail("bad repetition operator");
      auto r = std::make_unique<Node>();
      r->kind = Node::kRepeat;
      r->min = mn;
      r->max = mx;
      r->kids.push_back(std::move(atom));
      atom = std::move(r);
    }
    return atom;
  }

  static std::unique_ptr<Node> Chars(Ranges r) {
    auto n = std::make_unique<Node>();
    n->kind = Node::kChars;
    n->chars = Normalize(std::move(r));
    return n;
  }

  uint32_t ParseHex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (AtEnd() || !isxdigit(static_cast<unsigned char>(Peek()))) Fail("bad hex escape");
      char c = Peek();
      v = v * 16 + (isdigit(static_cast<unsigned char>(c)) ? c - '0' : (tolower(c) - 'a' + 10));
      ++pos_;
    }
    return v;
  }

  // After a backslash: a class (\d ...) into *out, or a single code point.
  Ranges ParseEscape(bool in_class) {
    if (AtEnd()) Fail("trailing backslash");
    char c = Peek();
    ++pos_;
    switch (c) {
      case 'd':
        return Digit();
      case 'D':
        return Negate(Digit());
      case 'w':
        return Word();
      case 'W':
        return Negate(Word());
      case 's':
        return Space();
      case 'S':
        return Negate(Space());
      case 'n':
        return {{'\n', '\n'}};
      case 'r':
        return {{'\r', '\r'}};
      case 't':
        return {{'\t', '\t'}};
      case 'f':
        return {{'\f', '\f'}};
      case 'v':
        return {{'\v', '\v'}};
      case 'a':
        return {{7, 7}};
      case '0':
      case '1':
      case '2':
      case '3':
      case '4':
      case '5':
      case '6':
      case '7': {
        // Octal as in RE2: \0 plus up to two more octal digits; \1-\7 only when another octal
        // digit follows (alone they would be backreferences). The value is a code point (<= 0777).
        auto octal = [&] { return !AtEnd() && Peek() >= '0' && Peek() <= '7'; };
        if (c != '0' && !octal()) Fail("backreferences are not supported");
        uint32_t v = static_cast<uint32_t>(c - '0');
        for (int n = 0; n < 2 && octal(); ++n)
          v = v * 8 + static_cast<uint32_t>(Peek() - '0'), ++pos_;
        return {{v, v}};
      }
      case 'x': {
        uint32_t v;
        if (!AtEnd() && Peek() == '{') {
          ++pos_;
          v = 0;
          int n = 0;
          while (!AtEnd() && Peek() != '}') {
            v = v * 16 + ParseHex(1);
            if (++n > 6 || v > kMaxCodePoint) Fail("bad \\x{} escape");
          }
          if (AtEnd() || n == 0) Fail("bad \\x{} escape");
          ++pos_;
        } else {
          v = ParseHex(2);
        }
        return {{v, v}};
      }
      case 'u': {
        uint32_t v = ParseHex(4);
        return {{v, v}};
      }
      case 'b':
      case 'B':
        if (in_class) Fail("\\b inside a class is unsupported");
        Fail("word boundaries (\\b, \\B) are not supported");
      case 'A':
      case 'z':
      case 'Z':
      case 'G':
        Fail(std::string("anchor \\") + c + " is not supported");
      case 'k':
        Fail("backreferences are not supported");
      case 'p':
      case 'P':
        Fail("Unicode classes \\p are not supported");
      default:
        break;
    }
    if (c >= '1' && c <= '9') Fail("backreferences are not supported");
    if (isalnum(static_cast<unsigned char>(c))) Fail(std::string("unknown escape \\") + c);
    --pos_;
    uint32_t cp = DecodeUtf8();
    return {{cp, cp}};
  }

  std::unique_ptr<Node> ParseClass() {
    // pos_ is after '['.
    bool neg = false;
    if (!AtEnd() && Peek() == '^') {
      neg = true;
      ++pos_;
    }
    Ranges r;
    bool first = true;
    for (;;) {
      if (AtEnd()) Fail("missing ']'");
      if (Peek() == ']' && !first) {
        ++pos_;
        break;
      }
      if (Peek() == '[' && pos_ + 1 < end_ && p_[pos_ + 1] == ':')
        Fail("POSIX classes are not supported");
      first = false;
      Ranges lo_set;
      if (Peek() == '\\') {
        ++pos_;
        lo_set = ParseEscape(true);
      } else {
        uint32_t cp = DecodeUtf8();
        lo_set = {{cp, cp}};
      }
      if (lo_set.size() == 1 && lo_set[0].first == lo_set[0].second && pos_ + 1 < end_ &&
          Peek() == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi;
        if (Peek() == '\\') {
          ++pos_;
          Ranges h = ParseEscape(true);
          if (h.size() != 1 || h[0].first != h[0].second) Fail("bad class range");
          hi = h[0].first;
        } else {
          hi = DecodeUtf8();
        }
        if (hi < lo_set[0].first) Fail("bad class range");
        r.push_back({lo_set[0].first, hi});
      } else {
        r.insert(r.end(), lo_set.begin(), lo_set.end());
      }
    }
    return Chars(neg ? Negate(r) : r);
  }

  std::unique_ptr<Node> ParseAtom() {
    char c = Peek();
    if (c == '(') {
      ++pos_;
      if (!AtEnd() && Peek() == '?') {
        ++pos_;
        if (AtEnd()) Fail("bad group");
        char k = Peek();
        if (k == ':') {
          ++pos_;
        } else if (k == '=' || k == '!') {
          Fail("lookahead is not supported");
        } else if (k == '<' && pos_ + 1 < end_ && (p_[pos_ + 1] == '=' || p_[pos_ + 1] == '!')) {
          Fail("lookbehind is not supported");
        } else if (k == 'P' || k == '<') {
          if (k == 'P') ++pos_;
          if (AtEnd() || Peek() != '<') Fail("bad named group");
          while (!AtEnd() && Peek() != '>') ++pos_;
          if (AtEnd()) Fail("bad named group");
          ++pos_;
        } else {
          Fail("inline flags and other (? groups are not supported");
        }
      }
      auto n = ParseAlt();
      if (AtEnd() || Peek() != ')') Fail("missing ')'");
      ++pos_;
      return n;
    }
    if (c == '[') {
      ++pos_;
      return ParseClass();
    }
    if (c == '.') {
      ++pos_;
      return Chars({{0, '\n' - 1}, {'\n' + 1, kMaxCodePoint}});
    }
    if (c == '\\') {
      ++pos_;
      return Chars(ParseEscape(false));
    }
    if (c == '*' || c == '+' || c == '?') Fail("missing argument to repetition operator");
    if (c == '^') Fail("^ is only supported at the start of the pattern");
    if (c == '$') Fail("$ is only supported at the end of the pattern");
    uint32_t cp = DecodeUtf8();
    return Chars({{cp, cp}});
  }

  std::string_view p_;
  size_t pos_ = 0;
  size_t end_ = 0;
};

bool NeedsJsonEscape(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\'; }

std::string JsonEscape(uint32_t cp) {
  switch (cp) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    default: {
      static const char* hex = "0123456789abcdef";
      return std::string("\\u00") + hex[cp >> 4] + hex[cp & 15];
    }
  }
}

Fragment EmitChars(const Ranges& ranges, Nfa* nfa, CharEncoding enc) {
  if (enc == CharEncoding::kRaw) return nfa->CodePointSet(ranges);
  Ranges plain;
  std::vector<Fragment> alts;
  for (auto [lo, hi] : ranges) {
    uint32_t cur = lo;
    for (uint32_t cp = lo; cp <= std::min<uint32_t>(hi, 0x5C); ++cp) {
      if (NeedsJsonEscape(cp)) {
        if (cp > cur) plain.push_back({cur, cp - 1});
        alts.push_back(nfa->Literal(JsonEscape(cp)));
        cur = cp + 1;
      }
    }
    if (cur <= hi) plain.push_back({cur, hi});
  }
  if (!plain.empty()) alts.push_back(nfa->CodePointSet(plain));
  if (alts.empty()) return {nfa->AddState(), nfa->AddState()};  // empty class: matches nothing
  return nfa->Alt(alts);
}

Fragment Emit(const Node& n, Nfa* nfa, CharEncoding enc) {
  switch (n.kind) {
    case Node::kEmpty:
      return nfa->Empty();
    case Node::kChars:
      return EmitChars(n.chars, nfa, enc);
    case Node::kConcat: {
      std::vector<Fragment> parts;
      for (auto& k : n.kids) parts.push_back(Emit(*k, nfa, enc));
      return nfa->Concat(parts);
    }
    case Node::kAlt: {
      std::vector<Fragment> alts;
      for (auto& k : n.kids) alts.push_back(Emit(*k, nfa, enc));
      return nfa->Alt(alts);
    }
    case Node::kRepeat: {
      std::vector<Fragment> parts;
      for (int i = 0; i < n.min; ++i) parts.push_back(Emit(*n.kids[0], nfa, enc));
      if (n.max < 0) {
        parts.push_back(nfa->Star(Emit(*n.kids[0], nfa, enc)));
      } else if (n.max > n.min) {
        parts.push_back(nfa->UpTo(n.max - n.min, [&] { return Emit(*n.kids[0], nfa, enc); }));
      }
      return nfa->Concat(parts);
    }
  }
  return nfa->Empty();
}

}  // namespace

Fragment CompileRegex(std::string_view pattern, Nfa* nfa, CharEncoding encoding) {
  Parser p(pattern);
  auto root = p.Parse();
  return Emit(*root, nfa, encoding);
}

Dfa RegexToDfa(std::string_view pattern, size_t max_states) {
  Nfa nfa;
  Fragment f = CompileRegex(pattern, &nfa);
  return Determinize(nfa, f, max_states);
}

}  // namespace gemma::constrain
