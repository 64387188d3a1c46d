#include "chat/conversation_edit.h"

#include <string>

#include "gemma/error.h"

namespace gemma::chat {

Json EditUserTurn(const Json& messages, size_t k, const Json& new_content) {
  if (!messages.is_array()) {
    throw Error(ErrorCode::kInvalidArgument, "EditUserTurn: messages must be a list");
  }
  if (!new_content.is_string() && !new_content.is_array()) {
    throw Error(ErrorCode::kInvalidArgument,
                "EditUserTurn: new content must be a string or a list of content parts, got a " +
                    TypeName(&new_content));
  }
  size_t users = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    if (!m.is_object() || m.value("role", Json()) != "user") continue;
    if (users++ != k) continue;

    Json out = Json::array();
    for (size_t j = 0; j < i; ++j) out.push_back(messages[j]);
    Json edited = m;
    const Json* old_content = GetItem(&m, "content");
    if (new_content.is_string() && old_content != nullptr && old_content->is_array()) {
      Json parts = Json::array();
      bool placed = false;
      for (const Json& part : *old_content) {
        const bool is_text = part.is_object() && part.value("type", Json()) == "text";
        if (!is_text) {
          parts.push_back(part);
        } else if (!placed) {
          parts.push_back(Json{{"type", "text"}, {"text", new_content}});
          placed = true;
        }
      }
      if (!placed) parts.push_back(Json{{"type", "text"}, {"text", new_content}});
      edited["content"] = std::move(parts);
    } else {
      edited["content"] = new_content;
    }
    out.push_back(std::move(edited));
    return out;
  }
  throw Error(ErrorCode::kInvalidArgument, "EditUserTurn: user turn " + std::to_string(k) +
                                               " does not exist (the conversation has " +
                                               std::to_string(users) + " user message" +
                                               (users == 1 ? "" : "s") + ")");
}

}  // namespace gemma::chat
