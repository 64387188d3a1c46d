// Issue 36: invalid UTF-8 and deep nesting in messages are typed errors naming where (they used
// to surface as nlohmann's untyped exception, "error: internal", exit 3); media parts are found
// so callers can refuse them.
#include <gtest/gtest.h>

#include <string>

#include "chat/chat_template.h"
#include "gemma/error.h"

namespace gemma::chat {
namespace {

std::string ErrorOf(const nlohmann::json& messages) {
  try {
    RenderChatTemplate(messages, nlohmann::json::array(), {});
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "rendered";
  return "";
}

TEST(ChatInput, InvalidUtf8NamesTheMessageAndTheByte) {
  const nlohmann::json m = {{{"role", "user"}, {"content", "ok"}},
                            {{"role", "assistant"}, {"content", "fine"}},
                            {{"role", "user"}, {"content", "caf\xE9"}}};
  const std::string what = ErrorOf(m);
  EXPECT_NE(what.find("messages[2].content"), std::string::npos) << what;
  EXPECT_NE(what.find("byte 3 (0xE9)"), std::string::npos) << what;
  // Overlong and surrogate encodings are invalid too (Unicode table 3-7).
  EXPECT_NE(ErrorOf({{{"role", "user"}, {"content", "\xC0\xAF"}}}).find("byte 0"),
            std::string::npos);
  EXPECT_NE(ErrorOf({{{"role", "user"}, {"content", "a\xED\xA0\x80"}}}).find("byte 1"),
            std::string::npos);
  // Valid multi-byte text renders.
  EXPECT_NO_THROW(RenderChatTemplate(
      nlohmann::json{{{"role", "user"}, {"content", "caf\xC3\xA9 \xF0\x9F\x99\x82"}}},
      nlohmann::json::array(), {}));
}

TEST(ChatInput, DeepMessagesAreATypedError) {
  const int n = 100'000;
  nlohmann::json m = nlohmann::json::parse(R"([{"role":"user","content":"x","extra":)" +
                                           std::string(n, '[') + std::string(n, ']') + "}]");
  EXPECT_NE(ErrorOf(m).find("deeper than 256"), std::string::npos);
}

}  // namespace
}  // namespace gemma::chat
