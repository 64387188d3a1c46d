// Text without a model: tokenize with a tokenizer.json and render a conversation with Gemma 4's
// canonical chat template, e.g. to count a prompt's tokens before loading anything.
//
//   auto text = gemma::TextProcessor::Load("tokenizer.json");
//   std::string prompt = gemma::RenderChat(messages);            // "<bos><|turn>user\n..."
//   std::vector<int32_t> ids = text->Tokenize(prompt);
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace gemma {

class TextProcessor {
 public:
  // Error(kIo / kTokenizer) for a missing or malformed file.
  static std::unique_ptr<TextProcessor> Load(const std::string& tokenizer_path);
  virtual ~TextProcessor() = default;
  // Special tokens written in the text (e.g. "<bos>", "<|turn>") are their ids; nothing is added.
  virtual std::vector<int32_t> Tokenize(std::string_view text) const = 0;
  virtual std::string Detokenize(const std::vector<int32_t>& ids) const = 0;
  // One token's text (special tokens as written); Error(kInvalidArgument) outside the vocabulary.
  virtual std::string TokenText(int32_t id) const = 0;
  virtual int vocab_size() const = 0;
};

// Messages (OpenAI / Hugging Face shape) and function declarations rendered with the canonical
// Gemma 4 template, ending with the model's turn opened (add_generation_prompt). Error(kTemplate)
// naming the message for input the template cannot render.
std::string RenderChat(const nlohmann::json& messages,
                       const nlohmann::json& tools = nlohmann::json::array(),
                       bool enable_thinking = false, bool add_generation_prompt = true);

}  // namespace gemma
