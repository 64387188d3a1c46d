// Which chat template a checkpoint's conversations are rendered with. The engine renders the Gemma 4
// canonical template natively (chat_template.h) and does not evaluate Jinja, so a repository's own
// template is only compared with the built-in one's Jinja source: callers then say plainly whether
// the repository's template is the one in use.
#pragma once

#include <string>
#include <string_view>

namespace gemma::chat {

// The Jinja source the native renderer implements: src/chat/gemma4_chat_template.jinja, the
// published E2B/E4B template (/work/shared/reference/gemma4_chat_template.e2b.jinja), embedded at
// build time.
std::string_view BuiltinTemplateSource();

struct TemplateComparison {
  enum class Status { kNone, kIdentical, kDifferent };
  Status status = Status::kNone;
  std::string repository_file;    // where the repository's template was read ("" for kNone)
  std::string repository_sha256;  // SHA-256 (hex) of the repository template's text as read
  std::string builtin_sha256;     // SHA-256 (hex) of BuiltinTemplateSource()
};

// Trailing whitespace removed from every line and from the end of the text: the only difference
// the comparison forgives.
std::string NormalizeTemplateText(std::string_view text);

// SHA-256 of `data` as 64 lowercase hex digits.
std::string Sha256Hex(std::string_view data);

// Finds the repository's template beside the checkpoint (`model_path`: a directory, or the
// directory of a .safetensors file), in transformers' order: chat_template.jinja, then
// chat_template.json's "chat_template", then tokenizer_config.json's "chat_template" (a string, or
// a list of {name, template} whose "default" entry is taken), and compares it with the built-in
// source. Throws gemma::Error(kConfig) naming the file when one of these files is there but cannot
// be read as what it should be.
TemplateComparison CompareRepositoryTemplate(const std::string& model_path);

}  // namespace gemma::chat
