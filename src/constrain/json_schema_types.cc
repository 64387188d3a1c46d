// JSON Schema compilation of each type's constraints: numbers under bounds, strings (length,
// pattern), objects (properties, required, additionalProperties) and arrays (items, counts).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "constrain/automaton.h"
#include "constrain/json_schema.h"
#include "constrain/regex.h"
#include "gemma/error.h"

namespace gemma::constrain {
namespace {

std::string EscapePointer(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

bool NonNegInt(const Json& v) {
  if (v.is_number_integer()) return v.get<int64_t>() >= 0 || v.is_number_unsigned();
  return v.is_number_float() && v.get<double>() >= 0 &&
         std::floor(v.get<double>()) == v.get<double>();
}

// Canonical decimal integers in [lo, hi] (nullopt = unbounded) as fragments.
class IntRanges {
 public:
  explicit IntRanges(Nfa* nfa) : nfa_(nfa) {}

  std::optional<Fragment> Range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
    if (lo && hi && *lo > *hi) return std::nullopt;
    std::vector<Fragment> alts;
    if (!lo || *lo < 0) {  // negatives: -v, v in [max(1, -hi), -lo]
      int64_t a = (hi && *hi < 0) ? -*hi : 1;
      std::optional<int64_t> b;
      if (lo) b = -*lo;
      if (!b || a <= *b) alts.push_back(nfa_->Concat(nfa_->Literal("-"), NonNeg(a, b)));
    }
    if (!hi || *hi >= 0) {
      int64_t a = lo ? std::max<int64_t>(0, *lo) : 0;
      if (!hi || a <= *hi) alts.push_back(NonNeg(a, hi));
    }
    if (alts.empty()) return std::nullopt;
    return nfa_->Alt(alts);
  }

 private:
  static int Digits(int64_t v) { return static_cast<int>(std::to_string(v).size()); }
  static int64_t Pow10(int n) {
    int64_t p = 1;
    while (n-- > 0) p *= 10;
    return p;
  }

  Fragment AnyDigits(int n) {
    std::vector<Fragment> parts;
    for (int i = 0; i < n; ++i) parts.push_back(nfa_->Range('0', '9'));
    return nfa_->Concat(parts);
  }

  Fragment NonNeg(int64_t a, std::optional<int64_t> b) {
    if (!b) {
      int d = Digits(a);
      std::vector<Fragment> alts;
      alts.push_back(Finite(a, Pow10(d) - 1));
      // Every number with more than d digits.
      Fragment longer = nfa_->Concat(nfa_->Range('1', '9'), AnyDigits(d));
      alts.push_back(nfa_->Concat(longer, nfa_->Star(nfa_->Range('0', '9'))));
      return nfa_->Alt(alts);
    }
    return Finite(a, *b);
  }

  Fragment Finite(int64_t a, int64_t b) {
    std::vector<Fragment> alts;
    for (int len = Digits(a); len <= Digits(b); ++len) {
      int64_t lo = std::max(a, len == 1 ? int64_t{0} : Pow10(len - 1));
      int64_t hi = std::min(b, Pow10(len) - 1);
      if (lo <= hi) alts.push_back(SameLen(std::to_string(lo), std::to_string(hi)));
    }
    return nfa_->Alt(alts);
  }

  Fragment SameLen(const std::string& lo, const std::string& hi) {
    if (lo.empty()) return nfa_->Empty();
    if (lo[0] == hi[0]) {
      return nfa_->Concat(nfa_->Literal(lo.substr(0, 1)), SameLen(lo.substr(1), hi.substr(1)));
    }
    const size_t n = lo.size() - 1;
    std::string rest_lo = lo.substr(1), rest_hi = hi.substr(1);
    if (rest_lo == std::string(n, '0') && rest_hi == std::string(n, '9')) {
      return nfa_->Concat(nfa_->Range(lo[0], hi[0]), AnyDigits(static_cast<int>(n)));
    }
    std::vector<Fragment> alts;
    alts.push_back(
        nfa_->Concat(nfa_->Literal(lo.substr(0, 1)), SameLen(rest_lo, std::string(n, '9'))));
    if (hi[0] - lo[0] >= 2) {
      alts.push_back(
          nfa_->Concat(nfa_->Range(lo[0] + 1, hi[0] - 1), AnyDigits(static_cast<int>(n))));
    }
    alts.push_back(
        nfa_->Concat(nfa_->Literal(hi.substr(0, 1)), SameLen(std::string(n, '0'), rest_hi)));
    return nfa_->Alt(alts);
  }

  Nfa* nfa_;
};

}  // namespace

// Plain decimal digits of |d|: integer part and fraction digits without trailing zeros.
std::pair<int64_t, std::string> SchemaCompiler::Decimal(double d) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.12f", std::fabs(d));
  std::string t = buf;
  size_t dot = t.find('.');
  std::string frac = t.substr(dot + 1);
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  return {std::stoll(t.substr(0, dot)), frac};
}

