#include "hub/hub_client.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "hub/cache.h"
#include "hub/hashing.h"
#include "hub/hub_error.h"

namespace gemma::hub {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

bool Truthy(const std::string& v) {
  return v == "1" || v == "true" || v == "TRUE" || v == "True" || v == "yes" || v == "on";
}

void GlobalInit() {
  static const bool once = [] { return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; }();
  (void)once;
}

std::string Escape(const std::string& s, bool keep_slash) {
  std::string out;
  static const char* kHex = "0123456789ABCDEF";
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// Failures worth another attempt: the connection, not the request, was the problem.
bool TransientCurl(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

bool TransientStatus(long s) { return s == 429 || s >= 500; }

struct CurlHandle {
  CURL* h;
  curl_slist* headers = nullptr;
  CurlHandle() : h(curl_easy_init()) {
    if (!h) throw Error(ErrorCode::kInternal, "curl_easy_init failed");
  }
  ~CurlHandle() {
    curl_slist_free_all(headers);
    curl_easy_cleanup(h);
  }
};

// Shared setup: redirects (the Hub sends LFS downloads to a CDN), auth, timeouts.
void Setup(CurlHandle& c, const HubOptions& o, const std::string& url) {
  curl_easy_setopt(c.h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c.h, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c.h, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c.h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c.h, CURLOPT_USERAGENT, "gemma-engine/0.1");
  curl_easy_setopt(c.h, CURLOPT_CONNECTTIMEOUT, static_cast<long>(o.connect_timeout_s));
  // The token goes to the Hub only: curl drops custom Authorization headers on a redirect to
  // another host, so a CDN never sees it.
  if (!o.token.empty()) {
    c.headers = curl_slist_append(c.headers, ("Authorization: Bearer " + o.token).c_str());
  }
}

void Backoff(const HubOptions& o, int attempt) {
  if (o.backoff_ms <= 0) return;
  const long ms = static_cast<long>(o.backoff_ms) << std::min(attempt, 6);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < until) {
    if (o.cancel && o.cancel->load()) throw HubError(HubErrorKind::kCancelled, "cancelled");
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(ms, 50L)));
  }
}

size_t HeaderCallback(char* data, size_t size, size_t n, void* user) {
  auto* error_code = static_cast<std::string*>(user);
  std::string line(data, size * n);
  const std::string key = "x-error-code:";
  if (line.size() > key.size() && strncasecmp(line.c_str(), key.c_str(), key.size()) == 0) {
    std::string v = line.substr(key.size());
    while (!v.empty() && std::isspace(static_cast<unsigned char>(v.front()))) v.erase(0, 1);
    while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.pop_back();
    *error_code = v;
  }
  return size * n;
}

// Turns a final HTTP error status into the typed error a user can act on.
[[noreturn]] void ThrowStatus(long status, const std::string& error_code, const std::string& repo,
                              const std::string& what, const HubOptions& o) {
  const std::string page = o.endpoint + "/" + repo;
  if (status == 401 || status == 403 || error_code == "GatedRepo") {
    if (o.token.empty()) {
      throw HubError(HubErrorKind::kGated,
                     repo + ": the Hub refused " + what + " (HTTP " + std::to_string(status) +
                         "): the repository is gated or private, or does not exist. If it is "
                         "gated, accept its terms at " +
                         page + " while logged in, create a read token at " + o.endpoint +
                         "/settings/tokens and set HF_TOKEN to it");
    }
    throw HubError(HubErrorKind::kGated,
                   repo + ": the Hub refused " + what + " with the token from HF_TOKEN (HTTP " +
                       std::to_string(status) + "): accept the repository's terms at " + page +
                       " with the account that owns the token, or check that the token is valid "
                       "and has read access");
  }
  if (status == 404) {
    std::string kind = "not found";
    if (error_code == "RepoNotFound") kind = "no such repository";
    if (error_code == "RevisionNotFound") kind = "no such revision";
    if (error_code == "EntryNotFound") kind = "no such file";
    throw HubError(HubErrorKind::kNotFound,
                   repo + ": " + what + ": " + kind + " on " + o.endpoint + " (HTTP 404)");
  }
  throw HubError(HubErrorKind::kNetwork,
                 repo + ": " + what + ": HTTP " + std::to_string(status) + " from " + o.endpoint);
}

