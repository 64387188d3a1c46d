// Batched decode steps of the fast CPU backend without the runtime (not a test): B contexts, each
// after its own 32-token prompt, stepped together by BackendModel::ForwardBatch (B = 1: Forward,
// as the StepBatcher does) for N greedy tokens. Prints per B the median wall time of a step, the
// CPU time per step of the whole process (with --threads 1 the figure that other load on the
// machine disturbs least: no pool workers spin) and tokens per step-second relative to B = 1.
//   step_bench MODEL_DIR [--threads T] [--tokens N] [--batches 1,4] [--prompt P]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/fast/cpu_fast_backend.h"
#include "model/model.h"

namespace {

double ProcessCpuS() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

struct Figure {
  double wall_ms = 0;  // median per step
  double cpu_ms = 0;   // mean per step
};

Figure Steps(gemma::BackendModel& bm, int vocab, int b, int tokens, int prompt) {
  using namespace gemma;
  std::vector<std::unique_ptr<Backend>> ctx;
  std::vector<int32_t> next(b);
  for (int i = 0; i < b; ++i) {
    ctx.push_back(bm.NewContext({.capacity = prompt + tokens + 8}));
    std::vector<int32_t> p = {2};
    for (int t = 1; t < prompt; ++t) p.push_back(3 + (t * 7919 + i * 104729) % (vocab - 3));
    ForwardResult r;
    ctx[i]->Forward({.tokens = p}, &r);
    next[i] = r.ids[0];
  }
  std::vector<ForwardResult> res(b);
  std::vector<double> wall;
  const double c0 = ProcessCpuS();
  for (int s = 0; s < tokens; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    if (b == 1) {
      ctx[0]->Forward({.tokens = std::span<const int32_t>(&next[0], 1)}, &res[0]);
    } else {
      std::vector<BatchStep> steps;
      for (int i = 0; i < b; ++i)
        steps.push_back({.context = ctx[i].get(),
                         .request = {.tokens = std::span<const int32_t>(&next[i], 1)},
                         .result = &res[i]});
      bm.ForwardBatch(steps);
      for (const BatchStep& st : steps)
        if (st.error) std::rethrow_exception(st.error);
    }
    wall.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    for (int i = 0; i < b; ++i) next[i] = res[i].ids[0];
  }
  Figure f;
  f.cpu_ms = (ProcessCpuS() - c0) * 1e3 / tokens;
  std::sort(wall.begin(), wall.end());
  f.wall_ms = wall[wall.size() / 2];
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s MODEL_DIR [--threads T] [--tokens N] [--batches 1,4] [--prompt P]\n",
                 argv[0]);
    return 2;
  }
  int threads = 2, tokens = 64, prompt = 32;
  std::vector<int> batches = {1, 4};
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--threads") {
      threads = std::stoi(v);
    } else if (k == "--tokens") {
      tokens = std::stoi(v);
    } else if (k == "--prompt") {
      prompt = std::stoi(v);
    } else if (k == "--batches") {
      batches.clear();
      std::stringstream ss(v);
      for (std::string item; std::getline(ss, item, ',');) batches.push_back(std::stoi(item));
    }
  }
  try {
    auto model = gemma::Model::Load(argv[1]);
    auto bm = gemma::CreateCpuFastModel(*model, threads);
    const int vocab = model->text().vocab_size;
    Steps(*bm, vocab, 1, std::min(tokens, 8), prompt);  // (warm-up: weight pages, caches)
    std::printf("cpu-fast, %d threads, %d-token prompts, %d steps\n", threads, prompt, tokens);
    std::printf("%4s %12s %12s %10s %10s\n", "B", "wall ms/step", "cpu ms/step", "x (wall)",
                "x (cpu)");
    double one_wall = 0, one_cpu = 0;
    for (int b : batches) {
      const Figure f = Steps(*bm, vocab, b, tokens, prompt);
      if (b == 1) {
        one_wall = f.wall_ms;
        one_cpu = f.cpu_ms;
      }
      std::printf("%4d %12.2f %12.2f %10.2f %10.2f\n", b, f.wall_ms, f.cpu_ms,
                  one_wall > 0 ? b * one_wall / f.wall_ms : 0.0,
                  one_cpu > 0 ? b * one_cpu / f.cpu_ms : 0.0);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
