// The Hugging Face hub cache, laid out exactly as huggingface_hub writes it, so files fetched by
// transformers or llama.cpp are reused here and ours are reused by them:
//
//   <root>/models--ORG--NAME/blobs/<etag>            content; etag = sha256 (LFS) or git sha1
//   <root>/models--ORG--NAME/blobs/<etag>.incomplete  a transfer in progress (resumable)
//   <root>/models--ORG--NAME/refs/<revision>         text: the commit hash the revision points to
//   <root>/models--ORG--NAME/snapshots/<commit>/<path> relative symlink to ../../blobs/<etag>
//   <root>/models--ORG--NAME/.no_exist/<commit>/<path> empty marker: the file is not in that commit
//   <root>/.locks/models--ORG--NAME/<etag>.lock      per-blob lock file
//
// root = $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub.
#pragma once

#include <optional>
#include <string>

namespace gemma::hub {

// ORG/NAME[@REV]. `revision` defaults to "main".
struct RepoSpec {
  std::string repo;  // "org/name"
  std::string revision = "main";
};
// Throws HubError(kInvalidSpec) when `spec` is not ORG/NAME[@REV] with sane characters.
RepoSpec ParseRepoSpec(const std::string& spec);
// True when `s` looks like ORG/NAME[@REV] (used to tell a repo id from a missing local path).
bool LooksLikeRepoSpec(const std::string& s);
// A full 40-hex commit hash.
bool IsCommitHash(const std::string& s);

// The cache root from the environment (see above).
std::string DefaultCacheRoot();

// The environment variable `name`'s value ("" when unset).
std::string Env(const char* name);

class HubCache {
 public:
  explicit HubCache(std::string root) : root_(std::move(root)) {}
  const std::string& root() const { return root_; }

  std::string RepoDir(const std::string& repo) const;  // <root>/models--org--name
  std::string BlobPath(const std::string& repo, const std::string& etag) const;
  std::string IncompletePath(const std::string& repo, const std::string& etag) const;
  std::string LockPath(const std::string& repo, const std::string& etag) const;
  std::string SnapshotDir(const std::string& repo, const std::string& commit) const;
  std::string SnapshotPath(const std::string& repo, const std::string& commit,
                           const std::string& path) const;
  std::string NoExistPath(const std::string& repo, const std::string& commit,
                          const std::string& path) const;

  // The commit a revision names in the cache: a commit hash with a snapshot folder, or the
  // content of refs/<revision>. nullopt when unknown.
  std::optional<std::string> ResolveCached(const std::string& repo,
                                           const std::string& revision) const;
  // Writes refs/<revision> = commit (atomically). A commit-hash revision writes no ref.
  void WriteRef(const std::string& repo, const std::string& revision,
                const std::string& commit) const;
  // snapshots/<commit>/<path> -> relative symlink to blobs/<etag> (replacing what was there).
  void LinkSnapshot(const std::string& repo, const std::string& commit, const std::string& path,
                    const std::string& etag) const;
  void MarkNoExist(const std::string& repo, const std::string& commit,
                   const std::string& path) const;

 private:
  std::string root_;
};

}  // namespace gemma::hub
