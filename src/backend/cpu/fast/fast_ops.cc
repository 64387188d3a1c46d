// Highway kernels; this file is compiled once per SIMD target (foreach_target.h) and the best one
// for the running CPU is picked on first call. Layouts and exactness: fast_ops.h. Here: dense
// linears, attention dot products, norms, elementwise ops, table lookups; the quantized linears
// and activation quantization are in quant_linear.cc.
#include "backend/cpu/fast/fast_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "backend/cpu/fast/tiles.h"
#include "core/dtype.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/fast/fast_ops.cc"
#include "hwy/cache_control.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// (after highway.h: the math header is re-included per target)
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace gemma::fast {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---------------------------------------------------------------- dense (f64 accumulation)

using DF64 = hn::ScalableTag<double>;
using DF32H = hn::Rebind<float, DF64>;  // as many f32 lanes as f64 lanes

template <WeightKind K>
HWY_INLINE hn::Vec<DF64> LoadAsF64(const uint8_t* row, int i) {
  const DF64 d64;
  const DF32H df;
  if constexpr (K == WeightKind::kF32) {
    return hn::PromoteTo(d64, hn::LoadU(df, reinterpret_cast<const float*>(row) + i));
  } else if constexpr (K == WeightKind::kBF16) {
    const hn::Rebind<hwy::bfloat16_t, DF32H> dbf;
    return hn::PromoteTo(
        d64, hn::PromoteTo(df, hn::LoadU(dbf, reinterpret_cast<const hwy::bfloat16_t*>(row) + i)));
  } else {
    const hn::Rebind<hwy::float16_t, DF32H> dh;
    return hn::PromoteTo(
        d64, hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(row) + i)));
  }
}

template <WeightKind K>
HWY_INLINE float ScalarWeight(const uint8_t* row, int i) {
  if constexpr (K == WeightKind::kF32) {
    float f;
    std::memcpy(&f, row + 4 * i, 4);
    return f;
  } else {
    uint16_t h;
    std::memcpy(&h, row + 2 * i, 2);
    return K == WeightKind::kBF16 ? Bf16ToF32(h) : F16ToF32(h);
  }
}

#if GEMMA_WASM_KERNELS
// WebAssembly SIMD (tiles.h): f64x2 lanes as EMU128's, each lane's products added in the same
// order (EMU128's MulAdd is a multiply then an add: WebAssembly has no FMA).
HWY_INLINE v128_t PromoteHigh(v128_t f32x4) {
  return wasm_f64x2_promote_low_f32x4(wasm_i64x2_shuffle(f32x4, f32x4, 1, 1));
}

// Elements i..i+3 of a bf16 or f32 row as f32x4.
template <WeightKind K>
HWY_INLINE v128_t LoadF32x4(const uint8_t* row, int i) {
  if constexpr (K == WeightKind::kF32) {
    return wasm_v128_load(row + 4 * static_cast<size_t>(i));
  } else {
    return wasm_i32x4_shl(wasm_u32x4_load16x4(row + 2 * static_cast<size_t>(i)), 16);
  }
}

template <WeightKind K, int T>
HWY_NOINLINE void DenseTileWasm(const uint8_t* const* w, int cols, const float* const* x,
                                double (&out)[kRows][kTokens]) {
  v128_t acc[kRows][T];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[r][t] = wasm_f64x2_splat(0.0);
  int i = 0;
  for (; i + 4 <= cols; i += 4) {
    v128_t lo[kRows], hi[kRows];
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      const v128_t f = LoadF32x4<K>(w[r], i);
      lo[r] = wasm_f64x2_promote_low_f32x4(f);
      hi[r] = PromoteHigh(f);
    }
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const v128_t xf = wasm_v128_load(x[t] + i);
      const v128_t xlo = wasm_f64x2_promote_low_f32x4(xf), xhi = PromoteHigh(xf);
#pragma GCC unroll 16
      for (int r = 0; r < kRows; ++r) {
        acc[r][t] = wasm_f64x2_add(wasm_f64x2_mul(lo[r], xlo), acc[r][t]);
        acc[r][t] = wasm_f64x2_add(wasm_f64x2_mul(hi[r], xhi), acc[r][t]);
      }
    }
  }
  for (; i + 2 <= cols; i += 2) {
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const v128_t xv = wasm_f64x2_make(x[t][i], x[t][i + 1]);
#pragma GCC unroll 16
      for (int r = 0; r < kRows; ++r) {
        const v128_t wv = wasm_f64x2_make(ScalarWeight<K>(w[r], i), ScalarWeight<K>(w[r], i + 1));
        acc[r][t] = wasm_f64x2_add(wasm_f64x2_mul(wv, xv), acc[r][t]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      // As EMU128's SumOfLanes: from 0, lane 0, then lane 1.
      double s = 0.0;
      s += wasm_f64x2_extract_lane(acc[r][t], 0);
      s += wasm_f64x2_extract_lane(acc[r][t], 1);
      for (int j = i; j < cols; ++j) s += static_cast<double>(ScalarWeight<K>(w[r], j)) * x[t][j];
      out[r][t] = s;
    }
  }
}
#endif

