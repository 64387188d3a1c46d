// Image files -> RGB8 pixels, as transformers' load_image sees them (PIL decode, EXIF orientation
// applied with ImageOps.exif_transpose, then convert("RGB"): alpha is dropped, not composited;
// grayscale and palette images expand to RGB; a GIF gives its first frame).
//
// Decoders: Debian's stb_image (PNG, JPEG, BMP, GIF) and libwebp (WebP). Every failure is a
// gemma::Error: kFormat for truncated or corrupt bytes (a JPEG without its end-of-image marker
// counts as truncated, as PIL refuses it), kCapacity when the header's pixel count exceeds the
// limit (checked from the header, before any pixel buffer is allocated), kUnsupported for other
// formats (TIFF, HEIC, AVIF, animated WebP, ...), kIo for unreadable files.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gemma::media {

struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // row-major, 3 bytes per pixel
};

struct DecodeOptions {
  int64_t max_pixels = int64_t{1} << 26;  // 67,108,864 (8192 x 8192); the header is checked first
};

// `origin` names the input in error messages (a path, "message 2 part 1", ...).
Image DecodeImage(std::span<const uint8_t> bytes, const std::string& origin,
                  const DecodeOptions& options = {});
Image LoadImageFile(const std::string& path, const DecodeOptions& options = {});

// Base64 (RFC 4648, padding optional, whitespace ignored) -> bytes; Error(kInvalidArgument) naming
// `origin` for invalid text.
std::vector<uint8_t> DecodeBase64(const std::string& text, const std::string& origin);
// Bytes -> base64 (RFC 4648, padded).
std::string EncodeBase64(std::span<const uint8_t> bytes);
// "data:[<mime>][;base64],<data>" -> the bytes; Error(kInvalidArgument) for anything else (remote
// URLs are not fetched).
std::vector<uint8_t> DecodeDataUrl(const std::string& url, const std::string& origin);

// The EXIF orientation (1..8) of a JPEG (APP1), PNG (eXIf) or WebP (EXIF chunk); 1 when absent or
// unreadable (a broken EXIF block never fails the image, as PIL ignores it).
int ExifOrientation(std::span<const uint8_t> bytes);
// Applies an EXIF orientation as PIL's ImageOps.exif_transpose does.
Image ApplyOrientation(const Image& in, int orientation);

}  // namespace gemma::media
