// Batched decode across sessions (not a test): B sessions decoding greedy at once on one engine,
// with batching (EngineOptions::max_batch 16) and without (1), against one session alone. Each
// session's prompt is evaluated first (a one-token request), so the timed requests decode only;
// each batch size runs a few untimed steps first (a GPU creates a size's pipelines on first use).
// Prints per B: aggregate tok/s of both engines, the ratio to one stream, the median inter-token
// latency per sequence, the largest batch seen and the share of steps that ran batched.
// With --drafts right|half|wrong every session decodes speculatively with drafts of --draft K
// tokens built from its own plain continuation (computed beforehand): all right, the first half
// of each draft right, or all wrong (SpeculativeOptions::Mode::kCustom); tok/s then counts the
// same tokens, and "verify" is the share of the sessions' steps that were verification steps.
//   batch_bench MODEL_DIR [--backend B] [--tokens N] [--batches 1,2,4,8] [--threads T] [--runs R]
//               [--unbatched 0]   (0: the batched engine only, for profiles; ratios to its B = 1)
//               [--drafts right|half|wrong] [--draft K] [--draft-model DIR]
// With --draft-model the sessions draft with that model (SpeculativeOptions::Mode::kDraftModel).
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
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
  double verify = 0;   // share of the sessions' steps that were verification steps
};

std::string g_drafts;  // "" (plain decoding), right, half or wrong
int g_draft = 4;
bool g_draft_model = false;  // drafts from the engine's draft model

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
  // The drafts' source: each session's plain continuation, computed beforehand on its own session.
  std::vector<std::vector<int32_t>> want(b);
  if (!g_drafts.empty()) {
    for (int i = 0; i < b; ++i) {
      gemma::GenerateOptions o;
      o.max_new_tokens = tokens;
      o.ignore_eos = true;
      want[i] = engine.NewSession()->Generate(gemma::Input::Ids(prompts[i]), o).tokens;
    }
  }
  std::vector<gemma::Telemetry> tel(b);
  std::barrier start(b + 1);
  std::vector<std::thread> threads;
  for (int i = 0; i < b; ++i) {
    threads.emplace_back([&, i] {
      gemma::GenerateOptions o;
      o.max_new_tokens = tokens;
      o.ignore_eos = true;
      if (g_draft_model) {
        o.speculative.mode = gemma::SpeculativeOptions::Mode::kDraftModel;
        o.speculative.max_draft = g_draft;
      } else if (!g_drafts.empty()) {
        const int right = g_drafts == "right"  ? g_draft
                          : g_drafts == "half" ? (g_draft + 1) / 2
                                               : 0;
        const int vocab = engine.vocab_size();
        o.speculative.mode = gemma::SpeculativeOptions::Mode::kCustom;
        o.speculative.max_draft = g_draft;
        o.speculative.drafter = [&, i, right, vocab](std::span<const int32_t> ctx, int k) {
          std::vector<int32_t> d;
          const std::vector<int32_t>& w = want[i];
          for (size_t j = ctx.size() - prompts[i].size();
               static_cast<int>(d.size()) < k && j < w.size(); ++j) {
            const int at = static_cast<int>(d.size());
            d.push_back(at < right ? w[j] : (w[j] + 1) % vocab);
          }
          return d;
        };
      }
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
  int batched = 0, steps = 0, verify = 0;
  for (const gemma::Telemetry& t : tel) {
    itl.push_back(t.itl_median_ms);
    f.max_batch = std::max(f.max_batch, t.max_batch);
    batched += t.batched_steps;
    verify += t.verify_steps;
    // (each accepted draft token saves a step)
    steps += std::max(1, tokens - 1) - t.accepted;
  }
  f.batched = static_cast<double>(batched) / std::max(1, steps);
  f.verify = static_cast<double>(verify) / std::max(1, steps);
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
    } else if (k == "--drafts") {
      g_drafts = v;
    } else if (k == "--draft-model") {
      eo.draft_model_path = v;
      g_draft_model = true;
    } else if (k == "--draft") {
      g_draft = std::atoi(v.c_str());
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
    const auto loaded = std::chrono::steady_clock::now();
    std::printf("backend %s, %d tokens per session, best of %d runs\n",
                batched->backend_name().c_str(), tokens, runs);
    if (g_draft_model)
      std::printf("draft model %s, %d per step\n", eo.draft_model_path.c_str(), g_draft);
    if (!g_drafts.empty()) std::printf("drafts: %s, %d per step\n", g_drafts.c_str(), g_draft);
    std::printf("%4s %14s %8s %10s %9s %14s %10s %9s %7s\n", "B", "batched tok/s", "x one",
                "ITL ms", "max batch", "unbatched tok/s", "ITL ms", "batched", "verify");
    Run(*batched, 1, tokens);  // (warm-up: the weight copies' pages, the caches)
    if (unbatched) Run(*unbatched, 1, tokens);
    double one = 0;
    for (int b : batches) {
      // A few steps at this size first: on a GPU the first batch of a size creates its pipelines
      // (seconds, once per process; the H100 of 2026-12-05 read 105 tok/s at B = 4 without this).
      // (its wall time printed: with BATCH_WARM the model builds them from its load on a thread)
      if (b > 1) {
        const auto f0 = std::chrono::steady_clock::now();
        Run(*batched, b, std::min(tokens, 4));
        std::printf("     (B = %d: the first %d steps %.0f ms, %.1f s after the load)\n", b,
                    std::min(tokens, 4),
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - f0)
                        .count(),
                    std::chrono::duration<double>(f0 - loaded).count());
      }
      Figure best_b, best_u;
      for (int r = 0; r < runs; ++r) {
        const Figure fb = Run(*batched, b, tokens);
        const Figure fu = unbatched ? Run(*unbatched, b, tokens) : Figure{};
        if (fb.tok_s > best_b.tok_s) best_b = fb;
        if (fu.tok_s > best_u.tok_s) best_u = fu;
      }
      if (b == 1) one = unbatched ? best_u.tok_s : best_b.tok_s;
      std::printf("%4d %14.1f %8.2f %10.2f %9d %14.1f %10.2f %8.0f%% %6.0f%%\n", b, best_b.tok_s,
                  one > 0 ? best_b.tok_s / one : 0.0, best_b.itl_ms, best_b.max_batch, best_u.tok_s,
                  best_u.itl_ms, 100 * best_b.batched, 100 * best_b.verify);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
