// Image decoding with Debian's stb_image (PNG, JPEG, BMP, GIF first frame) and libwebp. The
// WebAssembly build compiles it without libwebp (GEMMA_NO_WEBP: WebP files are kUnsupported).
#ifndef GEMMA_NO_WEBP
#include <webp/decode.h>
#endif

#include <algorithm>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"
#include "gemma/error.h"
#include "media/image.h"

#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#define STBI_NO_STDIO
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_ONLY_BMP
#define STBI_ONLY_GIF
#define STBI_NO_FAILURE_STRINGS_DISABLED
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <stb/stb_image.h>
#pragma GCC diagnostic pop

using namespace std::literals;

namespace gemma::media {
namespace {

enum class Kind { kPng, kJpeg, kGif, kBmp, kWebp, kUnknown };

Kind Sniff(std::span<const uint8_t> b) {
  auto starts = [&](std::string_view s) {
    return b.size() >= s.size() && std::memcmp(b.data(), s.data(), s.size()) == 0;
  };
  if (starts("\x89PNG\r\n\x1a\n"sv)) return Kind::kPng;
  if (starts("\xFF\xD8\xFF"sv)) return Kind::kJpeg;
  if (starts("GIF87a"sv) || starts("GIF89a"sv)) return Kind::kGif;
  if (starts("BM"sv)) return Kind::kBmp;
  if (starts("RIFF"sv) && b.size() >= 12 && std::memcmp(&b[8], "WEBP", 4) == 0) return Kind::kWebp;
  return Kind::kUnknown;
}

std::string Unknown(std::span<const uint8_t> b) {
  auto starts = [&](std::string_view s, size_t at = 0) {
    return b.size() >= at + s.size() && std::memcmp(b.data() + at, s.data(), s.size()) == 0;
  };
  if (starts("II*\0"sv) || starts("MM\0*"sv)) return "TIFF";
  if (starts("ftypheic"sv, 4) || starts("ftypheix"sv, 4) || starts("ftypmif1"sv, 4))
    return "HEIC/HEIF";
  if (starts("ftypavif"sv, 4)) return "AVIF";
  if (starts("\0\0\1\0"sv)) return "ICO";
  if (starts("<svg"sv) || starts("<?xml"sv)) return "SVG";
  return "unknown";
}

void CheckSize(int64_t w, int64_t h, const std::string& origin, const DecodeOptions& o) {
  if (w <= 0 || h <= 0) {
    throw Error(ErrorCode::kFormat, origin + ": the image has zero size (" + std::to_string(w) +
                                        "x" + std::to_string(h) + ")");
  }
  // (w > limit / h: the product of two 32-bit header fields can overflow 64 bits; fuzzing)
  if (w > o.max_pixels / h) {
    throw Error(ErrorCode::kCapacity, origin + ": " + std::to_string(w) + "x" + std::to_string(h) +
                                          " is " + std::to_string(static_cast<double>(w) * h) +
                                          " pixels, over the limit of " +
                                          std::to_string(o.max_pixels));
  }
}

// A JPEG whose last scan is not followed by an end-of-image marker was cut short (stb would
// silently pad the missing data; PIL refuses the file).
bool JpegTruncated(std::span<const uint8_t> b) {
  size_t last_sos = std::string::npos;
  for (size_t i = 0; i + 1 < b.size(); ++i) {
    if (b[i] == 0xFF && b[i + 1] == 0xDA) last_sos = i;
  }
  if (last_sos == std::string::npos) return true;
  for (size_t i = last_sos + 2; i + 1 < b.size(); ++i) {
    if (b[i] == 0xFF && b[i + 1] == 0xD9) return false;
  }
  return true;
}

// Whether every Huffman table (DHT segment) holds at most 256 codes. Debian's stb_image
// (2022-09) does not check it: a table whose 16 code counts sum past 256 writes past its 257-entry
// size array and 256-entry value array (memory corruption; found by fuzz_image under UBSan). The
// checks read the bytes stb's parser would (its DHT loop reads counts from the stream, zeros past
// the end). Up to the first scan the segments are walked as stb's header parser walks them
// (padding between segments skipped); after it, where stb resynchronizes on any 0xFF after
// entropy-coded data it could not finish, every FF C4 is checked as a table (in a valid file
// entropy-coded data never holds one: 0xFF there is followed by 00 or a marker).
bool JpegHuffmanTablesFit(std::span<const uint8_t> b) {
  const size_t n = b.size();
  auto at = [&](size_t i) -> unsigned { return i < n ? b[i] : 0u; };
  auto dht_fits = [&](size_t p) {  // the DHT segment whose marker is at p
    size_t q = p + 4;
    long left = static_cast<long>((at(p + 2) << 8) | at(p + 3)) - 2;
    while (left > 0) {
      const unsigned tc_th = at(q++);
      if ((tc_th >> 4) > 1 || (tc_th & 15) > 3) return true;  // stb refuses it
      unsigned codes = 0;
      for (int i = 0; i < 16; ++i) codes += at(q++);
      if (codes > 256) return false;
      q += codes;
      left -= 17 + static_cast<long>(codes);
    }
    return true;
  };
  size_t p = 2;  // after SOI
  while (p + 1 < n) {
    if (b[p] != 0xFF) {  // padding between segments: stb scans on for the next marker too
      ++p;
      continue;
    }
    const unsigned m = b[p + 1];
    if (m == 0xFF) {  // fill byte
      ++p;
      continue;
    }
    if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) {  // no length
      p += 2;
      continue;
    }
    if (m == 0xD9) return true;  // EOI
    if (m == 0xDA) {             // the first scan: every later FF C4
      for (size_t i = p + 2; i + 1 < n; ++i)
        if (b[i] == 0xFF && b[i + 1] == 0xC4 && !dht_fits(i)) return false;
      return true;
    }
    const size_t len = (at(p + 2) << 8) | at(p + 3);
    if (len < 2) return true;
    if (m == 0xC4 && !dht_fits(p)) return false;
    p += 2 + len;
  }
  return true;
}

// A GIF whose first image's data blocks run past the end (stb would decode zeros).
// The first frame of a GIF as far as PIL's pixels need it: whether its data is cut, its
// rectangle, its transparent index (-1: none) and the colour table it uses.
struct GifFrame {
  bool truncated = true;
  int x = 0, y = 0, w = 0, h = 0;
  int transparent = -1;
  size_t table = 0;  // offset of the colour table (0: none)
  int table_size = 0;  // entries
};

GifFrame GifFirstFrame(std::span<const uint8_t> b) {
  GifFrame f;
  size_t p = 13;
  if (b.size() < p) return f;
  if (b[10] & 0x80) {
    f.table = p;
    f.table_size = 1 << ((b[10] & 7) + 1);
    p += 3u * f.table_size;
  }
  auto skip_blocks = [&]() {
    while (p < b.size() && b[p] != 0) p += 1 + b[p];
    if (p >= b.size()) return false;
    ++p;
    return true;
  };
  while (p < b.size()) {
    if (b[p] == 0x21) {  // extension: label, then data sub-blocks
      // A graphic control extension before the frame: block size 4, flags, delay, index.
      if (p + 7 < b.size() && b[p + 1] == 0xF9 && b[p + 2] == 4)
        f.transparent = (b[p + 3] & 1) ? b[p + 6] : -1;
      p += 2;
      if (!skip_blocks()) return f;
    } else if (b[p] == 0x2C) {  // the first image: descriptor, local table, LZW data
      if (p + 10 > b.size()) return f;
      f.x = b[p + 1] | (b[p + 2] << 8);
      f.y = b[p + 3] | (b[p + 4] << 8);
      f.w = b[p + 5] | (b[p + 6] << 8);
      f.h = b[p + 7] | (b[p + 8] << 8);
      const uint8_t flags = b[p + 9];
      p += 10;
      if (flags & 0x80) {
        f.table = p;
        f.table_size = 1 << ((flags & 7) + 1);
        p += 3u * f.table_size;
      }
      p += 1;  // LZW minimum code size
      f.truncated = !skip_blocks();
      return f;
    } else {
      return f;
    }
  }
  return f;
}

// The PNG without its zero-length IDAT chunks, or an empty vector when it has none. Debian's
// stb_image (2022-09) copies each IDAT's data into a buffer it allocates at the first non-empty
// one: a zero-length IDAT before it is memcpy(NULL, data, 0), undefined behaviour (UBSan; found
// by fuzz_image, fuzz/corpus/image/regress_png_empty_idat). Empty IDATs carry no data, so
// dropping them changes no pixel. The chunks are walked as stb walks them (length, type, data,
// CRC) up to IEND or a chunk that runs past the end, where stb stops too; the rest is kept as is.
// An IDAT that runs past the end is refused here: stb grows its IDAT buffer to the length the
// chunk claims before reading it (a 1 KB file made it allocate 2 GiB: fuzz_image's
// out-of-memory finding, fuzz/corpus/image/regress_png_idat_past_end) and then fails anyway.
std::vector<uint8_t> PngForStb(std::span<const uint8_t> b, const std::string& origin) {
  std::vector<uint8_t> out;
  size_t p = 8;
  size_t copied = 0;  // b[copied, p) is still to be copied
  auto flush = [&](size_t to) {
    if (out.empty()) out.reserve(b.size());
    out.insert(out.end(), b.begin() + static_cast<std::ptrdiff_t>(copied),
               b.begin() + static_cast<std::ptrdiff_t>(to));
  };
  bool dropped = false;
  while (p + 8 <= b.size()) {
    const uint64_t len = (uint64_t{b[p]} << 24) | (uint64_t{b[p + 1]} << 16) |
                         (uint64_t{b[p + 2]} << 8) | b[p + 3];
    const std::string_view type(reinterpret_cast<const char*>(b.data() + p + 4), 4);
    if (type == "IEND") break;
    if (len + 12 > b.size() - p) {  // data or CRC past the end
      if (type == "IDAT") {
        throw Error(ErrorCode::kFormat, origin + ": truncated PNG (an IDAT chunk of " +
                                            std::to_string(len) + " bytes runs past the end)");
      }
      break;
    }
    if (type == "IDAT" && len == 0) {
      flush(p);
      copied = p + 12;
      dropped = true;
    }
    p += 12 + len;
  }
  if (!dropped) return {};
  flush(b.size());
  return out;
}

// A BMP shorter than its header's file size.
bool BmpTruncated(std::span<const uint8_t> b) {
  if (b.size() < 14) return true;
  const uint32_t size = b[2] | (b[3] << 8) | (b[4] << 16) | (uint32_t{b[5]} << 24);
  return size > b.size();
}

Image DecodeStb(std::span<const uint8_t> b, Kind kind, const std::string& origin,
                const DecodeOptions& o) {
  if (b.size() > static_cast<size_t>(INT32_MAX))
    throw Error(ErrorCode::kCapacity, origin + ": file over 2 GiB");
  std::vector<uint8_t> stripped;
  if (kind == Kind::kPng) {
    stripped = PngForStb(b, origin);
    if (!stripped.empty()) b = stripped;
  }
  const int len = static_cast<int>(b.size());
  int w = 0, h = 0, comp = 0;
  if (kind == Kind::kPng && b.size() >= 24) {
    // stb's own size guard fails the header as "unknown image type"; check the IHDR first.
    auto be32 = [&](size_t o) {
      return (int64_t{b[o]} << 24) | (int64_t{b[o + 1]} << 16) | (int64_t{b[o + 2]} << 8) |
             b[o + 3];
    };
    CheckSize(be32(16), be32(20), origin, o);
  }
  // (before stb reads the header: its DHT parser runs there too)
  if (kind == Kind::kJpeg && !JpegHuffmanTablesFit(b))
    throw Error(ErrorCode::kFormat, origin + ": corrupt JPEG (a Huffman table of over 256 codes)");
  if (!stbi_info_from_memory(b.data(), len, &w, &h, &comp)) {
    if (std::string_view(stbi_failure_reason()) == "too large")
      throw Error(ErrorCode::kCapacity, origin + ": the header's size is over the pixel limit");
    throw Error(ErrorCode::kFormat,
                origin + ": truncated or corrupt header (" + stbi_failure_reason() + ")");
  }
  CheckSize(w, h, origin, o);
  if (kind == Kind::kJpeg && JpegTruncated(b))
    throw Error(ErrorCode::kFormat, origin + ": truncated JPEG (no end-of-image marker)");
  GifFrame gif;
  if (kind == Kind::kGif) {
    gif = GifFirstFrame(b);
    if (gif.truncated)
      throw Error(ErrorCode::kFormat, origin + ": truncated GIF (the first frame's data is cut)");
  }
  if (kind == Kind::kBmp && BmpTruncated(b))
    throw Error(ErrorCode::kFormat, origin + ": truncated BMP (shorter than its header says)");
  // 16-bit grayscale PNGs: PIL reads them as 32-bit integers (mode "I", "I;16" in newer Pillow)
  // and convert("RGB") clips each value to 255, where stb keeps the high byte.
  auto decoded = [&](const void* px) {
    if (!px) {
      throw Error(ErrorCode::kFormat,
                  origin + ": truncated or corrupt image data (" + stbi_failure_reason() + ")");
    }
  };
  if (kind == Kind::kPng && b.size() >= 26 && b[24] == 16 && b[25] == 0) {
    uint16_t* px16 = stbi_load_16_from_memory(b.data(), len, &w, &h, &comp, 1);
    decoded(px16);
    Image img;
    img.width = w;
    img.height = h;
    img.rgb.resize(static_cast<size_t>(w) * h * 3);
    for (size_t i = 0; i < static_cast<size_t>(w) * h; ++i)
      img.rgb[3 * i] = img.rgb[3 * i + 1] = img.rgb[3 * i + 2] =
          static_cast<uint8_t>(std::min<uint16_t>(px16[i], 255));
    stbi_image_free(px16);
    return img;
  }
  // A GIF's transparent pixels: stb leaves them (0, 0, 0, 0); PIL's convert("RGB") gives the
  // transparent index's colour in the frame's table. So GIFs with one come as RGBA here.
  const bool gif_transparency = kind == Kind::kGif && gif.transparent >= 0 &&
                                gif.transparent < gif.table_size && gif.table != 0;
  const int want = gif_transparency ? 4 : 3;
  uint8_t* px = stbi_load_from_memory(b.data(), len, &w, &h, &comp, want);
  decoded(px);
  Image img;
  img.width = w;
  img.height = h;
  const size_t pixels = static_cast<size_t>(w) * h;
  if (want == 3) {
    img.rgb.assign(px, px + pixels * 3);
  } else {
    img.rgb.resize(pixels * 3);
    const uint8_t* c = b.data() + gif.table + 3 * static_cast<size_t>(gif.transparent);
    for (int yy = 0; yy < h; ++yy) {
      for (int xx = 0; xx < w; ++xx) {
        const size_t i = static_cast<size_t>(yy) * w + xx;
        const bool in_frame =
            xx >= gif.x && xx < gif.x + gif.w && yy >= gif.y && yy < gif.y + gif.h;
        const uint8_t* src = px[4 * i + 3] == 0 && in_frame ? c : px + 4 * i;
        std::memcpy(&img.rgb[3 * i], src, 3);
      }
    }
  }
  stbi_image_free(px);
  return img;
}

Image DecodeWebp(std::span<const uint8_t> b, const std::string& origin, const DecodeOptions& o) {
#ifdef GEMMA_NO_WEBP
  (void)b;
  (void)o;
  throw Error(
      ErrorCode::kUnsupported,
      origin + ": WebP decoding is not in the WebAssembly build (PNG, JPEG, BMP and GIF are)");
#else
  WebPBitstreamFeatures f;
  const VP8StatusCode st = WebPGetFeatures(b.data(), b.size(), &f);
  if (st == VP8_STATUS_NOT_ENOUGH_DATA)
    throw Error(ErrorCode::kFormat, origin + ": truncated WebP header");
  if (st != VP8_STATUS_OK) throw Error(ErrorCode::kFormat, origin + ": corrupt WebP header");
  if (f.has_animation)
    throw Error(ErrorCode::kUnsupported, origin + ": animated WebP is not supported");
  CheckSize(f.width, f.height, origin, o);
  Image img;
  img.width = f.width;
  img.height = f.height;
  img.rgb.resize(static_cast<size_t>(f.width) * f.height * 3);
  if (!WebPDecodeRGBInto(b.data(), b.size(), img.rgb.data(), img.rgb.size(), f.width * 3)) {
    throw Error(ErrorCode::kFormat, origin + ": truncated or corrupt WebP data");
  }
  return img;
#endif
}

}  // namespace

Image DecodeImage(std::span<const uint8_t> bytes, const std::string& origin,
                  const DecodeOptions& options) {
  if (bytes.empty()) throw Error(ErrorCode::kFormat, origin + ": empty file");
  const Kind kind = Sniff(bytes);
  Image img;
  switch (kind) {
    case Kind::kUnknown:
      throw Error(
          ErrorCode::kUnsupported,
          origin + ": not a PNG, JPEG, WebP, BMP or GIF image (format: " + Unknown(bytes) + ")");
    case Kind::kWebp:
      img = DecodeWebp(bytes, origin, options);
      break;
    default:
      img = DecodeStb(bytes, kind, origin, options);
  }
  return ApplyOrientation(img, ExifOrientation(bytes));
}

Image LoadImageFile(const std::string& path, const DecodeOptions& options) {
  const std::string data = ReadFileToString(path);
  return DecodeImage(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.data()), data.size()), path,
      options);
}

}  // namespace gemma::media
