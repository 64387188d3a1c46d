// EXIF orientation: find the TIFF block in a JPEG APP1 segment, a PNG eXIf chunk or a WebP EXIF
// chunk, read IFD0's tag 0x0112, and transpose the pixels as PIL's exif_transpose does.
#include <cstring>

#include "media/image.h"

namespace gemma::media {
namespace {

uint32_t Be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}
uint32_t Le32(const uint8_t* p) {
  return (uint32_t{p[3]} << 24) | (uint32_t{p[2]} << 16) | (uint32_t{p[1]} << 8) | p[0];
}

// Orientation from a TIFF header + IFD0; 1 when absent or malformed.
int TiffOrientation(std::span<const uint8_t> t) {
  if (t.size() >= 6 && std::memcmp(t.data(), "Exif\0\0", 6) == 0) t = t.subspan(6);
  if (t.size() < 8) return 1;
  const bool le = t[0] == 'I' && t[1] == 'I';
  if (!le && !(t[0] == 'M' && t[1] == 'M')) return 1;
  auto u16 = [&](size_t o) -> uint32_t {
    return le ? (t[o] | (t[o + 1] << 8)) : ((t[o] << 8) | t[o + 1]);
  };
  auto u32 = [&](size_t o) -> uint32_t { return le ? Le32(&t[o]) : Be32(&t[o]); };
  if (u16(2) != 42) return 1;
  const uint64_t ifd = u32(4);
  if (ifd + 2 > t.size()) return 1;
  const uint32_t n = u16(ifd);
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t e = ifd + 2 + 12ull * i;
    if (e + 12 > t.size()) return 1;
    if (u16(e) != 0x0112) continue;
    const uint32_t type = u16(e + 2);
    const uint32_t v = type == 3 ? u16(e + 8) : type == 4 ? u32(e + 8) : 0;
    return v >= 1 && v <= 8 ? static_cast<int>(v) : 1;
  }
  return 1;
}

}  // namespace

int ExifOrientation(std::span<const uint8_t> b) {
  const size_t n = b.size();
  if (n >= 4 && b[0] == 0xFF && b[1] == 0xD8) {  // JPEG: walk the marker segments before SOS
    size_t p = 2;
    while (p + 4 <= n && b[p] == 0xFF) {
      const uint8_t m = b[p + 1];
      if (m == 0xDA || m == 0xD9) break;
      if (m == 0xFF) {  // fill byte
        ++p;
        continue;
      }
      const size_t len = (size_t{b[p + 2]} << 8) | b[p + 3];
      if (len < 2 || p + 2 + len > n) break;
      if (m == 0xE1 && len >= 8 && std::memcmp(&b[p + 4], "Exif\0\0", 6) == 0)
        return TiffOrientation(b.subspan(p + 4, len - 2));
      p += 2 + len;
    }
    return 1;
  }
  if (n >= 8 && std::memcmp(b.data(), "\x89PNG\r\n\x1a\n", 8) == 0) {
    size_t p = 8;
    while (p + 12 <= n) {
      const uint64_t len = Be32(&b[p]);
      if (p + 12 + len > n) break;
      if (std::memcmp(&b[p + 4], "eXIf", 4) == 0) return TiffOrientation(b.subspan(p + 8, len));
      if (std::memcmp(&b[p + 4], "IDAT", 4) == 0 || std::memcmp(&b[p + 4], "IEND", 4) == 0) {
        // eXIf may also follow the image data; keep walking.
      }
      p += 12 + len;
    }
    return 1;
  }
  if (n >= 12 && std::memcmp(b.data(), "RIFF", 4) == 0 && std::memcmp(&b[8], "WEBP", 4) == 0) {
    size_t p = 12;
    while (p + 8 <= n) {
      const uint64_t len = Le32(&b[p + 4]);
      if (p + 8 + len > n) break;
      if (std::memcmp(&b[p], "EXIF", 4) == 0) return TiffOrientation(b.subspan(p + 8, len));
      p += 8 + len + (len & 1);
    }
  }
  return 1;
}

Image ApplyOrientation(const Image& in, int o) {
  if (o <= 1 || o > 8) return in;
  const int W = in.width, H = in.height;
  const bool swap = o >= 5;
  Image out;
  out.width = swap ? H : W;
  out.height = swap ? W : H;
  out.rgb.resize(in.rgb.size());
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      int sx = x, sy = y;
      switch (o) {
        case 2:
          sx = W - 1 - x;
          break;  // FLIP_LEFT_RIGHT
        case 3:
          sx = W - 1 - x;
          sy = H - 1 - y;
          break;  // ROTATE_180
        case 4:
          sy = H - 1 - y;
          break;  // FLIP_TOP_BOTTOM
        case 5:
          sx = y;
          sy = x;
          break;  // TRANSPOSE
        case 6:
          sx = y;
          sy = H - 1 - x;
          break;  // ROTATE_270 (clockwise)
        case 7:
          sx = W - 1 - y;
          sy = H - 1 - x;
          break;  // TRANSVERSE
        case 8:
          sx = W - 1 - y;
          sy = x;
          break;  // ROTATE_90 (counter-clockwise)
      }
      std::memcpy(&out.rgb[(static_cast<size_t>(y) * out.width + x) * 3],
                  &in.rgb[(static_cast<size_t>(sy) * W + sx) * 3], 3);
    }
  }
  return out;
}

}  // namespace gemma::media
