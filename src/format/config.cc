#include "format/config.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <set>
#include <nlohmann/json.hpp>

#include "core/json_depth.h"
#include "core/mapped_file.h"
#include "gemma/error.h"

namespace gemma {
namespace {

using json = nlohmann::json;

class Reader {
 public:
  Reader(const json& j, std::string origin, std::string prefix)
      : j_(j), origin_(std::move(origin)), prefix_(std::move(prefix)) {}

  [[noreturn]] void Fail(ErrorCode code, const std::string& key, const std::string& what) const {
    throw Error(code, origin_ + ": " + prefix_ + key + ": " + what);
  }
  bool Has(const std::string& key) const { return j_.contains(key) && !j_[key].is_null(); }
  const json& Raw(const std::string& key) const { return j_[key]; }

  int Int(const std::string& key, std::optional<int> def, int min_value = 0) const {
    if (!Has(key)) {
      if (def) return *def;
      Fail(ErrorCode::kConfig, key, "missing");
    }
    const json& v = j_[key];
    if (!v.is_number_integer())
      Fail(ErrorCode::kConfig, key, "must be an integer, got " + v.dump());
    const int64_t x = v.get<int64_t>();
    if (x < min_value || x > (1 << 30)) {
      Fail(ErrorCode::kConfig, key, "value " + std::to_string(x) + " out of range");
    }
    return static_cast<int>(x);
  }
  double Num(const std::string& key, double def) const {
    if (!Has(key)) return def;
    const json& v = j_[key];
    if (!v.is_number()) Fail(ErrorCode::kConfig, key, "must be a number, got " + v.dump());
    return v.get<double>();
  }
  bool Bool(const std::string& key, bool def) const {
    if (!Has(key)) return def;
    const json& v = j_[key];
    if (!v.is_boolean()) Fail(ErrorCode::kConfig, key, "must be true/false, got " + v.dump());
    return v.get<bool>();
  }
  std::string Str(const std::string& key, const std::string& def) const {
    if (!Has(key)) return def;
    const json& v = j_[key];
    if (!v.is_string()) Fail(ErrorCode::kConfig, key, "must be a string, got " + v.dump());
    return v.get<std::string>();
  }

