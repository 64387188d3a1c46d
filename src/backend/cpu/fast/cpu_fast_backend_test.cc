// The fast CPU backend against the reference backend (the oracle) and the transformers goldens.
#include "backend/cpu/fast/cpu_fast_backend.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "backend/backend.h"
#include "gemma/error.h"
#include "golden_util.h"
#include "model/model.h"

// Counts heap allocations (all threads) so the test can assert that decoding allocates nothing.
static std::atomic<long> g_allocations{0};
void* operator new(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace gemma {
namespace {

class FastGolden : public ::testing::TestWithParam<std::string> {};

std::vector<int32_t> FullSequence(const Golden& g, size_t i) {
  std::vector<int32_t> seq = g.prompts[i];
  seq.insert(seq.end(), g.greedy[i].begin(), g.greedy[i].end() - 1);
  return seq;
}

TEST_P(FastGolden, LogitsMatchReferenceBackendAndTransformers) {
  const Golden g = LoadGolden(GetParam());
  auto model = Model::Load(g.dir);
  const int V = model->text().vocab_size;
  for (size_t i = 0; i < g.prompts.size(); ++i) {
    const std::vector<int32_t> seq = FullSequence(g, i);
    ForwardResult want, got;
    CreateCpuReferenceBackend(*model, {.capacity = 1024})
        ->Forward({.tokens = seq, .mode = OutputMode::kLogits, .all_positions = true}, &want);
    CreateCpuFastBackend(*model, {.capacity = 1024}, 2)
        ->Forward({.tokens = seq, .mode = OutputMode::kLogits, .all_positions = true}, &got);
    ASSERT_EQ(got.logits.size(), seq.size() * V);
    int flips = 0;
    for (size_t t = 0; t < seq.size(); ++t) {
      const float* ours = &got.logits[t * V];
      const double e = RelL2(ours, &want.logits[t * V], V);
      if (e > 1e-4) {
        if (IsSrqFlip(*model, ours, &want.logits[t * V], V)) {
          ++flips;
        } else {
          ADD_FAILURE() << GetParam() << " prompt " << i << " position " << t
                        << ": rel L2 vs reference " << e;
        }
      }
      // And against transformers, with the golden test's criterion.
      const float* tf = &g.logits[i][t * V];
      const double et = RelL2(ours, tf, V);
      if (et > 1e-4 && !(t >= kExactPrefix && IsSrqFlip(*model, ours, tf, V))) {
        ADD_FAILURE() << GetParam() << " prompt " << i << " position " << t
                      << ": rel L2 vs transformers " << et;
      }
    }
    RecordProperty("srq_flips_vs_reference_prompt" + std::to_string(i), flips);
  }
}

TEST_P(FastGolden, GreedyDecodeMatchesTransformers) {
  const Golden g = LoadGolden(GetParam());
  auto model = Model::Load(g.dir);
  for (size_t i = 0; i < g.prompts.size(); ++i) {
    auto backend = CreateCpuFastBackend(*model, {.capacity = 1024}, 2);
    EXPECT_EQ(GreedyDecode(*backend, g.prompts[i], g.greedy[i].size()), g.greedy[i])
        << GetParam() << " prompt " << i;
  }
}

TEST_P(FastGolden, ChunkingThreadsAndRepeatRunsAreBitIdentical) {
  const Golden g = LoadGolden(GetParam());
  auto model = Model::Load(g.dir);
  const std::vector<int32_t> seq = FullSequence(g, g.prompts.size() - 1);
  std::vector<float> first;
  for (auto [slack, threads] : {std::pair{0, 2}, {1, 1}, {3, 2}, {0, 3}, {0, 2}}) {
    auto backend = CreateCpuFastBackend(*model, {.capacity = 1024, .slack = slack}, threads);
    ForwardResult r;
    backend->Forward({.tokens = seq, .mode = OutputMode::kLogits, .all_positions = true}, &r);
    if (first.empty()) {
      first = r.logits;
    } else {
      ASSERT_EQ(r.logits.size(), first.size());
      EXPECT_EQ(0, std::memcmp(r.logits.data(), first.data(), first.size() * 4))
          << "slack " << slack << " threads " << threads;
    }
  }
  // Token-by-token decode gives the same logits as one prefill.
  auto backend = CreateCpuFastBackend(*model, {.capacity = 1024}, 2);
  const int V = model->text().vocab_size;
  for (size_t t = 0; t < seq.size(); ++t) {
    ForwardResult r;
    backend->Forward({.tokens = std::span<const int32_t>(&seq[t], 1), .mode = OutputMode::kLogits},
                     &r);
    ASSERT_EQ(0, std::memcmp(r.logits.data(), &first[t * V], V * 4)) << "position " << t;
  }
  // A prefill that returns only the last position's logits (the other positions stop before the
  // trailing cache-sharing layers; in chunks of 3, the earlier chunks skip them entirely), then a
  // decode step: the same logits as the all-positions run.
  for (int slack : {0, 3}) {
    auto b = CreateCpuFastBackend(*model, {.capacity = 1024, .slack = slack}, 2);
    const size_t n = seq.size() - 1;
    ForwardResult r;
    b->Forward({.tokens = std::span<const int32_t>(seq.data(), n), .mode = OutputMode::kLogits},
               &r);
    ASSERT_EQ(0, std::memcmp(r.logits.data(), &first[(n - 1) * V], V * 4)) << "slack " << slack;
    b->Forward({.tokens = std::span<const int32_t>(&seq[n], 1), .mode = OutputMode::kLogits}, &r);
    ASSERT_EQ(0, std::memcmp(r.logits.data(), &first[n * V], V * 4)) << "slack " << slack;
  }
}

TEST_P(FastGolden, ArgmaxSelectAndTruncateMatchReference) {
  const Golden g = LoadGolden(GetParam());
  auto model = Model::Load(g.dir);
  const int V = model->text().vocab_size;
  const std::vector<int32_t> seq = FullSequence(g, 0);
  auto ref = CreateCpuReferenceBackend(*model, {.capacity = 64, .slack = 4});
  auto fast = CreateCpuFastBackend(*model, {.capacity = 64, .slack = 4}, 2);
  std::vector<uint64_t> allowed((V + 63) / 64, 0);
  for (int v = 3; v < V; v += 7) allowed[v >> 6] |= uint64_t{1} << (v & 63);
  ForwardResult a, b;
  ref->Forward({.tokens = seq, .mode = OutputMode::kArgmax, .all_positions = true}, &a);
  fast->Forward({.tokens = seq, .mode = OutputMode::kArgmax, .all_positions = true}, &b);
  EXPECT_EQ(a.ids, b.ids);
  for (int n : {static_cast<int>(seq.size()) - 2, 1}) {
    EXPECT_EQ(ref->Truncate(n), fast->Truncate(n)) << n;
    EXPECT_EQ(ref->cached(), fast->cached());
  }
  ref->Reset();
  fast->Reset();
  ref->Forward({.tokens = seq, .mode = OutputMode::kSelect, .allowed = &allowed}, &a);
  fast->Forward({.tokens = seq, .mode = OutputMode::kSelect, .allowed = &allowed}, &b);
  EXPECT_EQ(a.ids, b.ids);
  ASSERT_EQ(b.logprobs.size(), 1u);
  EXPECT_EQ(a.logprobs[0], b.logprobs[0]);  // same f64 sum in the same order
  const std::vector<int32_t> too_long(64, 1);
  EXPECT_THROW(fast->Forward({.tokens = too_long}, &b), Error);
  EXPECT_EQ(fast->cached(), static_cast<int>(seq.size()));
  EXPECT_GT(fast->resident_bytes(), 0u);
}

TEST(CpuFast, DecodeStepsDoNotAllocate) {
  const Golden g = LoadGolden("tiny_qat");
  auto model = Model::Load(g.dir);
  auto backend = CreateCpuFastBackend(*model, {.capacity = 64}, 2);
  ForwardResult r;
  backend->Forward({.tokens = g.prompts[0], .mode = OutputMode::kArgmax}, &r);
  int32_t next = r.ids.back();
  for (int i = 0; i < 3; ++i) {  // warm-up: buffers reach their decode sizes
    backend->Forward({.tokens = std::span<const int32_t>(&next, 1)}, &r);
    next = r.ids.back();
  }
  const long before = g_allocations.load();
  for (int i = 0; i < 20; ++i) {
    backend->Forward({.tokens = std::span<const int32_t>(&next, 1)}, &r);
    next = r.ids.back();
  }
  EXPECT_EQ(g_allocations.load() - before, 0);
}

INSTANTIATE_TEST_SUITE_P(Goldens, FastGolden, ::testing::ValuesIn(Fixtures()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace gemma
