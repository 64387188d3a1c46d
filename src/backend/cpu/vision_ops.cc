#include "backend/cpu/vision_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/reference_ops.h"
#include "gemma/error.h"

namespace gemma {

void BackendModel::EncodeImage(const VisionPatches&, std::vector<float>*) {
  throw Error(ErrorCode::kUnsupported, "the " + name() +
                                           " backend has no vision tower yet: use --backend cpu "
                                           "or cpu-ref for image input");
}

namespace ref {

// y = clamp(lin(clamp(x))). Infinite bounds (checkpoints without clamps) skip the clamp, which
// would be the identity (NaN included). The clamped input is kept in a buffer per thread: fresh
// pages for every linear (tens of MB at E2B's shapes) cost more than the copy.
void ClippedForward(const VisionKernels& kern, const ClippedLinear& cl, const float* x, int n,
                    float* y) {
  thread_local std::vector<float> scratch;
  const size_t cols = cl.lin.cols, rows = cl.lin.rows;
  if (std::isfinite(cl.in_min) || std::isfinite(cl.in_max)) {
    if (scratch.size() < n * cols) scratch.resize(n * cols);
    float* xc = scratch.data();
    kern.ForTokens(n, [&](int t0, int t1) {
      for (size_t i = t0 * cols; i < t1 * cols; ++i)
        xc[i] = std::min(std::max(x[i], cl.in_min), cl.in_max);
    });
    x = xc;
  }
  kern.Linear(cl.lin, x, n, y);
  if (std::isfinite(cl.out_min) || std::isfinite(cl.out_max)) {
    kern.ForTokens(n, [&](int t0, int t1) {
      for (size_t i = t0 * rows; i < t1 * rows; ++i)
        y[i] = std::min(std::max(y[i], cl.out_min), cl.out_max);
    });
  }
}

void VisionKernels::Linear(const gemma::Linear& lin, const float* x, int n, float* y) const {
  LinearForward(lin, x, n, y);
}

void VisionKernels::GeluMul(float* g, const float* u, size_t n) const {
  for (size_t i = 0; i < n; ++i) g[i] = GeluTanh(g[i]) * u[i];
}

void VisionKernels::Attention(const float* q, const float* kk, const float* v, int n, int nh,
                              int nkv, int hd, float* att) const {
  std::vector<double> scores(n), acc(hd);
  const int group = nh / nkv;
  for (int i = 0; i < n; ++i) {
    for (int hh = 0; hh < nh; ++hh) {
      const float* qh = &q[(static_cast<size_t>(i) * nh + hh) * hd];
      const int kv = hh / group;
      double mx = -std::numeric_limits<double>::infinity();
      for (int j = 0; j < n; ++j) {
        const float* kj = &kk[(static_cast<size_t>(j) * nkv + kv) * hd];
        double s = 0;
        for (int d = 0; d < hd; ++d) s += static_cast<double>(qh[d]) * kj[d];
        scores[j] = s;
        mx = std::max(mx, s);
      }
      double sum = 0;
      for (int j = 0; j < n; ++j) sum += (scores[j] = std::exp(scores[j] - mx));
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int j = 0; j < n; ++j) {
        const double pj = scores[j] / sum;
        const float* vj = &v[(static_cast<size_t>(j) * nkv + kv) * hd];
        for (int d = 0; d < hd; ++d) acc[d] += pj * vj[d];
      }
      float* oh = &att[(static_cast<size_t>(i) * nh + hh) * hd];
      for (int d = 0; d < hd; ++d) oh[d] = static_cast<float>(acc[d]);
    }
  }
}

void CheckVisionInput(const VisionConfig& c, const VisionPatches& img) {
  const int k = c.pooling_kernel_size;
  if (img.patches_h <= 0 || img.patches_w <= 0 || img.patches_h % k != 0 ||
      img.patches_w % k != 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "vision input: the patch grid must be a positive "
                "multiple of the pooling kernel");
  }
  if (img.patches_w > c.position_embedding_size || img.patches_h > c.position_embedding_size) {
    throw Error(ErrorCode::kInvalidArgument,
                "vision input: more patches per side than the "
                "position table has rows");
  }
}

