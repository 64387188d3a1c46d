#include "constrain/vocabulary.h"

#include <algorithm>
#include <numeric>

#include "gemma/error.h"

namespace gemma::constrain {

size_t TokenTrie::MemoryBytes() const {
  return byte.capacity() + depth.capacity() * 2 + end.capacity() * 4 + token.capacity() * 4 +
         duplicates.capacity() * 8;
}

namespace {

// Depth-first flattening of the byte strings of `ids`.
TokenTrie BuildTrie(const std::vector<std::string>& bytes, std::vector<int32_t> ids) {
  const int32_t none = static_cast<int32_t>(((bytes.size() + 63) / 64) * 64);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return bytes[a] != bytes[b] ? bytes[a] < bytes[b] : a < b;
  });
  TokenTrie t;
  t.none = none;
  t.num_tokens = ids.size();
  std::vector<uint32_t> path;  // node index at each depth-1
  const std::string* prev = nullptr;
  for (int32_t id : ids) {
    const std::string& s = bytes[id];
    if (s.size() > 0xFFFF)
      throw Error(ErrorCode::kInvalidArgument, "token longer than 65535 bytes");
    size_t lcp = 0;
    if (prev) {
      while (lcp < s.size() && lcp < prev->size() && s[lcp] == (*prev)[lcp]) ++lcp;
    }
    while (path.size() > lcp) {  // close nodes deeper than the common prefix
      t.end[path.back()] = static_cast<uint32_t>(t.byte.size());
      path.pop_back();
    }
    for (size_t d = lcp; d < s.size(); ++d) {
      uint32_t n = static_cast<uint32_t>(t.byte.size());
      t.byte.push_back(static_cast<uint8_t>(s[d]));
      t.depth.push_back(static_cast<uint16_t>(d + 1));
      t.end.push_back(0);
      t.token.push_back(none);
      path.push_back(n);
    }
    // The token ends at the last node created (sorted order): the one for all of s.
    if (t.token.back() == none) {
      t.token.back() = id;
    } else {
      t.duplicates.push_back({t.token.back(), id});
    }
    t.max_depth = std::max<int>(t.max_depth, static_cast<int>(s.size()));
    prev = &s;
  }
  while (!path.empty()) {
    t.end[path.back()] = static_cast<uint32_t>(t.byte.size());
    path.pop_back();
  }
  return t;
}

bool ValidUtf8(const std::string& s) {
  size_t i = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  while (i < s.size()) {
    unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int n;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // truncated character
    if (p[i + 1] < lo || p[i + 1] > hi) return false;
    for (int k = 2; k <= n; ++k) {
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return false;
    }
    i += n + 1;
  }
  return true;
}

}  // namespace

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, std::vector<bool> is_special)
    : bytes_(std::move(token_bytes)), special_(std::move(is_special)) {
  if (bytes_.size() != special_.size()) {
    throw Error(ErrorCode::kInvalidArgument,
                "constrain::Vocabulary: bytes and special flags differ in size");
  }
  std::vector<int32_t> ids;
  ids.reserve(bytes_.size());
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (!special_[i] && !bytes_[i].empty()) ids.push_back(static_cast<int32_t>(i));
  }
  short_mask_.assign(mask_words(), 0);
  std::vector<int32_t> long_ids;
  for (int32_t id : ids) {
    if (bytes_[id].size() > static_cast<size_t>(kShortToken)) {
      long_ids.push_back(id);
    } else {
      short_mask_[id >> 6] |= uint64_t{1} << (id & 63);
    }
  }
  long_trie_ = BuildTrie(bytes_, std::move(long_ids));
  trie_ = BuildTrie(bytes_, std::move(ids));
  // The two text sets every JSON / tool-call grammar meets: JSON string content (printable ASCII
  // but '"' and '\\', plus DEL) and raw text (all of ASCII), both with UTF-8 characters.
  std::array<uint64_t, 2> json_string = {~uint64_t{0} << 32, ~uint64_t{0}};
  json_string[0] &= ~(uint64_t{1} << '"');
  json_string[1] &= ~(uint64_t{1} << ('\\' - 64));
  Text(json_string, true);
  Text({~uint64_t{0}, ~uint64_t{0}}, true);
}

const TextSplit& Vocabulary::Text(const std::array<uint64_t, 2>& ascii, bool with_utf8) const {
  std::lock_guard<std::mutex> lock(text_mu_);
  const std::array<uint64_t, 3> key = {ascii[0], ascii[1], with_utf8};
  auto it = text_.find(key);
  if (it != text_.end()) return *it->second;
  auto split = std::make_unique<TextSplit>();
  split->inside.assign(mask_words(), 0);
  std::vector<int32_t> residual;
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (special_[i] || bytes_[i].empty()) continue;
    bool in = true;
    for (unsigned char c : bytes_[i]) {
      if (c < 0x80 ? !((ascii[c >> 6] >> (c & 63)) & 1) : !with_utf8) {
        in = false;
        break;
      }
    }
    if (in && ValidUtf8(bytes_[i])) {
      split->inside[i >> 6] |= uint64_t{1} << (i & 63);
    } else {
      residual.push_back(static_cast<int32_t>(i));
    }
  }
  split->residual = BuildTrie(bytes_, std::move(residual));
  return *text_.emplace(key, std::move(split)).first->second;
}

size_t Vocabulary::MemoryBytes() const {
  size_t b = trie_.MemoryBytes() + long_trie_.MemoryBytes() + short_mask_.capacity() * 8 +
             special_.size() / 8;
  for (const auto& s : bytes_) b += sizeof(std::string) + (s.size() > 15 ? s.capacity() : 0);
  std::lock_guard<std::mutex> lock(text_mu_);
  for (const auto& [key, split] : text_) {
    b += split->inside.capacity() * 8 + split->residual.MemoryBytes();
  }
  return b;
}

}  // namespace gemma::constrain
