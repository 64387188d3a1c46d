#include "backend/cpu/fast/cpu_fast_backend.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <utility>

#include "backend/cache_window.h"
#include "backend/cpu/fast/fast_ops.h"
#include "backend/cpu/fast/towers.h"
#include "backend/cpu/fast/weight_copy.h"
#include "backend/cpu/reference_ops.h"
#include "backend/cpu/vision_ops.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "gemma/error.h"

namespace gemma {
namespace {

// The integer k of an SRQ output x = k * s (x / s is within an ulp of k: round to nearest).
inline int Level(float x, float s) {
  const float r = x / s;
  return std::clamp(static_cast<int>(r + (r >= 0 ? 0.5f : -0.5f)), -128, 127);
}

// GELU of an SRQ output: the input takes only the 256 values k * s, so a table of the reference's
// GeluTanh is exact.
struct GeluTable {
  float scale = 0;  // 0: no table (dense or no output SRQ)
  std::array<float, 256> value{};
  void Init(const Linear& lin) {
    scale = IsQuantized(lin.kind) && lin.out_scale > 0 ? lin.out_scale : 0;
    if (scale > 0)
      for (int k = -128; k < 128; ++k)
        value[k + 128] = ref::GeluTanh(static_cast<float>(k) * scale);
  }
  float operator()(float x) const {
    if (scale == 0) return ref::GeluTanh(x);
    return value[Level(x, scale) + 128];
  }
};

// Multiply-adds below which a job runs on the calling thread.
constexpr int64_t kMinParallelWork = 1 << 16;

template <class T>
void Grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

float Softcap(const TextConfig& cfg, float z) {
  const float cap = *cfg.final_logit_softcapping;
  return ref::TanhF(z / cap) * cap;
}

// What the fast CPU contexts of one engine share: the weight copy in huge pages, the thread pool
// and the per-layer tables. The pool runs one job at a time, so contexts take turns (run_mutex).
class CpuFastModel : public BackendModel {
 public:
  CpuFastModel(const Model& model, int threads)
      : model_(model), pool_(threads), weights_(model) {
    const TextConfig& cfg = model.text();
    gelu_.resize(cfg.num_layers);
    gelu_ple_.resize(cfg.num_layers);
    for (int l = 0; l < cfg.num_layers; ++l) {
      gelu_[l].Init(model.layer_weights()[l].gate);
      if (cfg.hidden_size_per_layer_input > 0)
        gelu_ple_[l].Init(model.layer_weights()[l].ple_gate);
    }
    const Linear& head = model.lm_head();
    if (cfg.final_logit_softcapping && IsQuantized(head.kind) && head.out_scale > 0) {
      cap_table_.resize(256);
      for (int k = -128; k < 128; ++k)
        cap_table_[k + 128] = Softcap(cfg, static_cast<float>(k) * head.out_scale);
    }
    if (model.vision())
      vision_ =
          std::make_unique<fast::FastVisionTower>(*model.vision(), pool_, /*keep_panels=*/true);
  }
  std::string name() const override { return "cpu-fast"; }
  std::unique_ptr<Backend> NewContext(const BackendOptions& options) override;
  size_t shared_bytes() const override {
    return weights_.bytes() + (vision_ ? vision_->panel_bytes() : 0);
  }
  // The vision tower: the reference's arithmetic with the fast kernels on the thread pool
  // (towers.h).
  void EncodeImage(const VisionPatches& image, std::vector<float>* soft_tokens) override;
  // The audio tower: the reference's arithmetic with the linears on the pool (as the vision
  // tower's); the attention and convolutions stay the reference's.
  void EncodeAudio(const AudioMel& audio, std::vector<float>* soft_tokens) override;
  // One step over the contexts' tokens: one pass over the weights (the linears and the head take
  // all rows at once), attention per row on its own context's caches.
  void ForwardBatch(std::span<BatchStep> steps) override;
  bool batches_steps() const override { return true; }
  bool batches_multi_token_steps() const override { return true; }

