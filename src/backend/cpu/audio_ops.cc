#include "backend/cpu/audio_ops.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/reference_ops.h"
#include "gemma/error.h"

namespace gemma {

void BackendModel::EncodeAudio(const AudioMel&, std::vector<float>*) {
  throw Error(ErrorCode::kUnsupported, "the " + name() +
                                           " backend has no audio tower yet: use --backend cpu "
                                           "or cpu-ref for audio input");
}

namespace ref {
namespace {

constexpr int kMel = 128;

// x (n rows) clamped to [-lim, lim].
void Clamp(const VisionKernels& kern, std::vector<float>& x, int n, float lim) {
  const size_t d = x.size() / std::max(n, 1);
  kern.ForTokens(n, [&](int t0, int t1) {
    for (size_t i = t0 * d; i < t1 * d; ++i) x[i] = std::min(std::max(x[i], -lim), lim);
  });
}

void NormRows(const VisionKernels& kern, std::vector<float>& x, int n, int d,
              const std::vector<float>& w, float eps) {
  kern.ForTokens(n, [&](int t0, int t1) {
    for (int t = t0; t < t1; ++t)
      RmsNorm(&x[static_cast<size_t>(t) * d], d, w, eps, &x[static_cast<size_t>(t) * d]);
  });
}

float Silu(float x) { return x / (1.0f + std::exp(-x)); }
float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// torch.nn.functional.softplus (beta 1, threshold 20).
float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Conv2d(3x3, stride 2, pad 1, no bias) on [cin, T, F] -> [cout, T', F'], then LayerNorm over the
// channels (weight, no bias) and ReLU. Output layout [T', F', cout] (channels last).
std::vector<float> ConvBlock(const VisionKernels& kern, const std::vector<float>& in, int cin,
                             int T, int F, const std::vector<float>& w,
                             const std::vector<float>& ln, int cout, float eps, int* To, int* Fo) {
  const int T2 = (T - 1) / 2 + 1, F2 = (F - 1) / 2 + 1;
  *To = T2;
  *Fo = F2;
  // The convolution as a linear over im2col rows (tap order ci, kt, kf: the weight's [cout, cin,
  // 3, 3] row order; padding taps are zeros, which add nothing), a chunk of output rows at a time.
  const int K = cin * 9;
  Linear lin;
  lin.name = "sscp conv";
  lin.kind = WeightKind::kF32;
  lin.rows = cout;
  lin.cols = K;
  lin.data = reinterpret_cast<const uint8_t*>(w.data());
  lin.row_bytes = static_cast<size_t>(K) * sizeof(float);
  std::vector<float> conv(static_cast<size_t>(T2) * F2 * cout);
  const int chunk = std::max(1, (1 << 21) / (F2 * K));  // im2col of ~8 MB
  std::vector<float> col;
  for (int t0 = 0; t0 < T2; t0 += chunk) {
    const int t1 = std::min(T2, t0 + chunk);
    col.assign(static_cast<size_t>(t1 - t0) * F2 * K, 0.0f);
    for (int t = t0; t < t1; ++t) {
      for (int f = 0; f < F2; ++f) {
        float* c = &col[(static_cast<size_t>(t - t0) * F2 + f) * K];
        for (int ci = 0; ci < cin; ++ci) {
          for (int kt = 0; kt < 3; ++kt) {
            const int ti = 2 * t - 1 + kt;
            if (ti < 0 || ti >= T) continue;
            for (int kf = 0; kf < 3; ++kf) {
              const int fi = 2 * f - 1 + kf;
              if (fi < 0 || fi >= F) continue;
              c[ci * 9 + kt * 3 + kf] = in[(static_cast<size_t>(ci) * T + ti) * F + fi];
            }
          }
        }
      }
    }
    kern.Linear(lin, col.data(), (t1 - t0) * F2, &conv[static_cast<size_t>(t0) * F2 * cout]);
  }
  std::vector<float> out(conv.size()), v(cout);
  for (int t = 0; t < T2; ++t) {
    for (int f = 0; f < F2; ++f) {
      const float* acc = &conv[(static_cast<size_t>(t) * F2 + f) * cout];
      // LayerNorm over channels: f32 conv outputs, statistics in double, f32 result.
      double mean = 0;
      for (int co = 0; co < cout; ++co) mean += (v[co] = static_cast<float>(acc[co]));
      mean /= cout;
      double var = 0;
      for (int co = 0; co < cout; ++co) var += (v[co] - mean) * (v[co] - mean);
      var /= cout;
      const double inv = 1.0 / std::sqrt(var + eps);
      float* o = &out[(static_cast<size_t>(t) * F2 + f) * cout];
      for (int co = 0; co < cout; ++co) {
        const float y = static_cast<float>((v[co] - mean) * inv) * ln[co];
        o[co] = std::max(y, 0.0f);
      }
    }
  }
  return out;
}

// Channels-last [T, F, C] -> channels-first [C, T, F], times the per-frame mask.
std::vector<float> ToChannelsFirst(const std::vector<float>& x, int T, int F, int C,
                                   const std::vector<uint8_t>& mask) {
  std::vector<float> y(x.size());
  for (int t = 0; t < T; ++t) {
    const float m = mask[t] ? 1.0f : 0.0f;
    for (int f = 0; f < F; ++f)
      for (int c = 0; c < C; ++c)
        y[(static_cast<size_t>(c) * T + t) * F + f] =
            x[(static_cast<size_t>(t) * F + f) * C + c] * m;
  }
  return y;
}

std::vector<uint8_t> Halve(const std::vector<uint8_t>& m) {
  std::vector<uint8_t> h((m.size() + 1) / 2);
  for (size_t i = 0; i < h.size(); ++i) h[i] = m[2 * i];
  return h;
}

void FeedForward(const VisionKernels& kern, const AudioLayerWeights::FeedForward& ff,
                 const AudioConfig& c, std::vector<float>& h, int n) {
  const int D = c.hidden_size;
  std::vector<float> x = h;
  Clamp(kern, x, n, c.gradient_clipping);
  NormRows(kern, x, n, D, ff.pre_norm, c.rms_norm_eps);
  // The 4x-wide hidden in a buffer kept per thread (fresh pages per layer cost more than its use).
  thread_local std::vector<float> u;
  const size_t un = static_cast<size_t>(n) * 4 * D;
  if (u.size() < un) u.resize(un);
  ClippedForward(kern, ff.up, x.data(), n, u.data());
  float* up = u.data();
  kern.ForTokens(n, [&](int t0, int t1) {
    for (size_t i = t0 * 4 * static_cast<size_t>(D); i < t1 * 4 * static_cast<size_t>(D); ++i)
      up[i] = Silu(up[i]);
  });
  ClippedForward(kern, ff.down, u.data(), n, x.data());
  Clamp(kern, x, n, c.gradient_clipping);
  NormRows(kern, x, n, D, ff.post_norm, c.rms_norm_eps);
  for (size_t i = 0; i < h.size(); ++i) h[i] += x[i] * c.residual_weight;
}

// The relative-position keys R[p] = relative_k_proj(sinusoid(p)) for p = 0..context_left - 1.
std::vector<float> RelativeKeys(const VisionKernels& kern, const AudioLayerWeights& w,
                                const AudioConfig& c) {
  const std::vector<float> pe = AudioRelativePositions(c);
  std::vector<float> r(pe.size());
  kern.Linear(w.relative_k, pe.data(), c.context_left, r.data());
  return r;
}

void Attention(const VisionKernels& kern, const AudioLayerWeights& w, const AudioConfig& c,
               const std::vector<float>& x, int n, std::vector<float>* out) {
  const int D = c.hidden_size, nh = c.num_heads, hd = c.head_dim();
  std::vector<float> q(static_cast<size_t>(n) * D), k(q.size()), v(q.size());
  ClippedForward(kern, w.q, x.data(), n, q.data());
  ClippedForward(kern, w.k, x.data(), n, k.data());
  ClippedForward(kern, w.v, x.data(), n, v.data());
  const float q_scale = static_cast<float>(std::pow(static_cast<double>(hd), -0.5) / std::log(2.0));
  const float k_scale = static_cast<float>(std::log(1.0 + std::exp(1.0)) / std::log(2.0));
  const std::vector<float> sp = AudioDimScale(w);
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < D; ++i) {
      float& qv = q[static_cast<size_t>(t) * D + i];
      qv = qv * q_scale * sp[i % hd];
      k[static_cast<size_t>(t) * D + i] *= k_scale;
    }
  }
  const std::vector<float> R = RelativeKeys(kern, w, c);
  const int window = c.context_left - 1;  // keys with 0 <= q - k < window
  const float cap = c.logit_cap;
  std::vector<float> att(static_cast<size_t>(n) * D);
  kern.ForTokens(n, [&](int i0, int i1) {
    std::vector<double> p(window), acc(hd);
    for (int i = i0; i < i1; ++i) {
      const int keys = std::min(window, i + 1);
      for (int h = 0; h < nh; ++h) {
        const float* qh = &q[static_cast<size_t>(i) * D + h * hd];
        double mx = -1e300;
        for (int d = 0; d < keys; ++d) {
          const float* kh = &k[static_cast<size_t>(i - d) * D + h * hd];
          const float* rh = &R[static_cast<size_t>(d) * D + h * hd];
          double ac = 0, bd = 0;
          for (int e = 0; e < hd; ++e) {
            ac += static_cast<double>(qh[e]) * kh[e];
            bd += static_cast<double>(qh[e]) * rh[e];
          }
          // f32 as transformers: (ac + bd) / cap, tanh, * cap.
          const float s = static_cast<float>(static_cast<float>(ac) + static_cast<float>(bd));
          p[d] = TanhF(s / cap) * cap;
          mx = std::max(mx, p[d]);
        }
        double sum = 0;
        for (int d = 0; d < keys; ++d) sum += (p[d] = std::exp(p[d] - mx));
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int d = 0; d < keys; ++d) {
          const float pw = static_cast<float>(p[d] / sum);
          const float* vh = &v[static_cast<size_t>(i - d) * D + h * hd];
          for (int e = 0; e < hd; ++e) acc[e] += static_cast<double>(pw) * vh[e];
        }
        float* o = &att[static_cast<size_t>(i) * D + h * hd];
        for (int e = 0; e < hd; ++e) o[e] = static_cast<float>(acc[e]);
      }
    }
  });
  out->assign(static_cast<size_t>(n) * D, 0.0f);
  ClippedForward(kern, w.post, att.data(), n, out->data());
}

