// The synthetic tokenizer (written by Synthesize for every preset) loads, puts Gemma's special
// tokens at Gemma's ids, and round-trips text.
#include <gtest/gtest.h>

#include <string>

#include "model/synth.h"
#include "tokenizer/gemma4_vocab.h"
#include "tokenizer/tokenizer.h"

namespace gemma {
namespace {

TEST(SynthTokenizer, EveryPresetVocabularyLoadsWithGemmaSpecials) {
  for (int vocab : {4096, 32768}) {
    const Tokenizer tok = Tokenizer::FromJson(SyntheticTokenizerJson(vocab), "synthetic");
    EXPECT_EQ(tok.vocab_size(), vocab);
    const std::vector<int32_t> ids = tok.Encode("<|turn>user\nHi there<turn|>");
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.front(), 105);
    EXPECT_EQ(ids.back(), 106);
    for (const SpecialTokenId& s : kGemma4SpecialTokens) {
      if (s.id < vocab) EXPECT_EQ(tok.Encode(std::string(s.text)), (std::vector<int32_t>{s.id}));
    }
    for (const std::string text : {"Hello, world! 42", "caf\xC3\xA9 \xF0\x9F\x99\x82", "a\nb  c"})
      EXPECT_EQ(tok.Decode(tok.Encode(text)), text);
  }
}

TEST(SynthTokenizer, Deterministic) {
  EXPECT_EQ(SyntheticTokenizerJson(2048), SyntheticTokenizerJson(2048));
}

}  // namespace
}  // namespace gemma