  const Model& model_;
  ThreadPool pool_;
  fast::WeightCopy weights_;  // the linears, copied into huge pages
  std::vector<GeluTable> gelu_, gelu_ple_;
  std::vector<float> cap_table_;
  std::mutex run_mutex_;
  // The vision tower with its panels and activations kept across images (towers.h: its memory);
  // null without a vision tower.
  std::unique_ptr<fast::FastVisionTower> vision_;
};

void CpuFastModel::EncodeImage(const VisionPatches& image, std::vector<float>* soft_tokens) {
  std::lock_guard<std::mutex> lock(run_mutex_);  // one job on the pool at a time
  if (!vision_) throw Error(ErrorCode::kUnsupported, model_.vision_error());
  vision_->Encode(image, soft_tokens);
}

void CpuFastModel::EncodeAudio(const AudioMel& audio, std::vector<float>* soft_tokens) {
  std::lock_guard<std::mutex> lock(run_mutex_);
  FastEncodeAudio(model_, pool_, audio, soft_tokens);
}

class CpuFastBackend : public Backend {
 public:
  CpuFastBackend(std::shared_ptr<CpuFastModel> shared, const BackendOptions& options)
      : shared_(std::move(shared)),
        model_(shared_->model_),
        cfg_(model_.text()),
        pool_(shared_->pool_),
        weights_(shared_->weights_),
        gelu_(shared_->gelu_),
        gelu_ple_(shared_->gelu_ple_),
        cap_table_(shared_->cap_table_) {
    const Model& model = model_;
    const CacheGeometry geo = PlanCacheGeometry(cfg_, options);
    capacity_ = geo.capacity;
    slack_ = geo.slack;
    sliding_ring_ = geo.ring;
    window_ = CacheWindow(cfg_.sliding_window, sliding_ring_);
    slots_.resize(model.num_caches());
    for (const LayerPlan& p : model.layers()) {
      max_hd_ = std::max(max_hd_, p.head_dim);
      max_inter_ = std::max(max_inter_, p.intermediate);
      if (p.cache_slot < 0) continue;
      Slot& s = slots_[p.cache_slot];
      s.width = p.num_kv_heads * p.head_dim;
      s.ring = p.window > 0 ? sliding_ring_ : capacity_;
    }
    inv_freq_sliding_ = ref::RopeInvFreq(cfg_.rope_sliding, cfg_.head_dim);
    inv_freq_full_ = ref::RopeInvFreq(cfg_.rope_full, cfg_.global_head_dim);
    // Attention scores for up to capacity keys per thread, sized once (decode never allocates).
    const int group = cfg_.num_heads / std::max(1, cfg_.num_kv_heads);
    scores_.assign(pool_.size(), std::vector<double>(static_cast<size_t>(group) * capacity_));
    acc_.assign(pool_.size(), std::vector<double>(static_cast<size_t>(group) * max_hd_));
    qd_.assign(pool_.size(), std::vector<double>(static_cast<size_t>(group) * max_hd_));
  }

  std::string name() const override { return "cpu-fast"; }
  bool belongs_to(const CpuFastModel* model) const { return shared_.get() == model; }
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
    for (const auto* v : {&x_, &a_, &tmp_, &q_, &k_, &v_, &attn_, &g_, &u_, &ple_, &gp_, &logits_,
                          &hnorm_, &rope_cos_, &rope_sin_})
      b += v->capacity() * sizeof(float);
    for (int i = 0; i < kMaxJobs; ++i) b += qa_[i].capacity() + qsum_[i].capacity() * 4;
    b += levels_.capacity();
    for (const auto& s : scores_) b += s.capacity() * sizeof(double);
    return b;
  }

  void Forward(const ForwardRequest& req, ForwardResult* out) override {
    const int n = static_cast<int>(req.tokens.size());
    ValidateForward(req, window_.cached(), capacity_, cfg_.vocab_size);
    std::lock_guard<std::mutex> lock(shared_->run_mutex_);
    out->ids.clear();
    out->logprobs.clear();
    out->logits.clear();
    const int chunk = std::max(1, slack_);
    for (int begin = 0; begin < n; begin += chunk) {
      const int m = std::min(chunk, n - begin);
      RunChunk(req.tokens.subspan(begin, m),
               req.soft.empty() ? req.soft : req.soft.subspan(begin, m), begin + m == n, req, out);
    }
  }

  // ForwardBatch's work for validated steps, on this context's scratch (the caller holds the
  // model's run mutex; ctx[i] is steps[i]'s context, every one distinct). A step of several tokens
  // (all_positions) is that many rows of its context at consecutive positions, as RunChunk
  // evaluates them; every row gives what it gives alone.
  void RunBatch(std::span<CpuFastBackend* const> ctx, std::span<BatchStep* const> steps) {
    const int n = static_cast<int>(steps.size());
    const bool none = steps[0]->request.mode == OutputMode::kNone;
    int m = 0;
    for (int i = 0; i < n; ++i) {
      if ((steps[i]->request.mode == OutputMode::kNone) != none)
        throw Error(ErrorCode::kInvalidArgument, "ForwardBatch: kNone mixed with outputs");
      m += static_cast<int>(steps[i]->request.tokens.size());
    }
    row_tok_.resize(m);
    row_soft_.resize(m);
    row_pos_.resize(m);
    row_ctx_.resize(m);
    out_rows_.resize(m);
    bool soft = false;
    for (int i = 0, t = 0; i < n; ++i) {
      const ForwardRequest& req = steps[i]->request;
      for (size_t j = 0; j < req.tokens.size(); ++j, ++t) {
        row_tok_[t] = req.tokens[j];
        row_soft_[t] = req.soft.empty() ? nullptr : req.soft[j];
        soft = soft || row_soft_[t];
        row_pos_[t] = ctx[i]->cached() + static_cast<int>(j);
        row_ctx_[t] = ctx[i];
        out_rows_[t] = {&req, steps[i]->result};
      }
      steps[i]->result->ids.clear();
      steps[i]->result->logprobs.clear();
      steps[i]->result->logits.clear();
    }
    RunRows(m, none ? m : 0, row_tok_.data(), soft ? row_soft_.data() : nullptr, row_ctx_.data(),
            row_pos_.data(), out_rows_.data());
  }

 private:
  // Where a row's outputs go.
  struct OutRow {
    const ForwardRequest* req;
    ForwardResult* out;
  };
  using Slot = CpuKvSlot;

  float Softcap(float z) const { return gemma::Softcap(cfg_, z); }

