// Kernels against the reference ops: quantized linears must be bit-identical to
// ref::LinearForward (exact integer accumulation, same epilogue), dense ones equal to f32 rounding.
#include "backend/cpu/fast/fast_ops.h"

#include <gtest/gtest.h>

#include <atomic>

#include "backend/cpu/fast/weight_copy.h"
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/reference_ops.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "hwy/targets.h"

namespace gemma {
namespace {

struct TestLinear {
  Linear lin;
  std::vector<uint8_t> data;
  std::vector<float> scales;
};

TestLinear MakeLinear(WeightKind kind, int rows, int cols, float in_scale, float out_scale,
                      uint32_t seed) {
  std::mt19937 rng(seed);
  TestLinear t;
  Linear& l = t.lin;
  l.name = "test";
  l.kind = kind;
  l.rows = rows;
  l.cols = cols;
  l.in_scale = in_scale;
  l.out_scale = out_scale;
  switch (kind) {
    case WeightKind::kQ2:
      l.row_bytes = (cols + 3) / 4;
      break;
    case WeightKind::kQ4:
      l.row_bytes = (cols + 1) / 2;
      break;
    case WeightKind::kQ8:
      l.row_bytes = cols;
      break;
    case WeightKind::kF32:
      l.row_bytes = 4 * cols;
      break;
    default:
      l.row_bytes = 2 * cols;
  }
  t.data.resize(l.row_bytes * rows);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  if (IsQuantized(kind)) {
    for (uint8_t& b : t.data) b = static_cast<uint8_t>(rng());
    t.scales.resize(rows);
    for (float& s : t.scales) s = 0.01f + 0.02f * (rng() % 1000) / 1000.0f;
    l.row_scale = t.scales.data();
  } else {
    for (int i = 0; i < rows * cols; ++i) {
      const float f = nd(rng);
      if (kind == WeightKind::kF32) {
        std::memcpy(&t.data[4 * i], &f, 4);
      } else {
        const uint16_t h = kind == WeightKind::kBF16 ? F32ToBf16(f) : F32ToF16(f);
        std::memcpy(&t.data[2 * i], &h, 2);
      }
    }
  }
  l.data = t.data.data();
  return t;
}

std::vector<float> RandomActs(int n, int cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n) * cols);
  for (float& v : x) v = nd(rng);
  // A few exact rounding ties and values beyond the clamp range.
  if (x.size() > 4) {
    x[0] = 0.05f * 2.5f;
    x[1] = -0.05f * 3.5f;
    x[2] = 100.0f;
    x[3] = -100.0f;
  }
  return x;
}

std::vector<float> FastLinear(const Linear& lin, const std::vector<float>& x, int n) {
  std::vector<float> y(static_cast<size_t>(n) * lin.rows);
  if (IsQuantized(lin.kind) && !(lin.in_scale > 0)) {
    fast::QuantFloatLinearRows(lin, x.data(), lin.cols, n, 0, lin.rows, y.data(), lin.rows);
  } else if (IsQuantized(lin.kind)) {
    const int pc = fast::PaddedCols(lin.kind, lin.cols);
    std::vector<int8_t> q(static_cast<size_t>(n) * pc);
    std::vector<int32_t> sums(n);
    for (int t = 0; t < n; ++t)
      sums[t] = fast::QuantizeActs(lin.kind, &x[static_cast<size_t>(t) * lin.cols], lin.cols,
                                   lin.in_scale, &q[static_cast<size_t>(t) * pc]);
    // Two row ranges, to exercise partial register tiles at range ends.
    const int mid = lin.rows / 3;
    fast::QuantLinearRows(lin, q.data(), pc, sums.data(), n, 0, mid, y.data(), lin.rows);
    fast::QuantLinearRows(lin, q.data(), pc, sums.data(), n, mid, lin.rows, y.data(), lin.rows);
  } else {
    fast::DenseLinearRows(lin, x.data(), lin.cols, n, 0, lin.rows, y.data(), lin.rows);
  }
  return y;
}

