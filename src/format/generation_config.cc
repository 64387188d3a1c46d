#include "format/generation_config.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "gemma/error.h"

namespace gemma {
namespace {

using json = nlohmann::json;

[[noreturn]] void Bad(const std::string& origin, const std::string& key, const std::string& want) {
  throw Error(ErrorCode::kConfig, origin + ": " + key + ": expected " + want);
}

template <typename T>
void Read(const json& j, const char* key, const std::string& origin, std::optional<T>* out) {
  if (!j.contains(key) || j[key].is_null()) return;
  const json& v = j[key];
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) Bad(origin, key, "true or false");
    *out = v.get<bool>();
  } else if constexpr (std::is_same_v<T, int>) {
    if (!v.is_number_integer()) Bad(origin, key, "an integer");
    *out = v.get<int>();
  } else {
    if (!v.is_number()) Bad(origin, key, "a number");
    *out = v.get<double>();
  }
}

}  // namespace

std::optional<double> GenerationDefaults::EffectiveTemperature() const {
  if (do_sample.has_value() && !*do_sample) return 0.0;
  return temperature;
}

GenerationDefaults ParseGenerationDefaults(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(ErrorCode::kConfig, origin + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(ErrorCode::kConfig, origin + ": not a JSON object");
  GenerationDefaults g;
  g.origin = origin;
  Read(j, "do_sample", origin, &g.do_sample);
  Read(j, "temperature", origin, &g.temperature);
  Read(j, "top_k", origin, &g.top_k);
  Read(j, "top_p", origin, &g.top_p);
  Read(j, "min_p", origin, &g.min_p);
  Read(j, "typical_p", origin, &g.typical_p);
  Read(j, "repetition_penalty", origin, &g.repetition_penalty);
  Read(j, "max_new_tokens", origin, &g.max_new_tokens);
  if (g.temperature && *g.temperature < 0) Bad(origin, "temperature", "a value >= 0");
  if (g.top_k && *g.top_k < 0) Bad(origin, "top_k", "a value >= 0");
  if (g.top_p && (*g.top_p <= 0 || *g.top_p > 1)) Bad(origin, "top_p", "a value in (0, 1]");
  if (j.contains("eos_token_id")) {
    const json& e = j["eos_token_id"];
    if (e.is_number_integer()) {
      g.eos_token_ids.push_back(e.get<int>());
    } else if (e.is_array()) {
      for (const json& id : e) {
        if (!id.is_number_integer()) Bad(origin, "eos_token_id", "an integer or a list of them");
        g.eos_token_ids.push_back(id.get<int>());
      }
    } else if (!e.is_null()) {
      Bad(origin, "eos_token_id", "an integer or a list of them");
    }
  }
  return g;
}

GenerationDefaults LoadGenerationDefaults(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
  const fs::path file = dir / "generation_config.json";
  if (!fs::exists(file, ec)) return {};
  return ParseGenerationDefaults(ReadFileToString(file.string()), file.string());
}

}  // namespace gemma
