// A client for the Hugging Face Hub's model API over libcurl: revision -> commit, file listing
// with sizes and oids, and resumable, verified downloads into the shared cache (hub/cache.h).
//
// Transfers: `blobs/<etag>.incomplete` grows with HTTP Range resume across retries, dropped
// connections and separate runs (a cancelled pull keeps it); every byte is hashed as it is written
// and the file moves into blobs/ only when SHA-256 (LFS) or git's blob SHA-1 (regular files)
// matches the Hub's oid. A mismatch deletes the partial file and refetches once, then fails with
// HubError(kChecksum). A lock file per blob keeps two pulls of the same file from colliding.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hub/cache.h"

namespace gemma::hub {

struct TransferProgress {
  std::string file;      // repository path
  uint64_t done = 0;     // bytes of the file present (resumed bytes included)
  uint64_t total = 0;    // file size
  uint64_t resumed = 0;  // bytes that were already on disk when this transfer started
  bool finished = false;
};

struct HubOptions {
  std::string endpoint = "https://huggingface.co";  // HF_ENDPOINT
  std::string token;                                // HF_TOKEN (sent as Bearer)
  std::string cache_root;                           // DefaultCacheRoot()
  bool offline = false;                             // HF_HUB_OFFLINE=1
  int max_attempts = 5;  // per transfer, for 5xx, 429 and dropped connections
  int backoff_ms = 500;  // first retry delay; doubles each time
  int connect_timeout_s = 15;
  int stall_timeout_s = 60;  // abort (and retry) a transfer that moves no bytes this long
  uint64_t disk_reserve_bytes = 64ull << 20;  // free space kept beyond the files' sizes
  const std::atomic<bool>* cancel = nullptr;  // set -> HubError(kCancelled), partials kept
  std::function<void(const TransferProgress&)> progress;
  int progress_interval_ms = 200;               // between progress calls during a transfer
  std::function<void(const std::string&)> log;  // notices (e.g. "using the cached snapshot")

  // Defaults overridden by HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE, HF_HUB_CACHE / HF_HOME.
  static HubOptions FromEnvironment();
};

struct RepoFile {
  std::string path;
  uint64_t size = 0;
  std::string blob_id;  // git blob sha1
  std::string sha256;   // lfs oid; empty for regular (non-LFS) files
  // The cache's blob name, as huggingface_hub chooses it: the LFS sha256, else the git oid.
  const std::string& etag() const { return sha256.empty() ? blob_id : sha256; }
};

struct RepoListing {
  std::string repo, revision, commit;
  std::vector<RepoFile> files;
};

struct PullOptions {
  // Only what text generation needs: configs, tokenizer, chat template, safetensors (+ index).
  bool text_only = false;
};

struct PullResult {
  std::string snapshot_dir;
  std::string commit;
  bool from_cache_only = false;  // no network used (offline, or unreachable with a cached copy)
  int files_downloaded = 0;
  int files_reused = 0;
  uint64_t bytes_downloaded = 0;  // bytes received over the network in this pull
};

class HubClient {
 public:
  explicit HubClient(HubOptions options);
  const HubOptions& options() const { return o_; }
  const HubCache& cache() const { return cache_; }

  // GET /api/models/{repo}/revision/{rev}?blobs=true: the commit and every file with its size
  // and oids. Throws HubError (kNotFound, kGated, kOffline, kNetwork).
  RepoListing List(const RepoSpec& spec) const;
  // Makes snapshots/<commit>/<file.path> valid, downloading the blob if needed. Returns the
  // bytes received over the network (0 when the blob was already cached).
  uint64_t Fetch(const RepoListing& listing, const RepoFile& file) const;
  // Everything: list, disk check, fetch each selected file, refs/<rev>, .no_exist markers.
  PullResult Pull(const RepoSpec& spec, const PullOptions& options = {}) const;

  // True when `dir` (a snapshot) has config.json and every safetensors file its layout needs.
  static bool SnapshotLoadable(const std::string& dir);
  // Whether a repository path is part of the text-only subset.
  static bool IsTextFile(const std::string& path);

 private:
  HubOptions o_;
  HubCache cache_;
};

}  // namespace gemma::hub
