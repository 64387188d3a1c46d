// The fast CPU backend's own copy of the weights it streams for every token (the linears and their
// row scales), in one anonymous buffer advised for transparent huge pages.
//
// Why: the checkpoint is a memory-mapped file in 4 KiB pages, so a decode step (~790 MB of weights
// for E2B) crosses ~190,000 pages, each a TLB miss the hardware prefetcher does not cross. From
// 2 MiB pages the same linears ran 12-15% faster on one thread (decode-order pass over every
// linear, weights cold: 25.0 -> 21.4 ms for one token, 90.6 -> 81.2 ms for 16 tokens).
// Where transparent huge pages are unavailable the copy still works, in 4 KiB pages.
//
// Bytes and their order are unchanged: results are bit for bit those of the mapped weights.
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
