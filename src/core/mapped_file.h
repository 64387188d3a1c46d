// A read-only memory map of a whole file. Weights are used in place, never copied.
//
// Where a file cannot be mapped (the browser's WORKERFS, Node's file system under WebAssembly,
// some FUSE mounts: mmap fails with ENODEV, or ENOMEM where the "mapping" would be a copy in the
// WebAssembly heap), the file is read into memory instead (kReadAll), or left on disk (kOnDemand:
// data() is null and Read() fetches byte ranges; the caller decides what to hold in memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

namespace gemma {

class MappedFile {
 public:
  enum class Unmappable { kReadAll, kOnDemand };
  // Throws gemma::Error(kIo) naming the path when the file cannot be opened, mapped or read.
  // map = false: handled as an unmappable file.
  explicit MappedFile(const std::string& path, Unmappable unmappable = Unmappable::kReadAll,
                      bool map = true);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // The whole file in memory, or null (an unmappable file opened kOnDemand, or an empty one).
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Copies bytes [offset, offset + n) into dst (from memory, or read from the file). Throws
  // Error(kIo) naming the path when the range is outside the file or the read fails. Safe from
  // several threads at once.
  void Read(size_t offset, size_t n, void* dst) const;

 private:
  void ReadAll();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool owned_ = false;  // data_ is a read copy (free), else a mapping (munmap)
  int fd_ = -1;         // kept open while the file is read on demand
  mutable std::mutex read_mu_;  // Read's seek and read
};

// Whole-file read for small text files (configs, tokenizer.json). Throws kIo.
std::string ReadFileToString(const std::string& path);

}  // namespace gemma
