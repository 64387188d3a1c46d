#include "decode/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <new>
#include <numeric>
#include <set>
#include <vector>

#include "gemma/error.h"

#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

// Counts heap allocations so the steady-state test can assert there are none.
namespace {
std::atomic<long> g_allocations{0};
}  // namespace
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace gemma::decode {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

SamplingOptions Opts() {
  SamplingOptions o;
  o.seed = 1;
  return o;
}

// Ids whose processed logit is finite.
std::vector<int32_t> Survivors(Sampler& s, const std::vector<float>& logits) {
  auto out = s.Process(logits);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] != -kInf) ids.push_back(static_cast<int32_t>(i));
  }
  return ids;
}

std::vector<int32_t> Survivors(const SamplingOptions& o, const std::vector<float>& logits) {
  Sampler s(o);
  return Survivors(s, logits);
}

using Ids = std::vector<int32_t>;

TEST(Sampler, GreedyTakesArgmaxLowestIdOnTies) {
  SamplingOptions o = Opts();
  o.temperature = 0;
  o.top_k = 1;  // ignored by greedy, must not matter
  o.top_p = 0.1;
  Sampler s(o);
  EXPECT_EQ(s.Sample(std::vector<float>{1, 3, 3, 2}).token, 1);
  EXPECT_EQ(s.Sample(std::vector<float>{-kInf, -5, -4, -4}).token, 2);
}

TEST(Sampler, PlainGreedyIsReported) {
  SamplingOptions o = Opts();
  EXPECT_FALSE(Sampler(o).IsPlainGreedy());
  o.temperature = 0;
  o.top_p = 0.5;  // ignored by greedy
  EXPECT_TRUE(Sampler(o).IsPlainGreedy());
  o.presence_penalty = 0.5;
  EXPECT_FALSE(Sampler(o).IsPlainGreedy());
  o.penalty_window = 0;  // penalties see no tokens
  EXPECT_TRUE(Sampler(o).IsPlainGreedy());
  o.logit_bias[3] = 1;
  EXPECT_FALSE(Sampler(o).IsPlainGreedy());
}

TEST(Sampler, GreedyHonoursBiasAndPenalties) {
  SamplingOptions o = Opts();
  o.temperature = 0;
  o.logit_bias[0] = 5.0f;
  EXPECT_EQ(Sampler(o).Sample(std::vector<float>{1, 3, 3, 2}).token, 0);

  SamplingOptions r = Opts();
  r.temperature = 0;
  r.repetition_penalty = 2.0;
  Sampler s(r);
  const int32_t prompt[] = {0};
  s.SetPrompt(prompt);
  EXPECT_EQ(s.Sample(std::vector<float>{2.0f, 1.9f, -1.0f}).token, 1);  // 2.0 / 2 = 1.0 < 1.9
}

TEST(Sampler, RepetitionPenaltyDividesPositiveMultipliesNegativeOncePerToken) {
  SamplingOptions o = Opts();
  o.repetition_penalty = 2.0;
  Sampler s(o);
  const int32_t prompt[] = {0, 2, 2, 2, 3};
  s.SetPrompt(prompt);
  auto out = s.Process(std::vector<float>{3.0f, 1.0f, -1.5f, 0.0f, 7.0f});
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], 1.0f);
  EXPECT_EQ(out[2], -3.0f);  // once, although 2 occurs three times
  EXPECT_EQ(out[3], 0.0f);
  EXPECT_EQ(out[4], 7.0f);
}

TEST(Sampler, FrequencyAndPresencePenaltiesCountOccurrences) {
  SamplingOptions o = Opts();
  o.frequency_penalty = 0.5;
  o.presence_penalty = 0.25;
  Sampler s(o);
  const int32_t prompt[] = {0, 0, 1};
  s.SetPrompt(prompt);
  auto out = s.Process(std::vector<float>{1, 1, 1, 1});
  EXPECT_EQ(out[0], -0.25f);  // 1 - (2 * 0.5 + 0.25)
  EXPECT_EQ(out[1], 0.25f);   // 1 - (1 * 0.5 + 0.25)
  EXPECT_EQ(out[2], 1.0f);
  EXPECT_EQ(out[3], 1.0f);
}

