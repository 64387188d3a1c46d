// Gemma4AudioFeatureExtractor (transformers 5.17) in C++: 16 kHz mono samples -> 128-bin log-mel
// frames and their validity mask.
//
// As transformers computes it: the clip is padded with zeros to a multiple of 128 samples
// (truncated at 480,000 = 30 s), 160 zeros are prepended (semicausal), frames of 321 samples every
// 160 samples keep their first 320 (no preemphasis), times the periodic Hann window of 320 (numpy's
// hanning(321)[:-1] in float32; the product in float32), the magnitude of the 512-point real FFT,
// the HTK mel filter bank (257 bins -> 128 mels, 0-8000 Hz, no normalization, float64), log(mel +
// 0.001), cast to float32. Frame i is valid when padded sample i*160 + 320 is real audio; invalid
// frames are zero.
//
// Exactness: the FFT runs in double. numpy >= 2 evaluates a float32 frame's FFT in float32, whose
// rounding shows in bins far below the frame's peak; against transformers with a float64 FFT the
// features agree to about 1e-6 (tests/audio_golden_test.cc has the figures).
//
// Longer clips: transformers truncates at 30 s. Here a clip is split into 30 s chunks, each
// extracted (and later encoded) on its own as transformers would encode that 30 s clip, and their
// soft tokens follow each other in one audio run (the policy llama.cpp's mtmd follows).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gemma::media {

inline constexpr int kMelBins = 128;
inline constexpr int kAudioChunkSamples = 480000;  // 30 s: Gemma4AudioFeatureExtractor's max_length

struct AudioFeatures {
  int frames = 0;
  std::vector<float> mel;     // [frames, kMelBins], zero on invalid frames
  std::vector<uint8_t> mask;  // [frames]: 1 = valid
  int soft_tokens = 0;        // valid frames after the tower's two stride-2 convolutions
};

// One clip of at most kAudioChunkSamples samples (longer input is truncated, as transformers does).
AudioFeatures ExtractAudioFeatures(std::span<const float> samples);

// Soft tokens of a frame mask: the entries of mask[::2][::2] that are valid (what the tower keeps).
int AudioSoftTokens(std::span<const uint8_t> mask);

// The mel filter bank [257, 128] (float64), as transformers' mel_filter_bank(257, 128, 0, 8000,
// 16000, norm=None, mel_scale="htk") computes it.
const std::vector<double>& MelFilterBank();

// A clip ready for the tower: its 30 s chunks, their soft tokens in total, and the SHA-256 of the
// 16 kHz samples (the media identity in prefix reuse).
struct PreparedAudio {
  std::vector<AudioFeatures> chunks;
  int soft_tokens = 0;
  std::array<uint8_t, 32> digest{};
  double seconds = 0;
};

// Error(kInvalidArgument) when the clip is too short to give one soft token (under about 0.02 s).
PreparedAudio PrepareAudio(std::span<const float> samples, const std::string& origin);

}  // namespace gemma::media
