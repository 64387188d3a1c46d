#include "model/synth.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "chat/template_check.h"
#include "core/dtype.h"
#include "format/safetensors_writer.h"
#include "gemma/error.h"

namespace gemma {
namespace {

using Shape = SynthShape;

// The presets' fields (the per-layer bits and the rest keep their defaults).
Shape Base(int vocab, int hidden, int inter, int layers, int heads, int kv_heads, int head_dim,
           int global_head_dim, int window, int kv_shared, int ple_dim, bool qat) {
  Shape s{};
  s.vocab = vocab;
  s.hidden = hidden;
  s.inter = inter;
  s.layers = layers;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.head_dim = head_dim;
  s.global_head_dim = global_head_dim;
  s.window = window;
  s.kv_shared = kv_shared;
  s.ple_dim = ple_dim;
  s.double_wide = true;
  s.qat = qat;
  return s;
}

// E2B's vision tower (16 x 768, 12 heads) and audio tower (12 conformer layers x 1,024).
void SetE2bTowers(Shape& s) {
  s.vision_hidden = 768, s.vision_inter = 3072, s.vision_layers = 16, s.vision_heads = 12;
  s.vision_head_dim = 64, s.vision_positions = 10240;
  s.audio_hidden = 1024, s.audio_layers = 12, s.audio_heads = 8, s.audio_channels = 32;
  s.audio_out = 1536;
}

Shape MakeShape(const std::string& preset) {
  if (preset == "e2b-bf16" || preset == "e2b-qat") {
    Shape s = Base(262144, 1536, 6144, 35, 8, 1, 256, 512, 512, 20, 256, preset == "e2b-qat");
    for (int l = 0; l < 35; ++l) s.full.push_back(l % 5 == 4);
    s.conditioned = true;
    SetE2bTowers(s);
    return s;
  }
  if (preset == "e2b-qat-mini" || preset == "e2b-bf16-mini") {
    // E2B's widths and kinds (every kernel shape of its decode step) on 10 layers and a 32,768
    // vocabulary: two full-attention layers (4, 9; 9 shares 4's K/V), three KV-shared
    // double-wide layers. ~0.25 GB (QAT), ~0.8 GB (bf16).
    Shape s = Base(32768, 1536, 6144, 10, 8, 1, 256, 512, 512, 3, 256, preset == "e2b-qat-mini");
    for (int l = 0; l < 10; ++l) s.full.push_back(l % 5 == 4);
    s.conditioned = true;
    return s;
  }
  if (preset == "e2b-towers" || preset == "e2b-towers-qat") {
    // E2B's vision and audio towers at full size (and embed_vision / embed_audio into E2B's
    // hidden 1,536) on a small text model: the towers' goldens and benchmarks without the
    // 9.5 GB text model. The media token ids lie outside its 4,096 vocabulary: towers only.
    Shape s = Base(4096, 1536, 256, 6, 2, 1, 32, 64, 16, 2, 16, preset == "e2b-towers-qat");
    s.full = {false, false, true, false, false, true};
    s.conditioned = true;
    SetE2bTowers(s);
    return s;
  }
  if (preset == "tiny" || preset == "tiny-qat") {
    Shape s = Base(262144, 128, 256, 6, 2, 1, 32, 64, 16, 2, 16, preset == "tiny-qat");
    s.full = {false, false, true, false, false, true};
    s.vision_hidden = 64, s.vision_inter = 128, s.vision_layers = 2, s.vision_heads = 2;
    s.vision_head_dim = 32, s.vision_positions = 1024;
    s.audio_hidden = 64, s.audio_layers = 2, s.audio_heads = 2, s.audio_channels = 8;
    s.audio_out = 96;
    return s;
  }
  std::string names;
  for (const SynthPreset& p : SynthPresets()) names += (names.empty() ? "" : ", ") + p.name;
  throw Error(ErrorCode::kInvalidArgument,
              "synth: unknown preset '" + preset + "' (" + names + ")");
}

uint64_t Hash(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// xoshiro-style fast generator; deterministic per (tensor, row).
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  uint64_t Next() {
    s += 0x9E3779B97F4A7C15ull;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float Uniform() { return static_cast<float>(Next() >> 40) * (2.0f / 16777216.0f) - 1.0f; }
};

// rms of integers uniform over [-m, m], m = 2^(b-1) - 1: sqrt(m (m + 1) / 3).
float PackedRms(int bits) {
  const float m = static_cast<float>((1 << (bits - 1)) - 1);
  return std::sqrt(m * (m + 1) / 3.0f);
}

class Builder {
 public:
  Builder(uint64_t seed, bool qat, bool dense_f32 = false, float jitter = 0)
      : seed_(seed), qat_(qat), dense_f32_(dense_f32), jitter_(jitter) {}

  // A dense matrix in the checkpoint's dense type (bf16, or f32 where asked).
  void Dense(const std::string& name, std::vector<int64_t> shape, float amp) {
    if (!dense_f32_) return Bf16(name, std::move(shape), amp);
    const int64_t cols = shape.size() == 1 ? shape[0] : shape[1];
    const uint64_t key = Hash(name, seed_);
    w_.Add(name, DType::kF32, shape, [=](int64_t b, int64_t e, uint8_t* dst) {
      for (int64_t r = b; r < e; ++r) {
        Rng rng(key + static_cast<uint64_t>(r));
        float* row = reinterpret_cast<float*>(dst) + (r - b) * cols;
        for (int64_t c = 0; c < cols; ++c) row[c] = amp * rng.Uniform();
      }
    });
  }

  // An SRQ scale, jittered per tensor where asked.
  float Jitter(const std::string& name, float v) const {
    if (jitter_ <= 0) return v;
    Rng rng(Hash(name, seed_ ^ 0x5eed));
    return v * (1.0f + jitter_ * rng.Uniform());
  }

  // Dense bf16 matrix, uniform in [-amp, amp] (+ offset).
  void Bf16(const std::string& name, std::vector<int64_t> shape, float amp, float offset = 0) {
    const int64_t cols = shape.size() == 1 ? shape[0] : shape[1];
    const uint64_t key = Hash(name, seed_);
    w_.Add(name, DType::kBF16, shape, [=](int64_t b, int64_t e, uint8_t* dst) {
      for (int64_t r = b; r < e; ++r) {
        Rng rng(key + static_cast<uint64_t>(r));
        uint16_t* row = reinterpret_cast<uint16_t*>(dst) + (r - b) * cols;
        for (int64_t c = 0; c < cols; ++c) row[c] = F32ToBf16(offset + amp * rng.Uniform());
      }
    });
  }

  // Dense bf16 tensor of any rank, uniform in [-amp, amp]: one fill row = the first dimension.
  void Bf16Block(const std::string& name, std::vector<int64_t> shape, float amp) {
    int64_t cols = 1;
    for (size_t i = 1; i < shape.size(); ++i) cols *= shape[i];
    const uint64_t key = Hash(name, seed_);
    w_.Add(name, DType::kBF16, shape, [=](int64_t b, int64_t e, uint8_t* dst) {
      for (int64_t r = b; r < e; ++r) {
        Rng rng(key + static_cast<uint64_t>(r));
        uint16_t* row = reinterpret_cast<uint16_t*>(dst) + (r - b) * cols;
        for (int64_t c = 0; c < cols; ++c) row[c] = F32ToBf16(amp * rng.Uniform());
      }
    });
  }

  void F32Scalar(const std::string& name, std::vector<int64_t> shape, float v) {
    std::vector<uint8_t> b(4);
    std::memcpy(b.data(), &v, 4);
    w_.AddBytes(name, DType::kF32, std::move(shape), std::move(b));
  }

  // Packed random integers, symmetric: v uniform in [-m, m] with m = 2^(b-1) - 1 (the format's most
  // negative value is left out, or every row would have mean -0.5 and the network a common-mode
  // drift that saturates the SRQ'd head).
  void Packed(const std::string& name, int64_t rows, int64_t cols, int bits) {
    const int64_t pc = bits == 8 ? cols : (cols * bits + 7) / 8;
    const uint64_t key = Hash(name, seed_);
    const int m = (1 << (bits - 1)) - 1;
    w_.Add(name, bits == 8 ? DType::kI8 : DType::kU8, {rows, pc},
           [=](int64_t b, int64_t e, uint8_t* dst) {
             for (int64_t r = b; r < e; ++r) {
               Rng rng(key + static_cast<uint64_t>(r));
               uint8_t* row = dst + (r - b) * pc;
               std::memset(row, 0, static_cast<size_t>(pc));
               uint64_t bitsrc = 0;
               int left = 0;
               for (int64_t c = 0; c < cols; ++c) {
                 if (left == 0) {
                   bitsrc = rng.Next();
                   left = 8;
                 }
                 const int v = static_cast<int>((bitsrc & 0xff) % (2 * m + 1)) - m;
                 bitsrc >>= 8;
                 --left;
                 if (bits == 8) {
                   row[c] = static_cast<uint8_t>(static_cast<int8_t>(v));
                 } else {
                   const int per = 8 / bits;
                   const uint8_t u = static_cast<uint8_t>(v + (1 << (bits - 1)));
                   row[c / per] |= static_cast<uint8_t>(u << (bits * (c % per)));
                 }
               }
             }
           });
  }

  // Per-row (or per-row-block) f32 scales around `base`.
  void Scales(const std::string& name, int64_t rows, int64_t k, float base) {
    const uint64_t key = Hash(name, seed_);
    w_.Add(name, DType::kF32, {rows, k}, [=](int64_t b, int64_t e, uint8_t* dst) {
      for (int64_t r = b; r < e; ++r) {
        Rng rng(key + static_cast<uint64_t>(r));
        float* row = reinterpret_cast<float*>(dst) + (r - b) * k;
        for (int64_t c = 0; c < k; ++c) row[c] = base * (1.0f + 0.25f * rng.Uniform());
      }
    });
  }

  // A linear layer [out, in]: dense bf16 with unit-gain init, or the QAT layout.
  void Linear(const std::string& module, int64_t out, int64_t in, int bits, float in_scale,
              float out_scale, float gain = 1.0f) {
    const float amp = gain * std::sqrt(3.0f / static_cast<float>(in));
    if (!qat_ || bits == 0) {
      Dense(module + ".weight", {out, in}, amp);
      return;
    }
    Packed(module + ".weight", out, in, bits);
    const float rms = PackedRms(bits);
    Scales(module + ".weight_scale", out, 1, amp / std::sqrt(3.0f) / rms);
    F32Scalar(module + ".input_activation_scale", {}, Jitter(module + ".in", in_scale));
    F32Scalar(module + ".output_activation_scale", {}, Jitter(module + ".out", out_scale));
  }

  void Embedding(const std::string& module, int64_t rows, int64_t cols, int bits, int64_t blocks,
                 float rms_target) {
    if (!qat_ || bits == 0) {
      Dense(module + ".weight", {rows, cols}, rms_target * std::sqrt(3.0f));
      return;
    }
    Packed(module + ".embedding_quantized", rows, cols, bits);
    const float rms = PackedRms(bits);
    Scales(module + ".embedding_scale", rows, blocks, rms_target / rms);
  }

  SafetensorsWriter& writer() { return w_; }

 private:
  uint64_t seed_;
  bool qat_;
  bool dense_f32_;
  float jitter_;
  SafetensorsWriter w_;
};

std::string LayerRange(int first_shared) {
  // Regex for layer indices [0, first_shared): "[0-k]" or "(\d|1[0-k])" as in the published file.
  const int last = first_shared - 1;
  if (last <= 9) return "[0-" + std::to_string(last) + "]";
  if (last <= 19) return "(\\d|1[0-" + std::to_string(last - 10) + "])";
  return "\\d+";
}

bool Tied(const Shape& s) { return s.tied.value_or(!s.qat); }
int FirstShared(const Shape& s) { return s.layers - s.kv_shared; }
int AttnBits(const Shape& s, int l) { return s.attn_bits.empty() ? 4 : s.attn_bits[l]; }
int MlpBits(const Shape& s, int l) {
  return s.mlp_bits.empty() ? (l < FirstShared(s) ? 4 : 2) : s.mlp_bits[l];
}
int PleBits(const Shape& s, int l) { return s.ple_bits.empty() ? 8 : s.ple_bits[l]; }
// The per-layer bits are spelled out, one rule per layer and module kind, where given.
bool PerLayerBits(const Shape& s) {
  return !s.attn_bits.empty() || !s.mlp_bits.empty() || !s.ple_bits.empty();
}

nlohmann::ordered_json Config(const Shape& s) {
  using oj = nlohmann::ordered_json;
  oj layer_types = oj::array();
  for (bool f : s.full) layer_types.push_back(f ? "full_attention" : "sliding_attention");
  oj text = {
      {"model_type", "gemma4_text"},
      {"vocab_size", s.vocab},
      {"hidden_size", s.hidden},
      {"intermediate_size", s.inter},
      {"num_hidden_layers", s.layers},
      {"num_attention_heads", s.heads},
      {"num_key_value_heads", s.kv_heads},
      {"head_dim", s.head_dim},
      {"global_head_dim", s.global_head_dim},
      {"layer_types", layer_types},
      {"sliding_window", s.window},
      {"num_kv_shared_layers", s.kv_shared},
      {"use_double_wide_mlp", s.double_wide},
      {"hidden_size_per_layer_input", s.ple_dim},
      {"vocab_size_per_layer_input", s.vocab},
      {"hidden_activation", "gelu_pytorch_tanh"},
      {"rms_norm_eps", 1e-6},
      {"final_logit_softcapping", 30.0},
      {"max_position_embeddings", 131072},
      {"rope_parameters",
       {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
        {"full_attention",
         {{"rope_type", "proportional"},
          {"partial_rotary_factor", 0.25},
          {"rope_theta", 1000000.0}}}}},
      {"bos_token_id", 2},
      {"eos_token_id", 1},
      {"pad_token_id", 0},
  };
  oj cfg = {{"architectures", {"Gemma4ForConditionalGeneration"}},
            {"model_type", "gemma4"},
            {"text_config", text},
            {"tie_word_embeddings", Tied(s)},
            {"eos_token_id", {1, 106}},
            {"image_token_id", 258880},
            {"audio_token_id", 258881},
            {"video_token_id", 258884},
            {"boi_token_id", 255999},
            {"eoi_token_id", 258882},
            {"synthetic", "gemma-engine synth: random weights, not a trained model"}};
  if (s.vision_layers > 0) {
    cfg["vision_config"] = {{"model_type", "gemma4_vision"},
                            {"hidden_size", s.vision_hidden},
                            {"intermediate_size", s.vision_inter},
                            {"num_hidden_layers", s.vision_layers},
                            {"num_attention_heads", s.vision_heads},
                            {"num_key_value_heads", s.vision_heads},
                            {"head_dim", s.vision_head_dim},
                            {"patch_size", 16},
                            {"pooling_kernel_size", 3},
                            {"position_embedding_size", s.vision_positions},
                            {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 100.0}}},
                            {"use_clipped_linears", true},
                            {"standardize", false},
                            {"hidden_activation", "gelu_pytorch_tanh"},
                            {"rms_norm_eps", 1e-6}};
  }
  if (s.audio_layers > 0) {
    cfg["audio_config"] = {{"model_type", "gemma4_audio"},
                           {"hidden_size", s.audio_hidden},
                           {"num_hidden_layers", s.audio_layers},
                           {"num_attention_heads", s.audio_heads},
                           {"hidden_act", "silu"},
                           {"subsampling_conv_channels", {128, s.audio_channels}},
                           {"conv_kernel_size", 5},
                           {"residual_weight", 0.5},
                           {"attention_chunk_size", 12},
                           {"attention_context_left", 13},
                           {"attention_context_right", 0},
                           {"attention_logit_cap", 50.0},
                           {"attention_invalid_logits_value", -1e9},
                           {"use_clipped_linears", true},
                           {"rms_norm_eps", 1e-6},
                           {"gradient_clipping", 1e10},
                           {"output_proj_dims", s.audio_out}};
    cfg["boa_token_id"] = 256000;
    cfg["eoa_token_index"] = 258883;
  }
  if (s.qat) {
    const int first_shared = s.layers - s.kv_shared;
    oj rules = oj::object();
    if (PerLayerBits(s)) {
      // One rule per layer and module kind (no generic layer rules: the parser may order rules
      // by key).
      for (int l = 0; l < s.layers; ++l) {
        const std::string L = "language_model\\.layers\\." + std::to_string(l) + "\\.";
        rules[L + "mlp\\."] = {{"num_bits", MlpBits(s, l)}};
        rules[L + "self_attn\\."] = {{"num_bits", AttnBits(s, l)}};
        rules[L + "per_layer_"] = {{"num_bits", PleBits(s, l)}};
      }
    }
    rules["^lm_head$"] = {{"num_bits", s.head_bits}};
    if (s.embed_bits > 0) rules["language_model\\.embed_tokens$"] = {{"num_bits", s.embed_bits}};
    rules["language_model\\.embed_tokens_per_layer$"] = {{"num_bits", s.ple_embed_bits}};
    if (!PerLayerBits(s)) {
      rules["language_model\\.layers\\." + LayerRange(first_shared) + "\\.mlp\\."] = {
          {"num_bits", 4}};
      rules["language_model\\.layers\\.\\d+\\.mlp\\."] = {{"num_bits", 2}};
      rules["language_model\\.layers\\.\\d+\\.per_layer_input_gate$"] = {{"num_bits", 8}};
      rules["language_model\\.layers\\.\\d+\\.per_layer_projection$"] = {{"num_bits", 8}};
      rules["language_model\\.layers\\.\\d+\\.self_attn\\."] = {{"num_bits", 4}};
    }
    rules["vision_tower"] = {{"num_bits", 8}};
    rules["audio_tower(?!.*lconv1d\\.linear_start)"] = {{"num_bits", 2}};
    rules["audio_tower\\.layers\\.\\d+\\.lconv1d\\.linear_start\\."] = {{"num_bits", 4}};
    cfg["quantization_config"] = {
        {"quant_method", "gemma"},
        {"num_bits", 4},
        {"quantize_embeddings", true},
        {"module_quant_configs", rules},
        {"modules_to_not_convert",
         {"model.vision_tower.patch_embedder", "model.audio_tower.subsample_conv_projection",
          "model.audio_tower.output_proj", "relative_k_proj", "model.embed_audio",
          "model.embed_vision", "per_layer_model_projection"}}};
    if (s.embed_bits == 0) {
      cfg["quantization_config"]["modules_to_not_convert"].push_back("language_model.embed_tokens");
    }
  }
  return cfg;
}

// The files besides the weights that the published repositories carry (layout "hub").
void AddHubConfig(nlohmann::ordered_json& cfg) {
  if (!cfg.contains("vision_config")) {
    cfg["vision_config"] = {{"model_type", "gemma4_vision"}, {"hidden_size", 64},
                            {"num_hidden_layers", 1}, {"patch_size", 16}};
  }
  if (!cfg.contains("audio_config")) {
    cfg["audio_config"] = {
        {"model_type", "gemma4_audio"}, {"hidden_size", 64}, {"num_hidden_layers", 1}};
  }
  cfg["boi_token_id"] = 255999;
  cfg["eoi_token_id"] = 258882;
}

const char* kGenerationConfig = R"({
  "bos_token_id": 2,
  "do_sample": true,
  "eos_token_id": [1, 106],
  "pad_token_id": 0,
  "temperature": 1.0,
  "top_k": 64,
  "top_p": 0.95
}
)";