// Fraction digit strings F (non-empty) with 0.F >= 0.L (or >), and/or 0.F <= 0.H (or <).
std::optional<Fragment> SchemaCompiler::Fraction(
    const std::optional<std::pair<std::string, bool>>& at_least,
    const std::optional<std::pair<std::string, bool>>& at_most) {
  Nfa tmp;
  auto digits = [&] { return tmp.Star(tmp.Range('0', '9')); };
  Dfa d = Determinize(tmp, tmp.Plus(tmp.Range('0', '9')), kMaxBranchStates);
  if (at_least) {
    const auto& [l, strict] = *at_least;
    std::vector<Fragment> alts;
    for (size_t k = 0; k < l.size(); ++k) {
      if (l[k] == '9') continue;
      Fragment parts[] = {tmp.Literal(l.substr(0, k)), tmp.Range(l[k] + 1, '9'), digits()};
      alts.push_back(tmp.Concat(parts));
    }
    if (strict) {
      Fragment parts[] = {tmp.Literal(l), digits(), tmp.Range('1', '9')};
      alts.push_back(tmp.Concat(parts));
    } else {
      alts.push_back(tmp.Concat(tmp.Literal(l), digits()));
    }
    d = Intersect(d, Determinize(tmp, tmp.Alt(alts), kMaxBranchStates));
  }
  if (at_most) {
    const auto& [h, strict] = *at_most;
    std::vector<Fragment> alts;
    for (size_t k = 0; k < h.size(); ++k) {
      if (h[k] != '0') {
        Fragment parts[] = {tmp.Literal(h.substr(0, k)), tmp.Range('0', h[k] - 1), digits()};
        alts.push_back(tmp.Concat(parts));
      }
    }
    // A prefix of H followed by zeros (H itself only when not strict).
    for (size_t j = 0; j <= h.size(); ++j) {
      if (j == h.size() && strict) break;
      alts.push_back(tmp.Concat(tmp.Literal(h.substr(0, j)), tmp.Star(tmp.Literal("0"))));
    }
    if (alts.empty()) return std::nullopt;
    d = Intersect(d, Determinize(tmp, tmp.Alt(alts), kMaxBranchStates));
  }
  if (d.Empty()) return std::nullopt;
  return EmbedDfa(nfa_, d);
}

// "I.F" strings (I canonical non-negative integer) whose value lies within [mlo, mhi].
std::optional<Fragment> SchemaCompiler::Magnitudes(const std::optional<Bound>& mlo,
                                                   const std::optional<Bound>& mhi) {
  if (mlo && mhi && (mlo->v > mhi->v || (mlo->v == mhi->v && (mlo->strict || mhi->strict)))) {
    return std::nullopt;
  }
  std::optional<std::pair<int64_t, std::string>> l, h;
  if (mlo) l = Decimal(mlo->v);
  if (mhi) h = Decimal(mhi->v);
  IntRanges ir(nfa_);
  std::vector<Fragment> alts;
  auto with_fraction = [&](Fragment i, std::optional<Fragment> f) {
    if (!f) return;
    Fragment parts[] = {i, nfa_->Literal("."), *f};
    alts.push_back(nfa_->Concat(parts));
  };
  // Integer parts strictly between the bounds' integer parts: any fraction.
  std::optional<int64_t> a = l ? std::optional<int64_t>(l->first + 1) : std::optional<int64_t>(0);
  std::optional<int64_t> b;
  if (h) b = h->first - 1;
  if (auto i = ir.Range(a, b)) with_fraction(*i, Fraction(std::nullopt, std::nullopt));
  if (l) {
    auto i = ir.Range(l->first, l->first);
    std::optional<std::pair<std::string, bool>> most;
    if (h && h->first == l->first) most = std::make_pair(h->second, mhi->strict);
    if (!h || h->first >= l->first)
      with_fraction(*i, Fraction(std::make_pair(l->second, mlo->strict), most));
  }
  if (h && (!l || h->first != l->first) && (!l || h->first > l->first)) {
    with_fraction(*ir.Range(h->first, h->first),
                  Fraction(std::nullopt, std::make_pair(h->second, mhi->strict)));
  }
  if (alts.empty()) return std::nullopt;
  return nfa_->Alt(alts);
}