size_t AppendBody(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<std::string*>(user);
  if (s->size() > (64u << 20)) return 0;  // an API answer this big is not an API answer
  s->append(data, size * n);
  return size * n;
}

// A GET of a small JSON document, retried like transfers.
json GetJson(const HubOptions& o, const std::string& url, const std::string& repo,
             const std::string& what) {
  GlobalInit();
  for (int attempt = 0;; ++attempt) {
    if (o.cancel && o.cancel->load()) throw HubError(HubErrorKind::kCancelled, "cancelled");
    CurlHandle c;
    Setup(c, o, url);
    c.headers = curl_slist_append(c.headers, "Accept: application/json");
    curl_easy_setopt(c.h, CURLOPT_HTTPHEADER, c.headers);
    curl_easy_setopt(c.h, CURLOPT_TIMEOUT, static_cast<long>(o.stall_timeout_s));
    std::string body, error_code;
    curl_easy_setopt(c.h, CURLOPT_WRITEFUNCTION, AppendBody);
    curl_easy_setopt(c.h, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(c.h, CURLOPT_HEADERFUNCTION, HeaderCallback);
    curl_easy_setopt(c.h, CURLOPT_HEADERDATA, &error_code);
    const CURLcode rc = curl_easy_perform(c.h);
    long status = 0;
    curl_easy_getinfo(c.h, CURLINFO_RESPONSE_CODE, &status);
    const bool last = attempt + 1 >= o.max_attempts;
    if (rc != CURLE_OK) {
      if (TransientCurl(rc) && !last) {
        Backoff(o, attempt);
        continue;
      }
      const bool unreachable = rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
                               rc == CURLE_OPERATION_TIMEDOUT;
      throw HubError(
          unreachable ? HubErrorKind::kOffline : HubErrorKind::kNetwork,
          repo + ": " + what + ": cannot reach " + o.endpoint + ": " + curl_easy_strerror(rc));
    }
    if (TransientStatus(status) && !last) {
      Backoff(o, attempt);
      continue;
    }
    if (status < 200 || status >= 300) ThrowStatus(status, error_code, repo, what, o);
    try {
      return json::parse(body);
    } catch (const json::exception& e) {
      // A truncated answer from a proxy looks like this: retry, then say so.
      if (!last) {
        Backoff(o, attempt);
        continue;
      }
      throw HubError(HubErrorKind::kNetwork, repo + ": " + what +
                                                 ": the Hub's answer is not "
                                                 "valid JSON (" +
                                                 e.what() + ")");
    }
  }
}

// An exclusive flock on the blob's lock file, released on destruction.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(ErrorCode::kIo, path + ": cannot open lock file: " + strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) throw Error(ErrorCode::kIo, path + ": flock: " + strerror(errno));
    }
  }
  ~FileLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }

 private:
  int fd_ = -1;
};

uint64_t FileSize(const std::string& p) {
  std::error_code ec;
  const uint64_t n = fs::file_size(p, ec);
  return ec ? 0 : n;
}

// State of one transfer into `.incomplete`, kept across retries within a run.
struct Transfer {
  const HubOptions* o;
  const RepoFile* file;
  std::string part_path;
  int fd = -1;
  std::unique_ptr<Digest> digest;
  std::unique_ptr<TrailingHasher> hasher;  // hashes what is written, on its own thread
  uint64_t have = 0;                       // bytes in the file
  uint64_t received = 0;                   // bytes received over the network
  uint64_t resumed = 0;
  uint64_t request_offset = 0;
  bool checked_status = false;
  bool write_failed_enospc = false;
  std::string write_error;
  std::chrono::steady_clock::time_point last_report{};
  // curl's own low-speed check averages over a window of seconds; a stall is "no byte for
  // stall_timeout_s", checked here.
  std::chrono::steady_clock::time_point last_byte{};
  bool stalled = false;