template <WeightKind K, int T>
HWY_NOINLINE void DenseTile(const uint8_t* const* w, int cols, const float* const* x,
                            double (&out)[kRows][kTokens], size_t ahead) {
#if GEMMA_WASM_KERNELS
  if constexpr (K != WeightKind::kF16) return DenseTileWasm<K, T>(w, cols, x, out);
#endif
  constexpr int kElemBytes = K == WeightKind::kF32 ? 4 : 2;
  const DF64 d64;
  const DF32H df;
  const int N = static_cast<int>(hn::Lanes(d64));
  hn::Vec<DF64> acc[kRows][T];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[r][t] = hn::Zero(d64);
  int i = 0;
  for (; i + N <= cols; i += N) {
    if ((i * kElemBytes) % 64 < N * kElemBytes) {
      // Once per cache line: the same line of the rows `ahead` bytes further (as Tile1).
#pragma GCC unroll 16
      for (int r = 0; r < kRows; ++r)
        hwy::Prefetch(w[r] + static_cast<size_t>(i) * kElemBytes + ahead);
    }
    hn::Vec<DF64> wv[kRows];
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) wv[r] = LoadAsF64<K>(w[r], i);
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const auto xv = hn::PromoteTo(d64, hn::LoadU(df, x[t] + i));
#pragma GCC unroll 16
      for (int r = 0; r < kRows; ++r) acc[r][t] = hn::MulAdd(wv[r], xv, acc[r][t]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      double s = hn::GetLane(hn::SumOfLanes(d64, acc[r][t]));
      for (int j = i; j < cols; ++j) s += static_cast<double>(ScalarWeight<K>(w[r], j)) * x[t][j];
      out[r][t] = s;
    }
  }
}

template <WeightKind K>
void DenseRowsK(const Linear& lin, const float* x, size_t x_stride, int n, int r0, int r1, float* y,
                size_t y_stride) {
  // Prefetch distance in whole 4-row groups, as the quantized decode tile (bf16
  // per_layer_model_projection, one token, kernel_bench decode: 2.1-2.2 -> 0.9 ms single-threaded).
  const size_t ahead = PrefetchAhead(kRows * lin.row_bytes);
  for (int r = r0; r < r1; r += kRows) {
    const int rr = std::min(kRows, r1 - r);
    const uint8_t* w[kRows];
    for (int i = 0; i < kRows; ++i)
      w[i] = lin.data + static_cast<size_t>(r + std::min(i, rr - 1)) * lin.row_bytes;
    for (int t = 0; t < n;) {
      double out[kRows][kTokens];
      const float* xt[kTokens];
      int tt;
      if (n - t >= kTokens) {
        tt = kTokens;
        for (int i = 0; i < kTokens; ++i) xt[i] = x + (t + i) * x_stride;
        DenseTile<K, kTokens>(w, lin.cols, xt, out, ahead);
      } else {
        tt = 1;
        xt[0] = x + t * x_stride;
        DenseTile<K, 1>(w, lin.cols, xt, out, ahead);
      }
      for (int i = 0; i < rr; ++i)
        for (int j = 0; j < tt; ++j) y[(t + j) * y_stride + r + i] = static_cast<float>(out[i][j]);
      t += tt;
    }
  }
}

void DenseLinearRows(const Linear& lin, const float* x, size_t x_stride, int n, int r0, int r1,
                     float* y, size_t y_stride) {
  switch (lin.kind) {
    case WeightKind::kF32:
      return DenseRowsK<WeightKind::kF32>(lin, x, x_stride, n, r0, r1, y, y_stride);
    case WeightKind::kBF16:
      return DenseRowsK<WeightKind::kBF16>(lin, x, x_stride, n, r0, r1, y, y_stride);
    case WeightKind::kF16:
      return DenseRowsK<WeightKind::kF16>(lin, x, x_stride, n, r0, r1, y, y_stride);
    default:
      return;
  }
}