 private:
  const json& j_;
  std::string origin_;
  std::string prefix_;
};

RopeParams ParseRope(const Reader& r, const json& j, const std::string& key) {
  RopeParams p;
  if (!j.is_object()) r.Fail(ErrorCode::kConfig, key, "must be an object");
  Reader rr(j, "", "");
  // (j.value() with a typed default throws nlohmann's type_error on a non-string: found by the
  // config fuzz target as an internal error.)
  if (j.contains("rope_type") && !j["rope_type"].is_string())
    r.Fail(ErrorCode::kConfig, key + ".rope_type", "must be a string");
  const std::string type = j.contains("rope_type") ? j["rope_type"].get<std::string>() : "default";
  if (type == "default") {
    p.type = RopeParams::Type::kDefault;
  } else if (type == "proportional") {
    p.type = RopeParams::Type::kProportional;
  } else {
    r.Fail(ErrorCode::kUnsupported, key + ".rope_type", "'" + type + "' is not supported");
  }
  if (!j.contains("rope_theta") || !j["rope_theta"].is_number()) {
    r.Fail(ErrorCode::kConfig, key + ".rope_theta", "missing or not a number");
  }
  p.theta = j["rope_theta"].get<double>();
  if (j.contains("partial_rotary_factor") && !j["partial_rotary_factor"].is_null()) {
    p.partial_rotary_factor = j["partial_rotary_factor"].get<double>();
  }
  if (j.contains("factor") && !j["factor"].is_null()) p.factor = j["factor"].get<double>();
  if (!(p.theta > 0) || !(p.partial_rotary_factor > 0 && p.partial_rotary_factor <= 1) ||
      !(p.factor > 0)) {
    r.Fail(ErrorCode::kConfig, key, "rope_theta, partial_rotary_factor or factor out of range");
  }
  return p;
}

TextConfig ParseText(const json& j, const std::string& origin, const std::string& prefix) {
  Reader r(j, origin, prefix);
  TextConfig c;
  const std::string model_type = r.Str("model_type", "gemma4_text");
  if (model_type != "gemma4_text") {
    r.Fail(ErrorCode::kUnsupported, "model_type", "'" + model_type + "' is not gemma4_text");
  }
  c.vocab_size = r.Int("vocab_size", 262144, 1);
  c.hidden_size = r.Int("hidden_size", std::nullopt, 1);
  c.intermediate_size = r.Int("intermediate_size", std::nullopt, 1);
  c.num_layers = r.Int("num_hidden_layers", std::nullopt, 1);
  c.num_heads = r.Int("num_attention_heads", std::nullopt, 1);
  c.num_kv_heads = r.Int("num_key_value_heads", std::nullopt, 1);
  c.head_dim = r.Int("head_dim", 256, 2);
  c.sliding_window = r.Int("sliding_window", 512, 1);
  c.num_kv_shared_layers = r.Int("num_kv_shared_layers", 0, 0);
  c.use_double_wide_mlp = r.Bool("use_double_wide_mlp", false);
  c.hidden_size_per_layer_input = r.Int("hidden_size_per_layer_input", 256, 0);
  c.vocab_size_per_layer_input = r.Int("vocab_size_per_layer_input", c.vocab_size, 0);
  c.rms_norm_eps = static_cast<float>(r.Num("rms_norm_eps", 1e-6));
  c.max_position_embeddings = r.Int("max_position_embeddings", 131072, 1);
  c.tie_word_embeddings = r.Bool("tie_word_embeddings", true);
  c.bos_token_id = r.Int("bos_token_id", 2, 0);
  c.pad_token_id = r.Int("pad_token_id", 0, 0);
  if (r.Has("eos_token_id")) {
    const json& e = r.Raw("eos_token_id");
    if (e.is_number_integer()) {
      c.eos_token_ids.push_back(e.get<int>());
    } else if (e.is_array()) {
      for (const json& x : e) {
        if (!x.is_number_integer()) r.Fail(ErrorCode::kConfig, "eos_token_id", "non-integer entry");
        c.eos_token_ids.push_back(x.get<int>());
      }
    } else {
      r.Fail(ErrorCode::kConfig, "eos_token_id", "must be an integer or a list");
    }
  } else {
    c.eos_token_ids.push_back(1);
  }
  if (r.Has("final_logit_softcapping")) {
    c.final_logit_softcapping = static_cast<float>(r.Num("final_logit_softcapping", 0));
    if (!(*c.final_logit_softcapping > 0)) {
      r.Fail(ErrorCode::kConfig, "final_logit_softcapping", "must be positive or null");
    }
  }
  const std::string act = r.Str("hidden_activation", "gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh" && act != "gelu_tanh") {
    r.Fail(ErrorCode::kUnsupported, "hidden_activation", "'" + act + "' is not supported");
  }
  if (r.Bool("enable_moe_block", false)) {
    r.Fail(ErrorCode::kUnsupported, "enable_moe_block", "MoE blocks are not supported");
  }
  if (r.Bool("attention_bias", false)) {
    r.Fail(ErrorCode::kUnsupported, "attention_bias", "attention biases are not supported");
  }
  if (r.Bool("attention_k_eq_v", false)) {
    r.Fail(ErrorCode::kUnsupported, "attention_k_eq_v", "k == v attention is not supported");
  }
  if (r.Has("use_bidirectional_attention")) {
    r.Fail(ErrorCode::kUnsupported, "use_bidirectional_attention",
           "bidirectional text attention is not supported");
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    r.Fail(ErrorCode::kConfig, "num_key_value_heads",
           std::to_string(c.num_kv_heads) + " does not divide num_attention_heads " +
               std::to_string(c.num_heads));
  }
  if (c.num_kv_shared_layers >= c.num_layers) {
    r.Fail(ErrorCode::kConfig, "num_kv_shared_layers", "must be smaller than num_hidden_layers");
  }

  // layer_types; default as transformers: every 6th layer full, last layer forced full.
  if (r.Has("layer_types")) {
    const json& lt = r.Raw("layer_types");
    if (!lt.is_array() || static_cast<int>(lt.size()) != c.num_layers) {
      r.Fail(ErrorCode::kConfig, "layer_types",
             "must be a list of num_hidden_layers (" + std::to_string(c.num_layers) + ") entries");
    }
    for (const json& t : lt) {
      const std::string s = t.is_string() ? t.get<std::string>() : t.dump();
      if (s == "sliding_attention") {
        c.layer_types.push_back(LayerType::kSliding);
      } else if (s == "full_attention") {
        c.layer_types.push_back(LayerType::kFull);
      } else {
        r.Fail(ErrorCode::kUnsupported, "layer_types", "unknown layer type " + s);
      }
    }
  } else {
    for (int i = 0; i < c.num_layers; ++i) {
      c.layer_types.push_back((i + 1) % 6 ? LayerType::kSliding : LayerType::kFull);
    }
  }
  c.layer_types.back() = LayerType::kFull;  // transformers forces this (with a warning)

  // Full-layer head dim: global_head_dim (hub configs) or per_layer_config (transformers-saved).
  c.global_head_dim = r.Int("global_head_dim", 512, 2);
  c.layer_head_dim.resize(c.num_layers);
  for (int i = 0; i < c.num_layers; ++i) {
    c.layer_head_dim[i] = c.layer_types[i] == LayerType::kFull ? c.global_head_dim : c.head_dim;
  }
  if (r.Has("per_layer_config")) {
    const json& plc = r.Raw("per_layer_config");
    if (!plc.is_object()) r.Fail(ErrorCode::kConfig, "per_layer_config", "must be an object");
    bool first_full = true;
    for (auto it = plc.begin(); it != plc.end(); ++it) {
      // The whole key is the index ("2ion_heads" is not layer 2; std::stoi alone would say so).
      const std::string& key = it.key();
      int layer = -1;
      if (!key.empty() && key.size() <= 6 &&
          key.find_first_not_of("0123456789") == std::string::npos) {
        layer = std::stoi(key);
      }
      if (layer < 0 || layer >= c.num_layers) {
        r.Fail(ErrorCode::kConfig, "per_layer_config." + it.key(), "not a layer index");
      }
      if (!it.value().is_object()) {
        r.Fail(ErrorCode::kConfig, "per_layer_config." + it.key(), "must be an object");
      }
      for (auto f = it.value().begin(); f != it.value().end(); ++f) {
        if (f.key() == "head_dim") {
          if (!f.value().is_number_integer() || f.value().get<int64_t>() < 2 ||
              f.value().get<int64_t>() > (1 << 16)) {
            r.Fail(ErrorCode::kConfig, "per_layer_config." + it.key() + ".head_dim", "bad value");
          }
          c.layer_head_dim[layer] = f.value().get<int>();
          if (c.layer_types[layer] == LayerType::kFull && first_full) {
            c.global_head_dim = c.layer_head_dim[layer];
            first_full = false;
          }
        } else {
          r.Fail(ErrorCode::kUnsupported, "per_layer_config." + it.key() + "." + f.key(),
                 "per-layer override not supported");
        }
      }
    }
  }
  for (int i = 0; i < c.num_layers; ++i) {
    const int want = c.layer_types[i] == LayerType::kFull ? c.global_head_dim : c.head_dim;
    if (c.layer_head_dim[i] != want) {
      r.Fail(ErrorCode::kUnsupported, "per_layer_config",
             "layers of one type must share a head dim (layer " + std::to_string(i) + ")");
    }
  }

  // rope_parameters: {sliding_attention: {...}, full_attention: {...}}; defaults as transformers.
  c.rope_sliding = {RopeParams::Type::kDefault, 10000.0, 1.0, 1.0};
  c.rope_full = {RopeParams::Type::kProportional, 1000000.0, 0.25, 1.0};
  if (r.Has("rope_parameters")) {
    const json& rp = r.Raw("rope_parameters");
    if (!rp.is_object()) r.Fail(ErrorCode::kConfig, "rope_parameters", "must be an object");
    if (rp.contains("sliding_attention")) {
      c.rope_sliding = ParseRope(r, rp["sliding_attention"], "rope_parameters.sliding_attention");
    }
    if (rp.contains("full_attention")) {
      c.rope_full = ParseRope(r, rp["full_attention"], "rope_parameters.full_attention");
    }
  }
  return c;
}

QuantConfig ParseQuant(const json& q, const std::string& origin) {
  Reader r(q, origin, "quantization_config.");
  QuantConfig qc;
  const std::string method = r.Str("quant_method", "");
  if (method != "gemma") {
    r.Fail(ErrorCode::kUnsupported, "quant_method",
           "unknown quant method '" + method + "' (only \"gemma\" mobile QAT is supported)");
  }
  qc.enabled = true;
  qc.default_bits = r.Int("num_bits", 4, 1);
  qc.quantize_embeddings = r.Bool("quantize_embeddings", false);
  auto check_bits = [&](int b, const std::string& key) {
    if (b != 2 && b != 4 && b != 8) r.Fail(ErrorCode::kUnsupported, key, "bits must be 2, 4 or 8");
  };
  check_bits(qc.default_bits, "num_bits");
  if (r.Has("module_quant_configs")) {
    const json& m = r.Raw("module_quant_configs");
    if (!m.is_object()) r.Fail(ErrorCode::kConfig, "module_quant_configs", "must be an object");
    // nlohmann::json's default object is sorted; declaration order matters, so re-read ordered.
    const nlohmann::ordered_json om = nlohmann::ordered_json::parse(m.dump());
    for (auto it = om.begin(); it != om.end(); ++it) {
      const std::string key = "module_quant_configs['" + it.key() + "']";
      int bits = qc.default_bits;
      // Bit widths out of int's range must not wrap into a valid one (2^32 + 2 is not 2).
      auto bits_of = [](const nlohmann::ordered_json& v) {
        return static_cast<int>(std::clamp<int64_t>(v.get<int64_t>(), -1, 64));
      };
      if (it.value().is_number_integer()) {
        bits = bits_of(it.value());
      } else if (it.value().is_object()) {
        for (auto f = it.value().begin(); f != it.value().end(); ++f) {
          if (f.key() != "num_bits")
            r.Fail(ErrorCode::kUnsupported, key + "." + f.key(), "unknown option");
          if (!f.value().is_number_integer())
            r.Fail(ErrorCode::kConfig, key, "num_bits not an integer");
          bits = bits_of(f.value());
        }
      } else {
        r.Fail(ErrorCode::kConfig, key, "must be {num_bits: N} or N");
      }
      check_bits(bits, key);
      try {
        qc.rules.push_back({it.key(), ModulePattern(it.key()), bits});
      } catch (const Error& e) {
        r.Fail(ErrorCode::kConfig, key, e.what());
      }
    }
    // transformers joins the patterns into one regex, (?P<g0>p0)|(?P<g1>p1)|...: a group name
    // used twice there is Python's "redefinition of group name".
    std::set<std::string> names;
    for (size_t i = 0; i < qc.rules.size(); ++i) names.insert("g" + std::to_string(i));
    for (const QuantConfig::Rule& rule : qc.rules) {
      for (const std::string& name : rule.re.group_names()) {
        if (!names.insert(name).second) {
          r.Fail(ErrorCode::kConfig, "module_quant_configs['" + rule.pattern + "']",
                 "group name '" + name + "' is defined twice in the joined pattern");
        }
      }
    }
  }
  if (r.Has("modules_to_not_convert")) {
    const json& m = r.Raw("modules_to_not_convert");
    if (!m.is_array()) r.Fail(ErrorCode::kConfig, "modules_to_not_convert", "must be a list");
    for (const json& x : m) {
      if (!x.is_string()) r.Fail(ErrorCode::kConfig, "modules_to_not_convert", "non-string entry");
      qc.not_convert.push_back(x.get<std::string>());
      try {
        qc.not_convert_re.emplace_back(x.get<std::string>());
      } catch (const Error& e) {
        r.Fail(ErrorCode::kConfig, "modules_to_not_convert", e.what());
      }
    }
  }
  return qc;
}

VisionConfig ParseVision(const json& j, const std::string& origin) {
  Reader r(j, origin, "vision_config.");
  VisionConfig v;
  const std::string model_type = r.Str("model_type", "gemma4_vision");
  if (model_type != "gemma4_vision")
    r.Fail(ErrorCode::kUnsupported, "model_type", "'" + model_type + "' is not gemma4_vision");
  v.hidden_size = r.Int("hidden_size", 768, 1);
  v.intermediate_size = r.Int("intermediate_size", 3072, 1);
  v.num_layers = r.Int("num_hidden_layers", 16, 1);
  v.num_heads = r.Int("num_attention_heads", 12, 1);
  v.num_kv_heads = r.Int("num_key_value_heads", 12, 1);
  v.head_dim = r.Int("head_dim", 64, 4);
  v.patch_size = r.Int("patch_size", 16, 1);
  v.pooling_kernel_size = r.Int("pooling_kernel_size", 3, 1);
  v.position_embedding_size = r.Int("position_embedding_size", 10240, 1);
  v.use_clipped_linears = r.Bool("use_clipped_linears", false);
  v.standardize = r.Bool("standardize", false);
  v.rms_norm_eps = static_cast<float>(r.Num("rms_norm_eps", 1e-6));
  const std::string act = r.Str("hidden_activation", "gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh" && act != "gelu_tanh")
    r.Fail(ErrorCode::kUnsupported, "hidden_activation", "'" + act + "' is not supported");
  if (r.Bool("attention_bias", false))
    r.Fail(ErrorCode::kUnsupported, "attention_bias", "attention biases are not supported");
  v.rope.theta = 100.0;
  if (r.Has("rope_parameters")) {
    const json& rp = r.Raw("rope_parameters");
    const std::string type = rp.is_object() ? rp.value("rope_type", std::string("default")) : "";
    if (type != "default" && type != "axial")
      r.Fail(ErrorCode::kUnsupported, "rope_parameters.rope_type", "'" + type + "' is not supported");
    if (rp.contains("rope_theta") && rp["rope_theta"].is_number()) v.rope.theta = rp["rope_theta"];
  }
  if (v.num_heads % v.num_kv_heads != 0 || v.head_dim % 4 != 0)
    r.Fail(ErrorCode::kConfig, "num_attention_heads", "heads, kv heads and head_dim do not fit");
  return v;
}

AudioConfig ParseAudio(const json& j, const std::string& origin) {
  Reader r(j, origin, "audio_config.");
  AudioConfig a;
  const std::string model_type = r.Str("model_type", "gemma4_audio");
  if (model_type != "gemma4_audio")
    r.Fail(ErrorCode::kUnsupported, "model_type", "'" + model_type + "' is not gemma4_audio");
  a.hidden_size = r.Int("hidden_size", 1024, 1);
  a.num_layers = r.Int("num_hidden_layers", 12, 1);
  a.num_heads = r.Int("num_attention_heads", 8, 1);
  if (r.Has("subsampling_conv_channels")) {
    const json& ch = r.Raw("subsampling_conv_channels");
    if (!ch.is_array() || ch.size() != 2 || !ch[0].is_number_integer() ||
        !ch[1].is_number_integer())
      r.Fail(ErrorCode::kConfig, "subsampling_conv_channels", "must be two integers");
    a.sscp_channels0 = ch[0].get<int>();
    a.sscp_channels1 = ch[1].get<int>();
  }
  // transformers sizes the input projection (channels[0] / 4) * channels[1]; the convolutions
  // give (128 mel bins / 4) * channels[1] values per frame, so only channels[0] = 128 runs.
  if (a.sscp_channels0 != 128 || a.sscp_channels1 < 1 || a.sscp_channels1 > 4096)
    r.Fail(ErrorCode::kUnsupported, "subsampling_conv_channels",
           "only [128, C] fits 128 mel bins (transformers sizes its projection from channels[0])");
  a.conv_kernel_size = r.Int("conv_kernel_size", 5, 1);
  a.residual_weight = static_cast<float>(r.Num("residual_weight", 0.5));
  a.chunk_size = r.Int("attention_chunk_size", 12, 1);
  a.context_left = r.Int("attention_context_left", 13, 2);
  a.context_right = r.Int("attention_context_right", 0, 0);
  a.logit_cap = static_cast<float>(r.Num("attention_logit_cap", 50.0));
  a.invalid_logits = static_cast<float>(r.Num("attention_invalid_logits_value", -1e9));
  a.use_clipped_linears = r.Bool("use_clipped_linears", true);
  a.rms_norm_eps = static_cast<float>(r.Num("rms_norm_eps", 1e-6));
  a.gradient_clipping = static_cast<float>(std::min(
      r.Num("gradient_clipping", 1e10), static_cast<double>(std::numeric_limits<float>::max())));
  a.output_proj_dims = r.Int("output_proj_dims", 1536, 1);
  const std::string act = r.Str("hidden_act", "silu");
  if (act != "silu" && act != "swish")
    r.Fail(ErrorCode::kUnsupported, "hidden_act", "'" + act + "' is not supported");
  if (a.hidden_size % a.num_heads != 0)
    r.Fail(ErrorCode::kConfig, "num_attention_heads", "does not divide hidden_size");
  // The relative-position table covers distances 0..chunk; transformers' block layout and the
  // sliding mask agree with "keys q-k in [0, context_left - 1)" only for this shape.
  if (a.context_right != 0 || a.chunk_size != a.context_left - 1)
    r.Fail(ErrorCode::kUnsupported, "attention_context_left",
           "only attention_context_right = 0 and attention_chunk_size = attention_context_left - 1 "
           "(E2B: 12 and 13) are supported");
  if (!(a.logit_cap > 0)) r.Fail(ErrorCode::kConfig, "attention_logit_cap", "must be positive");
  return a;
}

}  // namespace

std::optional<int> QuantConfig::BitsFor(const std::string& module, bool is_embedding) const {
  if (!enabled) return std::nullopt;
  if (is_embedding && !quantize_embeddings) return std::nullopt;
  for (size_t i = 0; i < not_convert.size(); ++i) {
    const std::string& key = not_convert[i];
    // re.match(key + r"\.") implies re.match(key) for every pattern ModulePattern accepts.
    if (not_convert_re[i].MatchesAtStart(module)) return std::nullopt;
    if (module.size() >= key.size() &&
        module.compare(module.size() - key.size(), key.size(), key) == 0) {
      return std::nullopt;
    }
  }
  // Leftmost match wins; among rules matching at the same position, the first declared.
  size_t best_pos = std::string::npos;
  int bits = default_bits;
  for (const Rule& rule : rules) {
    if (best_pos == 0) break;
    // Only a start before the best so far can win.
    const size_t last = best_pos == std::string::npos ? ModulePattern::kNoMatch : best_pos - 1;
    const size_t pos = rule.re.Search(module, last);
    if (pos != ModulePattern::kNoMatch) {
      best_pos = pos;
      bits = rule.bits;
    }
  }
  return bits;
}

ModelConfig ParseModelConfig(const std::string& json_text, const std::string& origin) {
  json j;
  if (const size_t at = JsonTextDepthExceeded(json_text); at != std::string::npos) {
    throw Error(ErrorCode::kConfig,
                origin + ": nests deeper than " + std::to_string(kMaxJsonDepth) +
                    " arrays/objects (the limit) at byte " + std::to_string(at));
  }
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(ErrorCode::kConfig, origin + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(ErrorCode::kConfig, origin + ": not a JSON object");
  ModelConfig mc;
  mc.origin = origin;
  if (j.contains("model_type") && !j["model_type"].is_string())
    throw Error(ErrorCode::kConfig, origin + ": model_type: must be a string");
  const std::string model_type = j.contains("model_type") ? j["model_type"].get<std::string>() : "";
  if (model_type == "gemma4") {
    mc.multimodal_wrapper = true;
    if (!j.contains("text_config") || !j["text_config"].is_object()) {
      throw Error(ErrorCode::kConfig, origin + ": text_config: missing");
    }
    json text = j["text_config"];
    if (!text.contains("model_type")) text["model_type"] = "gemma4_text";
    mc.text = ParseText(text, origin, "text_config.");
    if (j.contains("tie_word_embeddings") && j["tie_word_embeddings"].is_boolean()) {
      mc.text.tie_word_embeddings = j["tie_word_embeddings"].get<bool>();
    }
    if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) {
      mc.text.eos_token_ids.clear();
      // Strictly typed like text_config's: a string here used to leave no EOS at all.
      const json& e = j["eos_token_id"];
      auto bad = [&](const std::string& what) {
        throw Error(ErrorCode::kConfig, origin + ": eos_token_id: " + what);
      };
      if (e.is_number_integer()) {
        mc.text.eos_token_ids.push_back(e.get<int>());
      } else if (e.is_array()) {
        for (const json& x : e) {
          if (!x.is_number_integer()) bad("non-integer entry " + x.dump());
          mc.text.eos_token_ids.push_back(x.get<int>());
        }
      } else {
        bad("must be an integer or a list of integers, got " + e.dump());
      }
    }
    for (int id : mc.text.eos_token_ids) {
      if (id < 0 || id >= mc.text.vocab_size) {
        throw Error(ErrorCode::kConfig, origin + ": eos_token_id: " + std::to_string(id) +
                                            " is outside the vocabulary (" +
                                            std::to_string(mc.text.vocab_size) + " ids)");
      }
    }
    for (const char* key : {"image_token_id", "audio_token_id", "video_token_id"}) {
      mc.placeholder_token_ids.push_back(j.contains(key) && j[key].is_number_integer()
                                             ? j[key].get<int>()
                                             : (std::string(key) == "image_token_id"   ? 258880
                                                : std::string(key) == "audio_token_id" ? 258881
                                                                                       : 258884));
    }
    auto id = [&](const char* key, int def) {
      return j.contains(key) && j[key].is_number_integer() ? j[key].get<int>() : def;
    };
    mc.image_token_id = id("image_token_id", 258880);
    mc.boi_token_id = id("boi_token_id", 255999);
    mc.eoi_token_id = id("eoi_token_id", 258882);
    mc.video_token_id = id("video_token_id", 258884);
    mc.audio_token_id = id("audio_token_id", 258881);
    mc.boa_token_id = id("boa_token_id", 256000);
    mc.eoa_token_id = id("eoa_token_id", id("eoa_token_index", 258883));
    if (j.contains("audio_config") && j["audio_config"].is_object()) {
      try {
        mc.audio = ParseAudio(j["audio_config"], origin);
      } catch (const Error& e) {
        mc.audio_error = e.what();
      }
    }
    if (j.contains("vision_config") && j["vision_config"].is_object()) {
      // A vision_config the engine cannot use leaves the text model loadable; image requests
      // then fail with this reason.
      try {
        mc.vision = ParseVision(j["vision_config"], origin);
      } catch (const Error& e) {
        mc.vision_error = e.what();
      }
    }
  } else if (model_type == "gemma4_text") {
    mc.text = ParseText(j, origin, "");
  } else {
    throw Error(ErrorCode::kUnsupported,
                origin + ": model_type: '" + model_type + "' is not gemma4 or gemma4_text");
  }
  if (j.contains("quantization_config") && !j["quantization_config"].is_null()) {
    mc.quant = ParseQuant(j["quantization_config"], origin);
  } else if (mc.multimodal_wrapper && j["text_config"].contains("quantization_config")) {
    mc.quant = ParseQuant(j["text_config"]["quantization_config"], origin);
  }
  return mc;
}

ModelConfig LoadModelConfig(const std::string& path) {
  namespace fs = std::filesystem;
  std::string file = path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) file = (fs::path(path) / "config.json").string();
  return ParseModelConfig(ReadFileToString(file), file);
}

}  // namespace gemma
