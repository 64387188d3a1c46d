// Encoding and decoding. The semantics follow HF tokenizers for the configuration that
// tokenizer_json.cc accepts; see tokenizer.h.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gemma/error.h"
#include "tokenizer/tokenizer_impl.h"

namespace gemma {
namespace {

using tokenizer_internal::DecodeUtf8;

constexpr uint32_t kNoMerge = UINT32_MAX;
using tokenizer_internal::kSpaceMark;
// Words up to this many symbols use the quadratic scan (cheaper than the queue when short).
constexpr size_t kScanLimit = 48;
// Per-thread scratch buffers above this many bytes are released after use.
constexpr size_t kKeepBuffer = size_t{4} << 20;

// Applies BPE merges to `syms` in place: repeatedly merge the adjacent pair with the lowest rank,
// leftmost first on equal ranks (HF Word::merge_all without dropout).
void MergeShort(const tokenizer_internal::MergeMap& merges, std::vector<int32_t>* syms_io) {
  std::vector<int32_t>& syms = *syms_io;
  size_t n = syms.size();
  uint32_t rank[kScanLimit];
  int32_t merged[kScanLimit];
  auto lookup = [&](size_t i) {
    const auto* m = merges.Find(syms[i], syms[i + 1]);
    rank[i] = m ? m->rank : kNoMerge;
    merged[i] = m ? m->id : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) lookup(i);
  while (n > 1) {
    size_t best = 0;
    uint32_t best_rank = kNoMerge;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (rank[i] < best_rank) {
        best_rank = rank[i];
        best = i;
      }
    }
    if (best_rank == kNoMerge) break;
    syms[best] = merged[best];
    // Remove symbol best+1 and pair entry best+1.
    for (size_t i = best + 1; i + 1 < n; ++i) syms[i] = syms[i + 1];
    for (size_t i = best + 1; i + 2 < n; ++i) {
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best > 0) lookup(best - 1);
    if (best + 1 < n) lookup(best);
  }
  syms.resize(n);
}

// Candidate merges of a long word, popped lowest rank first and leftmost first among equal ranks.
// One bucket of positions per active rank, plus a min-heap of the active ranks. Long words that
// survive the cuts are mostly runs ("xxxx...", long whitespace), where thousands of candidates
// share a rank and arrive in position order: then a pop is O(1) instead of a sift through a
// heap of all candidates. A bucket that receives a position out of order is sorted (its
// unpopped part) before its next pop.
class RankBuckets {
 public:
  void Push(uint32_t rank, uint32_t pos) {
    if (rank >= bucket_of_.size()) bucket_of_.resize(rank + size_t{1}, -1);
    int32_t& b = bucket_of_[rank];
    if (b < 0) {
      if (free_.empty()) {
        b = static_cast<int32_t>(buckets_.size());
        buckets_.emplace_back();
      } else {
        b = free_.back();
        free_.pop_back();
      }
      ranks_.push_back(rank);
      std::push_heap(ranks_.begin(), ranks_.end(), std::greater<uint32_t>());
    }
    Bucket& k = buckets_[b];
    if (k.head == k.pos.size()) {
      k.pos.clear();
      k.head = 0;
      k.sorted = true;
    } else if (pos < k.pos.back()) {
      k.sorted = false;
    }
    k.pos.push_back(pos);
  }
  // Returns false when empty.
  bool Pop(uint32_t* rank, uint32_t* pos) {
    while (!ranks_.empty()) {
      uint32_t r = ranks_.front();
      int32_t b = bucket_of_[r];
      Bucket& k = buckets_[b];
      if (k.head == k.pos.size()) {
        std::pop_heap(ranks_.begin(), ranks_.end(), std::greater<uint32_t>());
        ranks_.pop_back();
        bucket_of_[r] = -1;
        free_.push_back(b);
        continue;
      }
      if (!k.sorted) {
        std::sort(k.pos.begin() + static_cast<std::ptrdiff_t>(k.head), k.pos.end());
        k.sorted = true;
      }
      *rank = r;
      *pos = k.pos[k.head++];
      return true;
    }
    return false;
  }
  // Drops large buffers after a huge word.
  void Trim() {
    for (Bucket& k : buckets_) {
      if (k.pos.capacity() * sizeof(uint32_t) > kKeepBuffer) std::vector<uint32_t>().swap(k.pos);
    }
  }

