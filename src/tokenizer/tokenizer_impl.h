// Loaded tokenizer state shared by Tokenizer copies. Internal to the tokenizer room.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/flat_tables.h"
#include "tokenizer/tokenizer.h"

namespace gemma {

struct Tokenizer::Impl {
  // --- model (BPE) ---
  std::vector<std::string> pieces;        // by id, vocab then added tokens beyond the vocab
  int32_t model_vocab_size = 0;           // ids [0, model_vocab_size) are the BPE vocab
  tokenizer_internal::StringIdMap vocab;  // piece -> id over the BPE vocab only
  tokenizer_internal::MergeMap merges;
  std::vector<int32_t> char_ids;      // code point -> id of the single-character piece, or -1
  std::array<int32_t, 256> byte_ids;  // byte -> id of "<0xNN>", or -1
  int32_t unk_id = -1;
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;
  // Pairs of code points that occur next to each other inside some vocab piece. Between two
  // adjacent vocab characters that form no such pair, no token can ever span, so the BPE word
  // can be cut there and both parts merged independently (EncodeSegment). ASCII pairs are in a
  // bitmap, the rest in the hash set.
  std::array<uint64_t, 128 * 128 / 64> ascii_pairs{};
  tokenizer_internal::PairSet pairs;
  bool PairInPiece(uint32_t a, uint32_t b) const {
    if ((a | b) < 128) return (ascii_pairs[(a * 128 + b) >> 6] >> ((a * 128 + b) & 63)) & 1;
    return pairs.Contains(a, b);
  }

  // --- added tokens ---
  struct TrieNode {
    int32_t token = -1;                             // id if a token ends here
    std::vector<std::pair<uint8_t, int32_t>> kids;  // sorted by byte
  };
  std::vector<TrieNode> trie;                          // node 0 is the root
  std::array<bool, 256> trie_first{};                  // bytes that start some added token
  std::unordered_map<std::string, int32_t> added_ids;  // content -> id

  // --- per id ---
  // Decoded bytes of an id: pieces[id] itself unless bytes_index[id] >= 0, then
  // changed_bytes[bytes_index[id]] (byte tokens, pieces with '▁').
  std::vector<int32_t> bytes_index;
  std::vector<std::string> changed_bytes;
  const std::string& Bytes(int32_t id) const {
    int32_t k = bytes_index[id];
    return k < 0 ? pieces[id] : changed_bytes[k];
  }
  std::vector<uint8_t> flags;  // kFlagSpecial | kFlagAdded
  static constexpr uint8_t kFlagSpecial = 1;
  static constexpr uint8_t kFlagAdded = 2;

  // Distinguishes loaded tokenizers in the per-thread word cache (tokenizer.cc).
  uint64_t cache_owner = 0;

  int32_t vocab_size() const { return static_cast<int32_t>(pieces.size()); }

  // tokenizer.cc
  void Encode(std::string_view text, bool match_special, std::vector<int32_t>* out) const;
  // `cuts` and `force_long` exist for the equivalence tests (cut words vs one word, short scan vs
  // the long-word queue).
  void EncodeSegment(std::string_view raw, std::vector<int32_t>* out, bool cuts = true,
                     bool force_long = false) const;
  void EncodeWord(std::string_view word, std::vector<int32_t>* out, bool force_long = false) const;
  // Longest added token starting at text[pos]: returns its byte length (0 if none) and sets *id.
  size_t MatchAdded(std::string_view text, size_t pos, int32_t* id) const;
};

namespace tokenizer_internal {

// SentencePiece's space: U+2581 '▁'.
inline constexpr std::string_view kSpaceMark = "\xE2\x96\x81";

struct Access {
  static const Tokenizer::Impl& Of(const Tokenizer& t) { return *t.impl_; }
};

// Length of the well-formed UTF-8 sequence at s[0..n), or 0 if s[0] does not start one
// (Unicode table 3-7). Sets *cp to the code point.
inline size_t DecodeUtf8(const unsigned char* s, size_t n, uint32_t* cp) {
  unsigned char c = s[0];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  if (c < 0xC2) return 0;
  if (c < 0xE0) {
    if (n < 2 || (s[1] & 0xC0) != 0x80) return 0;
    *cp = ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu);
    return 2;
  }
  if (c < 0xF0) {
    if (n < 3) return 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
    if (s[1] < lo || s[1] > hi || (s[2] & 0xC0) != 0x80) return 0;
    *cp = ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
    return 3;
  }
  if (c < 0xF5) {
    if (n < 4) return 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
    if (s[1] < lo || s[1] > hi || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
    *cp = ((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
    return 4;
  }
  return 0;
}

}  // namespace tokenizer_internal
}  // namespace gemma
