#include "backend/cpu/reference_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"

namespace gemma::ref {

void DecodeRowInt(WeightKind kind, const uint8_t* row, int cols, int8_t* out) {
  switch (kind) {
    case WeightKind::kQ8:
      std::memcpy(out, row, static_cast<size_t>(cols));
      return;
    case WeightKind::kQ4:
      for (int i = 0; i < cols; ++i) {
        const uint8_t b = row[i >> 1];
        out[i] = static_cast<int8_t>(((i & 1) ? (b >> 4) : (b & 0xF)) - 8);
      }
      return;
    case WeightKind::kQ2:
      for (int i = 0; i < cols; ++i) {
        const uint8_t b = row[i >> 2];
        out[i] = static_cast<int8_t>(((b >> (2 * (i & 3))) & 3) - 2);
      }
      return;
    default:
      return;
  }
}

namespace {

void DecodeDense(WeightKind kind, const uint8_t* row, int cols, float* out) {
  switch (kind) {
    case WeightKind::kF32:
      std::memcpy(out, row, 4u * static_cast<size_t>(cols));
      return;
    case WeightKind::kBF16:
      for (int i = 0; i < cols; ++i) {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        out[i] = Bf16ToF32(h);
      }
      return;
    case WeightKind::kF16:
      for (int i = 0; i < cols; ++i) {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        out[i] = F16ToF32(h);
      }
      return;
    default:
      return;
  }
}

}  // namespace

void DecodeRow(const Linear& lin, int r, float* out) {
  const uint8_t* row = lin.data + static_cast<size_t>(r) * lin.row_bytes;
  if (IsQuantized(lin.kind)) {
    std::vector<int8_t> v(lin.cols);
    DecodeRowInt(lin.kind, row, lin.cols, v.data());
    const float s = lin.row_scale[r];
    for (int i = 0; i < lin.cols; ++i) out[i] = static_cast<float>(v[i]) * s;
  } else {
    DecodeDense(lin.kind, row, lin.cols, out);
  }
}

void EmbeddingRow(const Embedding& e, int32_t id, float* out) {
  const uint8_t* row = EmbeddingRowBytes(e, id);
  if (IsQuantized(e.kind)) {
    std::vector<int8_t> v(e.cols);
    DecodeRowInt(e.kind, row, e.cols, v.data());
    const float* s = e.scale + static_cast<size_t>(id) * e.scale_blocks;
    const int block = e.cols / e.scale_blocks;
    for (int i = 0; i < e.cols; ++i) {
      const float w = static_cast<float>(v[i]) * s[i / block];  // transformers: (v * scale) in f32
      out[i] = w * e.embed_scale;
    }
  } else {
    DecodeDense(e.kind, row, e.cols, out);
    for (int i = 0; i < e.cols; ++i) out[i] = out[i] * e.embed_scale;
  }
}

void EmbeddingRowFast(const Embedding& e, int32_t id, float* out) {
  const uint8_t* row = EmbeddingRowBytes(e, id);
  if (e.kind == WeightKind::kF32 || e.kind == WeightKind::kBF16 || e.kind == WeightKind::kF16) {
    // DecodeDense's value times the scale, in one pass (out is only written)
    for (int i = 0; i < e.cols; ++i) {
      float f;
      uint16_t h;
      if (e.kind == WeightKind::kF32) {
        std::memcpy(&f, row + 4 * static_cast<size_t>(i), 4);
      } else {
        std::memcpy(&h, row + 2 * static_cast<size_t>(i), 2);
        f = e.kind == WeightKind::kBF16 ? Bf16ToF32(h) : F16ToF32(h);
      }
      out[i] = f * e.embed_scale;
    }
    return;
  }
  if ((e.kind != WeightKind::kQ2 && e.kind != WeightKind::kQ4 && e.kind != WeightKind::kQ8) ||
      e.scale_blocks <= 0 || e.cols % e.scale_blocks != 0) {
    EmbeddingRow(e, id, out);
    return;
  }
  const float* s = e.scale + static_cast<size_t>(id) * e.scale_blocks;
  const int block = e.cols / e.scale_blocks;
  for (int b = 0; b < e.scale_blocks; ++b) {
    const int i0 = b * block, i1 = i0 + block;
    if (e.kind == WeightKind::kQ8) {
      for (int i = i0; i < i1; ++i) {
        const float w = static_cast<float>(static_cast<int8_t>(row[i])) * s[b];
        out[i] = w * e.embed_scale;
      }
      continue;
    }
    // The block's products for every code c (value c - 8 for int4, c - 2 for int2), each as
    // EmbeddingRow computes it: (v * scale) in f32, then times the embedding scale.
    const bool q4 = e.kind == WeightKind::kQ4;
    const int levels = q4 ? 16 : 4;
    float table[16];
    for (int c = 0; c < levels; ++c) {
      const float w = static_cast<float>(c - levels / 2) * s[b];
      table[c] = w * e.embed_scale;
    }
    if (q4) {
      for (int i = i0; i < i1; ++i) out[i] = table[(row[i >> 1] >> (4 * (i & 1))) & 0xF];
    } else {
      for (int i = i0; i < i1; ++i) out[i] = table[(row[i >> 2] >> (2 * (i & 3))) & 3];
    }
  }
}

float Srq(float z, float s) {
  float q = std::nearbyint(z / s);  // default rounding mode: half to even, like torch.round
  q = std::min(127.0f, std::max(-128.0f, q));
  return q * s;
}

int8_t QuantizeSrq(float z, float s) {
  float q = std::nearbyint(z / s);
  q = std::min(127.0f, std::max(-128.0f, q));
  return static_cast<int8_t>(q);
}

namespace {
thread_local bool t_f32_sums = false;
}  // namespace

ScopedF32Sums::ScopedF32Sums() : prev_(t_f32_sums) { t_f32_sums = true; }
ScopedF32Sums::~ScopedF32Sums() { t_f32_sums = prev_; }

void LinearForward(const Linear& lin, const float* x, int n, float* y) {
  const int rows = lin.rows, cols = lin.cols;
  if (IsQuantized(lin.kind)) {
    const bool srq_in = lin.in_scale > 0;
    std::vector<int8_t> xq;
    if (srq_in) {
      xq.resize(static_cast<size_t>(n) * cols);
      for (size_t i = 0; i < xq.size(); ++i) xq[i] = QuantizeSrq(x[i], lin.in_scale);
    }
    std::vector<int8_t> v(cols);
    for (int r = 0; r < rows; ++r) {
      DecodeRowInt(lin.kind, lin.data + static_cast<size_t>(r) * lin.row_bytes, cols, v.data());
      const double s = lin.row_scale[r];
      for (int t = 0; t < n; ++t) {
        double out;
        if (srq_in) {
          int64_t acc = 0;
          const int8_t* q = xq.data() + static_cast<size_t>(t) * cols;
          for (int i = 0; i < cols; ++i) acc += static_cast<int32_t>(v[i]) * q[i];
          out = static_cast<double>(acc) * lin.in_scale * s;
        } else {
          double acc = 0;
          const float* xt = x + static_cast<size_t>(t) * cols;
          if (t_f32_sums) {
            float f = 0;
            for (int i = 0; i < cols; ++i) f += static_cast<float>(v[i]) * xt[i];
            acc = f;
          } else {
            for (int i = 0; i < cols; ++i) acc += static_cast<double>(v[i]) * xt[i];
          }
          out = acc * s;
        }
        y[static_cast<size_t>(t) * rows + r] = static_cast<float>(out);
      }
    }
    if (lin.out_scale > 0) {
      for (size_t i = 0; i < static_cast<size_t>(n) * rows; ++i) y[i] = Srq(y[i], lin.out_scale);
    }
    return;
  }
  std::vector<float> w(cols);
  for (int r = 0; r < rows; ++r) {
    DecodeDense(lin.kind, lin.data + static_cast<size_t>(r) * lin.row_bytes, cols, w.data());
    for (int t = 0; t < n; ++t) {
      const float* xt = x + static_cast<size_t>(t) * cols;
      double acc = 0;
      if (t_f32_sums) {
        float f = 0;
        for (int i = 0; i < cols; ++i) f += w[i] * xt[i];
        acc = f;
      } else {
        for (int i = 0; i < cols; ++i) acc += static_cast<double>(w[i]) * xt[i];
      }
      y[static_cast<size_t>(t) * rows + r] = static_cast<float>(acc);
    }
  }
}

void RmsNorm(const float* x, int n, std::span<const float> w, float eps, float* y) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float ms = static_cast<float>(ss / n) + eps;
  const float r = std::pow(ms, -0.5f);
  for (int i = 0; i < n; ++i) {
    const float v = x[i] * r;
    y[i] = w.empty() ? v : v * w[i];
  }
}

