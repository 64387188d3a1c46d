// Image files through the decoders (stb_image, libwebp), EXIF orientation and the image processor:
// any bytes decode to a consistent RGB image (its size the pixel count times three) that
// preprocesses into whole patches, or raise gemma::Error; the same bytes as base64 and a data URL
// give the same bytes back.
#include <string>

#include "fuzz_util.h"
#include "gemma/error.h"
#include "media/image.h"
#include "media/image_processor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  (void)gemma::media::ExifOrientation(bytes);  // never fails
  try {
    // A small pixel limit keeps a fuzzed header that promises a huge image cheap.
    const gemma::media::Image im = gemma::media::DecodeImage(bytes, "fuzz", {.max_pixels = 1 << 20});
    GEMMA_FUZZ_CHECK(im.width > 0 && im.height > 0, "empty image without an error");
    GEMMA_FUZZ_CHECK(im.rgb.size() == static_cast<size_t>(im.width) * im.height * 3,
                     "pixel buffer of the wrong size");
    const gemma::media::PatchedImage p = gemma::media::PreprocessImage(im, 70);
    GEMMA_FUZZ_CHECK(p.soft_tokens > 0 && p.soft_tokens <= 70, "soft tokens outside the budget");
  } catch (const gemma::Error&) {
  }
  // Base64 round trip of the bytes in a data URL.
  static const char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string b64;
  for (size_t i = 0; i < size; i += 3) {
    const uint32_t v = (uint32_t{data[i]} << 16) | (i + 1 < size ? uint32_t{data[i + 1]} << 8 : 0) |
                       (i + 2 < size ? uint32_t{data[i + 2]} : 0);
    b64 += kAlphabet[(v >> 18) & 63];
    b64 += kAlphabet[(v >> 12) & 63];
    b64 += i + 1 < size ? kAlphabet[(v >> 6) & 63] : '=';
    b64 += i + 2 < size ? kAlphabet[v & 63] : '=';
  }
  try {
    const std::vector<uint8_t> back =
        gemma::media::DecodeDataUrl("data:image/png;base64," + b64, "fuzz");
    GEMMA_FUZZ_CHECK(back == std::vector<uint8_t>(data, data + size), "data URL round trip");
  } catch (const gemma::Error&) {
    GEMMA_FUZZ_CHECK(size == 0, "a valid data URL refused");
  }
  // And the raw bytes as text: a typed error or some bytes, never a crash.
  try {
    (void)gemma::media::DecodeDataUrl(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const gemma::Error&) {
  }
  return 0;
}
