// Batched decode across sessions (not a test): B sessions decoding greedy at once on one engine,
// with batching (EngineOptions::max_batch 16) and without (1), against one session alone. Each
// session's prompt is evaluated first (a one-token request), so the timed requests decode only.
// Prints per B: aggregate tok/s of both engines, the ratio to one stream, the median inter-token
// latency per sequence, the largest batch seen and the share of steps that ran batched.
//   batch_bench MODEL_DIR [--backend B] [--tokens N] [--batches 1,2,4,8] [--threads T] [--runs R]
//               [--unbatched 0]   (0: the batched engine only, for profiles; ratios to its B = 1)
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gemma/engine.h"

namespace {

struct Figure {
  double tok_s = 0;     // all sessions' tokens / wall time
  double itl_ms = 0;    // median over sessions of their median inter-token latency
  int max_batch = 0;
  double batched = 0;  // share of the sessions' steps that ran in a batch of two or more
};

Figure Run(gemma::Engine& engine, int b, int tokens) {
  std::vector<std::unique_ptr<gemma::Session>> sessions;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < b; ++i) {
    sessions.push_back(engine.NewSession());
    std::vector<int32_t> p = {2};
    for (int t = 0; t < 32; ++t) p.push_back(3 + (t * 7919 + i * 104729) % (engine.vocab_size() - 3));
    prompts.push_back(p);
    gemma::GenerateOptions warm;
    warm.max_new_tokens = 1;
    sessions[i]->Generate(gemma::Input::Ids(p), warm);
  }
  std::vector<gemma::Telemetry> tel(b);
  std::barrier start(b + 1);
  std::vector<std::thread> threads;
  for (int i = 0; i < b; ++i) {
    threads.emplace_back([&, i] {
      gemma::GenerateOptions o;
      o.max_new_tokens = tokens;
      o.ignore_eos = true;
      start.arrive_and_wait();
      tel[i] = sessions[i]->Generate(gemma::Input::Ids(prompts[i]), o).telemetry;
    });
  }
  start.arrive_and_wait();
  const auto t0 = std::chrono::steady_clock::now();
  for (std::thread& t : threads) t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Figure f;
  f.tok_s = static_cast<double>(b) * tokens / s;
  std::vector<double> itl;
  int batched = 0;
  for (const gemma::Telemetry& t : tel) {
    itl.push_back(t.itl_median_ms);
    f.max_batch = std::max(f.max_batch, t.max_batch);
    batched += t.batched_steps;
  }
  f.batched = static_cast<double>(batched) / (static_cast<double>(b) * std::max(1, tokens - 1));
  std::sort(itl.begin(), itl.end());
  f.itl_ms = itl[itl.size() / 2];
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s MODEL_DIR [--backend B] [--tokens N] [--batches 1,2,4,8] [--threads T] "
                 "[--runs R]\n",
                 argv[0]);
    return 2;
  }
  gemma::EngineOptions eo;
  eo.model_path = argv[1];
  eo.context_capacity = 1024;
  int tokens = 64, runs = 3;
  bool with_unbatched = true;
  std::vector<int> batches = {1, 2, 4, 8};
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--backend") {
      eo.backend = v;
    } else if (k == "--tokens") {
      tokens = std::atoi(v.c_str());
    } else if (k == "--threads") {
      eo.threads = std::atoi(v.c_str());
    } else if (k == "--runs") {
      runs = std::atoi(v.c_str());
    } else if (k == "--unbatched") {
      with_unbatched = std::atoi(v.c_str()) != 0;
    } else if (k == "--batches") {
      batches.clear();
      std::stringstream ss(v);
      for (std::string x; std::getline(ss, x, ',');) batches.push_back(std::atoi(x.c_str()));
    }
  }
  try {
    gemma::EngineOptions solo = eo;
    solo.max_batch = 1;
    auto batched = gemma::Engine::Load(eo);
    auto unbatched = with_unbatched ? gemma::Engine::Load(solo) : nullptr;
    std::printf("backend %s, %d tokens per session, best of %d runs\n",
                batched->backend_name().c_str(), tokens, runs);
    std::printf("%4s %14s %8s %10s %9s %14s %10s %9s\n", "B", "batched tok/s", "x one", "ITL ms",
                "max batch", "unbatched tok/s", "ITL ms", "batched");
    Run(*batched, 1, tokens);  // (warm-up: the weight copies' pages, the caches)
    if (unbatched) Run(*unbatched, 1, tokens);
    double one = 0;
    for (int b : batches) {
      Figure best_b, best_u;
      for (int r = 0; r < runs; ++r) {
        const Figure fb = Run(*batched, b, tokens);
        const Figure fu = unbatched ? Run(*unbatched, b, tokens) : Figure{};
        if (fb.tok_s > best_b.tok_s) best_b = fb;
        if (fu.tok_s > best_u.tok_s) best_u = fu;
      }
      if (b == 1) one = unbatched ? best_u.tok_s : best_b.tok_s;
      std::printf("%4d %14.1f %8.2f %10.2f %9d %14.1f %10.2f %8.0f%%\n", b, best_b.tok_s,
                  one > 0 ? best_b.tok_s / one : 0.0, best_b.itl_ms, best_b.max_batch, best_u.tok_s,
                  best_u.itl_ms, 100 * best_b.batched);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
