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
#include <mutex>
#include <sstream>

#include "gemma/error.h"

namespace gemma {

MappedFile::MappedFile(const std::string& path, Unmappable unmappable, bool map) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw Error(ErrorCode::kIo, path + ": cannot open: " + std::strerror(errno));
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      throw Error(ErrorCode::kIo, path + ": cannot stat: " + std::strerror(errno));
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = map ? ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0) : MAP_FAILED;
      if (p == MAP_FAILED && (!map || errno == ENODEV || errno == ENOMEM)) {
        if (unmappable == Unmappable::kOnDemand) return;  // fd_ stays open for Read
        ReadAll();
      } else if (p == MAP_FAILED) {
        throw Error(ErrorCode::kIo, path + ": cannot mmap: " + std::strerror(errno));
      } else {
        data_ = static_cast<const uint8_t*>(p);
      }
    }
  } catch (...) {
    ::close(fd_);
    throw;
  }
  ::close(fd_);
  fd_ = -1;
}

void MappedFile::ReadAll() {
  constexpr size_t kAlign = 64;
  uint8_t* buf = static_cast<uint8_t*>(std::aligned_alloc(kAlign, (size_ + kAlign - 1) / kAlign * kAlign));
  if (!buf) throw Error(ErrorCode::kCapacity, path_ + ": no memory for " + std::to_string(size_) + " bytes");
  try {
    Read(0, size_, buf);
  } catch (...) {
    std::free(buf);
    throw;
  }
  data_ = buf;
  owned_ = true;
}

void MappedFile::Read(size_t offset, size_t n, void* dst) const {
  if (offset > size_ || n > size_ - offset) {
    throw Error(ErrorCode::kIo, path_ + ": bytes " + std::to_string(offset) + " + " +
                                    std::to_string(n) + " are outside the " +
                                    std::to_string(size_) + "-byte file");
  }
  if (data_) {
    std::memcpy(dst, data_ + offset, n);
    return;
  }
  // lseek + read under a lock, not pread: Emscripten 3.1.6's pread takes offsets below 2^31 only
  // (its lseek takes 2^53). In slices: some file systems (the browser's) copy each read through a
  // buffer of its size.
  constexpr size_t kSlice = size_t{16} << 20;
  uint8_t* out = static_cast<uint8_t*>(dst);
  std::lock_guard<std::mutex> lock(read_mu_);
  for (size_t done = 0; done < n;) {
    ssize_t r = -1;
    if (::lseek(fd_, static_cast<off_t>(offset + done), SEEK_SET) >= 0) {
      r = ::read(fd_, out + done, std::min(kSlice, n - done));
    }
    if (r <= 0) {
      const int e = r < 0 ? errno : EIO;
      throw Error(ErrorCode::kIo, path_ + ": read failed at byte " + std::to_string(offset + done) +
                                      ": " + std::strerror(e));
    }
    done += static_cast<size_t>(r);
  }
}

MappedFile::~MappedFile() {
  if (data_ && owned_) {
    std::free(const_cast<uint8_t*>(data_));
  } else if (data_) {
    ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  if (fd_ >= 0) ::close(fd_);
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
