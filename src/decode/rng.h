// The per-request PRNG: xoshiro256** (Blackman & Vigna, 2018) seeded through SplitMix64.
// Integer-only state updates, so a seed gives the same stream on every platform and compiler.
//
//   SplitMix64(x): x += 0x9e3779b97f4a7c15; z = x;
//                  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9; z = (z ^ (z >> 27)) *
//                  0x94d049bb133111eb; return z ^ (z >> 31)
//   Seeding: s[0..3] = four successive SplitMix64 outputs starting from state = seed.
//   NextU64: result = rotl(s[1] * 5, 7) * 9; t = s[1] << 17; s[2] ^= s[0]; s[3] ^= s[1];
//            s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45).
//   NextDouble: (NextU64() >> 11) * 2^-53, uniform in [0, 1) on a 2^-53 grid (exact in binary64).
#pragma once

#include <cstdint>

namespace gemma::decode {

inline uint64_t SplitMix64Next(uint64_t& state) {
  state += 0x9e3779b97f4a7c15ULL;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class Xoshiro256ss {
 public:
  explicit Xoshiro256ss(uint64_t seed) {
    uint64_t sm = seed;
    for (auto& w : s_) w = SplitMix64Next(sm);
  }

  uint64_t NextU64() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  double NextDouble() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace gemma::decode
