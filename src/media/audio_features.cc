#include "media/audio_features.h"


#include <cmath>
#include <complex>
#include <cstring>

#include "core/sha256.h"
#include "gemma/error.h"

namespace gemma::media {
namespace {

constexpr int kFrameLength = 320;  // 20 ms
constexpr int kHop = 160;          // 10 ms
constexpr int kFft = 512;
constexpr int kBins = kFft / 2 + 1;
constexpr int kPadMultiple = 128;
constexpr double kMelFloor = 1e-3;

// numpy.hanning(321)[:-1] (window_function(320, "hann", periodic=True)), then float32:
// 0.5 + 0.5 cos(pi n / 320) for n = -320, -318, ..., 318.
const std::array<float, kFrameLength>& Window() {
  static const std::array<float, kFrameLength> w = [] {
    std::array<float, kFrameLength> a{};
    for (int k = 0; k < kFrameLength; ++k) {
      const double n = -kFrameLength + 2.0 * k;
      a[k] = static_cast<float>(0.5 + 0.5 * std::cos(M_PI * n / kFrameLength));
    }
    return a;
  }();
  return w;
}

double HzToMel(double f) { return 2595.0 * std::log10(1.0 + f / 700.0); }
double MelToHz(double m) { return 700.0 * (std::pow(10.0, m / 2595.0) - 1.0); }

// In-place radix-2 FFT of kFft complex values (double).
void Fft(std::complex<double>* x) {
  static const std::vector<std::complex<double>> tw = [] {
    std::vector<std::complex<double>> t(kFft / 2);
    for (int k = 0; k < kFft / 2; ++k) t[k] = std::polar(1.0, -2.0 * M_PI * k / kFft);
    return t;
  }();
  for (int i = 1, j = 0; i < kFft; ++i) {
    int bit = kFft >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) std::swap(x[i], x[j]);
  }
  for (int len = 2; len <= kFft; len <<= 1) {
    const int step = kFft / len;
    for (int i = 0; i < kFft; i += len) {
      for (int k = 0; k < len / 2; ++k) {
        const std::complex<double> u = x[i + k], v = x[i + k + len / 2] * tw[k * step];
        x[i + k] = u + v;
        x[i + k + len / 2] = u - v;
      }
    }
  }
}

}  // namespace

const std::vector<double>& MelFilterBank() {
  static const std::vector<double> bank = [] {
    const int n_mels = kMelBins;
    // np.linspace(start, stop, num): start + i * ((stop - start) / (num - 1)), the last = stop.
    const double mel_min = HzToMel(0.0), mel_max = HzToMel(8000.0);
    std::vector<double> filter_freqs(n_mels + 2);
    const double mstep = (mel_max - mel_min) / (n_mels + 1);
    for (int i = 0; i < n_mels + 2; ++i) {
      const double m = i == n_mels + 1 ? mel_max : i * mstep + mel_min;
      filter_freqs[i] = MelToHz(m);
    }
    const double fstep = 8000.0 / (kBins - 1);
    std::vector<double> b(static_cast<size_t>(kBins) * n_mels);
    for (int f = 0; f < kBins; ++f) {
      const double fft_freq = f == kBins - 1 ? 8000.0 : f * fstep;
      for (int m = 0; m < n_mels; ++m) {
        const double down = -(filter_freqs[m] - fft_freq) / (filter_freqs[m + 1] - filter_freqs[m]);
        const double up =
            (filter_freqs[m + 2] - fft_freq) / (filter_freqs[m + 2] - filter_freqs[m + 1]);
        b[static_cast<size_t>(f) * n_mels + m] = std::max(0.0, std::min(down, up));
      }
    }
    return b;
  }();
  return bank;
}

int AudioSoftTokens(std::span<const uint8_t> mask) {
  // mask[::2] twice: entry t of the result is mask[4 t], for t < ceil(ceil(T / 2) / 2).
  const size_t t1 = (mask.size() + 1) / 2, t2 = (t1 + 1) / 2;
  int n = 0;
  for (size_t t = 0; t < t2; ++t) n += mask[4 * t] ? 1 : 0;
  return n;
}

