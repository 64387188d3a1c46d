// The CPU reference backend: the oracle every faster backend is checked against.
// Straightforward loops over the reference kernels; prefill runs in chunks no longer than the
// sliding rings' slack so a chunk never overwrites keys it still needs.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>

#include "backend/backend.h"
#include "backend/cache_window.h"
#include "backend/cpu/audio_ops.h"
#include "backend/cpu/reference_ops.h"
#include "backend/cpu/vision_ops.h"
#include "gemma/error.h"
#include "model/model.h"

namespace gemma {
namespace {

class CpuReferenceBackend : public Backend {
 public:
  CpuReferenceBackend(const Model& model, const BackendOptions& options,
                      std::shared_ptr<const BackendModel> owner)
      : owner_(std::move(owner)), model_(model), cfg_(model.text()) {
    const CacheGeometry geo = PlanCacheGeometry(cfg_, options);
    capacity_ = geo.capacity;
    slack_ = geo.slack;
    sliding_ring_ = geo.ring;
    window_ = CacheWindow(cfg_.sliding_window, sliding_ring_);
    const std::vector<CacheSlotShape> shapes = PlanCacheSlots(model, geo);
    slots_.resize(shapes.size());
    for (size_t i = 0; i < shapes.size(); ++i) {
      slots_[i].width = shapes[i].width;
      slots_[i].ring = shapes[i].ring;
    }
    inv_freq_sliding_ = ref::RopeInvFreq(cfg_.rope_sliding, cfg_.head_dim);
    inv_freq_full_ = ref::RopeInvFreq(cfg_.rope_full, cfg_.global_head_dim);
  }

  std::string name() const override { return "cpu-reference"; }
  BackendCapabilities capabilities() const override {
    return {.logits = true, .select = true, .max_chunk = std::max(1, slack_), .soft_tokens = true};
  }
  int cached() const override { return window_.cached(); }
  int capacity() const override { return capacity_; }

  void Reset() override { window_.Reset(); }

  bool Truncate(int n) override { return window_.Truncate(n); }

  size_t resident_bytes() const override {
    size_t b = 0;
    for (const Slot& s : slots_) b += (s.k.capacity() + s.v.capacity()) * sizeof(float);
    return b;
  }

  void Forward(const ForwardRequest& req, ForwardResult* out) override {
    const int n = static_cast<int>(req.tokens.size());
    ValidateForward(req, window_.cached(), capacity_, cfg_.vocab_size);
    *out = ForwardResult();
    const int chunk = std::max(1, slack_);
    for (int begin = 0; begin < n; begin += chunk) {
      const int m = std::min(chunk, n - begin);
      RunChunk(req.tokens.subspan(begin, m),
               req.soft.empty() ? req.soft : req.soft.subspan(begin, m), begin + m == n, req, out);
    }
  }

 private:
  using Slot = CpuKvSlot;

