// generation_config.json: the sampling defaults a checkpoint's authors publish (Gemma 4's model
// card: temperature 1.0, top-k 64, top-p 0.95). Only fields present in the file are set, so a
// caller can apply each one exactly when its own request left that option unset.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace gemma {

struct GenerationDefaults {
  std::optional<bool> do_sample;  // transformers: false = greedy whatever temperature says
  std::optional<double> temperature;
  std::optional<int> top_k;
  std::optional<double> top_p;
  std::optional<double> min_p;
  std::optional<double> typical_p;
  std::optional<double> repetition_penalty;
  std::optional<int> max_new_tokens;
  std::vector<int> eos_token_ids;  // int or list in the file
  std::string origin;              // the file, empty when the checkpoint has none

  bool empty() const { return origin.empty(); }
  // The temperature to use when the request sets none: 0 (greedy) when do_sample is false.
  std::optional<double> EffectiveTemperature() const;
};

// Parses the JSON text; a wrong type (e.g. "top_k": "64") raises Error(kConfig) naming the key.
GenerationDefaults ParseGenerationDefaults(const std::string& json_text, const std::string& origin);
// Reads DIR/generation_config.json (beside the weights when `path` is a file). A checkpoint without
// one yields empty defaults, not an error.
GenerationDefaults LoadGenerationDefaults(const std::string& path);

}  // namespace gemma
