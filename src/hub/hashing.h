// Streaming digests used to verify downloads: SHA-256 (the Hub's lfs.oid of LFS files) and git's
// blob SHA-1 (the oid of regular files: sha1("blob <size>\0" + bytes)). OpenSSL EVP underneath.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

namespace gemma::hub {

class Digest {
 public:
  enum class Kind { kSha256, kGitBlobSha1 };
  // kGitBlobSha1 needs the total size up front (it is part of the hashed header).
  explicit Digest(Kind kind, uint64_t total_size = 0);
  ~Digest();
  Digest(const Digest&) = delete;
  Digest& operator=(const Digest&) = delete;

  void Update(const void* data, size_t n);
  std::string HexFinal();  // lower-case hex; the object is spent afterwards

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Hashes a file on its own thread, trailing a writer: the writer appends with write/pwrite and
// calls Advance(bytes now in the file); the thread reads them back (from the page cache) and
// updates the digest, so hashing overlaps the network instead of adding to it. Finish() waits
// until everything advanced is hashed. Destruction without Finish() abandons the work.
class TrailingHasher {
 public:
  // Hashes `fd` from byte 0; `already` bytes are in the file when it starts (a resumed partial).
  TrailingHasher(int fd, Digest* digest, uint64_t already);
  ~TrailingHasher();
  TrailingHasher(const TrailingHasher&) = delete;
  TrailingHasher& operator=(const TrailingHasher&) = delete;

  void Advance(uint64_t available);
  // Throws Error(kIo) when the file could not be read back.
  void Finish();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Hashes a whole file (or its first `limit` bytes) into `digest`. Throws Error(kIo).
void HashFile(const std::string& path, Digest& digest, uint64_t limit = UINT64_MAX);

}  // namespace gemma::hub