 private:
  struct Bucket {
    std::vector<uint32_t> pos;
    size_t head = 0;
    bool sorted = true;
  };
  std::vector<int32_t> bucket_of_;  // rank -> bucket, -1 if none; all -1 between words
  std::vector<Bucket> buckets_;
  std::vector<int32_t> free_;
  std::vector<uint32_t> ranks_;  // min-heap of ranks that have a bucket
};

// Same result as MergeShort for long words: a linked list of symbols and the RankBuckets queue.
// Each position has at most one live candidate, whose rank and merged id are kept beside the
// symbol; a popped entry is stale when the position is gone or its current candidate has another
// rank. (A changed pair never gets its old rank back: ranks identify pairs and a changed pair
// concatenates to a longer string. HF re-probes the merge table and compares the merged id
// instead; the outcome is the same.)
void MergeLong(const tokenizer_internal::MergeMap& merges, std::vector<int32_t>* syms_io) {
  std::vector<int32_t>& syms = *syms_io;
  const size_t n = syms.size();
  assert(n < (size_t{1} << 31));  // positions are kept in 32 bits (a single span under 2 GiB)
  thread_local std::vector<int32_t> prev, next, merged;
  thread_local std::vector<uint32_t> cand_rank;
  thread_local RankBuckets queue;
  prev.resize(n);
  next.resize(n);
  merged.resize(n);
  cand_rank.assign(n, kNoMerge);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  // Sets the candidate of `pos` from its current pair and queues it.
  auto push = [&](size_t pos) {
    int32_t r = next[pos];
    const auto* m = r < 0 ? nullptr : merges.Find(syms[pos], syms[r]);
    cand_rank[pos] = m ? m->rank : kNoMerge;
    if (!m) return;
    merged[pos] = m->id;
    queue.Push(m->rank, static_cast<uint32_t>(pos));
  };
  for (size_t i = 0; i + 1 < n; ++i) push(i);
  uint32_t rank, p;
  while (queue.Pop(&rank, &p)) {
    size_t pos = p;
    if (cand_rank[pos] != rank) continue;  // stale
    int32_t r = next[pos];
    syms[pos] = merged[pos];
    cand_rank[r] = kNoMerge;  // r is gone
    syms[r] = -1;
    next[pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = static_cast<int32_t>(pos);
    if (prev[pos] >= 0) push(static_cast<size_t>(prev[pos]));
    push(pos);
  }
  size_t out = 0;
  for (size_t i = 0; i < n; ++i) {
    if (syms[i] >= 0) syms[out++] = syms[i];
  }
  syms.resize(out);
  if (n * sizeof(uint64_t) > kKeepBuffer) {
    std::vector<int32_t>().swap(prev);
    std::vector<int32_t>().swap(next);
    std::vector<int32_t>().swap(merged);
    std::vector<uint32_t>().swap(cand_rank);
    queue.Trim();
  }
}

// Per-thread, direct-mapped cache of short BPE words (word bytes -> ids). Words repeat a lot in
// real text and a hit costs one hash and one copy instead of a dozen merge-table probes. Being
// per thread it needs no locks; entries are tagged with the owning tokenizer.
class WordCache {
 public:
  static constexpr size_t kMaxKey = 31;
  static constexpr size_t kMaxIds = 15;

  // Returns true and appends the cached ids on a hit.
  bool Lookup(uint64_t owner, std::string_view word, uint64_t hash,
              std::vector<int32_t>* out) const {
    const Entry& e = entries_[hash & (kEntries - 1)];
    if (e.owner != owner || e.key_len != word.size() ||
        std::memcmp(e.key, word.data(), word.size()) != 0) {
      return false;
    }
    out->insert(out->end(), e.ids, e.ids + e.n_ids);
    return true;
  }
  void Store(uint64_t owner, std::string_view word, uint64_t hash, const int32_t* ids, size_t n) {
    if (n > kMaxIds) return;
    Entry& e = entries_[hash & (kEntries - 1)];
    e.owner = owner;
    e.key_len = static_cast<uint8_t>(word.size());
    std::memcpy(e.key, word.data(), word.size());
    e.n_ids = static_cast<uint8_t>(n);
    std::memcpy(e.ids, ids, n * sizeof(int32_t));
  }

 private:
  static constexpr size_t kEntries = 4096;
  struct Entry {
    uint64_t owner = 0;
    uint8_t key_len = 0;
    char key[kMaxKey];
    uint8_t n_ids = 0;
    int32_t ids[kMaxIds];
  };
  Entry entries_[kEntries];
};

WordCache& ThreadWordCache() {
  thread_local std::unique_ptr<WordCache> cache = std::make_unique<WordCache>();
  return *cache;
}

}  // namespace

size_t Tokenizer::Impl::MatchAdded(std::string_view text, size_t pos, int32_t* id) const {
  size_t best = 0;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto& kids = trie[node].kids;
    uint8_t b = static_cast<uint8_t>(text[i]);
    auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t{-1}));
    if (it == kids.end() || it->first != b) break;
    node = it->second;
    if (trie[node].token >= 0) {
      best = i + 1 - pos;
      *id = trie[node].token;
    }
  }
  return best;
}