  void EnsureScratch(int m) {
    const int H = cfg_.hidden_size;
    const size_t M = static_cast<size_t>(m);
    const size_t qw = static_cast<size_t>(cfg_.num_heads) * max_hd_;
    const size_t kvw = static_cast<size_t>(cfg_.num_kv_heads) * max_hd_;
    Grow(x_, M * H);
    Grow(a_, M * H);
    Grow(tmp_, M * H);
    Grow(q_, M * qw);
    Grow(k_, M * kvw);
    Grow(v_, M * kvw);
    Grow(attn_, M * qw);
    Grow(g_, M * max_inter_);
    Grow(u_, M * max_inter_);
    const int P = cfg_.hidden_size_per_layer_input;
    Grow(ple_, M * cfg_.num_layers * P);
    Grow(ple_tok_, static_cast<size_t>(cfg_.num_layers) * P);
    Grow(gp_, M * P);
    const int widest = std::max({H, static_cast<int>(qw), max_inter_, P});
    for (int i = 0; i < kMaxJobs; ++i) {
      Grow(qa_[i], M * (fast::PaddedCols(WeightKind::kQ2, widest) + 256));
      Grow(qsum_[i], M);
    }
    Grow(rope_cos_, M * (cfg_.head_dim / 2 + cfg_.global_head_dim / 2));
    Grow(rope_sin_, M * (cfg_.head_dim / 2 + cfg_.global_head_dim / 2));
    Grow(hnorm_, static_cast<size_t>(H));
    Grow(logits_, static_cast<size_t>(cfg_.vocab_size));
    Grow(levels_, static_cast<size_t>(cfg_.vocab_size));
  }

  // Rows per task: enough tasks to balance the pool, whole register tiles, not too small; one task
  // for work too small to amortize a hand-off.
  // Decode: two row ranges per thread. Each task streams its rows with a software prefetch that
  // restarts cold at the task's start, so few long ranges beat many short ones (kernel_bench
  // decode: 17.9 vs 19.2 ms for all linears on 2 threads with 4 vs 16 tasks; decode ITL ~22.9 vs
  // ~24.2 ms); two per thread beat one and three (and keep some balancing when a thread is
  // preempted).
  int RowTile(int rows, int cols, int n) const {
    if (static_cast<int64_t>(rows) * cols * n < kMinParallelWork) return rows;
    const int tasks = pool_.size() * (n > 1 ? 4 : 2);
    int tile = (rows + tasks - 1) / tasks;
    tile = std::max(tile, 16);
    return (tile + 3) / 4 * 4;
  }

  struct LinearJob {
    const Linear* lin;
    const float* x;  // [n, lin->cols]
    float* y;        // [n, lin->rows]
  };

  // Evaluates up to kMaxJobs linears over the same n tokens in one pool job (q/k/v, gate/up share
  // a hand-off): each job's input is SRQ-quantized (once per distinct input and scale), then the
  // row tiles of all jobs are spread over the pool.
  static constexpr int kMaxJobs = 3;
  void RunLinears(std::initializer_list<LinearJob> list, int n) {
    const LinearJob* jobs = list.begin();
    const int count = static_cast<int>(list.size());
    int tile[kMaxJobs], first_task[kMaxJobs + 1] = {0}, pc[kMaxJobs], slot[kMaxJobs];
    int slots = 0;
    for (int j = 0; j < count; ++j) {
      const Linear& lin = *jobs[j].lin;
      tile[j] = RowTile(lin.rows, lin.cols, n);
      first_task[j + 1] = first_task[j] + (lin.rows + tile[j] - 1) / tile[j];
      slot[j] = -1;
      if (!IsQuantized(lin.kind) || !(lin.in_scale > 0)) continue;
      pc[j] = fast::PaddedCols(lin.kind, lin.cols);
      for (int i = 0; i < j; ++i) {
        const Linear& o = *jobs[i].lin;
        if (IsQuantized(o.kind) && o.in_scale == lin.in_scale && jobs[i].x == jobs[j].x &&
            fast::BlockElems(o.kind) == fast::BlockElems(lin.kind) && o.cols == lin.cols) {
          slot[j] = slot[i];
        }
      }
      if (slot[j] < 0) {
        slot[j] = slots++;
        int8_t* qa = qa_[slot[j]].data();
        int32_t* qs = qsum_[slot[j]].data();
        auto quant = [&](int t, int) {
          qs[t] = fast::QuantizeActs(lin.kind, jobs[j].x + static_cast<size_t>(t) * lin.cols,
                                     lin.cols, lin.in_scale, qa + static_cast<size_t>(t) * pc[j]);
        };
        if (n >= 16 && static_cast<int64_t>(n) * lin.cols >= kMinParallelWork / 16) {
          pool_.Run(n, quant);
        } else {
          for (int t = 0; t < n; ++t) quant(t, 0);
        }
      }
    }
    pool_.Run(first_task[count], [&](int task, int) {
      int j = 0;
      while (task >= first_task[j + 1]) ++j;
      const Linear& lin = *jobs[j].lin;
      const int r0 = (task - first_task[j]) * tile[j], r1 = std::min(lin.rows, r0 + tile[j]);
      if (IsQuantized(lin.kind) && !(lin.in_scale > 0)) {
        // QAT weights without input SRQ (not in published checkpoints): f32 inputs.
        fast::QuantFloatLinearRows(lin, jobs[j].x, lin.cols, n, r0, r1, jobs[j].y, lin.rows);
      } else if (IsQuantized(lin.kind)) {
        fast::QuantLinearRows(lin, qa_[slot[j]].data(), pc[j], qsum_[slot[j]].data(), n, r0, r1,
                              jobs[j].y, lin.rows);
      } else {
        fast::DenseLinearRows(lin, jobs[j].x, lin.cols, n, r0, r1, jobs[j].y, lin.rows);
      }
    });
  }