// The same linear in the weight copy's interleaved layout (rows in groups of 4, block by block),
// when the copy would store it so: empty otherwise.
std::vector<float> FastInterleaved(const Linear& lin, const std::vector<float>& x, int n) {
  if (!fast::Interleaves(lin)) return {};
  std::vector<uint8_t> buf(fast::InterleavedBytes(lin));
  return FastLinear(fast::Interleave(lin, buf.data()), x, n);
}

// Runs body once per SIMD target this CPU supports (VNNI and portable kernels alike).
template <class Body>
void ForEachTarget(const Body& body) {
  hwy::SetSupportedTargetsForTest(0);
  const int64_t supported = hwy::SupportedTargets();
  for (int64_t target :
       {HWY_AVX3_DL, HWY_AVX3, HWY_AVX2, HWY_SSE4, HWY_SSSE3, HWY_NEON, HWY_EMU128, HWY_SCALAR}) {
    if (!(supported & target)) continue;
    hwy::SetSupportedTargetsForTest(target);
    if (std::string(fast::TargetName()) != hwy::TargetName(target)) continue;  // not compiled
    SCOPED_TRACE(fast::TargetName());
    body();
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Highway 1.0.3's AVX3_DL code may hold VEX AVX-VNNI instructions (fast_ops.cc): it must not be
// chosen on a CPU without AVX-VNNI (CPUID 7.1 EAX bit 4), or the QAT kernels die with SIGILL.
TEST(FastOps, Avx3DlOnlyWhereAvxVnniIs) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool avx_vnni = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4));
  std::printf("CPU AVX-VNNI: %s; target %s\n", avx_vnni ? "yes" : "no", fast::TargetName());
  if (!avx_vnni) {
    EXPECT_STRNE(fast::TargetName(), "AVX3_DL");
    EXPECT_EQ(hwy::SupportedTargets() & HWY_AVX3_DL, 0);
    // Highway 1.0.3's SupportedTargets() re-chooses among every detected target (disabled ones
    // too) until the next Update: what SetSupportedTargetsForTest(0) does.
    hwy::SetSupportedTargetsForTest(0);
    EXPECT_STRNE(fast::TargetName(), "AVX3_DL");
  }
#else
  GTEST_SKIP() << "x86 only";
#endif
}

TEST(FastOps, QuantizedLinearsAreBitIdenticalToReference) {
  int interleaved = 0;
  ForEachTarget([&] {
    uint32_t seed = 1;
    for (WeightKind kind : {WeightKind::kQ2, WeightKind::kQ4, WeightKind::kQ8}) {
      for (int cols : {16, 64, 96, 130, 256, 300, 1536}) {
        for (int n : {1, 2, 3, 4, 7, 9}) {
          for (auto [in_scale, out_scale] :
               {std::pair{0.05f, 0.0f}, {0.05f, 0.05f}, {0.0f, 0.05f}}) {
            const TestLinear t = MakeLinear(kind, 23, cols, in_scale, out_scale, ++seed);
            const std::vector<float> x = RandomActs(n, cols, ++seed);
            std::vector<float> want(static_cast<size_t>(n) * t.lin.rows);
            ref::LinearForward(t.lin, x.data(), n, want.data());
            const std::vector<float> got = FastLinear(t.lin, x, n);
            for (size_t i = 0; i < want.size(); ++i) {
              uint32_t a, b;
              std::memcpy(&a, &got[i], 4);
              std::memcpy(&b, &want[i], 4);
              ASSERT_EQ(a, b) << WeightKindName(kind) << " cols " << cols << " n " << n << " out "
                              << out_scale << " at " << i << ": " << got[i] << " vs " << want[i];
            }
            // The weight copy's interleaved rows (whole 64-byte blocks, SRQ inputs), 23 rows: a
            // padded last group.
            const std::vector<float> inter = FastInterleaved(t.lin, x, n);
            if (!inter.empty()) {
              ++interleaved;
              ASSERT_EQ(std::memcmp(inter.data(), want.data(), sizeof(float) * want.size()), 0)
                  << "interleaved " << WeightKindName(kind) << " cols " << cols << " n " << n;
            }
          }
        }
      }
    }
  });
  EXPECT_GT(interleaved, 0);
}

