#include "hub/fake_hub.h"

#include <httplib.h>
#include <openssl/evp.h>

#include <chrono>
#include <nlohmann/json.hpp>

namespace gemma::hub::testing {
namespace {

std::string Hex(const unsigned char* d, size_t n) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += kHex[d[i] >> 4];
    s += kHex[d[i] & 15];
  }
  return s;
}

void Fill(const FakeFile& f, uint64_t offset, size_t n, char* dst) {
  if (f.generate) {
    f.generate(offset, n, dst);
  } else {
    std::memcpy(dst, f.content.data() + offset, n);
  }
}

bool Authorized(const FakeRepo& r, const httplib::Request& req, httplib::Response& res) {
  if (r.required_token.empty()) return true;
  const std::string auth = req.get_header_value("Authorization");
  res.set_header("X-Error-Code", "GatedRepo");
  if (auth.empty()) {
    res.status = 401;
  } else if (auth != "Bearer " + r.required_token) {
    res.status = 403;
  } else {
    res.headers.erase("X-Error-Code");
    return true;
  }
  res.set_content(R"({"error":"Access to this model is restricted"})", "application/json");
  return false;
}

}  // namespace

FakeHub::FakeHub() : server_(std::make_unique<httplib::Server>()) {
  httplib::Server& s = *server_;
  s.Get(R"(/api/models/([^/]+)/([^/]+)/revision/(.+))",
        [this](const httplib::Request& req, httplib::Response& res) {
          ++api_calls_;
          std::lock_guard<std::mutex> lock(mu_);
          const std::string id = std::string(req.matches[1]) + "/" + std::string(req.matches[2]);
          const std::string rev = req.matches[3];
          if (api_fail_.second > 0) {
            --api_fail_.second;
            res.status = api_fail_.first;
            res.set_content("{\"error\":\"injected\"}", "application/json");
            return;
          }
          auto it = repos_.find(id);
          if (it == repos_.end()) {
            res.status = 404;
            res.set_header("X-Error-Code", "RepoNotFound");
            res.set_content(R"({"error":"Repository not found"})", "application/json");
            return;
          }
          if (!Authorized(it->second.meta, req, res)) return;
          if (rev != "main" && rev != it->second.meta.commit) {
            res.status = 404;
            res.set_header("X-Error-Code", "RevisionNotFound");
            res.set_content(R"({"error":"Invalid rev id"})", "application/json");
            return;
          }
          nlohmann::json j = {{"_id", "fake"}, {"id", id}, {"sha", it->second.meta.commit}};
          j["siblings"] = nlohmann::json::array();
          for (const Entry& e : it->second.entries) {
            nlohmann::json sib = {{"rfilename", e.file.path}, {"size", e.size}, {"blobId", e.sha1}};
            if (e.file.lfs)
              sib["lfs"] = {{"sha256", e.sha256}, {"size", e.size}, {"pointerSize", 134}};
            j["siblings"].push_back(sib);
          }
          std::string body = j.dump();
          if (api_truncate_ > 0) {
            --api_truncate_;
            body.resize(body.size() / 2);
          }
          res.set_content(body, "application/json");
        });
  s.Get(R"(/([^/]+)/([^/]+)/resolve/([^/]+)/(.+))",
        [this](const httplib::Request& req, httplib::Response& res) {
          std::unique_lock<std::mutex> lock(mu_);
          const std::string id = std::string(req.matches[1]) + "/" + std::string(req.matches[2]);
          const std::string path = req.matches[4];
          ++downloads_[path];
          auto it = repos_.find(id);
          const Entry* e = FindEntry(id, path);
          if (it == repos_.end() || !e || std::string(req.matches[3]) != it->second.meta.commit) {
            res.status = 404;
            res.set_header("X-Error-Code", it == repos_.end() ? "RepoNotFound" : "EntryNotFound");
            return;
          }
          if (!Authorized(it->second.meta, req, res)) return;
          res.set_header("X-Repo-Commit", it->second.meta.commit);
          if (e->file.lfs) {
            // Like the Hub: LFS content comes from another host (here another route) by redirect.
            res.set_header("X-Linked-Etag", "\"" + e->sha256 + "\"");
            res.set_header("X-Linked-Size", std::to_string(e->size));
            res.set_redirect("/cdn/" + e->sha256 + "?path=" + path, 302);
            return;
          }
          lock.unlock();
          Serve(*e, &req, &res);
        });
  s.Get(R"(/cdn/([0-9a-f]+))", [this](const httplib::Request& req, httplib::Response& res) {
    const Entry* e = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = by_sha_.find(req.matches[1]);
      if (it != by_sha_.end()) e = it->second;
    }
    if (!e) {
      res.status = 404;
      return;
    }
    Serve(*e, &req, &res);
  });
  port_ = s.bind_to_any_port("127.0.0.1");
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  while (!server_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

FakeHub::~FakeHub() {
  server_->stop();
  thread_.join();
}

void FakeHub::Serve(const Entry& e, const void* request, void* response) {
  const auto& req = *static_cast<const httplib::Request*>(request);
  auto& res = *static_cast<httplib::Response*>(response);
  const std::string& path = e.file.path;
  uint64_t drop_at = UINT64_MAX, stall_at = UINT64_MAX;
  int stall_ms = 0;
  bool corrupt = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (req.has_header("Range")) ranges_[path].push_back(req.get_header_value("Range"));
    auto f = fail_.find(path);
    if (f != fail_.end() && f->second.second > 0) {
      --f->second.second;
      res.status = f->second.first;
      res.set_content("injected failure", "text/plain");
      return;
    }
    auto d = drop_.find(path);
    if (d != drop_.end() && d->second.second > 0) {
      --d->second.second;
      drop_at = d->second.first;
    }
    corrupt = Consume(corrupt_, path);
    auto st = stall_.find(path);
    if (st != stall_.end() && st->second.second.second > 0) {
      --st->second.second.second;
      stall_at = st->second.first;
      stall_ms = st->second.second.first;
    }
  }
  res.set_header("ETag", "\"" + (e.file.lfs ? e.sha256 : e.sha1) + "\"");
  res.set_header("Accept-Ranges", "bytes");
  const uint64_t flip = e.size / 2;
  res.set_content_provider(
      e.size, "application/octet-stream",
      [this, &e, drop_at, corrupt, flip, stall_at, stall_ms](size_t offset, size_t length,
                                                             httplib::DataSink& sink) mutable {
        std::vector<char> buf(std::min<size_t>(length, 1 << 20));
        size_t n = buf.size();
        if (offset >= drop_at) return false;  // the connection "drops" here
        if (offset + n > drop_at) n = drop_at - offset;
        if (offset >= stall_at) {
          std::this_thread::sleep_for(std::chrono::milliseconds(stall_ms));  // a stuck server
          stall_ms = 0;
        }
        if (offset < stall_at && offset + n > stall_at) n = stall_at - offset;
        Fill(e.file, offset, n, buf.data());
        if (corrupt && flip >= offset && flip < offset + n) buf[flip - offset] ^= 0x5a;
        if (!sink.write(buf.data(), n)) return false;
        std::lock_guard<std::mutex> lock(mu_);
        bytes_[e.file.path] += n;
        return true;
      });
}