// ---------------------------------------------------------------- vector helpers

double DotF64(const float* a, const float* b, int n) {
  const DF64 d64;
  const DF32H df;
  const int N = static_cast<int>(hn::Lanes(d64));
  auto acc0 = hn::Zero(d64), acc1 = hn::Zero(d64);
  int i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    acc0 = hn::MulAdd(hn::PromoteTo(d64, hn::LoadU(df, a + i)),
                      hn::PromoteTo(d64, hn::LoadU(df, b + i)), acc0);
    acc1 = hn::MulAdd(hn::PromoteTo(d64, hn::LoadU(df, a + i + N)),
                      hn::PromoteTo(d64, hn::LoadU(df, b + i + N)), acc1);
  }
  double s = hn::GetLane(hn::SumOfLanes(d64, hn::Add(acc0, acc1)));
  for (; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

#if GEMMA_WASM_KERNELS
// f64x2 lanes as EMU128's (lane l sums dimensions i = l mod 2, ascending), four dimensions a step.
template <int NQ>
void QueryKeyDotsWasm(const double* q, int hd, const float* k, size_t k_stride, int nk,
                      double* out, size_t ld) {
  for (int j = 0; j < nk; ++j) {
    const float* kj = k + j * k_stride;
    v128_t acc[NQ];
#pragma GCC unroll 16
    for (int h = 0; h < NQ; ++h) acc[h] = wasm_f64x2_splat(0.0);
    int i = 0;
    for (; i + 4 <= hd; i += 4) {
      const v128_t kf = wasm_v128_load(kj + i);
      const v128_t k0 = wasm_f64x2_promote_low_f32x4(kf), k1 = PromoteHigh(kf);
#pragma GCC unroll 16
      for (int h = 0; h < NQ; ++h) {
        acc[h] = wasm_f64x2_add(wasm_f64x2_mul(wasm_v128_load(q + h * hd + i), k0), acc[h]);
        acc[h] = wasm_f64x2_add(wasm_f64x2_mul(wasm_v128_load(q + h * hd + i + 2), k1), acc[h]);
      }
    }
    for (; i + 2 <= hd; i += 2) {
      const v128_t kv = wasm_f64x2_make(kj[i], kj[i + 1]);
#pragma GCC unroll 16
      for (int h = 0; h < NQ; ++h)
        acc[h] = wasm_f64x2_add(wasm_f64x2_mul(wasm_v128_load(q + h * hd + i), kv), acc[h]);
    }
#pragma GCC unroll 16
    for (int h = 0; h < NQ; ++h) {
      double s = 0.0;
      s += wasm_f64x2_extract_lane(acc[h], 0);
      s += wasm_f64x2_extract_lane(acc[h], 1);
      for (int t = i; t < hd; ++t) s += q[h * hd + t] * static_cast<double>(kj[t]);
      out[h * ld + j] = s;
    }
  }
}

// DV f64x2 vectors of dimensions per pass over the keys; each lane sums over keys ascending.
template <int NQ>
void WeightedValuesWasm(const double* p, size_t ld, const float* v, size_t v_stride, int nk,
                        int hd, double* acc) {
  constexpr int DV = NQ <= 4 ? 2 : 1;
  int i = 0;
  for (; i + 2 * DV <= hd; i += 2 * DV) {
    v128_t a[NQ][DV];
#pragma GCC unroll 16
    for (int h = 0; h < NQ; ++h)
#pragma GCC unroll 16
      for (int d = 0; d < DV; ++d) a[h][d] = wasm_v128_load(acc + h * hd + i + 2 * d);
    for (int j = 0; j < nk; ++j) {
      v128_t vv[DV];
      if constexpr (DV == 2) {
        const v128_t vf = wasm_v128_load(v + j * v_stride + i);
        vv[0] = wasm_f64x2_promote_low_f32x4(vf);
        vv[1] = PromoteHigh(vf);
      } else {
        vv[0] = wasm_f64x2_promote_low_f32x4(wasm_v128_load64_zero(v + j * v_stride + i));
      }
#pragma GCC unroll 16
      for (int h = 0; h < NQ; ++h) {
        const v128_t ph = wasm_f64x2_splat(p[h * ld + j]);
#pragma GCC unroll 16
        for (int d = 0; d < DV; ++d) a[h][d] = wasm_f64x2_add(wasm_f64x2_mul(ph, vv[d]), a[h][d]);
      }
    }
#pragma GCC unroll 16
    for (int h = 0; h < NQ; ++h)
#pragma GCC unroll 16
      for (int d = 0; d < DV; ++d) wasm_v128_store(acc + h * hd + i + 2 * d, a[h][d]);
  }
  for (; i < hd; ++i) {
    for (int h = 0; h < NQ; ++h) {
      double a = acc[h * hd + i];
      for (int j = 0; j < nk; ++j) a += p[h * ld + j] * static_cast<double>(v[j * v_stride + i]);
      acc[h * hd + i] = a;
    }
  }
}
#endif

template <int NQ>
void QueryKeyDotsN(const double* q, int hd, const float* k, size_t k_stride, int nk, double* out,
                   size_t ld) {
#if GEMMA_WASM_KERNELS
  return QueryKeyDotsWasm<NQ>(q, hd, k, k_stride, nk, out, ld);
#endif
  const DF64 d64;
  const DF32H df;
  const int N = static_cast<int>(hn::Lanes(d64));
  const int full = hd / N * N;
  // KJ keys per pass (each query load feeds KJ FMAs); every (head, key) sum keeps its lanes, order
  // and reduction, so results do not depend on KJ.
  constexpr int KJ = NQ <= 4 ? 4 : 2;
  int j = 0;
  for (; j + KJ <= nk; j += KJ) {
    hn::Vec<DF64> acc[KJ][NQ];
#pragma GCC unroll 16
    for (int kk = 0; kk < KJ; ++kk)
#pragma GCC unroll 16
      for (int h = 0; h < NQ; ++h) acc[kk][h] = hn::Zero(d64);
    for (int i = 0; i < full; i += N) {
      hn::Vec<DF64> kv[KJ];
#pragma GCC unroll 16
      for (int kk = 0; kk < KJ; ++kk)
        kv[kk] = hn::PromoteTo(d64, hn::LoadU(df, k + (j + kk) * k_stride + i));
#pragma GCC unroll 16
      for (int h = 0; h < NQ; ++h) {
        const auto qv = hn::LoadU(d64, q + h * hd + i);
#pragma GCC unroll 16
        for (int kk = 0; kk < KJ; ++kk) acc[kk][h] = hn::MulAdd(qv, kv[kk], acc[kk][h]);
      }
    }
#pragma GCC unroll 16
    for (int kk = 0; kk < KJ; ++kk) {
      const float* kj = k + (j + kk) * k_stride;
#pragma GCC unroll 16
      for (int h = 0; h < NQ; ++h) {
        double s = hn::GetLane(hn::SumOfLanes(d64, acc[kk][h]));
        for (int i = full; i < hd; ++i) s += q[h * hd + i] * static_cast<double>(kj[i]);
        out[h * ld + j + kk] = s;
      }
    }
  }
  for (; j < nk; ++j) {
    const float* kj = k + j * k_stride;
    hn::Vec<DF64> acc[NQ];
#pragma GCC unroll 16
    for (int h = 0; h < NQ; ++h) acc[h] = hn::Zero(d64);
    for (int i = 0; i < full; i += N) {
      const auto kv = hn::PromoteTo(d64, hn::LoadU(df, kj + i));
#pragma GCC unroll 16
      for (int h = 0; h < NQ; ++h) acc[h] = hn::MulAdd(hn::LoadU(d64, q + h * hd + i), kv, acc[h]);
    }
#pragma GCC unroll 16
    for (int h = 0; h < NQ; ++h) {
      double s = hn::GetLane(hn::SumOfLanes(d64, acc[h]));
      for (int i = full; i < hd; ++i) s += q[h * hd + i] * static_cast<double>(kj[i]);
      out[h * ld + j] = s;
    }
  }
}

void QueryKeyDotsF64(const double* q, int nq, int hd, const float* k, size_t k_stride, int nk,
                     double* out, size_t ld) {
  switch (nq) {
    case 1:
      return QueryKeyDotsN<1>(q, hd, k, k_stride, nk, out, ld);
    case 2:
      return QueryKeyDotsN<2>(q, hd, k, k_stride, nk, out, ld);
    case 3:
      return QueryKeyDotsN<3>(q, hd, k, k_stride, nk, out, ld);
    case 4:
      return QueryKeyDotsN<4>(q, hd, k, k_stride, nk, out, ld);
    case 5:
      return QueryKeyDotsN<5>(q, hd, k, k_stride, nk, out, ld);
    case 6:
      return QueryKeyDotsN<6>(q, hd, k, k_stride, nk, out, ld);
    case 7:
      return QueryKeyDotsN<7>(q, hd, k, k_stride, nk, out, ld);
    default:
      return QueryKeyDotsN<8>(q, hd, k, k_stride, nk, out, ld);
  }
}

template <int NQ>
void WeightedValuesN(const double* p, size_t ld, const float* v, size_t v_stride, int nk, int hd,
                     double* acc) {
#if GEMMA_WASM_KERNELS
  return WeightedValuesWasm<NQ>(p, ld, v, v_stride, nk, hd, acc);
#endif
  const DF64 d64;
  const DF32H df;
  const int N = static_cast<int>(hn::Lanes(d64));
  const int full = hd / N * N;
  int i = 0;
  // DV vectors of dimensions per pass over the keys (each broadcast weight feeds DV FMAs); every
  // accumulator still sums over keys in ascending order.
  constexpr int DV = NQ <= 4 ? 4 : 2;
  for (; i + DV * N <= full; i += DV * N) {
    hn::Vec<DF64> a[NQ][DV];
#pragma GCC unroll 16
    for (int h = 0; h < NQ; ++h)
#pragma GCC unroll 16
      for (int d = 0; d < DV; ++d) a[h][d] = hn::LoadU(d64, acc + h * hd + i + d * N);
    for (int j = 0; j < nk; ++j) {
      hn::Vec<DF64> vv[DV];
#pragma GCC unroll 16
      for (int d = 0; d < DV; ++d)
        vv[d] = hn::PromoteTo(d64, hn::LoadU(df, v + j * v_stride + i + d * N));
#pragma GCC unroll 16
      for (int h = 0; h < NQ; ++h) {
        const auto ph = hn::Set(d64, p[h * ld + j]);
#pragma GCC unroll 16
        for (int d = 0; d < DV; ++d) a[h][d] = hn::MulAdd(ph, vv[d], a[h][d]);
      }
    }
#pragma GCC unroll 16
    for (int h = 0; h < NQ; ++h)
#pragma GCC unroll 16
      for (int d = 0; d < DV; ++d) hn::StoreU(a[h][d], d64, acc + h * hd + i + d * N);
  }
  for (; i < full; i += N) {
    hn::Vec<DF64> a[NQ];
#pragma GCC unroll 16
    for (int h = 0; h < NQ; ++h) a[h] = hn::LoadU(d64, acc + h * hd + i);
    for (int j = 0; j < nk; ++j) {
      const auto vv = hn::PromoteTo(d64, hn::LoadU(df, v + j * v_stride + i));
#pragma GCC unroll 16
      for (int h = 0; h < NQ; ++h) a[h] = hn::MulAdd(hn::Set(d64, p[h * ld + j]), vv, a[h]);
    }
#pragma GCC unroll 16
    for (int h = 0; h < NQ; ++h) hn::StoreU(a[h], d64, acc + h * hd + i);
  }
  for (i = full; i < hd; ++i) {
    for (int h = 0; h < NQ; ++h) {
      double a = acc[h * hd + i];
      for (int j = 0; j < nk; ++j) a += p[h * ld + j] * static_cast<double>(v[j * v_stride + i]);
      acc[h * hd + i] = a;
    }
  }
}

// x = softmax(x) in place: exp(x - max) by Highway's vector exp (1 ulp), its sum in lane order
// then across lanes, each value divided by the sum. The tail goes through the same vector exp
// (padded with -inf, whose exp is 0).
void SoftmaxF64(double* x, int n) {
  const DF64 d;
  const int N = static_cast<int>(hn::Lanes(d));
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  const int full = n / N * N;
  auto vmax = hn::Set(d, kNegInf);
  for (int i = 0; i < full; i += N) vmax = hn::Max(vmax, hn::LoadU(d, x + i));
  double mx = hn::GetLane(hn::MaxOfLanes(d, vmax));
  for (int i = full; i < n; ++i) mx = std::max(mx, x[i]);
  const auto vmx = hn::Set(d, mx);
  auto vsum = hn::Zero(d);
  for (int i = 0; i < full; i += N) {
    const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vmx));
    hn::StoreU(e, d, x + i);
    vsum = hn::Add(vsum, e);
  }
  HWY_ALIGN double tail[hn::MaxLanes(d)];
  if (full < n) {
    for (int j = 0; j < N; ++j) tail[j] = full + j < n ? x[full + j] : kNegInf;
    const auto e = hn::Exp(d, hn::Sub(hn::Load(d, tail), vmx));
    hn::Store(e, d, tail);
    vsum = hn::Add(vsum, e);
    for (int i = full; i < n; ++i) x[i] = tail[i - full];
  }
  const auto vs = hn::Set(d, hn::GetLane(hn::SumOfLanes(d, vsum)));
  for (int i = 0; i < full; i += N) hn::StoreU(hn::Div(hn::LoadU(d, x + i), vs), d, x + i);
  const double sum = hn::GetLane(vs);
  for (int i = full; i < n; ++i) x[i] /= sum;
}