  ~Transfer() {
    hasher.reset();
    if (fd >= 0) ::close(fd);
  }
  // Starts hashing the `have` bytes already in the file and whatever follows.
  void StartHashing() {
    hasher.reset();
    digest = file->sha256.empty() ? std::make_unique<Digest>(Digest::Kind::kGitBlobSha1, file->size)
                                  : std::make_unique<Digest>(Digest::Kind::kSha256);
    hasher = std::make_unique<TrailingHasher>(fd, digest.get(), have);
  }
  // Empties the partial file (a server that ignored Range, or a size disagreement).
  bool Restart() {
    hasher.reset();
    if (::ftruncate(fd, 0) != 0) return false;
    have = resumed = 0;
    StartHashing();
    return true;
  }
  void Report(bool finished) {
    if (!o->progress) return;
    o->progress({file->path, have, file->size, resumed, finished});
  }
};

size_t WriteBody(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * n;
  if (t->have + len > t->file->size) {
    t->write_error = "the server sent more bytes than the file's size";
    return 0;
  }
  for (size_t done = 0; done < len;) {
    const ssize_t w = ::pwrite(t->fd, data + done, len - done, static_cast<off_t>(t->have + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      t->write_failed_enospc = errno == ENOSPC || errno == EDQUOT;
      t->write_error = std::strerror(errno);
      t->have += done;  // what reached the file stays a valid prefix
      t->hasher->Advance(t->have);
      return 0;
    }
    done += static_cast<size_t>(w);
  }
  t->last_byte = std::chrono::steady_clock::now();
  t->have += len;
  t->received += len;
  t->hasher->Advance(t->have);
  return len;
}

int XferInfo(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  if (t->o->cancel && t->o->cancel->load()) return 1;
  const auto now = std::chrono::steady_clock::now();
  if (now - t->last_byte > std::chrono::seconds(t->o->stall_timeout_s)) {
    t->stalled = true;
    return 1;
  }
  if (now - t->last_report >= std::chrono::milliseconds(t->o->progress_interval_ms)) {
    t->last_report = now;
    t->Report(false);
  }
  return 0;
}

struct StatusProbe {
  Transfer* t;
  CURL* h;
};

// Wraps WriteBody to check the status of the answer that carries the body (after redirects).
size_t WriteBodyChecked(char* data, size_t size, size_t n, void* user) {
  auto* p = static_cast<StatusProbe*>(user);
  Transfer* t = p->t;
  if (!t->checked_status) {
    long status = 0;
    curl_easy_getinfo(p->h, CURLINFO_RESPONSE_CODE, &status);
    if (status < 200 || status >= 300) return size * n;  // an error page: drop it
    t->checked_status = true;
    // Range ignored: the body is the whole file. Start the partial file and hash over.
    if (status == 200 && t->request_offset > 0 && !t->Restart()) {
      t->write_error = "cannot truncate the partial file";
      return 0;
    }
  }
  return WriteBody(data, size, n, t);
}

// Downloads `url` into `part` until it holds file.size bytes, resuming whatever is there; returns
// the digest of the whole file. Retries transient failures with exponential backoff.
std::string DownloadResumable(const HubOptions& o, const std::string& repo, const std::string& url,
                              const RepoFile& file, const std::string& part, uint64_t* received) {
  GlobalInit();
  Transfer t;
  t.o = &o;
  t.file = &file;
  t.part_path = part;
  t.have = FileSize(part);
  if (t.have > file.size) {
    fs::remove(part);
    t.have = 0;
  }
  t.resumed = t.have;
  t.fd = ::open(part.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (t.fd < 0) throw Error(ErrorCode::kIo, part + ": cannot open: " + std::strerror(errno));
  t.StartHashing();  // a resumed prefix is hashed while the rest arrives

  for (int attempt = 0; t.have < file.size || attempt == 0; ++attempt) {
    if (t.have >= file.size) break;  // zero-byte files and already-complete partials
    if (o.cancel && o.cancel->load()) {
      throw HubError(HubErrorKind::kCancelled,
                     repo + "/" + file.path + ": cancelled; " + std::to_string(t.have) + " of " +
                         std::to_string(file.size) + " bytes kept for resume in " + part);
    }
    CurlHandle c;
    Setup(c, o, url);
    curl_easy_setopt(c.h, CURLOPT_HTTPHEADER, c.headers);
    t.request_offset = t.have;
    t.checked_status = false;
    t.stalled = false;
    t.last_byte = std::chrono::steady_clock::now();
    if (t.have > 0) {
      const std::string range = std::to_string(t.have) + "-";
      curl_easy_setopt(c.h, CURLOPT_RANGE, range.c_str());
    }
    StatusProbe probe{&t, c.h};
    std::string error_code;
    curl_easy_setopt(c.h, CURLOPT_WRITEFUNCTION, WriteBodyChecked);
    curl_easy_setopt(c.h, CURLOPT_WRITEDATA, &probe);
    curl_easy_setopt(c.h, CURLOPT_HEADERFUNCTION, HeaderCallback);
    curl_easy_setopt(c.h, CURLOPT_HEADERDATA, &error_code);
    curl_easy_setopt(c.h, CURLOPT_BUFFERSIZE, 512L << 10);  // fewer, larger writes and hashes
    curl_easy_setopt(c.h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c.h, CURLOPT_XFERINFOFUNCTION, XferInfo);
    curl_easy_setopt(c.h, CURLOPT_XFERINFODATA, &t);
    const CURLcode rc = curl_easy_perform(c.h);
    long status = 0;
    curl_easy_getinfo(c.h, CURLINFO_RESPONSE_CODE, &status);
    *received = t.received;
    if (t.write_failed_enospc) {
      throw HubError(HubErrorKind::kDiskFull, part + ": disk full while writing " + file.path +
                                                  " (" + std::to_string(t.have) + " bytes kept)");
    }
    if (!t.write_error.empty()) {
      throw HubError(HubErrorKind::kNetwork, repo + "/" + file.path + ": " + t.write_error);
    }
    const bool last = attempt + 1 >= o.max_attempts;
    if (rc == CURLE_ABORTED_BY_CALLBACK && t.stalled) {
      if (!last) {
        if (o.log)
          o.log(file.path + ": no data for " + std::to_string(o.stall_timeout_s) +
                " s, reconnecting");
        Backoff(o, attempt);
        continue;
      }
      throw HubError(HubErrorKind::kNetwork,
                     repo + "/" + file.path + ": the server stalled; " + std::to_string(t.have) +
                         " of " + std::to_string(file.size) + " bytes kept for resume");
    }
    if (rc == CURLE_ABORTED_BY_CALLBACK) {
      throw HubError(HubErrorKind::kCancelled,
                     repo + "/" + file.path + ": cancelled; " + std::to_string(t.have) + " of " +
                         std::to_string(file.size) + " bytes kept for resume in " + part);
    }
    if (rc != CURLE_OK) {
      if (TransientCurl(rc) && !last) {
        Backoff(o, attempt);
        continue;
      }
      throw HubError(
          rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ? HubErrorKind::kOffline
                                                                          : HubErrorKind::kNetwork,
          repo + "/" + file.path + ": transfer failed after " + std::to_string(attempt + 1) +
              " attempt(s): " + curl_easy_strerror(rc) + " (" + std::to_string(t.have) + " of " +
              std::to_string(file.size) + " bytes kept for resume)");
    }
    if (status == 416) {
      // Our partial file disagrees with the server's idea of the size: start over.
      if (!t.Restart()) throw Error(ErrorCode::kIo, part + ": cannot truncate");
      if (last) break;
      continue;
    }
    if (status < 200 || status >= 300) {
      if (TransientStatus(status) && !last) {
        Backoff(o, attempt);
        continue;
      }
      ThrowStatus(status, error_code, repo, "download of " + file.path, o);
    }
    if (t.have < file.size && last) break;
    // A 2xx that ended early without a transport error: ask for the rest.
  }
  if (t.have != file.size) {
    throw HubError(HubErrorKind::kNetwork,
                   repo + "/" + file.path + ": got " + std::to_string(t.have) + " of " +
                       std::to_string(file.size) + " bytes after " +
                       std::to_string(o.max_attempts) + " attempts (kept for resume)");
  }
  t.hasher->Finish();
  t.Report(true);
  return t.digest->HexFinal();
}

RepoFile ParseSibling(const json& s, const std::string& repo) {
  auto bad = [&](const std::string& what) -> HubError {
    return HubError(HubErrorKind::kNetwork,
                    repo + ": malformed file entry in the Hub's answer: " + what);
  };
  if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string()) {
    throw bad("no rfilename");
  }
  RepoFile f;
  f.path = s["rfilename"].get<std::string>();
  if (s.contains("size") && s["size"].is_number_unsigned()) f.size = s["size"].get<uint64_t>();
  if (s.contains("blobId") && s["blobId"].is_string()) f.blob_id = s["blobId"].get<std::string>();
  if (s.contains("lfs") && s["lfs"].is_object()) {
    const json& l = s["lfs"];
    // The revision API says "sha256", the tree API "oid": accept both.
    for (const char* key : {"sha256", "oid"}) {
      if (l.contains(key) && l[key].is_string()) f.sha256 = l[key].get<std::string>();
    }
    if (l.contains("size") && l["size"].is_number_unsigned()) f.size = l["size"].get<uint64_t>();
  }
  if (f.etag().empty()) throw bad(f.path + " has neither blobId nor lfs oid (need ?blobs=true)");
  for (char ch : f.etag()) {
    if (!std::isxdigit(static_cast<unsigned char>(ch))) throw bad(f.path + ": oid is not hex");
  }
  return f;
}

}  // namespace

