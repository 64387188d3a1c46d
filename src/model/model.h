// The Gemma 4 text decoder, planned from config and bound to checkpoint tensors.
//
// Nothing here is E2B-specific: layer types, head dims, KV-sharing owners, MLP widths, PLE and the
// head all come from the config. Weights are views into the memory-mapped checkpoint (no copies),
// except the small norm vectors and scalars, which are converted to f32 at bind time.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "format/config.h"
#include "format/safetensors.h"

namespace gemma {

// How a weight matrix is stored. Dense kinds compute y = x W^T in f32; quantized kinds hold packed
// signed integers v (offset binary, LSB first for 2/4 bits) with a per-row f32 scale: W = v *
// scale.
enum class WeightKind { kF32, kBF16, kF16, kQ2, kQ4, kQ8 };

const char* WeightKindName(WeightKind k);
int WeightKindBits(WeightKind k);  // 2, 4, 8 for quantized kinds; 16/32 for dense
inline bool IsQuantized(WeightKind k) {
  return k == WeightKind::kQ2 || k == WeightKind::kQ4 || k == WeightKind::kQ8;
}

// A logit before the final softcap: cap * atanh(logit / cap), the logit itself without a cap (0).
// An SRQ-quantized LM head's outputs are whole quanta there (the QAT allowance's unit).
inline double UncappedLogit(float logit, float softcap) {
  return softcap > 0 ? softcap * std::atanh(static_cast<double>(logit) / softcap)
                     : static_cast<double>(logit);
}

// A linear layer y = srq_out( srq_in(x) W^T ), W is [rows=out, cols=in].
// SRQ (static range quantization, transformers' apply_srq): srq(z, s) = s == 0 ? z
//   : clamp(round_half_even(z / s), -128, 127) * s, computed in f32.
struct Linear {
  std::string name;  // HF module name, for errors and reports
  WeightKind kind = WeightKind::kF32;
  int rows = 0, cols = 0;
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;              // bytes per row (the stride between rows when interleave is 1)
  const float* row_scale = nullptr;  // quantized kinds: [rows]
  float in_scale = 0.0f;             // SRQ input scale, 0 = none
  float out_scale = 0.0f;            // SRQ output scale, 0 = none
  // 1: rows one after another (checkpoints, every backend's input). 4: the fast CPU backend's copy
  // of a packed linear whose rows are whole 64-byte blocks, stored in groups of 4 rows block by
  // block (row r's block b at (r / 4) * 4 * row_bytes + b * 256 + (r % 4) * 64, the last group
  // padded to 4 rows), so that the 4-row tiles read one sequential stream (fast/weight_copy.h).
  int interleave = 1;
};

// An embedding table. Quantized tables have `scale_blocks` f32 scales per row (block = cols /
// scale_blocks columns). Lookup: row(id) * embed_scale, all in f32.
struct Embedding {
  std::string name;
  WeightKind kind = WeightKind::kF32;
  int rows = 0, cols = 0;
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
  const float* scale = nullptr;  // [rows, scale_blocks] for quantized kinds
  int scale_blocks = 1;
  float embed_scale = 1.0f;  // f32(sqrt(dim)) as the f32 reference applies it
  // A table left on disk (data null: an unmappable checkpoint, TensorSource's deferred tensors):
  // copies row id's row_bytes bytes into dst.
  std::function<void(int32_t id, uint8_t* dst)> read_row;
};

// Row id's stored bytes: in the table, or (a table left on disk) read into a buffer of the calling
// thread that stays valid until its next call.
const uint8_t* EmbeddingRowBytes(const Embedding& e, int32_t id);

struct LayerPlan {
  int index = 0;
  LayerType type = LayerType::kSliding;
  int head_dim = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int intermediate = 0;
  int window = 0;          // sliding window (keys incl. self), 0 for full attention
  bool kv_shared = false;  // reads another layer's cache
  int kv_layer = 0;        // layer whose K/V this layer attends to (itself when it owns a cache)
  int cache_slot = -1;     // index among owned caches, -1 for shared layers
  const RopeParams* rope = nullptr;
};

struct LayerWeights {
  std::vector<float> input_norm, post_attn_norm, pre_ffn_norm, post_ffn_norm;
  std::vector<float> q_norm, k_norm;  // k_norm empty on shared layers
  Linear q, k, v, o;                  // k, v unused on shared layers
  Linear gate, up, down;
  std::vector<float> post_ple_norm;  // empty without PLE
  Linear ple_gate, ple_proj;
  float layer_scalar = 1.0f;
};

// A Gemma4ClippableLinear: y = clamp(W clamp(x, in_min, in_max), out_min, out_max); the bounds
// are +-inf without use_clipped_linears.
struct ClippedLinear {
  Linear lin;
  float in_min = -std::numeric_limits<float>::infinity();
  float in_max = std::numeric_limits<float>::infinity();
  float out_min = -std::numeric_limits<float>::infinity();
  float out_max = std::numeric_limits<float>::infinity();
};

struct VisionLayerWeights {
  std::vector<float> input_norm, post_attn_norm, pre_ffn_norm, post_ffn_norm;
  std::vector<float> q_norm, k_norm;  // [head_dim]
  ClippedLinear q, k, v, o, gate, up, down;
};

// The image tower (model.vision_tower.*) and its projection into the text model
// (model.embed_vision.*).
struct VisionTower {
  VisionConfig config;
  Linear input_proj;             // [hidden, 3 * patch^2]
  Embedding position_table;      // [2 * position_embedding_size, hidden]: x rows, then y rows
  std::vector<VisionLayerWeights> layers;
  std::vector<float> std_bias, std_scale;  // standardize only
  Linear embed_proj;             // embed_vision.embedding_projection [text hidden, hidden]
};

struct AudioLayerWeights {
  struct FeedForward {
    std::vector<float> pre_norm, post_norm;
    ClippedLinear up, down;  // ffw_layer_1 [4 hidden, hidden], ffw_layer_2 [hidden, 4 hidden]
  };
  FeedForward ff1, ff2;
  std::vector<float> norm_pre_attn, norm_post_attn, norm_out;
  ClippedLinear q, k, v, post;
  Linear relative_k;                 // relative_k_proj [hidden, hidden]
  std::vector<float> per_dim_scale;  // [head_dim]
  std::vector<float> lconv_pre_norm, lconv_conv_norm;
  ClippedLinear lconv_start, lconv_end;  // [2 hidden, hidden], [hidden, hidden]
  std::vector<float> dwconv;             // depthwise_conv1d [hidden, kernel]
};

// The audio tower (model.audio_tower.*) and its projection into the text model
// (model.embed_audio.*).
struct AudioTower {
  AudioConfig config;
  std::vector<float> conv0, conv1;  // [C0, 1, 3, 3], [C1, C0, 3, 3]
  std::vector<float> norm0, norm1;  // LayerNorm weights [C0], [C1]
  Linear input_proj;                // [hidden, 32 * C1]
  std::vector<AudioLayerWeights> layers;
  Linear output_proj;              // [output_proj_dims, hidden]
  std::vector<float> output_bias;  // [output_proj_dims]
  Linear embed_proj;               // embed_audio.embedding_projection [text hidden, dims]
};

// Binds the audio tower of a checkpoint on its own (Model::Load does this for a whole model).
// Throws gemma::Error (kMissingTensor, kShape, ...) when tensors are missing or wrong.
AudioTower BindAudioTower(const ModelConfig& config, const TensorSource& source);

class Model {
 public:
  // Loads config.json and the checkpoint from a directory (or a .safetensors file with
  // config.json beside it), validates every tensor against the config. Throws gemma::Error.
  // mmap = false: the checkpoint is read into memory as an unmappable one is (the per-layer
  // embedding table stays on disk, read a row per token).
  static std::unique_ptr<Model> Load(const std::string& path, bool mmap = true);
  static std::unique_ptr<Model> FromSource(ModelConfig config,
                                           std::unique_ptr<TensorSource> source);