std::optional<int64_t> SchemaCompiler::IntBound(const Json& s, const std::string& ptr,
                                                const char* key, bool lower) {
  std::optional<int64_t> b;
  auto take = [&](const char* k, bool exclusive) {
    if (!s.contains(k)) return;
    const Json& v = s[k];
    if (!v.is_number()) Unsupported(k, ptr, "must be a number (draft-04 boolean form unsupported)");
    double d = v.get<double>();
    if (std::fabs(d) > 1e15) Unsupported(k, ptr, "beyond +-1e15 is not supported");
    int64_t x;
    if (lower) {
      x = exclusive ? static_cast<int64_t>(std::floor(d)) + 1 : static_cast<int64_t>(std::ceil(d));
      if (!b || x > *b) b = x;
    } else {
      x = exclusive ? static_cast<int64_t>(std::ceil(d)) - 1 : static_cast<int64_t>(std::floor(d));
      if (!b || x < *b) b = x;
    }
  };
  take(lower ? "minimum" : "maximum", false);
  take(lower ? "exclusiveMinimum" : "exclusiveMaximum", true);
  (void)key;
  return b;
}

std::optional<Fragment> SchemaCompiler::Numeric(const Json& s, const std::string& ptr,
                                                bool integer) {
  bool bounded = s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
                 s.contains("exclusiveMaximum");
  if (!bounded) return integer ? g_->Integer() : g_->Number();
  std::optional<int64_t> lo = IntBound(s, ptr, "", true), hi = IntBound(s, ptr, "", false);
  IntRanges ir(nfa_);
  std::vector<Fragment> alts;
  if (auto f = ir.Range(lo, hi)) alts.push_back(*f);
  if (!integer) {
    // Decimals "I.F" and "-I.F" (F non-empty digits) inside the bounds, exactly.
    auto bound = [&](const char* inc, const char* exc, bool lower) -> std::optional<Bound> {
      std::optional<Bound> r;
      for (const char* k : {inc, exc}) {
        if (!s.contains(k)) continue;
        double d = s[k].get<double>();
        bool strict = k == exc;
        if (!r ||
            (lower ? (d > r->v || (d == r->v && strict)) : (d < r->v || (d == r->v && strict)))) {
          r = Bound{d, strict};
        }
      }
      return r;
    };
    std::optional<Bound> lo_b = bound("minimum", "exclusiveMinimum", true);
    std::optional<Bound> hi_b = bound("maximum", "exclusiveMaximum", false);
    // Non-negative values: magnitude in [lo, hi] where a negative lo imposes nothing.
    if (!hi_b || hi_b->v >= 0) {
      std::optional<Bound> mlo = (lo_b && lo_b->v >= 0) ? lo_b : std::nullopt;
      if (auto f = Magnitudes(mlo, hi_b)) alts.push_back(*f);
    }
    // Negative values -m: m in [-hi, -lo]; a positive hi imposes nothing (hi == 0 strict: m > 0).
    if (!lo_b || lo_b->v < 0 || (lo_b->v == 0 && !lo_b->strict)) {
      std::optional<Bound> mlo, mhi;
      if (hi_b && hi_b->v <= 0) mlo = Bound{-hi_b->v, hi_b->strict};
      if (lo_b) mhi = Bound{-lo_b->v, lo_b->strict};
      if (auto f = Magnitudes(mlo, mhi)) alts.push_back(nfa_->Concat(nfa_->Literal("-"), *f));
    }
  }
  if (alts.empty()) return std::nullopt;
  return nfa_->Alt(alts);
}

