// Streaming UTF-8 assembly over token bytes; see the replacement policy in tokenizer.h.
#include <string>

#include "tokenizer/tokenizer.h"

namespace gemma {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Length a well-formed sequence starting with lead byte `c` has, or 0 if `c` cannot start one.
size_t SequenceLength(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}

// Whether byte `b` may appear at offset `k` (>= 1) of a sequence led by `lead`.
bool ValidContinuation(unsigned char lead, size_t k, unsigned char b) {
  unsigned char lo = 0x80, hi = 0xBF;
  if (k == 1) {
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  }
  return b >= lo && b <= hi;
}

}  // namespace

std::string StreamDecoder::Push(int32_t id) {
  int32_t ids[1] = {id};
  pending_ += tokenizer_->Decode(ids);
  std::string out;
  const auto* s = reinterpret_cast<const unsigned char*>(pending_.data());
  const size_t n = pending_.size();
  size_t i = 0;
  while (i < n) {
    size_t need = SequenceLength(s[i]);
    if (need == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    size_t k = 1;
    while (k < need && i + k < n && ValidContinuation(s[i], k, s[i + k])) ++k;
    if (k == need) {
      out.append(pending_, i, need);
      i += need;
    } else if (i + k == n) {
      break;  // a valid prefix that the next token may complete: hold it
    } else {
      out += kReplacement;  // the lead byte can never be completed
      ++i;
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::Flush() {
  std::string out;
  for (size_t i = 0; i < pending_.size(); ++i) out += kReplacement;
  pending_.clear();
  return out;
}

}  // namespace gemma
