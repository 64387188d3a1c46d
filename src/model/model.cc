#include "model/model.h"

#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/dtype.h"
#include "core/timer.h"
#include "gemma/error.h"

namespace gemma {
namespace {

std::string Describe(const TensorInfo& t) {
  return std::string(DTypeName(t.dtype)) + " " + t.ShapeString();
}

[[noreturn]] void ShapeError(const TensorInfo& t, const std::string& expected) {
  throw Error(ErrorCode::kShape,
              *t.file + ": tensor '" + t.name + "': expected " + expected + ", got " + Describe(t));
}

std::string Shape2(int64_t a, int64_t b) {
  return "[" + std::to_string(a) + ", " + std::to_string(b) + "]";
}

std::vector<float> ToF32(const TensorInfo& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (t.dtype) {
      case DType::kF32: {
        float f;
        std::memcpy(&f, t.data + 4 * i, 4);
        out[i] = f;
        break;
      }
      case DType::kBF16: {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = Bf16ToF32(h);
        break;
      }
      case DType::kF16: {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = F16ToF32(h);
        break;
      }
      default:
        ShapeError(t, "a float tensor (F32, BF16 or F16)");
    }
  }
  return out;
}

WeightKind DenseKind(const TensorInfo& t, const std::string& expected) {
  switch (t.dtype) {
    case DType::kF32:
      return WeightKind::kF32;
    case DType::kBF16:
      return WeightKind::kBF16;
    case DType::kF16:
      return WeightKind::kF16;
    default:
      ShapeError(t, expected);
  }
}

WeightKind QuantKind(int bits) {
  return bits == 2 ? WeightKind::kQ2 : bits == 4 ? WeightKind::kQ4 : WeightKind::kQ8;
}

int64_t PackedCols(int64_t cols, int bits) { return bits == 8 ? cols : (cols * bits + 7) / 8; }

float ScalarF32(const TensorInfo& t) {
  if (t.numel() != 1) ShapeError(t, "a scalar");
  return ToF32(t)[0];
}

// What an unmappable checkpoint leaves on disk: the per-layer embedding table (1.1 GiB of E2B
// QAT's 2.3 GiB, more than half of bf16's), which only ever gives one row per token.
bool DeferredWhenUnmapped(const std::string& name) {
  for (const char* table :
       {"embed_tokens_per_layer.embedding_quantized", "embed_tokens_per_layer.weight"}) {
    const size_t n = std::strlen(table);
    if (name.size() >= n && name.compare(name.size() - n, n, table) == 0) return true;
  }
  return false;
}

std::function<void(int32_t, uint8_t*)> RowReader(const TensorSource& src, const TensorInfo& t,
                                                 size_t row_bytes) {
  return [&src, &t, row_bytes](int32_t id, uint8_t* dst) {
    src.Read(t, static_cast<size_t>(id) * row_bytes, row_bytes, dst);
  };
}

std::vector<float> BindNorm(const TensorSource& src, const std::string& name, int dim) {
  const TensorInfo& t = src.Get(name);
  if (t.shape.size() != 1 || t.shape[0] != dim) ShapeError(t, "[" + std::to_string(dim) + "]");
  return ToF32(t);
}

Linear BindLinear(const TensorSource& src, const QuantConfig& q, const std::string& module,
                  int rows, int cols) {
  Linear lin;
  lin.name = module;
  lin.rows = rows;
  lin.cols = cols;
  const std::optional<int> bits = q.BitsFor(module, /*is_embedding=*/false);
  const TensorInfo& w = src.Get(module + ".weight");
  if (bits) {
    lin.kind = QuantKind(*bits);
    const int64_t pc = PackedCols(cols, *bits);
    const DType want = *bits == 8 ? DType::kI8 : DType::kU8;
    const std::string expect = std::string(DTypeName(want)) + " " + Shape2(rows, pc) + " (" +
                               std::to_string(*bits) + "-bit packed)";
    if (w.dtype != want || w.shape.size() != 2 || w.shape[0] != rows || w.shape[1] != pc) {
      ShapeError(w, expect);
    }
    lin.row_bytes = static_cast<size_t>(pc);
    const TensorInfo& s = src.Get(module + ".weight_scale");
    if (s.dtype != DType::kF32 || s.numel() != rows) ShapeError(s, "F32 " + Shape2(rows, 1));
    lin.row_scale = reinterpret_cast<const float*>(s.data);
    if (const TensorInfo* t = src.Find(module + ".input_activation_scale"))
      lin.in_scale = ScalarF32(*t);
    if (const TensorInfo* t = src.Find(module + ".output_activation_scale"))
      lin.out_scale = ScalarF32(*t);
    if (!(lin.in_scale >= 0) || !(lin.out_scale >= 0) || !std::isfinite(lin.in_scale) ||
        !std::isfinite(lin.out_scale)) {
      throw Error(ErrorCode::kFormat,
                  *w.file + ": " + module + ": activation scales must be finite and >= 0");
    }
  } else {
    lin.kind = DenseKind(w, "F32/BF16/F16 " + Shape2(rows, cols));
    if (w.shape.size() != 2 || w.shape[0] != rows || w.shape[1] != cols) {
      ShapeError(w, std::string(DTypeName(w.dtype)) + " " + Shape2(rows, cols));
    }
    lin.row_bytes = static_cast<size_t>(cols) * DTypeSize(w.dtype);
  }
  lin.data = w.data;
  return lin;
}

}  // namespace

