// Chat messages and tools into the Gemma 4 template, as the engine and the server receive them:
// JSON text (depth-checked first, as every reader does), OpenAI tool-call arguments as strings
// deserialized, then rendered with each option combination the input picks.
#include <fuzzer/FuzzedDataProvider.h>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "core/json_depth.h"
#include "fuzz_util.h"
#include "gemma/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  gemma::chat::ChatTemplateOptions o;
  o.add_generation_prompt = in.ConsumeBool();
  o.enable_thinking = in.ConsumeBool();
  o.preserve_thinking = in.ConsumeBool();
  const bool ordered = in.ConsumeBool();
  const std::string text = in.ConsumeRemainingBytesAsString();
  if (gemma::JsonTextDepthExceeded(text) != std::string::npos) return 0;
  try {
    if (ordered) {
      const gemma::chat::Json doc = gemma::chat::Json::parse(text, nullptr, false);
      if (doc.is_discarded() || !doc.is_object()) return 0;
      gemma::chat::Json messages = doc.value("messages", gemma::chat::Json::array());
      const gemma::chat::Json tools = doc.value("tools", gemma::chat::Json());
      messages = gemma::chat::DeserializeToolCallArguments(messages);
      (void)gemma::chat::RenderChatTemplate(messages, tools, o);
    } else {
      const nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
      if (doc.is_discarded()) return 0;
      const nlohmann::json messages = doc.is_object() ? doc.value("messages", doc) : doc;
      const nlohmann::json tools =
          doc.is_object() ? doc.value("tools", nlohmann::json()) : nlohmann::json();
      (void)gemma::chat::RenderChatTemplate(messages, tools, o);
    }
  } catch (const gemma::Error&) {
  }
  return 0;
}
