// ChatTemplateInfo: the repository's chat template against the built-in one (chat/template_check.h),
// in the words the CLI, inspect and the server use.
#include "chat/template_check.h"
#include "gemma/engine.h"

namespace gemma {

ChatTemplateInfo ChatTemplateInfo::Read(const std::string& model_path) {
  const chat::TemplateComparison c = chat::CompareRepositoryTemplate(model_path);
  ChatTemplateInfo info;
  info.repository = static_cast<ChatTemplateInfo::Repository>(c.status);
  info.repository_file = c.repository_file;
  info.repository_sha256 = c.repository_sha256;
  info.builtin_sha256 = c.builtin_sha256;
  return info;
}

std::string ChatTemplateInfo::Describe() const {
  switch (repository) {
    case Repository::kIdentical:
      return "repository template, identical to the built-in (" + repository_file + ")";
    case Repository::kDifferent:
      return "the built-in Gemma 4 template is used instead of the repository's " +
             repository_file + ", which differs (repository sha256 " + repository_sha256 +
             ", built-in sha256 " + builtin_sha256 + "; Jinja templates are not rendered)";
    case Repository::kNone:
      break;
  }
  return "the built-in Gemma 4 template (the repository has none; built-in sha256 " +
         builtin_sha256 + ")";
}

nlohmann::json ChatTemplateInfo::ToJson() const {
  static const char* kNames[] = {"none", "identical", "different"};
  nlohmann::json j = {{"used", repository == Repository::kIdentical ? "repository (identical to "
                                                                      "the built-in)"
                                                                    : "built-in"},
                      {"repository", kNames[static_cast<int>(repository)]},
                      {"builtin_sha256", builtin_sha256},
                      {"description", Describe()}};
  if (repository != Repository::kNone) {
    j["repository_file"] = repository_file;
    j["repository_sha256"] = repository_sha256;
  }
  return j;
}

}  // namespace gemma