// Batched decode steps over wide rows (the AVX3_DL kernels read them in column panels when 3-4
// tokens' activations would fill L1): still the reference's bits, short runs and tiles included.
TEST(FastOps, WideQuantizedRowsForThreeOrFourTokensAreBitIdentical) {
  ForEachTarget([] {
    uint32_t seed = 100;
    for (WeightKind kind : {WeightKind::kQ2, WeightKind::kQ4, WeightKind::kQ8}) {
      for (int cols : {8448, 12288, 12300}) {
        for (int n : {3, 4}) {
          const TestLinear t = MakeLinear(kind, 70, cols, 0.05f, n == 3 ? 0.05f : 0.0f, ++seed);
          const std::vector<float> x = RandomActs(n, cols, ++seed);
          std::vector<float> want(static_cast<size_t>(n) * t.lin.rows);
          ref::LinearForward(t.lin, x.data(), n, want.data());
          const std::vector<float> got = FastLinear(t.lin, x, n);
          ASSERT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * want.size()), 0)
              << WeightKindName(kind) << " cols " << cols << " n " << n;
          const std::vector<float> inter = FastInterleaved(t.lin, x, n);
          ASSERT_EQ(inter.empty(), cols % 256 != 0);
          if (!inter.empty()) {
            ASSERT_EQ(std::memcmp(inter.data(), want.data(), sizeof(float) * want.size()), 0)
                << "interleaved " << WeightKindName(kind) << " cols " << cols << " n " << n;
          }
        }
      }
    }
  });
}

TEST(FastOps, QuantizeMatchesReferenceSrq) {
  const std::vector<float> x = RandomActs(1, 300, 7);
  for (WeightKind kind : {WeightKind::kQ2, WeightKind::kQ4, WeightKind::kQ8}) {
    std::vector<int8_t> q(fast::PaddedCols(kind, 300), 99);
    const int32_t sum = fast::QuantizeActs(kind, x.data(), 300, 0.05f, q.data());
    int32_t want_sum = 0;
    std::vector<int> seen(q.size(), 0);
    const int be = fast::BlockElems(kind);
    for (int i = 0; i < 300; ++i) {
      const int8_t want = ref::QuantizeSrq(x[i], 0.05f);
      want_sum += want;
      const int j = i % be;
      const int perm = kind == WeightKind::kQ4   ? (j & 1) * 64 + (j >> 1)
                       : kind == WeightKind::kQ2 ? (j & 3) * 64 + (j >> 2)
                                                 : j;
      const int at = i / be * be + perm;
      EXPECT_EQ(q[at], want) << i;
      seen[at] = 1;
    }
    for (size_t i = 0; i < q.size(); ++i) {
      if (!seen[i]) {
        EXPECT_EQ(q[i], 0) << "padding " << i;
      }
    }
    EXPECT_EQ(sum, want_sum);
  }
}

TEST(FastOps, DenseLinearsMatchReferenceToF32Rounding) {
  ForEachTarget([] {
    uint32_t seed = 100;
    for (WeightKind kind : {WeightKind::kF32, WeightKind::kBF16, WeightKind::kF16}) {
      for (int cols : {16, 48, 97, 1536}) {
        for (int n : {1, 5}) {
          const TestLinear t = MakeLinear(kind, 13, cols, 0, 0, ++seed);
          const std::vector<float> x = RandomActs(n, cols, ++seed);
          std::vector<float> want(static_cast<size_t>(n) * t.lin.rows);
          ref::LinearForward(t.lin, x.data(), n, want.data());
          const std::vector<float> got = FastLinear(t.lin, x, n);
          for (size_t i = 0; i < want.size(); ++i)
            EXPECT_NEAR(got[i], want[i], 1e-6f * std::fabs(want[i]) + 1e-30f) << i;
        }
      }
    }
  });
}

