#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "gemma/error.h"

namespace gemma {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(ErrorCode::kIo, path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw Error(ErrorCode::kIo, path + ": cannot stat: " + std::strerror(e));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED && errno == ENODEV) {
      // A file system without mmap (the browser's WORKERFS, some FUSE mounts): the file is read
      // into an owned buffer, in slices.
      try {
        ReadAll(fd);
      } catch (...) {
        ::close(fd);
        throw;
      }
    } else if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      throw Error(ErrorCode::kIo, path + ": cannot mmap: " + std::strerror(e));
    } else {
      data_ = static_cast<const uint8_t*>(p);
    }
  }
  ::close(fd);
}

void MappedFile::ReadAll(int fd) {
  constexpr size_t kAlign = 64;
  uint8_t* buf = static_cast<uint8_t*>(std::aligned_alloc(kAlign, (size_ + kAlign - 1) / kAlign * kAlign));
  if (!buf) throw Error(ErrorCode::kCapacity, path_ + ": no memory for " + std::to_string(size_) + " bytes");
  constexpr size_t kSlice = size_t{16} << 20;
  for (size_t at = 0; at < size_;) {
    const ssize_t n = ::pread(fd, buf + at, std::min(kSlice, size_ - at), static_cast<off_t>(at));
    if (n <= 0) {
      const int e = n < 0 ? errno : EIO;
      std::free(buf);
      throw Error(ErrorCode::kIo, path_ + ": read failed at byte " + std::to_string(at) + ": " +
                                      std::strerror(e));
    }
    at += static_cast<size_t>(n);
  }
  data_ = buf;
  owned_ = true;
}

MappedFile::~MappedFile() {
  if (data_ && owned_) {
    std::free(const_cast<uint8_t*>(data_));
  } else if (data_) {
    ::munmap(const_cast<uint8_t*>(data_), size_);
  }
}

std::string ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::kIo, path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(ErrorCode::kIo, path + ": read failed");
  return ss.str();
}

}  // namespace gemma
