// Deterministic random-weight Gemma 4 checkpoints with real shapes and formats, for benchmarks, the
// offline demo and loader tests. Not a trained model: the weights are noise scaled so activations
// stay finite and argmax is well defined.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gemma {

struct SynthPreset {
  std::string name;
  std::string description;
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
  // "hub": the published repositories' file set (google/gemma-4-E2B-it and its QAT sibling) on
  // top of the weights: generation_config.json (model-card sampling defaults),
  // processor_config.json, vision_config/audio_config in config.json and small vision/audio
  // tower tensors that a text-only loader must skip. "" writes weights and config.json only.
  std::string layout = {};
  // > 1: model-0000k-of-0000N.safetensors shards plus model.safetensors.index.json, as
  // transformers' save_pretrained writes them, instead of one model.safetensors.
  int shards = 0;
};

// Writes out_dir/config.json and out_dir/model.safetensors (or shards and the index; see layout
// and shards above). Throws Error(kInvalidArgument) for an
// unknown preset, Error(kIo) on write failures.
void Synthesize(const SynthOptions& options);

}  // namespace gemma
