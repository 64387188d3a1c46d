// The logits recipe and option format of the sampling goldens (tools/fixtures/sampling_goldens.py,
// tests/goldens/sampling): shared by the golden test (sampling_golden_test.cc) and the
// WebAssembly conformance operations (web/src/conformance.cc), which run the same cases in both
// builds. Test support; the engine does not use it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "decode/sampling_options.h"

namespace gemma::decode::golden {

inline uint64_t Fmix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

inline float HexToFloat(const std::string& hex) {
  const uint32_t bits = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The logits recipe of tools/fixtures/sampling_goldens.py, reimplemented.
inline std::vector<float> RecipeLogits(const nlohmann::json& r) {
  const size_t n = r.at("vocab").get<size_t>();
  const uint64_t seed = r.at("seed").get<uint64_t>();
  const std::string kind = r.at("kind").get<std::string>();
  const int shift = r.at("shift").get<int>();
  const int64_t levels = r.value("levels", int64_t{0});
  const uint64_t neg_inf_mod = r.value("neg_inf_mod", uint64_t{0});
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t h = Fmix(seed * 0xD1B54A32D192ED03ULL + (i + 1) * 0x9E3779B97F4A7C15ULL);
    const int64_t u = static_cast<int64_t>(h >> 40);
    const int64_t q = kind == "uniform" ? u - (int64_t{1} << 23) : u % levels - levels / 2;
    x[i] = static_cast<float>(std::ldexp(static_cast<double>(q), -shift));
    if (neg_inf_mod > 0 && (h & 0xFFFF) % neg_inf_mod == 0) x[i] = -std::numeric_limits<float>::infinity();
  }
  if (r.contains("set")) {
    for (const auto& s : r.at("set"))
      x[s.at(0).get<size_t>()] = HexToFloat(s.at(1).get<std::string>());
  }
  return x;
}

inline std::string FloatsFnv(const std::vector<float>& x) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (float f : x) {
    unsigned char b[4];
    std::memcpy(b, &f, 4);  // little-endian hosts only, as the goldens
    for (unsigned char c : b) h = (h ^ c) * 0x100000001B3ULL;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// A golden case's "options" object as SamplingOptions (seed 0).
inline SamplingOptions OptionsFrom(const nlohmann::json& j) {
  SamplingOptions o;
  o.seed = 0;
  o.temperature = j.value("temperature", 1.0);
  o.top_k = j.value("top_k", 0);
  o.top_p = j.value("top_p", 1.0);
  o.typical_p = j.value("typical_p", 1.0);
  o.min_p = j.value("min_p", 0.0);
  o.repetition_penalty = j.value("repetition_penalty", 1.0);
  o.frequency_penalty = j.value("frequency_penalty", 0.0);
  o.presence_penalty = j.value("presence_penalty", 0.0);
  if (j.contains("logit_bias")) {
    for (const auto& b : j.at("logit_bias")) {
      o.logit_bias[b.at(0).get<int32_t>()] = HexToFloat(b.at(1).get<std::string>());
    }
  }
  return o;
}

}  // namespace gemma::decode::golden
