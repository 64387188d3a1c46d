// Memory and time per session (not a test): one engine, then sessions added one by one, each
// evaluating a prompt and a few tokens so that its caches are touched. Prints one JSON line per
// reported session count: the process RSS, the GPU memory the driver reports for this process
// (nvidia-smi, where present) and the time since the engine started loading.
//   session_memory MODEL_DIR [--backend B] [--context N] [--sessions 1,2,10] [--prompt N]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gemma/engine.h"

namespace {

double RssMiB() {
  std::ifstream f("/proc/self/statm");
  size_t pages = 0, resident = 0;
  f >> pages >> resident;
  return double(resident) * double(::sysconf(_SC_PAGESIZE)) / (1 << 20);
}

// This process's GPU memory in MiB according to the NVIDIA driver (-1 where nvidia-smi is absent).
double GpuMiB() {
  FILE* p = ::popen("nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits "
                    "2>/dev/null",
                    "r");
  if (!p) return -1;
  double mib = -1;
  char line[256];
  const long self = ::getpid();
  while (std::fgets(line, sizeof line, p)) {
    long pid = 0;
    double used = 0;
    if (std::sscanf(line, "%ld, %lf", &pid, &used) == 2 && pid == self) mib = used;
  }
  ::pclose(p);
  return mib;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [--backend B] [--context N] [--sessions 1,2,10] "
                         "[--prompt N]\n", argv[0]);
    return 2;
  }
  gemma::EngineOptions eo;
  eo.model_path = argv[1];
  eo.backend = "cpu";
  eo.context_capacity = 4096;
  std::set<int> report = {1, 2, 10};
  int prompt_len = 64;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--backend") {
      eo.backend = v;
    } else if (k == "--context") {
      eo.context_capacity = std::atoi(v.c_str());
    } else if (k == "--prompt") {
      prompt_len = std::atoi(v.c_str());
    } else if (k == "--sessions") {
      report.clear();
      std::stringstream ss(v);
      for (std::string n; std::getline(ss, n, ',');) report.insert(std::atoi(n.c_str()));
    }
  }
  const double rss0 = RssMiB();
  const auto t0 = std::chrono::steady_clock::now();
  auto ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  try {
    auto engine = gemma::Engine::Load(eo);
    std::printf("{\"sessions\": 0, \"backend\": \"%s\", \"device\": \"%s\", \"context\": %d, "
                "\"shared_mib\": %.1f, \"rss_mib\": %.1f, \"rss_before_load_mib\": %.1f, "
                "\"gpu_mib\": %.0f, \"ms\": %.0f}\n",
                engine->backend_name().c_str(), engine->backend_device().c_str(),
                engine->context_capacity(), engine->shared_bytes() / double(1 << 20), RssMiB(),
                rss0, GpuMiB(), ms());
    std::fflush(stdout);
    std::vector<int32_t> prompt(prompt_len);
    for (int i = 0; i < prompt_len; ++i)
      prompt[i] = i == 0 ? 2 : 100 + (i * 7919) % (engine->vocab_size() - 200);
    gemma::GenerateOptions go;
    go.max_new_tokens = 4;
    go.ignore_eos = true;
    std::vector<std::unique_ptr<gemma::Session>> sessions;
    const int most = *report.rbegin();
    for (int n = 1; n <= most; ++n) {
      sessions.push_back(engine->NewSession());
      sessions.back()->Generate(gemma::Input::Ids(prompt), go);
      if (report.count(n)) {
        std::printf("{\"sessions\": %d, \"rss_mib\": %.1f, \"gpu_mib\": %.0f, \"ms\": %.0f}\n", n,
                    RssMiB(), GpuMiB(), ms());
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
