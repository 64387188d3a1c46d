// Audio decoding with Debian's libsndfile (WAV, FLAC, OGG Vorbis/Opus, MP3, ...) and libsamplerate.
#include <samplerate.h>
#include <sndfile.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <string_view>

#include "gemma/error.h"
#include "media/audio.h"

using namespace std::literals;

namespace gemma::media {
namespace {

// libsndfile's virtual I/O over a byte span.
struct Reader {
  std::span<const uint8_t> bytes;
  sf_count_t pos = 0;
};

sf_count_t VLength(void* user) {
  return static_cast<sf_count_t>(static_cast<Reader*>(user)->bytes.size());
}
sf_count_t VSeek(sf_count_t offset, int whence, void* user) {
  Reader* r = static_cast<Reader*>(user);
  sf_count_t base = whence == SEEK_CUR ? r->pos : whence == SEEK_END ? VLength(user) : 0;
  const sf_count_t to = base + offset;
  if (to < 0 || to > VLength(user)) return -1;
  r->pos = to;
  return r->pos;
}
sf_count_t VRead(void* ptr, sf_count_t count, void* user) {
  Reader* r = static_cast<Reader*>(user);
  const sf_count_t n = std::max<sf_count_t>(0, std::min(count, VLength(user) - r->pos));
  if (n > 0) std::memcpy(ptr, r->bytes.data() + r->pos, static_cast<size_t>(n));
  r->pos += n;
  return n;
}
sf_count_t VWrite(const void*, sf_count_t, void*) { return 0; }
sf_count_t VTell(void* user) { return static_cast<Reader*>(user)->pos; }

std::string SniffAudio(std::span<const uint8_t> b) {
  auto starts = [&](std::string_view s, size_t at = 0) {
    return b.size() >= at + s.size() && std::memcmp(b.data() + at, s.data(), s.size()) == 0;
  };
  if (starts("ftypM4A"sv, 4) || starts("ftypmp4"sv, 4) || starts("ftypiso"sv, 4))
    return "MP4/M4A (AAC)";
  if (starts("\x1A\x45\xDF\xA3"sv)) return "Matroska/WebM";
  if (starts("\xFF\xF1"sv) || starts("\xFF\xF9"sv)) return "AAC (ADTS)";
  if (starts("#!AMR"sv)) return "AMR";
  if (starts("\x89PNG"sv) || starts("\xFF\xD8\xFF"sv) || starts("GIF8"sv)) return "an image";
  return "";
}

// Whether an OGG stream's last page is there (a page header "OggS" with the end-of-stream flag).
// Debian's libsndfile 1.2 leaks libvorbis' codec setup (5.7 KB) on Vorbis streams cut before
// that page, so they are refused before libsndfile sees them.
bool OggHasFinalPage(std::span<const uint8_t> b) {
  if (b.size() < 6) return false;
  const size_t lowest = b.size() > (1u << 16) ? b.size() - (1u << 16) : 0;  // a page is < 64 KiB
  for (size_t i = b.size() - 6 + 1; i-- > lowest;) {
    if (b[i] == 'O' && b[i + 1] == 'g' && b[i + 2] == 'g' && b[i + 3] == 'S' && b[i + 4] == 0)
      return (b[i + 5] & 0x04) != 0;
  }
  return false;
}

struct SndCloser {
  void operator()(SNDFILE* f) const { sf_close(f); }
};

std::string FormatName(int format) {
  SF_FORMAT_INFO info{};
  info.format = format & SF_FORMAT_TYPEMASK;
  if (sf_command(nullptr, SFC_GET_FORMAT_INFO, &info, sizeof(info)) == 0 && info.name)
    return info.name;
  return "audio";
}

}  // namespace

std::vector<float> Resample(std::span<const float> in, int from_rate, int to_rate) {
  if (from_rate == to_rate || in.empty()) return std::vector<float>(in.begin(), in.end());
  const double ratio = static_cast<double>(to_rate) / from_rate;
  std::vector<float> out(static_cast<size_t>(std::ceil(in.size() * ratio)) + 16);
  SRC_DATA d{};
  d.data_in = in.data();
  d.input_frames = static_cast<long>(in.size());
  d.data_out = out.data();
  d.output_frames = static_cast<long>(out.size());
  d.src_ratio = ratio;
  d.end_of_input = 1;
  if (const int err = src_simple(&d, SRC_SINC_BEST_QUALITY, 1)) {
    throw Error(ErrorCode::kInternal, std::string("libsamplerate: ") + src_strerror(err));
  }
  out.resize(static_cast<size_t>(d.output_frames_gen));
  return out;
}

Audio DecodeAudio(std::span<const uint8_t> bytes, const std::string& origin,
                  const AudioDecodeOptions& options) {
  if (bytes.empty()) throw Error(ErrorCode::kFormat, origin + ": empty audio file");
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), "OggS", 4) == 0 && !OggHasFinalPage(bytes)) {
    throw Error(ErrorCode::kFormat, origin + ": truncated OGG file (no final page)");
  }
  Reader reader{bytes, 0};
  SF_VIRTUAL_IO io{VLength, VSeek, VRead, VWrite, VTell};
  SF_INFO info{};
  std::unique_ptr<SNDFILE, SndCloser> f(sf_open_virtual(&io, SFM_READ, &info, &reader));
  if (!f) {
    const std::string what = sf_strerror(nullptr);
    const std::string kind = SniffAudio(bytes);
    if (!kind.empty()) {
      throw Error(ErrorCode::kUnsupported,
                  origin + ": " + kind +
                      " is not a supported audio format (WAV, FLAC, OGG Vorbis/Opus, MP3, AIFF)");
    }
    // libsndfile says "unknown format" for bytes it does not recognise, and names the problem for
    // a recognised but broken header.
    const bool unknown = what.find("nknown format") != std::string::npos ||
                         what.find("not recognised") != std::string::npos ||
                         what.find("not recognized") != std::string::npos;
    throw Error(
        unknown ? ErrorCode::kUnsupported : ErrorCode::kFormat,
        origin + ": " +
            (unknown ? "not a supported audio format (WAV, FLAC, OGG Vorbis/Opus, MP3, AIFF)"
                     : "cannot decode: " + what));
  }
  if (info.channels <= 0 || info.channels > 64) {
    throw Error(ErrorCode::kFormat, origin + ": " + std::to_string(info.channels) + " channels");
  }
  if (info.samplerate < 1000 || info.samplerate > 768000) {
    throw Error(ErrorCode::kFormat, origin + ": sample rate " + std::to_string(info.samplerate) +
                                        " Hz is out of range");
  }
  const int major = info.format & SF_FORMAT_TYPEMASK;
  // An OGG stream whose last page is missing has no length: the file was cut short.
  const bool unknown_length = info.frames <= 0 || info.frames == SF_COUNT_MAX;
  if (unknown_length && major == SF_FORMAT_OGG) {
    throw Error(ErrorCode::kFormat, origin + ": truncated OGG file (no final page)");
  }
  // The header's length (MP3 reports an estimate; the limit is re-checked while decoding).
  const double header_seconds = static_cast<double>(info.frames) / info.samplerate;
  if (!unknown_length && header_seconds > options.max_seconds) {
    throw Error(ErrorCode::kCapacity, origin + ": " + std::to_string(header_seconds) +
                                          " s of audio is over the limit of " +
                                          std::to_string(options.max_seconds) + " s");
  }
  const int ch = info.channels;
  const sf_count_t max_frames =
      static_cast<sf_count_t>(std::ceil(options.max_seconds * info.samplerate));
  // Read, mix to mono and resample block by block: memory follows the 16 kHz output, whatever
  // the file's rate and channel count.
  const bool resample = info.samplerate != kAudioSampleRate;
  const double ratio = static_cast<double>(kAudioSampleRate) / info.samplerate;
  int src_err = 0;
  std::unique_ptr<SRC_STATE, SRC_STATE* (*)(SRC_STATE*)> src(
      resample ? src_new(SRC_SINC_BEST_QUALITY, 1, &src_err) : nullptr, src_delete);
  if (resample && !src)
    throw Error(ErrorCode::kInternal, std::string("libsamplerate: ") + src_strerror(src_err));
  constexpr int kBlock = 4096;
  std::vector<float> buf(static_cast<size_t>(kBlock) * ch), mono(kBlock);
  std::vector<float> res(static_cast<size_t>(std::ceil(kBlock * ratio)) + 64);
  Audio a;
  sf_count_t total = 0;
  bool last = false;
  while (!last) {
    const sf_count_t n = sf_readf_float(f.get(), buf.data(), kBlock);
    last = n < kBlock;
    total += std::max<sf_count_t>(n, 0);
    if (total > max_frames) {
      throw Error(ErrorCode::kCapacity, origin + ": more than " +
                                            std::to_string(options.max_seconds) +
                                            " s of audio (the limit)");
    }
    for (sf_count_t i = 0; i < n; ++i) {
      const float* fr = &buf[static_cast<size_t>(i * ch)];
      float v = fr[0];
      for (int c = 1; c < ch; ++c) v += fr[c];
      if (ch > 1) v /= static_cast<float>(ch);
      if (!std::isfinite(v)) {
        throw Error(ErrorCode::kFormat,
                    origin + ": non-finite sample at frame " + std::to_string(total - n + i));
      }
      mono[static_cast<size_t>(i)] = v;
    }
    if (!resample) {
      a.samples.insert(a.samples.end(), mono.begin(), mono.begin() + std::max<sf_count_t>(n, 0));
      continue;
    }
    // Feed the block; at the end, drain until the converter has nothing left.
    SRC_DATA d{};
    d.data_in = mono.data();
    d.input_frames = static_cast<long>(std::max<sf_count_t>(n, 0));
    d.src_ratio = ratio;
    d.end_of_input = last ? 1 : 0;
    do {
      d.data_out = res.data();
      d.output_frames = static_cast<long>(res.size());
      if (const int err = src_process(src.get(), &d))
        throw Error(ErrorCode::kInternal, std::string("libsamplerate: ") + src_strerror(err));
      a.samples.insert(a.samples.end(), res.begin(), res.begin() + d.output_frames_gen);
      if (d.input_frames_used == 0 && d.output_frames_gen == 0) break;  // nothing moves
      d.data_in += d.input_frames_used;
      d.input_frames -= d.input_frames_used;
    } while (d.input_frames > 0 || (last && d.output_frames_gen > 0));
  }
  if (const int err = sf_error(f.get()); err != SF_ERR_NO_ERROR) {
    throw Error(ErrorCode::kFormat,
                origin + ": corrupt " + FormatName(info.format) + " data: " + sf_strerror(f.get()));
  }
  if (total == 0) throw Error(ErrorCode::kFormat, origin + ": no audio samples");
  // A header that promises more frames than the data holds: the file was cut short.
  // MP3 lengths are estimates (exact with a Xing/LAME header): a tenth short counts as cut.
  // (Unknown lengths are SF_COUNT_MAX: nothing to compare, and 9x of it overflows: fuzz_audio.)
  const sf_count_t expected = unknown_length             ? 0
                              : major == SF_FORMAT_MPEG ? info.frames / 10 * 9 + info.frames % 10 * 9 / 10
                                                        : info.frames;
  if (total < expected) {
    throw Error(ErrorCode::kFormat, origin + ": truncated " + FormatName(info.format) +
                                        " file: " + std::to_string(total) + " of " +
                                        std::to_string(info.frames) + " frames");
  }
  if (major == SF_FORMAT_WAV || major == SF_FORMAT_WAVEX || major == SF_FORMAT_RF64) {
    // libsndfile logs "data : <declared> (should be <present>)" and shortens the stream.
    char log[4096] = {};
    sf_command(f.get(), SFC_GET_LOG_INFO, log, sizeof(log));
    const std::string_view l(log);
    const size_t d = l.find("data : ");
    if (d != std::string_view::npos &&
        l.substr(d, l.find('\n', d) - d).find("should be") != std::string_view::npos) {
      throw Error(ErrorCode::kFormat,
                  origin + ": truncated WAV file (the data chunk is shorter than its header says)");
    }
  }
  a.source_rate = info.samplerate;
  a.source_channels = ch;
  return a;
}

Audio LoadAudioFile(const std::string& path, const AudioDecodeOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::kIo, path + ": cannot open (" + std::strerror(errno) + ")");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  if (in.bad()) throw Error(ErrorCode::kIo, path + ": read error");
  return DecodeAudio(bytes, path, options);
}

}  // namespace gemma::media
