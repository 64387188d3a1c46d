// Streaming safetensors writer: tensors are declared first, then their bytes are produced row block
// by row block straight into the file, so multi-GB checkpoints never sit in memory.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "format/safetensors.h"

namespace gemma {

class SafetensorsWriter {
 public:
  // fill(row_begin, row_end, dst): write rows [row_begin, row_end) of the tensor (row = first dim;
  // a 0-d or 1-d tensor is one row) into dst. Write() calls it from several threads at once for
  // disjoint row ranges, so it must depend only on its rows and must not throw.
  using Fill = std::function<void(int64_t row_begin, int64_t row_end, uint8_t* dst)>;

  void Add(const std::string& name, DType dtype, std::vector<int64_t> shape, Fill fill);
  void AddBytes(const std::string& name, DType dtype, std::vector<int64_t> shape,
                std::vector<uint8_t> bytes);
  void SetMetadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  // Called from Write() after each block written (bytes of tensor data done, total), on the
  // writing thread: the full-size synth writes 9.5 GB and should not be silent.
  void SetProgress(std::function<void(uint64_t done, uint64_t total)> progress) {
    progress_ = std::move(progress);
  }
  // Writes the file (tensors in declaration order). Throws Error(kIo) on failure.
  void Write(const std::string& path) const;

  // The declared tensors in order, split into at most `n` writers of roughly equal bytes (the
  // shards of a `model-0000k-of-0000n.safetensors` set); each keeps the metadata.
  std::vector<SafetensorsWriter> Split(int n) const;
  std::vector<std::string> names() const;
  uint64_t data_bytes() const;  // sum of the tensors' byte lengths

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    Fill fill;
  };
  static uint64_t Bytes(const Entry& e);
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
  std::function<void(uint64_t, uint64_t)> progress_;
};

}  // namespace gemma
