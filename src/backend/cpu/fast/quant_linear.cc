// Quantized (QAT) linears and activation quantization: Highway kernels, compiled once per SIMD
// target (foreach_target.h); the best one for the running CPU is picked on first call. Layouts and
// exactness: fast_ops.h.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/fast/fast_ops.h"
#include "backend/cpu/fast/tiles.h"
#include "backend/cpu/reference_ops.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/fast/quant_linear.cc"
#include "hwy/cache_control.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#if HWY_TARGET == HWY_AVX3_DL
#include <immintrin.h>
#endif

#ifndef GEMMA_QUANT_LINEAR_VNNI_ATTR
#define GEMMA_QUANT_LINEAR_VNNI_ATTR
// Highway 1.0's AVX3_DL target string lacks avx512vnni (it names avxvnni); these kernels add it.
// GCC adds a function's target attribute to the pragma's; clang replaces it, so there the
// attribute repeats Highway's string (expanded where used, inside the AVX3_DL pass).
#if defined(__clang__)
#define GEMMA_VNNI __attribute__((target(HWY_TARGET_STR ",avx512vnni")))
#else
#define GEMMA_VNNI __attribute__((target("avx512vnni")))
#endif
#endif

HWY_BEFORE_NAMESPACE();
namespace gemma::fast {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <WeightKind K>
constexpr int Groups() {
  return K == WeightKind::kQ2 ? 4 : K == WeightKind::kQ4 ? 2 : 1;
}

// Row r's first 64-byte block, and the bytes from one of a row's blocks to the next: rows one after
// another, or (the backend's copy, Linear::interleave == kRows) in groups of kRows block by block.
HWY_INLINE const uint8_t* RowBlocks(const Linear& lin, int r) {
  if (lin.interleave == 1) return lin.data + static_cast<size_t>(r) * lin.row_bytes;
  return lin.data + static_cast<size_t>(r / kRows) * kRows * lin.row_bytes + (r % kRows) * 64;
}
HWY_INLINE size_t BlockStride(const Linear& lin) { return size_t{64} * lin.interleave; }

#if HWY_TARGET == HWY_AVX3_DL
// u8 codes of group g of 64 packed bytes; int8 weights become v + 128.
template <WeightKind K, int G>
HWY_INLINE __m512i Unpack(__m512i p) {
  if constexpr (K == WeightKind::kQ8) {
    return _mm512_xor_si512(p, _mm512_set1_epi8(static_cast<char>(0x80)));
  } else if constexpr (K == WeightKind::kQ4) {
    const __m512i m = _mm512_set1_epi8(0x0F);
    return G == 0 ? _mm512_and_si512(p, m) : _mm512_and_si512(_mm512_srli_epi16(p, 4), m);
  } else {
    const __m512i m = _mm512_set1_epi8(0x03);
    return _mm512_and_si512(_mm512_srli_epi16(p, 2 * G), m);
  }
}

template <WeightKind K>
constexpr int Offset() {
  return K == WeightKind::kQ2 ? 2 : K == WeightKind::kQ4 ? 8 : 128;
}

// acc += u (u8) x q (s8), 4 products per i32 lane. An asm statement with a read-write accumulator:
// with the intrinsic, GCC copied every accumulator through another register and spilled some to
// the stack on each iteration of the tile loops.
HWY_INLINE void Dpbusd(__m512i& acc, __m512i u, __m512i q) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(q));
}

template <WeightKind K, int G, int T>
GEMMA_VNNI HWY_INLINE void TileGroup(const __m512i* p, const int8_t* const* q, size_t qoff,
                                     __m512i (&acc)[kRows][T]) {
  __m512i u[kRows];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) u[r] = Unpack<K, G>(p[r]);
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
    const __m512i qv = _mm512_loadu_si512(q[t] + qoff + 64 * G);
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) Dpbusd(acc[r][t], u[r], qv);
  }
}

// raw[r][t] = sum over full blocks of u * q.
template <WeightKind K, int T>
GEMMA_VNNI HWY_NOINLINE void Tile(const uint8_t* const* w, int blocks, size_t stride,
                                  const int8_t* const* q, int32_t (&raw)[kRows][kTokens]) {
  constexpr int BE = 64 * Groups<K>();
  __m512i acc[kRows][T];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_si512();
  for (int b = 0; b < blocks; ++b) {
    __m512i p[kRows];
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) p[r] = _mm512_loadu_si512(w[r] + stride * b);
    const size_t qoff = static_cast<size_t>(b) * BE;
    TileGroup<K, 0, T>(p, q, qoff, acc);
    if constexpr (Groups<K>() > 1) TileGroup<K, 1, T>(p, q, qoff, acc);
    if constexpr (Groups<K>() > 2) {
      TileGroup<K, 2, T>(p, q, qoff, acc);
      TileGroup<K, 3, T>(p, q, qoff, acc);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) raw[r][t] = _mm512_reduce_add_epi32(acc[r][t]);
}

// Per 128-bit block: [sum a, sum b, sum c, sum d] over that block's four lanes of each input.
HWY_INLINE __m512i Hadd4(__m512i a, __m512i b, __m512i c, __m512i d) {
  const __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
  const __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
}

// Prefill, 4 rows x 4 tokens: as Tile<K, 4>, but the 16 sums come back in one vector, lane 4t + r
// (a transposed reduction: ~45 shuffles and adds instead of 16 horizontal sums of ~8 each; rows of
// 1536 inputs are only 6-12 blocks long, so the reduction was a large part of a call). With pf set
// it also prefetches, per block read, the same block of the rows pf[0..3] (rows further on).
template <WeightKind K>
GEMMA_VNNI HWY_NOINLINE __m512i Tile44(const uint8_t* const* w, int blocks, size_t stride,
                                       const int8_t* const* q, const uint8_t* const* pf) {
  constexpr int BE = 64 * Groups<K>();
  __m512i acc[kRows][kTokens];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 16
    for (int t = 0; t < kTokens; ++t) acc[r][t] = _mm512_setzero_si512();
  for (int b = 0; b < blocks; ++b) {
    __m512i p[kRows];
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) p[r] = _mm512_loadu_si512(w[r] + stride * b);
    if (pf) {
#pragma GCC unroll 16
      for (int r = 0; r < kRows; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(pf[r] + stride * b), _MM_HINT_T0);
    }
    const size_t qoff = static_cast<size_t>(b) * BE;
    TileGroup<K, 0, kTokens>(p, q, qoff, acc);
    if constexpr (Groups<K>() > 1) TileGroup<K, 1, kTokens>(p, q, qoff, acc);
    if constexpr (Groups<K>() > 2) {
      TileGroup<K, 2, kTokens>(p, q, qoff, acc);
      TileGroup<K, 3, kTokens>(p, q, qoff, acc);
    }
  }
  __m512i v[kTokens];
