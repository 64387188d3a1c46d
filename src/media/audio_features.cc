#include "media/audio_features.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <system_error>
#include <thread>

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
constexpr int kFramesPerThread = 256;
constexpr int kMaxThreads = 8;

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

// The magnitudes of the 512-point DFT of a real frame (kFrameLength samples, then zeros), bins 0 to
// 256, in double: a 256-point complex FFT of the even and odd samples as real and imaginary parts,
// then the split into the real input's spectrum.
class RealFft {
 public:
  RealFft() {
    for (int k = 0; k < kHalf; ++k) {
      const double a = -2.0 * M_PI * k / kHalf;
      tw_re_[k] = std::cos(a), tw_im_[k] = std::sin(a);
    }
    for (int k = 0; k <= kHalf; ++k) {
      const double a = -2.0 * M_PI * k / kFft;
      split_re_[k] = std::cos(a), split_im_[k] = std::sin(a);
    }
    for (int i = 0; i < kHalf; ++i) {
      int r = 0;
      for (int b = 1, j = i; b < kHalf; b <<= 1, j >>= 1) r = (r << 1) | (j & 1);
      rev_[i] = r;
    }
  }

  // frame[kFrameLength] -> mag[kBins].
  void Magnitudes(const double* frame, double* mag) const {
    double re[kHalf], im[kHalf];
    for (int n = 0; n < kHalf; ++n) {
      const int r = rev_[n];  // samples 2r and 2r + 1, zero past the frame
      re[n] = 2 * r < kFrameLength ? frame[2 * r] : 0.0;
      im[n] = 2 * r + 1 < kFrameLength ? frame[2 * r + 1] : 0.0;
    }
    for (int len = 2; len <= kHalf; len <<= 1) {
      const int half = len / 2, step = kHalf / len;
      for (int i = 0; i < kHalf; i += len) {
        for (int k = 0; k < half; ++k) {
          const double wr = tw_re_[k * step], wi = tw_im_[k * step];
          const int a = i + k, b = a + half;
          const double vr = re[b] * wr - im[b] * wi, vi = re[b] * wi + im[b] * wr;
          re[b] = re[a] - vr, im[b] = im[a] - vi;
          re[a] += vr, im[a] += vi;
        }
      }
    }
    for (int k = 0; k <= kHalf; ++k) {
      const int p = k % kHalf, q = (kHalf - k) % kHalf;
      // even = (Z[k] + conj Z[N-k]) / 2, odd = (Z[k] - conj Z[N-k]) / 2i, X = even + W^k odd.
      const double er = 0.5 * (re[p] + re[q]), ei = 0.5 * (im[p] - im[q]);
      const double or_ = 0.5 * (im[p] + im[q]), oi = -0.5 * (re[p] - re[q]);
      const double xr = er + split_re_[k] * or_ - split_im_[k] * oi;
      const double xi = ei + split_re_[k] * oi + split_im_[k] * or_;
      mag[k] = std::sqrt(xr * xr + xi * xi);
    }
  }

 private:
  static constexpr int kHalf = kFft / 2;
  double tw_re_[kHalf], tw_im_[kHalf], split_re_[kHalf + 1], split_im_[kHalf + 1];
  int rev_[kHalf];
};

// The filter bank's nonzero weights per mel (each triangle covers a few bins): summed in bin order
// they give the dense product's value exactly (the skipped terms are zeros).
struct SparseMel {
  int first = 0;
  std::vector<double> w;
};

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
  static const RealFft fft;
  static const std::vector<SparseMel> sparse = [&bank] {
    std::vector<SparseMel> s(kMelBins);
    for (int m = 0; m < kMelBins; ++m) {
      int lo = kBins, hi = 0;
      for (int f = 0; f < kBins; ++f) {
        if (bank[static_cast<size_t>(f) * kMelBins + m] != 0.0) lo = std::min(lo, f), hi = f + 1;
      }
      s[m].first = lo < hi ? lo : 0;
      for (int f = lo; f < hi; ++f) s[m].w.push_back(bank[static_cast<size_t>(f) * kMelBins + m]);
    }
    return s;
  }();
  // Frames [begin, end): independent, so long clips are split over a few threads.
  const auto frames = [&](int begin, int end) {
    double frame[kFrameLength], mag[kBins];
    for (int i = begin; i < end; ++i) {
      const size_t last = static_cast<size_t>(i) * kHop + kFrameLength;  // the frame's last sample
      const bool valid = last >= left && last < left + real;
      out.mask[i] = valid ? 1 : 0;
      if (!valid) continue;  // transformers multiplies invalid frames by 0
      const float* fr = &x[static_cast<size_t>(i) * kHop];
      for (int n = 0; n < kFrameLength; ++n) frame[n] = static_cast<double>(fr[n] * w[n]);
      fft.Magnitudes(frame, mag);
      float* o = &out.mel[static_cast<size_t>(i) * kMelBins];
      for (int m = 0; m < kMelBins; ++m) {
        const SparseMel& sm = sparse[m];
        double e = 0.0;
        for (size_t j = 0; j < sm.w.size(); ++j) e += mag[sm.first + j] * sm.w[j];
        o[m] = static_cast<float>(std::log(e + kMelFloor));
      }
    }
  };
  // About 4 us a frame: threads (at most 8) for blocks of at least 256 frames; where threads
  // cannot start (a WebAssembly build without them), the caller does every block.
  const int parts = std::clamp(std::min(static_cast<int>(std::thread::hardware_concurrency()),
                                        out.frames / kFramesPerThread),
                               1, kMaxThreads);
  std::vector<std::thread> helpers;
  helpers.reserve(parts);
  for (int p = 1; p < parts; ++p) {
    const int begin = static_cast<int>(static_cast<int64_t>(out.frames) * p / parts);
    const int end = static_cast<int>(static_cast<int64_t>(out.frames) * (p + 1) / parts);
    try {
      helpers.emplace_back(frames, begin, end);
    } catch (const std::system_error&) {
      frames(begin, end);
    }
  }
  frames(0, static_cast<int>(static_cast<int64_t>(out.frames) / parts));
  for (std::thread& t : helpers) t.join();
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
