// Audio decoding against independent references: the WAV's PCM16 read here byte by byte (RIFF
// parsed in the test), lossless FLAC equal to it, OGG Vorbis and MP3 made by Debian's encoders
// (libvorbis, LAME through sndfile-convert) close to it, stereo / 22.05 kHz input against the
// analytic signal; bad files as typed errors.
#include <gtest/gtest.h>
#include <sndfile.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>

#include "gemma/error.h"
#include "media/audio.h"

namespace gemma::media {
namespace {

const std::string kClips = std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/audio/clips/";

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), {});
}

// The PCM16 samples of a canonical mono WAV, / 32768, parsed here without libsndfile.
std::vector<float> WavPcm16(const std::string& path) {
  const std::vector<uint8_t> b = ReadBytes(path);
  size_t at = 12;
  while (at + 8 <= b.size()) {
    uint32_t size;
    std::memcpy(&size, &b[at + 4], 4);
    if (std::memcmp(&b[at], "data", 4) == 0) {
      std::vector<float> out(size / 2);
      for (size_t i = 0; i < out.size(); ++i) {
        int16_t s;
        std::memcpy(&s, &b[at + 8 + 2 * i], 2);
        out[i] = s / 32768.0f;
      }
      return out;
    }
    at += 8 + size + (size & 1);
  }
  ADD_FAILURE() << "no data chunk in " << path;
  return {};
}

// Writes frames (interleaved) with libsndfile; the writer is not what is tested. PCM16 formats get
// round(x * 32768) exactly.
void Write(const std::string& path, int format, int rate, int channels,
           const std::vector<float>& x) {
  if ((format & SF_FORMAT_SUBMASK) == SF_FORMAT_PCM_16) {
    std::vector<short> s(x.size());
    for (size_t i = 0; i < x.size(); ++i) s[i] = static_cast<short>(std::lrint(x[i] * 32768.0f));
    SF_INFO info{};
    info.samplerate = rate;
    info.channels = channels;
    info.format = format;
    SNDFILE* f = sf_open(path.c_str(), SFM_WRITE, &info);
    ASSERT_NE(f, nullptr) << sf_strerror(nullptr);
    ASSERT_EQ(sf_writef_short(f, s.data(), static_cast<sf_count_t>(s.size() / channels)),
              static_cast<sf_count_t>(s.size() / channels));
    sf_close(f);
    return;
  }
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = channels;
  info.format = format;
  SNDFILE* f = sf_open(path.c_str(), SFM_WRITE, &info);
  ASSERT_NE(f, nullptr) << sf_strerror(nullptr);
  ASSERT_EQ(sf_writef_float(f, x.data(), static_cast<sf_count_t>(x.size() / channels)),
            static_cast<sf_count_t>(x.size() / channels));
  sf_close(f);
}

ErrorCode CodeOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "no error";
  return ErrorCode::kInternal;
}

// Best signal-to-noise ratio (dB) of `got` against `want` over lags in [-max_lag, max_lag].
double SnrDb(const std::vector<float>& got, const std::vector<float>& want, int max_lag,
             int* lag_out) {
  double best = -1e9;
  for (int lag = -max_lag; lag <= max_lag; ++lag) {
    double sig = 0, err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const int64_t j = static_cast<int64_t>(i) + lag;
      const double g = j >= 0 && j < static_cast<int64_t>(got.size()) ? got[j] : 0.0;
      sig += double(want[i]) * want[i];
      err += (g - want[i]) * (g - want[i]);
    }
    const double snr = 10 * std::log10(sig / std::max(err, 1e-30));
    if (snr > best) {
      best = snr;
      *lag_out = lag;
    }
  }
  return best;
}

TEST(AudioDecode, WavIsItsPcm16Over32768) {
  const Audio a = LoadAudioFile(kClips + "speech.wav");
  const std::vector<float> want = WavPcm16(kClips + "speech.wav");
  ASSERT_EQ(a.samples.size(), want.size());
  EXPECT_EQ(a.source_rate, 16000);
  EXPECT_EQ(a.source_channels, 1);
  EXPECT_EQ(std::memcmp(a.samples.data(), want.data(), want.size() * 4), 0);
}

TEST(AudioDecode, FlacIsLossless) {
  const std::vector<float> want = WavPcm16(kClips + "speech.wav");
  const std::string path = ::testing::TempDir() + "/speech.flac";
  Write(path, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, 1, want);
  const Audio a = LoadAudioFile(path);
  ASSERT_EQ(a.samples.size(), want.size());
  EXPECT_EQ(std::memcmp(a.samples.data(), want.data(), want.size() * 4), 0);
}

TEST(AudioDecode, OggVorbisAndMp3AreCloseToTheWav) {
  const std::vector<float> want = WavPcm16(kClips + "speech.wav");
  for (const char* name : {"speech.ogg", "speech.mp3"}) {
    SCOPED_TRACE(name);
    const Audio a = LoadAudioFile(kClips + name);
    EXPECT_EQ(a.source_rate, 16000);
    EXPECT_NEAR(static_cast<double>(a.samples.size()), static_cast<double>(want.size()), 1200.0);
    int lag = 0;
    const double snr = SnrDb(a.samples, want, 1200, &lag);
    std::printf("%s: %zu samples (wav %zu), SNR %.1f dB at lag %d\n", name, a.samples.size(),
                want.size(), snr, lag);
    EXPECT_GE(snr,
              14.0);  // measured 16.4 (OGG) and 17.4 dB (MP3): low-rate encodes of 16 kHz speech
  }
}

