#include "backend/cpu/fast/towers.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>
#include <utility>

#include "backend/cpu/audio_ops.h"
#include "backend/cpu/fast/cpu_fast_backend.h"
#include "backend/cpu/fast/fast_ops.h"
#include "backend/cpu/reference_ops.h"
#include "gemma/error.h"

namespace gemma {
namespace fast {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

template <class T>
void Grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

bool Clamps(float lo, float hi) { return std::isfinite(lo) || std::isfinite(hi); }

// The f32 GEMM's path: dense linears, and QAT linears without SRQ inputs (their codes as f32).
bool OnF32Gemm(const gemma::Linear& lin) { return !IsQuantized(lin.kind) || lin.in_scale <= 0; }

// Token blocks per panel: few panels (the SSCP convolutions' 32 or 128 channels) split the tokens
// too, so every thread has work.
int TokenBlocks(const ThreadPool& pool, int panels, int n) {
  return std::clamp(2 * pool.size() / panels, 1, std::max(1, n / 64));
}

// y = DenseGemmRowsF32 (f32 accumulation, fast_ops.h), a task per packed panel with the thread's
// scratch (each token block packs its panel again: cheap at the row counts that split tokens);
// then epilogue(r0, r1) on the task's rows.
template <class Epilogue>
void PackingGemm(ThreadPool& pool, std::vector<std::vector<float>>& scratch,
                 const gemma::Linear& lin, const float* x, int n, float* y,
                 const Epilogue& epilogue) {
  const int panel = GemmPanelRows();
  const int panels = (lin.rows + panel - 1) / panel;
  const int blocks = TokenBlocks(pool, panels, n);
  const int per = (n + blocks - 1) / blocks;
  const size_t x_stride = lin.cols, y_stride = lin.rows;
  if (scratch.size() < static_cast<size_t>(pool.size())) scratch.resize(pool.size());
  pool.Run(panels * blocks, [&](int task, int thread) {
    std::vector<float>& s = scratch[thread];
    Grow(s, GemmScratchFloats(lin.cols));
    const int r0 = task / blocks * panel, r1 = std::min(lin.rows, r0 + panel);
    const int t0 = task % blocks * per, t1 = std::min(n, t0 + per);
    if (t0 >= t1) return;
    DenseGemmRowsF32(lin, x + t0 * x_stride, x_stride, t1 - t0, r0, r1, y + t0 * y_stride, y_stride,
                     s.data());
    if (blocks == 1) epilogue(r0, r1);
  });
  if (blocks > 1) epilogue(0, lin.rows);
}

// A QAT linear's epilogue on the f32 GEMM's integer sums, rows [r0, r1) of n tokens: the row
// scale in f64 and the output SRQ (the reference's f32-sums mode), then the clamp to [lo, hi].
void QatEpilogue(const gemma::Linear& lin, int n, float* y, int r0, int r1, float lo, float hi) {
  const bool clamp = Clamps(lo, hi);
  for (int t = 0; t < n; ++t) {
    float* yt = y + static_cast<size_t>(t) * lin.rows;
    for (int r = r0; r < r1; ++r) {
      yt[r] = static_cast<float>(static_cast<double>(yt[r]) * lin.row_scale[r]);
      if (lin.out_scale > 0) yt[r] = ref::Srq(yt[r], lin.out_scale);
      if (clamp) yt[r] = std::min(std::max(yt[r], lo), hi);
    }
  }
}

const float* WeightsOrNull(const std::vector<float>& w) { return w.empty() ? nullptr : w.data(); }

}  // namespace

// ---- FastVisionKernels ----

void FastVisionKernels::GeluMul(float* g, const float* u, size_t n) const {
  if (!f32_ops_) {
    ref::VisionKernels::GeluMul(g, u, n);
    return;
  }
  constexpr size_t kChunk = 16384;
  pool_.Run(static_cast<int>((n + kChunk - 1) / kChunk), [&](int task, int) {
    const size_t i0 = task * kChunk;
    GeluTanhMulF32(g + i0, u + i0, std::min(kChunk, n - i0));
  });
}

void FastVisionKernels::ForTokens(int n, const std::function<void(int, int)>& fn) const {
  constexpr int kBlock = 64;
  pool_.Run((n + kBlock - 1) / kBlock,
            [&](int task, int) { fn(task * kBlock, std::min(n, task * kBlock + kBlock)); });
}

void FastVisionKernels::Linear(const gemma::Linear& lin, const float* x, int n, float* y) const {
  constexpr int kTile = 32;
  const int tasks = (lin.rows + kTile - 1) / kTile;
  if (!IsQuantized(lin.kind)) {
    PackingGemm(pool_, scratch_, lin, x, n, y, [](int, int) {});
    return;
  }
  if (lin.in_scale > 0) {
    // SRQ inputs: the text model's integer kernels, bit-identical to ref::LinearForward.
    const int pc = PaddedCols(lin.kind, lin.cols);
    std::vector<int8_t> q(static_cast<size_t>(n) * pc);
    std::vector<int32_t> sums(n);
    pool_.Run((n + 63) / 64, [&](int task, int) {
      for (int t = task * 64; t < std::min(n, task * 64 + 64); ++t)
        sums[t] = QuantizeActs(lin.kind, x + static_cast<size_t>(t) * lin.cols, lin.cols,
                               lin.in_scale, q.data() + static_cast<size_t>(t) * pc);
    });
    pool_.Run(tasks, [&](int task, int) {
      const int r0 = task * kTile, r1 = std::min(lin.rows, r0 + kTile);
      QuantLinearRows(lin, q.data(), pc, sums.data(), n, r0, r1, y, lin.rows);
    });
    return;
  }
  // QAT without SRQ inputs: the integer codes through the f32 GEMM (like the reference's
  // f32-sums mode), then the reference's epilogue (row scale in f64, output SRQ).
  PackingGemm(pool_, scratch_, lin, x, n, y,
              [&](int r0, int r1) { QatEpilogue(lin, n, y, r0, r1, -kInf, kInf); });
}

void FastVisionKernels::Attention(const float* q, const float* k, const float* v, int n, int nh,
                                  int nkv, int hd, float* out) const {
  if (f32_ops_ && n >= 64) {
    GemmAttention(q, k, v, n, nh, nkv, hd, out);
    return;
  }
  constexpr int kBlock = 32;
  const int blocks = (n + kBlock - 1) / kBlock;
  const int group = nh / nkv;
  pool_.Run(nh * blocks, [&](int task, int) {
    const int h = task / blocks, i0 = (task % blocks) * kBlock, i1 = std::min(n, i0 + kBlock);
    const int kv = h / group;
    const size_t kv_stride = static_cast<size_t>(nkv) * hd;
    // Up to kQ queries of the head at once: each key and value row is read once for all of
    // them (the kernels' per-query arithmetic and order are the one-query call's).
    constexpr int kQ = 8;
    std::vector<double> qd(static_cast<size_t>(kQ) * hd), p(static_cast<size_t>(kQ) * n),
        acc(static_cast<size_t>(kQ) * hd);
    for (int i = i0; i < i1; i += kQ) {
      const int nq = std::min(kQ, i1 - i);
      for (int m = 0; m < nq; ++m) {
        const float* qh = q + (static_cast<size_t>(i + m) * nh + h) * hd;
        for (int d = 0; d < hd; ++d) qd[static_cast<size_t>(m) * hd + d] = qh[d];
      }
      QueryKeyDotsF64(qd.data(), nq, hd, k + kv * hd, kv_stride, n, p.data(), n);
      for (int m = 0; m < nq; ++m) {
        double* pm = p.data() + static_cast<size_t>(m) * n;
        double mx = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < n; ++j) mx = std::max(mx, pm[j]);
        double sum = 0;
        for (int j = 0; j < n; ++j) sum += (pm[j] = std::exp(pm[j] - mx));
        for (int j = 0; j < n; ++j) pm[j] /= sum;
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      WeightedValuesF64(p.data(), n, nq, v + kv * hd, kv_stride, n, hd, acc.data());
      for (int m = 0; m < nq; ++m) {
        float* o = out + (static_cast<size_t>(i + m) * nh + h) * hd;
        for (int d = 0; d < hd; ++d)
          o[d] = static_cast<float>(acc[static_cast<size_t>(m) * hd + d]);
      }
    }
  });
}

// Per head and block of kQueryBlock queries, on the f32 GEMM (design §4's f32 accumulation;
// the reference sums in f64): the block's scores q k^T into the thread's scratch, softmax in
// f32 with f64 row sums, then out = p v. The block's scores stay in cache: the n x n matrix of
// a head (23 MB at 2,394 patches) never goes through memory. Keys and values are packed once
// per K/V head for all blocks. DenseGemmRowsF32's sums do not depend on tiles, so this equals
// one GEMM over all queries bit for bit.
void FastVisionKernels::GemmAttention(const float* q, const float* k, const float* v, int n, int nh,
                                      int nkv, int hd, float* out) const {
  constexpr int kQueryBlock = 48;
  const int group = nh / nkv;
  const size_t kv_stride = static_cast<size_t>(nkv) * hd, q_stride = static_cast<size_t>(nh) * hd;
  const size_t key_floats = PackedPanelsFloats(n, hd);
  const size_t value_floats = PackedPanelsFloats(hd, n);
  const size_t per_kv = key_floats + value_floats + static_cast<size_t>(hd) * n;
  Grow(packed_, nkv * per_kv);
  if (scratch_.size() < static_cast<size_t>(pool_.size())) scratch_.resize(pool_.size());
  if (scores_.size() < static_cast<size_t>(pool_.size())) scores_.resize(pool_.size());
  auto keys_of = [&](int kv) { return packed_.data() + kv * per_kv; };
  auto values_of = [&](int kv) { return packed_.data() + kv * per_kv + key_floats; };
  pool_.Run(nkv, [&](int kv, int thread) {
    std::vector<float>& s = scratch_[thread];
    Grow(s, GemmScratchFloats(std::max(n, hd)));
    gemma::Linear keys;
    keys.kind = WeightKind::kF32;
    keys.rows = n;
    keys.cols = hd;
    keys.data = reinterpret_cast<const uint8_t*>(k + kv * hd);
    keys.row_bytes = kv_stride * sizeof(float);
    const int panel = GemmPanelRows();
    PackPanelsF32(keys, 0, (n + panel - 1) / panel, keys_of(kv), s.data());
    // The values transposed ([hd][n]), then packed as the rows of a linear over the scores.
    float* vt = values_of(kv) + value_floats;
    for (int j = 0; j < n; ++j)
      for (int d = 0; d < hd; ++d)
        vt[static_cast<size_t>(d) * n + j] = v[j * kv_stride + kv * hd + d];
    gemma::Linear values;
    values.kind = WeightKind::kF32;
    values.rows = hd;
    values.cols = n;
    values.data = reinterpret_cast<const uint8_t*>(vt);
    values.row_bytes = static_cast<size_t>(n) * sizeof(float);
    PackPanelsF32(values, 0, (hd + panel - 1) / panel, values_of(kv), s.data());
  });
  const int blocks = (n + kQueryBlock - 1) / kQueryBlock;
  pool_.Run(nh * blocks, [&](int task, int thread) {
    const int h = task / blocks, kv = h / group;
    const int i0 = task % blocks * kQueryBlock, m = std::min(kQueryBlock, n - i0);
    std::vector<float>& p = scores_[thread];
    Grow(p, static_cast<size_t>(kQueryBlock) * n);
    PackedGemmRowsF32(keys_of(kv), n, hd, q + i0 * q_stride + h * hd, q_stride, m, 0, n, p.data(),
                      n);
    for (int i = 0; i < m; ++i) SoftmaxF32(p.data() + static_cast<size_t>(i) * n, n);
    PackedGemmRowsF32(values_of(kv), hd, n, p.data(), n, m, 0, hd, out + i0 * q_stride + h * hd,
                      q_stride);
  });
}

bool VisionF32Ops(const VisionTower& tower) {
  for (const auto& l : tower.layers)
    if (IsQuantized(l.q.lin.kind)) return false;
  return true;
}

// ---- FastVisionTower ----

struct FastVisionTower::Panels {
  std::once_flag packed;
  std::unique_ptr<float, decltype(&std::free)> data{nullptr, &std::free};
};

// Readers of one buffer x (`cols` floats per token): in[i] is what reader i reads (x, or its
// clamped copy); clamp_in_place: x itself is clamped to [lo, hi] (every reader's bounds).
struct FastVisionTower::Readers {
  int count = 0;
  const ClippedLinear* cl[3] = {};
  float* in[3] = {};
  float* x = nullptr;
  int cols = 0;
  bool clamp_in_place = false;
};

FastVisionTower::FastVisionTower(const VisionTower& tower, ThreadPool& pool, bool keep_panels)
    : tower_(tower), pool_(pool), kernels_(pool, VisionF32Ops(tower)) {
  if (!keep_panels) return;
  auto add = [&](const gemma::Linear& lin) {
    if (OnF32Gemm(lin)) panels_.emplace(&lin, std::make_unique<Panels>());
  };
  add(tower.input_proj);
  for (const VisionLayerWeights& w : tower.layers)
    for (const ClippedLinear* cl : {&w.q, &w.k, &w.v, &w.o, &w.gate, &w.up, &w.down}) add(cl->lin);
  add(tower.embed_proj);
}

FastVisionTower::~FastVisionTower() = default;

// The kept panels of `lin` (packed on first use, on the pool), or null: not kept.
const float* FastVisionTower::PanelsOf(const gemma::Linear& lin) {
  const auto it = panels_.find(&lin);
  if (it == panels_.end()) return nullptr;
  Panels& p = *it->second;
  std::call_once(p.packed, [&] {
    const size_t floats = PackedPanelsFloats(lin.rows, lin.cols);
    const size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    p.data.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    if (!p.data) throw std::bad_alloc();
    const int panels = (lin.rows + GemmPanelRows() - 1) / GemmPanelRows();
    if (pack_scratch_.size() < static_cast<size_t>(pool_.size()))
      pack_scratch_.resize(pool_.size());
    pool_.Run(panels, [&](int panel, int thread) {
      Grow(pack_scratch_[thread], GemmScratchFloats(lin.cols));
      PackPanelsF32(lin, panel, 1, p.data.get(), pack_scratch_[thread].data());
    });
    panel_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  });
  return p.data.get();
}

// y[n, lin.rows] = lin(x), each output clamped to [lo, hi] (infinite: none).
void FastVisionTower::Linear(const gemma::Linear& lin, const float* x, int n, float* y, float lo,
                             float hi) {
  const float* packed = PanelsOf(lin);
  if (!packed) {
    kernels_.Linear(lin, x, n, y);
    if (Clamps(lo, hi)) {
      kernels_.ForTokens(n, [&](int t0, int t1) {
        float* yt = y + static_cast<size_t>(t0) * lin.rows;
        ClampF32(yt, static_cast<size_t>(t1 - t0) * lin.rows, lo, hi, yt);
      });
    }
    return;
  }
  const int panel = GemmPanelRows();
  const int panels = (lin.rows + panel - 1) / panel;
  const int blocks = TokenBlocks(pool_, panels, n);
  const int per = (n + blocks - 1) / blocks;
  const size_t x_stride = lin.cols, y_stride = lin.rows;
  const bool qat = IsQuantized(lin.kind);
  pool_.Run(panels * blocks, [&](int task, int) {
    const int r0 = task / blocks * panel, r1 = std::min(lin.rows, r0 + panel);
    const int t0 = task % blocks * per, t1 = std::min(n, t0 + per);
    if (t0 >= t1) return;
    float* yt = y + t0 * y_stride;
    if (qat) {
      PackedGemmRowsF32(packed, lin.rows, lin.cols, x + t0 * x_stride, x_stride, t1 - t0, r0, r1,
                        yt, y_stride);
      QatEpilogue(lin, t1 - t0, yt, r0, r1, lo, hi);
    } else {
      PackedGemmRowsF32(packed, lin.rows, lin.cols, x + t0 * x_stride, x_stride, t1 - t0, r0, r1,
                        yt, y_stride, lo, hi);
    }
  });
}

// A clipped linear whose input clamp the caller has applied (Readers).
void FastVisionTower::Clipped(const ClippedLinear& cl, const float* x, int n, float* y) {
  Linear(cl.lin, x, n, y, cl.out_min, cl.out_max);
}

FastVisionTower::Readers FastVisionTower::PlanReaders(
    std::initializer_list<const ClippedLinear*> readers, float* x, int n, int cols) {
  Readers r;
  r.x = x;
  r.cols = cols;
  bool same = true;
  for (const ClippedLinear* cl : readers) {
    r.cl[r.count++] = cl;
    same = same && cl->in_min == r.cl[0]->in_min && cl->in_max == r.cl[0]->in_max;
  }
  for (int i = 0; i < r.count; ++i) {
    const ClippedLinear& cl = *r.cl[i];
    r.in[i] = x;
    if (same || !Clamps(cl.in_min, cl.in_max)) continue;
    Grow(copies_[i], static_cast<size_t>(n) * cols);
    r.in[i] = copies_[i].data();
  }
  r.clamp_in_place = same && Clamps(r.cl[0]->in_min, r.cl[0]->in_max);
  return r;
}

// The readers' input clamps on rows [t0, t1) of r.x (just written, so in cache).
void FastVisionTower::ClampRows(const Readers& r, int t0, int t1) const {
  const size_t i0 = static_cast<size_t>(t0) * r.cols, len = static_cast<size_t>(t1 - t0) * r.cols;
  if (r.clamp_in_place) {
    ClampF32(r.x + i0, len, r.cl[0]->in_min, r.cl[0]->in_max, r.x + i0);
    return;
  }
  for (int i = 0; i < r.count; ++i)
    if (r.in[i] != r.x) ClampF32(r.x + i0, len, r.cl[i]->in_min, r.cl[i]->in_max, r.in[i] + i0);
}

void FastVisionTower::Encode(const VisionPatches& image, std::vector<float>* soft_tokens) {
  Forward(image);
  const VisionConfig& c = tower_.config;
  const int D = c.hidden_size, k = c.pooling_kernel_size;
  const int m = image.patches_h * image.patches_w / (k * k);
  // embed_vision (ref::EmbedVision): RMSNorm without weight, then the projection.
  Grow(a_, static_cast<size_t>(m) * D);
  kernels_.ForTokens(m, [&](int t0, int t1) {
    for (int i = t0; i < t1; ++i)
      RmsNorm(&pooled_[static_cast<size_t>(i) * D], D, nullptr, c.rms_norm_eps,
              &a_[static_cast<size_t>(i) * D]);
  });
  soft_tokens->resize(static_cast<size_t>(m) * tower_.embed_proj.rows);
  Linear(tower_.embed_proj, a_.data(), m, soft_tokens->data(), -kInf, kInf);
}

// ref::VisionTowerForward into pooled_, with the differences the header lists.
void FastVisionTower::Forward(const VisionPatches& img) {
  const VisionTower& t = tower_;
  const VisionConfig& c = t.config;
  ref::CheckVisionInput(c, img);
  const int n = img.patches_h * img.patches_w;
  const int D = c.hidden_size, hd = c.head_dim, nh = c.num_heads, nkv = c.num_kv_heads;
  const int k = c.pooling_kernel_size, I = c.intermediate_size;
  const float eps = c.rms_norm_eps;
  const size_t p2 = 3 * c.patch_size * c.patch_size;
  const size_t N = n;
  Grow(pix_, N * p2);
  Grow(h_, N * D), Grow(a_, N * D), Grow(tmp_, N * D);
  Grow(q_, N * nh * hd), Grow(att_, N * nh * hd), Grow(k_, N * nkv * hd), Grow(v_, N * nkv * hd);
  Grow(g_, N * I), Grow(u_, N * I);
  float *h = h_.data(), *a = a_.data(), *tmp = tmp_.data(), *g = g_.data();
  float *q = q_.data(), *kk = k_.data(), *v = v_.data(), *att = att_.data();

  // Patch embedding.
  kernels_.ForTokens(n, [&](int t0, int t1) {
    for (size_t i = t0 * p2; i < t1 * p2; ++i) pix_[i] = 2.0f * (img.pixels[i] - 0.5f);
  });
  Linear(t.input_proj, pix_.data(), n, h, -kInf, kInf);
  kernels_.ForTokens(n, [&](int t0, int t1) {
    std::vector<float> px(D), py(D);
    for (int i = t0; i < t1; ++i) {
      const int x = i % img.patches_w, y = i / img.patches_w;
      ref::EmbeddingRow(t.position_table, x, px.data());
      ref::EmbeddingRow(t.position_table, c.position_embedding_size + y, py.data());
      for (int d = 0; d < D; ++d) h[static_cast<size_t>(i) * D + d] += px[d] + py[d];
    }
  });

  // 2D RoPE: each half of a head rotates by one axis with frequencies over head_dim / 2.
  RopeParams rp;
  rp.theta = c.rope.theta;
  const std::vector<float> inv = ref::RopeInvFreq(rp, hd / 2);
  const int half = hd / 2, freqs = static_cast<int>(inv.size());
  // ref::ApplyRope's cos and sin per position and frequency, computed once per image.
  const int positions = std::max(img.patches_w, img.patches_h);
  rope_cos_.resize(static_cast<size_t>(positions) * freqs);
  rope_sin_.resize(rope_cos_.size());
  for (int p = 0; p < positions; ++p) {
    for (int i = 0; i < freqs; ++i) {
      const float f = static_cast<float>(p) * inv[i];
      rope_cos_[static_cast<size_t>(p) * freqs + i] = std::cos(f);
      rope_sin_[static_cast<size_t>(p) * freqs + i] = std::sin(f);
    }
  }
  // ref::ApplyRope(x, half, inv, pos) from the tables: the same operations on the same values.
  const auto rope = [&](float* x, int pos) {
    const float* cs = &rope_cos_[static_cast<size_t>(pos) * freqs];
    const float* sn = &rope_sin_[static_cast<size_t>(pos) * freqs];
    for (int i = 0; i < freqs; ++i) {
      const float a = x[i], b = x[i + freqs];
      x[i] = a * cs[i] + (-b) * sn[i];
      x[i + freqs] = b * cs[i] + a * sn[i];
    }
  };

  for (const VisionLayerWeights& w : t.layers) {
    const Readers qkv = PlanReaders({&w.q, &w.k, &w.v}, a, n, D);
    kernels_.ForTokens(n, [&](int t0, int t1) {
      for (int i = t0; i < t1; ++i)
        RmsNorm(&h[static_cast<size_t>(i) * D], D, WeightsOrNull(w.input_norm), eps,
                &a[static_cast<size_t>(i) * D]);
      ClampRows(qkv, t0, t1);
    });
    Clipped(w.q, qkv.in[0], n, q);
    Clipped(w.k, qkv.in[1], n, kk);
    Clipped(w.v, qkv.in[2], n, v);
    kernels_.ForTokens(n, [&](int t0, int t1) {
      for (int i = t0; i < t1; ++i) {
        const int x = i % img.patches_w, y = i / img.patches_w;
        for (int hh = 0; hh < nh; ++hh) {
          float* qh = &q[(static_cast<size_t>(i) * nh + hh) * hd];
          RmsNorm(qh, hd, WeightsOrNull(w.q_norm), eps, qh);
          rope(qh, x);
          rope(qh + half, y);
        }
        for (int hh = 0; hh < nkv; ++hh) {
          float* kh = &kk[(static_cast<size_t>(i) * nkv + hh) * hd];
          RmsNorm(kh, hd, WeightsOrNull(w.k_norm), eps, kh);
          rope(kh, x);
          rope(kh + half, y);
          float* vh = &v[(static_cast<size_t>(i) * nkv + hh) * hd];
          RmsNorm(vh, hd, nullptr, eps, vh);
        }
      }
    });
    kernels_.Attention(q, kk, v, n, nh, nkv, hd, att);
    const Readers o = PlanReaders({&w.o}, att, n, nh * hd);
    if (o.clamp_in_place) kernels_.ForTokens(n, [&](int t0, int t1) { ClampRows(o, t0, t1); });
    Clipped(w.o, att, n, tmp);
    const Readers mlp = PlanReaders({&w.gate, &w.up}, a, n, D);
    kernels_.ForTokens(n, [&](int t0, int t1) {
      for (int i = t0; i < t1; ++i) {
        float* ti = &tmp[static_cast<size_t>(i) * D];
        float* hr = &h[static_cast<size_t>(i) * D];
        RmsNorm(ti, D, WeightsOrNull(w.post_attn_norm), eps, ti);
        AddF32(ti, D, hr);
        RmsNorm(hr, D, WeightsOrNull(w.pre_ffn_norm), eps, &a[static_cast<size_t>(i) * D]);
      }
      ClampRows(mlp, t0, t1);
    });
    Clipped(w.gate, mlp.in[0], n, g);
    Clipped(w.up, mlp.in[1], n, u_.data());
    // GELU(gate) * up, then down's input clamp on the same chunk.
    const Readers down = PlanReaders({&w.down}, g, n, I);
    if (kernels_.f32_ops()) {
      kernels_.ForTokens(n, [&](int t0, int t1) {
        const size_t i0 = static_cast<size_t>(t0) * I;
        GeluTanhMulF32(g + i0, u_.data() + i0, static_cast<size_t>(t1 - t0) * I);
        if (down.clamp_in_place) ClampRows(down, t0, t1);
      });
    } else {
      kernels_.GeluMul(g, u_.data(), N * I);
      if (down.clamp_in_place)
        kernels_.ForTokens(n, [&](int t0, int t1) { ClampRows(down, t0, t1); });
    }
    Clipped(w.down, g, n, tmp);
    kernels_.ForTokens(n, [&](int t0, int t1) {
      for (int i = t0; i < t1; ++i) {
        float* ti = &tmp[static_cast<size_t>(i) * D];
        RmsNorm(ti, D, WeightsOrNull(w.post_ffn_norm), eps, ti);
        AddF32(ti, D, &h[static_cast<size_t>(i) * D]);
      }
    });
  }

  // Pooling: mean of each k x k block of patches (weights float32(1/k^2)), then * sqrt(hidden).
  const int pw = img.patches_w / k;
  const int m = n / (k * k);
  const float wk = 1.0f / static_cast<float>(k * k);
  const float root = static_cast<float>(std::sqrt(static_cast<double>(D)));
  pooled_d_.assign(static_cast<size_t>(m) * D, 0.0);
  for (int i = 0; i < n; ++i) {
    const int x = i % img.patches_w, y = i / img.patches_w;
    const int o = x / k + pw * (y / k);
    for (int d = 0; d < D; ++d)
      pooled_d_[static_cast<size_t>(o) * D + d] += wk * h[static_cast<size_t>(i) * D + d];
  }
  pooled_.resize(pooled_d_.size());
  for (size_t i = 0; i < pooled_.size(); ++i) {
    pooled_[i] = static_cast<float>(pooled_d_[i]) * root;
    if (c.standardize) {
      const size_t d = i % D;
      pooled_[i] = (pooled_[i] - t.std_bias[d]) * t.std_scale[d];
    }
  }
}

}  // namespace fast

