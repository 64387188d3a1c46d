// Format-independent helpers of the media room (every build, the WebAssembly one included):
// base64, data: URLs, video frame timestamps.
#include <algorithm>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "gemma/error.h"
#include "media/image.h"
#include "media/video.h"

namespace gemma::media {

std::string EncodeBase64(std::span<const uint8_t> bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t v = uint32_t{bytes[i]} << 16;
    if (n > 1) v |= uint32_t{bytes[i + 1]} << 8;
    if (n > 2) v |= bytes[i + 2];
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += n > 1 ? kAlphabet[(v >> 6) & 63] : '=';
    out += n > 2 ? kAlphabet[v & 63] : '=';
  }
  return out;
}

std::vector<uint8_t> DecodeBase64(const std::string& text, const std::string& origin) {
  std::string clean;
  clean.reserve(text.size());
  for (char c : text) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '+' || c == '/' || c == '=' || c == '-' || c == '_';
    if (!ok) throw Error(ErrorCode::kInvalidArgument, origin + ": not valid base64");
    clean.push_back(c == '-' ? '+' : c == '_' ? '/' : c);
  }
  while (!clean.empty() && clean.back() == '=') clean.pop_back();
  if (clean.size() % 4 == 1)
    throw Error(ErrorCode::kInvalidArgument, origin + ": not valid base64");
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> out;
  out.reserve(clean.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : clean) {
    const size_t v = kAlphabet.find(c);
    if (v == std::string::npos)
      throw Error(ErrorCode::kInvalidArgument, origin + ": not valid base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>(acc >> bits));
    }
  }
  return out;
}

std::vector<uint8_t> DecodeDataUrl(const std::string& url, const std::string& origin) {
  if (url.rfind("data:", 0) != 0) {
    throw Error(ErrorCode::kInvalidArgument,
                origin +
                    ": only data: URLs are accepted (remote URLs are not fetched; pass a "
                    "local file as \"path\")");
  }
  const size_t comma = url.find(',');
  if (comma == std::string::npos)
    throw Error(ErrorCode::kInvalidArgument, origin + ": data URL without ','");
  const std::string meta = url.substr(5, comma - 5);
  const std::string data = url.substr(comma + 1);
  if (meta.size() >= 7 && meta.compare(meta.size() - 7, 7, ";base64") == 0)
    return DecodeBase64(data, origin);
  return std::vector<uint8_t>(data.begin(), data.end());
}

std::string VideoTimestamp(double seconds) {
  const int s = static_cast<int>(seconds);
  char b[32];
  std::snprintf(b, sizeof b, "%02d:%02d", s / 60, s % 60);
  return b;
}

}  // namespace gemma::media