TEST(AudioDecode, StereoMixesToTheMeanAndResamplesTo16k) {
  const int rate = 22050;
  const int n = rate;  // 1 s
  std::vector<float> x(2 * n);
  for (int i = 0; i < n; ++i) {
    x[2 * i] = 0.5f * std::sin(2 * M_PI * 440.0 * i / rate);
    x[2 * i + 1] = 0.3f * std::sin(2 * M_PI * 1000.0 * i / rate);
  }
  const std::string path = ::testing::TempDir() + "/stereo22k.wav";
  Write(path, SF_FORMAT_WAV | SF_FORMAT_FLOAT, rate, 2, x);
  const Audio a = LoadAudioFile(path);
  EXPECT_EQ(a.source_channels, 2);
  EXPECT_EQ(a.source_rate, rate);
  EXPECT_NEAR(static_cast<double>(a.samples.size()), 16000.0, 1.0);
  double worst = 0;
  for (size_t i = 800; i + 800 < a.samples.size(); ++i) {  // away from the edges
    const double t = static_cast<double>(i) / 16000.0;
    const double want =
        0.5 * (0.5 * std::sin(2 * M_PI * 440.0 * t) + 0.3 * std::sin(2 * M_PI * 1000.0 * t));
    worst = std::max(worst, std::abs(a.samples[i] - want));
  }
  std::printf("stereo 22.05 kHz -> mono 16 kHz: worst error %.2e\n", worst);
  EXPECT_LE(worst, 1e-3);
}

TEST(AudioDecode, BadFilesAreTypedErrors) {
  EXPECT_EQ(CodeOf([] { LoadAudioFile(kClips + "no-such-file.wav"); }), ErrorCode::kIo);
  EXPECT_EQ(CodeOf([] { DecodeAudio({}, "empty"); }), ErrorCode::kFormat);
  std::vector<uint8_t> noise(5000);
  std::mt19937 rng(1);
  for (auto& b : noise) b = static_cast<uint8_t>(rng());
  EXPECT_EQ(CodeOf([&] { DecodeAudio(noise, "noise"); }), ErrorCode::kUnsupported);
  const std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13};
  EXPECT_EQ(CodeOf([&] { DecodeAudio(png, "png"); }), ErrorCode::kUnsupported);
  const std::vector<uint8_t> ogg4 = {'O', 'g', 'g', 'S'};  // a fuzzer's find: 4 bytes of OGG magic
  EXPECT_EQ(CodeOf([&] { DecodeAudio(ogg4, "ogg4"); }), ErrorCode::kFormat);
  // A damaged MP3 (Xing header) whose length libsndfile reports as unknown (SF_COUNT_MAX): the
  // truncation check multiplied it by 9, undefined behaviour (fuzz_audio under UBSan). What mpg123
  // resyncs to decodes.
  const std::vector<uint8_t> mp3 =
      ReadBytes(std::string(GEMMA_SOURCE_DIR) + "/fuzz/corpus/audio/regress_mp3_unknown_length");
  EXPECT_FALSE(DecodeAudio(mp3, "mp3").samples.empty());
  // Cut files: a WAV inside its header and inside its data, FLAC, OGG and MP3 at half.
  const std::vector<uint8_t> wav = ReadBytes(kClips + "speech.wav");
  EXPECT_EQ(CodeOf([&] { DecodeAudio(std::span(wav).first(30), "wav/30"); }), ErrorCode::kFormat);
  EXPECT_EQ(CodeOf([&] { DecodeAudio(std::span(wav).first(wav.size() / 2), "wav/2"); }),
            ErrorCode::kFormat);
  const std::string flac = ::testing::TempDir() + "/cut.flac";
  Write(flac, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, 1, WavPcm16(kClips + "speech.wav"));
  const std::vector<uint8_t> fb = ReadBytes(flac);
  EXPECT_EQ(CodeOf([&] { DecodeAudio(std::span(fb).first(fb.size() / 2), "flac/2"); }),
            ErrorCode::kFormat);
  for (const char* name : {"speech.ogg", "speech.mp3"}) {
    SCOPED_TRACE(name);
    const std::vector<uint8_t> b = ReadBytes(kClips + name);
    EXPECT_EQ(CodeOf([&] { DecodeAudio(std::span(b).first(b.size() / 2), name); }),
              ErrorCode::kFormat);
  }
  // The length limit, from the header.
  EXPECT_EQ(CodeOf([] { LoadAudioFile(kClips + "speech.wav", {.max_seconds = 1.0}); }),
            ErrorCode::kCapacity);
  // Non-finite float samples.
  const std::string nan = ::testing::TempDir() + "/nan.wav";
  Write(nan, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, 1, {0.1f, NAN, 0.2f});
  EXPECT_EQ(CodeOf([&] { LoadAudioFile(nan); }), ErrorCode::kFormat);
}

}  // namespace
}  // namespace gemma::media