std::optional<Fragment> SchemaCompiler::String(const Json& s, const std::string& ptr) {
  int min = 0, max = -1;
  if (s.contains("minLength")) {
    if (!NonNegInt(s["minLength"])) Unsupported("minLength", ptr, "must be a non-negative integer");
    min = static_cast<int>(
        std::min<uint64_t>(static_cast<uint64_t>(s["minLength"].get<double>()), 1u << 30));
  }
  if (s.contains("maxLength")) {
    if (!NonNegInt(s["maxLength"])) Unsupported("maxLength", ptr, "must be a non-negative integer");
    max = static_cast<int>(
        std::min<uint64_t>(static_cast<uint64_t>(s["maxLength"].get<double>()), 1u << 30));
  }
  if (min > kMaxStringLength) Unsupported("minLength", ptr, "above 1024 is not supported");
  if (max > kMaxStringLength) max = kMaxStringLength;  // shorter strings stay valid
  if (max >= 0 && min > max) return std::nullopt;
  const CharEncoding enc =
      g_->cfg_.syntax == Syntax::kJson ? CharEncoding::kJsonString : CharEncoding::kRaw;
  auto lengths = [&](JsonGrammar* g, Nfa* nfa) {
    std::vector<Fragment> parts;
    for (int i = 0; i < min; ++i) parts.push_back(g->StringChar());
    if (max < 0) {
      parts.push_back(nfa->Star(g->StringChar()));
    } else if (max > min) {
      parts.push_back(nfa->UpTo(max - min, [&] { return g->StringChar(); }));
    }
    return nfa->Concat(parts);
  };
  Fragment content;
  if (!s.contains("pattern")) {
    content = lengths(g_, nfa_);
  } else {
    if (!s["pattern"].is_string()) Unsupported("pattern", ptr, "must be a string");
    const std::string pat = s["pattern"].get<std::string>();
    try {
      if (min == 0 && max < 0) {
        content = CompileRegex(pat, nfa_, enc);
      } else {
        Nfa tmp;
        JsonGrammar tg(&tmp, g_->cfg_);
        Fragment fp = CompileRegex(pat, &tmp, enc);
        Fragment fl = lengths(&tg, &tmp);
        Dfa d = Intersect(Determinize(tmp, fp, kMaxBranchStates),
                          Determinize(tmp, fl, kMaxBranchStates));
        if (d.Empty()) return std::nullopt;
        content = EmbedDfa(nfa_, d);
      }
    } catch (const Error& e) {
      Unsupported("pattern", ptr, std::string("cannot be compiled: ") + e.what());
    }
  }
  Fragment parts[] = {g_->Quote(), content, g_->Quote()};
  return nfa_->Concat(parts);
}

std::optional<Fragment> SchemaCompiler::Object(const Json& s, const std::string& ptr) {
  // Pointers into the schema, not copies: copying each level's subtree made compilation
  // quadratic in depth (2.9 s and 1 GiB at 3,000 levels).
  static const Json kEmpty = Json::object(), kTrue = true;
  const Json& props = s.contains("properties") ? s["properties"] : kEmpty;
  if (!props.is_object()) Unsupported("properties", ptr, "must be an object");
  const Json& addl = s.contains("additionalProperties") ? s["additionalProperties"] : kTrue;
  if (!addl.is_boolean() && !addl.is_object())
    Unsupported("additionalProperties", ptr, "must be a schema");
  const bool addl_false = addl.is_boolean() && !addl.get<bool>();
  std::set<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) Unsupported("required", ptr, "must be an array");
    for (const auto& r : s["required"]) {
      if (!r.is_string()) Unsupported("required", ptr, "must hold strings");
      required.insert(r.get<std::string>());
    }
  }
  struct Member {
    std::string name;
    const Json* schema;
    std::string ptr;
    bool required;
  };
  std::vector<Member> members;
  for (auto it = props.begin(); it != props.end(); ++it) {
    bool req = required.count(it.key()) > 0;
    if (it->is_boolean() && !it->get<bool>()) {
      if (req) Unsatisfiable(ptr, "required property '" + it.key() + "' has schema false");
      continue;
    }
    members.push_back({it.key(), &*it, ptr + "/properties/" + EscapePointer(it.key()), req});
  }
  for (const auto& r : required) {
    if (props.contains(r)) continue;
    if (addl_false) Unsatisfiable(ptr, "required property '" + r + "' is not allowed");
    members.push_back({r, &addl, ptr + "/additionalProperties", true});
  }
  if (g_->cfg_.syntax == Syntax::kGemma) {
    std::sort(members.begin(), members.end(),
              [](const Member& a, const Member& b) { return a.name < b.name; });
  }
  if (members.empty() && !props.empty() && addl_false) {
    return nfa_->Concat(g_->Open('{'), g_->Close('}'));
  }
  if (props.empty() && required.empty() && !addl_false) {
    // A map: any keys, values under additionalProperties.
    auto open = [this](char c) { return g_->Open(c); };
    auto close = [this](char c) { return g_->Close(c); };
    auto sep = [this](char c) { return g_->Sep(c); };
    return List(g_, nfa_, open, close, sep, '{', '}', 0, -1, 0, [&](int) {
      Fragment parts[] = {g_->AnyKey(), g_->Sep(':'), Compile(addl, ptr + "/additionalProperties")};
      return nfa_->Concat(parts);
    });
  }
  // Declared members in order; optional ones may be skipped.
  Fragment op = g_->Open('{');
  std::optional<uint32_t> e = op.end, f;
  for (const auto& m : members) {
    uint32_t p = nfa_->AddState();
    if (e) nfa_->AddEpsilon(*e, p);
    if (f) {
      Fragment sp = g_->Sep(',');
      nfa_->AddEpsilon(*f, sp.start);
      nfa_->AddEpsilon(sp.end, p);
    }
    Fragment parts[] = {g_->Key(m.name), g_->Sep(':'), Compile(*m.schema, m.ptr)};
    Fragment kv = nfa_->Concat(parts);
    nfa_->AddEpsilon(p, kv.start);
    std::optional<uint32_t> nf;
    if (m.required) {
      nf = kv.end;
      e.reset();
    } else {
      nf = nfa_->AddState();
      nfa_->AddEpsilon(kv.end, *nf);
      if (f) nfa_->AddEpsilon(*f, *nf);
    }
    f = nf;
  }
  Fragment cl = g_->Close('}');
  if (e) nfa_->AddEpsilon(*e, cl.start);
  if (f) nfa_->AddEpsilon(*f, cl.start);
  return Fragment{op.start, cl.end};
}

