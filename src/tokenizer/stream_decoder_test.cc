#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tokenizer/test_support.h"
#include "tokenizer/tokenizer.h"

namespace gemma {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

class StreamDecoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::HaveGemma3Tokenizer()) GTEST_SKIP() << testing::kNoTokenizer;
  }
  const Tokenizer& tok() { return testing::Gemma3TestTokenizer(); }
  int32_t B(uint8_t b) { return *tok().ByteToken(b); }
};

TEST_F(StreamDecoderTest, HoldsPartialSequenceUntilComplete) {
  StreamDecoder d(tok());
  // U+65E5 '日' = E6 97 A5, U+1F600 = F0 9F 98 80, as byte tokens.
  EXPECT_EQ(d.Push(B(0xE6)), "");
  EXPECT_EQ(d.pending_bytes(), 1u);
  EXPECT_EQ(d.Push(B(0x97)), "");
  EXPECT_EQ(d.Push(B(0xA5)), "\xE6\x97\xA5");
  EXPECT_EQ(d.pending_bytes(), 0u);
  EXPECT_EQ(d.Push(B(0xF0)), "");
  EXPECT_EQ(d.Push(B(0x9F)), "");
  EXPECT_EQ(d.Push(B(0x98)), "");
  EXPECT_EQ(d.Push(B(0x80)), "\xF0\x9F\x98\x80");
  EXPECT_EQ(d.Flush(), "");
}

TEST_F(StreamDecoderTest, TextAfterPartialSequence) {
  StreamDecoder d(tok());
  EXPECT_EQ(d.Push(*tok().TokenId("a")), "a");
  EXPECT_EQ(d.Push(B(0xC3)), "");
  // "b" cannot continue C3: C3 becomes U+FFFD, then "b".
  EXPECT_EQ(d.Push(*tok().TokenId("b")), kFffd + "b");
}

TEST_F(StreamDecoderTest, InvalidBytesAreReplacedAtOnce) {
  StreamDecoder d(tok());
  EXPECT_EQ(d.Push(B(0xFF)), kFffd);
  EXPECT_EQ(d.Push(B(0x80)), kFffd);  // stray continuation
  EXPECT_EQ(d.Push(B(0xC0)), kFffd);  // never valid
  EXPECT_EQ(d.Push(B(0xED)), "");
  EXPECT_EQ(d.Push(B(0xA0)), kFffd + kFffd);  // ED A0 would be a surrogate
  EXPECT_EQ(d.pending_bytes(), 0u);
}

TEST_F(StreamDecoderTest, FlushReplacesHeldBytes) {
  StreamDecoder d(tok());
  EXPECT_EQ(d.Push(B(0xF0)), "");
  EXPECT_EQ(d.Push(B(0x9F)), "");
  EXPECT_EQ(d.Flush(), kFffd + kFffd);
  EXPECT_EQ(d.pending_bytes(), 0u);
  EXPECT_EQ(d.Flush(), "");
  EXPECT_EQ(d.Push(*tok().TokenId("a")), "a");
}

TEST_F(StreamDecoderTest, SpecialTokensPassThrough) {
  StreamDecoder d(tok());
  EXPECT_EQ(d.Push(2), "<bos>");
  EXPECT_EQ(d.Push(107), "\n");
}

TEST_F(StreamDecoderTest, StreamEqualsDecodeForValidText) {
  const std::vector<std::string> texts = {"Hello, world!",
                                          "שלום עולם",
                                          "你好，世界！",
                                          "👩🏽‍💻 + 👨‍👩‍👧‍👦 = 🎉",
                                          "e\xCC\x81\xCC\x82 combining",
                                          "\xF0\xAA\x9B\x96 rare ext-B char",
                                          "<start_of_turn>user\nhi<end_of_turn>\n",
                                          "\xF4\x8F\xBF\xBD private plane"};
  for (const auto& t : texts) {
    std::vector<int32_t> ids = tok().Encode(t);
    StreamDecoder d(tok());
    std::string out;
    for (int32_t id : ids) {
      std::string piece = d.Push(id);
      out += piece;
    }
    out += d.Flush();
    EXPECT_EQ(out, t);
  }
}

TEST_F(StreamDecoderTest, OutputIsAlwaysCompleteUtf8) {
  // Each Push returns whole characters only: for a byte-fallback-heavy text, every chunk decodes
  // on its own.
  std::string t = "\xF0\xAA\x9B\x96\xF0\x90\x8C\xB0\xF0\x92\x80\x80 x";
  StreamDecoder d(tok());
  for (int32_t id : tok().Encode(t)) {
    std::string chunk = d.Push(id);
    if (chunk.empty()) continue;
    EXPECT_EQ(tok().Decode(tok().Encode(chunk)), chunk);
    unsigned char lead = static_cast<unsigned char>(chunk[0]);
    EXPECT_FALSE(lead >= 0x80 && lead < 0xC0) << "chunk starts mid-character";
  }
  EXPECT_EQ(d.Flush(), "");
}

bool ValidUtf8(const std::string& s) {
  size_t i = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  while (i < s.size()) {
    unsigned char c = p[i];
    size_t len = c < 0x80                 ? 1
                 : c >= 0xC2 && c <= 0xDF ? 2
                 : c >= 0xE0 && c <= 0xEF ? 3
                 : c >= 0xF0 && c <= 0xF4 ? 4
                                          : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
    }
    if (len == 3 && ((c == 0xE0 && p[i + 1] < 0xA0) || (c == 0xED && p[i + 1] > 0x9F))) {
      return false;
    }
    if (len == 4 && ((c == 0xF0 && p[i + 1] < 0x90) || (c == 0xF4 && p[i + 1] > 0x8F))) {
      return false;
    }
    i += len;
  }
  return true;
}

TEST_F(StreamDecoderTest, RandomIdsGiveValidUtf8) {
  // Any id sequence (byte tokens mixed with text tokens) streams out as valid UTF-8, and each
  // chunk is valid on its own.
  std::mt19937 rng(99);
  for (int n = 0; n < 200; ++n) {
    StreamDecoder d(tok());
    std::string all;
    for (int k = 0; k < 40; ++k) {
      int32_t id = rng() % 3 ? B(static_cast<uint8_t>(rng() % 256))
                             : static_cast<int32_t>(rng() % tok().vocab_size());
      std::string chunk = d.Push(id);
      ASSERT_TRUE(ValidUtf8(chunk)) << n << ":" << k;
      all += chunk;
    }
    std::string tail = d.Flush();
    ASSERT_TRUE(ValidUtf8(tail));
    EXPECT_TRUE(ValidUtf8(all + tail));
  }
}

TEST_F(StreamDecoderTest, BadIdThrows) {
  StreamDecoder d(tok());
  EXPECT_THROW(d.Push(tok().vocab_size()), Error);
}

}  // namespace
}  // namespace gemma
