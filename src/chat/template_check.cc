#include "chat/template_check.h"


#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>

#include "core/json_depth.h"
#include "core/mapped_file.h"
#include "core/sha256.h"
#include "gemma/error.h"

namespace gemma::chat {
namespace {

namespace fs = std::filesystem;

// The template text of a JSON file's "chat_template" field; nullopt when the field is absent.
std::optional<std::string> TemplateFromJson(const fs::path& file) {
  const std::string text = ReadFileToString(file.string());
  if (JsonTextDepthExceeded(text) != std::string::npos) {
    throw Error(ErrorCode::kConfig, file.string() + ": nests deeper than " +
                                        std::to_string(kMaxJsonDepth) + " arrays/objects");
  }
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    throw Error(ErrorCode::kConfig, file.string() + ": not a JSON object");
  }
  auto it = j.find("chat_template");
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    // Older tokenizer configs: named templates; "default" is what apply_chat_template uses.
    for (const auto& entry : *it) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
    throw Error(ErrorCode::kConfig,
                file.string() + ": chat_template is a list without a \"default\" template");
  }
  throw Error(ErrorCode::kConfig, file.string() + ": chat_template must be a string or a list");
}

}  // namespace

std::string NormalizeTemplateText(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    const bool last = end == std::string_view::npos;
    if (last) end = text.size();
    std::string_view line = text.substr(start, end - start);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r' ||
                             line.back() == '\f' || line.back() == '\v')) {
      line.remove_suffix(1);
    }
    out.append(line);
    if (last) break;
    out.push_back('\n');
    start = end + 1;
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string Sha256Hex(std::string_view data) { return Sha256::Hex(Sha256::Of(data)); }

TemplateComparison CompareRepositoryTemplate(const std::string& model_path) {
  std::error_code ec;
  const fs::path dir =
      fs::is_directory(model_path, ec) ? fs::path(model_path) : fs::path(model_path).parent_path();
  TemplateComparison c;
  c.builtin_sha256 = Sha256Hex(BuiltinTemplateSource());
  std::optional<std::string> text;
  if (fs::exists(dir / "chat_template.jinja", ec)) {
    c.repository_file = "chat_template.jinja";
    text = ReadFileToString((dir / c.repository_file).string());
  }
  for (const char* name : {"chat_template.json", "tokenizer_config.json"}) {
    if (text || !fs::exists(dir / name, ec)) continue;
    text = TemplateFromJson(dir / name);
    if (text) c.repository_file = name;
  }
  if (!text) return c;
  c.repository_sha256 = Sha256Hex(*text);
  c.status = NormalizeTemplateText(*text) == NormalizeTemplateText(BuiltinTemplateSource())
                 ? TemplateComparison::Status::kIdentical
                 : TemplateComparison::Status::kDifferent;
  return c;
}

}  // namespace gemma::chat
