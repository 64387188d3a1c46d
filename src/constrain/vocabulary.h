// The token -> bytes table that constraints are compiled against, and the byte trie over it.
// Build it once per tokenizer (the engine builds it from gemma::Tokenizer::TokenBytes/IsSpecial)
// and share it between all constraints.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gemma::constrain {

// Trie over the byte strings of all non-special, non-empty tokens, flattened in depth-first order
// so that a mask walk is one forward pass that skips a whole subtree with one jump.
// Node i (0-based, the root is implicit) has byte(i) at depth(i) (1 = first byte); its subtree is
// [i, end(i)); tokens whose bytes end exactly at node i are token_ids[tok_begin(i)..tok_begin(i+1)).
struct TokenTrie {
  std::vector<uint8_t> byte;
  std::vector<uint16_t> depth;
  std::vector<uint32_t> end;
  std::vector<uint32_t> tok_begin;  // size = nodes + 1
  std::vector<int32_t> token_ids;
  int max_depth = 0;
  size_t nodes() const { return byte.size(); }
  size_t MemoryBytes() const;
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
  // Bytes of the mask for this vocabulary: ceil(size / 64) words.
  size_t mask_words() const { return (bytes_.size() + 63) / 64; }
  size_t MemoryBytes() const;

 private:
  std::vector<std::string> bytes_;
  std::vector<bool> special_;
  TokenTrie trie_;
};

}  // namespace gemma::constrain
