// Cross-room check with the tokenizer room: a Vocabulary built the way the engine builds it (from
// gemma::Tokenizer) matches the test loader, and real tokenizations of valid JSON are accepted
// token by token, each token inside the mask.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "constrain/constraint.h"
#include "constrain/test_vocab.h"
#include "tokenizer/test_support.h"
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
    if (!vocab->is_special(id)) {
      EXPECT_EQ(vocab->bytes(id), ref->bytes(id)) << id;
    }
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

// With the tokenizer room's Gemma 4 test tokenizer (real Gemma 4 special ids), a reasoning channel
// and a native tool call, tokenized from text, pass the tool-call constraint token by token.
TEST(TokenizerVocabTest, Gemma4ToolCallTokenizedFromTextIsAccepted) {
  if (!gemma::testing::HaveGemma3Tokenizer()) GTEST_SKIP() << gemma::testing::kNoTokenizer;
  const Tokenizer& tok = gemma::testing::Gemma4TestTokenizer();
  std::vector<std::string> bytes(tok.vocab_size());
  std::vector<bool> special(tok.vocab_size());
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    bytes[id] = tok.TokenBytes(id);
    special[id] = tok.IsSpecial(id);
  }
  auto vocab = std::make_shared<Vocabulary>(bytes, special);
  ConstraintOptions o;
  o.kind = ConstraintKind::kToolCalls;
  o.require_tool_call = true;
  o.thinking = true;
  o.tools = Json::parse(R"([{"type":"function","function":{"name":"get_weather","parameters":{
      "type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1}},
      "required":["city"]}}}])");
  auto c = Constraint::Compile(vocab, o);
  auto run = [&](const std::string& text) {
    ConstraintState st(c);
    for (int32_t id : tok.Encode(text)) {
      if (!st.IsAllowed(id)) return false;
      st.Accept(id);
    }
    return st.CanStop() && st.IsAllowed(50);  // <|tool_response> ends the turn's generation
  };
  EXPECT_TRUE(
      run("<|channel>thought\nThe user wants weather.<channel|>"
          "<|tool_call>call:get_weather{city:<|\"|>Paris \"centre\"<|\"|>,days:3}<tool_call|>"));
  EXPECT_TRUE(
      run("<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>}<tool_call|>"
          "<|tool_call>call:get_weather{city:<|\"|>Rome<|\"|>,days:1}<tool_call|>"));
  EXPECT_FALSE(run("<|tool_call>call:get_time{}<tool_call|>"));                   // undeclared
  EXPECT_FALSE(run("<|tool_call>call:get_weather{days:3}<tool_call|>"));          // city missing
  EXPECT_FALSE(run("<|tool_call>call:get_weather{city:\"Paris\"}<tool_call|>"));  // JSON quotes
  EXPECT_FALSE(run("Sure!"));                                                     // call required
}

}  // namespace
}  // namespace gemma::constrain