// ---- The entry points of cpu_fast_backend.h ----

std::unique_ptr<ref::VisionKernels> MakeFastTowerKernels(ThreadPool& pool, bool f32_ops) {
  return std::make_unique<fast::FastVisionKernels>(pool, f32_ops);
}

bool FastVisionF32Ops(const VisionTower& tower) { return fast::VisionF32Ops(tower); }

void FastEncodeImage(const Model& model, ThreadPool& pool, const VisionPatches& image,
                     std::vector<float>* soft_tokens) {
  const VisionTower* t = model.vision();
  if (!t) throw Error(ErrorCode::kUnsupported, model.vision_error());
  fast::FastVisionTower(*t, pool, /*keep_panels=*/false).Encode(image, soft_tokens);
}

void FastEncodeAudio(const Model& model, ThreadPool& pool, const AudioMel& audio,
                     std::vector<float>* soft_tokens) {
  const AudioTower* t = model.audio();
  if (!t) throw Error(ErrorCode::kUnsupported, model.audio_error());
  // The audio tower's attention and activations are its own (audio_ops.cc).
  const fast::FastVisionKernels kernels(pool, /*f32_ops=*/false);
  const std::vector<float> out = ref::AudioTowerForward(*t, audio, kernels);
  *soft_tokens =
      ref::EmbedAudio(*t, out, static_cast<int>(out.size() / t->config.output_proj_dims), kernels);
}

}  // namespace gemma