  // y[n, lin.rows] = lin(x[n, lin.cols]).
  void RunLinear(const Linear& lin, const float* x, int n, float* y) {
    RunLinears({{&lin, x, y}}, n);
  }

  // Runs fn(t) for each token, on the pool when there are many (a hand-off costs more than a few
  // tokens' norms: batched decode steps of up to 16 rows stay on the calling thread).
  template <class Fn>
  void ForTokens(int m, const Fn& fn) {
    if (m >= 16 && static_cast<int64_t>(m) * cfg_.hidden_size >= kMinParallelWork / 16) {
      pool_.Run(m, [&](int t, int) { fn(t); });
    } else {
      for (int t = 0; t < m; ++t) fn(t);
    }
  }

  // The reference's ApplyRope with cos/sin precomputed for the position.
  static void Rope(float* x, int head_dim, const float* c, const float* s) {
    const int half = head_dim / 2;
    for (int i = 0; i < half; ++i) {
      const float a = x[i], b = x[i + half];
      x[i] = a * c[i] + (-b) * s[i];
      x[i + half] = b * c[i] + a * s[i];
    }
  }

  // Row t attends to the keys of cache `cache` of context ctx[t] up to position pos[t].
  void Attention(const LayerPlan& p, int cache, int m, CpuFastBackend* const* ctx,
                 const int* pos) {
    const int hd = p.head_dim, nh = p.num_heads, nkv = p.num_kv_heads;
    const int group = nh / nkv;
    int64_t keys = 0;  // keys read by all rows
    for (int t = 0; t < m; ++t) keys += p.window > 0 ? std::min(p.window, pos[t] + 1) : pos[t] + 1;
    if (keys * nh * hd < kMinParallelWork) {
      for (int task = 0; task < m * nkv; ++task) TokenGroup(p, cache, ctx, pos, task, 0, 1, 0);
    } else {
      // One task per (token, kv head, part of its query heads); the heads of a task read each key
      // and value once (f32 -> f64 conversion amortized over them). Prefill: the whole group per
      // task; decode: the group split over the pool (E2B: 8 query heads, 1 kv head).
      const int parts = m < 2 * pool_.size() ? std::min(group, pool_.size()) : 1;
      pool_.Run(m * nkv * parts, [&](int task, int thread) {
        TokenGroup(p, cache, ctx, pos, task / parts, task % parts, parts, thread);
      });
    }
  }

  // Query heads [part * group / parts, (part + 1) * group / parts) of kv head task % nkv for
  // row task / nkv.
  void TokenGroup(const LayerPlan& p, int cache, CpuFastBackend* const* ctx, const int* positions,
                  int task, int part, int parts, int thread) {
    const int hd = p.head_dim, nh = p.num_heads, nkv = p.num_kv_heads;
    const int group = nh / nkv;
    const int hb = part * group / parts, he = (part + 1) * group / parts;
    const int t = task / nkv, kvh = task % nkv;
    Slot& slot = ctx[t]->slots_[cache];
    const int pos = positions[t];
    const int first = p.window > 0 ? std::max(0, pos - p.window + 1) : 0;
    const int nk = pos - first + 1;
    const size_t ld = static_cast<size_t>(capacity_);
    double* qd = qd_[thread].data();
    const float* q = &q_[(static_cast<size_t>(t) * nh + kvh * group) * hd];
    for (int i = hb * hd; i < he * hd; ++i) qd[i] = q[i];
    double* sc = scores_[thread].data();  // [group][ld]
    // Keys first..pos occupy ring slots in at most two contiguous runs.
    int seg_begin[2], seg_len[2], segs = 0;
    for (int j = first; j <= pos;) {
      const int slot_j = j % slot.ring;
      const int len = std::min(pos - j + 1, slot.ring - slot_j);
      seg_begin[segs] = j;
      seg_len[segs++] = len;
      j += len;
    }
    double* acc = acc_[thread].data();
    std::fill(acc + static_cast<size_t>(hb) * hd, acc + static_cast<size_t>(he) * hd, 0.0);
    for (int h0 = hb; h0 < he; h0 += 8) {
      const int nq = std::min(8, he - h0);
      for (int s = 0; s < segs; ++s) {
        fast::QueryKeyDotsF64(qd + h0 * hd, nq, hd, slot.K(seg_begin[s]) + kvh * hd, slot.width,
                              seg_len[s], sc + h0 * ld + (seg_begin[s] - first), ld);
      }
      for (int h = h0; h < h0 + nq; ++h) fast::SoftmaxF64(sc + h * ld, nk);
      for (int s = 0; s < segs; ++s) {
        fast::WeightedValuesF64(sc + h0 * ld + (seg_begin[s] - first), ld, nq,
                                slot.V(seg_begin[s]) + kvh * hd, slot.width, seg_len[s], hd,
                                acc + h0 * hd);
      }
    }
    float* o = &attn_[(static_cast<size_t>(t) * nh + kvh * group) * hd];
    for (int i = hb * hd; i < he * hd; ++i) o[i] = static_cast<float>(acc[i]);
  }