#pragma GCC unroll 16
  for (int t = 0; t < kTokens; ++t) v[t] = Hadd4(acc[0][t], acc[1][t], acc[2][t], acc[3][t]);
  const __m512i v01 = _mm512_add_epi32(_mm512_shuffle_i32x4(v[0], v[1], 0x44),
                                       _mm512_shuffle_i32x4(v[0], v[1], 0xEE));
  const __m512i v23 = _mm512_add_epi32(_mm512_shuffle_i32x4(v[2], v[3], 0x44),
                                       _mm512_shuffle_i32x4(v[2], v[3], 0xEE));
  return _mm512_add_epi32(_mm512_shuffle_i32x4(v01, v23, 0x88),
                          _mm512_shuffle_i32x4(v01, v23, 0xDD));
}

// Group g of packed bytes masked in place: its codes times 4^g (int2) or 16^g (int4).
template <WeightKind K, int G>
HWY_INLINE __m512i MaskInPlace(__m512i p) {
  if constexpr (K == WeightKind::kQ8) {
    return _mm512_xor_si512(p, _mm512_set1_epi8(static_cast<char>(0x80)));
  } else if constexpr (K == WeightKind::kQ4) {
    return _mm512_and_si512(p, _mm512_set1_epi8(static_cast<char>(0x0F << (4 * G))));
  } else {
    return _mm512_and_si512(p, _mm512_set1_epi8(static_cast<char>(0x03 << (2 * G))));
  }
}

// Decode (one token): an accumulator per (row, group), so no dpbusd waits on another's result, and
// the codes are only masked, not shifted: group g accumulates (code << bits*g) * q, a multiple of
// 2^(bits*g) that an exact arithmetic shift brings back at the end (|sum| < 2^31: at most 2^7 x 2^7
// x 2^14 for the widest rows).
template <WeightKind K>
GEMMA_VNNI HWY_NOINLINE void Tile1(const uint8_t* const* w, int blocks, size_t stride,
                                   const int8_t* q, int32_t (&raw)[kRows][kTokens], size_t ahead) {
  constexpr int G = Groups<K>();
  constexpr int BE = 64 * G;
  constexpr int kShift = K == WeightKind::kQ4 ? 4 : 2;
  __m512i acc[kRows][G];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_si512();
  for (int b = 0; b < blocks; ++b) {
    __m512i p[kRows];
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) p[r] = _mm512_loadu_si512(w[r] + stride * b);
      // Rows are short (384-3072 bytes) and read four at a time, a pattern the hardware prefetcher
      // follows late: fetch the same blocks of the rows `ahead` bytes further.
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r)
      _mm_prefetch(reinterpret_cast<const char*>(w[r] + stride * b + ahead), _MM_HINT_T0);
    const int8_t* qb = q + static_cast<size_t>(b) * BE;
    const __m512i q0 = _mm512_loadu_si512(qb);
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) Dpbusd(acc[r][0], MaskInPlace<K, 0>(p[r]), q0);
    if constexpr (G > 1) {
      const __m512i q1 = _mm512_loadu_si512(qb + 64);
#pragma GCC unroll 16
      for (int r = 0; r < kRows; ++r) Dpbusd(acc[r][1], MaskInPlace<K, 1>(p[r]), q1);
    }
    if constexpr (G > 2) {
      const __m512i q2 = _mm512_loadu_si512(qb + 128);
      const __m512i q3 = _mm512_loadu_si512(qb + 192);
#pragma GCC unroll 16
      for (int r = 0; r < kRows; ++r) {
        Dpbusd(acc[r][2], MaskInPlace<K, 2>(p[r]), q2);
        Dpbusd(acc[r][3], MaskInPlace<K, 3>(p[r]), q3);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
    __m512i sum = acc[r][0];
#pragma GCC unroll 16
    for (int g = 1; g < G; ++g)
      sum = _mm512_add_epi32(sum, _mm512_srai_epi32(acc[r][g], kShift * g));
    raw[r][0] = _mm512_reduce_add_epi32(sum);
  }
}

#elif GEMMA_WASM_KERNELS
// WebAssembly SIMD (tiles.h), in i16 lanes: lane l of 16 packed bytes holds bytes 2l (low) and
// 2l + 1 (high), so a group's codes of the even bytes are (lane >> bits * g) & mask and of the odd
// bytes (lane >> (8 + bits * g)) & mask, each multiplied by the activations of the same bytes
// (sign-extended into i16 lanes once per block for all rows) with i32x4.dot_i16x8_s, which sums
// into i32 lanes. int8 weights are read as their signed values (offset 0). Exact integer sums.

template <WeightKind K>
constexpr int Offset() {
  return K == WeightKind::kQ2 ? 2 : K == WeightKind::kQ4 ? 8 : 0;
}

// Sign-extended even and odd bytes of 16 activations as i16 lanes.
HWY_INLINE void SplitActs(const int8_t* q, v128_t& even, v128_t& odd) {
  const v128_t v = wasm_v128_load(q);
  even = wasm_i16x8_shr(wasm_i16x8_shl(v, 8), 8);
  odd = wasm_i16x8_shr(v, 8);
}

// Codes of group G of the even (Odd = 0) or odd (Odd = 1) bytes in i16 lanes.
template <WeightKind K, int G, int Odd>
HWY_INLINE v128_t Codes16(v128_t p) {
  constexpr int kBits = K == WeightKind::kQ4 ? 4 : 2;
  constexpr int kShift = 8 * Odd + kBits * G;
  const v128_t s = kShift == 0 ? p : wasm_u16x8_shr(p, kShift);
  if constexpr (kShift + kBits == 16) return s;
  return wasm_v128_and(s, wasm_i16x8_splat((1 << kBits) - 1));
}