  void RunChunk(std::span<const int32_t> tokens, std::span<const float* const> soft,
                bool last_chunk, const ForwardRequest& req, ForwardResult* out) {
    const int m = static_cast<int>(tokens.size());
    const int H = cfg_.hidden_size;
    const int P = cfg_.hidden_size_per_layer_input;
    const int L = cfg_.num_layers;
    const int pos0 = window_.cached();
    const float eps = cfg_.rms_norm_eps;
    for (Slot& s : slots_) s.Reserve(pos0 + m);
    window_.BeginWrite(pos0, m);

    std::vector<float> x(static_cast<size_t>(m) * H);
    for (int t = 0; t < m; ++t) {
      if (!soft.empty() && soft[t]) {
        std::copy_n(soft[t], H, &x[t * H]);
      } else {
        ref::EmbeddingRow(model_.embed(), model_.EmbedId(tokens[t]), &x[t * H]);
      }
    }

    std::vector<float> ple;
    if (P > 0) {
      const int LP = L * P;
      ple.resize(static_cast<size_t>(m) * LP);
      std::vector<float> tok(LP);
      ref::LinearForward(model_.ple_model_proj(), x.data(), m, ple.data());
      for (int t = 0; t < m; ++t) {
        ref::EmbeddingRow(model_.ple_embed(), model_.EmbedId(tokens[t]), tok.data());
        float* row = &ple[static_cast<size_t>(t) * LP];
        for (int i = 0; i < LP; ++i) row[i] = row[i] * model_.ple_model_proj_scale();
        for (int l = 0; l < L; ++l)
          ref::RmsNorm(row + l * P, P, model_.ple_proj_norm(), eps, row + l * P);
        for (int i = 0; i < LP; ++i) row[i] = (row[i] + tok[i]) * model_.ple_input_scale();
      }
    }

    std::vector<float> a(static_cast<size_t>(m) * H), tmp(static_cast<size_t>(m) * H);
    for (int l = 0; l < L; ++l) {
      const LayerPlan& p = model_.layers()[l];
      const LayerWeights& w = model_.layer_weights()[l];
      const int hd = p.head_dim, nh = p.num_heads, nkv = p.num_kv_heads;
      const std::vector<float>& inv =
          p.type == LayerType::kSliding ? inv_freq_sliding_ : inv_freq_full_;
      for (int t = 0; t < m; ++t) ref::RmsNorm(&x[t * H], H, w.input_norm, eps, &a[t * H]);

      std::vector<float> q(static_cast<size_t>(m) * nh * hd);
      ref::LinearForward(w.q, a.data(), m, q.data());
      for (int t = 0; t < m; ++t) {
        for (int h = 0; h < nh; ++h) {
          float* qh = &q[(static_cast<size_t>(t) * nh + h) * hd];
          ref::RmsNorm(qh, hd, w.q_norm, eps, qh);
          ref::ApplyRope(qh, hd, inv, pos0 + t);
        }
      }
      Slot& slot = slots_[model_.layers()[p.kv_layer].cache_slot];
      if (!p.kv_shared) {
        std::vector<float> k(static_cast<size_t>(m) * nkv * hd), v(k.size());
        ref::LinearForward(w.k, a.data(), m, k.data());
        ref::LinearForward(w.v, a.data(), m, v.data());
        for (int t = 0; t < m; ++t) {
          for (int h = 0; h < nkv; ++h) {
            float* kh = &k[(static_cast<size_t>(t) * nkv + h) * hd];
            float* vh = &v[(static_cast<size_t>(t) * nkv + h) * hd];
            ref::RmsNorm(kh, hd, w.k_norm, eps, kh);
            ref::ApplyRope(kh, hd, inv, pos0 + t);
            ref::RmsNorm(vh, hd, {}, eps, vh);
          }
          std::copy_n(&k[static_cast<size_t>(t) * nkv * hd], nkv * hd, slot.K(pos0 + t));
          std::copy_n(&v[static_cast<size_t>(t) * nkv * hd], nkv * hd, slot.V(pos0 + t));
        }
      }

      std::vector<float> attn(static_cast<size_t>(m) * nh * hd);
      std::vector<double> scores;
      const int group = nh / nkv;
      for (int t = 0; t < m; ++t) {
        const int pos = pos0 + t;
        const int first = p.window > 0 ? std::max(0, pos - p.window + 1) : 0;
        scores.resize(pos - first + 1);
        for (int h = 0; h < nh; ++h) {
          const float* qh = &q[(static_cast<size_t>(t) * nh + h) * hd];
          const int kvh = h / group;
          double mx = -std::numeric_limits<double>::infinity();
          for (int j = first; j <= pos; ++j) {
            const float* kj = slot.K(j) + kvh * hd;
            double s = 0;
            for (int i = 0; i < hd; ++i) s += static_cast<double>(qh[i]) * kj[i];
            scores[j - first] = s;
            mx = std::max(mx, s);
          }
          double sum = 0;
          for (double& s : scores) {
            s = std::exp(s - mx);
            sum += s;
          }
          float* oh = &attn[(static_cast<size_t>(t) * nh + h) * hd];
          std::vector<double> acc(hd, 0.0);
          for (int j = first; j <= pos; ++j) {
            const double pj = scores[j - first] / sum;
            const float* vj = slot.V(j) + kvh * hd;
            for (int i = 0; i < hd; ++i) acc[i] += pj * vj[i];
          }
          for (int i = 0; i < hd; ++i) oh[i] = static_cast<float>(acc[i]);
        }
      }
      ref::LinearForward(w.o, attn.data(), m, tmp.data());
      for (int t = 0; t < m; ++t) {
        ref::RmsNorm(&tmp[t * H], H, w.post_attn_norm, eps, &tmp[t * H]);
        for (int i = 0; i < H; ++i) x[t * H + i] += tmp[t * H + i];
        ref::RmsNorm(&x[t * H], H, w.pre_ffn_norm, eps, &a[t * H]);
      }
      const int I = p.intermediate;
      std::vector<float> g(static_cast<size_t>(m) * I), u(g.size());
      ref::LinearForward(w.gate, a.data(), m, g.data());
      ref::LinearForward(w.up, a.data(), m, u.data());
      for (size_t i = 0; i < g.size(); ++i) g[i] = ref::GeluTanh(g[i]) * u[i];
      ref::LinearForward(w.down, g.data(), m, tmp.data());
      for (int t = 0; t < m; ++t) {
        ref::RmsNorm(&tmp[t * H], H, w.post_ffn_norm, eps, &tmp[t * H]);
        for (int i = 0; i < H; ++i) x[t * H + i] += tmp[t * H + i];
      }
      if (P > 0) {
        std::vector<float> gp(static_cast<size_t>(m) * P);
        ref::LinearForward(w.ple_gate, x.data(), m, gp.data());
        for (int t = 0; t < m; ++t) {
          const float* pl = &ple[(static_cast<size_t>(t) * L + l) * P];
          for (int i = 0; i < P; ++i) gp[t * P + i] = ref::GeluTanh(gp[t * P + i]) * pl[i];
        }
        ref::LinearForward(w.ple_proj, gp.data(), m, tmp.data());
        for (int t = 0; t < m; ++t) {
          ref::RmsNorm(&tmp[t * H], H, w.post_ple_norm, eps, &tmp[t * H]);
          for (int i = 0; i < H; ++i) x[t * H + i] += tmp[t * H + i];
        }
      }
      for (float& v : x) v *= w.layer_scalar;
    }

    // This chunk's keys are in place: positions [pos0, pos0 + m) are now cached.
    window_.Commit(pos0 + m);

    if (req.mode == OutputMode::kNone) return;
    const int first_out = req.all_positions ? 0 : (last_chunk ? m - 1 : m);
    const int V = cfg_.vocab_size;
    std::vector<float> hnorm(H), logits(V);
    for (int t = first_out; t < m; ++t) {
      ref::RmsNorm(&x[t * H], H, model_.final_norm(), eps, hnorm.data());
      ref::LinearForward(model_.lm_head(), hnorm.data(), 1, logits.data());
      if (cfg_.final_logit_softcapping) {
        const float cap = *cfg_.final_logit_softcapping;
        for (float& z : logits) z = ref::TanhF(z / cap) * cap;
      }
      Emit(logits, req, out);
    }
  }

