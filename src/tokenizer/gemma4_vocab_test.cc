#include "tokenizer/gemma4_vocab.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/test_support.h"
#include "tokenizer/tokenizer.h"

namespace gemma {
namespace {

class Gemma4VocabTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::HaveGemma3Tokenizer()) GTEST_SKIP() << testing::kNoTokenizer;
  }
  const Tokenizer& tok() { return testing::Gemma4TestTokenizer(); }
};

TEST_F(Gemma4VocabTest, SpecialTokensAtSpecIds) {
  EXPECT_EQ(tok().vocab_size(), 262144);
  for (const auto& t : kGemma4SpecialTokens) {
    EXPECT_EQ(tok().TokenId(t.text), t.id) << t.text;
    EXPECT_EQ(tok().Piece(t.id), t.text);
    EXPECT_EQ(tok().TokenBytes(t.id), t.text);
    EXPECT_TRUE(tok().IsSpecial(t.id)) << t.text;
    EXPECT_EQ(tok().Encode(t.text), std::vector<int32_t>{t.id}) << t.text;
  }
  for (auto [id, text] : std::vector<std::pair<int32_t, std::string>>{
           {0, "<pad>"}, {1, "<eos>"}, {2, "<bos>"}, {3, "<unk>"}}) {
    EXPECT_EQ(tok().TokenId(text), id);
    EXPECT_TRUE(tok().IsSpecial(id));
  }
}

TEST_F(Gemma4VocabTest, Gemma3OnlyTokensAreGone) {
  EXPECT_EQ(tok().TokenId("<start_of_turn>"), std::nullopt);
  EXPECT_EQ(tok().TokenId("<image_soft_token>"), std::nullopt);
  EXPECT_EQ(tok().TokenId("<unused40>"), std::nullopt);
  std::vector<int32_t> ids = tok().Encode("<start_of_turn>");
  EXPECT_GT(ids.size(), 1u);
  EXPECT_EQ(tok().Decode(ids), "<start_of_turn>");
}

TEST_F(Gemma4VocabTest, ChatPromptTokenizes) {
  const std::string prompt = "<bos><|turn>user\nHello<turn|>\n<|turn>model\n";
  std::vector<int32_t> ids = tok().Encode(prompt);
  ASSERT_GE(ids.size(), 8u);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 105);
  EXPECT_EQ(ids.back(), 107);
  EXPECT_EQ(tok().Decode(ids), prompt);
  const std::string call = "<|tool_call>call:lookup{query:<|\"|>AX<|\"|>}<tool_call|>";
  ids = tok().Encode(call);
  EXPECT_EQ(ids.front(), 48);
  EXPECT_EQ(ids.back(), 49);
  int quotes = 0;
  for (int32_t id : ids) quotes += id == 52;
  EXPECT_EQ(quotes, 2);
  EXPECT_EQ(tok().Decode(ids), call);
}

TEST_F(Gemma4VocabTest, OrdinaryTextMatchesGemma3) {
  const Tokenizer& g3 = testing::Gemma3TestTokenizer();
  for (const char* s : {"Hello world", "שלום", "日本語のテキスト", "  indented\n\tcode();"}) {
    EXPECT_EQ(tok().Encode(s), g3.Encode(s)) << s;
  }
}

TEST_F(Gemma4VocabTest, DerivationIsDeterministicAndFileBacked) {
  std::string a = DeriveGemma4TokenizerJson(ReadFileToString(testing::Gemma3TokenizerPath()));
  EXPECT_EQ(a, ReadFileToString(testing::Gemma4TestTokenizerPath()));
}

TEST(Gemma4VocabDerive, RejectsNonGemmaInput) {
  EXPECT_THROW(DeriveGemma4TokenizerJson(R"({"model":{"vocab":{"a":0}}})"), Error);
  EXPECT_THROW(DeriveGemma4TokenizerJson("{"), Error);
}

}  // namespace
}  // namespace gemma