void LightConv(const VisionKernels& kern, const AudioLayerWeights& w, const AudioConfig& c,
               std::vector<float>& h, int n) {
  const int D = c.hidden_size, K = c.conv_kernel_size;
  std::vector<float> x = h;
  NormRows(kern, x, n, D, w.lconv_pre_norm, c.rms_norm_eps);
  std::vector<float> s(static_cast<size_t>(n) * 2 * D);
  ClippedForward(kern, w.lconv_start, x.data(), n, s.data());
  std::vector<float> g(static_cast<size_t>(n) * D);  // GLU: a * sigmoid(b)
  kern.ForTokens(n, [&](int t0, int t1) {
    for (int t = t0; t < t1; ++t)
      for (int i = 0; i < D; ++i)
        g[static_cast<size_t>(t) * D + i] = s[static_cast<size_t>(t) * 2 * D + i] *
                                            Sigmoid(s[static_cast<size_t>(t) * 2 * D + D + i]);
  });
  // Causal depthwise conv: y[t] = sum_k w[k] g[t - (K - 1) + k].
  std::vector<float> y(g.size());
  kern.ForTokens(n, [&](int t0, int t1) {
    for (int t = t0; t < t1; ++t) {
      for (int i = 0; i < D; ++i) {
        double a = 0;
        for (int kk = 0; kk < K; ++kk) {
          const int ti = t - (K - 1) + kk;
          if (ti >= 0)
            a += static_cast<double>(w.dwconv[static_cast<size_t>(i) * K + kk]) *
                 g[static_cast<size_t>(ti) * D + i];
        }
        y[static_cast<size_t>(t) * D + i] = static_cast<float>(a);
      }
    }
  });
  Clamp(kern, y, n, c.gradient_clipping);
  NormRows(kern, y, n, D, w.lconv_conv_norm, c.rms_norm_eps);
  for (float& v : y) v = Silu(v);
  ClippedForward(kern, w.lconv_end, y.data(), n, x.data());
  for (size_t i = 0; i < h.size(); ++i) h[i] += x[i];
}

}  // namespace