void FakeHub::AddRepo(FakeRepo repo) {
  Repo r;
  for (FakeFile& f : repo.files) {
    Entry e;
    e.size = f.generate ? f.size : f.content.size();
    EVP_MD_CTX* s256 = EVP_MD_CTX_new();
    EVP_MD_CTX* s1 = EVP_MD_CTX_new();
    EVP_DigestInit_ex(s256, EVP_sha256(), nullptr);
    EVP_DigestInit_ex(s1, EVP_sha1(), nullptr);
    const std::string header = "blob " + std::to_string(e.size);
    EVP_DigestUpdate(s1, header.c_str(), header.size() + 1);  // git's "blob <size>\0" header
    std::vector<char> buf(4 << 20);
    for (uint64_t off = 0; off < e.size; off += buf.size()) {
      const size_t n = std::min<uint64_t>(buf.size(), e.size - off);
      Fill(f, off, n, buf.data());
      EVP_DigestUpdate(s256, buf.data(), n);
      if (!f.lfs) EVP_DigestUpdate(s1, buf.data(), n);
    }
    unsigned char d256[32], d1[20];
    EVP_DigestFinal_ex(s256, d256, nullptr);
    EVP_DigestFinal_ex(s1, d1, nullptr);
    EVP_MD_CTX_free(s256);
    EVP_MD_CTX_free(s1);
    e.sha256 = Hex(d256, 32);
    // An LFS file's git blob is its pointer file; any stable sha1 stands in for it here.
    e.sha1 = f.lfs ? Hex(d256, 20) : Hex(d1, 20);
    e.file = std::move(f);
    r.entries.push_back(std::move(e));
  }
  repo.files.clear();
  r.meta = std::move(repo);
  std::lock_guard<std::mutex> lock(mu_);
  const std::string id = r.meta.id;
  repos_[id] = std::move(r);
  for (const Entry& e : repos_[id].entries) by_sha_[e.sha256] = &e;
}

const FakeHub::Entry* FakeHub::FindEntry(const std::string& repo, const std::string& path) const {
  auto it = repos_.find(repo);
  if (it == repos_.end()) return nullptr;
  for (const Entry& e : it->second.entries) {
    if (e.file.path == path) return &e;
  }
  return nullptr;
}

bool FakeHub::Consume(std::map<std::string, int>& m, const std::string& key) {
  auto it = m.find(key);
  if (it == m.end() || it->second <= 0) return false;
  --it->second;
  return true;
}

void FakeHub::DropAfter(const std::string& path, uint64_t offset, int times) {
  std::lock_guard<std::mutex> lock(mu_);
  drop_[path] = {offset, times};
}
void FakeHub::Corrupt(const std::string& path, int times) {
  std::lock_guard<std::mutex> lock(mu_);
  corrupt_[path] = times;
}
void FakeHub::FailWith(const std::string& path, int status, int times) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_[path] = {status, times};
}
void FakeHub::StallAt(const std::string& path, uint64_t offset, int ms, int times) {
  std::lock_guard<std::mutex> lock(mu_);
  stall_[path] = {offset, {ms, times}};
}
void FakeHub::FailApiWith(int status, int times) {
  std::lock_guard<std::mutex> lock(mu_);
  api_fail_ = {status, times};
}
void FakeHub::TruncateApiJson(int times) {
  std::lock_guard<std::mutex> lock(mu_);
  api_truncate_ = times;
}
uint64_t FakeHub::bytes_served(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = bytes_.find(path);
  return it == bytes_.end() ? 0 : it->second;
}
int FakeHub::downloads(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = downloads_.find(path);
  return it == downloads_.end() ? 0 : it->second;
}
std::vector<std::string> FakeHub::ranges(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ranges_.find(path);
  return it == ranges_.end() ? std::vector<std::string>{} : it->second;
}
void FakeHub::ResetCounters() {
  std::lock_guard<std::mutex> lock(mu_);
  bytes_.clear();
  downloads_.clear();
  ranges_.clear();
  api_calls_ = 0;
}
std::string FakeHub::sha256(const std::string& repo, const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry* e = FindEntry(repo, path);
  return e ? e->sha256 : std::string();
}

}  // namespace gemma::hub::testing
