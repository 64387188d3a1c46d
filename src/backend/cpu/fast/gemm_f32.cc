// Dense linears over many tokens with f32 accumulation (fast_ops.h: DenseGemmRowsF32), compiled
// once per SIMD target (foreach_target.h). A panel of 2 vectors of rows is packed k-major as f32
// ([cols][NR]); a tile of kMr tokens x NR rows accumulates in registers over all of k (one FMA
// chain per output, k ascending), so results do not depend on threads or tiles.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/fast/fast_ops.h"
#include "backend/cpu/fast/tiles.h"
#include "backend/cpu/reference_ops.h"
#include "core/dtype.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/fast/gemm_f32.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace gemma::fast {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
// Tokens per register tile: 2 x kMr accumulators + 2 weight vectors + 1 broadcast fit the 16
// vector registers of AVX2 / NEON (AVX-512's 32 would take 8, measured no faster here).
constexpr int kMr = 6;

int PanelRows() { return 2 * static_cast<int>(hn::Lanes(DF())); }

// Rows [r0, r0 + NR) of `lin` (missing rows zero) as panel[i * NR + r] = f32(w[r0 + r][i]).
void PackPanel(const Linear& lin, int r0, float* panel, float* row_f32) {
  const DF d;
  const int nr = PanelRows(), cols = lin.cols;
  for (int r = 0; r < nr; ++r) {
    if (r0 + r >= lin.rows) {
      for (int i = 0; i < cols; ++i) panel[static_cast<size_t>(i) * nr + r] = 0.0f;
      continue;
    }
    const uint8_t* row = lin.data + static_cast<size_t>(r0 + r) * lin.row_bytes;
    const float* src = row_f32;
    if (IsQuantized(lin.kind)) {
      // QAT codes as exact f32 integers (the caller applies the row scales).
      thread_local std::vector<int8_t> codes;
      if (codes.size() < static_cast<size_t>(cols)) codes.resize(cols);
      ref::DecodeRowInt(lin.kind, row, cols, codes.data());
      for (int i = 0; i < cols; ++i) row_f32[i] = codes[i];
    } else if (lin.kind == WeightKind::kF32) {
      src = reinterpret_cast<const float*>(row);
    } else {
      const size_t N = hn::Lanes(d);
      int i = 0;
      if (lin.kind == WeightKind::kBF16) {
        const hn::Rebind<hwy::bfloat16_t, DF> dbf;
        const auto* p = reinterpret_cast<const hwy::bfloat16_t*>(row);
        for (; i + static_cast<int>(N) <= cols; i += N)
          hn::StoreU(hn::PromoteTo(d, hn::LoadU(dbf, p + i)), d, row_f32 + i);
      }
      for (; i < cols; ++i) {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        row_f32[i] = lin.kind == WeightKind::kBF16 ? Bf16ToF32(h) : F16ToF32(h);
      }
    }
    for (int i = 0; i < cols; ++i) panel[static_cast<size_t>(i) * nr + r] = src[i];
  }
}

// y rows t0 .. t0 + mt (mt <= kMr) x the panel's rows [0, valid); clamp: each y to [lo, hi].
HWY_NOINLINE void Tile(const float* panel, int cols, const float* const* xr, int mt, int valid,
                       float* y, size_t y_stride, int t0, int r0, bool clamp, float lo, float hi) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const int nr = 2 * static_cast<int>(N);
#if GEMMA_WASM_KERNELS
  // WebAssembly SIMD (tiles.h): EMU128's 4-lane vectors, its MulAdd as a multiply then an add,
  // in the same order: the same bits, faster than the emulated loop (the towers' dense products
  // in the WebAssembly module: one image at 70 tokens 18.0 -> 9.8 s, docs/multimodal.md).
  v128_t acc[kMr][2];
  for (int m = 0; m < kMr; ++m) acc[m][0] = acc[m][1] = wasm_f32x4_splat(0.0f);
  for (int k = 0; k < cols; ++k) {
    const float* w = panel + static_cast<size_t>(k) * nr;
    const v128_t w0 = wasm_v128_load(w), w1 = wasm_v128_load(w + 4);
    for (int m = 0; m < kMr; ++m) {
      const v128_t b = wasm_f32x4_splat(xr[m][k]);
      acc[m][0] = wasm_f32x4_add(wasm_f32x4_mul(b, w0), acc[m][0]);
      acc[m][1] = wasm_f32x4_add(wasm_f32x4_mul(b, w1), acc[m][1]);
    }
  }
  HWY_ALIGN float out[kMr * 8];
  for (int m = 0; m < kMr; ++m) {
    wasm_v128_store(out + m * nr, acc[m][0]);
    wasm_v128_store(out + m * nr + 4, acc[m][1]);
  }
  if (clamp) {
    const auto vlo = hn::Set(d, lo), vhi = hn::Set(d, hi);
    for (int i = 0; i < kMr * nr; i += static_cast<int>(N))
      hn::Store(hn::Min(vhi, hn::Max(vlo, hn::Load(d, out + i))), d, out + i);
  }