// The towers' f32 GEMM against the f64 reference within the f32 FMA chain's error bound
// (cols * 2^-24 * sum |w x|), on every target, for shapes that leave partial panels and tiles; a
// row range split anywhere gives the same values bit for bit.
TEST(FastOps, GemmF32MatchesReferenceWithinItsErrorBound) {
  ForEachTarget([] {
    uint32_t seed = 500;
    for (WeightKind kind : {WeightKind::kF32, WeightKind::kBF16, WeightKind::kF16, WeightKind::kQ8,
                            WeightKind::kQ4, WeightKind::kQ2}) {
      for (int cols : {1, 17, 64, 1024}) {
        for (int n : {1, 6, 7, 40}) {
          const int rows = 3 * fast::GemmPanelRows() + 5;
          const TestLinear t = MakeLinear(kind, rows, cols, 0, 0, ++seed);
          const std::vector<float> x = RandomActs(n, cols, ++seed);
          std::vector<float> scratch(fast::GemmScratchFloats(cols));
          std::vector<float> got(static_cast<size_t>(n) * rows, -1.0f), split(got.size(), -2.0f);
          fast::DenseGemmRowsF32(t.lin, x.data(), cols, n, 0, rows, got.data(), rows,
                                 scratch.data());
          const int mid = fast::GemmPanelRows() + 3;
          fast::DenseGemmRowsF32(t.lin, x.data(), cols, n, 0, mid, split.data(), rows,
                                 scratch.data());
          fast::DenseGemmRowsF32(t.lin, x.data(), cols, n, mid, rows, split.data(), rows,
                                 scratch.data());
          std::vector<float> w(cols);
          std::vector<int8_t> codes(cols);
          for (int r = 0; r < rows; ++r) {
            const uint8_t* row = t.lin.data + static_cast<size_t>(r) * t.lin.row_bytes;
            if (IsQuantized(kind)) {  // the sums over the integer codes (no row scale)
              ref::DecodeRowInt(kind, row, cols, codes.data());
              for (int i = 0; i < cols; ++i) w[i] = codes[i];
            }
            for (int i = 0; i < cols && !IsQuantized(kind); ++i) {
              if (kind == WeightKind::kF32) {
                std::memcpy(&w[i], row + 4 * i, 4);
              } else {
                uint16_t h;
                std::memcpy(&h, row + 2 * i, 2);
                w[i] = kind == WeightKind::kBF16 ? Bf16ToF32(h) : F16ToF32(h);
              }
            }
            for (int tk = 0; tk < n; ++tk) {
              double want = 0, mag = 0;
              for (int i = 0; i < cols; ++i) {
                const double p = double(w[i]) * x[static_cast<size_t>(tk) * cols + i];
                want += p;
                mag += std::fabs(p);
              }
              const size_t at = static_cast<size_t>(tk) * rows + r;
              ASSERT_NEAR(got[at], want, cols * std::ldexp(mag, -24) + 1e-30)
                  << "row " << r << " token " << tk << " cols " << cols;
              ASSERT_EQ(got[at], split[at]) << "row " << r << " token " << tk;
            }
          }
        }
      }
    }
  });
}

