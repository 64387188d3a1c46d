// Shared helpers for tests against the transformers goldens in tests/goldens/ (made by
// tools/fixtures/*_goldens.py): loading, .f32 files, relative L2, and the SRQ-flip criterion for
// QAT fixtures.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gemma/engine.h"
#include "model/model.h"

namespace gemma {

struct Golden {
  std::string dir;
  std::vector<std::vector<int32_t>> prompts, greedy;
  std::vector<std::vector<float>> logits;  // [prompt][T * V]
};

inline Golden LoadGolden(const std::string& name) {
  Golden g;
  g.dir = std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/model/" + name;
  std::ifstream f(g.dir + "/goldens.json");
  nlohmann::json j = nlohmann::json::parse(f);
  g.prompts = j["prompts"].get<std::vector<std::vector<int32_t>>>();
  g.greedy = j["greedy"].get<std::vector<std::vector<int32_t>>>();
  for (size_t i = 0; i < g.prompts.size(); ++i) {
    std::ifstream lf(g.dir + "/logits_" + std::to_string(i) + ".f32",
                     std::ios::binary | std::ios::ate);
    const size_t bytes = static_cast<size_t>(lf.tellg());
    lf.seekg(0);
    std::vector<float> out(bytes / 4);
    lf.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(bytes));
    g.logits.push_back(std::move(out));
  }
  return g;
}

// A little-endian float32 file (the fixtures' .f32 goldens); empty when it cannot be read.
inline std::vector<float> ReadF32(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> b((std::istreambuf_iterator<char>(f)), {});
  std::vector<float> v(b.size() / 4);
  if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

inline double RelL2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// With SRQ on the head's output, every logit is a multiple of the head's output quantum (before the
// softcap). Where an exact value sits within f32 rounding noise of a rounding boundary,
// transformers' float32 sums (order unknown) and our exact integer accumulation may round it
// differently; once such a flip lands in a cached key or a residual, later positions carry a small
// perturbation that moves some logits across the head's rounding boundaries. Such positions are
// accepted only if every logit is within two head quanta of transformers' (about 2% of a typical
// logit here) and at most half of them moved, and only after the first kExactPrefix positions of a
// prompt, which must match to 1e-4 like the dense fixtures. The count of such positions is recorded
// as a test property.
constexpr size_t kExactPrefix = 8;

inline bool IsSrqFlip(const Model& model, const float* ours, const float* ref, int V) {
  const float q = model.lm_head().out_scale;
  if (!(q > 0)) return false;
  const float cap = model.text().final_logit_softcapping.value_or(0.0f);
  int flipped = 0;
  for (int v = 0; v < V; ++v) {
    if (cap > 0 && (std::fabs(ours[v]) > 0.9999f * cap || std::fabs(ref[v]) > 0.9999f * cap))
      return false;
    const double d = (UncappedLogit(ours[v], cap) - UncappedLogit(ref[v], cap)) / q;
    const double k = std::nearbyint(d);
    if (std::fabs(d - k) > 1e-2 || std::fabs(k) > 2) return false;
    flipped += k != 0;
  }
  return flipped <= V / 2;
}

// Greedy decoding through a backend: prefill `prompt`, then feed each argmax back, n tokens in all.
inline std::vector<int32_t> GreedyDecode(Backend& b, const std::vector<int32_t>& prompt, size_t n) {
  ForwardResult r;
  b.Forward({.tokens = prompt, .mode = OutputMode::kArgmax}, &r);
  std::vector<int32_t> got = {r.ids.back()};
  while (got.size() < n) {
    const int32_t tok = got.back();
    b.Forward({.tokens = std::span<const int32_t>(&tok, 1), .mode = OutputMode::kArgmax}, &r);
    got.push_back(r.ids.back());
  }
  return got;
}

// Names of the fixture directories that hold goldens.
inline std::vector<std::string> Fixtures() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(std::string(GEMMA_SOURCE_DIR) +
                                                           "/tests/goldens/model")) {
    if (std::filesystem::exists(e.path() / "goldens.json"))
      names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The backends the media golden tests run: the CPU reference, and the fast CPU and Vulkan backends
// where they are built (GEMMA_HAVE_CPU_FAST, GEMMA_HAVE_VULKAN).
inline std::vector<std::string> GoldenBackends() {
  std::vector<std::string> b = {"cpu-ref"};
#ifdef GEMMA_HAVE_CPU_FAST
  b.push_back("cpu");
#endif
#ifdef GEMMA_HAVE_VULKAN
  b.push_back("vulkan");
#endif
  return b;
}

// Engine::Load, or null (said on stdout) for the Vulkan backend on a machine without a usable
// Vulkan device.
inline std::shared_ptr<Engine> LoadForGolden(const EngineOptions& options) {
  try {
    return Engine::Load(options);
  } catch (const Error& e) {
    if (options.backend != "vulkan" || e.code() != ErrorCode::kDevice) throw;
    std::printf("vulkan: no usable device, skipped (%s)\n", e.what());
    return nullptr;
  }
}

}  // namespace gemma