void WeightedValuesF64(const double* p, size_t ld, int nq, const float* v, size_t v_stride, int nk,
                       int hd, double* acc) {
  switch (nq) {
    case 1:
      return WeightedValuesN<1>(p, ld, v, v_stride, nk, hd, acc);
    case 2:
      return WeightedValuesN<2>(p, ld, v, v_stride, nk, hd, acc);
    case 3:
      return WeightedValuesN<3>(p, ld, v, v_stride, nk, hd, acc);
    case 4:
      return WeightedValuesN<4>(p, ld, v, v_stride, nk, hd, acc);
    case 5:
      return WeightedValuesN<5>(p, ld, v, v_stride, nk, hd, acc);
    case 6:
      return WeightedValuesN<6>(p, ld, v, v_stride, nk, hd, acc);
    case 7:
      return WeightedValuesN<7>(p, ld, v, v_stride, nk, hd, acc);
    default:
      return WeightedValuesN<8>(p, ld, v, v_stride, nk, hd, acc);
  }
}

void RmsNorm(const float* x, int n, const float* w, float eps, float* y) {
  const double ss = DotF64(x, x, n);
  const float ms = static_cast<float>(ss / n) + eps;
  const float r = std::pow(ms, -0.5f);
  const hn::ScalableTag<float> df;
  const int N = static_cast<int>(hn::Lanes(df));
  const auto vr = hn::Set(df, r);
  int i = 0;
  for (; i + N <= n; i += N) {
    auto v = hn::Mul(hn::LoadU(df, x + i), vr);
    if (w) v = hn::Mul(v, hn::LoadU(df, w + i));
    hn::StoreU(v, df, y + i);
  }
  for (; i < n; ++i) {
    const float v = x[i] * r;
    y[i] = w ? v * w[i] : v;
  }
}