const char* WeightKindName(WeightKind k) {
  switch (k) {
    case WeightKind::kF32:
      return "f32";
    case WeightKind::kBF16:
      return "bf16";
    case WeightKind::kF16:
      return "f16";
    case WeightKind::kQ2:
      return "int2";
    case WeightKind::kQ4:
      return "int4";
    case WeightKind::kQ8:
      return "int8";
  }
  return "?";
}

int WeightKindBits(WeightKind k) {
  switch (k) {
    case WeightKind::kF32:
      return 32;
    case WeightKind::kBF16:
    case WeightKind::kF16:
      return 16;
    case WeightKind::kQ2:
      return 2;
    case WeightKind::kQ4:
      return 4;
    case WeightKind::kQ8:
      return 8;
  }
  return 0;
}

AudioTower BindAudioTower(const ModelConfig& config, const TensorSource& src) {
  if (!config.audio) throw Error(ErrorCode::kConfig, config.origin + ": no audio_config");
  auto norm = [&](const std::string& name, int dim) { return BindNorm(src, name, dim); };
  auto linear = [&](const std::string& module, int rows, int cols) {
    return BindLinear(src, config.quant, module, rows, cols);
  };
  const AudioConfig& ac = *config.audio;
  AudioTower t;
  t.config = ac;
  const std::string A = "model.audio_tower.";
  const int D = ac.hidden_size, C0 = ac.sscp_channels0, C1 = ac.sscp_channels1;
  auto dense = [&](const std::string& name, std::vector<int64_t> shape) {
    const TensorInfo& ti = src.Get(name);
    if (ti.shape != shape) {
      std::string want = "[";
      for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
      ShapeError(ti, want + "]");
    }
    return ToF32(ti);
  };
  auto clipped = [&](const std::string& module, int rows, int cols) {
    ClippedLinear cl;
    cl.lin = linear(module + ".linear", rows, cols);
    if (ac.use_clipped_linears) {
      auto scalar = [&](const char* leaf, float* out) {
        if (const TensorInfo* ti = src.Find(module + "." + leaf)) *out = ScalarF32(*ti);
      };
      scalar("input_min", &cl.in_min);
      scalar("input_max", &cl.in_max);
      scalar("output_min", &cl.out_min);
      scalar("output_max", &cl.out_max);
    }
    return cl;
  };
  const std::string S = A + "subsample_conv_projection.";
  t.conv0 = dense(S + "layer0.conv.weight", {C0, 1, 3, 3});
  t.conv1 = dense(S + "layer1.conv.weight", {C1, C0, 3, 3});
  t.norm0 = norm(S + "layer0.norm.weight", C0);
  t.norm1 = norm(S + "layer1.norm.weight", C1);
  t.input_proj = linear(S + "input_proj_linear", D, (C0 / 4) * C1);
  for (int l = 0; l < ac.num_layers; ++l) {
    const std::string L = A + "layers." + std::to_string(l) + ".";
    AudioLayerWeights w;
    for (int f = 0; f < 2; ++f) {
      AudioLayerWeights::FeedForward& ff = f == 0 ? w.ff1 : w.ff2;
      const std::string F = L + (f == 0 ? "feed_forward1." : "feed_forward2.");
      ff.pre_norm = norm(F + "pre_layer_norm.weight", D);
      ff.post_norm = norm(F + "post_layer_norm.weight", D);
      ff.up = clipped(F + "ffw_layer_1", 4 * D, D);
      ff.down = clipped(F + "ffw_layer_2", D, 4 * D);
    }
    w.norm_pre_attn = norm(L + "norm_pre_attn.weight", D);
    w.norm_post_attn = norm(L + "norm_post_attn.weight", D);
    w.norm_out = norm(L + "norm_out.weight", D);
    w.q = clipped(L + "self_attn.q_proj", D, D);
    w.k = clipped(L + "self_attn.k_proj", D, D);
    w.v = clipped(L + "self_attn.v_proj", D, D);
    w.post = clipped(L + "self_attn.post", D, D);
    w.relative_k = linear(L + "self_attn.relative_k_proj", D, D);
    w.per_dim_scale = norm(L + "self_attn.per_dim_scale", ac.head_dim());
    w.lconv_pre_norm = norm(L + "lconv1d.pre_layer_norm.weight", D);
    w.lconv_conv_norm = norm(L + "lconv1d.conv_norm.weight", D);
    w.lconv_start = clipped(L + "lconv1d.linear_start", 2 * D, D);
    w.lconv_end = clipped(L + "lconv1d.linear_end", D, D);
    w.dwconv = dense(L + "lconv1d.depthwise_conv1d.weight", {D, 1, ac.conv_kernel_size});
    t.layers.push_back(std::move(w));
  }
  t.output_proj = linear(A + "output_proj", ac.output_proj_dims, D);
  t.output_bias = norm(A + "output_proj.bias", ac.output_proj_dims);
  t.embed_proj = linear("model.embed_audio.embedding_projection", config.text.hidden_size,
                        ac.output_proj_dims);
  return t;
}