  // Consecutive tokens of this context: rows of RunRows.
  void RunChunk(std::span<const int32_t> tokens, std::span<const float* const> soft,
                bool last_chunk, const ForwardRequest& req, ForwardResult* out) {
    const int m = static_cast<int>(tokens.size());
    // Positions whose logits this chunk returns: [first_out, m).
    const int first_out = req.mode == OutputMode::kNone ? m
                          : req.all_positions           ? 0
                          : last_chunk                  ? m - 1
                                                        : m;
    row_ctx_.assign(m, this);
    row_pos_.resize(m);
    for (int t = 0; t < m; ++t) row_pos_[t] = window_.cached() + t;
    out_rows_.assign(m - first_out, OutRow{&req, out});
    RunRows(m, first_out, tokens.data(), soft.empty() ? nullptr : soft.data(), row_ctx_.data(),
            row_pos_.data(), out_rows_.data());
  }

  // Evaluates m rows on this context's scratch: row t is token tok[t] (or the soft token soft[t]
  // where that is set) at position pos[t] of context ctx[t], whose caches it extends (a chunk: this
  // context at consecutive positions; a batch: one row per context). Rows [first_out, m) produce
  // outputs, row first_out + i for outs[i].
  void RunRows(int m, int first_out, const int32_t* tok, const float* const* soft,
               CpuFastBackend* const* ctx, const int* pos, const OutRow* outs) {
    const int H = cfg_.hidden_size;
    const int P = cfg_.hidden_size_per_layer_input;
    const int L = cfg_.num_layers;
    const int rows = m;
    CpuFastBackend* const* row_ctx = ctx;
    const int* row_pos = pos;
    for (int t = 0; t < m; ++t) {
      ctx[t]->window_.BeginWrite(pos[t], 1);
      for (Slot& s : ctx[t]->slots_) s.Reserve(pos[t] + 1);
    }
    const float eps = cfg_.rms_norm_eps;
    EnsureScratch(m);
    float* x = x_.data();
    float* a = a_.data();
    float* tmp = tmp_.data();

    ForTokens(m, [&](int t) {
      if (soft && soft[t]) {
        std::memcpy(x + static_cast<size_t>(t) * H, soft[t], sizeof(float) * H);
      } else {
        ref::EmbeddingRowFast(model_.embed(), model_.EmbedId(tok[t]),
                              x + static_cast<size_t>(t) * H);
      }
    });

    // RoPE tables for the rows' positions: sliding then full, half a head each.
    const int hs = cfg_.head_dim / 2, hf = cfg_.global_head_dim / 2;
    for (int t = 0; t < m; ++t) {
      float* cs = &rope_cos_[static_cast<size_t>(t) * (hs + hf)];
      float* sn = &rope_sin_[static_cast<size_t>(t) * (hs + hf)];
      const float pos_f = static_cast<float>(pos[t]);
      for (int i = 0; i < hs; ++i) {
        const float f = pos_f * inv_freq_sliding_[i];
        cs[i] = std::cos(f);
        sn[i] = std::sin(f);
      }
      for (int i = 0; i < hf; ++i) {
        const float f = pos_f * inv_freq_full_[i];
        cs[hs + i] = std::cos(f);
        sn[hs + i] = std::sin(f);
      }
    }

    if (P > 0) {
      const int LP = L * P;
      RunLinear(weights_.ple_model_proj(), x, m, ple_.data());
      const float proj_scale = model_.ple_model_proj_scale();
      const float in_scale = model_.ple_input_scale();
      const float* norm = model_.ple_proj_norm().data();
      for (int t = 0; t < m; ++t) {
        ref::EmbeddingRowFast(model_.ple_embed(), model_.EmbedId(tok[t]), ple_tok_.data());
        float* row = &ple_[static_cast<size_t>(t) * LP];
        fast::ScaleF32(proj_scale, LP, row);
        for (int l = 0; l < L; ++l) fast::RmsNorm(row + l * P, P, norm, eps, row + l * P);
        fast::AddF32(ple_tok_.data(), LP, row);
        fast::ScaleF32(in_scale, LP, row);
      }
    }

    for (int l = 0; l < L; ++l) {
      if (l == model_.shared_tail() && first_out > 0) {
        // From here on every layer reads another layer's cache and writes none, so a position's
        // hidden state only feeds its own logits: positions without output stop here (their
        // cache entries are all written). The rest move to the front of the scratch rows.
        if (first_out == m) break;
        const int keep = m - first_out;
        const size_t rw = static_cast<size_t>(hs + hf);
        std::memmove(x, x + static_cast<size_t>(first_out) * H, sizeof(float) * keep * H);
        std::memmove(rope_cos_.data(), rope_cos_.data() + first_out * rw,
                     sizeof(float) * keep * rw);
        std::memmove(rope_sin_.data(), rope_sin_.data() + first_out * rw,
                     sizeof(float) * keep * rw);
        if (P > 0) {
          const size_t lp = static_cast<size_t>(L) * P;
          std::memmove(ple_.data(), ple_.data() + first_out * lp, sizeof(float) * keep * lp);
        }
        ctx += first_out;
        pos += first_out;
        m = keep;
        first_out = 0;
      }
      const LayerPlan& p = model_.layers()[l];
      const LayerWeights& w = model_.layer_weights()[l];  // norms, scalar
      const fast::LayerLinears& lw = weights_.layers()[l];
      const int hd = p.head_dim, nh = p.num_heads, nkv = p.num_kv_heads;
      const int rope_off = p.type == LayerType::kSliding ? 0 : hs;
      ForTokens(m, [&](int t) {
        fast::RmsNorm(x + static_cast<size_t>(t) * H, H, w.input_norm.data(), eps,
                      a + static_cast<size_t>(t) * H);
      });

      if (p.kv_shared) {
        RunLinear(lw.q, a, m, q_.data());
      } else {
        RunLinears({{&lw.q, a, q_.data()}, {&lw.k, a, k_.data()}, {&lw.v, a, v_.data()}}, m);
      }
      ForTokens(m, [&](int t) {
        const float* cs = &rope_cos_[static_cast<size_t>(t) * (hs + hf) + rope_off];
        const float* sn = &rope_sin_[static_cast<size_t>(t) * (hs + hf) + rope_off];
        for (int h = 0; h < nh; ++h) {
          float* qh = &q_[(static_cast<size_t>(t) * nh + h) * hd];
          fast::RmsNorm(qh, hd, w.q_norm.data(), eps, qh);
          Rope(qh, hd, cs, sn);
        }
      });
      const int cache = model_.layers()[p.kv_layer].cache_slot;
      if (!p.kv_shared) {
        ForTokens(m, [&](int t) {
          const float* cs = &rope_cos_[static_cast<size_t>(t) * (hs + hf) + rope_off];
          const float* sn = &rope_sin_[static_cast<size_t>(t) * (hs + hf) + rope_off];
          for (int h = 0; h < nkv; ++h) {
            float* kh = &k_[(static_cast<size_t>(t) * nkv + h) * hd];
            float* vh = &v_[(static_cast<size_t>(t) * nkv + h) * hd];
            fast::RmsNorm(kh, hd, w.k_norm.data(), eps, kh);
            Rope(kh, hd, cs, sn);
            fast::RmsNorm(vh, hd, nullptr, eps, vh);
          }
          Slot& slot = ctx[t]->slots_[cache];
          std::copy_n(&k_[static_cast<size_t>(t) * nkv * hd], nkv * hd, slot.K(pos[t]));
          std::copy_n(&v_[static_cast<size_t>(t) * nkv * hd], nkv * hd, slot.V(pos[t]));
        });
      }

      Attention(p, cache, m, ctx, pos);
      RunLinear(lw.o, attn_.data(), m, tmp);
      ForTokens(m, [&](int t) {
        float* tt = tmp + static_cast<size_t>(t) * H;
        float* xt = x + static_cast<size_t>(t) * H;
        fast::RmsNorm(tt, H, w.post_attn_norm.data(), eps, tt);
        fast::AddF32(tt, H, xt);
        fast::RmsNorm(xt, H, w.pre_ffn_norm.data(), eps, a + static_cast<size_t>(t) * H);
      });
      const int I = p.intermediate;
      float* g = g_.data();
      float* u = u_.data();
      RunLinears({{&lw.gate, a, g}, {&lw.up, a, u}}, m);
      const GeluTable& gelu = gelu_[l];
      // Elementwise over the rows' [m, I] block, split over the pool when a batch makes it long
      // (batched decode: 4 x 12,288 products, which the pool's other thread otherwise waits out).
      const int64_t total = static_cast<int64_t>(m) * I;
      const int parts = m >= 2 && total >= kMinParallelWork / 4 ? pool_.size() : 1;
      pool_.Run(parts, [&](int c, int) {
        const int64_t b = total * c / parts / 16 * 16;
        const int64_t e = c + 1 == parts ? total : total * (c + 1) / parts / 16 * 16;
        if (gelu.scale > 0) {
          fast::TableLookupMul(g + b, static_cast<int>(e - b), gelu.scale, gelu.value.data(), u + b,
                               g + b);
        } else {
          for (int64_t i = b; i < e; ++i) g[i] = gelu(g[i]) * u[i];
        }
      });
      RunLinear(lw.down, g, m, tmp);
      ForTokens(m, [&](int t) {
        float* tt = tmp + static_cast<size_t>(t) * H;
        fast::RmsNorm(tt, H, w.post_ffn_norm.data(), eps, tt);
        fast::AddF32(tt, H, x + static_cast<size_t>(t) * H);
      });
      if (P > 0) {
        float* gp = gp_.data();
        RunLinear(lw.ple_gate, x, m, gp);
        const GeluTable& gelu_ple = gelu_ple_[l];
        for (int t = 0; t < m; ++t) {
          const float* pl = &ple_[(static_cast<size_t>(t) * L + l) * P];
          float* gt = gp + static_cast<size_t>(t) * P;
          if (gelu_ple.scale > 0) {
            fast::TableLookupMul(gt, P, gelu_ple.scale, gelu_ple.value.data(), pl, gt);
          } else {
            for (int i = 0; i < P; ++i) gt[i] = gelu_ple(gt[i]) * pl[i];
          }
        }
        RunLinear(lw.ple_proj, gp, m, tmp);
        ForTokens(m, [&](int t) {
          float* tt = tmp + static_cast<size_t>(t) * H;
          fast::RmsNorm(tt, H, w.post_ple_norm.data(), eps, tt);
          fast::AddF32(tt, H, x + static_cast<size_t>(t) * H);
        });
      }
      fast::ScaleF32(w.layer_scalar, m * H, x);
    }

    for (int t = 0; t < rows; ++t) row_ctx[t]->window_.Commit(row_pos[t] + 1);

    // The head over the output rows, kHeadRows at a time (its weights read once per group).
    const int V = cfg_.vocab_size;
    for (int t0 = first_out; t0 < m; t0 += kHeadRows) {
      const int g = std::min(kHeadRows, m - t0);
      Grow(hnorm_, static_cast<size_t>(g) * H);
      Grow(logits_, static_cast<size_t>(g) * V);
      for (int t = 0; t < g; ++t) {
        fast::RmsNorm(x + static_cast<size_t>(t0 + t) * H, H, model_.final_norm().data(), eps,
                      hnorm_.data() + static_cast<size_t>(t) * H);
      }
      RunLinear(weights_.lm_head(), hnorm_.data(), g, logits_.data());
      for (int t = 0; t < g; ++t) {
        const OutRow& o = outs[t0 + t - first_out];
        Emit(*o.req, o.out, logits_.data() + static_cast<size_t>(t) * V);
      }
    }
  }

