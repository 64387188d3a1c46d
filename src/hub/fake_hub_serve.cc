// Serves a local directory as a Hub repository on 127.0.0.1 (the tests' fake Hub), for manual and
// benchmark runs of `gemma-engine pull` without a network:
//   fake_hub_serve DIR ORG/NAME &   (prints its endpoint: a free port on 127.0.0.1)
//   HF_ENDPOINT=<endpoint> HF_HUB_CACHE=/tmp/c gemma-engine pull ORG/NAME
// Small files are read into memory; large ones are served from a memory map (a full-size
// checkpoint is not copied). Safetensors are served as LFS files. Every oid is hashed once at
// start. SIGUSR1 prints the bytes served since the last report (download bodies only) to stderr
// as "fake_hub_serve: served N bytes" and starts counting again; SIGINT/SIGTERM print the same and
// exit.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "core/mapped_file.h"
#include "core/timer.h"
#include "hub/fake_hub.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fake_hub_serve DIR ORG/NAME\n");
    return 2;
  }
  // Signals wait for sigwait below (blocked before the server's threads start, so they inherit it).
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  namespace fs = std::filesystem;
  gemma::hub::testing::FakeHub hub;
  gemma::hub::testing::FakeRepo repo;
  repo.id = argv[2];
  repo.commit = "c0ffee0000000000000000000000000000000001";
  std::vector<std::shared_ptr<gemma::MappedFile>> maps;
  std::vector<std::string> paths;
  uint64_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(argv[1])) {
    if (!e.is_regular_file()) continue;
    gemma::hub::testing::FakeFile f;
    f.path = fs::relative(e.path(), argv[1]).string();
    f.lfs = e.path().extension() == ".safetensors";
    if (e.file_size() > (64u << 20)) {
      auto m = std::make_shared<gemma::MappedFile>(e.path().string());
      maps.push_back(m);
      f.size = m->size();
      f.generate = [m](uint64_t offset, size_t n, char* dst) {
        std::memcpy(dst, m->data() + offset, n);
      };
    } else {
      f.content = gemma::ReadFileToString(e.path().string());
    }
    total += e.file_size();
    paths.push_back(f.path);
    repo.files.push_back(std::move(f));
  }
  gemma::Timer t;
  hub.AddRepo(std::move(repo));
  std::fprintf(stderr, "fake_hub_serve: %zu file(s), %.3f GB, oids hashed in %.1f s\n",
               paths.size(), total / 1e9, t.Ms() / 1000);
  std::printf("%s\n", hub.endpoint().c_str());
  std::fflush(stdout);
  for (;;) {
    int sig = 0;
    sigwait(&set, &sig);
    uint64_t served = 0;
    for (const std::string& p : paths) {
      const uint64_t b = hub.bytes_served(p);
      served += b;
      if (b) {
        std::fprintf(stderr, "fake_hub_serve:   %s: %llu bytes\n", p.c_str(),
                     static_cast<unsigned long long>(b));
      }
    }
    std::fprintf(stderr, "fake_hub_serve: served %llu bytes\n",
                 static_cast<unsigned long long>(served));
    hub.ResetCounters();
    if (sig != SIGUSR1) break;
  }
  return 0;
}
