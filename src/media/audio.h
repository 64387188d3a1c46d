// Audio files -> 16 kHz mono float samples, as transformers' audio input sees them.
//
// Decoding: Debian's libsndfile (1.2: WAV/RIFF, RF64, AIFF, FLAC, OGG Vorbis and Opus, MP3 through
// libmpg123). Integer PCM maps to [-1, 1) as soundfile/libsndfile normalize it (x / 2^(bits-1)).
// Several channels are mixed to mono by their mean (librosa.to_mono, which transformers'
// load_audio and the pipelines use). Other rates are resampled to 16 kHz with libsamplerate's best
// sinc converter (transformers uses librosa's soxr; both are band-limited sinc resamplers, not
// bit-identical).
//
// Every failure is a gemma::Error: kUnsupported for formats libsndfile does not read, kFormat
// for corrupt or truncated bytes (fewer frames than the header promises, non-finite float
// samples, no samples at all), kCapacity when the header's duration exceeds the limit (checked
// before any sample is decoded), kIo for unreadable files.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gemma::media {

inline constexpr int kAudioSampleRate = 16000;

struct Audio {
  std::vector<float> samples;  // mono, kAudioSampleRate
  int source_rate = 0;         // the file's rate
  int source_channels = 0;
  double seconds() const { return static_cast<double>(samples.size()) / kAudioSampleRate; }
};

struct AudioDecodeOptions {
  double max_seconds = 600;  // from the header, before decoding
};

// `origin` names the input in error messages (a path, "message 2 part 1", ...).
Audio DecodeAudio(std::span<const uint8_t> bytes, const std::string& origin,
                  const AudioDecodeOptions& options = {});
Audio LoadAudioFile(const std::string& path, const AudioDecodeOptions& options = {});

// Mono samples at `from_rate` -> `to_rate` (libsamplerate SRC_SINC_BEST_QUALITY); a copy when the
// rates are equal.
std::vector<float> Resample(std::span<const float> in, int from_rate, int to_rate);

}  // namespace gemma::media