  // Softcaps the logits z in place (exactly as the reference).
  void CapAll(float* z) {
    if (!cfg_.final_logit_softcapping) return;
    const int V = cfg_.vocab_size;
    if (!cap_table_.empty()) {
      const float s = model_.lm_head().out_scale;
      fast::TableLookupMul(z, V, s, cap_table_.data(), nullptr, z);
      return;
    }
    pool_.Run(pool_.size() * 4, [&](int task, int) {
      const int chunk = (V + pool_.size() * 4 - 1) / (pool_.size() * 4);
      const int end = std::min(V, (task + 1) * chunk);
      for (int i = task * chunk; i < end; ++i) z[i] = Softcap(z[i]);
    });
  }

  // Lowest id with the largest softcapped logit, computing the softcap for few candidates only:
  // tanh is monotone, so the ids whose capped value equals the maximum are exactly those whose raw
  // logit is at least the smallest raw value that caps to the maximum.
  int ArgmaxCapped(const float* z) const {
    const int V = cfg_.vocab_size;
    int best = 0;
    for (int i = 1; i < V; ++i) {
      if (z[i] > z[best]) best = i;
    }
    if (!cfg_.final_logit_softcapping) return best;
    const float zmax = z[best];
    const float cmax = Softcap(zmax);
    // Smallest float f <= zmax with Softcap(f) == cmax, by bisection on [lo, zmax].
    float lo = zmax;
    for (float step = 1.0f; Softcap(lo) == cmax && std::isfinite(lo); step *= 2) lo = zmax - step;
    if (!std::isfinite(lo)) return 0;  // everything caps to the maximum
    float hi = zmax;                   // Softcap(lo) < cmax == Softcap(hi)
    for (int it = 0; it < 200; ++it) {
      const float mid = lo + (hi - lo) / 2;
      if (mid <= lo || mid >= hi) break;
      if (Softcap(mid) == cmax) {
        hi = mid;
      } else {
        lo = mid;
      }
    }
    for (int i = 0; i < best; ++i) {
      if (z[i] >= hi && Softcap(z[i]) == cmax) return i;
    }
    return best;
  }

