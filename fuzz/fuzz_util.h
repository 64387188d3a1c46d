// Shared helpers of the libFuzzer targets (fuzz/README.md).
//
// Convention: a target catches only gemma::Error (the typed error every bad input must raise).
// Anything else escaping (std::exception from a library, an assert, a sanitizer report) is a
// finding: libFuzzer stops and writes the input that caused it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace gemma::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Printable form of arbitrary bytes for messages: \xHH for anything outside printable ASCII.
inline std::string Escape(std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// An invariant the target checks beyond "no crash": prints what failed and aborts, so libFuzzer
// records the input as a crash.
[[noreturn]] inline void Violated(const std::string& what) {
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what.c_str());
  std::abort();
}

#define GEMMA_FUZZ_CHECK(cond, what)                                          \
  do {                                                                        \
    if (!(cond)) ::gemma::fuzz::Violated(std::string(#cond " :: ") + (what)); \
  } while (0)

}  // namespace gemma::fuzz
