// SHA-256 (FIPS 180-4) for identities: the chat template's text, images' and audio clips' cache
// keys. Portable C++ so every build has it, the WebAssembly one included; large downloads are
// hashed by the hub room with OpenSSL instead (its SHA-NI path is several times faster).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gemma {

class Sha256 {
 public:
  using Digest = std::array<uint8_t, 32>;
  Sha256();
  void Update(const void* data, size_t bytes);
  // The digest of everything updated so far; the object is then spent (construct a new one).
  Digest Final();

  static Digest Of(std::string_view data);
  static std::string Hex(const Digest& d);  // lower case

 private:
  void Block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  size_t buffered_ = 0;
  uint64_t total_ = 0;  // bytes
};

}  // namespace gemma