TEST(Sampler, BiasThenRepetitionThenFrequencyInThatOrder) {
  SamplingOptions o = Opts();
  o.logit_bias[0] = 1.0f;
  o.repetition_penalty = 2.0;
  o.frequency_penalty = 1.0;
  Sampler s(o);
  const int32_t prompt[] = {0};
  s.SetPrompt(prompt);
  // (3 + 1) / 2 - 1 = 1
  EXPECT_EQ(s.Process(std::vector<float>{3, 0})[0], 1.0f);
}

TEST(Sampler, PenaltyWindowAndScope) {
  SamplingOptions o = Opts();
  o.presence_penalty = 1.0;
  o.penalty_window = 2;
  Sampler s(o);
  const int32_t prompt[] = {0, 1};
  s.SetPrompt(prompt);
  s.Accept(2);  // window is now {1, 2}
  auto out = s.Process(std::vector<float>{0, 0, 0, 0});
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], -1.0f);
  EXPECT_EQ(out[2], -1.0f);
  s.Accept(2);  // {2, 2}
  s.Accept(3);  // {2, 3}
  out = s.Process(std::vector<float>{0, 0, 0, 0});
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[2], -1.0f);
  EXPECT_EQ(out[3], -1.0f);

  SamplingOptions g = Opts();
  g.presence_penalty = 1.0;
  g.penalty_scope = PenaltyScope::kGeneratedOnly;
  Sampler t(g);
  t.SetPrompt(prompt);
  t.Accept(3);
  out = t.Process(std::vector<float>{0, 0, 0, 0});
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[3], -1.0f);

  SamplingOptions z = Opts();
  z.presence_penalty = 1.0;
  z.penalty_window = 0;
  Sampler u(z);
  u.SetPrompt(prompt);
  out = u.Process(std::vector<float>{0, 0});
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
}

TEST(Sampler, TemperatureDivides) {
  SamplingOptions o = Opts();
  o.temperature = 2.0;
  Sampler s(o);
  auto out = s.Process(std::vector<float>{2, -4, -kInf});
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], -kInf);
}

TEST(Sampler, TopKKeepsEverythingTiedWithTheKth) {
  SamplingOptions o = Opts();
  o.top_k = 2;
  EXPECT_EQ(Survivors(o, {1, 5, 3, 5, 2}), (Ids{1, 3}));
  EXPECT_EQ(Survivors(o, {2, 1, 1, 1, 0}), (Ids{0, 1, 2, 3}));
  o.top_k = 3;
  EXPECT_EQ(Survivors(o, {1, 5, 3, 5, 2}), (Ids{1, 2, 3}));
  o.top_k = 10;  // larger than the vocab: no-op
  EXPECT_EQ(Survivors(o, {1, 5, -kInf}), (Ids{0, 1}));
}

TEST(Sampler, TopPKeepsSmallestHeadReachingP) {
  const std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SamplingOptions o = Opts();
  o.top_p = 0.6;  // 0.5 < 0.6 -> keep the second token too
  EXPECT_EQ(Survivors(o, l), (Ids{0, 1}));
  o.top_p = 0.85;  // 0.8 < 0.85
  EXPECT_EQ(Survivors(o, l), (Ids{0, 1, 2}));
  o.top_p = 0.45;
  EXPECT_EQ(Survivors(o, l), (Ids{0}));
  o.top_p = 0.0;  // min_tokens_to_keep = 1
  EXPECT_EQ(Survivors(o, l), (Ids{0}));
}

TEST(Sampler, TopPTiesKeepTheCountAndPreferLowerIds) {
  SamplingOptions o = Opts();
  o.top_p = 0.3;  // uniform 0.25: ranks 0 (mass before 0) and 1 (0.25 < 0.3)
  EXPECT_EQ(Survivors(o, {0, 0, 0, 0}), (Ids{0, 1}));
  o.top_p = 0.0;
  EXPECT_EQ(Survivors(o, {1, 7, 7, 7}), (Ids{1}));
}

TEST(Sampler, TopPCutOnAGroupOfEqualTokens) {
  // 3484 equal tokens at top_p 0.5: in exact arithmetic rank r is kept iff r / 3484 < 0.5, i.e.
  // 1742 tokens; double rounding may admit one more. Either way the lowest ids.
  SamplingOptions o = Opts();
  o.top_p = 0.5;
  const Ids kept = Survivors(o, std::vector<float>(3484, 1.0f));
  ASSERT_TRUE(kept.size() == 1742 || kept.size() == 1743) << kept.size();
  for (size_t i = 0; i < kept.size(); ++i) EXPECT_EQ(kept[i], static_cast<int32_t>(i));
}