AudioFeatures ExtractAudioFeatures(std::span<const float> samples) {
  const size_t real = std::min(samples.size(), static_cast<size_t>(kAudioChunkSamples));
  const size_t padded = (real + kPadMultiple - 1) / kPadMultiple * kPadMultiple;
  const size_t left = kFrameLength / 2;
  // The padded clip with its semicausal prefix; index j holds real audio iff left <= j < left +
  // real.
  std::vector<float> x(left + padded, 0.0f);
  std::copy(samples.begin(), samples.begin() + real, x.begin() + left);
  AudioFeatures out;
  const int64_t span = static_cast<int64_t>(x.size()) - (kFrameLength + 1);
  out.frames = span < 0 ? 0 : static_cast<int>(span / kHop + 1);
  out.mel.assign(static_cast<size_t>(out.frames) * kMelBins, 0.0f);
  out.mask.assign(out.frames, 0);
  const std::array<float, kFrameLength>& w = Window();
  const std::vector<double>& bank = MelFilterBank();
  std::vector<std::complex<double>> buf(kFft);
  std::vector<double> mag(kBins);
  std::vector<double> mel(kMelBins);
  for (int i = 0; i < out.frames; ++i) {
    const size_t end = static_cast<size_t>(i) * kHop + kFrameLength;  // the frame's last sample
    const bool valid = end >= left && end < left + real;
    out.mask[i] = valid ? 1 : 0;
    if (!valid) continue;  // transformers multiplies invalid frames by 0
    const float* fr = &x[static_cast<size_t>(i) * kHop];
    for (int n = 0; n < kFrameLength; ++n) buf[n] = static_cast<double>(fr[n] * w[n]);
    for (int n = kFrameLength; n < kFft; ++n) buf[n] = 0.0;
    Fft(buf.data());
    for (int f = 0; f < kBins; ++f) mag[f] = std::abs(buf[f]);
    std::fill(mel.begin(), mel.end(), 0.0);
    for (int f = 0; f < kBins; ++f) {
      const double* row = &bank[static_cast<size_t>(f) * kMelBins];
      for (int m = 0; m < kMelBins; ++m) mel[m] += mag[f] * row[m];
    }
    float* o = &out.mel[static_cast<size_t>(i) * kMelBins];
    for (int m = 0; m < kMelBins; ++m) o[m] = static_cast<float>(std::log(mel[m] + kMelFloor));
  }
  out.soft_tokens = AudioSoftTokens(out.mask);
  return out;
}

PreparedAudio PrepareAudio(std::span<const float> samples, const std::string& origin) {
  PreparedAudio p;
  p.seconds = static_cast<double>(samples.size()) / 16000.0;
  for (size_t at = 0; at < samples.size(); at += kAudioChunkSamples) {
    const size_t n = std::min(samples.size() - at, static_cast<size_t>(kAudioChunkSamples));
    AudioFeatures f = ExtractAudioFeatures(samples.subspan(at, n));
    // A short tail chunk may give no soft token; it is dropped (at most 20 ms of audio).
    if (f.soft_tokens == 0) continue;
    p.soft_tokens += f.soft_tokens;
    p.chunks.push_back(std::move(f));
  }
  if (p.soft_tokens == 0) {
    throw Error(ErrorCode::kInvalidArgument, origin + ": the audio is too short (" +
                                                 std::to_string(samples.size()) +
                                                 " samples at 16 kHz) to give one soft token");
  }
  // Identity: the samples' bits and the chunking policy.
  const char tag[] = "gemma4-audio-16k-chunks-480000";
  Sha256 sha;
  sha.Update(tag, sizeof(tag));
  sha.Update(samples.data(), samples.size() * sizeof(float));
  p.digest = sha.Final();
  return p;
}

}  // namespace gemma::media