void MulF32(const float* a, const float* b, int n, float* y) {
  const hn::ScalableTag<float> df;
  const int N = static_cast<int>(hn::Lanes(df));
  int i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::Mul(hn::LoadU(df, a + i), hn::LoadU(df, b + i)), df, y + i);
  for (; i < n; ++i) y[i] = a[i] * b[i];
}

void AddF32(const float* y, int n, float* x) {
  const hn::ScalableTag<float> df;
  const int N = static_cast<int>(hn::Lanes(df));
  int i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::Add(hn::LoadU(df, x + i), hn::LoadU(df, y + i)), df, x + i);
  for (; i < n; ++i) x[i] += y[i];
}

void ScaleF32(float s, int n, float* x) {
  const hn::ScalableTag<float> df;
  const int N = static_cast<int>(hn::Lanes(df));
  const auto vs = hn::Set(df, s);
  int i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(df, x + i), vs), df, x + i);
  for (; i < n; ++i) x[i] *= s;
}

void ClampF32(const float* x, size_t n, float lo, float hi, float* y) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  const auto vlo = hn::Set(df, lo), vhi = hn::Set(df, hi);
  size_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::Min(vhi, hn::Max(vlo, hn::LoadU(df, x + i))), df, y + i);
  for (; i < n; ++i) y[i] = std::min(std::max(x[i], lo), hi);
}