const uint8_t* EmbeddingRowBytes(const Embedding& e, int32_t id) {
  if (e.data) return e.data + static_cast<size_t>(id) * e.row_bytes;
  thread_local std::vector<uint8_t> row;
  row.resize(e.row_bytes);
  e.read_row(id, row.data());
  return row.data();
}

std::unique_ptr<Model> Model::Load(const std::string& path, bool mmap) {
  namespace fs = std::filesystem;
  Timer timer;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(ErrorCode::kIo, path + ": no such file or directory");
  RejectGguf(path);  // before the config.json next to it is looked for
  const std::string config_path =
      fs::is_directory(path, ec) ? path : (fs::path(path).parent_path() / "config.json").string();
  ModelConfig config = LoadModelConfig(config_path);
  auto model = FromSource(std::move(config), TensorSource::Open(path, DeferredWhenUnmapped, mmap));
  model->load_ms_ = timer.Ms();
  return model;
}

std::unique_ptr<Model> Model::FromSource(ModelConfig config, std::unique_ptr<TensorSource> source) {
  auto m = std::unique_ptr<Model>(new Model());
  m->config_ = std::move(config);
  m->source_ = std::move(source);
  m->Plan();
  m->Bind();
  return m;
}

int32_t Model::EmbedId(int32_t token) const {
  for (int id : config_.placeholder_token_ids) {
    if (token == id) return config_.text.pad_token_id;
  }
  return token;
}

