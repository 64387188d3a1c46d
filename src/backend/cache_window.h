// Bookkeeping every backend shares: how many tokens the caches hold, which sliding-ring entries are
// still intact (for exact rewinds), and the validation of a Forward request.
#pragma once

#include <algorithm>

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

// Typed errors for a request a backend cannot take: no tokens, capacity exceeded (checked before
// any work), token ids outside the vocabulary, a select without a bitmask covering the vocabulary.
void ValidateForward(const ForwardRequest& request, int cached, int capacity, int vocab_size);

}  // namespace gemma