std::vector<float> AudioRelativePositions(const AudioConfig& c) {
  const int D = c.hidden_size, half = D / 2, P = c.context_left;
  const float inc = static_cast<float>(std::log(10000.0) / std::max(half - 1, 1));
  std::vector<float> inv(half);
  for (int i = 0; i < half; ++i) inv[i] = std::exp(static_cast<float>(i) * -inc);
  std::vector<float> pe(static_cast<size_t>(std::max(P, 0)) * D);
  for (int p = 0; p < P; ++p) {
    for (int i = 0; i < half; ++i) {
      const float st = static_cast<float>(p) * inv[i];
      pe[static_cast<size_t>(p) * D + i] = std::sin(st);
      pe[static_cast<size_t>(p) * D + half + i] = std::cos(st);
    }
  }
  return pe;
}

std::vector<float> AudioDimScale(const AudioLayerWeights& w) {
  std::vector<float> sp(w.per_dim_scale.size());
  for (size_t e = 0; e < sp.size(); ++e) sp[e] = Softplus(w.per_dim_scale[e]);
  return sp;
}

std::vector<float> AudioTowerForward(const AudioTower& t, const AudioMel& mel,
                                     const VisionKernels& kern) {
  const AudioConfig& c = t.config;
  const int T = mel.frames, D = c.hidden_size, C0 = c.sscp_channels0, C1 = c.sscp_channels1;
  if (T <= 0) throw Error(ErrorCode::kInvalidArgument, "audio input: no frames");
  std::vector<uint8_t> m0(mel.mask, mel.mask + T);
  // Layer 0: [1, T, 128] times the mask.
  std::vector<float> in0(static_cast<size_t>(T) * kMel);
  for (int f = 0; f < T; ++f)
    for (int b = 0; b < kMel; ++b)
      in0[static_cast<size_t>(f) * kMel + b] =
          m0[f] ? mel.mel[static_cast<size_t>(f) * kMel + b] : 0.0f;
  int T1, F1, T2, F2;
  const std::vector<float> o0 =
      ConvBlock(kern, in0, 1, T, kMel, t.conv0, t.norm0, C0, c.rms_norm_eps, &T1, &F1);
  const std::vector<uint8_t> m1 = Halve(m0);
  const std::vector<float> in1 = ToChannelsFirst(o0, T1, F1, C0, m1);
  const std::vector<float> o1 =
      ConvBlock(kern, in1, C0, T1, F1, t.conv1, t.norm1, C1, c.rms_norm_eps, &T2, &F2);
  const std::vector<uint8_t> m2 = Halve(m1);
  int n = 0;
  while (n < T2 && m2[n]) ++n;
  for (int i = n; i < T2; ++i) {
    if (m2[i])
      throw Error(ErrorCode::kInvalidArgument, "audio input: the valid frames are not a prefix");
  }
  if (n == 0) return {};
  // [T2, F2, C1] is already (time, freq, channel): flattened f * C1 + c per frame.
  std::vector<float> h(static_cast<size_t>(n) * D);
  kern.Linear(t.input_proj, o1.data(), n, h.data());
  std::vector<float> a;
  for (const AudioLayerWeights& w : t.layers) {
    FeedForward(kern, w.ff1, c, h, n);
    std::vector<float> x = h;
    Clamp(kern, x, n, c.gradient_clipping);
    NormRows(kern, x, n, D, w.norm_pre_attn, c.rms_norm_eps);
    Attention(kern, w, c, x, n, &a);
    Clamp(kern, a, n, c.gradient_clipping);
    NormRows(kern, a, n, D, w.norm_post_attn, c.rms_norm_eps);
    for (size_t i = 0; i < h.size(); ++i) h[i] += a[i];
    LightConv(kern, w, c, h, n);
    FeedForward(kern, w.ff2, c, h, n);
    Clamp(kern, h, n, c.gradient_clipping);
    NormRows(kern, h, n, D, w.norm_out, c.rms_norm_eps);
  }
  const int O = c.output_proj_dims;
  std::vector<float> out(static_cast<size_t>(n) * O);
  kern.Linear(t.output_proj, h.data(), n, out.data());
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < O; ++o) out[static_cast<size_t>(i) * O + o] += t.output_bias[o];
  return out;
}

std::vector<float> EmbedAudio(const AudioTower& t, const std::vector<float>& x, int n,
                              const VisionKernels& kern) {
  const int O = t.config.output_proj_dims;
  std::vector<float> normed(static_cast<size_t>(n) * O);
  for (int i = 0; i < n; ++i)
    RmsNorm(&x[static_cast<size_t>(i) * O], O, {}, t.config.rms_norm_eps,
            &normed[static_cast<size_t>(i) * O]);
  std::vector<float> out(static_cast<size_t>(n) * t.embed_proj.rows);
  kern.Linear(t.embed_proj, normed.data(), n, out.data());
  return out;
}

}  // namespace ref
}  // namespace gemma