void Model::Plan() {
  const TextConfig& c = config_.text;
  const int first_shared = c.num_layers - c.num_kv_shared_layers;
  layers_.resize(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    LayerPlan& p = layers_[l];
    p.index = l;
    p.type = c.layer_types[l];
    p.head_dim = c.layer_head_dim[l];
    p.num_heads = c.num_heads;
    p.num_kv_heads = c.num_kv_heads;
    p.window = p.type == LayerType::kSliding ? c.sliding_window : 0;
    p.rope = p.type == LayerType::kSliding ? &c.rope_sliding : &c.rope_full;
    p.kv_shared = c.num_kv_shared_layers > 0 && l >= first_shared;
    const bool double_wide = c.use_double_wide_mlp && p.kv_shared;
    p.intermediate = c.intermediate_size * (double_wide ? 2 : 1);
    if (p.kv_shared) {
      // The last non-shared layer of the same type owns the cache this layer reads.
      p.kv_layer = -1;
      for (int j = first_shared - 1; j >= 0; --j) {
        if (c.layer_types[j] == p.type) {
          p.kv_layer = j;
          break;
        }
      }
      if (p.kv_layer < 0) {
        throw Error(ErrorCode::kConfig,
                    config_.origin + ": layer " + std::to_string(l) +
                        " shares KV but no earlier non-shared layer has its type");
      }
    } else {
      p.kv_layer = l;
      p.cache_slot = num_caches_++;
    }
  }
  shared_tail_ = c.num_layers;
  while (shared_tail_ > 0 && layers_[shared_tail_ - 1].kv_shared) --shared_tail_;
}