const char* kProcessorConfig = R"({
  "processor_class": "Gemma4Processor",
  "image_seq_length": 280,
  "audio_seq_length": 750
}
)";

}  // namespace

SynthShape RandomSynthShape(uint64_t seed, bool qat) {
  Rng rng(Hash("random-shape", seed));
  auto pick = [&](int lo, int hi) {  // uniform in [lo, hi]
    return lo + static_cast<int>(rng.Next() % static_cast<uint64_t>(hi - lo + 1));
  };
  auto coin = [&] { return (rng.Next() & 1) != 0; };
  SynthShape s{};
  s.qat = qat;
  s.vocab = 64 * pick(4, 10);
  s.hidden = 32 * pick(1, 4);
  s.inter = s.hidden * pick(1, 4);
  s.layers = pick(3, 12);
  s.heads = 1 << pick(0, 2);
  s.kv_heads = s.heads > 1 && coin() ? 2 : 1;
  s.head_dim = coin() ? 16 : 32;
  s.global_head_dim = s.head_dim * (coin() ? 2 : 1);
  s.window = pick(4, 32);
  s.ple_dim = 8 * pick(1, 3);
  s.double_wide = coin();
  // Any pattern; the KV-shared tail only as long as each shared layer's type has an owner before
  // it (the spec's rule: the last non-shared layer of that type).
  s.full.resize(static_cast<size_t>(s.layers));
  for (int l = 0; l < s.layers; ++l) s.full[l] = pick(0, 3) == 0;
  s.full.back() = true;  // transformers forces the last layer full
  const int max_shared = std::min(4, s.layers - 1);
  s.kv_shared = pick(0, max_shared);
  auto owners_ok = [&] {
    const int first = s.layers - s.kv_shared;
    for (int l = first; l < s.layers; ++l) {
      bool found = false;
      for (int j = 0; j < first; ++j) found |= s.full[j] == s.full[l];
      if (!found) return false;
    }
    return true;
  };
  while (s.kv_shared > 0 && !owners_ok()) --s.kv_shared;
  if (qat) {
    const int bits[3] = {2, 4, 8};
    for (int l = 0; l < s.layers; ++l) {
      s.attn_bits.push_back(bits[pick(0, 2)]);
      s.mlp_bits.push_back(bits[pick(0, 2)]);
      s.ple_bits.push_back(bits[pick(0, 2)]);
    }
    s.tied = pick(0, 3) == 0;
    s.embed_bits = *s.tied ? 0 : bits[pick(0, 2)];
    s.ple_embed_bits = bits[pick(0, 2)];
    s.head_bits = bits[pick(0, 2)];
    s.scale_jitter = coin() ? 0.2f : 0.0f;
  } else {
    s.tied = coin();
    s.dense_f32 = coin();
  }
  return s;
}

