#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

namespace gemma {
namespace {

TEST(Dtype, Bf16RoundTripIsExactForBf16Values) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = Bf16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(F32ToBf16(f), h);
  }
}

TEST(Dtype, Bf16RoundsHalfToEven) {
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125; ties go to even (1.0).
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f + 3.0f / 256)), 1.015625f);
}

TEST(Dtype, F16RoundTripIsExactForF16Values) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(F32ToF16(f), h) << h;
  }
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);
}

}  // namespace
}  // namespace gemma