  void Emit(const std::vector<float>& logits, const ForwardRequest& req, ForwardResult* out) const {
    const int V = static_cast<int>(logits.size());
    switch (req.mode) {
      case OutputMode::kLogits:
        out->logits.insert(out->logits.end(), logits.begin(), logits.end());
        break;
      case OutputMode::kArgmax: {
        int best = 0;
        for (int i = 1; i < V; ++i) {
          if (logits[i] > logits[best]) best = i;
        }
        out->ids.push_back(best);
        break;
      }
      case OutputMode::kSelect:
        SelectFromLogits(logits.data(), V, *req.allowed, out);
        break;
      case OutputMode::kNone:
        break;
    }
  }

  std::shared_ptr<const BackendModel> owner_;  // keeps the shared model alive
  const Model& model_;
  const TextConfig& cfg_;
  int capacity_ = 0;
  int slack_ = 0;
  int sliding_ring_ = 0;
  CacheWindow window_;
  std::vector<Slot> slots_;
  std::vector<float> inv_freq_sliding_, inv_freq_full_;
};

// The reference shares nothing but the mapped checkpoint: contexts read the Model's weights
// directly and never write shared state, so they need no lock.
class CpuReferenceModel : public BackendModel {
 public:
  explicit CpuReferenceModel(const Model& model) : model_(model) {}
  std::string name() const override { return "cpu-reference"; }
  std::unique_ptr<Backend> NewContext(const BackendOptions& options) override {
    return std::make_unique<CpuReferenceBackend>(model_, options, shared_from_this());
  }
  size_t shared_bytes() const override { return 0; }
  void EncodeImage(const VisionPatches& image, std::vector<float>* soft_tokens) override {
    const VisionTower* t = model_.vision();
    if (!t) throw Error(ErrorCode::kUnsupported, model_.vision_error());
    const std::vector<float> pooled = ref::VisionTowerForward(*t, image);
    const int k = t->config.pooling_kernel_size;
    *soft_tokens = ref::EmbedVision(*t, pooled, image.patches_h * image.patches_w / (k * k));
  }
  void EncodeAudio(const AudioMel& audio, std::vector<float>* soft_tokens) override {
    const AudioTower* t = model_.audio();
    if (!t) throw Error(ErrorCode::kUnsupported, model_.audio_error());
    const std::vector<float> out = ref::AudioTowerForward(*t, audio);
    *soft_tokens =
        ref::EmbedAudio(*t, out, static_cast<int>(out.size() / t->config.output_proj_dims));
  }

 private:
  const Model& model_;
};

}  // namespace

std::shared_ptr<BackendModel> CreateCpuReferenceModel(const Model& model) {
  return std::make_shared<CpuReferenceModel>(model);
}

std::unique_ptr<Backend> CreateCpuReferenceBackend(const Model& model,
                                                   const BackendOptions& options) {
  return CreateCpuReferenceModel(model)->NewContext(options);
}

}  // namespace gemma