std::optional<Fragment> SchemaCompiler::Array(const Json& s, const std::string& ptr) {
  std::vector<const Json*> prefix;
  std::string prefix_ptr;
  static const Json kTrue = true;
  const Json* rest_p = &kTrue;
  std::string rest_ptr = ptr + "/items";
  if (s.contains("prefixItems")) {
    if (!s["prefixItems"].is_array()) Unsupported("prefixItems", ptr, "must be an array");
    for (const auto& x : s["prefixItems"]) prefix.push_back(&x);
    prefix_ptr = ptr + "/prefixItems/";
    if (s.contains("items")) rest_p = &s["items"];
    if (s.contains("additionalItems")) Unsupported("additionalItems", ptr, "next to prefixItems");
  } else if (s.contains("items") && s["items"].is_array()) {
    for (const auto& x : s["items"]) prefix.push_back(&x);
    prefix_ptr = ptr + "/items/";
    if (s.contains("additionalItems")) rest_p = &s["additionalItems"];
    rest_ptr = ptr + "/additionalItems";
  } else if (s.contains("items")) {
    rest_p = &s["items"];
  }
  const Json& rest = *rest_p;
  if (!rest.is_boolean() && !rest.is_object()) Unsupported("items", ptr, "must be a schema");
  int min = 0, max = -1;
  if (s.contains("minItems")) {
    if (!NonNegInt(s["minItems"])) Unsupported("minItems", ptr, "must be a non-negative integer");
    min = static_cast<int>(
        std::min<uint64_t>(static_cast<uint64_t>(s["minItems"].get<double>()), 1u << 20));
  }
  if (s.contains("maxItems")) {
    if (!NonNegInt(s["maxItems"])) Unsupported("maxItems", ptr, "must be a non-negative integer");
    max = static_cast<int>(
        std::min<uint64_t>(static_cast<uint64_t>(s["maxItems"].get<double>()), 1u << 20));
  }
  const int k = static_cast<int>(prefix.size());
  if (rest.is_boolean() && !rest.get<bool>()) max = max < 0 ? k : std::min(max, k);
  for (int i = 0; i < k; ++i) {
    if (prefix[i]->is_boolean() && !prefix[i]->get<bool>()) {
      max = max < 0 ? i : std::min(max, i);
      break;
    }
  }
  if (max >= 0 && min > max) return std::nullopt;
  const int copies = max >= 0 ? max : std::max(min, k) + 1;
  if (copies > kMaxListCopies) {
    Unsupported(max >= 0 ? "maxItems" : "minItems", ptr, "above 256 items is not supported");
  }
  auto open = [this](char c) { return g_->Open(c); };
  auto close = [this](char c) { return g_->Close(c); };
  auto sep = [this](char c) { return g_->Sep(c); };
  return List(g_, nfa_, open, close, sep, '[', ']', min, max, k, [&](int i) {
    if (i < k) return Compile(*prefix[i], prefix_ptr + std::to_string(i));
    return Compile(rest, rest_ptr);
  });
}

}  // namespace gemma::constrain