#else
  auto a00 = hn::Zero(d), a01 = hn::Zero(d), a10 = hn::Zero(d), a11 = hn::Zero(d);
  auto a20 = hn::Zero(d), a21 = hn::Zero(d), a30 = hn::Zero(d), a31 = hn::Zero(d);
  auto a40 = hn::Zero(d), a41 = hn::Zero(d), a50 = hn::Zero(d), a51 = hn::Zero(d);
  const float *x0 = xr[0], *x1 = xr[1], *x2 = xr[2], *x3 = xr[3], *x4 = xr[4], *x5 = xr[5];
  for (int k = 0; k < cols; ++k) {
    const float* w = panel + static_cast<size_t>(k) * nr;
    const auto w0 = hn::LoadU(d, w), w1 = hn::LoadU(d, w + N);
    auto b = hn::Set(d, x0[k]);
    a00 = hn::MulAdd(b, w0, a00);
    a01 = hn::MulAdd(b, w1, a01);
    b = hn::Set(d, x1[k]);
    a10 = hn::MulAdd(b, w0, a10);
    a11 = hn::MulAdd(b, w1, a11);
    b = hn::Set(d, x2[k]);
    a20 = hn::MulAdd(b, w0, a20);
    a21 = hn::MulAdd(b, w1, a21);
    b = hn::Set(d, x3[k]);
    a30 = hn::MulAdd(b, w0, a30);
    a31 = hn::MulAdd(b, w1, a31);
    b = hn::Set(d, x4[k]);
    a40 = hn::MulAdd(b, w0, a40);
    a41 = hn::MulAdd(b, w1, a41);
    b = hn::Set(d, x5[k]);
    a50 = hn::MulAdd(b, w0, a50);
    a51 = hn::MulAdd(b, w1, a51);
  }
  if (clamp) {
    // Max(lo, a) then Min(hi, .): x86's min / max return their second operand where either is
    // NaN, so a NaN passes through as std::min(std::max(a, lo), hi) passes it.
    const auto vlo = hn::Set(d, lo), vhi = hn::Set(d, hi);
    const auto c = [&](decltype(a00) a) { return hn::Min(vhi, hn::Max(vlo, a)); };
    a00 = c(a00), a01 = c(a01), a10 = c(a10), a11 = c(a11), a20 = c(a20), a21 = c(a21);
    a30 = c(a30), a31 = c(a31), a40 = c(a40), a41 = c(a41), a50 = c(a50), a51 = c(a51);
  }
  HWY_ALIGN float out[kMr * 2 * (HWY_MAX_BYTES / sizeof(float))];
  hn::StoreU(a00, d, out + 0 * nr), hn::StoreU(a01, d, out + 0 * nr + N);
  hn::StoreU(a10, d, out + 1 * nr), hn::StoreU(a11, d, out + 1 * nr + N);
  hn::StoreU(a20, d, out + 2 * nr), hn::StoreU(a21, d, out + 2 * nr + N);
  hn::StoreU(a30, d, out + 3 * nr), hn::StoreU(a31, d, out + 3 * nr + N);
  hn::StoreU(a40, d, out + 4 * nr), hn::StoreU(a41, d, out + 4 * nr + N);
  hn::StoreU(a50, d, out + 5 * nr), hn::StoreU(a51, d, out + 5 * nr + N);
#endif
  for (int m = 0; m < mt; ++m) {
    std::memcpy(y + static_cast<size_t>(t0 + m) * y_stride + r0, out + m * nr,
                static_cast<size_t>(valid) * sizeof(float));
  }
}

// y rows [0, n) x the packed panel's rows [p0, p0 + valid), clamped to [lo, hi] (infinite: none).
void PanelTiles(const float* panel, int cols, const float* x, size_t x_stride, int n, int valid,
                float* y, size_t y_stride, int p0,
                float lo = -std::numeric_limits<float>::infinity(),
                float hi = std::numeric_limits<float>::infinity()) {
  const bool clamp = std::isfinite(lo) || std::isfinite(hi);
  for (int t = 0; t < n; t += kMr) {
    const int mt = std::min(kMr, n - t);
    const float* xr[kMr];
    for (int m = 0; m < kMr; ++m)
      xr[m] = x + static_cast<size_t>(t + std::min(m, mt - 1)) * x_stride;
    Tile(panel, cols, xr, mt, valid, y, y_stride, t, p0, clamp, lo, hi);
  }
}

void DenseGemmRowsF32(const Linear& lin, const float* x, size_t x_stride, int n, int r0, int r1,
                      float* y, size_t y_stride, float* scratch) {
  const int nr = PanelRows(), cols = lin.cols;
  float* panel = scratch;
  float* row_f32 = scratch + static_cast<size_t>(cols) * nr;
  for (int p0 = r0; p0 < r1; p0 += nr) {
    PackPanel(lin, p0, panel, row_f32);
    PanelTiles(panel, cols, x, x_stride, n, std::min(nr, r1 - p0), y, y_stride, p0);
  }
}

