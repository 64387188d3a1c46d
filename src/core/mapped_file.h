// A read-only memory map of a whole file. Weights are used in place, never copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gemma {

class MappedFile {
 public:
  // Throws gemma::Error(kIo) naming the path when the file cannot be opened or mapped. On a file
  // system that cannot map files (ENODEV) the file is read into memory instead.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void ReadAll(int fd);
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool owned_ = false;  // data_ is a read copy (free), else a mapping (munmap)
};

// Whole-file read for small text files (configs, tokenizer.json). Throws kIo.
std::string ReadFileToString(const std::string& path);

}  // namespace gemma