template <WeightKind K, int G>
HWY_INLINE void GroupDots(const v128_t (&p)[kRows], const int8_t* qg, v128_t (&acc)[kRows]) {
  v128_t qe, qo;
  SplitActs(qg, qe, qo);
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
    acc[r] = wasm_i32x4_add(acc[r], wasm_i32x4_add(wasm_i32x4_dot_i16x8(Codes16<K, G, 0>(p[r]), qe),
                                                   wasm_i32x4_dot_i16x8(Codes16<K, G, 1>(p[r]), qo)));
  }
}

template <WeightKind K, int T>
HWY_NOINLINE void Tile(const uint8_t* const* w, int blocks, size_t stride, const int8_t* const* q,
                       int32_t (&raw)[kRows][kTokens]) {
  constexpr int BE = 64 * Groups<K>();
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
    v128_t acc[kRows];
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) acc[r] = wasm_i32x4_splat(0);
    for (int b = 0; b < blocks; ++b) {
      const size_t woff = static_cast<size_t>(b) * stride;
      const int8_t* qb = q[t] + static_cast<size_t>(b) * BE;
#pragma GCC unroll 4
      for (int o = 0; o < 64; o += 16) {
        v128_t p[kRows];
#pragma GCC unroll 16
        for (int r = 0; r < kRows; ++r) p[r] = wasm_v128_load(w[r] + woff + o);
        if constexpr (K == WeightKind::kQ8) {
          v128_t qe, qo;
          SplitActs(qb + o, qe, qo);
#pragma GCC unroll 16
          for (int r = 0; r < kRows; ++r) {
            const v128_t we = wasm_i16x8_shr(wasm_i16x8_shl(p[r], 8), 8);
            const v128_t wo = wasm_i16x8_shr(p[r], 8);
            acc[r] = wasm_i32x4_add(acc[r], wasm_i32x4_add(wasm_i32x4_dot_i16x8(we, qe),
                                                           wasm_i32x4_dot_i16x8(wo, qo)));
          }
        } else {
          GroupDots<K, 0>(p, qb + o, acc);
          if constexpr (Groups<K>() > 1) GroupDots<K, 1>(p, qb + 64 + o, acc);
          if constexpr (Groups<K>() > 2) {
            GroupDots<K, 2>(p, qb + 128 + o, acc);
            GroupDots<K, 3>(p, qb + 192 + o, acc);
          }
        }
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      raw[r][t] = wasm_i32x4_extract_lane(acc[r], 0) + wasm_i32x4_extract_lane(acc[r], 1) +
                  wasm_i32x4_extract_lane(acc[r], 2) + wasm_i32x4_extract_lane(acc[r], 3);
    }
  }
}

#else  // portable path: widen to i16, pairwise multiply-add into i32.

template <WeightKind K>
constexpr int Offset() {
  return K == WeightKind::kQ2 ? 2 : K == WeightKind::kQ4 ? 8 : 0;
}

using D16 = hn::ScalableTag<int16_t>;
using D32 = hn::RepartitionToWide<D16>;
using V16 = hn::Vec<D16>;
using V32 = hn::Vec<D32>;

template <WeightKind K>
HWY_INLINE V16 LoadPacked(const uint8_t* p) {
  const D16 d16;
  if constexpr (K == WeightKind::kQ8) {
    const hn::Rebind<int8_t, D16> di8;
    return hn::PromoteTo(d16, hn::LoadU(di8, reinterpret_cast<const int8_t*>(p)));
  } else {
    const hn::Rebind<uint8_t, D16> du8;
    return hn::BitCast(d16, hn::PromoteTo(hn::Rebind<uint16_t, D16>(), hn::LoadU(du8, p)));
  }
}

template <WeightKind K, int G>
HWY_INLINE V16 Unpack(V16 p) {
  const D16 d16;
  if constexpr (K == WeightKind::kQ8) {
    return p;
  } else if constexpr (K == WeightKind::kQ4) {
    return G == 0 ? hn::And(p, hn::Set(d16, 15)) : hn::ShiftRight<4>(p);
  } else {
    return hn::And(hn::ShiftRight<2 * G>(p), hn::Set(d16, 3));
  }
}

template <WeightKind K, int G, int T>
HWY_INLINE void TileGroup(const V16* p, const int8_t* const* q, size_t qoff, V32 (&acc)[kRows][T],
                          V32 (&acc2)[kRows][T]) {
  const D16 d16;
  const D32 d32;
  const hn::Rebind<int8_t, D16> di8;
  V16 u[kRows];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) u[r] = Unpack<K, G>(p[r]);
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
    const V16 qv = hn::PromoteTo(d16, hn::LoadU(di8, q[t] + qoff + 64 * G));
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r)
      acc[r][t] = hn::ReorderWidenMulAccumulate(d32, u[r], qv, acc[r][t], acc2[r][t]);
  }
}

template <WeightKind K, int T>
HWY_NOINLINE void Tile(const uint8_t* const* w, int blocks, size_t stride, const int8_t* const* q,
                       int32_t (&raw)[kRows][kTokens]) {
  constexpr int BE = 64 * Groups<K>();
  const D16 d16;
  const D32 d32;
  const int N = static_cast<int>(hn::Lanes(d16));
  V32 acc[kRows][T], acc2[kRows][T];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      acc[r][t] = hn::Zero(d32);
      acc2[r][t] = hn::Zero(d32);
    }
  }
  for (int b = 0; b < blocks; ++b) {
    for (int o = 0; o < 64; o += N) {
      V16 p[kRows];
#pragma GCC unroll 16
      for (int r = 0; r < kRows; ++r) p[r] = LoadPacked<K>(w[r] + stride * b + o);
      const size_t qoff = static_cast<size_t>(b) * BE + o;
      TileGroup<K, 0, T>(p, q, qoff, acc, acc2);
      if constexpr (Groups<K>() > 1) TileGroup<K, 1, T>(p, q, qoff, acc, acc2);
      if constexpr (Groups<K>() > 2) {
        TileGroup<K, 2, T>(p, q, qoff, acc, acc2);
        TileGroup<K, 3, T>(p, q, qoff, acc, acc2);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      raw[r][t] = hn::GetLane(hn::SumOfLanes(d32, hn::Add(acc[r][t], acc2[r][t])));
    }
  }
}

