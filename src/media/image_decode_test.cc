// Decoders against an independent decoder: the expected pixels are PIL 12.3's, through
// transformers 5.17's load_image (tools/fixtures/vision_goldens.py, tests/goldens/vision).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gemma/error.h"
#include "media/image.h"

#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

namespace gemma::media {
namespace {

const std::string kDir = std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/vision/";

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f) << path;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

ErrorCode CodeOf(const std::vector<uint8_t>& bytes, const DecodeOptions& o = {}) {
  try {
    DecodeImage(bytes, "test", o);
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "decoded without an error";
  return ErrorCode::kInternal;
}

std::vector<uint8_t> Png(int w, int h) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>((i * 37) ^ (i >> 5));
  std::vector<uint8_t> out;
  stbi_write_png_to_func(
      [](void* ctx, void* data, int size) {
        auto* o = static_cast<std::vector<uint8_t>*>(ctx);
        o->insert(o->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
      },
      &out, w, h, 3, px.data(), w * 3);
  return out;
}

void SetPngSize(std::vector<uint8_t>* png, uint32_t w, uint32_t h) {
  for (int i = 0; i < 4; ++i) {
    (*png)[16 + i] = static_cast<uint8_t>(w >> (24 - 8 * i));
    (*png)[20 + i] = static_cast<uint8_t>(h >> (24 - 8 * i));
  }
}

struct Tolerance {
  double mean;
  int max;
};

TEST(ImageDecode, MatchesPil) {
  const nlohmann::json g = nlohmann::json::parse(ReadBytes(kDir + "goldens.json"));
  int checked = 0;
  for (auto& [name, info] : g["decoded"].items()) {
    const std::string golden = kDir + "decoded/" + name + ".rgb";
    if (name[0] == '_' || !std::ifstream(golden)) continue;
    SCOPED_TRACE(name);
    const Image img = LoadImageFile(kDir + "images/" + name);
    ASSERT_EQ(img.width, info["width"].get<int>());
    ASSERT_EQ(img.height, info["height"].get<int>());
    const std::vector<uint8_t> want = ReadBytes(golden);
    ASSERT_EQ(img.rgb.size(), want.size());
    // JPEG decoders differ in IDCT and chroma upsampling (stb_image vs libjpeg-turbo): close, not
    // equal. Everything else is lossless or the same library (libwebp) and must match exactly.
    const bool jpeg = name.ends_with(".jpg");
    double sum = 0;
    int mx = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const int d = std::abs(int{img.rgb[i]} - int{want[i]});
      sum += d;
      mx = std::max(mx, d);
    }
    const Tolerance tol = jpeg ? Tolerance{1.5, 24} : Tolerance{0, 0};
    EXPECT_LE(sum / want.size(), tol.mean);
    EXPECT_LE(mx, tol.max);
    ++checked;
  }
  EXPECT_GE(checked, 14);
}

// The files stb_image reads differently from PIL (tools/fixtures/decode_goldens.py): 16-bit PNGs
// (gray, gray + alpha, RGB, RGBA) and palette transparency (GIF transparent index, PNG tRNS).
TEST(ImageDecode, SixteenBitAndTransparencyMatchPil) {
  const nlohmann::json g = nlohmann::json::parse(ReadBytes(kDir + "decode.json"));
  ASSERT_GE(g["images"].size(), 8u);
  for (auto& [name, info] : g["images"].items()) {
    SCOPED_TRACE(name + " (PIL mode " + info["pil_mode"].get<std::string>() + ")");
    const Image img = LoadImageFile(kDir + "images/" + name);
    ASSERT_EQ(img.width, info["width"].get<int>());
    ASSERT_EQ(img.height, info["height"].get<int>());
    const std::vector<uint8_t> want = ReadBytes(kDir + "decoded/" + name + ".rgb");
    ASSERT_EQ(img.rgb.size(), want.size());
    size_t differ = 0, first = want.size();
    for (size_t i = 0; i < want.size(); ++i) {
      if (img.rgb[i] != want[i] && differ++ == 0) first = i;
    }
    EXPECT_EQ(differ, 0u) << "first at byte " << first << ": " << int{img.rgb[first]} << " vs PIL "
                          << int{want[first]};
  }
}

TEST(ImageDecode, ExifOrientationReadFromEveryContainer) {
  EXPECT_EQ(ExifOrientation(ReadBytes(kDir + "images/exif6_80x60.png")), 6);
  EXPECT_EQ(ExifOrientation(ReadBytes(kDir + "images/exif3_50x30.png")), 3);
  EXPECT_EQ(ExifOrientation(ReadBytes(kDir + "images/exif8_64x40.jpg")), 8);
  EXPECT_EQ(ExifOrientation(ReadBytes(kDir + "images/photo_160x120.jpg")), 1);
  // Every orientation is a permutation whose inverse composes to the identity (PIL's transposes).
  Image a;
  a.width = 3;
  a.height = 2;
  for (int i = 0; i < 18; ++i) a.rgb.push_back(static_cast<uint8_t>(i));
  const int inverse[9] = {0, 1, 2, 3, 4, 5, 8, 7, 6};
  for (int o = 1; o <= 8; ++o) {
    const Image b = ApplyOrientation(ApplyOrientation(a, o), inverse[o]);
    EXPECT_EQ(b.width, 3);
    EXPECT_EQ(b.rgb, a.rgb) << o;
  }
}

// A zero-length IDAT before the first one with data was memcpy(NULL, data, 0) inside stb_image
// (UBSan, fuzz_image: fuzz/corpus/image/regress_png_empty_idat). Empty IDATs are valid PNG and
// carry no data: the image decodes to the same pixels as without them.
TEST(ImageDecode, EmptyIdatChunksChangeNothing) {
  const std::vector<uint8_t> png = Png(64, 48);
  // An empty IDAT (CRC-32 of "IDAT" is 0x35AF061E) before the first IDAT and after the last.
  const std::vector<uint8_t> empty = {0, 0, 0, 0, 'I', 'D', 'A', 'T', 0x35, 0xAF, 0x06, 0x1E};
  size_t idat = 8;
  while (std::string(png.begin() + idat + 4, png.begin() + idat + 8) != "IDAT") {
    idat += 12 + ((size_t{png[idat + 2]} << 8) | png[idat + 3]);
  }
  const size_t len = (size_t{png[idat]} << 24) | (size_t{png[idat + 1]} << 16) |
                     (size_t{png[idat + 2]} << 8) | png[idat + 3];
  std::vector<uint8_t> with = png;
  with.insert(with.begin() + static_cast<std::ptrdiff_t>(idat + 12 + len), empty.begin(), empty.end());
  with.insert(with.begin() + static_cast<std::ptrdiff_t>(idat), empty.begin(), empty.end());
  with.insert(with.begin() + static_cast<std::ptrdiff_t>(idat), empty.begin(), empty.end());
  const Image a = DecodeImage(png, "png");
  const Image b = DecodeImage(with, "with empty IDATs");
  EXPECT_EQ(b.width, a.width);
  EXPECT_EQ(b.height, a.height);
  EXPECT_EQ(b.rgb, a.rgb);
  // Only empty IDATs: no image data, a typed error.
  std::vector<uint8_t> none(png.begin(), png.begin() + static_cast<std::ptrdiff_t>(idat));
  none.insert(none.end(), empty.begin(), empty.end());
  none.insert(none.end(), png.begin() + static_cast<std::ptrdiff_t>(idat + 12 + len), png.end());
  EXPECT_EQ(CodeOf(none), ErrorCode::kFormat);
  // An IDAT whose length runs past the end: stb grew its buffer to the claimed length before
  // reading (2 GiB for a 1 KB file: fuzz_image's out-of-memory finding); refused first. The
  // second claim leaves the data inside the file and its CRC past the end.
  for (const uint32_t claim : {0x7FFFFFF0u, static_cast<uint32_t>(png.size() - idat - 11)}) {
    std::vector<uint8_t> cut = png;
    for (int i = 0; i < 4; ++i) cut[idat + i] = static_cast<uint8_t>(claim >> (24 - 8 * i));
    try {
      DecodeImage(cut, "cut");
      ADD_FAILURE() << "decoded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kFormat);
      EXPECT_NE(std::string(e.what()).find("IDAT chunk of " + std::to_string(claim)),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(ImageDecode, OneByOneAndSmallestSizes) {
  const Image one = DecodeImage(Png(1, 1), "1x1");
  EXPECT_EQ(one.width, 1);
  EXPECT_EQ(one.height, 1);
  EXPECT_EQ(one.rgb.size(), 3u);
}

TEST(ImageDecode, BadInputsAreTypedErrors) {
  EXPECT_EQ(CodeOf({}), ErrorCode::kFormat);                                   // empty
  EXPECT_EQ(CodeOf({'h', 'e', 'l', 'l', 'o'}), ErrorCode::kUnsupported);       // not an image
  EXPECT_EQ(CodeOf({'I', 'I', '*', 0, 8, 0, 0, 0}), ErrorCode::kUnsupported);  // TIFF
  try {
    DecodeImage(std::vector<uint8_t>{'I', 'I', '*', 0, 8, 0, 0, 0}, "x.tif");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("TIFF"), std::string::npos) << e.what();
  }

  const std::vector<uint8_t> png = Png(64, 48);
  // Truncated header, truncated data, corrupted data mid-stream.
  EXPECT_EQ(CodeOf({png.begin(), png.begin() + 20}), ErrorCode::kFormat);
  EXPECT_EQ(CodeOf({png.begin(), png.begin() + png.size() / 2}), ErrorCode::kFormat);
  std::vector<uint8_t> bad = png;
  for (size_t i = 60; i < 90 && i < bad.size(); ++i) bad[i] = 0xFF;
  EXPECT_EQ(CodeOf(bad), ErrorCode::kFormat);
  // Zero size, and a header claiming 20,000 x 20,000: refused from the header by the limit.
  std::vector<uint8_t> zero = png;
  SetPngSize(&zero, 0, 48);
  EXPECT_EQ(CodeOf(zero), ErrorCode::kFormat);
  std::vector<uint8_t> huge = png;
  SetPngSize(&huge, 20000, 20000);
  EXPECT_EQ(CodeOf(huge), ErrorCode::kCapacity);
  EXPECT_EQ(CodeOf(png, {.max_pixels = 64 * 48 - 1}), ErrorCode::kCapacity);
  // Dimensions whose product overflows 64 bits (found by fuzz_image under UBSan: 3,937,849,463 x
  // 3,543,246,266 was undefined behaviour in the limit check; fuzz/corpus/image/regress_png_vast
  // replays it).
  std::vector<uint8_t> vast = png;
  SetPngSize(&vast, 0xEAB6D077u, 0xD331A5BAu);
  EXPECT_EQ(CodeOf(vast), ErrorCode::kCapacity);

  for (const char* name : {"photo_160x120.jpg", "anim_80x60.gif", "plain_50x40.bmp",
                           "lossless_100x70.webp", "lossy_100x70.webp"}) {
    SCOPED_TRACE(name);
    const std::vector<uint8_t> b = ReadBytes(kDir + "images/" + name);
    EXPECT_EQ(CodeOf({b.begin(), b.begin() + 12}), ErrorCode::kFormat);
    EXPECT_EQ(CodeOf({b.begin(), b.begin() + b.size() / 4}), ErrorCode::kFormat);
  }
  // A JPEG header claiming a huge size.
  std::vector<uint8_t> jpg = ReadBytes(kDir + "images/photo_160x120.jpg");
  for (size_t i = 2; i + 9 < jpg.size(); ++i) {
    if (jpg[i] == 0xFF && (jpg[i + 1] == 0xC0 || jpg[i + 1] == 0xC2)) {
      jpg[i + 5] = 0x4E, jpg[i + 6] = 0x20, jpg[i + 7] = 0x4E, jpg[i + 8] = 0x20;  // 20000x20000
      break;
    }
  }
  EXPECT_EQ(CodeOf(jpg), ErrorCode::kCapacity);
  // A Huffman table whose code counts sum past 256 (Debian's stb_image writes past its tables:
  // found by fuzz_image under UBSan; fuzz/corpus/image/regress_jpeg_dht replays it).
  for (const char* name : {"photo_160x120.jpg", "gray_40x30.jpg", "exif8_64x40.jpg"}) {
    std::vector<uint8_t> dht = ReadBytes(kDir + "images/" + name);
    bool found = false;
    for (size_t i = 2; i + 21 < dht.size() && !found; ++i) {
      if (dht[i] == 0xFF && dht[i + 1] == 0xC4) {
        for (int k = 0; k < 16; ++k) dht[i + 5 + k] = 0xFF;  // 16 x 255 codes
        found = true;
      }
    }
    ASSERT_TRUE(found) << name;
    // ... and the valid file with such a table after its scan, before the end-of-image marker
    // (stb reads tables between scans).
    std::vector<uint8_t> late = ReadBytes(kDir + "images/" + name);
    ASSERT_GE(late.size(), 2u);
    std::vector<uint8_t> seg = {0xFF, 0xC4, 0x00, 0x13, 0x00};
    seg.insert(seg.end(), 16, 0xFF);
    late.insert(late.end() - 2, seg.begin(), seg.end());
    // Refused by the table check, before stb parses anything (stb would fail later, after the
    // out-of-bounds writes).
    for (const std::vector<uint8_t>* bad : {&dht, &late}) {
      try {
        DecodeImage(*bad, "test");
        ADD_FAILURE() << name << " decoded";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kFormat) << name;
        EXPECT_NE(std::string(e.what()).find("Huffman table of over 256 codes"), std::string::npos)
            << name << ": " << e.what();
      }
    }
  }
  EXPECT_THROW(LoadImageFile("/nonexistent/cat.png"), Error);
}

}  // namespace
}  // namespace gemma::media

namespace gemma::media {
namespace {

TEST(DataUrl, Base64AndDataUrlsDecodeOthersAreRefused) {
  const std::vector<uint8_t> want = {'h', 'e', 'l', 'l', 'o', '!'};
  EXPECT_EQ(DecodeBase64("aGVsbG8h", "t"), want);
  EXPECT_EQ(DecodeBase64("aGVs\nbG8h", "t"), want);
  EXPECT_EQ(DecodeBase64("aGVsbA==", "t"), (std::vector<uint8_t>{'h', 'e', 'l', 'l'}));
  EXPECT_EQ(DecodeBase64("aGVsbA", "t"), (std::vector<uint8_t>{'h', 'e', 'l', 'l'}));  // unpadded
  EXPECT_EQ(DecodeDataUrl("data:image/png;base64,aGVsbG8h", "t"), want);
  EXPECT_EQ(DecodeDataUrl("data:,hello!", "t"), want);
  EXPECT_THROW(DecodeBase64("aGV*bG8h", "t"), Error);
  EXPECT_THROW(DecodeBase64("a", "t"), Error);
  EXPECT_THROW(DecodeDataUrl("https://example.com/cat.png", "t"), Error);
  EXPECT_THROW(DecodeDataUrl("data:image/png;base64", "t"), Error);
  // A real image through a data URL equals the file.
  std::ifstream f(kDir + "images/plain_50x40.bmp", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), {});
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string b64;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = uint8_t(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= uint8_t(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) v |= uint8_t(bytes[i + 2]);
    b64 += k[v >> 18];
    b64 += k[(v >> 12) & 63];
    b64 += i + 1 < bytes.size() ? k[(v >> 6) & 63] : '=';
    b64 += i + 2 < bytes.size() ? k[v & 63] : '=';
  }
  const Image a = DecodeImage(DecodeDataUrl("data:image/bmp;base64," + b64, "t"), "t");
  const Image b = LoadImageFile(kDir + "images/plain_50x40.bmp");
  EXPECT_EQ(a.rgb, b.rgb);
}

}  // namespace
}  // namespace gemma::media
