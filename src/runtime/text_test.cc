// The model-free text API against transformers' renders of the canonical template
// (tests/goldens/chat) and the engine's own prompt building.
#include "gemma/text.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "gemma/error.h"
#include "tokenizer/test_support.h"

namespace gemma {
namespace {

TEST(TextApi, RenderChatMatchesTransformersOnEveryGoldenCase) {
  const std::string dir = std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/chat/";
  std::map<std::string, std::string> want;
  std::ifstream r(dir + "rendered.jsonl");
  for (std::string line; std::getline(r, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("rendered")) want[j["id"]] = j["rendered"];
  }
  std::ifstream c(dir + "cases.jsonl");
  int checked = 0;
  for (std::string line; std::getline(c, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.value("bos_token", "<bos>") != "<bos>" || !want.count(j["id"])) continue;
    try {
      const std::string got = RenderChat(j["messages"], j.value("tools", nlohmann::json::array()),
                                         j.value("enable_thinking", false),
                                         j.value("add_generation_prompt", false));
      EXPECT_EQ(got, want[j["id"]]) << j["id"];
      ++checked;
    } catch (const Error& e) {
      ADD_FAILURE() << j["id"] << ": " << e.what();
    }
  }
  EXPECT_GT(checked, 200);
}

TEST(TextApi, TokenizeWithoutAModel) {
  if (!testing::HaveGemma3Tokenizer()) GTEST_SKIP() << testing::kNoTokenizer;
  auto text = TextProcessor::Load(testing::Gemma4TestTokenizerPath());
  const std::string prompt = RenderChat({{{"role", "user"}, {"content", "Hi"}}});
  const std::vector<int32_t> ids = text->Tokenize(prompt);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids[0], 2);  // <bos>
  EXPECT_EQ(text->TokenText(ids[1]), "<|turn>");
  EXPECT_EQ(text->Detokenize(ids), prompt);
  EXPECT_THROW(text->TokenText(text->vocab_size()), Error);
  EXPECT_THROW(TextProcessor::Load("/nonexistent/tokenizer.json"), Error);
}

}  // namespace
}  // namespace gemma
