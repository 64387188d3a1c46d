// Bookkeeping every backend shares: how many tokens the caches hold, which sliding-ring entries are
// still intact (for exact rewinds), and the validation of a Forward request.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "backend/backend.h"

namespace gemma {

// Full-attention caches are linear (capacity entries); sliding-window caches are rings of
// `ring` = window + slack entries, position p at p % ring. Writing positions [pos0, pos0 + m)
// overwrites the entries of positions < pos0 + m - ring, so a later rewind to n is exact only while
// every position the next token needs ([n - window + 1, n)) is still intact.
class CacheWindow {
 public:
  CacheWindow() = default;
  CacheWindow(int window, int ring) : window_(window), ring_(ring) {}

  int cached() const { return cached_; }
  int ring() const { return ring_; }

  // Call before writing positions [pos0, pos0 + m) into the rings (so that an exception mid-chunk
  // cannot leave a stale claim of intact entries).
  void BeginWrite(int pos0, int m) { valid_from_ = std::max(valid_from_, pos0 + m - ring_); }
  // Call once positions [.., n) are fully written.
  void Commit(int n) { cached_ = n; }
  void Reset() {
    cached_ = 0;
    valid_from_ = 0;
  }
  // Keeps the first n tokens; false (and a reset) when the rings cannot be restored exactly.
  // Throws Error(kInvalidArgument) when n is outside [0, cached()].
  bool Truncate(int n);

 private:
  int window_ = 0;
  int ring_ = 0;
  int cached_ = 0;
  int valid_from_ = 0;  // oldest position whose sliding-ring entry is intact
};

struct TextConfig;

// The cache sizes a backend derives from the config and its options: capacity clamped to the
// model's max_position_embeddings (Error(kInvalidArgument) if not positive), slack defaulting to
// one window, and the sliding ring = window + slack (at most capacity; slack shrinks to fit).
struct CacheGeometry {
  int capacity = 0;
  int slack = 0;
  int ring = 0;
};
CacheGeometry PlanCacheGeometry(const TextConfig& config, const BackendOptions& options);

// One owner layer's K and V on the CPU: `ring` positions of `width` floats (kv_heads x head_dim),
// position p at p % ring. Storage grows with use, in steps, so decoding does not reallocate per
// token.
struct CpuKvSlot {
  int width = 0;
  int ring = 0;
  std::vector<float> k, v;
  float* K(int pos) { return k.data() + static_cast<size_t>(pos % ring) * width; }
  float* V(int pos) { return v.data() + static_cast<size_t>(pos % ring) * width; }
  void Reserve(int positions) {
    const size_t need = static_cast<size_t>(std::min(positions, ring)) * width;
    if (k.size() >= need) return;
    const size_t step = static_cast<size_t>(256) * width;
    const size_t want =
        std::min(static_cast<size_t>(ring) * width, (need + step - 1) / step * step);
    k.resize(std::max(need, want));
    v.resize(std::max(need, want));
  }
};

// Typed errors for a request a backend cannot take: no tokens, capacity exceeded (checked before
// any work), token ids outside the vocabulary, a select without a bitmask covering the vocabulary.
void ValidateForward(const ForwardRequest& request, int cached, int capacity, int vocab_size);

}  // namespace gemma
