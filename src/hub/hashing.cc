#include "hub/hashing.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <vector>

#include "gemma/error.h"

namespace gemma::hub {

struct Digest::Impl {
  EVP_MD_CTX* ctx = nullptr;
};

Digest::Digest(Kind kind, uint64_t total_size) : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  const EVP_MD* md = kind == Kind::kSha256 ? EVP_sha256() : EVP_sha1();
  if (!impl_->ctx || EVP_DigestInit_ex(impl_->ctx, md, nullptr) != 1) {
    throw Error(ErrorCode::kInternal, "OpenSSL digest init failed");
  }
  if (kind == Kind::kGitBlobSha1) {
    const std::string header = "blob " + std::to_string(total_size);
    Update(header.data(), header.size() + 1);  // the terminating NUL is part of git's header
  }
}

Digest::~Digest() { EVP_MD_CTX_free(impl_->ctx); }

void Digest::Update(const void* data, size_t n) { EVP_DigestUpdate(impl_->ctx, data, n); }

std::string Digest::HexFinal() {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(impl_->ctx, out, &n);
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (unsigned int i = 0; i < n; ++i) {
    s += kHex[out[i] >> 4];
    s += kHex[out[i] & 15];
  }
  return s;
}

struct TrailingHasher::State {
  int fd;
  Digest* digest;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t available = 0, hashed = 0;
  bool finishing = false, abandon = false;
  std::string error;
  std::thread thread;

  void Run() {
    std::vector<char> buf(4 << 20);
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return abandon || available > hashed || finishing; });
      if (abandon || (finishing && available == hashed)) return;
      const uint64_t from = hashed;
      const size_t n = static_cast<size_t>(std::min<uint64_t>(available - hashed, buf.size()));
      lock.unlock();
      size_t got = 0;
      while (got < n) {
        const ssize_t r = ::pread(fd, buf.data() + got, n - got, static_cast<off_t>(from + got));
        if (r <= 0) break;
        got += static_cast<size_t>(r);
      }
      if (got == n) digest->Update(buf.data(), n);
      lock.lock();
      if (got != n) {
        error = "read back failed at byte " + std::to_string(from + got);
        return;
      }
      hashed += n;
    }
  }
};

TrailingHasher::TrailingHasher(int fd, Digest* digest, uint64_t already)
    : s_(std::make_unique<State>()) {
  s_->fd = fd;
  s_->digest = digest;
  s_->available = already;
  s_->thread = std::thread([st = s_.get()] { st->Run(); });
}

TrailingHasher::~TrailingHasher() {
  if (!s_->thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->abandon = true;
  }
  s_->cv.notify_one();
  s_->thread.join();
}

void TrailingHasher::Advance(uint64_t available) {
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->available = available;
  }
  s_->cv.notify_one();
}

void TrailingHasher::Finish() {
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->finishing = true;
  }
  s_->cv.notify_one();
  s_->thread.join();
  if (!s_->error.empty()) throw Error(ErrorCode::kIo, "hashing the download: " + s_->error);
}

void HashFile(const std::string& path, Digest& digest, uint64_t limit) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error(ErrorCode::kIo, path + ": cannot open for hashing");
  std::vector<char> buf(1 << 20);
  uint64_t left = limit;
  while (left > 0) {
    const size_t want = left < buf.size() ? static_cast<size_t>(left) : buf.size();
    const size_t got = std::fread(buf.data(), 1, want, f);
    if (got == 0) break;
    digest.Update(buf.data(), got);
    left -= got;
  }
  const bool err = std::ferror(f);
  std::fclose(f);
  if (err) throw Error(ErrorCode::kIo, path + ": read error while hashing");
}

}  // namespace gemma::hub