#endif

// Position of element j (within its block) in the permuted activation block.
template <WeightKind K>
HWY_INLINE int PermInBlock(int j) {
  if constexpr (K == WeightKind::kQ4) return (j & 1) * 64 + (j >> 1);
  if constexpr (K == WeightKind::kQ2) return (j & 3) * 64 + (j >> 2);
  return j;
}

// sum over elements [from, cols) of (v + offset) * q, from the packed row (scalar tail).
template <WeightKind K>
int32_t TailDot(const uint8_t* row, int from, int cols, const int8_t* q) {
  constexpr int BE = 64 * Groups<K>();
  int32_t s = 0;
  for (int i = from; i < cols; ++i) {
    int v;
    if constexpr (K == WeightKind::kQ8) {
      v = static_cast<int8_t>(row[i]);
    } else if constexpr (K == WeightKind::kQ4) {
      v = ((i & 1) ? (row[i >> 1] >> 4) : (row[i >> 1] & 0xF)) - 8;
    } else {
      v = ((row[i >> 2] >> (2 * (i & 3))) & 3) - 2;
    }
    s += (v + Offset<K>()) * q[(i / BE) * BE + PermInBlock<K>(i % BE)];
  }
  return s;
}

// y[i] = srq_out(f32(f64(dot[i]) * in_scale * f64(row_scale[i]))) for i in [0, count): the
// reference epilogue, vectorized (same IEEE operations in the same order).
void Epilogue(const int32_t* dot, const float* row_scale, double in_scale, float out_scale,
              int count, float* y) {
  const hn::ScalableTag<double> d64;
  const hn::Rebind<float, decltype(d64)> df;
  const hn::Rebind<int32_t, decltype(d64)> di;
  const int N = static_cast<int>(hn::Lanes(d64));
  const auto vin = hn::Set(d64, in_scale);
  const auto vout = hn::Set(df, out_scale);
  const auto lo = hn::Set(df, -128.0f), hi = hn::Set(df, 127.0f);
  int i = 0;
#if GEMMA_WASM_KERNELS
  // The same operations four lanes at a time; f32x4.nearest rounds half to even as nearbyint.
  const v128_t win = wasm_f64x2_splat(in_scale);
  const v128_t wout = wasm_f32x4_splat(out_scale);
  const v128_t wlo = wasm_f32x4_splat(-128.0f), whi = wasm_f32x4_splat(127.0f);
  for (; i + 4 <= count; i += 4) {
    const v128_t di = wasm_v128_load(dot + i), rs = wasm_v128_load(row_scale + i);
    const v128_t p0 = wasm_f64x2_mul(wasm_f64x2_mul(wasm_f64x2_convert_low_i32x4(di), win),
                                     wasm_f64x2_promote_low_f32x4(rs));
    const v128_t p1 = wasm_f64x2_mul(
        wasm_f64x2_mul(wasm_f64x2_convert_low_i32x4(wasm_i64x2_shuffle(di, di, 1, 1)), win),
        wasm_f64x2_promote_low_f32x4(wasm_i64x2_shuffle(rs, rs, 1, 1)));
    v128_t v = wasm_i64x2_shuffle(wasm_f32x4_demote_f64x2_zero(p0), wasm_f32x4_demote_f64x2_zero(p1), 0, 2);
    if (out_scale > 0) {
      v = wasm_f32x4_mul(
          wasm_f32x4_min(whi, wasm_f32x4_max(wlo, wasm_f32x4_nearest(wasm_f32x4_div(v, wout)))), wout);
    }
    wasm_v128_store(y + i, v);
  }
#endif
  for (; i + N <= count; i += N) {
    const auto prod = hn::Mul(hn::Mul(hn::PromoteTo(d64, hn::LoadU(di, dot + i)), vin),
                              hn::PromoteTo(d64, hn::LoadU(df, row_scale + i)));
    auto v = hn::DemoteTo(df, prod);
    if (out_scale > 0) {
      // CopySign keeps nearbyint's -0 for small negatives (some targets' Round returns +0).
      const auto z = hn::Div(v, vout);
      v = hn::Mul(hn::Min(hi, hn::Max(lo, hn::CopySign(hn::Round(z), z))), vout);
    }
    hn::StoreU(v, df, y + i);
  }
  for (; i < count; ++i) {
    float out = static_cast<float>(static_cast<double>(dot[i]) * in_scale * row_scale[i]);
    if (out_scale > 0) out = ref::Srq(out, out_scale);
    y[i] = out;
  }
}

// The epilogue's row scales of rows [r0, r1), fetched while a run of rows streams: a separate
// array, read once per run, whose misses showed as most of the epilogue's time in profiles.
HWY_INLINE void PrefetchScales(const Linear& lin, int r0, int r1) {
  for (int r = r0; r < r1; r += 16) hwy::Prefetch(lin.row_scale + r);
}

#if HWY_TARGET == HWY_AVX3_DL
// Batched decode steps (3-4 tokens) over rows whose 4 tokens' activations would fill L1 (more than
// kPanelActs bytes: E2B's int2 down projections, 12,288 inputs, 48 KiB) are read in column panels
// of kPanelActs / 4 bytes of each token's activations: a run of rows panel by panel, the 4 x 4
// tile's integer sums added over the panels (the same integers as whole rows: exact). Every weight
// byte is still read once; the prefetch follows the panel order. (kernel_bench decode, 4 tokens:
// the int2 12,288-input linears streamed at ~10 GB/s against ~17-22 for every other linear.)
constexpr int kPanelActs = 16 * 1024;

// What Tile44's sums, lane 4t + r, carry beyond the dots: the code offset times token t's sum of
// input codes (qsum4[t]).
template <WeightKind K>
HWY_INLINE __m512i TileOffsets(const int32_t* qsum4) {
  return _mm512_mullo_epi32(
      _mm512_permutexvar_epi32(
          _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
          _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qsum4)))),
      _mm512_set1_epi32(Offset<K>()));
}