HubOptions HubOptions::FromEnvironment() {
  HubOptions o;
  if (std::string e = Env("HF_ENDPOINT"); !e.empty()) {
    while (!e.empty() && e.back() == '/') e.pop_back();
    o.endpoint = e;
  }
  o.token = Env("HF_TOKEN");
  if (o.token.empty()) o.token = Env("HUGGING_FACE_HUB_TOKEN");
  o.offline = Truthy(Env("HF_HUB_OFFLINE"));
  o.cache_root = DefaultCacheRoot();
  return o;
}

HubClient::HubClient(HubOptions options)
    : o_(std::move(options)), cache_(o_.cache_root.empty() ? DefaultCacheRoot() : o_.cache_root) {}

bool HubClient::IsTextFile(const std::string& path) {
  static const std::set<std::string> kNames = {
      "config.json",           "generation_config.json",      "tokenizer.json",
      "tokenizer_config.json", "special_tokens_map.json",     "chat_template.jinja",
      "chat_template.json",    "model.safetensors.index.json"};
  if (kNames.count(path)) return true;
  const std::string ext = ".safetensors";
  return path.find('/') == std::string::npos && path.size() > ext.size() &&
         path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

bool HubClient::SnapshotLoadable(const std::string& dir) {
  const fs::path d(dir);
  std::error_code ec;
  if (!fs::is_regular_file(d / "config.json", ec)) return false;  // follows the symlink
  if (fs::exists(d / "model.safetensors.index.json", ec)) {
    try {
      const json index = json::parse(std::ifstream(d / "model.safetensors.index.json"));
      std::set<std::string> shards;
      for (const auto& [name, shard] : index.at("weight_map").items()) {
        shards.insert(shard.get<std::string>());
      }
      for (const std::string& s : shards) {
        if (!fs::is_regular_file(d / s, ec)) return false;
      }
      return !shards.empty();
    } catch (const std::exception&) {
      return false;
    }
  }
  return fs::is_regular_file(d / "model.safetensors", ec);
}

RepoListing HubClient::List(const RepoSpec& spec) const {
  if (o_.offline) {
    throw HubError(HubErrorKind::kOffline, spec.repo + ": HF_HUB_OFFLINE is set; cannot list");
  }
  const std::string url = o_.endpoint + "/api/models/" + Escape(spec.repo, true) + "/revision/" +
                          Escape(spec.revision, false) + "?blobs=True";
  const json j = GetJson(o_, url, spec.repo, "revision " + spec.revision);
  RepoListing l;
  l.repo = spec.repo;
  l.revision = spec.revision;
  if (!j.is_object() || !j.contains("sha") || !j["sha"].is_string() ||
      !IsCommitHash(j["sha"].get<std::string>())) {
    throw HubError(HubErrorKind::kNetwork,
                   spec.repo + ": the Hub's revision answer has no commit hash ('sha')");
  }
  l.commit = j["sha"].get<std::string>();
  if (!j.contains("siblings") || !j["siblings"].is_array()) {
    throw HubError(HubErrorKind::kNetwork, spec.repo + ": the Hub's answer lists no files");
  }
  for (const json& s : j["siblings"]) l.files.push_back(ParseSibling(s, spec.repo));
  return l;
}

uint64_t HubClient::Fetch(const RepoListing& l, const RepoFile& f) const {
  const std::string blob = cache_.BlobPath(l.repo, f.etag());
  std::error_code ec;
  auto cached = [&] { return fs::is_regular_file(blob, ec) && FileSize(blob) == f.size; };
  if (!cached()) {
    fs::create_directories(fs::path(blob).parent_path(), ec);
    FileLock lock(cache_.LockPath(l.repo, f.etag()));
    if (!cached()) {  // another process may have finished it while we waited for the lock
      const std::string part = cache_.IncompletePath(l.repo, f.etag());
      const std::string url = o_.endpoint + "/" + Escape(l.repo, true) + "/resolve/" + l.commit +
                              "/" + Escape(f.path, true);
      uint64_t total_received = 0;
      for (int round = 0;; ++round) {
        uint64_t received = 0;
        std::string got;
        try {
          got = DownloadResumable(o_, l.repo, url, f, part, &received);
        } catch (...) {
          if (o_.progress) o_.progress({f.path, FileSize(part), f.size, 0, true});
          throw;
        }
        total_received += received;
        if (got == f.etag()) break;
        fs::remove(part, ec);  // never keep bytes that hash wrong
        if (round == 1) {
          throw HubError(HubErrorKind::kChecksum,
                         l.repo + "/" + f.path + ": checksum mismatch twice (expected " +
                             (f.sha256.empty() ? "git sha1 " : "sha256 ") + f.etag() + ", got " +
                             got +
                             "); the partial file was deleted. The Hub or a proxy is "
                             "serving corrupt bytes; try again later");
        }
        if (o_.log) o_.log(f.path + ": checksum mismatch, fetching it again");
      }
      fs::rename(part, blob, ec);
      if (ec) throw Error(ErrorCode::kIo, blob + ": cannot move into place: " + ec.message());
      cache_.LinkSnapshot(l.repo, l.commit, f.path, f.etag());
      return total_received;
    }
  }
  cache_.LinkSnapshot(l.repo, l.commit, f.path, f.etag());
  return 0;
}

PullResult HubClient::Pull(const RepoSpec& spec, const PullOptions& po) const {
  PullResult r;
  auto from_cache = [&](const std::string& why) -> PullResult {
    const auto commit = cache_.ResolveCached(spec.repo, spec.revision);
    const std::string dir = commit ? cache_.SnapshotDir(spec.repo, *commit) : std::string();
    if (!commit || !SnapshotLoadable(dir)) {
      throw HubError(HubErrorKind::kOffline, spec.repo + "@" + spec.revision + ": " + why +
                                                 ", and the cache (" + cache_.root() +
                                                 ") holds no complete snapshot of it. Pull it once "
                                                 "online (`gemma-engine pull " +
                                                 spec.repo + "`)");
    }
    PullResult c;
    c.snapshot_dir = dir;
    c.commit = *commit;
    c.from_cache_only = true;
    return c;
  };
  if (o_.offline) return from_cache("HF_HUB_OFFLINE is set");
  RepoListing l;
  try {
    l = List(spec);
  } catch (const HubError& e) {
    if (e.kind() != HubErrorKind::kOffline) throw;
    PullResult c = from_cache(std::string("the Hub is unreachable (") + e.what() + ")");
    if (o_.log) o_.log(std::string(e.what()) + "; using the cached snapshot " + c.commit);
    return c;
  }
  std::vector<const RepoFile*> want;
  for (const RepoFile& f : l.files) {
    if (!po.text_only || IsTextFile(f.path)) want.push_back(&f);
  }
  // Enough disk for what is missing, before any byte moves.
  uint64_t need = 0;
  for (const RepoFile* f : want) {
    const std::string blob = cache_.BlobPath(l.repo, f->etag());
    if (FileSize(blob) == f->size && fs::exists(blob)) continue;
    const uint64_t part = FileSize(cache_.IncompletePath(l.repo, f->etag()));
    need += f->size - std::min(part, f->size);
  }
  std::error_code ec;
  fs::create_directories(fs::path(cache_.RepoDir(l.repo)) / "blobs", ec);
  if (ec) throw Error(ErrorCode::kIo, cache_.RepoDir(l.repo) + ": cannot create: " + ec.message());
  const fs::space_info space = fs::space(fs::path(cache_.RepoDir(l.repo)) / "blobs", ec);
  if (!ec && need > 0 && space.available < need + o_.disk_reserve_bytes) {
    throw HubError(HubErrorKind::kDiskFull,
                   l.repo + ": needs " + std::to_string(need >> 20) + " MiB (+" +
                       std::to_string(o_.disk_reserve_bytes >> 20) + " MiB reserve) in " +
                       cache_.root() + " but only " + std::to_string(space.available >> 20) +
                       " MiB are free; free space or set HF_HUB_CACHE to a larger disk");
  }
  cache_.WriteRef(l.repo, l.revision, l.commit);
  for (const RepoFile* f : want) {
    const std::string blob = cache_.BlobPath(l.repo, f->etag());
    const bool had = fs::is_regular_file(blob, ec) && FileSize(blob) == f->size;
    r.bytes_downloaded += Fetch(l, *f);
    (had ? r.files_reused : r.files_downloaded) += 1;
  }
  // Files the engine looks for that this commit does not have: markers, as huggingface_hub does,
  // so later offline lookups know the absence is a fact rather than a gap in the cache.
  for (const char* optional :
       {"generation_config.json", "chat_template.jinja", "model.safetensors.index.json",
        "model.safetensors", "tokenizer.json"}) {
    bool present = false;
    for (const RepoFile& f : l.files) present |= f.path == optional;
    if (!present) cache_.MarkNoExist(l.repo, l.commit, optional);
  }
  r.commit = l.commit;
  r.snapshot_dir = cache_.SnapshotDir(l.repo, l.commit);
  return r;
}

}  // namespace gemma::hub
