#include "backend/vulkan/kernel_config.h"

#include <cctype>
#include <charconv>
#include <cstdlib>

#include "gemma/error.h"

namespace gemma {
namespace {

constexpr std::string_view kPrefix = "GEMMA_VULKAN_";

std::string_view Strip(std::string_view name) {
  return name.substr(0, kPrefix.size()) == kPrefix ? name.substr(kPrefix.size()) : name;
}

}  // namespace

KernelConfig KernelConfig::Parse(std::string_view text) {
  KernelConfig c;
  size_t i = 0;
  while (i < text.size()) {
    if (std::isspace(static_cast<unsigned char>(text[i])) || text[i] == ';') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j])) && text[j] != ';')
      ++j;
    const std::string_view entry = text.substr(i, j - i);
    const size_t eq = entry.find('=');
    int value = 0;
    const char* end = entry.data() + entry.size();
    const auto [ptr, ec] = eq == std::string_view::npos
                               ? std::from_chars_result{nullptr, std::errc::invalid_argument}
                               : std::from_chars(entry.data() + eq + 1, end, value);
    if (eq == 0 || eq == std::string_view::npos || ec != std::errc() || ptr != end)
      throw Error(ErrorCode::kInvalidArgument,
                  "vulkan kernel config: '" + std::string(entry) + "' is not NAME=INTEGER");
    c.Set(entry.substr(0, eq), value);
    i = j;
  }
  return c;
}

KernelConfig KernelConfig::FromEnvironment() {
  const char* v = std::getenv("GEMMA_VULKAN_KERNELS");
  return v ? Parse(v) : KernelConfig();
}

KernelConfig& KernelConfig::Set(std::string_view name, int value) {
  values_[std::string(Strip(name))] = value;
  return *this;
}

void KernelConfig::Apply(const KernelConfig& over) {
  for (const auto& [k, v] : over.values_) values_[k] = v;
}

int KernelConfig::Get(std::string_view name, int fallback) const {
  const auto it = values_.find(Strip(name));
  return it == values_.end() ? fallback : it->second;
}

bool KernelConfig::Has(std::string_view name) const {
  return values_.find(Strip(name)) != values_.end();
}

std::string KernelConfig::ToString() const {
  std::string s;
  for (const auto& [k, v] : values_) s += (s.empty() ? "" : " ") + k + "=" + std::to_string(v);
  return s;
}

}  // namespace gemma