template <WeightKind K>
bool PanelRows(const Linear& lin, int n, bool tail) {
  return n >= 3 && n <= kTokens && !tail &&
         static_cast<size_t>(kTokens) * (lin.row_bytes / 64) * 64 * Groups<K>() > 2 * kPanelActs;
}

template <WeightKind K>
void QuantRowsPanels(const Linear& lin, const int8_t* q, size_t q_stride, const int32_t* q_sum,
                     int n, int r0, int r1, float* y, size_t y_stride) {
  constexpr int BE = 64 * Groups<K>();
  constexpr int kRun = 64;
  constexpr int kTiles = kRun / kRows;
  const int blocks = static_cast<int>(lin.row_bytes / 64);
  const int pb = kPanelActs / (kTokens * BE);  // blocks per panel
  const int panels = (blocks + pb - 1) / pb;
  // Tiles (4 rows of one panel) between a tile and the one it prefetches: kPrefetchBytes ahead.
  const int ahead = std::max<int>(1, static_cast<int>(kPrefetchBytes / (kRows * 64 * pb)));
  const int8_t* qt[kTokens];
  int32_t qsum4[kTokens];
  for (int j = 0; j < kTokens; ++j) {
    qt[j] = q + std::min(j, n - 1) * q_stride;
    qsum4[j] = q_sum[std::min(j, n - 1)];
  }
  const __m512i offsets = TileOffsets<K>(qsum4);
  const size_t stride = BlockStride(lin);
  auto rows = [&](int run, int tile, int panel, const uint8_t** w) {
    const int end = std::min(r1, run + kRun);
    for (int i = 0; i < kRows; ++i) {
      const int r = std::min(run + tile * kRows + i, end - 1);  // (a short last tile repeats a row)
      w[i] = RowBlocks(lin, r) + stride * static_cast<size_t>(panel) * pb;
    }
  };
  alignas(64) int32_t dots[kTokens][kRun];
  for (int run = r0; run < r1; run += kRun) {
    const int end = std::min(r1, run + kRun);
    const int tiles = (end - run + kRows - 1) / kRows;
    PrefetchScales(lin, end, std::min(r1, end + kRun));
    __m512i acc[kTiles];
    for (int i = 0; i < kTiles; ++i) acc[i] = _mm512_setzero_si512();
    for (int p = 0; p < panels; ++p) {
      const int nb = std::min(pb, blocks - p * pb);
      const int8_t* qp[kTokens];
      for (int j = 0; j < kTokens; ++j) qp[j] = qt[j] + static_cast<size_t>(p) * pb * BE;
      for (int i = 0; i < tiles; ++i) {
        const uint8_t* w[kRows];
        rows(run, i, p, w);
        // The tile `ahead` further in panel order: this panel's rows below, then the next panel's
        // first rows, then the next run's.
        int ti = i + ahead, tp = p, trun = run;
        if (ti >= tiles) {
          ti -= tiles;
          if (++tp == panels) {
            tp = 0;
            trun = end;
          }
        }
        const uint8_t* pf[kRows];
        if (trun < r1)
          rows(trun, std::min(ti, (std::min(r1, trun + kRun) - trun - 1) / kRows), tp, pf);
        acc[i] = _mm512_add_epi32(acc[i], Tile44<K>(w, nb, stride, qp, trun < r1 ? pf : nullptr));
      }
    }
    for (int i = 0; i < tiles; ++i) {
      alignas(64) int32_t d[kRows * kTokens];  // lane 4t + r
      _mm512_store_si512(d, _mm512_sub_epi32(acc[i], offsets));
      for (int t = 0; t < kTokens; ++t)
        for (int r = 0; r < kRows && i * kRows + r < end - run; ++r)
          dots[t][i * kRows + r] = d[t * kRows + r];
    }
    for (int t = 0; t < n; ++t) {
      Epilogue(dots[t], lin.row_scale + run, lin.in_scale, lin.out_scale, end - run,
               y + t * y_stride + run);
    }
  }
}
#endif