float GeluTanh(float x) {
  // torch's gelu(approximate="tanh"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  const float kBeta = 0.7978845608028654f;
  const float kKappa = 0.044715f;
  const float inner = kBeta * (x + kKappa * x * x * x);
  return 0.5f * x * (1.0f + TanhF(inner));
}

std::vector<float> RopeInvFreq(const RopeParams& rope, int head_dim) {
  std::vector<float> inv(head_dim / 2, 0.0f);
  int angles = head_dim / 2;
  if (rope.type == RopeParams::Type::kProportional) {
    angles = static_cast<int>(std::floor(rope.partial_rotary_factor * head_dim / 2.0));
  }
  const float base = static_cast<float>(rope.theta);
  for (int k = 0; k < angles; ++k) {
    const float e = static_cast<float>(2 * k) / static_cast<float>(head_dim);
    inv[k] = (1.0f / std::pow(base, e)) / static_cast<float>(rope.factor);
  }
  return inv;
}

void ApplyRope(float* x, int head_dim, std::span<const float> inv_freq, int pos) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float f = static_cast<float>(pos) * inv_freq[i];
    const float c = std::cos(f), s = std::sin(f);
    const float a = x[i], b = x[i + half];
    x[i] = a * c + (-b) * s;
    x[i + half] = b * c + a * s;
  }
}

}  // namespace gemma::ref
