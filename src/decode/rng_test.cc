#include "decode/rng.h"

#include <gtest/gtest.h>

namespace gemma::decode {
namespace {

TEST(Rng, SplitMix64MatchesPublishedSequence) {
  // Published SplitMix64 outputs for seed 1234567 (e.g. Rosetta Code "Pseudo-random
  // numbers/Splitmix64").
  uint64_t state = 1234567;
  EXPECT_EQ(SplitMix64Next(state), 6457827717110365317ULL);
  EXPECT_EQ(SplitMix64Next(state), 3203168211198807973ULL);
  EXPECT_EQ(SplitMix64Next(state), 9817491932198370423ULL);
  EXPECT_EQ(SplitMix64Next(state), 4593380528125082431ULL);
  EXPECT_EQ(SplitMix64Next(state), 16408922859458223821ULL);
}

TEST(Rng, Xoshiro256StarStarMatchesSpecification) {
  // Expected values from a separate Python big-int implementation of the algorithm in rng.h.
  Xoshiro256ss a(0);
  EXPECT_EQ(a.NextU64(), 11091344671253066420ULL);
  EXPECT_EQ(a.NextU64(), 13793997310169335082ULL);
  EXPECT_EQ(a.NextU64(), 1900383378846508768ULL);
  EXPECT_EQ(a.NextU64(), 7684712102626143532ULL);
  Xoshiro256ss b(42);
  EXPECT_EQ(b.NextU64(), 1546998764402558742ULL);
  EXPECT_EQ(b.NextU64(), 6990951692964543102ULL);
  EXPECT_EQ(b.NextU64(), 12544586762248559009ULL);
  EXPECT_EQ(b.NextU64(), 17057574109182124193ULL);
}

TEST(Rng, DoublesUse53HighBits) {
  Xoshiro256ss r(42);
  EXPECT_EQ(r.NextDouble(), (1546998764402558742ULL >> 11) * 0x1.0p-53);
  EXPECT_DOUBLE_EQ(r.NextDouble(), 0.3789802506626686);
  EXPECT_DOUBLE_EQ(r.NextDouble(), 0.6800434110281394);
  Xoshiro256ss s(7);
  for (int i = 0; i < 10000; ++i) {
    const double u = s.NextDouble();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

}  // namespace
}  // namespace gemma::decode
