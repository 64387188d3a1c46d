// Deterministic random-weight Gemma 4 checkpoints with real shapes and formats, for benchmarks, the
// offline demo and loader tests. Not a trained model: the weights are noise scaled so activations
// stay finite and argmax is well defined.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
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
// "e2b-towers" and "e2b-towers-qat" (E2B's towers at full size on a small text model of width
// 1,536 whose 4,096 vocabulary has no media tokens: tower goldens and benchmarks), "tiny" and
// "tiny-qat" (E2B structure scaled down, real 262,144 vocabulary so the demo can use the Gemma
// tokenizer). e2b-bf16, e2b-qat, the e2b-towers pair, tiny and tiny-qat include a vision tower
// (E2B's: 16 layers of 768; tiny: 2 layers of 64) and an audio tower (E2B's: 12 conformer layers
// of 1024; tiny: 2 layers of 64).
std::vector<SynthPreset> SynthPresets();

// A checkpoint's structure. The presets fill the first fields; the rest default to the presets'
// layout (QAT: int2 embedding and head, int4 PLE table and attention, int4 MLP below the first
// KV-shared layer and int2 from it, int8 PLE gate/projection; dense: bf16, tied head).
struct SynthShape {
  int vocab, hidden, inter, layers, heads, kv_heads, head_dim, global_head_dim, window, kv_shared,
      ple_dim;
  std::vector<bool> full;  // layer is full attention
  bool double_wide;
  bool qat;
  // Per-layer bits (QAT; empty = the presets' layout). 8, 4 or 2.
  std::vector<int> attn_bits, mlp_bits, ple_bits;
  int embed_bits = 2;        // QAT: 0 = dense embed_tokens (then the head may be tied)
  int ple_embed_bits = 4;    // QAT: embed_tokens_per_layer
  int head_bits = 2;         // QAT, untied head
  std::optional<bool> tied;  // empty: dense models tied, QAT untied
  bool dense_f32 = false;    // dense linears and embeddings in f32 instead of bf16
  // > 0: every linear's SRQ input/output scale multiplied by its own factor in [1 - j, 1 + j]
  // (gate and up then have different input scales, as in real checkpoints).
  float scale_jitter = 0;
  // A well-conditioned text model (the E2B-width presets): residual-dominant layers (the branches'
  // post norms ~0.03, layer scalars 0.9-1), attention scores of unit spread (q/k norm weights
  // ~0.25 at head dims 256-512). Without it a random model of E2B's widths is chaotic: one bf16
  // ulp of one norm weight moves the reference's own logits by ~1 relative L2 (QAT: dozens of head
  // quanta) within a few positions, so no backend short of bit-identity could be compared with
  // it (bench/journal/2026-12-03-mini-conditioning.md). Off: the original draws (the tiny
  // presets, whose goldens are committed).
  bool conditioned = false;
  // The image tower (model.vision_tower.*, model.embed_vision.*); vision_layers 0 = none. Dense
  // bf16, int8 in QAT checkpoints (the published rule), clippable linears with finite bounds.
  int vision_hidden = 0, vision_inter = 0, vision_layers = 0, vision_heads = 0,
      vision_head_dim = 0, vision_positions = 0;
  // The audio tower (model.audio_tower.*, model.embed_audio.*); audio_layers 0 = none. Dense bf16,
  // in QAT checkpoints the published rules (2-bit, linear_start 4-bit; the SSCP, relative_k_proj,
  // output_proj and embed_audio dense).
  int audio_hidden = 0, audio_layers = 0, audio_heads = 0, audio_channels = 0, audio_out = 0;
};

// A random small structure for differential tests: window 4-32, 3-12 layers, any sliding/full
// pattern (the last layer full, as transformers forces) with 0-4 KV-shared layers (each shared
// layer's type owned by an earlier layer), 1-4 heads, head dims 16/32 and full-layer dims 1x/2x
// those, tied or untied head; QAT: int2/int4/int8 per module kind and layer, jittered SRQ scales;
// dense: bf16 or f32.
SynthShape RandomSynthShape(uint64_t seed, bool qat);
std::string DescribeSynthShape(const SynthShape& s);

struct SynthOptions {
  std::string preset = "tiny";
  std::string out_dir;
  uint64_t seed = 1;
  int sliding_window = 0;  // > 0: the sliding layers' window instead of the preset's (tests)
  std::optional<SynthShape> shape;  // set: this structure instead of the preset's
  // "hub": the published repositories' file set (google/gemma-4-E2B-it and its QAT sibling) on
  // top of the weights: generation_config.json (model-card sampling defaults),
  // processor_config.json, chat_template.jinja (the built-in canonical template's source), vision_config/audio_config in config.json and small vision/audio
  // tower tensors that a text-only loader must skip. "" writes weights and config.json only.
  std::string layout = {};
  // > 1: model-0000k-of-0000N.safetensors shards plus model.safetensors.index.json, as
  // transformers' save_pretrained writes them, instead of one model.safetensors.
  int shards = 0;
  int vocab_size = 0;  // >= 1024: the vocabulary instead of the preset's (fast test models)
  // Called as the weights are written (fraction done, 0..1), for progress output.
  std::function<void(double)> progress;
};

// Writes out_dir/config.json, out_dir/model.safetensors (or shards and the index; see layout and
// shards above) and out_dir/tokenizer.json (from SyntheticTokenizerJson, so text in and text out
// work on every preset; not for vocabularies under 1,024 ids). Throws Error(kInvalidArgument) for an unknown preset, Error(kIo) on write
// failures.
void Synthesize(const SynthOptions& options);

// A valid tokenizer.json with exactly `vocab_size` ids (>= 1024): Gemma's <pad> <eos> <bos> <unk>
// at 0-3, the Gemma 4 special tokens at their ids (those below vocab_size), byte fallback, ASCII
// characters and made-up syllables. Deterministic. Not Gemma's vocabulary: for synthetic models.
std::string SyntheticTokenizerJson(int vocab_size);

}  // namespace gemma