// The dense towers' f32 softmax and GELU against the reference's (f64 softmax, ref::GeluTanh):
// a few f32 ulps, on every target, with lengths that leave vector tails.
TEST(FastOps, TowerSoftmaxAndGeluMatchTheReference) {
  ForEachTarget([] {
    std::mt19937 rng(9);
    std::normal_distribution<float> nd(0.0f, 4.0f);
    for (int n : {1, 7, 16, 33, 1000}) {
      std::vector<float> x(n), u(n);
      for (int i = 0; i < n; ++i) x[i] = nd(rng), u[i] = nd(rng);
      x[0] = n > 1 ? 60.0f : x[0];  // a dominant logit
      std::vector<float> sm = x;
      fast::SoftmaxF32(sm.data(), n);
      double mx = -1e300, sum = 0;
      for (float v : x) mx = std::max(mx, double(v));
      for (float v : x) sum += std::exp(double(v) - mx);
      for (int i = 0; i < n; ++i) {
        // x - max is rounded to f32 first: exp amplifies its rounding by |x - max|.
        const double want = std::exp(double(x[i]) - mx) / sum;
        const double rel = 1e-6 + std::fabs(x[i] - mx) * std::ldexp(1.0, -23);
        ASSERT_NEAR(sm[i], want, rel * want + 1e-30) << "softmax n " << n << " i " << i;
      }
      std::vector<float> g = x;
      fast::GeluTanhMulF32(g.data(), u.data(), n);
      for (int i = 0; i < n; ++i) {
        const float want = ref::GeluTanh(x[i]) * u[i];
        ASSERT_NEAR(g[i], want, 2e-6f * std::fabs(x[i] * u[i]) + 1e-30f) << "gelu " << x[i];
      }
    }
  });
}

TEST(FastOps, ReportsTargets) {
  std::string names;
  ForEachTarget([&] { names += std::string(fast::TargetName()) + " "; });
  RecordProperty("targets", names);
  EXPECT_FALSE(names.empty());
}

TEST(FastOps, RmsNormMatchesReference) {
  const std::vector<float> x = RandomActs(1, 1537, 3);
  std::vector<float> w(1537);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5f + 0.001f * i;
  std::vector<float> want(1537), got(1537);
  ref::RmsNorm(x.data(), 1537, w, 1e-6f, want.data());
  fast::RmsNorm(x.data(), 1537, w.data(), 1e-6f, got.data());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4));
  ref::RmsNorm(x.data(), 1537, {}, 1e-6f, want.data());
  fast::RmsNorm(x.data(), 1537, nullptr, 1e-6f, got.data());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4));
}

// SRQ-output table lookups (GELU x up, softcap + argmax) equal the scalar Level lookup on every
// target, including values exactly halfway between levels and the clamped ends.
TEST(FastOps, TableLookupsMatchScalar) {
  ForEachTarget([] {
    const float s = 0.0371f;
    std::vector<float> table(256);
    for (int k = 0; k < 256; ++k) table[k] = std::tanh((k - 128) * s * 0.7f) * (1.0f + k % 5);
    const int n = 1037;
    std::vector<float> x(n), m(n);
    for (int i = 0; i < n; ++i) {
      const int k = (i * 37) % 300 - 150;  // beyond [-128, 127] too (clamped)
      x[i] = (i % 3 == 0 ? k + 0.5f : k) * s;
      m[i] = 0.25f + 0.001f * i;
    }
    auto level = [&](float v) {
      const float r = v / s;
      return std::clamp(static_cast<int>(r + (r >= 0 ? 0.5f : -0.5f)), -128, 127) + 128;
    };
    std::vector<float> want(n), got(n);
    for (int i = 0; i < n; ++i) want[i] = table[level(x[i])] * m[i];
    fast::TableLookupMul(x.data(), n, s, table.data(), m.data(), got.data());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), n * 4));
    int best = 0;
    for (int i = 0; i < n; ++i) {
      want[i] = table[level(x[i])];
      if (want[i] > want[best]) best = i;
    }
    got = x;
    EXPECT_EQ(best, fast::TableLookupArgmax(got.data(), n, s, table.data()));
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), n * 4));
  });
}

TEST(FastOps, Dot) {
  const std::vector<float> a = RandomActs(1, 67, 4), b = RandomActs(1, 67, 5);
  double want = 0;
  for (int i = 0; i < 67; ++i) want += static_cast<double>(a[i]) * b[i];
  EXPECT_NEAR(fast::DotF64(a.data(), b.data(), 67), want, 1e-13 * std::fabs(want));
  EXPECT_NE(std::string(fast::TargetName()), "");
}

