#include "hub/model_path.h"

#include <cstdio>
#include <filesystem>
#include <memory>

#include "hub/hub_error.h"
#include "hub/progress.h"

namespace gemma::hub {

std::string ResolveModelPath(const std::string& spec, const HubOptions& options, bool text_only) {
  std::error_code ec;
  if (std::filesystem::exists(spec, ec)) return spec;
  if (!LooksLikeRepoSpec(spec)) {
    throw Error(ErrorCode::kIo, spec +
                                    ": no such file or directory (and not an ORG/NAME[@REV] "
                                    "Hub model id)");
  }
  const RepoSpec r = ParseRepoSpec(spec);
  HubClient client(options);
  if (const auto commit = client.cache().ResolveCached(r.repo, r.revision)) {
    const std::string dir = client.cache().SnapshotDir(r.repo, *commit);
    if (HubClient::SnapshotLoadable(dir)) return dir;
  }
  return client.Pull(r, {.text_only = text_only}).snapshot_dir;
}

std::string ResolveModelPath(const std::string& spec) {
  std::error_code ec;
  if (std::filesystem::exists(spec, ec)) return spec;  // no environment reads for local paths
  HubOptions o = HubOptions::FromEnvironment();
  auto progress = std::make_shared<ConsoleProgress>(stderr);
  o.progress = [progress](const TransferProgress& p) { (*progress)(p); };
  o.log = [](const std::string& s) { std::fprintf(stderr, "pull: %s\n", s.c_str()); };
  return ResolveModelPath(spec, o);
}

}  // namespace gemma::hub
