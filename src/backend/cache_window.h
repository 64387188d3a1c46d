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

// The owned caches' shapes (index = LayerPlan::cache_slot): floats per position (kv heads x head
// dim) and positions held (the sliding ring, or the capacity for full attention).
struct CacheSlotShape {
  int width = 0;
  int ring = 0;
};
std::vector<CacheSlotShape> PlanCacheSlots(const Model& model, const CacheGeometry& geometry);

class Model;

// Host memory a CPU context (cpu, cpu-ref) holds once `positions` tokens are cached: the K/V of
// every owned cache (float32; sliding caches stop growing at their ring) plus the attention-score
// scratch of `threads` threads sized for the full capacity (the fast backend's, allocated when
// the context is made). The runtime compares it with the memory available before a context is
// made and before a request makes the caches grow, so a context too large for the machine is a
// kCapacity error naming the bytes, not an out-of-memory kill midway through a prefill.
struct CpuContextBytes {
  size_t kv = 0;       // K/V caches at `positions`
  size_t scratch = 0;  // allocated with the context
};
CpuContextBytes PlanCpuContextBytes(const Model& model, const BackendOptions& options,
                                    int positions, int threads);

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
    const size_t full = static_cast<size_t>(ring) * width;
    const size_t want = std::max(need, std::min(full, (need + step - 1) / step * step));
    // Geometric growth (few copies over a long prefill) but never past the full ring: a plain
    // resize would double the allocation and could hold up to twice the caches' bytes at full
    // context, more than PlanCpuContextBytes promises.
    const size_t cap = std::min(full, std::max(want, 2 * k.size()));
    k.reserve(cap);
    v.reserve(cap);
    k.resize(want);
    v.resize(want);
  }
};

// Typed errors for a request a backend cannot take: no tokens, capacity exceeded (checked before
// any work), token ids outside the vocabulary, a select without a bitmask covering the vocabulary.
void ValidateForward(const ForwardRequest& request, int cached, int capacity, int vocab_size);

// OutputMode::kSelect on one position's final logits z[vocab]: appends the best id the bitmask
// allows (the lowest on ties) and its log-prob under the full softmax (double sums);
// Error(kConstraint) when no id is allowed.
void SelectFromLogits(const float* z, int vocab, const std::vector<uint64_t>& allowed,
                      ForwardResult* out);

}  // namespace gemma
