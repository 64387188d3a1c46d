#include "constrain/vocabulary.h"

#include <algorithm>
#include <numeric>

#include "gemma/error.h"

namespace gemma::constrain {

size_t TokenTrie::MemoryBytes() const {
  return byte.capacity() + depth.capacity() * 2 + end.capacity() * 4 + tok_begin.capacity() * 4 +
         token_ids.capacity() * 4;
}

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, std::vector<bool> is_special)
    : bytes_(std::move(token_bytes)), special_(std::move(is_special)) {
  if (bytes_.size() != special_.size()) {
    throw Error(ErrorCode::kInvalidArgument, "constrain::Vocabulary: bytes and special flags differ in size");
  }
  std::vector<int32_t> ids;
  ids.reserve(bytes_.size());
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (!special_[i] && !bytes_[i].empty()) ids.push_back(static_cast<int32_t>(i));
  }
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return bytes_[a] != bytes_[b] ? bytes_[a] < bytes_[b] : a < b;
  });
  TokenTrie& t = trie_;
  std::vector<uint32_t> path;  // node index at each depth-1
  const std::string* prev = nullptr;
  for (int32_t id : ids) {
    const std::string& s = bytes_[id];
    if (s.size() > 0xFFFF) throw Error(ErrorCode::kInvalidArgument, "token longer than 65535 bytes");
    size_t lcp = 0;
    if (prev) {
      while (lcp < s.size() && lcp < prev->size() && s[lcp] == (*prev)[lcp]) ++lcp;
    }
    // Close nodes deeper than lcp.
    while (path.size() > lcp) {
      t.end[path.back()] = static_cast<uint32_t>(t.byte.size());
      path.pop_back();
    }
    for (size_t d = lcp; d < s.size(); ++d) {
      uint32_t n = static_cast<uint32_t>(t.byte.size());
      t.byte.push_back(static_cast<uint8_t>(s[d]));
      t.depth.push_back(static_cast<uint16_t>(d + 1));
      t.end.push_back(0);
      t.tok_begin.push_back(static_cast<uint32_t>(t.token_ids.size()));
      path.push_back(n);
    }
    t.token_ids.push_back(id);
    t.max_depth = std::max<int>(t.max_depth, static_cast<int>(s.size()));
    prev = &s;
  }
  while (!path.empty()) {
    t.end[path.back()] = static_cast<uint32_t>(t.byte.size());
    path.pop_back();
  }
  t.tok_begin.push_back(static_cast<uint32_t>(t.token_ids.size()));
}

size_t Vocabulary::MemoryBytes() const {
  size_t b = trie_.MemoryBytes() + special_.size() / 8;
  for (const auto& s : bytes_) b += sizeof(std::string) + (s.size() > 15 ? s.capacity() : 0);
  return b;
}

}  // namespace gemma::constrain
