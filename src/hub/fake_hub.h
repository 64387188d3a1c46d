// A loopback stand-in for the Hugging Face Hub, for tests: a cpp-httplib server on 127.0.0.1
// speaking the API shapes the client uses (revision?blobs=true with siblings, resolve/<commit>/path
// with ETag and X-Repo-Commit, LFS files redirected to a separate "CDN" route, HTTP Range), with
// fault injection and per-file byte counters. Oids are computed here with OpenSSL's one-shot
// SHA256/SHA1, independently of the client's streaming digests.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace httplib {
class Server;
}

namespace gemma::hub::testing {

struct FakeFile {
  std::string path;
  std::string content;  // used when `generate` is empty
  bool lfs = false;
  // Procedural content for large files: fills [offset, offset + n) of a `size`-byte file.
  uint64_t size = 0;
  std::function<void(uint64_t offset, size_t n, char* dst)> generate;
};

struct FakeRepo {
  std::string id;      // org/name
  std::string commit;  // 40 hex
  std::vector<FakeFile> files;
  std::string required_token;  // non-empty: gated; 401 without a token, 403 with another one
};

class FakeHub {
 public:
  FakeHub();
  ~FakeHub();
  void AddRepo(FakeRepo repo);  // computes oids (a 1 GiB generated file takes a hash pass)
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Faults, each consumed by the next `times` matching requests.
  void DropAfter(const std::string& path, uint64_t offset, int times = 1);  // close mid-body
  void Corrupt(const std::string& path, int times = 1);               // flip one byte in the middle
  void FailWith(const std::string& path, int status, int times = 1);  // status instead of bytes
  void FailApiWith(int status, int times = 1);
  void StallAt(const std::string& path, uint64_t offset, int ms, int times = 1);  // then go on
  void TruncateApiJson(int times = 1);

  // Counters per repository path (download bodies only).
  uint64_t bytes_served(const std::string& path) const;
  int downloads(const std::string& path) const;  // resolve requests, redirects included
  std::vector<std::string> ranges(const std::string& path) const;  // Range headers seen
  int api_calls() const { return api_calls_; }
  void ResetCounters();

  // The oids the fake Hub announces.
  std::string sha256(const std::string& repo, const std::string& path) const;

 private:
  struct Entry {
    FakeFile file;
    uint64_t size = 0;
    std::string sha256, sha1;
  };
  struct Repo {
    FakeRepo meta;
    std::vector<Entry> entries;
  };
  const Entry* FindEntry(const std::string& repo, const std::string& path) const;
  bool Consume(std::map<std::string, int>& m, const std::string& key);
  void Serve(const Entry& e, const void* request, void* response);

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  mutable std::mutex mu_;
  std::map<std::string, Repo> repos_;
  std::map<std::string, const Entry*> by_sha_;
  std::map<std::string, std::pair<uint64_t, int>> drop_;
  std::map<std::string, int> corrupt_;
  std::map<std::string, std::pair<uint64_t, std::pair<int, int>>> stall_;
  std::map<std::string, std::pair<int, int>> fail_;
  std::pair<int, int> api_fail_{0, 0};
  int api_truncate_ = 0;
  std::map<std::string, uint64_t> bytes_;
  std::map<std::string, int> downloads_;
  std::map<std::string, std::vector<std::string>> ranges_;
  std::atomic<int> api_calls_{0};
};

}  // namespace gemma::hub::testing