void PackPanelsF32(const Linear& lin, int first, int count, float* packed, float* scratch) {
  const size_t size = static_cast<size_t>(lin.cols) * PanelRows();
  for (int p = first; p < first + count; ++p)
    PackPanel(lin, p * PanelRows(), packed + static_cast<size_t>(p) * size, scratch);
}

void PackedGemmRowsF32(const float* packed, int rows, int cols, const float* x, size_t x_stride,
                       int n, int r0, int r1, float* y, size_t y_stride, float out_min,
                       float out_max) {
  const int nr = PanelRows();
  const size_t size = static_cast<size_t>(cols) * nr;
  for (int p0 = r0; p0 < r1; p0 += nr) {
    PanelTiles(packed + static_cast<size_t>(p0 / nr) * size, cols, x, x_stride, n,
               std::min({nr, r1 - p0, rows - p0}), y, y_stride, p0, out_min, out_max);
  }
}

void GeluTanhMulF32(float* g, const float* u, size_t n) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const auto half = hn::Set(d, 0.5f), one = hn::Set(d, 1.0f);
  const auto beta = hn::Set(d, 0.7978845608028654f), kappa = hn::Set(d, 0.044715f);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto x = hn::LoadU(d, g + i);
    const auto inner = hn::Mul(beta, hn::MulAdd(hn::Mul(kappa, hn::Mul(x, x)), x, x));
    const auto gelu = hn::Mul(hn::Mul(half, x), hn::Add(one, hn::Tanh(d, inner)));
    hn::StoreU(hn::Mul(gelu, hn::LoadU(d, u + i)), d, g + i);
  }
  for (; i < n; ++i) {
    const float x = g[i], inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    g[i] = 0.5f * x * (1.0f + std::tanh(inner)) * u[i];
  }
}

void SoftmaxF32(float* x, int n) {
  const DF d;
  const int N = static_cast<int>(hn::Lanes(d));
  float mx = -std::numeric_limits<float>::infinity();
  int i = 0;
  if (n >= N) {
    auto m = hn::LoadU(d, x);
    for (i = N; i + N <= n; i += N) m = hn::Max(m, hn::LoadU(d, x + i));
    mx = hn::GetLane(hn::MaxOfLanes(d, m));
  }
  for (; i < n; ++i) mx = std::max(mx, x[i]);
  const auto vmx = hn::Set(d, mx);
  auto vsum = hn::Zero(d);
  double sum = 0;
  for (i = 0; i + N <= n; i += N) {
    const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vmx));
    hn::StoreU(e, d, x + i);
    vsum = hn::Add(vsum, e);
  }
  for (; i < n; ++i) sum += (x[i] = std::exp(x[i] - mx));
  sum += hn::GetLane(hn::SumOfLanes(d, vsum));
  const auto inv = hn::Set(d, static_cast<float>(1.0 / sum));
  for (i = 0; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(d, x + i), inv), d, x + i);
  for (; i < n; ++i) x[i] *= static_cast<float>(1.0 / sum);
}

}  // namespace HWY_NAMESPACE
}  // namespace gemma::fast
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace gemma::fast {

HWY_EXPORT(DenseGemmRowsF32);
HWY_EXPORT(PackPanelsF32);
HWY_EXPORT(PackedGemmRowsF32);
HWY_EXPORT(PanelRows);
HWY_EXPORT(SoftmaxF32);
HWY_EXPORT(GeluTanhMulF32);

void GeluTanhMulF32(float* g, const float* u, size_t n) {
  HWY_DYNAMIC_DISPATCH(GeluTanhMulF32)(g, u, n);
}

void SoftmaxF32(float* x, int n) { HWY_DYNAMIC_DISPATCH(SoftmaxF32)(x, n); }

int GemmPanelRows() { return HWY_DYNAMIC_DISPATCH(PanelRows)(); }
size_t GemmScratchFloats(int cols) {
  return static_cast<size_t>(cols) * (GemmPanelRows() + 1);
}
void DenseGemmRowsF32(const Linear& lin, const float* x, size_t x_stride, int n, int r0, int r1,
                      float* y, size_t y_stride, float* scratch) {
  HWY_DYNAMIC_DISPATCH(DenseGemmRowsF32)(lin, x, x_stride, n, r0, r1, y, y_stride, scratch);
}
size_t PackedPanelsFloats(int rows, int cols) {
  const int nr = GemmPanelRows();
  return static_cast<size_t>((rows + nr - 1) / nr) * cols * nr;
}
void PackPanelsF32(const Linear& lin, int first, int count, float* packed, float* scratch) {
  HWY_DYNAMIC_DISPATCH(PackPanelsF32)(lin, first, count, packed, scratch);
}
void PackedGemmRowsF32(const float* packed, int rows, int cols, const float* x, size_t x_stride,
                       int n, int r0, int r1, float* y, size_t y_stride, float out_min,
                       float out_max) {
  HWY_DYNAMIC_DISPATCH(PackedGemmRowsF32)
  (packed, rows, cols, x, x_stride, n, r0, r1, y, y_stride, out_min, out_max);
}

}  // namespace gemma::fast
#endif  // HWY_ONCE