  // kSelect with a softcap table: the reference's result (lowest allowed id with the largest
  // capped logit, log-softmax in f64 summed in id order) with the capped logits' levels kept, so
  // the 262,144 exps are 256 (every capped logit is a table value) and the capping, maximum and
  // allowed argmax run in chunks on the pool; only the f64 sum stays sequential.
  void SelectByLevels(const ForwardRequest& req, ForwardResult* out, float* z) {
    const int V = cfg_.vocab_size;
    uint8_t* lev = levels_.data();
    const std::vector<uint64_t>& allowed = *req.allowed;
    std::array<int, 64> arg{};
    std::array<float, 64> cmax{};
    const int used = std::min<int>(pool_.size() * 2, arg.size());
    const int clen = (V + used - 1) / used / 64 * 64 + 64;  // whole mask words per chunk
    pool_.Run(used, [&](int c, int) {
      const int b = std::min(V, c * clen), e = std::min(V, b + clen);
      fast::TableLookupLevels(z + b, e - b, model_.lm_head().out_scale, cap_table_.data(), lev + b);
      float mx = -std::numeric_limits<float>::infinity();
      int best = -1;
      for (int i = b; i < e; ++i) {
        mx = std::max(mx, z[i]);
        if ((allowed[i >> 6] >> (i & 63)) & 1) {
          if (best < 0 || z[i] > z[best]) best = i;
        }
      }
      cmax[c] = mx;
      arg[c] = best;
    });
    int best = -1;
    double mx = -std::numeric_limits<double>::infinity();
    for (int c = 0; c < used; ++c) {
      mx = std::max(mx, static_cast<double>(cmax[c]));
      if (arg[c] >= 0 && (best < 0 || z[arg[c]] > z[best])) best = arg[c];
    }
    if (best < 0) throw Error(ErrorCode::kConstraint, "select: no token is allowed");
    std::array<double, 256> e{};
    for (int k = 0; k < 256; ++k) e[k] = std::exp(static_cast<double>(cap_table_[k]) - mx);
    double sum = 0;
    for (int i = 0; i < V; ++i) sum += e[lev[i]];
    out->ids.push_back(best);
    out->logprobs.push_back(static_cast<float>(z[best] - mx - std::log(sum)));
  }

