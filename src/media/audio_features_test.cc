// The audio front end: frame and soft-token counts transformers 5.17 gave (docs/gemma4-spec.md
// section 9); the features themselves are checked against Gemma4AudioFeatureExtractor in
// tests/audio_golden_test.cc.
#include "media/audio_features.h"

#include <gtest/gtest.h>

#include <cmath>

#include "gemma/error.h"

namespace gemma::media {
namespace {

TEST(AudioFeatures, FrameAndTokenCountsAsTransformers) {
  struct Case {
    size_t samples;
    int frames, valid, tokens;
  };
  // 44,555 samples -> 279 frames, 278 valid -> 70 tokens; 0.5 s -> 13; 1 s -> 25 (spec section 9).
  for (const Case& c :
       {Case{44555, 279, 278, 70}, Case{8000, 50, 49, 13}, Case{16000, 99, 99, 25}}) {
    SCOPED_TRACE(c.samples);
    std::vector<float> x(c.samples);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * std::sin(0.05f * i);
    const AudioFeatures f = ExtractAudioFeatures(x);
    EXPECT_EQ(f.frames, c.frames);
    int valid = 0;
    for (uint8_t m : f.mask) valid += m;
    EXPECT_EQ(valid, c.valid);
    EXPECT_EQ(f.soft_tokens, c.tokens);
  }
}

TEST(AudioFeatures, SilenceIsTheLogFloorAndInvalidFramesAreZero) {
  const AudioFeatures f = ExtractAudioFeatures(std::vector<float>(1000, 0.0f));
  ASSERT_GT(f.frames, 0);
  for (int i = 0; i < f.frames; ++i) {
    for (int m = 0; m < kMelBins; ++m) {
      const float v = f.mel[static_cast<size_t>(i) * kMelBins + m];
      if (f.mask[i]) {
        EXPECT_EQ(v, static_cast<float>(std::log(1e-3)));
      } else {
        EXPECT_EQ(v, 0.0f);
      }
    }
  }
}

TEST(AudioFeatures, LongClipsSplitInto30sChunksAndTooShortIsAnError) {
  std::vector<float> x(480000 + 16000, 0.01f);
  const PreparedAudio p = PrepareAudio(x, "long");
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].soft_tokens, 750);  // 30 s: at most 750 tokens
  EXPECT_EQ(p.soft_tokens, 750 + 25);
  EXPECT_THROW(PrepareAudio(std::vector<float>(160, 0.1f), "tiny"), Error);
  // The identity follows the samples.
  std::vector<float> y = x;
  y[12345] += 1e-3f;
  EXPECT_NE(PrepareAudio(y, "y").digest, p.digest);
  EXPECT_EQ(PrepareAudio(x, "x").digest, p.digest);
}

TEST(AudioFeatures, EveryFrameOfALongClipIsTheFrameOfItsOwnSamples) {
  // A frame depends only on its 320 samples: frame i + j of a 30 s clip (computed in blocks over
  // threads) equals frame i of the clip that starts j hops later, for every i past that clip's
  // zero prefix and before its end.
  std::vector<float> x(kAudioChunkSamples);
  uint32_t r = 12345;
  for (float& v : x) {
    r = r * 1664525u + 1013904223u;
    v = 0.4f * std::sin(0.003f * static_cast<float>(&v - x.data())) +
        0.2f * (static_cast<float>(r >> 8) / 16777216.0f - 0.5f);
  }
  const AudioFeatures full = ExtractAudioFeatures(x);
  ASSERT_EQ(full.frames, 2999);  // (480,000 + 160 - 321) / 160 + 1
  for (int j : {0, 1, 777, 1499, 1500, 2250, 2900}) {
    SCOPED_TRACE(j);
    const size_t at = static_cast<size_t>(j) * 160;
    const std::span<const float> tail(x.data() + at, std::min<size_t>(16000, x.size() - at));
    const AudioFeatures part = ExtractAudioFeatures(tail);
    int compared = 0;
    for (int i = 1; i < part.frames && i + j < full.frames; ++i) {
      if (!part.mask[i]) continue;
      ASSERT_TRUE(full.mask[i + j]);
      for (int m = 0; m < kMelBins; ++m) {
        ASSERT_EQ(part.mel[static_cast<size_t>(i) * kMelBins + m],
                  full.mel[static_cast<size_t>(i + j) * kMelBins + m])
            << "frame " << i + j << " mel " << m;
      }
      ++compared;
    }
    EXPECT_GT(compared, 50);
  }
}

}  // namespace
}  // namespace gemma::media