void Model::Bind() {
  const TextConfig& c = config_.text;
  const TensorSource& src = *source_;
  const QuantConfig& q = config_.quant;

  // Tensor prefix: Gemma4ForConditionalGeneration or Gemma4ForCausalLM / bare text model.
  const std::string candidates[] = {"model.language_model.", "model.", ""};
  prefix_.clear();
  bool found = false;
  for (const std::string& p : candidates) {
    if (src.Find(p + "embed_tokens.weight") || src.Find(p + "embed_tokens.embedding_quantized")) {
      prefix_ = p;
      found = true;
      break;
    }
  }
  if (!found) {
    throw Error(ErrorCode::kMissingTensor,
                src.origin() +
                    ": no embed_tokens tensor (looked for model.language_model.embed_tokens, "
                    "model.embed_tokens, embed_tokens)");
  }

  auto norm = [&](const std::string& name, int dim) { return BindNorm(src, name, dim); };
  auto linear = [&](const std::string& module, int rows, int cols) {
    return BindLinear(src, q, module, rows, cols);
  };

  auto embedding = [&](const std::string& module, int rows, int cols, int blocks_hint,
                       double embed_scale) {
    Embedding e;
    e.name = module;
    e.rows = rows;
    e.cols = cols;
    e.embed_scale = static_cast<float>(embed_scale);
    const std::optional<int> bits = q.BitsFor(module, /*is_embedding=*/true);
    if (bits) {
      e.kind = QuantKind(*bits);
      const TensorInfo& w = src.Get(module + ".embedding_quantized");
      const int64_t pc = PackedCols(cols, *bits);
      const DType want = *bits == 8 ? DType::kI8 : DType::kU8;
      if (w.dtype != want || w.shape.size() != 2 || w.shape[0] != rows || w.shape[1] != pc) {
        ShapeError(w, std::string(DTypeName(want)) + " " + Shape2(rows, pc) + " (" +
                          std::to_string(*bits) + "-bit packed)");
      }
      e.data = w.data;
      e.row_bytes = static_cast<size_t>(pc);
      if (w.deferred) e.read_row = RowReader(src, w, e.row_bytes);
      const TensorInfo& s = src.Get(module + ".embedding_scale");
      const int64_t k = s.shape.size() == 2 ? s.shape[1] : -1;
      if (s.dtype != DType::kF32 || s.shape.size() != 2 || s.shape[0] != rows ||
          !(k == 1 || k == blocks_hint) || cols % k != 0) {
        ShapeError(s, "F32 " + Shape2(rows, 1) + " or " + Shape2(rows, blocks_hint));
      }
      e.scale = reinterpret_cast<const float*>(s.data);
      e.scale_blocks = static_cast<int>(k);
    } else {
      const TensorInfo& w = src.Get(module + ".weight");
      e.kind = DenseKind(w, "F32/BF16/F16 " + Shape2(rows, cols));
      if (w.shape.size() != 2 || w.shape[0] != rows || w.shape[1] != cols) {
        ShapeError(w, std::string(DTypeName(w.dtype)) + " " + Shape2(rows, cols));
      }
      e.data = w.data;
      e.row_bytes = static_cast<size_t>(cols) * DTypeSize(w.dtype);
      if (w.deferred) e.read_row = RowReader(src, w, e.row_bytes);
    }
    return e;
  };

  const std::string& P = prefix_;
  const int H = c.hidden_size;
  embed_ = embedding(P + "embed_tokens", c.vocab_size, H, 1, std::sqrt(static_cast<double>(H)));
  const int ple_dim = c.hidden_size_per_layer_input;
  if (ple_dim > 0) {
    ple_embed_ =
        embedding(P + "embed_tokens_per_layer", c.vocab_size_per_layer_input,
                  c.num_layers * ple_dim, c.num_layers, std::sqrt(static_cast<double>(ple_dim)));
    ple_model_proj_ = linear(P + "per_layer_model_projection", c.num_layers * ple_dim, H);
    ple_proj_norm_ = norm(P + "per_layer_projection_norm.weight", ple_dim);
    ple_model_proj_scale_ = static_cast<float>(std::pow(static_cast<double>(H), -0.5));
    ple_input_scale_ = static_cast<float>(std::pow(2.0, -0.5));
  }
  final_norm_ = norm(P + "norm.weight", H);

  weights_.resize(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerPlan& p = layers_[l];
    LayerWeights& w = weights_[l];
    const std::string L = P + "layers." + std::to_string(l) + ".";
    w.input_norm = norm(L + "input_layernorm.weight", H);
    w.post_attn_norm = norm(L + "post_attention_layernorm.weight", H);
    w.pre_ffn_norm = norm(L + "pre_feedforward_layernorm.weight", H);
    w.post_ffn_norm = norm(L + "post_feedforward_layernorm.weight", H);
    w.q_norm = norm(L + "self_attn.q_norm.weight", p.head_dim);
    w.q = linear(L + "self_attn.q_proj", p.num_heads * p.head_dim, H);
    w.o = linear(L + "self_attn.o_proj", H, p.num_heads * p.head_dim);
    if (!p.kv_shared) {
      w.k_norm = norm(L + "self_attn.k_norm.weight", p.head_dim);
      w.k = linear(L + "self_attn.k_proj", p.num_kv_heads * p.head_dim, H);
      w.v = linear(L + "self_attn.v_proj", p.num_kv_heads * p.head_dim, H);
    }
    w.gate = linear(L + "mlp.gate_proj", p.intermediate, H);
    w.up = linear(L + "mlp.up_proj", p.intermediate, H);
    w.down = linear(L + "mlp.down_proj", H, p.intermediate);
    if (ple_dim > 0) {
      w.ple_gate = linear(L + "per_layer_input_gate", ple_dim, H);
      w.ple_proj = linear(L + "per_layer_projection", H, ple_dim);
      w.post_ple_norm = norm(L + "post_per_layer_input_norm.weight", H);
    }
    const TensorInfo& ls = src.Get(L + "layer_scalar");
    w.layer_scalar = ScalarF32(ls);
  }

  // The image tower: bound when the config has a usable vision_config and every tower tensor is
  // there; otherwise text keeps working and image requests report vision_error_.
  if (!config_.vision) {
    vision_error_ = config_.vision_error.empty() ? config_.origin + ": no vision_config (a text-only checkpoint)"
                                                 : config_.vision_error;
  } else {
    try {
      const VisionConfig& vc = *config_.vision;
      VisionTower t;
      t.config = vc;
      const std::string V = "model.vision_tower.";
      const int D = vc.hidden_size, p2 = 3 * vc.patch_size * vc.patch_size;
      t.input_proj = linear(V + "patch_embedder.input_proj", D, p2);
      {
        const TensorInfo& pt = src.Get(V + "patch_embedder.position_embedding_table");
        if (pt.shape.size() != 3 || pt.shape[0] != 2 || pt.shape[1] != vc.position_embedding_size ||
            pt.shape[2] != D) {
          ShapeError(pt, "[2, " + std::to_string(vc.position_embedding_size) + ", " +
                             std::to_string(D) + "]");
        }
        t.position_table.name = pt.name;
        t.position_table.kind = DenseKind(pt, "F32/BF16/F16");
        t.position_table.rows = 2 * vc.position_embedding_size;
        t.position_table.cols = D;
        t.position_table.data = pt.data;
        t.position_table.row_bytes = static_cast<size_t>(D) * DTypeSize(pt.dtype);
      }
      auto clipped = [&](const std::string& module, int rows, int cols) {
        ClippedLinear cl;
        cl.lin = linear(module + ".linear", rows, cols);
        if (vc.use_clipped_linears) {
          auto scalar = [&](const char* leaf, float* out) {
            if (const TensorInfo* ti = src.Find(module + "." + leaf)) *out = ScalarF32(*ti);
          };
          scalar("input_min", &cl.in_min);
          scalar("input_max", &cl.in_max);
          scalar("output_min", &cl.out_min);
          scalar("output_max", &cl.out_max);
        }
        return cl;
      };
      const int hd = vc.head_dim, nh = vc.num_heads, nkv = vc.num_kv_heads;
      for (int l = 0; l < vc.num_layers; ++l) {
        const std::string L = V + "encoder.layers." + std::to_string(l) + ".";
        VisionLayerWeights w;
        w.input_norm = norm(L + "input_layernorm.weight", D);
        w.post_attn_norm = norm(L + "post_attention_layernorm.weight", D);
        w.pre_ffn_norm = norm(L + "pre_feedforward_layernorm.weight", D);
        w.post_ffn_norm = norm(L + "post_feedforward_layernorm.weight", D);
        w.q_norm = norm(L + "self_attn.q_norm.weight", hd);
        w.k_norm = norm(L + "self_attn.k_norm.weight", hd);
        w.q = clipped(L + "self_attn.q_proj", nh * hd, D);
        w.k = clipped(L + "self_attn.k_proj", nkv * hd, D);
        w.v = clipped(L + "self_attn.v_proj", nkv * hd, D);
        w.o = clipped(L + "self_attn.o_proj", D, nh * hd);
        w.gate = clipped(L + "mlp.gate_proj", vc.intermediate_size, D);
        w.up = clipped(L + "mlp.up_proj", vc.intermediate_size, D);
        w.down = clipped(L + "mlp.down_proj", D, vc.intermediate_size);
        t.layers.push_back(std::move(w));
      }
      if (vc.standardize) {
        t.std_bias = norm(V + "std_bias", D);
        t.std_scale = norm(V + "std_scale", D);
      }
      t.embed_proj = linear("model.embed_vision.embedding_projection", c.hidden_size, D);
      vision_ = std::move(t);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kMissingTensor && e.code() != ErrorCode::kShape) throw;
      vision_error_ = std::string("the vision tower cannot be used: ") + e.what();
    }
  }

  // The audio tower, bound like the vision tower: text keeps working without it.
  if (!config_.audio) {
    audio_error_ = config_.audio_error.empty()
                       ? config_.origin + ": no audio_config (a checkpoint without an audio tower)"
                       : config_.audio_error;
  } else {
    try {
      audio_ = BindAudioTower(config_, src);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kMissingTensor && e.code() != ErrorCode::kShape) throw;
      audio_error_ = std::string("the audio tower cannot be used: ") + e.what();
    }
  }

  if (c.tie_word_embeddings) {
    if (IsQuantized(embed_.kind)) {
      throw Error(
          ErrorCode::kUnsupported,
          config_.origin + ": tie_word_embeddings with a quantized embed_tokens (needs lm_head)");
    }
    lm_head_.name = P + "embed_tokens (tied)";
    lm_head_.kind = embed_.kind;
    lm_head_.rows = c.vocab_size;
    lm_head_.cols = H;
    lm_head_.data = embed_.data;
    lm_head_.row_bytes = embed_.row_bytes;
  } else {
    lm_head_ = linear("lm_head", c.vocab_size, H);
  }
}

size_t Model::BytesPerToken() const {
  auto lin = [](const Linear& l) -> size_t {
    if (!l.data) return 0;
    return l.row_bytes * static_cast<size_t>(l.rows) + (l.row_scale ? 4u * l.rows : 0u);
  };
  size_t n = lin(lm_head_) + lin(ple_model_proj_) + embed_.row_bytes + ple_embed_.row_bytes;
  for (const LayerWeights& w : weights_) {
    n += lin(w.q) + lin(w.k) + lin(w.v) + lin(w.o) + lin(w.gate) + lin(w.up) + lin(w.down) +
         lin(w.ple_gate) + lin(w.ple_proj);
  }
  return n;
}

}  // namespace gemma
