#include "hub/cache.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "hub/hub_error.h"

namespace gemma::hub {
namespace {

namespace fs = std::filesystem;

void MakeDirs(const fs::path& p) {
  std::error_code ec;
  fs::create_directories(p, ec);
  if (ec) throw Error(ErrorCode::kIo, p.string() + ": cannot create directory: " + ec.message());
}

// Repository-relative paths come from the server: refuse anything that would leave the snapshot.
void CheckRelative(const std::string& path) {
  if (path.empty() || path[0] == '/' || path.find('\\') != std::string::npos) {
    throw HubError(HubErrorKind::kNetwork, "refusing file path '" + path + "' from the Hub");
  }
  for (const auto& part : fs::path(path)) {
    if (part == ".." || part == ".") {
      throw HubError(HubErrorKind::kNetwork, "refusing file path '" + path + "' from the Hub");
    }
  }
}

// Unique per process and thread: two pulls in one process must not share a temporary name.
std::string TempSuffix() {
  static std::atomic<uint64_t> counter{0};
  return ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

}  // namespace

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool LooksLikeRepoSpec(const std::string& s) {
  // Hub ids: [A-Za-z0-9][A-Za-z0-9._-]* for both parts; the revision may hold '/' (branches).
  static const std::regex kRe(
      R"(^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*(@[A-Za-z0-9._/-]+)?$)");
  return std::regex_match(s, kRe) && s.find("..") == std::string::npos;
}

RepoSpec ParseRepoSpec(const std::string& spec) {
  if (!LooksLikeRepoSpec(spec)) {
    throw HubError(HubErrorKind::kInvalidSpec,
                   "'" + spec +
                       "' is not a Hub model id (expected ORG/NAME or ORG/NAME@REVISION, "
                       "e.g. google/gemma-4-E2B-it)");
  }
  RepoSpec r;
  const size_t at = spec.find('@');
  r.repo = spec.substr(0, at);
  if (at != std::string::npos) r.revision = spec.substr(at + 1);
  return r;
}

bool IsCommitHash(const std::string& s) {
  static const std::regex kRe("^[0-9a-f]{40}$");
  return std::regex_match(s, kRe);
}

std::string DefaultCacheRoot() {
  if (std::string v = Env("HF_HUB_CACHE"); !v.empty()) return v;
  if (std::string v = Env("HF_HOME"); !v.empty()) return (fs::path(v) / "hub").string();
  if (std::string v = Env("XDG_CACHE_HOME"); !v.empty()) {
    return (fs::path(v) / "huggingface" / "hub").string();
  }
  std::string home = Env("HOME");
  if (home.empty()) home = "/tmp";
  return (fs::path(home) / ".cache" / "huggingface" / "hub").string();
}

std::string HubCache::RepoDir(const std::string& repo) const {
  std::string folder = "models--" + repo;
  for (size_t p = folder.find('/'); p != std::string::npos; p = folder.find('/', p)) {
    folder.replace(p, 1, "--");
  }
  return (fs::path(root_) / folder).string();
}

std::string HubCache::BlobPath(const std::string& repo, const std::string& etag) const {
  return (fs::path(RepoDir(repo)) / "blobs" / etag).string();
}

std::string HubCache::IncompletePath(const std::string& repo, const std::string& etag) const {
  return BlobPath(repo, etag) + ".incomplete";
}

std::string HubCache::LockPath(const std::string& repo, const std::string& etag) const {
  return (fs::path(root_) / ".locks" / fs::path(RepoDir(repo)).filename() / (etag + ".lock"))
      .string();
}

std::string HubCache::SnapshotDir(const std::string& repo, const std::string& commit) const {
  return (fs::path(RepoDir(repo)) / "snapshots" / commit).string();
}

std::string HubCache::SnapshotPath(const std::string& repo, const std::string& commit,
                                   const std::string& path) const {
  CheckRelative(path);
  return (fs::path(SnapshotDir(repo, commit)) / path).string();
}

std::string HubCache::NoExistPath(const std::string& repo, const std::string& commit,
                                  const std::string& path) const {
  CheckRelative(path);
  return (fs::path(RepoDir(repo)) / ".no_exist" / commit / path).string();
}

std::optional<std::string> HubCache::ResolveCached(const std::string& repo,
                                                   const std::string& revision) const {
  std::error_code ec;
  if (IsCommitHash(revision) && fs::is_directory(SnapshotDir(repo, revision), ec)) {
    return revision;
  }
  const fs::path ref = fs::path(RepoDir(repo)) / "refs" / revision;
  std::ifstream in(ref);
  std::string commit;
  if (!in || !std::getline(in, commit)) return std::nullopt;
  while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back()))) {
    commit.pop_back();
  }
  if (!IsCommitHash(commit)) return std::nullopt;
  return commit;
}

void HubCache::WriteRef(const std::string& repo, const std::string& revision,
                        const std::string& commit) const {
  if (revision == commit) return;
  CheckRelative(revision);
  const fs::path ref = fs::path(RepoDir(repo)) / "refs" / revision;
  MakeDirs(ref.parent_path());
  const fs::path tmp = ref.string() + TempSuffix();
  {
    std::ofstream out(tmp);
    out << commit;  // huggingface_hub writes the bare hash, no newline
    if (!out) throw Error(ErrorCode::kIo, tmp.string() + ": write failed");
  }
  std::error_code ec;
  fs::rename(tmp, ref, ec);
  if (ec) throw Error(ErrorCode::kIo, ref.string() + ": " + ec.message());
}

void HubCache::LinkSnapshot(const std::string& repo, const std::string& commit,
                            const std::string& path, const std::string& etag) const {
  const fs::path link = SnapshotPath(repo, commit, path);
  MakeDirs(link.parent_path());
  // Relative, so the cache can be moved or mounted elsewhere (what huggingface_hub does).
  const fs::path target = fs::path(BlobPath(repo, etag)).lexically_relative(link.parent_path());
  // Made beside and renamed over: atomic, so concurrent pulls and readers never see a gap.
  const fs::path tmp = link.string() + TempSuffix();
  std::error_code ec;
  fs::create_symlink(target, tmp, ec);
  if (!ec) fs::rename(tmp, link, ec);
  if (ec) {
    fs::remove(tmp);
    throw Error(ErrorCode::kIo, link.string() + ": cannot create symlink: " + ec.message());
  }
}

void HubCache::MarkNoExist(const std::string& repo, const std::string& commit,
                           const std::string& path) const {
  const fs::path p = NoExistPath(repo, commit, path);
  MakeDirs(p.parent_path());
  std::ofstream(p).flush();
}

}  // namespace gemma::hub
