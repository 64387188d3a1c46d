// Editing a conversation the way a chat UI does: change what the user said in turn k and
// regenerate.
#pragma once

#include <cstddef>

#include "chat/py_value.h"

namespace gemma::chat {

// Returns `messages` up to and including the k-th (0-based) message with role "user", with that
// message's content replaced and every later message dropped. Earlier messages are kept unchanged.
//
// `new_content` is a string or a list of content parts:
//  - a list replaces the whole content;
//  - a string replaces only the text: if the old content was a list of parts, its media parts
//  (image,
//    audio, video, ...) stay where they were and the text parts are replaced by one text part at
//    the position of the first one (or appended when there was none).
// Other message fields (name, ...) are kept. Throws gemma::Error(kInvalidArgument) when `messages`
// is not a list, k is out of range, or `new_content` is neither a string nor a list.
Json EditUserTurn(const Json& messages, size_t k, const Json& new_content);

}  // namespace gemma::chat
