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

TEST(StopMatcher, EarliestStartWinsAmongSeveral) {
  {
    StopMatcher m({}, {"abcd", "bc"});
    auto [out, ev] = Feed(m, {"ab", "c"});
    EXPECT_EQ(out, "a");
    EXPECT_EQ(ev.index, 1);  // "bc" completes first; "abcd" never gets the chance
  }
  {
    StopMatcher m({}, {"cd", "bcde"});
    auto [out, ev] = Feed(m, {"abcde"});
    EXPECT_EQ(out, "a");
    EXPECT_EQ(ev.index, 1);
  }
  {
    StopMatcher m({}, {"xyz", "yz"});  // same end, different starts
    auto [out, ev] = Feed(m, {"0x", "y", "z"});
    EXPECT_EQ(out, "0");
    EXPECT_EQ(ev.index, 0);
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