std::string DescribeSynthShape(const SynthShape& s) {
  std::string d = (s.qat         ? "qat"
                   : s.dense_f32 ? "f32"
                                 : "bf16") +
                  std::string(" vocab ") + std::to_string(s.vocab) + " hidden " +
                  std::to_string(s.hidden) + " inter " + std::to_string(s.inter) +
                  (s.double_wide ? "(x2 shared)" : "") + " heads " + std::to_string(s.heads) + "/" +
                  std::to_string(s.kv_heads) + " hd " + std::to_string(s.head_dim) + "/" +
                  std::to_string(s.global_head_dim) + " window " + std::to_string(s.window) +
                  " ple " + std::to_string(s.ple_dim) + " layers ";
  for (int l = 0; l < s.layers; ++l) {
    d += s.full[l] ? 'F' : 'S';
    if (s.qat && !s.attn_bits.empty()) {
      d += "(" + std::to_string(s.attn_bits[l]) + std::to_string(s.mlp_bits[l]) +
           std::to_string(s.ple_bits[l]) + ")";
    }
  }
  d += " kv_shared " + std::to_string(s.kv_shared) + (Tied(s) ? " tied" : " untied");
  if (s.qat) {
    d += " embed/ple/head bits " + std::to_string(s.embed_bits) + "/" +
         std::to_string(s.ple_embed_bits) + "/" + std::to_string(s.head_bits) + " jitter " +
         std::to_string(s.scale_jitter);
  }
  return d;
}