// The documented top-p and typical-p rules written out naively (full sort, sequential sums), to
// check the quickselect implementation on larger random vocabularies.
Ids NaiveTopP(const std::vector<float>& l, double p) {
  std::vector<int32_t> ids(l.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(),
            [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  double z = 0;
  for (float x : l) z += std::exp(static_cast<double>(x) - l[ids[0]]);
  Ids kept;
  double above = 0;
  for (int32_t id : ids) {
    if (!kept.empty() && !(above < p)) break;
    kept.push_back(id);
    above += std::exp(static_cast<double>(l[id]) - l[ids[0]]) / z;
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

Ids NaiveTypical(const std::vector<float>& l, double mass) {
  const double m = *std::max_element(l.begin(), l.end());
  double z = 0;
  for (float x : l) z += std::exp(x - m);
  std::vector<double> p(l.size()), s(l.size());
  double h = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    p[i] = std::exp(l[i] - m) / z;
    h -= p[i] * std::log(p[i]);
  }
  for (size_t i = 0; i < l.size(); ++i) s[i] = std::fabs(-std::log(p[i]) - h);
  std::vector<int32_t> ids(l.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(),
            [&](int32_t a, int32_t b) { return s[a] < s[b] || (s[a] == s[b] && a < b); });
  double cum = 0, cut = s[ids.back()];
  for (int32_t id : ids) {
    cum += p[id];
    if (cum >= mass) {
      cut = s[id];
      break;
    }
  }
  Ids kept;
  for (size_t i = 0; i < l.size(); ++i) {
    if (s[i] <= cut) kept.push_back(static_cast<int32_t>(i));
  }
  return kept;
}

TEST(Sampler, MassFiltersMatchANaiveFullSort) {
  uint64_t x = 99;
  for (int trial = 0; trial < 40; ++trial) {
    const size_t n = 50 + trial * 97;
    std::vector<float> l(n);
    const float scale = 0.5f + static_cast<float>(trial % 5) * 2.0f;  // flat to peaked
    for (auto& v : l) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      v = scale * (static_cast<float>(x >> 40) * 0x1.0p-24f - 0.5f);
    }
    for (double p : {0.1, 0.5, 0.9, 0.99}) {
      SamplingOptions o = Opts();
      o.top_p = p;
      EXPECT_EQ(Survivors(o, l), NaiveTopP(l, p)) << "top_p " << p << " n " << n;
      SamplingOptions t = Opts();
      t.typical_p = p;
      EXPECT_EQ(Survivors(t, l), NaiveTypical(l, p)) << "typical_p " << p << " n " << n;
    }
  }
}

TEST(Sampler, NegInfBiasBansAToken) {
  SamplingOptions o = Opts();
  o.temperature = 0;
  o.logit_bias[1] = -kInf;
  EXPECT_EQ(Sampler(o).Sample(std::vector<float>{0, 5, 1}).token, 2);
}

TEST(Sampler, HistoryIdsBeyondTheVocabAreIgnored) {
  SamplingOptions o = Opts();
  o.presence_penalty = 1;
  Sampler s(o);
  const int32_t prompt[] = {1, 500000};
  s.SetPrompt(prompt);
  auto out = s.Process(std::vector<float>{0, 0, 0});
  EXPECT_EQ(out[1], -1.0f);
  EXPECT_EQ(out[0], 0.0f);
}

TEST(Sampler, MinPScalesByTopProbability) {
  const std::vector<float> l = {0, -1, -2, -3};  // p / p_max = 1, .368, .135, .0498
  SamplingOptions o = Opts();
  o.min_p = 0.1;
  EXPECT_EQ(Survivors(o, l), (Ids{0, 1, 2}));
  o.min_p = 0.2;
  EXPECT_EQ(Survivors(o, l), (Ids{0, 1}));
  o.min_p = 1.0;
  EXPECT_EQ(Survivors(o, {0, 0, -1}), (Ids{0, 1}));
}

TEST(Sampler, TypicalPRanksByDistanceFromEntropy) {
  // p = .5 .25 .125 .125: H = 1.75 ln2, -log p = (1, 2, 3, 3) ln2, |.| = (.75, .25, 1.25, 1.25)
  // ln2. Order: 1, 0, {2, 3}; cumulative .25, .75, .875, 1.
  const std::vector<float> l = {std::log(0.5f), std::log(0.25f), std::log(0.125f),
                                std::log(0.125f)};
  SamplingOptions o = Opts();
  o.typical_p = 0.2;
  EXPECT_EQ(Survivors(o, l), (Ids{1}));  // drops the most likely token
  o.typical_p = 0.5;
  EXPECT_EQ(Survivors(o, l), (Ids{0, 1}));
  o.typical_p = 0.76;  // cut lands on token 2; token 3 ties with it
  EXPECT_EQ(Survivors(o, l), (Ids{0, 1, 2, 3}));
}

TEST(Sampler, FiltersRenormalizeOverSurvivorsInChainOrder) {
  // top-k 2 leaves .4/.35 -> .533/.467, so top-p .5 keeps one token (not two, as on the raw .4).
  SamplingOptions o = Opts();
  o.top_k = 2;
  o.top_p = 0.5;
  EXPECT_EQ(Survivors(o, {std::log(0.4f), std::log(0.35f), std::log(0.25f)}), (Ids{0}));
  // Temperature comes before min-p: at T=2, exp(-1/2) = .61 >= .5.
  SamplingOptions m = Opts();
  m.min_p = 0.5;
  EXPECT_EQ(Survivors(m, {0, -1}), (Ids{0}));
  m.temperature = 2;
  EXPECT_EQ(Survivors(m, {0, -1}), (Ids{0, 1}));
}

TEST(Sampler, BitmaskIsAppliedFirstAndChecked) {
  std::vector<float> logits(70, 0.0f);
  logits[5] = 10;  // most likely, but not allowed
  logits[65] = 1;
  std::vector<uint64_t> mask(2, 0);
  mask[0] |= 1ULL << 2;
  mask[1] |= 1ULL << (65 - 64);
  SamplingOptions o = Opts();
  Sampler s(o);
  auto out = s.Process(logits, &mask);
  for (int i = 0; i < 70; ++i) {
    if (i == 2 || i == 65) {
      EXPECT_EQ(out[i], logits[i]);
    } else {
      EXPECT_EQ(out[i], -kInf) << i;
    }
  }
  for (int i = 0; i < 50; ++i) {
    const int32_t t = s.Sample(logits, &mask).token;
    EXPECT_TRUE(t == 2 || t == 65) << t;
  }
  SamplingOptions g = Opts();
  g.temperature = 0;
  EXPECT_EQ(Sampler(g).Sample(logits, &mask).token, 65);

  std::vector<uint64_t> none(2, 0);
  none[1] = ~0ULL << 6;  // bits beyond the vocab do not count
  try {
    s.Sample(logits, &none);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kConstraint);
  }
  std::vector<float> dead = logits;
  dead[2] = -kInf;
  dead[65] = -kInf;
  try {
    s.Sample(dead, &mask);  // allowed ids exist, but all at -inf
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kConstraint);
  }
  std::vector<uint64_t> short_mask(1, ~0ULL);
  try {
    s.Sample(logits, &short_mask);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

TEST(Sampler, ErrorsOnBadInput) {
  Sampler s(Opts());
  EXPECT_THROW(s.Sample(std::vector<float>{}), Error);
  try {
    s.Sample(std::vector<float>{0, std::nanf("")});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
  }
  try {
    s.Sample(std::vector<float>{-kInf, -kInf});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  SamplingOptions b = Opts();
  b.logit_bias[9] = 1;
  try {
    Sampler(b).Sample(std::vector<float>{0, 1});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("logit_bias"), std::string::npos);
  }
  SamplingOptions over = Opts();
  over.repetition_penalty = 1e-30;
  Sampler ov(over);
  const int32_t prompt[] = {0};
  ov.SetPrompt(prompt);
  EXPECT_THROW(ov.Sample(std::vector<float>{1e30f, 0}), Error);  // 1e30 / 1e-30 overflows
  SamplingOptions tiny = Opts();
  tiny.temperature = 1e-40;
  EXPECT_THROW(Sampler(tiny).Sample(std::vector<float>{1, 0}), Error);
  SamplingOptions bad = Opts();
  bad.top_p = 2;
  EXPECT_THROW(Sampler{bad}, Error);
  EXPECT_THROW(s.Accept(-1), Error);
  EXPECT_THROW(s.Accept(1 << 24), Error);
}

TEST(Sampler, NegInfTokensAreNeverDrawn) {
  Sampler s(Opts());
  const std::vector<float> l = {-kInf, 0, -kInf, 0, -kInf};
  for (int i = 0; i < 200; ++i) {
    const int32_t t = s.Sample(l).token;
    EXPECT_TRUE(t == 1 || t == 3);
  }
}

TEST(Sampler, SameSeedSameTokensDifferentSeedsDiffer) {
  std::vector<float> l(50);
  for (int i = 0; i < 50; ++i) l[i] = 0.1f * static_cast<float>(i % 7);
  auto run = [&](uint64_t seed) {
    SamplingOptions o;
    o.seed = seed;
    o.top_k = 30;
    o.temperature = 0.9;
    Sampler s(o);
    std::vector<int32_t> out;
    for (int i = 0; i < 200; ++i) out.push_back(s.Sample(l).token);
    return out;
  };
  EXPECT_EQ(run(123), run(123));
  EXPECT_NE(run(123), run(124));
  SamplingOptions r;  // no seed: a random one, reported
  Sampler a(r), b(r);
  EXPECT_NE(a.seed(), b.seed());
  bool found = false;
  for (const auto& [k, v] : a.ResolvedConfig()) {
    if (k == "seed") found = v == std::to_string(a.seed());
  }
  EXPECT_TRUE(found);
}

TEST(Sampler, DrawsFollowTheSpecifiedInverseCdf) {
  // Seed 42's doubles are 0.0839, 0.3790, 0.6800 (rng_test). Four equal weights (total 4) put the
  // targets 0.335, 1.516, 2.720 in buckets 0, 1, 2. With logits {0, ln 9} the weights after max
  // subtraction are 1/9 and 1 (total 10/9); target 0.0932 < 1/9 picks token 0.
  SamplingOptions o;
  o.seed = 42;
  Sampler s(o);
  const std::vector<float> flat = {0, 0, 0, 0};
  EXPECT_EQ(s.Sample(flat).token, 0);
  EXPECT_EQ(s.Sample(flat).token, 1);
  EXPECT_EQ(s.Sample(flat).token, 2);
  EXPECT_EQ(Sampler(o).Sample(std::vector<float>{0, std::log(9.0f)}).token, 0);
}

TEST(Sampler, DrawFrequenciesMatchTheDistribution) {
  // Chi-square over 100k draws; 5 buckets (4 dof): 18.47 is the 0.001 critical value.
  const std::vector<double> p = {0.4, 0.25, 0.2, 0.1, 0.05};
  std::vector<float> l;
  for (double x : p) l.push_back(static_cast<float>(std::log(x)));
  SamplingOptions o;
  o.seed = 2024;
  Sampler s(o);
  const int n = 100000;
  std::vector<int> hist(5, 0);
  for (int i = 0; i < n; ++i) ++hist[s.Sample(l).token];
  double chi2 = 0;
  for (int i = 0; i < 5; ++i) chi2 += (hist[i] - n * p[i]) * (hist[i] - n * p[i]) / (n * p[i]);
  EXPECT_LT(chi2, 18.47);

  // After top-k 3 + temperature 0.5: p ~ p^2 over {0,1,2}, renormalized: .16,.0625,.04 / .2625.
  SamplingOptions f;
  f.seed = 7;
  f.top_k = 3;
  f.temperature = 0.5;
  Sampler t(f);
  std::vector<int> h2(5, 0);
  for (int i = 0; i < n; ++i) ++h2[t.Sample(l).token];
  EXPECT_EQ(h2[3] + h2[4], 0);
  const double q[] = {0.16 / 0.2625, 0.0625 / 0.2625, 0.04 / 0.2625};
  chi2 = 0;
  for (int i = 0; i < 3; ++i) chi2 += (h2[i] - n * q[i]) * (h2[i] - n * q[i]) / (n * q[i]);
  EXPECT_LT(chi2, 13.82);  // 2 dof, 0.001
}

TEST(Sampler, LogprobsFromRawOrFinalDistribution) {
  const std::vector<float> l = {0, 0, std::log(2.0f)};  // .25 .25 .5
  SamplingOptions o = Opts();
  o.temperature = 0;
  o.logprobs = true;
  o.top_logprobs = 2;
  SampleResult r = Sampler(o).Sample(l);
  EXPECT_EQ(r.token, 2);
  EXPECT_NEAR(r.logprob, std::log(0.5), 1e-6);
  ASSERT_EQ(r.num_top, 2);
  EXPECT_EQ(r.top[0].token, 2);
  EXPECT_NEAR(r.top[0].logprob, std::log(0.5), 1e-6);
  EXPECT_EQ(r.top[1].token, 0);  // ties with 1: lower id
  EXPECT_NEAR(r.top[1].logprob, std::log(0.25), 1e-6);

  o.temperature = 1;
  o.top_k = 1;
  o.top_logprobs = 5;
  r = Sampler(o).Sample(l);
  EXPECT_NEAR(r.logprob, std::log(0.5), 1e-6);  // raw by default
  EXPECT_EQ(r.num_top, 3);
  o.logprob_source = LogprobSource::kFinal;
  r = Sampler(o).Sample(l);
  EXPECT_EQ(r.token, 2);
  EXPECT_NEAR(r.logprob, 0.0, 1e-12);
  EXPECT_EQ(r.num_top, 1);  // filtered tokens are not alternatives
  EXPECT_EQ(r.num_candidates, 1);
}

TEST(Sampler, GreedyFinalLogprobsComeFromTheBiasedLogits) {
  SamplingOptions o = Opts();
  o.temperature = 0;
  o.logit_bias[1] = std::log(3.0f);  // p = .25 / .75 after the bias
  o.logprobs = true;
  o.top_logprobs = 2;
  o.logprob_source = LogprobSource::kFinal;
  const SampleResult r = Sampler(o).Sample(std::vector<float>{0, 0});
  EXPECT_EQ(r.token, 1);
  EXPECT_NEAR(r.logprob, std::log(0.75), 1e-6);
  ASSERT_EQ(r.num_top, 2);
  EXPECT_NEAR(r.top[1].logprob, std::log(0.25), 1e-6);
  o.logprob_source = LogprobSource::kRaw;
  EXPECT_NEAR(Sampler(o).Sample(std::vector<float>{0, 0}).logprob, std::log(0.5), 1e-6);
}

TEST(Sampler, ResolvedConfigReportsTheSeedInUse) {
  SamplingOptions o;
  o.top_k = 7;
  Sampler s(o);
  std::map<std::string, std::string> kv;
  for (const auto& [k, v] : s.ResolvedConfig()) kv[k] = v;
  EXPECT_EQ(kv["seed"], std::to_string(s.seed()));
  EXPECT_EQ(kv["seed_source"], "\"random\"");
  EXPECT_EQ(kv["top_k"], "7");
}

TEST(Sampler, FullVocabSteadyStateAllocatesNothing) {
  const size_t n = 262144;
  std::vector<float> l(n);
  uint64_t x = 88172645463325252ULL;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    l[i] = static_cast<float>(x >> 40) * 0x1.0p-21f - 4.0f;  // [-4, 4)
  }
  SamplingOptions o;
  o.seed = 3;
  o.temperature = 0.8;
  o.top_k = 1000;
  o.typical_p = 0.95;
  o.top_p = 0.9;
  o.min_p = 0.01;
  o.repetition_penalty = 1.1;
  o.frequency_penalty = 0.2;
  o.logprobs = true;
  o.top_logprobs = 5;
  Sampler s(o);
  std::vector<int32_t> prompt(300);
  for (int i = 0; i < 300; ++i) prompt[i] = i * 7;
  s.SetPrompt(prompt);
  s.Accept(s.Sample(l).token);  // warm-up sizes the buffers
  const long before = g_allocations.load();
  for (int i = 0; i < 20; ++i) {
    SampleResult r = s.Sample(l);
    ASSERT_GE(r.token, 0);
    ASSERT_LE(r.num_candidates, 1000);
    s.Accept(r.token);
  }
  EXPECT_EQ(g_allocations.load() - before, 0);
}

}  // namespace
}  // namespace gemma::decode
