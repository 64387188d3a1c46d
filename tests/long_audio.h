// The clips the audio goldens make from the committed speech clip's int16 samples
// (tools/fixtures/audio_goldens.py, made_clips): tiled, every odd repeat time-reversed (2.7, 29.9,
// 30 and 45 s), and the speech 8x louder saturated at the int16 range ("clipped"). They are inputs
// built here the way the script builds them; the goldens' JSON carries the SHA-256 of their int16
// samples, which the tests check before comparing anything.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/sha256.h"
#include "media/audio.h"

namespace gemma {

struct LongClip {
  std::vector<int16_t> pcm;    // 16 kHz mono
  std::vector<float> samples;  // pcm / 32768, as the decoder gives them
  std::string sha256;          // of pcm as little-endian bytes
};

// `name` "clipped": the speech 8x louder, saturated at the int16 range (n is its length); any
// other name: n samples of the speech tiled.
inline LongClip MakeLongClip(const std::string& speech_wav, const std::string& name, int n) {
  const std::vector<float> speech = media::LoadAudioFile(speech_wav).samples;
  const int L = static_cast<int>(speech.size());
  LongClip c;
  c.pcm.resize(n);
  c.samples.resize(n);
  for (int k = 0; k < n; ++k) {
    const int r = k / L, i = k % L;
    // exact: the decoder divided an int16
    int v = static_cast<int>(speech[r % 2 ? L - 1 - i : i] * 32768.0f);
    if (name == "clipped") v = std::clamp(v * 8, -32768, 32767);
    c.pcm[k] = static_cast<int16_t>(v);
    c.samples[k] = static_cast<float>(v) / 32768.0f;
  }
  c.sha256 = Sha256::Hex(
      Sha256::Of(std::string_view(reinterpret_cast<const char*>(c.pcm.data()), c.pcm.size() * 2)));
  return c;
}

// A 16 kHz mono PCM16 WAV file's bytes.
inline std::vector<uint8_t> WavBytes(const std::vector<int16_t>& pcm) {
  std::vector<uint8_t> b;
  auto put = [&](uint32_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  auto tag = [&](const char* t) { b.insert(b.end(), t, t + 4); };
  const uint32_t data = static_cast<uint32_t>(pcm.size() * 2);
  tag("RIFF"), put(36 + data, 4), tag("WAVE"), tag("fmt "), put(16, 4), put(1, 2), put(1, 2);
  put(16000, 4), put(32000, 4), put(2, 2), put(16, 2), tag("data"), put(data, 4);
  for (int16_t s : pcm) put(static_cast<uint16_t>(s), 2);
  return b;
}

}  // namespace gemma
