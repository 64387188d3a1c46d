// Native renderer of the Gemma 4 canonical chat template, E2B/E4B ("compact") variant
// (/work/shared/reference/gemma4_chat_template.e2b.jinja, published 2026-07-09).
//
// Input is what Hugging Face `apply_chat_template` takes: OpenAI/HF-shaped messages, HF
// function-schema tools, and the template's keyword options. Output is the exact string
// transformers renders, checked against transformers goldens in tests/goldens/chat/.
//
// Deliberate differences from the Jinja template (the template renders nonsense silently; we
// refuse): unknown or missing roles, `role: tool` messages that no preceding tool call consumes,
// tools without a `function` object or a function name, non-object `parameters`, content that is
// neither a string nor a list of known content parts (or null), non-string
// `text`/`reasoning`/`name`, and `tool_responses` entries without `response`. All of these throw
// gemma::Error(kTemplate) with what and where, as do the inputs on which the template itself raises
// (string `arguments`, non-iterable schema types, ...).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "chat/py_value.h"

namespace gemma::chat {

struct ChatTemplateOptions {
  bool add_generation_prompt = false;
  bool enable_thinking = false;
  // Keep the reasoning of earlier assistant turns that made tool calls (otherwise only turns after
  // the last user message keep theirs).
  bool preserve_thinking = false;
  std::string bos_token = "<bos>";
};

// A content part's media kind by its "type": image / image_url, audio / input_audio / audio_url,
// video / video_url (the template renders each as its placeholder; the engine and the server read
// the part's bytes or file).
bool IsImagePart(const std::string& type);
bool IsAudioPart(const std::string& type);
bool IsVideoPart(const std::string& type);

// Renders `messages` (a JSON array) with `tools` (a JSON array, or null for none).
// Throws gemma::Error(ErrorCode::kTemplate) for input the template cannot render (see above).
std::string RenderChatTemplate(const Json& messages, const Json& tools,
                               const ChatTemplateOptions& options);
// Same, for unordered nlohmann::json input. Object keys that differ only in case then sort in byte
// order instead of the input order (Jinja's dictsort is case-insensitive and stable).
// Also throws gemma::Error(kInvalidArgument) for input nested deeper than kMaxJsonDepth
// (core/json_depth.h) or holding a string that is not valid UTF-8 (naming the message and the
// byte offset), where copying the input would otherwise fail inside nlohmann::json.
std::string RenderChatTemplate(const nlohmann::json& messages, const nlohmann::json& tools,
                               const ChatTemplateOptions& options);

// OpenAI-style clients send `tool_calls[].function.arguments` as a JSON string; the template
// refuses strings (it needs a mapping). Returns a copy of `messages` with every string `arguments`
// parsed into an object. Throws gemma::Error(kTemplate) naming the message and call when a string
// is not a JSON object.
Json DeserializeToolCallArguments(const Json& messages);

}  // namespace gemma::chat
