// The fast CPU backend's own copy of the weights it streams for every token (the linears and their
// row scales), in one anonymous buffer advised for transparent huge pages.
//
// Why: the checkpoint is a memory-mapped file in 4 KiB pages, so a decode step (~790 MB of weights
// for E2B) crosses ~190,000 pages, each a TLB miss the hardware prefetcher does not cross. From
// 2 MiB pages the same linears ran 12-15% faster on one thread (decode-order pass over every
// linear, weights cold: 25.0 -> 21.4 ms for one token, 90.6 -> 81.2 ms for 16 tokens).
// Where transparent huge pages are unavailable the copy still works, in 4 KiB pages.
//
// Packed (int2/int4/int8) linears with SRQ inputs whose rows are whole 64-byte blocks are stored
// interleaved (Linear::interleave 4): the 4-row tiles then read one sequential stream instead of 4
// rows a few hundred bytes apart, which the hardware prefetchers follow at the stream rate (a
// probe streaming 768-byte rows 4 at a time with the decode tile's work per line: ~20 GB/s
// row-major with the software prefetch, ~27 GB/s interleaved, on the development VM). The values
// are unchanged: results are bit for bit those of the mapped weights.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/model.h"

namespace gemma::fast {

// The linears of one layer, pointing into the copy.
struct LayerLinears {
  Linear q, k, v, o, gate, up, down, ple_gate, ple_proj;
};

// Whether the copy stores `lin` interleaved, and the bytes it then takes (rows padded to 4).
bool Interleaves(const Linear& lin);
size_t InterleavedBytes(const Linear& lin);
// Writes lin's rows (row-major in lin.data) interleaved into dst (InterleavedBytes(lin) bytes, pad
// rows zero); the result is `lin` with data = dst and interleave = 4.
Linear Interleave(const Linear& lin, uint8_t* dst);

class WeightCopy {
 public:
  // Copies every linear of `model` that a forward pass reads (data and row scales).
  explicit WeightCopy(const Model& model);
  ~WeightCopy();
  WeightCopy(const WeightCopy&) = delete;
  WeightCopy& operator=(const WeightCopy&) = delete;

  const std::vector<LayerLinears>& layers() const { return layers_; }
  const Linear& lm_head() const { return lm_head_; }
  const Linear& ple_model_proj() const { return ple_model_proj_; }
  size_t bytes() const { return size_; }

 private:
  Linear Copy(const Linear& lin, size_t* offset);

  uint8_t* base_ = nullptr;  // mmap'd region (size_ + alignment slack)
  size_t mapped_ = 0, size_ = 0;
  uint8_t* data_ = nullptr;  // 2 MiB aligned start inside base_
  std::vector<LayerLinears> layers_;
  Linear lm_head_, ple_model_proj_;
};

}  // namespace gemma::fast