template <WeightKind K>
void QuantRowsK(const Linear& lin, const int8_t* q, size_t q_stride, const int32_t* q_sum, int n,
                int r0, int r1, float* y, size_t y_stride) {
  constexpr int BE = 64 * Groups<K>();
  const int blocks = static_cast<int>(lin.row_bytes / 64);
  const bool tail = blocks * BE < lin.cols;  // (never in an interleaved copy)
  const double in_scale = lin.in_scale;
  const size_t stride = BlockStride(lin);
  if (n <= 2) {
    // Decode: integer dots for a run of rows, then the vectorized epilogue; two tokens (a small
    // batch, a short verification step) each stream the rows this way (kernel_bench, E2B QAT,
    // 2 tokens: head 7.3 ms, int2 gate 0.21 ms; as a padded token tile 5.5 / 0.23 ms).
    for (int t = 1; t < n; ++t)
      QuantRowsK<K>(lin, q + t * q_stride, q_stride, q_sum + t, 1, r0, r1, y + t * y_stride,
                    y_stride);
    [[maybe_unused]] const size_t ahead = PrefetchAhead(kRows * lin.row_bytes);
    constexpr int kRun = 256;
    int32_t dots[kRun];
    for (int run = r0; run < r1; run += kRun) {
      const int end = std::min(r1, run + kRun);
      PrefetchScales(lin, end, std::min(r1, end + kRun));
      for (int r = run; r < end; r += kRows) {
        const int rr = std::min(kRows, end - r);
        const uint8_t* w[kRows];
        for (int i = 0; i < kRows; ++i) w[i] = RowBlocks(lin, r + std::min(i, rr - 1));
        int32_t raw[kRows][kTokens];
#if HWY_TARGET == HWY_AVX3_DL
        Tile1<K>(w, blocks, stride, q, raw, ahead);
#else
        const int8_t* qt[kTokens] = {q};
        Tile<K, 1>(w, blocks, stride, qt, raw);
#endif
        for (int i = 0; i < rr; ++i) {
          int32_t dot = raw[i][0] - Offset<K>() * q_sum[0];
          if (tail) dot += TailDot<K>(w[i], blocks * BE, lin.cols, q);
          dots[r - run + i] = dot;
        }
      }
      Epilogue(dots, lin.row_scale + run, in_scale, lin.out_scale, end - run, y + run);
    }
    return;
  }
#if HWY_TARGET == HWY_AVX3_DL
  if (PanelRows<K>(lin, n, tail))
    return QuantRowsPanels<K>(lin, q, q_stride, q_sum, n, r0, r1, y, y_stride);
#endif
  // Several tokens: runs of rows (their weights stay in L1/L2) times tiles of tokens, integer dots
  // into a buffer, then the vectorized epilogue per token.
  constexpr int kRun = 64;
  int32_t dots[kTokens][kRun];
  [[maybe_unused]] const size_t decode_ahead = PrefetchAhead(kRows * lin.row_bytes);
  // Tokens in blocks whose activations stay in L2 (~256 KiB) while the rows stream past them.
  const int pc = (blocks + (tail ? 1 : 0)) * BE;
  const int tb = std::max(kTokens, (256 * 1024 / std::max(1, pc)) / kTokens * kTokens);
  for (int t0 = 0; t0 < n; t0 += tb) {
    const int t1 = std::min(n, t0 + tb);
    for (int run = r0; run < r1; run += kRun) {
      const int end = std::min(r1, run + kRun);
      if (t0 == 0) PrefetchScales(lin, end, std::min(r1, end + kRun));
      for (int t = t0; t < t1;) {
        // Token tiles of kTokens; 3 left take a tile padded with a repeated token (cheaper than
        // three single-token passes), 1 left the single-token tile.
        const int tt = std::min(kTokens, t1 - t) >= 3 ? std::min(kTokens, t1 - t) : 1;
        const int8_t* qt[kTokens];
        [[maybe_unused]] int32_t qsum4[kTokens];  // (the AVX3_DL tiles)
        for (int j = 0; j < kTokens; ++j) {
          qt[j] = q + (t + std::min(j, tt - 1)) * q_stride;
          qsum4[j] = q_sum[t + std::min(j, tt - 1)];
        }
        for (int r = run; r < end; r += kRows) {
          const int rr = std::min(kRows, end - r);
          const uint8_t* w[kRows];
          for (int i = 0; i < kRows; ++i) w[i] = RowBlocks(lin, r + std::min(i, rr - 1));
#if HWY_TARGET == HWY_AVX3_DL
          if (tt >= 3 && rr == kRows && !tail) {
            // The first token tile fetches rows ahead: a batched decode step (one token tile)
            // at the decode tile's distance; prefill, the next run (later token tiles read this
            // one from cache).
            const size_t ahead = t != t0        ? 0
                                 : n <= kTokens ? decode_ahead
                                 : end < r1     ? static_cast<size_t>(end - run) * lin.row_bytes
                                                : 0;
            const uint8_t* pf[kRows];
            for (int i = 0; i < kRows; ++i) pf[i] = w[i] + ahead;
            const __m512i d = _mm512_sub_epi32(
                Tile44<K>(w, blocks, stride, qt, ahead ? pf : nullptr), TileOffsets<K>(qsum4));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(&dots[0][r - run]),
                             _mm512_castsi512_si128(d));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(&dots[1][r - run]),
                             _mm512_extracti32x4_epi32(d, 1));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(&dots[2][r - run]),
                             _mm512_extracti32x4_epi32(d, 2));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(&dots[3][r - run]),
                             _mm512_extracti32x4_epi32(d, 3));
            continue;
          }
#endif
          int32_t raw[kRows][kTokens];
          if (tt >= 3) {
            Tile<K, kTokens>(w, blocks, stride, qt, raw);
          } else {
#if HWY_TARGET == HWY_AVX3_DL
            // A leftover token: the decode tile (codes masked in place, no shifts) is ~1.7x
            // faster per token than Tile<K, 1> (its prefetch of the same bytes is harmless).
            Tile1<K>(w, blocks, stride, qt[0], raw, 0);
#else
            Tile<K, 1>(w, blocks, stride, qt, raw);
#endif
          }
          for (int i = 0; i < rr; ++i) {
            for (int j = 0; j < tt; ++j) {
              int32_t dot = raw[i][j] - Offset<K>() * q_sum[t + j];
              if (tail) dot += TailDot<K>(w[i], blocks * BE, lin.cols, qt[j]);
              dots[j][r - run + i] = dot;
            }
          }
        }
        for (int j = 0; j < tt; ++j) {
          Epilogue(dots[j], lin.row_scale + run, in_scale, lin.out_scale, end - run,
                   y + (t + j) * y_stride + run);
        }
        t += tt;
      }
    }
  }
}

void QuantLinearRows(const Linear& lin, const int8_t* q, size_t q_stride, const int32_t* q_sum,
                     int n, int r0, int r1, float* y, size_t y_stride) {
  switch (lin.kind) {
    case WeightKind::kQ2:
      return QuantRowsK<WeightKind::kQ2>(lin, q, q_stride, q_sum, n, r0, r1, y, y_stride);
    case WeightKind::kQ4:
      return QuantRowsK<WeightKind::kQ4>(lin, q, q_stride, q_sum, n, r0, r1, y, y_stride);
    case WeightKind::kQ8:
      return QuantRowsK<WeightKind::kQ8>(lin, q, q_stride, q_sum, n, r0, r1, y, y_stride);
    default:
      return;
  }
}

// ---------------------------------------------------------------- activation quantization