// Table index of SRQ outputs as the backend's scalar Level: r = x / s, r + (r >= 0 ? 0.5 : -0.5),
// truncated, clamped to [-128, 127], plus 128. |r| <= 128.5 for SRQ outputs, so the truncating
// conversion never saturates.
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToSigned<DF>> LevelIndex(DF df, hn::Vec<DF> x, hn::Vec<DF> vs) {
  const hn::RebindToSigned<DF> di;
  const auto r = hn::Div(x, vs);
  const auto half = hn::IfThenElse(hn::Ge(r, hn::Zero(df)), hn::Set(df, 0.5f), hn::Set(df, -0.5f));
  const auto k = hn::ConvertTo(di, hn::Add(r, half));
  return hn::Add(hn::Min(hn::Max(k, hn::Set(di, -128)), hn::Set(di, 127)), hn::Set(di, 128));
}

HWY_INLINE int ScalarLevelIndex(float x, float s) {
  const float r = x / s;
  return std::clamp(static_cast<int>(r + (r >= 0 ? 0.5f : -0.5f)), -128, 127) + 128;
}

void TableLookupMul(const float* x, int n, float s, const float* table, const float* m, float* y) {
  const hn::ScalableTag<float> df;
  const int N = static_cast<int>(hn::Lanes(df));
  const auto vs = hn::Set(df, s);
  int i = 0;
  for (; i + N <= n; i += N) {
    auto v = hn::GatherIndex(df, table, LevelIndex(df, hn::LoadU(df, x + i), vs));
    if (m) v = hn::Mul(v, hn::LoadU(df, m + i));
    hn::StoreU(v, df, y + i);
  }
  for (; i < n; ++i) {
    const float v = table[ScalarLevelIndex(x[i], s)];
    y[i] = m ? v * m[i] : v;
  }
}

