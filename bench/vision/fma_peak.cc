// The machine's f32 multiply-add peak, measured: independent FMA chains in registers on the best
// SIMD target Highway finds (dynamic dispatch), on `threads` threads at once. The towers'
// GFLOP/s are reported against it (vision_bench --peak).
#include "fma_peak.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "core/timer.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "fma_peak.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace gemma::bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// 12 chains: enough to cover FMA latency (4-5 cycles) x 2 pipes; returns FLOPs done.
double FmaChains(int64_t iters, float* sink) {
  const hn::ScalableTag<float> d;
  const auto a = hn::Set(d, 0.999999f), b = hn::Set(d, 1e-7f);
  auto c0 = hn::Set(d, 1.0f), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
  auto c6 = c0, c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0;
  for (int64_t i = 0; i < iters; ++i) {
    c0 = hn::MulAdd(c0, a, b), c1 = hn::MulAdd(c1, a, b), c2 = hn::MulAdd(c2, a, b);
    c3 = hn::MulAdd(c3, a, b), c4 = hn::MulAdd(c4, a, b), c5 = hn::MulAdd(c5, a, b);
    c6 = hn::MulAdd(c6, a, b), c7 = hn::MulAdd(c7, a, b), c8 = hn::MulAdd(c8, a, b);
    c9 = hn::MulAdd(c9, a, b), c10 = hn::MulAdd(c10, a, b), c11 = hn::MulAdd(c11, a, b);
  }
  const auto s = hn::Add(hn::Add(hn::Add(c0, c1), hn::Add(c2, c3)),
                         hn::Add(hn::Add(hn::Add(c4, c5), hn::Add(c6, c7)),
                                 hn::Add(hn::Add(c8, c9), hn::Add(c10, c11))));
  *sink = hn::GetLane(hn::SumOfLanes(d, s));
  return static_cast<double>(iters) * 12 * hn::Lanes(d) * 2;
}

const char* Target() { return hwy::TargetName(HWY_TARGET); }

}  // namespace gemma::bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace gemma::bench {
HWY_EXPORT(FmaChains);
HWY_EXPORT(Target);

FmaPeak MeasureFmaPeak(int threads, double seconds) {
  threads = std::max(1, threads);
  const int64_t iters = 1 << 20;
  float sink = 0;
  HWY_DYNAMIC_DISPATCH(FmaChains)(iters, &sink);  // warm-up (and frequency ramp)
  std::vector<double> flops(threads, 0);
  std::vector<float> sinks(threads, 0);
  Timer t;
  std::vector<std::thread> pool;
  for (int k = 0; k < threads; ++k) {
    pool.emplace_back([&, k] {
      Timer own;
      while (own.Ms() < seconds * 1000) flops[k] += HWY_DYNAMIC_DISPATCH(FmaChains)(iters, &sinks[k]);
    });
  }
  for (auto& th : pool) th.join();
  double total = 0;
  for (double f : flops) total += f;
  return {total / 1e6 / t.Ms(), HWY_DYNAMIC_DISPATCH(Target)()};
}
}  // namespace gemma::bench
#endif
