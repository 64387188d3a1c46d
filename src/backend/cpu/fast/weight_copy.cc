#include "backend/cpu/fast/weight_copy.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "gemma/error.h"

namespace gemma::fast {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
// Dense linears are copied only when small (E2B QAT: the 27.5 MB bf16 per_layer_model_projection);
// a dense checkpoint's weights would double the process's memory for a compute-bound path.
constexpr size_t kMaxDenseCopy = size_t{64} << 20;

size_t Align64(size_t n) { return (n + 63) / 64 * 64; }

// After copying: asks the kernel to reclaim the source's whole pages, so the process does not keep
// both copies resident (file pages are read back from the checkpoint if anything touches them
// again; anonymous pages are kept or swapped, never lost). Advice only.
void ReleaseSource(const void* p, size_t bytes) {
#if defined(MADV_PAGEOUT) || defined(MADV_COLD)
  constexpr uintptr_t kPage = 4096;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lo = (a + kPage - 1) / kPage * kPage, hi = (a + bytes) / kPage * kPage;
  if (hi <= lo) return;
#ifdef MADV_PAGEOUT
  ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_PAGEOUT);
#else
  ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_COLD);
#endif
#else
  (void)p;
  (void)bytes;
#endif
}

bool Copied(const Linear& lin) {
  if (!lin.data) return false;
  return IsQuantized(lin.kind) || lin.row_bytes * lin.rows <= kMaxDenseCopy;
}

size_t CopyBytes(const Linear& lin) {
  if (!Copied(lin)) return 0;
  size_t b = Align64(Interleaves(lin) ? InterleavedBytes(lin) : lin.row_bytes * lin.rows);
  if (IsQuantized(lin.kind) && lin.row_scale) b += Align64(sizeof(float) * lin.rows);
  return b;
}

template <class Fn>
void ForEachLinear(const Model& model, Fn&& fn) {
  for (const LayerWeights& w : model.layer_weights()) {
    for (const Linear* l :
         {&w.q, &w.k, &w.v, &w.o, &w.gate, &w.up, &w.down, &w.ple_gate, &w.ple_proj})
      fn(*l);
  }
  fn(model.lm_head());
  fn(model.ple_model_proj());
}

}  // namespace

bool Interleaves(const Linear& lin) {
  // (QAT linears without input SRQ take QuantFloatLinearRows, which reads rows one by one)
  return IsQuantized(lin.kind) && lin.in_scale > 0 && lin.interleave == 1 && lin.row_bytes > 0 &&
         lin.row_bytes % 64 == 0;
}

size_t InterleavedBytes(const Linear& lin) {
  return static_cast<size_t>((lin.rows + 3) / 4) * 4 * lin.row_bytes;
}

Linear Interleave(const Linear& lin, uint8_t* dst) {
  const size_t blocks = lin.row_bytes / 64;
  std::memset(dst, 0, InterleavedBytes(lin));
  for (int r = 0; r < lin.rows; ++r) {
    const uint8_t* src = lin.data + static_cast<size_t>(r) * lin.row_bytes;
    uint8_t* group = dst + static_cast<size_t>(r / 4) * 4 * lin.row_bytes + (r % 4) * 64;
    for (size_t b = 0; b < blocks; ++b) std::memcpy(group + b * 256, src + b * 64, 64);
  }
  Linear c = lin;
  c.data = dst;
  c.interleave = 4;
  return c;
}

WeightCopy::WeightCopy(const Model& model) {
  ForEachLinear(model, [&](const Linear& l) { size_ += CopyBytes(l); });
  if (size_ > 0) {
    mapped_ = (size_ + kHugePage - 1) / kHugePage * kHugePage + kHugePage;
    void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      throw Error(ErrorCode::kIo, "cpu-fast: cannot allocate " + std::to_string(size_ >> 20) +
                                      " MiB for the weight copy");
    }
    base_ = static_cast<uint8_t*>(p);
    const uintptr_t a = reinterpret_cast<uintptr_t>(base_);
    data_ = base_ + ((a + kHugePage - 1) / kHugePage * kHugePage - a);
#ifdef MADV_HUGEPAGE
    ::madvise(data_, mapped_ - (data_ - base_), MADV_HUGEPAGE);  // advice only: may be refused
#endif
  }
  size_t offset = 0;
  layers_.reserve(model.layer_weights().size());
  for (const LayerWeights& w : model.layer_weights()) {
    layers_.push_back({Copy(w.q, &offset), Copy(w.k, &offset), Copy(w.v, &offset),
                       Copy(w.o, &offset), Copy(w.gate, &offset), Copy(w.up, &offset),
                       Copy(w.down, &offset), Copy(w.ple_gate, &offset),
                       Copy(w.ple_proj, &offset)});
  }
  lm_head_ = Copy(model.lm_head(), &offset);
  ple_model_proj_ = Copy(model.ple_model_proj(), &offset);
}

WeightCopy::~WeightCopy() {
  if (base_) ::munmap(base_, mapped_);
}

Linear WeightCopy::Copy(const Linear& lin, size_t* offset) {
  Linear c = lin;
  if (!Copied(lin)) return c;
  const size_t bytes = lin.row_bytes * lin.rows;
  if (Interleaves(lin)) {
    c = Interleave(lin, data_ + *offset);
    *offset += Align64(InterleavedBytes(lin));
  } else {
    std::memcpy(data_ + *offset, lin.data, bytes);
    c.data = data_ + *offset;
    *offset += Align64(bytes);
  }
  ReleaseSource(lin.data, bytes);
  if (IsQuantized(lin.kind) && lin.row_scale) {
    std::memcpy(data_ + *offset, lin.row_scale, sizeof(float) * lin.rows);
    c.row_scale = reinterpret_cast<const float*>(data_ + *offset);
    *offset += Align64(sizeof(float) * lin.rows);
  }
  return c;
}

}  // namespace gemma::fast