#if HWY_TARGET == HWY_AVX3_DL
// QuantizeK for int4/int2 with the block permutation done by byte shuffles (vpermt2b) instead of
// a scalar scatter: a block is quantized in natural order into a 64-byte-aligned buffer (same
// divide, round half to even and clamp as the portable path), then int4 takes its even and odd
// bytes, int2 bytes 4j+k of each 128-byte half.
template <WeightKind K>
HWY_INLINE int32_t QuantizePermuted(const float* x, int cols, float s, int8_t* q) {
  constexpr int G = Groups<K>();
  constexpr int BE = 64 * G;
  const int padded = (cols + BE - 1) / BE * BE;
  alignas(64) int8_t nat[BE];
  alignas(64) uint8_t idx[G][64];
  for (int k = 0; k < G; ++k)
    for (int j = 0; j < 64; ++j) idx[k][j] = static_cast<uint8_t>((G * j + k) & 127);
  const __m512 vs = _mm512_set1_ps(s);
  const __m512 lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
  __m512i vsum = _mm512_setzero_si512();
  for (int blk = 0; blk < padded; blk += BE) {
    for (int j = 0; j < BE; j += 16) {
      const int e = blk + j;
      __m512 v = _mm512_setzero_ps();
      if (e + 16 <= cols) {
        v = _mm512_loadu_ps(x + e);
      } else if (e < cols) {
        v = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << (cols - e)) - 1), x + e);
      }
      const __m512 r = _mm512_min_ps(
          hi,
          _mm512_max_ps(lo, _mm512_roundscale_ps(_mm512_div_ps(v, vs),
                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
      const __m512i iv = _mm512_cvtps_epi32(r);
      vsum = _mm512_add_epi32(vsum, iv);
      _mm_store_si128(reinterpret_cast<__m128i*>(nat + j), _mm512_cvtepi32_epi8(iv));
    }
    if constexpr (K == WeightKind::kQ4) {
      const __m512i a = _mm512_load_si512(nat), b = _mm512_load_si512(nat + 64);
      _mm512_storeu_si512(q + blk, _mm512_permutex2var_epi8(a, _mm512_load_si512(idx[0]), b));
      _mm512_storeu_si512(q + blk + 64, _mm512_permutex2var_epi8(a, _mm512_load_si512(idx[1]), b));
    } else {
      const __m512i v0 = _mm512_load_si512(nat), v1 = _mm512_load_si512(nat + 64);
      const __m512i v2 = _mm512_load_si512(nat + 128), v3 = _mm512_load_si512(nat + 192);
      for (int k = 0; k < 4; ++k) {
        const __m512i ik = _mm512_load_si512(idx[k]);
        const __m512i a = _mm512_permutex2var_epi8(v0, ik, v1);  // bytes 0..31: j = 0..31
        const __m512i b = _mm512_permutex2var_epi8(v2, ik, v3);  // bytes 0..31: j = 32..63
        _mm512_storeu_si512(q + blk + 64 * k, _mm512_inserti64x4(a, _mm512_castsi512_si256(b), 1));
      }
    }
  }
  return _mm512_reduce_add_epi32(vsum);
}
#endif

#if GEMMA_WASM_KERNELS
// Four elements x / s rounded half to even (f32x4.nearest, as nearbyint), clamped, as i32.
HWY_INLINE v128_t QuantizeF32x4(const float* x, v128_t vs) {
  const v128_t r = wasm_f32x4_min(wasm_f32x4_splat(127.0f),
                                  wasm_f32x4_max(wasm_f32x4_splat(-128.0f),
                                                 wasm_f32x4_nearest(wasm_f32x4_div(wasm_v128_load(x), vs))));
  return wasm_i32x4_trunc_sat_f32x4(r);
}

