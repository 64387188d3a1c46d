#include "gemma/text.h"

#include "chat/chat_template.h"
#include "gemma/error.h"
#include "tokenizer/tokenizer.h"

namespace gemma {
namespace {

class TextProcessorImpl : public TextProcessor {
 public:
  explicit TextProcessorImpl(Tokenizer t) : tok_(std::move(t)) {}
  std::vector<int32_t> Tokenize(std::string_view text) const override { return tok_.Encode(text); }
  std::string Detokenize(const std::vector<int32_t>& ids) const override {
    return tok_.Decode(ids);
  }
  std::string TokenText(int32_t id) const override {
    if (id < 0 || id >= tok_.vocab_size()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "token id " + std::to_string(id) + " outside the vocabulary (" +
                      std::to_string(tok_.vocab_size()) + " ids)");
    }
    return tok_.TokenBytes(id);
  }
  int vocab_size() const override { return tok_.vocab_size(); }

 private:
  Tokenizer tok_;
};

}  // namespace

std::unique_ptr<TextProcessor> TextProcessor::Load(const std::string& tokenizer_path) {
  return std::make_unique<TextProcessorImpl>(Tokenizer::FromFile(tokenizer_path));
}

std::string RenderChat(const nlohmann::json& messages, const nlohmann::json& tools,
                       bool enable_thinking, bool add_generation_prompt) {
  chat::ChatTemplateOptions o;
  o.enable_thinking = enable_thinking;
  o.add_generation_prompt = add_generation_prompt;
  return chat::RenderChatTemplate(messages, tools.is_null() ? nlohmann::json::array() : tools, o);
}

}  // namespace gemma