void TableLookupLevels(float* x, int n, float s, const float* table, uint8_t* level) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<uint8_t, decltype(df)> du8;
  const int N = static_cast<int>(hn::Lanes(df));
  const auto vs = hn::Set(df, s);
  int i = 0;
  for (; i + N <= n; i += N) {
    const auto k = LevelIndex(df, hn::LoadU(df, x + i), vs);
    hn::StoreU(hn::GatherIndex(df, table, k), df, x + i);
    hn::StoreU(hn::DemoteTo(du8, k), du8, level + i);
  }
  for (; i < n; ++i) {
    const int k = ScalarLevelIndex(x[i], s);
    x[i] = table[k];
    level[i] = static_cast<uint8_t>(k);
  }
}

int TableLookupArgmax(float* x, int n, float s, const float* table) {
  const hn::ScalableTag<float> df;
  const int N = static_cast<int>(hn::Lanes(df));
  const auto vs = hn::Set(df, s);
  auto vmax = hn::Set(df, -std::numeric_limits<float>::infinity());
  int i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::GatherIndex(df, table, LevelIndex(df, hn::LoadU(df, x + i), vs));
    hn::StoreU(v, df, x + i);
    vmax = hn::Max(vmax, v);
  }
  float mx = hn::GetLane(hn::MaxOfLanes(df, vmax));
  for (int j = i; j < n; ++j) {
    x[j] = table[ScalarLevelIndex(x[j], s)];
    mx = std::max(mx, x[j]);
  }
  // Table values are finite: the first element equal to the maximum is the lowest argmax.
  for (int j = 0; j < n; ++j) {
    if (x[j] == mx) return j;
  }
  return 0;
}

uint64_t XorReduce(const uint8_t* p, size_t bytes) {
  const hn::ScalableTag<uint64_t> d;
  const size_t N = hn::Lanes(d);
  const uint64_t* w = reinterpret_cast<const uint64_t*>(p);
  const size_t words = bytes / 8;
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * N <= words; i += 4 * N) {
    a0 = hn::Xor(a0, hn::LoadU(d, w + i));
    a1 = hn::Xor(a1, hn::LoadU(d, w + i + N));
    a2 = hn::Xor(a2, hn::LoadU(d, w + i + 2 * N));
    a3 = hn::Xor(a3, hn::LoadU(d, w + i + 3 * N));
  }
  HWY_ALIGN uint64_t lanes[hn::MaxLanes(d)];
  hn::Store(hn::Xor(hn::Xor(a0, a1), hn::Xor(a2, a3)), d, lanes);
  uint64_t x = 0;
  for (size_t l = 0; l < N; ++l) x ^= lanes[l];
  for (; i < words; ++i) x ^= w[i];
  return x;
}

