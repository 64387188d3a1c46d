// Open-addressing hash tables sized once at load time: string -> id for the vocab and
// (left id, right id) -> (rank, merged id) for BPE merges. std::unordered_map costs several times
// more to build and to probe at this size (262k pieces, 515k merges). Internal.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace gemma::tokenizer_internal {

inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ull;
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ull;
  x ^= x >> 32;
  return x;
}

inline uint64_t HashBytes(std::string_view s) {
  const char* p = s.data();
  size_t n = s.size();
  uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0xff51afd7ed558ccdull);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  uint64_t w = 0;
  std::memcpy(&w, p, n);
  h = (h ^ w) * 0x94d049bb133111ebull;
  return Mix64(h);
}

// Maps strings (owned elsewhere, in `keys`, indexed by id) to ids.
class StringIdMap {
 public:
  void Reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots_.assign(cap, Slot{0, -1});
    mask_ = cap - 1;
  }
  // Returns the id already stored for `key`, or stores `id` and returns -1.
  int32_t Insert(std::string_view key, int32_t id, const std::vector<std::string>& keys) {
    return InsertHashed(key, HashBytes(key), id, keys);
  }
  int32_t Find(std::string_view key, const std::vector<std::string>& keys) const {
    return FindHashed(key, HashBytes(key), keys);
  }
  // For batched lookups: hash first, prefetch the slot, then (once it is cached) prefetch the
  // key it points at, then probe.
  void Prefetch(uint64_t h) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[h & mask_]);
  }
  void PrefetchKey(uint64_t h, const std::vector<std::string>& keys) const {
    if (slots_.empty()) return;
    const Slot& s = slots_[h & mask_];
    if (s.id >= 0 && s.tag == static_cast<uint32_t>(h >> 32)) __builtin_prefetch(&keys[s.id]);
  }
  int32_t InsertHashed(std::string_view key, uint64_t h, int32_t id,
                       const std::vector<std::string>& keys) {
    uint32_t tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.id < 0) {
        s = Slot{tag, id};
        return -1;
      }
      if (s.tag == tag && keys[s.id] == key) return s.id;
    }
  }
  int32_t FindHashed(std::string_view key, uint64_t h, const std::vector<std::string>& keys) const {
    if (slots_.empty()) return -1;
    uint32_t tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.tag == tag && keys[s.id] == key) return s.id;
    }
  }

 private:
  struct Slot {
    uint32_t tag;
    int32_t id;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// (left, right) -> (rank, merged id). Later inserts of the same pair replace earlier ones, as
// HF's HashMap collect does for duplicate merges.
class MergeMap {
 public:
  struct Value {
    uint32_t rank;
    int32_t id;
  };
  void Reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots_.assign(cap, Slot{kEmpty, {0, -1}});
    mask_ = cap - 1;
  }
  static uint64_t Key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void Prefetch(int32_t a, int32_t b) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[Mix64(Key(a, b)) & mask_]);
  }
  void Insert(int32_t a, int32_t b, Value v) {
    if ((size_ + 1) * 2 > slots_.size()) Grow();
    uint64_t k = Key(a, b);
    for (size_t i = Mix64(k) & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == kEmpty || s.key == k) {
        if (s.key == kEmpty) ++size_;
        s.key = k;
        s.value = v;
        return;
      }
    }
  }
  size_t size() const { return size_; }
  // Returns nullptr when the pair has no merge.
  const Value* Find(int32_t a, int32_t b) const {
    if (slots_.empty()) return nullptr;
    uint64_t k = Key(a, b);
    for (size_t i = Mix64(k) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == k) return &s.value;
      if (s.key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  void Grow() {
    std::vector<Slot> old = std::move(slots_);
    Reserve(old.empty() ? 8 : old.size());
    size_ = 0;
    for (const Slot& s : old) {
      if (s.key != kEmpty) {
        Insert(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key & 0xffffffffu),
               s.value);
      }
    }
  }
  struct Slot {
    uint64_t key;
    Value value;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// Set of (code point, code point) pairs; grows as needed.
class PairSet {
 public:
  void Insert(uint32_t a, uint32_t b) {
    if ((size_ + 1) * 2 > slots_.size()) Grow();
    uint64_t k = Key(a, b);
    for (size_t i = Mix64(k) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i] == k) return;
      if (slots_[i] == kEmpty) {
        slots_[i] = k;
        ++size_;
        return;
      }
    }
  }
  bool Contains(uint32_t a, uint32_t b) const {
    if (slots_.empty()) return false;
    uint64_t k = Key(a, b);
    for (size_t i = Mix64(k) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i] == k) return true;
      if (slots_[i] == kEmpty) return false;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static uint64_t Key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }
  void Grow() {
    std::vector<uint64_t> old = std::move(slots_);
    size_t cap = old.empty() ? 1024 : old.size() * 2;
    slots_.assign(cap, kEmpty);
    mask_ = cap - 1;
    size_ = 0;
    for (uint64_t k : old) {
      if (k != kEmpty) Insert(static_cast<uint32_t>(k >> 32), static_cast<uint32_t>(k));
    }
  }
  std::vector<uint64_t> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace gemma::tokenizer_internal
