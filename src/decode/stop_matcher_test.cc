#include "decode/stop_matcher.h"

#include <gtest/gtest.h>

#include "gemma/error.h"

namespace gemma::decode {
namespace {

// Feeds the pieces as text-only pushes; returns the emitted text and the final event.
std::pair<std::string, StopEvent> Feed(StopMatcher& m, std::vector<std::string> pieces) {
  std::string out;
  StopEvent ev;
  for (const auto& p : pieces) {
    ev = m.PushText(p, &out);
    if (ev.stopped()) break;
  }
  return {out, ev};
}

TEST(StopMatcher, StopsAndTruncatesInsideAToken) {
  StopMatcher m({}, {"\n\n"});
  auto [out, ev] = Feed(m, {"Hello wor", "ld\n\nBye"});
  EXPECT_EQ(out, "Hello world");
  EXPECT_EQ(ev.kind, StopKind::kStopString);
  EXPECT_EQ(ev.index, 0);
}

TEST(StopMatcher, HoldsBackPossiblePrefixesAndReleasesThem) {
  StopMatcher m({}, {"STOP"});
  std::string out;
  EXPECT_FALSE(m.PushText("abcST", &out).stopped());
  EXPECT_EQ(out, "abc");
  EXPECT_EQ(m.held(), "ST");
  EXPECT_FALSE(m.PushText("OX", &out).stopped());
  EXPECT_EQ(out, "abcSTOX");
  EXPECT_EQ(m.held(), "");
  m.PushText("S", &out);
  EXPECT_EQ(out, "abcSTOX");
  m.Finish(&out);
  EXPECT_EQ(out, "abcSTOXS");
}

TEST(StopMatcher, MatchesAcrossSingleCharacterTokens) {
  StopMatcher m({}, {"STOP"});
  auto [out, ev] = Feed(m, {"x", "S", "T", "O", "P", "y"});
  EXPECT_EQ(out, "x");
  EXPECT_TRUE(ev.stopped());
}

TEST(StopMatcher, SelfOverlappingStopString) {
  StopMatcher m({}, {"aab"});
  std::string out;
  m.PushText("a", &out);
  m.PushText("a", &out);
  EXPECT_EQ(out, "");
  m.PushText("a", &out);  // "aaa": only the last "aa" can still start "aab"
  EXPECT_EQ(out, "a");
  EXPECT_TRUE(m.PushText("b", &out).stopped());
  EXPECT_EQ(out, "a");
}

TEST(StopMatcher, FirstToCompleteWinsAmongSeveral) {
  {
    StopMatcher m({}, {"abcd", "bc"});
    auto [out, ev] = Feed(m, {"ab", "c"});
    EXPECT_EQ(out, "a");
    EXPECT_EQ(ev.index, 1);  // "bc" completes first; "abcd" never gets the chance
  }
  {
    StopMatcher m({}, {"abcd", "bc"});  // the same in one push
    auto [out, ev] = Feed(m, {"abcde"});
    EXPECT_EQ(out, "a");
    EXPECT_EQ(ev.index, 1);
  }
  {
    StopMatcher m({}, {"cd", "bcde"});
    auto [out, ev] = Feed(m, {"abcdef"});
    EXPECT_EQ(out, "ab");
    EXPECT_EQ(ev.index, 0);
  }
  {
    StopMatcher m({}, {"yz", "xyz"});  // same end: the longer one, starting first
    auto [out, ev] = Feed(m, {"0x", "y", "z"});
    EXPECT_EQ(out, "0");
    EXPECT_EQ(ev.index, 1);
  }
  {
    // Hold-back takes the longest candidate among several stop strings.
    StopMatcher m({}, {"abc", "bcd"});
    std::string out;
    m.PushText("zab", &out);
    EXPECT_EQ(out, "z");
    m.PushText("x", &out);
    EXPECT_EQ(out, "zabx");
  }
}

TEST(StopMatcher, SplittingDoesNotChangeTheResult) {
  // Random texts over a small alphabet, split at random: the output is the text before the
  // first-completing stop string (found directly on the whole text), or the whole text.
  const std::vector<std::string> stops = {"aba", "bb", "abab", "ca"};
  uint64_t x = 12345;
  auto next = [&] {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<uint32_t>(x >> 33);
  };
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int len = 1 + next() % 12;
    for (int i = 0; i < len; ++i) text += "abc"[next() % 3];
    size_t cut = text.size();
    int32_t which = -1;
    for (size_t e = 1; e <= text.size() && which < 0; ++e) {  // first end position with a match
      for (size_t i = 0; i < stops.size(); ++i) {
        const std::string& s = stops[i];
        if (s.size() <= e && text.compare(e - s.size(), s.size(), s) == 0 &&
            (which < 0 || e - s.size() < cut)) {
          cut = e - s.size();
          which = static_cast<int32_t>(i);
        }
      }
    }
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      const size_t n = 1 + next() % 4;
      pieces.push_back(text.substr(i, n));
      i += n;
    }
    StopMatcher m({}, stops);
    auto [out, ev] = Feed(m, pieces);
    if (!ev.stopped()) m.Finish(&out);
    ASSERT_EQ(out, text.substr(0, cut)) << text;
    ASSERT_EQ(ev.index, which) << text;
  }
}

TEST(StopMatcher, NeverEmitsAStopString) {
  const std::vector<std::string> stops = {"</s>", "<|end|>", "ss"};
  const std::string text = "a<</s<|en</s>d";
  for (size_t cut = 1; cut < text.size(); ++cut) {
    StopMatcher m({}, stops);
    auto [out, ev] = Feed(m, {text.substr(0, cut), text.substr(cut)});
    EXPECT_EQ(out, "a<</s<|en") << cut;
    EXPECT_EQ(ev.index, 0);
  }
}

TEST(StopMatcher, StopIdReleasesHeldTextAndDropsItsOwn) {
  StopMatcher m({106, 1}, {"STOP"});
  std::string out;
  m.Push(5, "abST", &out);
  EXPECT_EQ(out, "ab");
  const StopEvent ev = m.Push(1, "<eos>", &out);
  EXPECT_EQ(ev.kind, StopKind::kStopId);
  EXPECT_EQ(ev.index, 1);
  EXPECT_EQ(out, "abST");
  EXPECT_EQ(m.Push(7, "more", &out).kind, StopKind::kStopId);  // stays stopped
  EXPECT_EQ(out, "abST");
  EXPECT_TRUE(m.IsStopId(106));
  EXPECT_FALSE(m.IsStopId(5));
}

TEST(StopMatcher, Utf8StopStringsSplitAcrossTokens) {
  StopMatcher m({}, {"\xC3\xA9!"});  // "é!"
  std::string out;
  m.PushText("caf\xC3", &out);
  EXPECT_EQ(out, "caf");
  m.PushText("\xA9", &out);
  EXPECT_EQ(out, "caf");
  EXPECT_TRUE(m.PushText("!", &out).stopped());
  EXPECT_EQ(out, "caf");
}

TEST(StopMatcher, NoStopStringsPassesThrough) {
  StopMatcher m({}, {});
  std::string out;
  m.PushText("abc", &out);
  EXPECT_EQ(out, "abc");
}

TEST(StopMatcher, RejectsEmptyStopString) {
  EXPECT_THROW(StopMatcher({}, {"a", ""}), Error);
  EXPECT_THROW(StopMatcher({-1}, {}), Error);
}

}  // namespace
}  // namespace gemma::decode