int64_t Target() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace gemma::fast
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace gemma::fast {

HWY_EXPORT(DenseLinearRows);
HWY_EXPORT(DotF64);
HWY_EXPORT(RmsNorm);
HWY_EXPORT(QueryKeyDotsF64);
HWY_EXPORT(WeightedValuesF64);
HWY_EXPORT(SoftmaxF64);
HWY_EXPORT(MulF32);
HWY_EXPORT(AddF32);
HWY_EXPORT(ScaleF32);
HWY_EXPORT(ClampF32);
HWY_EXPORT(Target);
HWY_EXPORT(XorReduce);
HWY_EXPORT(TableLookupMul);
HWY_EXPORT(TableLookupLevels);
HWY_EXPORT(TableLookupArgmax);

void DenseLinearRows(const Linear& lin, const float* x, size_t x_stride, int n, int r0, int r1,
                     float* y, size_t y_stride) {
  HWY_DYNAMIC_DISPATCH(DenseLinearRows)(lin, x, x_stride, n, r0, r1, y, y_stride);
}
double DotF64(const float* a, const float* b, int n) {
  return HWY_DYNAMIC_DISPATCH(DotF64)(a, b, n);
}
void QueryKeyDotsF64(const double* q, int nq, int hd, const float* k, size_t k_stride, int nk,
                     double* out, size_t ld) {
  HWY_DYNAMIC_DISPATCH(QueryKeyDotsF64)(q, nq, hd, k, k_stride, nk, out, ld);
}
void WeightedValuesF64(const double* p, size_t ld, int nq, const float* v, size_t v_stride, int nk,
                       int hd, double* acc) {
  HWY_DYNAMIC_DISPATCH(WeightedValuesF64)(p, ld, nq, v, v_stride, nk, hd, acc);
}
void SoftmaxF64(double* x, int n) { HWY_DYNAMIC_DISPATCH(SoftmaxF64)(x, n); }
void RmsNorm(const float* x, int n, const float* w, float eps, float* y) {
  HWY_DYNAMIC_DISPATCH(RmsNorm)(x, n, w, eps, y);
}
void MulF32(const float* a, const float* b, int n, float* y) {
  HWY_DYNAMIC_DISPATCH(MulF32)(a, b, n, y);
}
void AddF32(const float* y, int n, float* x) { HWY_DYNAMIC_DISPATCH(AddF32)(y, n, x); }
void ScaleF32(float s, int n, float* x) { HWY_DYNAMIC_DISPATCH(ScaleF32)(s, n, x); }
void ClampF32(const float* x, size_t n, float lo, float hi, float* y) {
  HWY_DYNAMIC_DISPATCH(ClampF32)(x, n, lo, hi, y);
}
uint64_t XorReduce(const uint8_t* p, size_t bytes) {
  return HWY_DYNAMIC_DISPATCH(XorReduce)(p, bytes);
}
void TableLookupMul(const float* x, int n, float s, const float* table, const float* m, float* y) {
  HWY_DYNAMIC_DISPATCH(TableLookupMul)(x, n, s, table, m, y);
}
void TableLookupLevels(float* x, int n, float s, const float* table, uint8_t* level) {
  HWY_DYNAMIC_DISPATCH(TableLookupLevels)(x, n, s, table, level);
}
int TableLookupArgmax(float* x, int n, float s, const float* table) {
  return HWY_DYNAMIC_DISPATCH(TableLookupArgmax)(x, n, s, table);
}
const char* TargetName() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(Target)()); }

namespace {

// Highway 1.0.3 compiles its AVX3_DL target with "avxvnni" (the VEX-encoded AVX-VNNI of Alder
// Lake and Sapphire Rapids) in the target string, but picks that target on every CPU with AVX-512
// VNNI: GCC's VEX vpdpbusd in our AVX3_DL kernels is an illegal instruction on Ice Lake and Zen 4,
// which have AVX-512 VNNI without AVX-VNNI (a QAT checkpoint crashed there with SIGILL). There
// the AVX3 kernels run instead. Set before main, ahead of the first dispatch.
bool CpuHasAvxVnni() {
#if HWY_ARCH_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4));
#else
  return true;
#endif
}

[[maybe_unused]] const bool kAvx3DlUsable = [] {
#if HWY_ARCH_X86
  if (!CpuHasAvxVnni()) hwy::DisableTargets(HWY_AVX3_DL);
#endif
  return true;
}();

}  // namespace

}  // namespace gemma::fast
#endif  // HWY_ONCE