std::vector<SynthPreset> SynthPresets() {
  std::vector<SynthPreset> p = {
      {"e2b-bf16", "Gemma 4 E2B text shapes, bf16, tied head (~9.5 GB)"},
      {"e2b-qat",
       "Gemma 4 E2B mobile-QAT layout: int2/int4/int8 + SRQ, separate int2 head (~2.5 GB)"},
      {"e2b-qat-mini",
       "e2b-qat's widths and kinds on 10 layers (2 full, 3 KV-shared) and a 32,768 vocab"},
      {"e2b-bf16-mini", "e2b-qat-mini's structure in bf16 (tied head)"},
      {"e2b-towers",
       "E2B's vision and audio towers, full size, bf16, on a small text model of E2B's width "
       "(towers only: tower tests and benchmarks, ~0.9 GB)"},
      {"e2b-towers-qat", "e2b-towers in the mobile-QAT layout (int8 vision, int2/int4 audio)"},
      {"tiny", "E2B structure scaled down (6 layers, hidden 128), bf16, 262,144 vocab"},
      {"tiny-qat", "tiny in the mobile-QAT layout"}};
  for (SynthPreset& x : p) x.vocab_size = MakeShape(x.name).vocab;
  return p;
}

void Synthesize(const SynthOptions& options) {
  namespace fs = std::filesystem;
  Shape s = options.shape ? *options.shape : MakeShape(options.preset);
  if (options.sliding_window > 0) s.window = options.sliding_window;
  if (options.vocab_size > 0) {
    if (options.vocab_size < 1024)
      throw Error(ErrorCode::kInvalidArgument, "synth: vocab_size below 1024");
    s.vocab = options.vocab_size;
  }
  if (options.out_dir.empty()) throw Error(ErrorCode::kInvalidArgument, "synth: --out is required");
  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec) throw Error(ErrorCode::kIo, options.out_dir + ": cannot create: " + ec.message());

  Builder b(options.seed, s.qat, s.dense_f32, s.scale_jitter);
  const std::string P = "model.language_model.";
  const int first_shared = FirstShared(s);
  const int64_t H = s.hidden;
  // Activation scales: norm outputs have rms ~1, so +-4 covers them; MLP products are wider.
  const float kIn = 4.0f / 127, kOut = 8.0f / 127, kWide = 16.0f / 127;

  b.Embedding(P + "embed_tokens", s.vocab, H, s.embed_bits, 1,
              0.7f / std::sqrt(static_cast<float>(H)));
  b.Embedding(P + "embed_tokens_per_layer", s.vocab, static_cast<int64_t>(s.layers) * s.ple_dim,
              s.ple_embed_bits, s.layers, 1.0f);
  // per_layer_model_projection stays bf16 in the QAT file (modules_to_not_convert).
  b.Linear(P + "per_layer_model_projection", static_cast<int64_t>(s.layers) * s.ple_dim, H, 0, 0,
           0);
  b.Bf16(P + "per_layer_projection_norm.weight", {s.ple_dim}, 0.1f, 1.0f);
  b.Bf16(P + "norm.weight", {H}, 0.5f, 3.0f);
  for (int l = 0; l < s.layers; ++l) {
    const std::string L = P + "layers." + std::to_string(l) + ".";
    const int hd = s.full[l] ? s.global_head_dim : s.head_dim;
    const bool shared = l >= first_shared;
    const int64_t inter = s.inter * (s.double_wide && shared ? 2 : 1);
    // (SynthShape::conditioned: the branches' post norms small, q/k norms at unit score spread)
    const float post = s.conditioned ? 0.03f : 1.0f;
    const float qk = s.conditioned ? 0.25f : 1.0f;
    for (const char* n :
         {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
          "post_feedforward_layernorm", "post_per_layer_input_norm"}) {
      const float g = std::string_view(n).starts_with("post") ? post : 1.0f;
      b.Bf16(L + n + ".weight", {H}, 0.1f * g, g);
    }
    const int ab = AttnBits(s, l), mb = MlpBits(s, l), pb = PleBits(s, l);
    b.Linear(L + "self_attn.q_proj", static_cast<int64_t>(s.heads) * hd, H, ab, kIn, kOut);
    b.Bf16(L + "self_attn.q_norm.weight", {hd}, 0.1f * qk, qk);
    // Published checkpoints carry k/v (and k_norm) on shared layers too; the engine ignores them.
    b.Linear(L + "self_attn.k_proj", static_cast<int64_t>(s.kv_heads) * hd, H, ab, kIn, kOut);
    b.Linear(L + "self_attn.v_proj", static_cast<int64_t>(s.kv_heads) * hd, H, ab, kIn, kOut);
    b.Bf16(L + "self_attn.k_norm.weight", {hd}, 0.1f * qk, qk);
    b.Linear(L + "self_attn.o_proj", H, static_cast<int64_t>(s.heads) * hd, ab, kIn, kOut);
    b.Linear(L + "mlp.gate_proj", inter, H, mb, kIn, kOut);
    b.Linear(L + "mlp.up_proj", inter, H, mb, kIn, kOut);
    b.Linear(L + "mlp.down_proj", H, inter, mb, kWide, kOut);
    b.Linear(L + "per_layer_input_gate", s.ple_dim, H, pb, kIn, kOut);
    b.Linear(L + "per_layer_projection", H, s.ple_dim, pb, kIn, kOut);
    const float spread = static_cast<float>((l * 7919) % 10) / 10.0f;
    b.F32Scalar(L + "layer_scalar", {1},
                s.conditioned ? 0.9f + 0.1f * spread : 0.5f + 0.4f * spread);
    if (s.qat) {
      b.F32Scalar(L + "self_attn.k_cache_scale", {}, 0.05f);
      b.F32Scalar(L + "self_attn.v_cache_scale", {}, 0.05f);
    }
  }
  if (!Tied(s)) b.Linear("lm_head", s.vocab, H, s.qat ? s.head_bits : 0, kIn, 0.25f);
  const bool hub = options.layout == "hub";
  if (!options.layout.empty() && !hub) {
    throw Error(ErrorCode::kInvalidArgument,
                "synth: unknown layout '" + options.layout + "' (hub)");
  }
  if (s.vision_layers > 0) {
    const std::string V = "model.vision_tower.";
    const int64_t D = s.vision_hidden, hd = s.vision_head_dim, nh = s.vision_heads;
    const int vb = s.qat ? 8 : 0;  // the published rule: "vision_tower" -> 8 bits
    b.Linear(V + "patch_embedder.input_proj", D, 3 * 16 * 16, 0, 0, 0);
    b.Bf16Block(V + "patch_embedder.position_embedding_table", {2, s.vision_positions, D}, 0.5f);
    auto clipped = [&](const std::string& m, int64_t out, int64_t in) {
      b.Linear(m + ".linear", out, in, vb, 0, 0);
      b.F32Scalar(m + ".input_min", {}, -12.0f);
      b.F32Scalar(m + ".input_max", {}, 12.0f);
      b.F32Scalar(m + ".output_min", {}, -24.0f);
      b.F32Scalar(m + ".output_max", {}, 24.0f);
    };
    // (SynthShape::conditioned, as the text layers: the branches' post norms small, q/k norms at
    // attention scores of unit spread; unit q/k norms give scores of spread sqrt(head_dim).)
    const float vpost = s.conditioned ? 0.2f : 1.0f;
    const float vqk = s.conditioned ? 1.0f / std::sqrt(std::sqrt(static_cast<float>(hd))) : 1.0f;
    for (int l = 0; l < s.vision_layers; ++l) {
      const std::string L = V + "encoder.layers." + std::to_string(l) + ".";
      for (const char* n : {"input_layernorm", "pre_feedforward_layernorm"})
        b.Bf16(L + n + ".weight", {D}, 0.1f, 1.0f);
      for (const char* n : {"post_attention_layernorm", "post_feedforward_layernorm"})
        b.Bf16(L + n + ".weight", {D}, 0.1f * vpost, vpost);
      b.Bf16(L + "self_attn.q_norm.weight", {hd}, 0.1f * vqk, vqk);
      b.Bf16(L + "self_attn.k_norm.weight", {hd}, 0.1f * vqk, vqk);
      for (const char* n : {"q_proj", "k_proj", "v_proj"}) clipped(L + "self_attn." + n, nh * hd, D);
      clipped(L + "self_attn.o_proj", D, nh * hd);
      clipped(L + "mlp.gate_proj", s.vision_inter, D);
      clipped(L + "mlp.up_proj", s.vision_inter, D);
      clipped(L + "mlp.down_proj", D, s.vision_inter);
    }
    b.Linear("model.embed_vision.embedding_projection", H, D, 0, 0, 0);
  }
  if (s.audio_layers > 0) {
    const std::string A = "model.audio_tower.";
    const int64_t D = s.audio_hidden, C1 = s.audio_channels, hd = s.audio_hidden / s.audio_heads;
    const int ab = s.qat ? 2 : 0, sb = s.qat ? 4 : 0;  // the published rules
    const std::string S = A + "subsample_conv_projection.";
    b.Bf16Block(S + "layer0.conv.weight", {128, 1, 3, 3}, std::sqrt(3.0f / 9));
    b.Bf16(S + "layer0.norm.weight", {128}, 0.1f, 1.0f);
    b.Bf16Block(S + "layer1.conv.weight", {C1, 128, 3, 3}, std::sqrt(3.0f / (128 * 9)));
    b.Bf16(S + "layer1.norm.weight", {C1}, 0.1f, 1.0f);
    b.Linear(S + "input_proj_linear", D, 32 * C1, 0, 0, 0);
    auto clipped = [&](const std::string& m, int64_t out, int64_t in, int bits) {
      b.Linear(m + ".linear", out, in, bits, 0, 0);
      b.F32Scalar(m + ".input_min", {}, -12.0f);
      b.F32Scalar(m + ".input_max", {}, 12.0f);
      b.F32Scalar(m + ".output_min", {}, -24.0f);
      b.F32Scalar(m + ".output_max", {}, 24.0f);
    };
    for (int l = 0; l < s.audio_layers; ++l) {
      const std::string L = A + "layers." + std::to_string(l) + ".";
      for (const char* ff : {"feed_forward1.", "feed_forward2."}) {
        b.Bf16(L + ff + "pre_layer_norm.weight", {D}, 0.1f, 1.0f);
        b.Bf16(L + ff + "post_layer_norm.weight", {D}, 0.1f, 1.0f);
        clipped(L + ff + "ffw_layer_1", 4 * D, D, ab);
        clipped(L + ff + "ffw_layer_2", D, 4 * D, ab);
      }
      for (const char* n : {"norm_pre_attn", "norm_post_attn", "norm_out"})
        b.Bf16(L + n + ".weight", {D}, 0.1f, 1.0f);
      for (const char* n : {"q_proj", "k_proj", "v_proj", "post"})
        clipped(L + "self_attn." + n, D, D, ab);
      b.Linear(L + "self_attn.relative_k_proj", D, D, 0, 0, 0);
      b.Bf16(L + "self_attn.per_dim_scale", {hd}, 0.3f);
      b.Bf16(L + "lconv1d.pre_layer_norm.weight", {D}, 0.1f, 1.0f);
      b.Bf16(L + "lconv1d.conv_norm.weight", {D}, 0.1f, 1.0f);
      clipped(L + "lconv1d.linear_start", 2 * D, D, sb);
      clipped(L + "lconv1d.linear_end", D, D, ab);
      b.Bf16Block(L + "lconv1d.depthwise_conv1d.weight", {D, 1, 5}, std::sqrt(3.0f / 5));
    }
    b.Linear(A + "output_proj", s.audio_out, D, 0, 0, 0);
    b.Bf16(A + "output_proj.bias", {s.audio_out}, 0.1f);
    b.Linear("model.embed_audio.embedding_projection", H, s.audio_out, 0, 0, 0);
  }
  if (hub) {
    // Stand-ins for the towers (names as published, shapes small): present, and ignored by text.
    if (s.vision_layers == 0) {
      b.Bf16("model.vision_tower.patch_embedder.input_proj.weight", {64, 48}, 0.1f);
      b.Bf16("model.vision_tower.encoder.layers.0.mlp.up_proj.linear.weight", {64, 64}, 0.1f);
      b.Bf16("model.embed_vision.embedding_projection.weight", {H, 64}, 0.1f);
    }
    if (s.audio_layers == 0) {
      b.Bf16("model.audio_tower.subsample_conv_projection.input_proj_linear.weight", {64, 32},
             0.1f);
      b.Bf16("model.audio_tower.layers.0.lconv1d.linear_start.linear.weight", {64, 64}, 0.1f);
      b.Bf16("model.embed_audio.embedding_projection.weight", {H, 64}, 0.1f);
    }
  }
  b.writer().SetMetadata("format", "pt");
  b.writer().SetMetadata("synthetic", "gemma-engine synth " + options.preset);
  // Write-then-rename: a reader (another process) never maps a half-written checkpoint; the entry
  // points (model.safetensors or the index) move into place last.
  const fs::path out(options.out_dir);
  const std::string tmp_suffix = ".tmp." + std::to_string(::getpid());
  std::vector<std::string> names;  // final names, in rename order
  // On any failure (a full disk above all) the temporary files go too: nothing half-written stays.
  struct Cleanup {
    const fs::path& out;
    const std::string& suffix;
    bool done = false;
    ~Cleanup() {
      if (done) return;
      std::error_code ec;
      for (const auto& f : fs::directory_iterator(out, ec)) {
        const std::string n = f.path().filename().string();
        if (n.size() > suffix.size() &&
            n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
          fs::remove(f.path(), ec);
      }
    }
  } cleanup{out, tmp_suffix};
  auto text_file = [&](const std::string& name, const std::string& text) {
    std::ofstream f(out / (name + tmp_suffix));
    f << text;
    if (!f) throw Error(ErrorCode::kIo, options.out_dir + "/" + name + ": write failed");
    names.push_back(name);
  };
  if (options.progress) {
    b.writer().SetProgress([&](uint64_t done, uint64_t total) {
      options.progress(total ? static_cast<double>(done) / static_cast<double>(total) : 1.0);
    });
  }
  std::string entry = "model.safetensors";
  nlohmann::ordered_json index;
  if (options.shards > 1) {
    const std::vector<SafetensorsWriter> parts = b.writer().Split(options.shards);
    index["metadata"] = {{"total_size", b.writer().data_bytes()}};
    index["weight_map"] = nlohmann::ordered_json::object();
    for (size_t k = 0; k < parts.size(); ++k) {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, parts.size());
      parts[k].Write((out / (name + tmp_suffix)).string());
      names.push_back(name);
      for (const std::string& t : parts[k].names()) index["weight_map"][t] = name;
    }
    entry = "model.safetensors.index.json";
  } else {
    b.writer().Write((out / ("model.safetensors" + tmp_suffix)).string());
  }
  nlohmann::ordered_json cfg = Config(s);
  if (hub) AddHubConfig(cfg);
  // A tokenizer for every preset; the random test structures' small vocabularies (below the
  // synthetic tokenizer's 1,024 ids) take token ids only.
  if (s.vocab >= 1024) text_file("tokenizer.json", SyntheticTokenizerJson(s.vocab));
  text_file("config.json", cfg.dump(2) + "\n");
  if (hub) {
    text_file("generation_config.json", kGenerationConfig);
    text_file("processor_config.json", kProcessorConfig);
    // The published repositories carry the canonical template as chat_template.jinja.
    text_file("chat_template.jinja", std::string(chat::BuiltinTemplateSource()));
  }
  if (options.shards > 1) {
    text_file(entry, index.dump(2) + "\n");
  } else {
    names.push_back(entry);
  }
  cleanup.done = true;  // from here on files move into place
  for (const std::string& name : names) {
    fs::rename(out / (name + tmp_suffix), out / name, ec);
    if (ec) {
      throw Error(ErrorCode::kIo,
                  options.out_dir + "/" + name + ": cannot rename into place: " + ec.message());
    }
  }
}

}  // namespace gemma
