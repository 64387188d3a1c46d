// The regex subset against RE2: for every pattern, strings generated from our DFA and mutations of
// them must get the same full-match verdict from RE2 as from the DFA; and token-level generation
// through the Gemma-like vocabulary must produce RE2 matches, with stop ids allowed exactly where
// RE2 says the prefix already matches.
#include "constrain/regex.h"

#include <gtest/gtest.h>

#if GEMMA_HAVE_RE2
#include <re2/re2.h>

#include <random>
#include <string>
#include <vector>

#include "constrain/constraint.h"
#include "constrain/test_corpus.h"
#include "constrain/test_vocab.h"
#include "gemma/error.h"

namespace gemma::constrain {
namespace {

const std::vector<std::string>& Patterns() {
  static const std::vector<std::string> k = {
      "abc",
      "a|b|c",
      "a*",
      "(ab)+c?",
      "[a-z]+@[a-z]+\\.(com|org|net)",
      "[0-9]{3}-[0-9]{4}",
      "\\d{1,3}(\\.\\d{1,3}){3}",
      "(foo|foobar|fo)(bar)?",
      "[^a-c]{2,4}",
      ".{0,5}x",
      "\\w+\\s\\w+",
      "[A-Z][a-z]*( [A-Z][a-z]*)*",
      "(a|ab)(c|bcd)(d*)",
      "x{3,}",
      "(?:yes|no|maybe)",
      "(?P<year>\\d{4})-(?P<m>0[1-9]|1[0-2])",
      "-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?",
      "[\\x{4e00}-\\x{9fff}]+",
      "日本語?",
      "é+|ß",
      "[^\\n]*\\n",
      "\\x41\\x{1F600}?",
      "(a*)*b",
      "((ab|cd)*ef){2}",
      "[[:alpha:]]",  // rejected (POSIX class): checked below
      "^start.*end$",
      "[-+]?[0-9]*\\.?[0-9]+",
      "\\(\\)\\[\\]\\{\\}\\.\\*\\+\\?\\|\\\\",
      "a{2}b{0,2}c{1,}",
      "[a-c&&b]",
      "(true|false|null)",
      "\\S+\\D\\W",
      "[.][*]",
      "(?:[a-f0-9]{2}:){5}[a-f0-9]{2}",
      "[\\t\\r ]+",
      "a??b*?c+?",
      "(x|y|z){0,3}q",
      "[^\\x00-\\x7f]+",
      ".*",
      "[😀-😂]{2}",
  };
  return k;
}

// Random walk over the DFA: positive examples.
std::string RandomAccepted(const Dfa& d, std::mt19937_64& rng, int max_len) {
  std::string s;
  uint32_t st = 0;
  for (int i = 0; i < max_len * 4; ++i) {
    if (d.accept[st] && (static_cast<int>(s.size()) >= max_len || rng() % 4 == 0)) return s;
    std::vector<int> bytes;
    for (int b = 0; b < 256; ++b) {
      if (d.Step(st, b) != Dfa::kDead) bytes.push_back(b);
    }
    if (bytes.empty()) break;
    int b = bytes[rng() % bytes.size()];
    s.push_back(static_cast<char>(b));
    st = d.Step(st, b);
  }
  return d.accept[st] ? s : std::string();
}

std::vector<uint32_t> Decode(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

std::string Encode(const std::vector<uint32_t>& cps) {
  std::string s;
  for (uint32_t cp : cps) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return s;
}

std::string Mutate(const std::string& s, const std::string& pattern, std::mt19937_64& rng) {
  auto cps = Decode(s);
  auto pool = Decode(pattern);
  for (uint32_t x : std::initializer_list<uint32_t>{'a', 'z', '0', '9', ' ', '\n', '.', '-', 0xE9u,
                                                    0x65E5u, 0x1F600u, 0x4E00u}) {
    pool.push_back(x);
  }
  int edits = 1 + rng() % 3;
  for (int e = 0; e < edits; ++e) {
    int op = rng() % 3;
    size_t pos = cps.empty() ? 0 : rng() % (cps.size() + 1);
    if (op == 0 || cps.empty()) {
      cps.insert(cps.begin() + pos, pool[rng() % pool.size()]);
    } else if (op == 1) {
      cps.erase(cps.begin() + std::min(pos, cps.size() - 1));
    } else {
      cps[std::min(pos, cps.size() - 1)] = pool[rng() % pool.size()];
    }
  }
  return Encode(cps);
}

TEST(RegexOracleTest, DfaAgreesWithRe2) {
  std::mt19937_64 rng(12345);
  int patterns = 0, strings = 0, positives = 0;
  for (const auto& p : Patterns()) {
    RE2 re(p, RE2::Quiet);
    Dfa d;
    try {
      d = RegexToDfa(p);
    } catch (const Error& e) {
      // Only the deliberately unsupported constructs may fail.
      EXPECT_TRUE(p.find("[[:") != std::string::npos || p.find("&&") != std::string::npos)
          << p << ": " << e.what();
      continue;
    }
    ASSERT_TRUE(re.ok()) << p << ": " << re.error();
    ++patterns;
    for (int i = 0; i < 150; ++i) {
      std::string pos = RandomAccepted(d, rng, 1 + rng() % 12);
      for (const std::string& s : {pos, Mutate(pos, p, rng), Mutate(Mutate(pos, p, rng), p, rng)}) {
        bool ours = d.Matches(s);
        bool theirs = RE2::FullMatch(s, re);
        EXPECT_EQ(ours, theirs) << "pattern /" << p << "/ on \"" << s << "\"";
        ++strings;
        positives += theirs;
      }
    }
  }
  EXPECT_GE(patterns, 36);
  EXPECT_GT(positives, strings / 4);
  EXPECT_LT(positives, strings);
}

// Found by fuzz/fuzz_regex.cc: RE2 reads \0 and \1-\7 followed by octal digits as one octal
// escape (up to three digits), so /\00/ is one NUL and /\12/ a newline; we once read \0 alone.
TEST(RegexOracleTest, OctalEscapesAgreeWithRe2) {
  const std::pair<const char*, std::string> cases[] = {
      {"\\w:+\\00", std::string("a:", 2) + std::string(1, '\0')},
      {"\\00", std::string(1, '\0')},
      {"\\000", std::string(1, '\0')},
      {"\\0000", std::string(1, '\0') + "0"},
      {"\\12", "\n"},
      {"\\101\\1018", "AA8"},
      {"\\377", "\xc3\xbf"},  // U+00FF: an octal escape is a code point, not a byte
      {"[\\060-\\062]+", "012"},
  };
  for (const auto& [p, s] : cases) {
    RE2 re(p, RE2::Quiet);
    ASSERT_TRUE(re.ok()) << p;
    ASSERT_TRUE(RE2::FullMatch(s, re)) << p;  // the oracle agrees with the case
    const Dfa d = RegexToDfa(p);
    EXPECT_TRUE(d.Matches(s)) << p;
    EXPECT_FALSE(d.Matches(s + "x")) << p;
  }
  // \1 to \7 with no octal digit after them are backreferences, refused as before.
  for (const char* p : {"(a)\\1", "\\7", "\\38"}) {
    EXPECT_FALSE(RE2(p, RE2::Quiet).ok()) << p;
    EXPECT_THROW(RegexToDfa(p), Error) << p;
  }
}

// Found by fuzz/fuzz_regex.cc: RE2 reads `{` as a repetition only in the forms {n} {n,} {n,m} with
// counts written without leading zeros; any other `{` is a literal. We once read /a{01,3}/ as
// a repetition (and refused /a{1,2/).
TEST(RegexOracleTest, BraceIsLiteralUnlessAWellFormedRepetitionLikeRe2) {
  const std::pair<const char*, std::string> cases[] = {
      {"\\x1d{01,3}.", "\x1d{01,3}x"},
      {"a{01}", "a{01}"},
      {"a{1,02}", "a{1,02}"},
      {"a{1,2", "a{1,2"},
      {"a{x}", "a{x}"},
      {"a{,2}", "a{,2}"},
      {"a{0}b", "b"},
      {"a{0,1}b", "ab"},
      {"a{10,}", "aaaaaaaaaaaa"},
  };
  for (const auto& [p, s] : cases) {
    RE2 re(p, RE2::Quiet);
    ASSERT_TRUE(re.ok()) << p;
    ASSERT_TRUE(RE2::FullMatch(s, re)) << p << " on " << s;
    EXPECT_TRUE(RegexToDfa(p).Matches(s)) << p << " on " << s;
  }
}

// Found by fuzz/fuzz_regex.cc (a timeout at 744 MB): /a?{244}{244}/ expanded to 59,536 copies
// before the state bound applied; /((a{1000}){1000}){1000}/ would have been 10^9. Nested counts
// now follow RE2's rule (1000 divided by each count on the way down must stay above 0), and a
// pattern's whole expansion is bounded.
TEST(RegexOracleTest, NestedRepetitionIsBoundedLikeRe2) {
  for (const char* p : {"a?{244}{244}", "(a{100}){11}", "((a{1000}){1000}){1000}", "(a{2,}){501}",
                        "(ab{0,2}){1000}"}) {
    EXPECT_FALSE(RE2(p, RE2::Quiet).ok()) << p;
    try {
      RegexToDfa(p);
      ADD_FAILURE() << "accepted /" << p << "/";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("past 1000"), std::string::npos) << e.what();
    }
  }
  for (const char* p : {"(a{10}){100}", "(ab?){1000}", "(x*){1000}", "a{1000}"}) {
    EXPECT_TRUE(RE2(p, RE2::Quiet).ok()) << p;
    EXPECT_NO_THROW(RegexToDfa(p)) << p;
  }
  std::string many;
  for (int i = 0; i < 200; ++i) many += "[a-z]{1000}";
  EXPECT_THROW(RegexToDfa(many), Error);
}

TEST(RegexOracleTest, RejectsUnsupportedConstructsWithClearErrors) {
  const std::pair<const char*, const char*> cases[] = {
      {"a(?=b)", "lookahead"},   {"a(?!b)", "lookahead"},     {"(?<=a)b", "lookbehind"},
      {"(?<!a)b", "lookbehind"}, {"(a)\\1", "backreference"}, {"\\k<x>", "backreference"},
      {"a\\bb", "word boundar"}, {"(?i)abc", "inline flags"}, {"a^b", "^ is only"},
      {"a$b", "$ is only"},      {"(ab", "missing ')'"},      {"ab)", "unbalanced"},
      {"[ab", "missing ']'"},    {"*a", "missing argument"},  {"a{2,1}", "bad repetition range"},
      {"a{1001}", "above 1000"},
  };
  for (auto [pattern, what] : cases) {
    try {
      RegexToDfa(pattern);
      ADD_FAILURE() << "accepted /" << pattern << "/";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kConstraint);
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
}

TEST(RegexOracleTest, MinimizedDfaIsSmall) {
  // (a|b)*abb has a 4-state minimal DFA (Dragon book); ours must be minimal too.
  EXPECT_EQ(RegexToDfa("(a|b)*abb").size(), 4u);
  EXPECT_EQ(RegexToDfa("(a|b)*").size(), 1u);
  EXPECT_EQ(RegexToDfa("a{5}").size(), 6u);
  EXPECT_EQ(RegexToDfa("a{1000}").size(), 1001u);
  EXPECT_EQ(RegexToDfa("[a-z]{0,500}").size(), 501u);
  EXPECT_EQ(RegexToDfa("(ab|cd){3}").size(), 10u);
  EXPECT_EQ(RegexToDfa("(a|ab)(c|bcd)(d*)").size(), RegexToDfa("(a|ab)(c|bcd)d*").size());
}

TEST(RegexOracleTest, TokenLevelGenerationMatchesRe2) {
  auto v = testing::SyntheticVocab();
  std::mt19937_64 rng(99);
  for (const auto& p : Patterns()) {
    if (p.find("[[:") != std::string::npos || p.find("&&") != std::string::npos) continue;
    RE2 re(p);
    ConstraintOptions o;
    o.kind = ConstraintKind::kRegex;
    o.regex = p;
    auto c = Constraint::Compile(v, o);
    for (int i = 0; i < 8; ++i) {
      auto g = testing::Generate(c, &rng, 10);
      ASSERT_TRUE(g.complete) << p;
      EXPECT_TRUE(RE2::FullMatch(g.text, re)) << "/" << p << "/ generated \"" << g.text << "\"";
      // Stop ids are allowed exactly at the prefixes RE2 fully matches (on token boundaries).
      ConstraintState st(c);
      std::string prefix;
      for (int32_t t : g.tokens) {
        const uint64_t* m = st.AllowedTokens();
        bool stop = (m[0] >> 1) & 1;
        EXPECT_EQ(stop, RE2::FullMatch(prefix, re)) << "/" << p << "/ at \"" << prefix << "\"";
        st.Accept(t);
        prefix += v->bytes(t);
      }
    }
  }
}

TEST(RegexOracleTest, RealGemmaVocabularyOutputsMatchRe2) {
  auto v = testing::CachedGemmaVocab(testing::DefaultGemmaTokenizerPath(GEMMA_SOURCE_DIR));
  if (!v) GTEST_SKIP() << "Gemma tokenizer.json missing: run tools/setup.sh";
  std::mt19937_64 rng(4);
  for (const auto& p : testing::RegexCorpus()) {
    RE2 re(p);
    ConstraintOptions o;
    o.kind = ConstraintKind::kRegex;
    o.regex = p;
    auto c = Constraint::Compile(v, o);
    for (int i = 0; i < 2; ++i) {
      auto g = testing::Generate(c, &rng, 12);
      ASSERT_TRUE(g.complete) << p;
      EXPECT_TRUE(RE2::FullMatch(g.text, re)) << "/" << p << "/ generated \"" << g.text << "\"";
    }
  }
}

}  // namespace
}  // namespace gemma::constrain

#else  // !GEMMA_HAVE_RE2

TEST(RegexOracleTest, Re2Missing) {
  GTEST_SKIP() << "RE2 (libre2-dev) not found: run tools/setup.sh";
}

#endif
