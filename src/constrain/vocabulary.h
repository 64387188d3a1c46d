// The token -> bytes table that constraints are compiled against, and the byte trie over it.
// Build it once per tokenizer (the engine builds it from gemma::Tokenizer::TokenBytes/IsSpecial)
// and share it between all constraints.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace gemma::constrain {

// Trie over the byte strings of all non-special, non-empty tokens, flattened in depth-first order
// so that a mask walk is one forward pass that skips a whole subtree with one jump.
// Node i (0-based, the root is implicit) has byte[i] at depth[i] (1 = first byte); its subtree is
// [i, end[i]). token[i] is the token whose bytes end exactly at node i, or `none` (an id one past
// the vocabulary, so that walks can set its bit into a padding word without a branch); further
// tokens with the same bytes are listed in `duplicates` as (first token, other token).
struct TokenTrie {
  std::vector<uint8_t> byte;
  std::vector<uint16_t> depth;
  std::vector<uint32_t> end;
  std::vector<int32_t> token;
  std::vector<std::pair<int32_t, int32_t>> duplicates;
  int32_t none = 0;
  int max_depth = 0;
  size_t num_tokens = 0;
  size_t nodes() const { return byte.size(); }
  size_t MemoryBytes() const;
};

// Tokens split by a set A of ASCII bytes: `inside` marks the tokens that are complete, valid UTF-8
// whose ASCII bytes all lie in A (and, unless `with_utf8`, that are pure ASCII); `residual` is the
// trie of every other non-special token. In a state where each byte of A (and each complete UTF-8
// character) loops back to the state (inside a JSON string, free text, [a-z]*), the mask is
// `inside` plus a walk of the residual trie.
struct TextSplit {
  std::vector<uint64_t> inside;
  TokenTrie residual;
};

class Vocabulary {
 public:
  // token_bytes[id] are the exact bytes a token decodes to; is_special[id] marks control tokens
  // (<eos>, <|tool_call>, ...) which are never matched by their text. Sizes must agree.
  Vocabulary(std::vector<std::string> token_bytes, std::vector<bool> is_special);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  bool is_special(int32_t id) const { return special_[id]; }
  const TokenTrie& trie() const { return trie_; }
  // Tokens of at most kShortToken bytes (a bitmask) and the trie of the longer ones: states that
  // differ only on longer strings share the short part of their masks.
  static constexpr int kShortToken = 16;
  const std::vector<uint64_t>& short_mask() const { return short_mask_; }
  const TokenTrie& long_trie() const { return long_trie_; }
  // Words of a mask for this vocabulary: ceil(size / 64). Masks held by the constraint carry one
  // more (padding) word for TokenTrie::none.
  size_t mask_words() const { return (bytes_.size() + 63) / 64; }
  size_t MemoryBytes() const;

  // Cached per ASCII set (bit b of ascii[b / 64] = byte b) for the vocabulary's lifetime (grammars
  // produce a handful of distinct sets); thread-safe. The first call for a set scans the vocabulary
  // once (milliseconds at 262k tokens); later calls are a map lookup.
  const TextSplit& Text(const std::array<uint64_t, 2>& ascii, bool with_utf8) const;

 private:
  std::vector<std::string> bytes_;
  std::vector<bool> special_;
  TokenTrie trie_;
  std::vector<uint64_t> short_mask_;
  TokenTrie long_trie_;
  mutable std::mutex text_mu_;
  mutable std::map<std::array<uint64_t, 3>, std::unique_ptr<TextSplit>> text_;
};

}  // namespace gemma::constrain