std::vector<float> VisionTowerForward(const VisionTower& t, const VisionPatches& img,
                                      const VisionKernels& kern) {
  const VisionConfig& c = t.config;
  CheckVisionInput(c, img);
  const int n = img.patches_h * img.patches_w;
  const int D = c.hidden_size, hd = c.head_dim, nh = c.num_heads, nkv = c.num_kv_heads;
  const int k = c.pooling_kernel_size;
  const float eps = c.rms_norm_eps;
  const int p2 = 3 * c.patch_size * c.patch_size;

  // Patch embedding.
  std::vector<float> pix(static_cast<size_t>(n) * p2);
  for (size_t i = 0; i < pix.size(); ++i) pix[i] = 2.0f * (img.pixels[i] - 0.5f);
  std::vector<float> h(static_cast<size_t>(n) * D);
  kern.Linear(t.input_proj, pix.data(), n, h.data());
  std::vector<float> px(D), py(D);
  for (int i = 0; i < n; ++i) {
    const int x = i % img.patches_w, y = i / img.patches_w;
    EmbeddingRow(t.position_table, x, px.data());
    EmbeddingRow(t.position_table, c.position_embedding_size + y, py.data());
    for (int d = 0; d < D; ++d) h[static_cast<size_t>(i) * D + d] += px[d] + py[d];
  }

  // 2D RoPE: each half of a head rotates by one axis with frequencies over head_dim / 2.
  RopeParams rp;
  rp.theta = c.rope.theta;
  const std::vector<float> inv = RopeInvFreq(rp, hd / 2);
  const int half = hd / 2;

  std::vector<float> a(h.size()), tmp(h.size());
  std::vector<float> q(static_cast<size_t>(n) * nh * hd), kk(static_cast<size_t>(n) * nkv * hd),
      v(kk.size()), att(q.size());
  const int I = c.intermediate_size;
  std::vector<float> g(static_cast<size_t>(n) * I), u(g.size());
  for (const VisionLayerWeights& w : t.layers) {
    kern.ForTokens(n, [&](int t0, int t1) {
      for (int i = t0; i < t1; ++i) RmsNorm(&h[i * D], D, w.input_norm, eps, &a[i * D]);
    });
    ClippedForward(kern, w.q, a.data(), n, q.data());
    ClippedForward(kern, w.k, a.data(), n, kk.data());
    ClippedForward(kern, w.v, a.data(), n, v.data());
    kern.ForTokens(n, [&](int t0, int t1) {
      for (int i = t0; i < t1; ++i) {
        const int x = i % img.patches_w, y = i / img.patches_w;
        for (int hh = 0; hh < nh; ++hh) {
          float* qh = &q[(static_cast<size_t>(i) * nh + hh) * hd];
          RmsNorm(qh, hd, w.q_norm, eps, qh);
          ApplyRope(qh, half, inv, x);
          ApplyRope(qh + half, half, inv, y);
        }
        for (int hh = 0; hh < nkv; ++hh) {
          float* kh = &kk[(static_cast<size_t>(i) * nkv + hh) * hd];
          RmsNorm(kh, hd, w.k_norm, eps, kh);
          ApplyRope(kh, half, inv, x);
          ApplyRope(kh + half, half, inv, y);
          float* vh = &v[(static_cast<size_t>(i) * nkv + hh) * hd];
          RmsNorm(vh, hd, {}, eps, vh);
        }
      }
    });
    kern.Attention(q.data(), kk.data(), v.data(), n, nh, nkv, hd, att.data());
    ClippedForward(kern, w.o, att.data(), n, tmp.data());
    kern.ForTokens(n, [&](int t0, int t1) {
      for (int i = t0; i < t1; ++i) {
        RmsNorm(&tmp[i * D], D, w.post_attn_norm, eps, &tmp[i * D]);
        for (int d = 0; d < D; ++d) h[i * D + d] += tmp[i * D + d];
        RmsNorm(&h[i * D], D, w.pre_ffn_norm, eps, &a[i * D]);
      }
    });
    ClippedForward(kern, w.gate, a.data(), n, g.data());
    ClippedForward(kern, w.up, a.data(), n, u.data());
    kern.GeluMul(g.data(), u.data(), g.size());
    ClippedForward(kern, w.down, g.data(), n, tmp.data());
    kern.ForTokens(n, [&](int t0, int t1) {
      for (int i = t0; i < t1; ++i) {
        RmsNorm(&tmp[i * D], D, w.post_ffn_norm, eps, &tmp[i * D]);
        for (int d = 0; d < D; ++d) h[i * D + d] += tmp[i * D + d];
      }
    });
  }

  // Pooling: mean of each k x k block of patches (weights float32(1/k^2)), then * sqrt(hidden).
  const int pw = img.patches_w / k;
  const int m = n / (k * k);
  const float wk = 1.0f / static_cast<float>(k * k);
  const float root = static_cast<float>(std::sqrt(static_cast<double>(D)));
  std::vector<double> pooled_d(static_cast<size_t>(m) * D, 0.0);
  for (int i = 0; i < n; ++i) {
    const int x = i % img.patches_w, y = i / img.patches_w;
    const int o = x / k + pw * (y / k);
    for (int d = 0; d < D; ++d) pooled_d[static_cast<size_t>(o) * D + d] += wk * h[i * D + d];
  }
  std::vector<float> pooled(pooled_d.size());
  for (size_t i = 0; i < pooled.size(); ++i) {
    pooled[i] = static_cast<float>(pooled_d[i]) * root;
    if (c.standardize) {
      const size_t d = i % D;
      pooled[i] = (pooled[i] - t.std_bias[d]) * t.std_scale[d];
    }
  }
  return pooled;
}

std::vector<float> EmbedVision(const VisionTower& t, const std::vector<float>& pooled, int n,
                               const VisionKernels& kern) {
  const int D = t.config.hidden_size;
  std::vector<float> normed(pooled.size());
  for (int i = 0; i < n; ++i) RmsNorm(&pooled[i * D], D, {}, t.config.rms_norm_eps, &normed[i * D]);
  std::vector<float> out(static_cast<size_t>(n) * t.embed_proj.rows);
  kern.Linear(t.embed_proj, normed.data(), n, out.data());
  return out;
}

}  // namespace ref
}  // namespace gemma
