// config.json of a Gemma 4 checkpoint: the top-level Gemma4Config (text_config inside) or a bare
// Gemma4TextConfig, plus the mobile-QAT quantization_config. Parsing validates every value the
// engine uses; unsupported features raise Error(kUnsupported), bad values Error(kConfig), naming
// the key.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "format/module_pattern.h"

namespace gemma {

enum class LayerType { kSliding, kFull };

struct RopeParams {
  enum class Type { kDefault, kProportional } type = Type::kDefault;
  double theta = 10000.0;
  double partial_rotary_factor = 1.0;
  double factor = 1.0;
};

// quantization_config with quant_method "gemma" (mobile QAT).
struct QuantConfig {
  bool enabled = false;
  int default_bits = 4;
  bool quantize_embeddings = false;
  struct Rule {
    std::string pattern;
    ModulePattern re;
    int bits;
  };
  std::vector<Rule> rules;               // module_quant_configs, declaration order
  std::vector<std::string> not_convert;  // modules_to_not_convert
  std::vector<ModulePattern> not_convert_re;

  // Bits for a module (HF module name, e.g. "model.layers.3.mlp.up_proj"), or nullopt when the
  // module stays dense (quantization off, or listed in modules_to_not_convert). Semantics follow
  // transformers: skip-list entries match as a regex at the start of the name or as a suffix; the
  // override is the leftmost match of the joined alternation, first pattern winning ties.
  // Patterns are Python regexes matched in bounded time (format/module_pattern.h); a name or
  // pattern beyond its bounds is Error(kConfig).
  std::optional<int> BitsFor(const std::string& module, bool is_embedding) const;
};

struct TextConfig {
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;                 // sliding layers
  int global_head_dim = 0;          // full layers (global_head_dim or per_layer_config)
  std::vector<int> layer_head_dim;  // resolved per layer
  std::vector<LayerType> layer_types;
  int sliding_window = 0;
  int num_kv_shared_layers = 0;
  bool use_double_wide_mlp = false;
  int hidden_size_per_layer_input = 0;  // 0 = no PLE
  int vocab_size_per_layer_input = 0;
  float rms_norm_eps = 1e-6f;
  std::optional<float> final_logit_softcapping;
  bool tie_word_embeddings = true;
  int max_position_embeddings = 0;
  RopeParams rope_sliding;
  RopeParams rope_full;
  int bos_token_id = 2;
  int pad_token_id = 0;
  std::vector<int> eos_token_ids;
};

// vision_config of a Gemma4Config (Gemma4VisionConfig): the ViT image tower.
struct VisionConfig {
  int hidden_size = 768;
  int intermediate_size = 3072;
  int num_layers = 16;
  int num_heads = 12;
  int num_kv_heads = 12;
  int head_dim = 64;
  int patch_size = 16;
  int pooling_kernel_size = 3;
  int position_embedding_size = 10240;
  RopeParams rope;  // "default" or "axial": theta, frequencies over head_dim / 2 per axis
  bool use_clipped_linears = false;
  bool standardize = false;
  float rms_norm_eps = 1e-6f;
};

// audio_config of a Gemma4Config (Gemma4AudioConfig): the USM conformer audio tower.
struct AudioConfig {
  int hidden_size = 1024;
  int num_layers = 12;
  int num_heads = 8;
  int sscp_channels0 = 128, sscp_channels1 = 32;  // subsampling_conv_channels
  int conv_kernel_size = 5;
  float residual_weight = 0.5f;
  int chunk_size = 12;
  int context_left = 13;  // keys 0 <= q - k < context_left - 1 (transformers' sliding mask)
  int context_right = 0;
  float logit_cap = 50.0f;
  float invalid_logits = -1e9f;
  bool use_clipped_linears = true;
  float rms_norm_eps = 1e-6f;
  float gradient_clipping = 1e10f;  // min(config, f32 max)
  int output_proj_dims = 1536;
  int head_dim() const { return hidden_size / num_heads; }
};

struct ModelConfig {
  TextConfig text;
  QuantConfig quant;
  bool multimodal_wrapper = false;  // top-level Gemma4Config (model_type "gemma4")
  // Multimodal placeholder ids replaced by pad for the embedding lookups (gemma4 wrapper only).
  std::vector<int> placeholder_token_ids;
  // The image tower (gemma4 wrapper with a usable vision_config); vision_error says why not when
  // a vision_config is present but cannot be used.
  std::optional<VisionConfig> vision;
  std::string vision_error;
  int image_token_id = -1, boi_token_id = -1, eoi_token_id = -1, video_token_id = -1;
  // The audio tower (gemma4 wrapper with a usable audio_config); audio_error says why not.
  std::optional<AudioConfig> audio;
  std::string audio_error;
  int audio_token_id = -1, boa_token_id = -1, eoa_token_id = -1;
  std::string origin;  // path, for error messages
};

// Parses config.json text. `origin` names the file in errors.
ModelConfig ParseModelConfig(const std::string& json_text, const std::string& origin);
// Reads DIR/config.json (or the file itself when `path` is a .json file).
ModelConfig LoadModelConfig(const std::string& path);

}  // namespace gemma