  const ModelConfig& config() const { return config_; }
  const TextConfig& text() const { return config_.text; }
  const std::vector<LayerPlan>& layers() const { return layers_; }
  const std::vector<LayerWeights>& layer_weights() const { return weights_; }
  int num_caches() const { return num_caches_; }
  // First layer of the trailing run of KV-shared layers (num_layers when there is none). Those
  // layers write no cache, so a position's hidden state there feeds only its own logits.
  int shared_tail() const { return shared_tail_; }
  const Embedding& embed() const { return embed_; }
  const Embedding& ple_embed() const { return ple_embed_; }  // rows == 0 without PLE
  const Linear& ple_model_proj() const { return ple_model_proj_; }
  const std::vector<float>& ple_proj_norm() const { return ple_proj_norm_; }
  const std::vector<float>& final_norm() const { return final_norm_; }
  const Linear& lm_head() const { return lm_head_; }
  const TensorSource& source() const { return *source_; }
  // The vision tower, or null (vision_error() says why: no vision_config, or tensors missing).
  const VisionTower* vision() const { return vision_ ? &*vision_ : nullptr; }
  const std::string& vision_error() const { return vision_error_; }
  // The audio tower, or null (audio_error() says why).
  const AudioTower* audio() const { return audio_ ? &*audio_ : nullptr; }
  const std::string& audio_error() const { return audio_error_; }
  bool quantized() const { return config_.quant.enabled; }
  // The token id used for embedding lookups (multimodal placeholders map to pad).
  int32_t EmbedId(int32_t token) const;

  float ple_model_proj_scale() const { return ple_model_proj_scale_; }  // f32(hidden^-0.5)
  float ple_input_scale() const { return ple_input_scale_; }            // f32(2^-0.5)
  // Bytes of weights read per decoded token (excludes the PLE table but its one row, and the
  // unused K/V projections of shared layers).
  size_t BytesPerToken() const;
  // Load time in ms spent in Load (mapping, validation, binding).
  double load_ms() const { return load_ms_; }

 private:
  void Plan();
  void Bind();

  ModelConfig config_;
  std::unique_ptr<TensorSource> source_;
  std::string prefix_;  // "model.language_model." or "model."
  std::vector<LayerPlan> layers_;
  std::vector<LayerWeights> weights_;
  int num_caches_ = 0;
  int shared_tail_ = 0;
  Embedding embed_, ple_embed_;
  Linear ple_model_proj_;
  std::vector<float> ple_proj_norm_, final_norm_;
  Linear lm_head_;
  std::optional<VisionTower> vision_;
  std::string vision_error_;
  std::optional<AudioTower> audio_;
  std::string audio_error_;
  float ple_model_proj_scale_ = 1.0f, ple_input_scale_ = 1.0f;
  double load_ms_ = 0;
};

}  // namespace gemma