  // The request's output from one position's logits z (capped in place).
  void Emit(const ForwardRequest& req, ForwardResult* out, float* z) {
    const int V = cfg_.vocab_size;
    switch (req.mode) {
      case OutputMode::kArgmax:
        if (!cap_table_.empty()) {
          // Softcap by table and argmax in one pass, in chunks on the pool; chunks merge in order
          // (a later chunk wins only with a strictly larger value: the lowest index of the max).
          std::array<int, 64> arg{};
          const int used = std::min<int>(pool_.size() * 2, arg.size());
          const int clen = (V + used - 1) / used;
          pool_.Run(used, [&](int c, int) {
            const int b = c * clen, e = std::min(V, b + clen);
            arg[c] =
                b < e ? b + fast::TableLookupArgmax(z + b, e - b, model_.lm_head().out_scale,
                                                    cap_table_.data())
                      : -1;
          });
          int best = arg[0];
          for (int c = 1; c < used; ++c) {
            if (arg[c] >= 0 && z[arg[c]] > z[best]) best = arg[c];
          }
          out->ids.push_back(best);
        } else {
          out->ids.push_back(ArgmaxCapped(z));
        }
        break;
      case OutputMode::kLogits:
        CapAll(z);
        out->logits.insert(out->logits.end(), z, z + V);
        break;
      case OutputMode::kSelect: {
        if (!cap_table_.empty()) {
          SelectByLevels(req, out, z);
          break;
        }
        CapAll(z);
        SelectFromLogits(z, V, *req.allowed, out);
        break;
      }
      case OutputMode::kNone:
        break;
    }
  }

  std::shared_ptr<CpuFastModel> shared_;
  const Model& model_;
  const TextConfig& cfg_;
  ThreadPool& pool_;                 // shared, taken under shared_->run_mutex_
  const fast::WeightCopy& weights_;  // shared
  int capacity_ = 0;
  int slack_ = 0;
  int sliding_ring_ = 0;
  CacheWindow window_;
  int max_hd_ = 0, max_inter_ = 0;
  std::vector<Slot> slots_;
  std::vector<float> inv_freq_sliding_, inv_freq_full_;
  const std::vector<GeluTable>&gelu_, &gelu_ple_;  // shared tables
  const std::vector<float>& cap_table_;
  // Scratch, grown on demand and reused.
  std::vector<float> x_, a_, tmp_, q_, k_, v_, attn_, g_, u_, ple_, ple_tok_, gp_, logits_, hnorm_;
  std::vector<float> rope_cos_, rope_sin_;
  std::vector<uint8_t> levels_;       // kSelect: table index of each capped logit
  std::vector<int8_t> qa_[kMaxJobs];  // quantized activations, one buffer per job slot
  std::vector<int32_t> qsum_[kMaxJobs];
  std::vector<std::vector<double>> scores_, acc_, qd_;  // per thread
  // RunRows' row descriptions (RunChunk, RunBatch).
  std::vector<CpuFastBackend*> row_ctx_;
  std::vector<int> row_pos_;
  std::vector<int32_t> row_tok_;
  std::vector<const float*> row_soft_;
  std::vector<OutRow> out_rows_;
  // Output rows per pass of the head (E2B: 1 MiB of logits each).
  static constexpr int kHeadRows = 16;
};

std::unique_ptr<Backend> CpuFastModel::NewContext(const BackendOptions& options) {
  return std::make_unique<CpuFastBackend>(
      std::static_pointer_cast<CpuFastModel>(shared_from_this()), options);
}

void CpuFastModel::ForwardBatch(std::span<BatchStep> steps) {
  std::vector<CpuFastBackend*> ctx;
  std::vector<BatchStep*> valid;
  for (BatchStep& s : steps) {
    try {
      auto* c = dynamic_cast<CpuFastBackend*>(s.context);
      if (!c || !c->belongs_to(this))
        throw Error(ErrorCode::kInvalidArgument, "ForwardBatch: a context of another model");
      if (s.request.tokens.empty())
        throw Error(ErrorCode::kInvalidArgument, "ForwardBatch: a step without tokens");
      if (s.request.tokens.size() > 1 &&
          (!s.request.all_positions || s.request.mode == OutputMode::kNone)) {
        throw Error(ErrorCode::kInvalidArgument,
                    "ForwardBatch: a step of several tokens returns every position's output "
                    "(all_positions)");
      }
      if (std::find(ctx.begin(), ctx.end(), c) != ctx.end())
        throw Error(ErrorCode::kInvalidArgument, "ForwardBatch: a context twice in one batch");
      ValidateForward(s.request, c->cached(), c->capacity(), model_.text().vocab_size);
      ctx.push_back(c);
      valid.push_back(&s);
    } catch (...) {
      s.error = std::current_exception();
    }
  }
  if (valid.empty()) return;
  std::lock_guard<std::mutex> lock(run_mutex_);
  // The scratch of the context with the largest capacity (attention scores are sized by it).
  CpuFastBackend* lead = *std::max_element(
      ctx.begin(), ctx.end(), [](auto* a, auto* b) { return a->capacity() < b->capacity(); });
  try {
    lead->RunBatch(ctx, valid);
  } catch (...) {
    for (BatchStep* s : valid) s->error = std::current_exception();
  }
}

}  // namespace

std::shared_ptr<BackendModel> CreateCpuFastModel(const Model& model, int threads) {
  return std::make_shared<CpuFastModel>(model, threads);
}

std::unique_ptr<Backend> CreateCpuFastBackend(const Model& model, const BackendOptions& options,
                                              int threads) {
  return CreateCpuFastModel(model, threads)->NewContext(options);
}

}  // namespace gemma
