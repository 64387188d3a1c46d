// Serves a local directory as a Hub repository on 127.0.0.1 (the tests' fake Hub), for manual and
// benchmark runs of `gemma-engine pull` without a network:
//   fake_hub_serve DIR ORG/NAME &   (prints its endpoint: a free port on 127.0.0.1)
//   HF_ENDPOINT=<endpoint> HF_HUB_CACHE=/tmp/c gemma-engine pull ORG/NAME
// Files are read into memory (safetensors are served as LFS files); meant for test-size
// checkpoints.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "core/mapped_file.h"
#include "hub/fake_hub.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fake_hub_serve DIR ORG/NAME\n");
    return 2;
  }
  namespace fs = std::filesystem;
  gemma::hub::testing::FakeHub hub;
  gemma::hub::testing::FakeRepo repo;
  repo.id = argv[2];
  repo.commit = "c0ffee0000000000000000000000000000000001";
  for (const auto& e : fs::recursive_directory_iterator(argv[1])) {
    if (!e.is_regular_file()) continue;
    gemma::hub::testing::FakeFile f;
    f.path = fs::relative(e.path(), argv[1]).string();
    f.content = gemma::ReadFileToString(e.path().string());
    f.lfs = e.path().extension() == ".safetensors";
    repo.files.push_back(std::move(f));
  }
  hub.AddRepo(std::move(repo));
  std::printf("%s\n", hub.endpoint().c_str());
  std::fflush(stdout);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  int sig = 0;
  sigwait(&set, &sig);
  return 0;
}