// QuantizeK with the block permutation done by byte shuffles: 64 elements are quantized in natural
// order into four vectors of bytes, then int4 takes their even and odd bytes, int2 bytes 4j + k.
// Whole 64-element chunks only; the rest goes the portable way.
template <WeightKind K>
HWY_INLINE int32_t QuantizeWasm(const float* x, int cols, float s, int8_t* q, int& done) {
  constexpr int G = Groups<K>();
  constexpr int BE = 64 * G;
  const v128_t vs = wasm_f32x4_splat(s);
  v128_t vsum = wasm_i32x4_splat(0);
  int e = 0;
  for (; e + 64 <= cols; e += 64) {
    v128_t b[4];
    for (int c = 0; c < 4; ++c) {
      const v128_t i0 = QuantizeF32x4(x + e + 16 * c, vs), i1 = QuantizeF32x4(x + e + 16 * c + 4, vs);
      const v128_t i2 = QuantizeF32x4(x + e + 16 * c + 8, vs), i3 = QuantizeF32x4(x + e + 16 * c + 12, vs);
      vsum = wasm_i32x4_add(vsum, wasm_i32x4_add(wasm_i32x4_add(i0, i1), wasm_i32x4_add(i2, i3)));
      b[c] = wasm_i8x16_narrow_i16x8(wasm_i16x8_narrow_i32x4(i0, i1), wasm_i16x8_narrow_i32x4(i2, i3));
    }
    const int blk = e / BE * BE, j0 = e % BE;  // this chunk: elements j0 .. j0 + 63 of its block
    int8_t* qb = q + blk;
    if constexpr (K == WeightKind::kQ8) {
      for (int c = 0; c < 4; ++c) wasm_v128_store(qb + j0 + 16 * c, b[c]);
    } else if constexpr (K == WeightKind::kQ4) {
      // Element j goes to (j & 1) * 64 + (j >> 1).
      for (int c = 0; c < 4; c += 2) {
        const int o = (j0 + 16 * c) >> 1;
        wasm_v128_store(qb + o, wasm_i8x16_shuffle(b[c], b[c + 1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18,
                                                   20, 22, 24, 26, 28, 30));
        wasm_v128_store(qb + 64 + o, wasm_i8x16_shuffle(b[c], b[c + 1], 1, 3, 5, 7, 9, 11, 13, 15,
                                                        17, 19, 21, 23, 25, 27, 29, 31));
      }
    } else {
      // Element j goes to (j & 3) * 64 + (j >> 2): 16 bytes per group from the 64.
      const int o = j0 >> 2;
#define GEMMA_Q2_GROUP(k)                                                                          \
  {                                                                                                \
    const v128_t lo = wasm_i8x16_shuffle(b[0], b[1], k, k + 4, k + 8, k + 12, k + 16, k + 20,      \
                                         k + 24, k + 28, 0, 0, 0, 0, 0, 0, 0, 0);                  \
    const v128_t hi = wasm_i8x16_shuffle(b[2], b[3], k, k + 4, k + 8, k + 12, k + 16, k + 20,      \
                                         k + 24, k + 28, 0, 0, 0, 0, 0, 0, 0, 0);                  \
    wasm_v128_store(qb + 64 * k + o, wasm_i64x2_shuffle(lo, hi, 0, 2));                            \
  }
      GEMMA_Q2_GROUP(0) GEMMA_Q2_GROUP(1) GEMMA_Q2_GROUP(2) GEMMA_Q2_GROUP(3)
#undef GEMMA_Q2_GROUP
    }
  }
  done = e;
  return wasm_i32x4_extract_lane(vsum, 0) + wasm_i32x4_extract_lane(vsum, 1) +
         wasm_i32x4_extract_lane(vsum, 2) + wasm_i32x4_extract_lane(vsum, 3);
}
#endif

template <WeightKind K>
int32_t QuantizeK(const float* x, int cols, float s, int8_t* q) {
#if HWY_TARGET == HWY_AVX3_DL
  if constexpr (K != WeightKind::kQ8) return QuantizePermuted<K>(x, cols, s, q);
#endif
#if GEMMA_WASM_KERNELS
  {
    constexpr int BE = 64 * Groups<K>();
    const int padded = (cols + BE - 1) / BE * BE;
    int done = 0;
    int32_t sum = QuantizeWasm<K>(x, cols, s, q, done);
    if (done < padded) {
      // Fewer than 64 elements left: the positions of their block that whole chunks did not
      // write are cleared (the zero padding), then each element is placed.
      const int blk = done / BE * BE;
      for (int j = done - blk; j < BE; ++j) q[blk + PermInBlock<K>(j)] = 0;
      for (int b = blk + BE; b < padded; ++b) q[b] = 0;
      for (int i = done; i < cols; ++i) {
        const int v = ref::QuantizeSrq(x[i], s);
        q[(i / BE) * BE + PermInBlock<K>(i % BE)] = static_cast<int8_t>(v);
        sum += v;
      }
    }
    return sum;
  }
#endif
  constexpr int BE = 64 * Groups<K>();
  const int padded = (cols + BE - 1) / BE * BE;
  std::memset(q, 0, static_cast<size_t>(padded));
  const hn::ScalableTag<float> df;
  const int N = static_cast<int>(hn::Lanes(df));
  const auto vs = hn::Set(df, s);
  const auto lo = hn::Set(df, -128.0f), hi = hn::Set(df, 127.0f);
  HWY_ALIGN float tmp[hn::MaxLanes(df)];
  int32_t sum = 0;
  int i = 0;
  for (; i + N <= cols; i += N) {
    // z / s rounded half to even (Round), clamped: as ref::QuantizeSrq.
    const auto r = hn::Min(hi, hn::Max(lo, hn::Round(hn::Div(hn::LoadU(df, x + i), vs))));
    hn::Store(r, df, tmp);
    for (int l = 0; l < N; ++l) {
      const int e = i + l;
      const int v = static_cast<int>(tmp[l]);
      q[(e / BE) * BE + PermInBlock<K>(e % BE)] = static_cast<int8_t>(v);
      sum += v;
    }
  }
  for (; i < cols; ++i) {
    const int v = ref::QuantizeSrq(x[i], s);
    q[(i / BE) * BE + PermInBlock<K>(i % BE)] = static_cast<int8_t>(v);
    sum += v;
  }
  return sum;
}

int32_t QuantizeActs(WeightKind kind, const float* x, int cols, float s, int8_t* q) {
  switch (kind) {
    case WeightKind::kQ2:
      return QuantizeK<WeightKind::kQ2>(x, cols, s, q);
    case WeightKind::kQ4:
      return QuantizeK<WeightKind::kQ4>(x, cols, s, q);
    default:
      return QuantizeK<WeightKind::kQ8>(x, cols, s, q);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace gemma::fast
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace gemma::fast {

HWY_EXPORT(QuantLinearRows);
HWY_EXPORT(QuantizeActs);

int BlockElems(WeightKind kind) {
  return kind == WeightKind::kQ2 ? 256 : kind == WeightKind::kQ4 ? 128 : 64;
}
int PaddedCols(WeightKind kind, int cols) {
  const int b = BlockElems(kind);
  return (cols + b - 1) / b * b;
}
int CodeOffset(WeightKind kind) {
  return kind == WeightKind::kQ2 ? 2 : kind == WeightKind::kQ4 ? 8 : 128;
}

void QuantFloatLinearRows(const Linear& lin, const float* x, size_t x_stride, int n, int r0, int r1,
                          float* y, size_t y_stride) {
  constexpr int kChunk = 4096;  // decode the row's integers a chunk at a time (multiple of 4)
  int8_t v[kChunk];
  const int bits = WeightKindBits(lin.kind);
  if (lin.interleave != 1) std::abort();  // (the weight copy never interleaves these)
  for (int r = r0; r < r1; ++r) {
    const uint8_t* row = lin.data + static_cast<size_t>(r) * lin.row_bytes;
    const double s = lin.row_scale[r];
    for (int t = 0; t < n; ++t) {
      const float* xt = x + t * x_stride;
      double a = 0;
      for (int c0 = 0; c0 < lin.cols; c0 += kChunk) {
        const int len = std::min(kChunk, lin.cols - c0);
        if (c0 > 0 || t == 0) ref::DecodeRowInt(lin.kind, row + c0 * bits / 8, len, v);
        for (int i = 0; i < len; ++i) a += static_cast<double>(v[i]) * xt[c0 + i];
      }
      y[t * y_stride + r] = static_cast<float>(a * s);
      if (lin.cols > kChunk && t + 1 < n) ref::DecodeRowInt(lin.kind, row, kChunk, v);
    }
    if (lin.out_scale > 0) {
      for (int t = 0; t < n; ++t)
        y[t * y_stride + r] = ref::Srq(y[t * y_stride + r], lin.out_scale);
    }
  }
}

int32_t QuantizeActs(WeightKind kind, const float* x, int cols, float s, int8_t* q) {
  return HWY_DYNAMIC_DISPATCH(QuantizeActs)(kind, x, cols, s, q);
}
void QuantLinearRows(const Linear& lin, const int8_t* q, size_t q_stride, const int32_t* q_sum,
                     int n, int r0, int r1, float* y, size_t y_stride) {
  HWY_DYNAMIC_DISPATCH(QuantLinearRows)(lin, q, q_stride, q_sum, n, r0, r1, y, y_stride);
}

}  // namespace gemma::fast
#endif  // HWY_ONCE
