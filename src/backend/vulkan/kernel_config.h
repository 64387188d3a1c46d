// Kernel choices of the Vulkan backend, as a value.
//
// Every choice has a measured default, written where the backend reads it (with the measurement
// and the journal entry); a KernelConfig overrides some of them by name, for benchmarks that
// compare variants and tests that cover every shipped path. Text form: entries separated by
// spaces or ';', each NAME=INTEGER ("ATTN_FUSED=1 MV_WGS=-4"; names as docs/vulkan.md lists them,
// a GEMMA_VULKAN_ prefix accepted). The backend reads no environment variable per choice: the one
// developer override is GEMMA_VULKAN_KERNELS (the same text), applied over VulkanOptions::kernels.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace gemma {

class KernelConfig {
 public:
  KernelConfig() = default;
  // Throws Error(kInvalidArgument) naming the malformed entry.
  static KernelConfig Parse(std::string_view text);
  // GEMMA_VULKAN_KERNELS, parsed (empty when unset).
  static KernelConfig FromEnvironment();

  KernelConfig& Set(std::string_view name, int value);
  // `over`'s entries replace this config's.
  void Apply(const KernelConfig& over);
  int Get(std::string_view name, int fallback) const;
  bool Has(std::string_view name) const;
  bool empty() const { return values_.empty(); }
  std::string ToString() const;

 private:
  std::map<std::string, int, std::less<>> values_;
};

}  // namespace gemma
