// Deterministic random-weight Gemma 4 checkpoints with real shapes and formats, for benchmarks, the
// offline demo and loader tests. Not a trained model: the weights are noise scaled so activations
// stay finite and argmax is well defined.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gemma {

struct SynthPreset {
  std::string name;
  std::string description;
  int vocab_size = 0;
};

// Presets: "e2b-bf16" (exact E2B text shapes, bf16, tied head, Gemma4ForConditionalGeneration
// names), "e2b-qat" (the published mobile-QAT layout: int2/int4/int8 packed, per-layer PLE scales,
// SRQ scales, separate int2 lm_head), "e2b-qat-mini" (e2b-qat's widths and kinds on 10 layers and
// a 32,768 vocabulary: the full-width kernels at test cost), "e2b-bf16-mini" (the same in bf16),
// "tiny" and "tiny-qat" (E2B structure
// scaled down, real 262,144 vocabulary so the demo can use the Gemma tokenizer).
std::vector<SynthPreset> SynthPresets();

struct SynthOptions {
  std::string preset = "tiny";
  std::string out_dir;
  uint64_t seed = 1;
  int sliding_window = 0;  // > 0: the sliding layers' window instead of the preset's (tests)
  int vocab_size = 0;      // >= 1024: the vocabulary instead of the preset's (fast test models)
  // Called as the weights are written (fraction done, 0..1), for progress output.
  std::function<void(double)> progress;
};

// Writes out_dir/config.json, out_dir/model.safetensors and out_dir/tokenizer.json (from
// SyntheticTokenizerJson, so text in and text out work on every preset). Throws
// Error(kInvalidArgument) for an unknown preset, Error(kIo) on write failures.
void Synthesize(const SynthOptions& options);

// A valid tokenizer.json with exactly `vocab_size` ids (>= 1024): Gemma's <pad> <eos> <bos> <unk>
// at 0-3, the Gemma 4 special tokens at their ids (those below vocab_size), byte fallback, ASCII
// characters and made-up syllables. Deterministic. Not Gemma's vocabulary: for synthetic models.
std::string SyntheticTokenizerJson(int vocab_size);

}  // namespace gemma
