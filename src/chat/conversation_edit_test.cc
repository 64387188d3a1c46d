#include "chat/conversation_edit.h"

#include <gtest/gtest.h>

#include "gemma/error.h"

namespace gemma::chat {
namespace {

const Json kConversation = Json::parse(R"([
  {"role":"system","content":"S"},
  {"role":"user","content":[{"type":"image","url":"a.png"},{"type":"text","text":"What is this?"}]},
  {"role":"assistant","content":"A cat."},
  {"role":"user","content":"And this?"},
  {"role":"assistant","content":"A dog."}])");

TEST(ConversationEditTest, EditingLaterTurnKeepsEarlierMessages) {
  const Json out = EditUserTurn(kConversation, 1, Json("Really?"));
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0], kConversation[0]);
  EXPECT_EQ(out[1], kConversation[1]);  // the earlier attachment is untouched
  EXPECT_EQ(out[2], kConversation[2]);
  EXPECT_EQ(out[3], Json::parse(R"({"role":"user","content":"Really?"})"));
}

TEST(ConversationEditTest, EditingTextKeepsAttachments) {
  const Json out = EditUserTurn(kConversation, 0, Json("Which breed?"));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1], Json::parse(R"({"role":"user","content":[{"type":"image","url":"a.png"},
                                     {"type":"text","text":"Which breed?"}]})"));
}

TEST(ConversationEditTest, TextPartsCollapseToOneAtTheFirstTextPosition) {
  const Json conv = Json::parse(R"([{"role":"user","content":[{"type":"text","text":"a"},
      {"type":"audio"},{"type":"text","text":"b"}]},{"role":"assistant","content":"x"}])");
  const Json out = EditUserTurn(conv, 0, Json("new"));
  EXPECT_EQ(out, Json::parse(R"([{"role":"user","content":[{"type":"text","text":"new"},
      {"type":"audio"}]}])"));
}

TEST(ConversationEditTest, MediaOnlyTurnGetsTextAppended) {
  const Json conv = Json::parse(R"([{"role":"user","content":[{"type":"video"}]}])");
  EXPECT_EQ(EditUserTurn(conv, 0, Json("describe")),
            Json::parse(R"([{"role":"user","content":[{"type":"video"},
                {"type":"text","text":"describe"}]}])"));
}

TEST(ConversationEditTest, ListReplacesWholeContent) {
  const Json parts = Json::parse(R"([{"type":"text","text":"only text"}])");
  const Json out = EditUserTurn(kConversation, 0, parts);
  EXPECT_EQ(out[1]["content"], parts);
}

TEST(ConversationEditTest, OutOfRangeAndBadInputAreTypedErrors) {
  try {
    EditUserTurn(kConversation, 2, Json("x"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("2 user messages"), std::string::npos) << e.what();
  }
  EXPECT_THROW(EditUserTurn(Json::array(), 0, Json("x")), Error);
  EXPECT_THROW(EditUserTurn(kConversation, 0, Json(5)), Error);
  EXPECT_THROW(EditUserTurn(Json::object(), 0, Json("x")), Error);
}

}  // namespace
}  // namespace gemma::chat