void Tokenizer::Impl::Encode(std::string_view text, bool match_special,
                             std::vector<int32_t>* out) const {
  size_t seg_start = 0;
  size_t pos = 0;
  const size_t n = text.size();
  while (pos < n) {
    if (!trie_first[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    int32_t id = -1;
    size_t len = MatchAdded(text, pos, &id);
    if (len == 0) {
      ++pos;
      continue;
    }
    if (!match_special && (flags[id] & kFlagSpecial)) {
      // HF skips the (leftmost-longest) match and resumes after it; the text stays in the span.
      pos += len;
      continue;
    }
    EncodeSegment(text.substr(seg_start, pos - seg_start), out);
    out->push_back(id);
    pos += len;
    seg_start = pos;
  }
  EncodeSegment(text.substr(seg_start), out);
}

void Tokenizer::Impl::EncodeSegment(std::string_view raw, std::vector<int32_t>* out, bool cuts,
                                    bool force_long) const {
  if (raw.empty()) return;
  // Normalizer: ' ' -> '▁'.
  thread_local std::string norm;
  norm.clear();
  norm.reserve(raw.size() * 3);
  for (char c : raw) {
    if (c == ' ') {
      norm.append(kSpaceMark);
    } else {
      norm.push_back(c);
    }
  }
  if (ignore_merges || !cuts) {
    EncodeWord(norm, out, force_long);
    if (norm.capacity() > kKeepBuffer) std::string().swap(norm);
    return;
  }
  // Cut between adjacent vocab characters that are not adjacent in any vocab piece: no token
  // can span such a boundary, so merging the parts separately gives the same ids as merging the
  // whole span (HF), in far less time for long spans, and the parts are cacheable words.
  const auto* s = reinterpret_cast<const unsigned char*>(norm.data());
  const size_t n = norm.size();
  size_t word_start = 0;
  uint32_t prev = 0;
  bool prev_known = false;
  for (size_t i = 0; i < n;) {
    uint32_t cp = s[i];
    size_t len = cp < 0x80 ? 1 : DecodeUtf8(s + i, n - i, &cp);
    bool known = false;
    if (len == 0) {
      len = 1;  // invalid byte: byte fallback, never cut next to it
    } else {
      known = char_ids[cp] >= 0;
    }
    if (known && prev_known && !PairInPiece(prev, cp)) {
      EncodeWord(std::string_view(norm).substr(word_start, i - word_start), out, force_long);
      word_start = i;
    }
    prev = cp;
    prev_known = known;
    i += len;
  }
  EncodeWord(std::string_view(norm).substr(word_start), out, force_long);
  if (norm.capacity() > kKeepBuffer) std::string().swap(norm);  // don't pin a huge input's copy
}

void Tokenizer::Impl::EncodeWord(std::string_view word, std::vector<int32_t>* out,
                                 bool force_long) const {
  if (word.empty()) return;
  if (ignore_merges) {
    int32_t id = vocab.Find(word, pieces);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  const bool cacheable = word.size() <= WordCache::kMaxKey && !force_long;
  uint64_t hash = 0;
  if (cacheable) {
    hash = tokenizer_internal::HashBytes(word);
    if (ThreadWordCache().Lookup(cache_owner, word, hash, out)) return;
  }
  thread_local std::vector<int32_t> syms;
  syms.clear();
  const auto* s = reinterpret_cast<const unsigned char*>(word.data());
  const size_t n = word.size();
  bool unk_pending = false;
  for (size_t i = 0; i < n;) {
    uint32_t cp = s[i];
    size_t len = cp < 0x80 ? 1 : DecodeUtf8(s + i, n - i, &cp);
    int32_t id = -1;
    if (len == 0) {
      len = 1;  // a byte outside any well-formed sequence: a one-byte unknown "character"
    } else {
      id = char_ids[cp];
    }
    if (id >= 0) {
      if (unk_pending) {
        syms.push_back(unk_id);
        unk_pending = false;
      }
      syms.push_back(id);
    } else {
      bool done = false;
      if (byte_fallback) {
        bool all = true;
        for (size_t k = 0; k < len; ++k) all = all && byte_ids[s[i + k]] >= 0;
        if (all) {
          // As HF: a pending <unk> is not flushed here, it follows these bytes.
          for (size_t k = 0; k < len; ++k) syms.push_back(byte_ids[s[i + k]]);
          done = true;
        }
      }
      if (!done && unk_id >= 0) {
        if (unk_pending && !fuse_unk) syms.push_back(unk_id);
        unk_pending = true;
      }
    }
    i += len;
  }
  if (unk_pending) syms.push_back(unk_id);
  if (syms.size() > 1) {
    if (syms.size() <= kScanLimit && !force_long) {
      MergeShort(merges, &syms);
    } else {
      MergeLong(merges, &syms);
    }
  }
  out->insert(out->end(), syms.begin(), syms.end());
  if (cacheable) ThreadWordCache().Store(cache_owner, word, hash, syms.data(), syms.size());
  if (syms.capacity() * sizeof(int32_t) > kKeepBuffer) std::vector<int32_t>().swap(syms);
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, SpecialText special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  impl_->Encode(text, special == SpecialText::kMatch, &out);
  return out;
}

void Tokenizer::EncodeTo(std::string_view text, std::vector<int32_t>* out,
                         SpecialText special) const {
  impl_->Encode(text, special == SpecialText::kMatch, out);
}

std::string Tokenizer::Decode(std::span<const int32_t> ids) const {
  std::string out;
  const int32_t n = impl_->vocab_size();
  for (int32_t id : ids) {
    if (id < 0 || id >= n) {
      throw Error(ErrorCode::kInvalidArgument, "Tokenizer::Decode: id " + std::to_string(id) +
                                                   " is outside [0, " + std::to_string(n) + ")");
    }
    out += impl_->Bytes(id);
  }
  return out;
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size(); }

const std::string& Tokenizer::TokenBytes(int32_t id) const {
  assert(id >= 0 && id < impl_->vocab_size());
  return impl_->Bytes(id);
}

const std::string& Tokenizer::Piece(int32_t id) const {
  assert(id >= 0 && id < impl_->vocab_size());
  return impl_->pieces[id];
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < impl_->vocab_size() && (impl_->flags[id] & Impl::kFlagSpecial);
}

bool Tokenizer::IsAdded(int32_t id) const {
  return id >= 0 && id < impl_->vocab_size() && (impl_->flags[id] & Impl::kFlagAdded);
}

std::optional<int32_t> Tokenizer::TokenId(std::string_view piece) const {
  auto it = impl_->added_ids.find(std::string(piece));
  if (it != impl_->added_ids.end()) return it->second;
  int32_t id = impl_->vocab.Find(piece, impl_->pieces);
  if (id >= 0) return id;
  return std::nullopt;
}

std::optional<int32_t> Tokenizer::ByteToken(uint8_t b) const {
  int32_t id = impl_->byte_ids[b];
  if (id >= 0) return id;
  return std::nullopt;
}

}  // namespace gemma
