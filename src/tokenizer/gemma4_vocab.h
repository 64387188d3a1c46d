// The Gemma 4 special tokens (docs/gemma4-spec.md section 5) and a Gemma 4 test variant of the
// vocabulary derived from the Gemma 3 tokenizer.json, for tests that need Gemma 4 ids before a
// real Gemma 4 tokenizer.json is at hand. The variant is the Gemma 3 BPE vocab and merges with the
// Gemma 4 special tokens at their Gemma 4 ids; ordinary text tokenizes as Gemma 3 does.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace gemma {

struct SpecialTokenId {
  int32_t id;
  std::string_view text;
};

inline constexpr std::array<SpecialTokenId, 19> kGemma4SpecialTokens = {{
    {46, "<|tool>"},          {47, "<tool|>"},          {48, "<|tool_call>"},  {49, "<tool_call|>"},
    {50, "<|tool_response>"}, {51, "<tool_response|>"}, {52, "<|\"|>"},        {98, "<|think|>"},
    {100, "<|channel>"},      {101, "<channel|>"},      {105, "<|turn>"},      {106, "<turn|>"},
    {255999, "<|image>"},     {258882, "<image|>"},     {256000, "<|audio>"},  {258883, "<audio|>"},
    {258880, "<|image|>"},    {258881, "<|audio|>"},    {258884, "<|video|>"},
}};
inline constexpr int32_t kGemma4VocabSize = 262144;

// Rewrites a Gemma 3 tokenizer.json into the Gemma 4 test variant: each kGemma4SpecialTokens
// entry replaces the piece at its id in model.vocab and in added_tokens (marked special), and added
// tokens at ids >= kGemma4VocabSize (Gemma 3's <image_soft_token>) are dropped, so the variant has
// exactly 262,144 ids. Everything else is copied byte for byte; the output is deterministic.
// tools/fixtures/tokenizer_goldens.py --derive-gemma4 does the same for the HF goldens.
// Throws gemma::Error(kTokenizer) if the input is not a Gemma-3-shaped tokenizer.json.
std::string DeriveGemma4TokenizerJson(std::string_view gemma3_json,
                                      std::string_view origin = "<memory>");

}  // namespace gemma
