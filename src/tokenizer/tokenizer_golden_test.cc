// Exact ids against HF tokenizers 0.23, from tools/fixtures/tokenizer_goldens.py (run on the GPU
// machine; see that script for the command). Skips until the golden files exist.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/test_support.h"
#include "tokenizer/tokenizer.h"

namespace gemma {
namespace {

const std::string kDir = GEMMA_SOURCE_DIR "/tests/goldens/tokenizer/";

std::unordered_map<int, std::string> LoadStrings() {
  std::unordered_map<int, std::string> out;
  std::ifstream f(kDir + "strings.jsonl");
  std::string line;
  while (std::getline(f, line)) {
    auto j = nlohmann::json::parse(line);
    out[j["i"].get<int>()] = j["text"].get<std::string>();
  }
  return out;
}

std::string Show(const std::vector<int32_t>& ids) {
  std::ostringstream o;
  for (size_t i = 0; i < ids.size() && i < 40; ++i) o << (i ? "," : "") << ids[i];
  if (ids.size() > 40) o << ",... (" << ids.size() << " ids)";
  return o.str();
}

// Compares every row of an ids_*.jsonl file; returns the number of rows checked.
int CheckIds(const Tokenizer& tok, const std::string& file, Tokenizer::SpecialText special) {
  const auto strings = LoadStrings();
  std::ifstream f(kDir + file);
  std::string line;
  int rows = 0;
  int bad = 0;
  while (std::getline(f, line)) {
    auto j = nlohmann::json::parse(line);
    int index = j["i"].get<int>();
    auto it = strings.find(index);
    if (it == strings.end()) {
      ADD_FAILURE() << file << ": string #" << index << " not in strings.jsonl";
      ++bad;
      continue;
    }
    std::vector<int32_t> want = j["ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> got = tok.Encode(it->second, special);
    if (got != want && ++bad <= 10) {
      size_t k = 0;
      while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
      ADD_FAILURE() << file << ": string #" << index << " differs at id " << k << "\n  want "
                    << Show(std::vector<int32_t>(want.begin() + k, want.end())) << "\n  got  "
                    << Show(std::vector<int32_t>(got.begin() + k, got.end()));
    }
    // HF decode(skip_special_tokens=False); equal to the input unless it had '▁'.
    std::string hf_decoded = j["rt"].get<bool>() ? it->second : j["dec"].get<std::string>();
    std::string decoded;
    try {
      decoded = tok.Decode(want);
    } catch (const Error& e) {
      decoded = std::string("<") + e.what() + ">";
    }
    if (decoded != hf_decoded && ++bad <= 10) {
      ADD_FAILURE() << file << ": string #" << index << " decodes differently from HF";
    }
    ++rows;
  }
  EXPECT_EQ(bad, 0) << file << ": " << bad << " of " << rows << " rows differ";
  return rows;
}

uint64_t Fnv(const std::string& s, uint64_t h) {
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

void CheckMeta(const Tokenizer& tok, const std::string& file) {
  std::ifstream f(kDir + file);
  auto meta = nlohmann::json::parse(f);
  EXPECT_EQ(tok.vocab_size(), meta["vocab_size"].get<int32_t>()) << file;
  std::vector<int32_t> specials;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (tok.IsSpecial(id)) specials.push_back(id);
  }
  EXPECT_EQ(specials, meta["special_ids"].get<std::vector<int32_t>>()) << file;
  uint64_t h_piece = 0xcbf29ce484222325ull;
  uint64_t h_dec = 0xcbf29ce484222325ull;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    std::string prefix = std::to_string(id) + "\t";
    h_piece = Fnv(prefix + tok.Piece(id) + "\n", h_piece);
    const std::string& bytes = tok.TokenBytes(id);
    const std::string& piece = tok.Piece(id);
    bool high_byte_token = piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 &&
                           bytes.size() == 1 && static_cast<unsigned char>(bytes[0]) >= 0x80;
    if (high_byte_token) continue;
    int32_t one[1] = {id};
    h_dec = Fnv(prefix + tok.Decode(one) + "\n", h_dec);
  }
  char buf[17];
  snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h_piece));
  EXPECT_EQ(buf, meta["fnv1a64_pieces"].get<std::string>()) << file << ": id_to_token differs";
  snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h_dec));
  EXPECT_EQ(buf, meta["fnv1a64_decode_each"].get<std::string>()) << file << ": decode differs";
}

bool Have(const std::string& file) { return std::filesystem::exists(kDir + file); }

constexpr char kNoGoldens[] =
    " not found: run tools/fixtures/tokenizer_goldens.py on the GPU machine (see its docstring)";

TEST(TokenizerGolden, Gemma3Ids) {
  if (!Have("ids_gemma3.jsonl")) GTEST_SKIP() << "ids_gemma3.jsonl" << kNoGoldens;
  if (!testing::HaveGemma3Tokenizer()) GTEST_SKIP() << testing::kNoTokenizer;
  EXPECT_GT(
      CheckIds(testing::Gemma3TestTokenizer(), "ids_gemma3.jsonl", Tokenizer::SpecialText::kMatch),
      2000);
}

TEST(TokenizerGolden, Gemma3SpecialAsText) {
  if (!Have("ids_gemma3_astext.jsonl")) GTEST_SKIP() << "ids_gemma3_astext.jsonl" << kNoGoldens;
  if (!testing::HaveGemma3Tokenizer()) GTEST_SKIP() << testing::kNoTokenizer;
  EXPECT_GT(CheckIds(testing::Gemma3TestTokenizer(), "ids_gemma3_astext.jsonl",
                     Tokenizer::SpecialText::kAsText),
            100);
}

TEST(TokenizerGolden, Gemma3Meta) {
  if (!Have("meta_gemma3.json")) GTEST_SKIP() << "meta_gemma3.json" << kNoGoldens;
  if (!testing::HaveGemma3Tokenizer()) GTEST_SKIP() << testing::kNoTokenizer;
  CheckMeta(testing::Gemma3TestTokenizer(), "meta_gemma3.json");
}

TEST(TokenizerGolden, Gemma4Ids) {
  if (!Have("ids_gemma4.jsonl")) GTEST_SKIP() << "ids_gemma4.jsonl" << kNoGoldens;
  if (!testing::HaveGemma3Tokenizer()) GTEST_SKIP() << testing::kNoTokenizer;
  EXPECT_GT(
      CheckIds(testing::Gemma4TestTokenizer(), "ids_gemma4.jsonl", Tokenizer::SpecialText::kMatch),
      500);
}

TEST(TokenizerGolden, Gemma4Meta) {
  if (!Have("meta_gemma4.json")) GTEST_SKIP() << "meta_gemma4.json" << kNoGoldens;
  if (!testing::HaveGemma3Tokenizer()) GTEST_SKIP() << testing::kNoTokenizer;
  CheckMeta(testing::Gemma4TestTokenizer(), "meta_gemma4.json");
}

}  // namespace
}  // namespace gemma
