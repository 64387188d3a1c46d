#include "hub/hashing.h"

#include <openssl/evp.h>

#include <cstdio>
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