TEST(FastOps, GroupedAttentionKernelsMatchScalarF64) {
  for (int hd : {24, 64, 256}) {
    for (int nq : {1, 3, 8}) {
      const int nk = 11, stride = hd + 5;
      const std::vector<float> k = RandomActs(1, nk * stride, hd + nq),
                               v = RandomActs(1, nk * stride, hd * nq);
      const std::vector<float> qf = RandomActs(1, nq * hd, 9);
      std::vector<double> q(qf.begin(), qf.end());
      const size_t ld = 16;
      std::vector<double> dots(nq * ld, -1.0);
      fast::QueryKeyDotsF64(q.data(), nq, hd, k.data(), stride, nk, dots.data(), ld);
      std::vector<double> acc(nq * hd, 0.5), want_acc(nq * hd, 0.5);
      fast::WeightedValuesF64(dots.data(), ld, nq, v.data(), stride, nk, hd, acc.data());
      for (int h = 0; h < nq; ++h) {
        for (int j = 0; j < nk; ++j) {
          double want = 0;
          for (int i = 0; i < hd; ++i) want += q[h * hd + i] * k[j * stride + i];
          EXPECT_NEAR(dots[h * ld + j], want, 1e-12 * (1 + std::fabs(want))) << hd << " " << nq;
          for (int i = 0; i < hd; ++i) want_acc[h * hd + i] += dots[h * ld + j] * v[j * stride + i];
        }
      }
      for (size_t i = 0; i < acc.size(); ++i)
        EXPECT_NEAR(acc[i], want_acc[i], 1e-12 * (1 + std::fabs(want_acc[i]))) << hd << " " << nq;
    }
  }
}

// Against softmax with the C library's exp in long double, rows of every length around the vector
// width (the body and the padded tail): each value within a few ulp, the values summing to 1, and
// exp's underflow to 0 for a score far below the row's maximum.
TEST(FastOps, SoftmaxF64MatchesTheLibraryExp) {
  std::mt19937 rng(3);
  std::normal_distribution<double> dist(0.0, 8.0);
  for (int n : {1, 2, 3, 7, 8, 9, 16, 31, 100, 1027}) {
    std::vector<double> x(n);
    for (double& v : x) v = dist(rng);
    if (n > 4) x[2] = x[0] - 800;  // exp underflows
    std::vector<double> got = x;
    fast::SoftmaxF64(got.data(), n);
    const double mx = *std::max_element(x.begin(), x.end());
    long double sum = 0;
    for (double v : x) sum += std::exp(static_cast<long double>(v - mx));
    double total = 0;
    for (int j = 0; j < n; ++j) {
      const double want = static_cast<double>(std::exp(static_cast<long double>(x[j] - mx)) / sum);
      EXPECT_NEAR(got[j], want, 8e-16 * want) << n << " " << j;
      total += got[j];
    }
    EXPECT_NEAR(total, 1.0, 1e-14) << n;
    if (n > 4) EXPECT_EQ(got[2], 0.0);
  }
}

TEST(ThreadPool, RunsEveryTaskOnceAcrossThreads) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int rep = 0; rep < 5000; ++rep) {  // many short jobs: races show up as lost tasks
      const int tasks = 1 + rep % 37;
      std::vector<std::atomic<int>> hits(tasks);
      std::atomic<int> bad_thread{0};
      pool.Run(tasks, [&](int task, int thread) {
        hits[task].fetch_add(1);
        if (thread < 0 || thread >= pool.size()) bad_thread.fetch_add(1);
      });
      for (int t = 0; t < tasks; ++t) ASSERT_EQ(hits[t].load(), 1);
      ASSERT_EQ(bad_thread.load(), 0);
    }
  }
}

}  // namespace
}  // namespace gemma
