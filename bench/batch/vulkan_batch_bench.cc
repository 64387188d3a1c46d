// Batched decode on the Vulkan backend, below the runtime (not a test): B contexts of one model at
// `ctx` cached tokens, each batched step (BackendModel::ForwardBatch, greedy rows) rewound after
// it, so every step runs at the same context; the median step time and B / step as tok/s, against
// the same contexts stepped one after another. With --profile, the GPU time per kernel of a
// batched step. Then speculative verification steps of k drafts against a one-token step, on the
// prompt path and as a batched step's rows (VERIFY_ROWS).
//   vulkan_batch_bench MODEL_DIR [--ctx 512] [--batches 1,2,4,8,16] [--steps 32] [--profile 1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/vulkan/vulkan_backend.h"
#include "bench/vulkan/vulkan_lab.h"
#include "gemma/error.h"
#include "model/model.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s MODEL_DIR [--ctx 512] [--batches 1,2,4,8,16] [--steps 32] "
                 "[--profile 0|1]\n",
                 argv[0]);
    return 2;
  }
  int ctx = 512, steps = 32;
  bool profile = false;
  std::vector<int> batches = {1, 2, 4, 8, 16};
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--ctx") {
      ctx = std::atoi(v.c_str());
    } else if (k == "--steps") {
      steps = std::atoi(v.c_str());
    } else if (k == "--profile") {
      profile = v != "0";
    } else if (k == "--batches") {
      batches.clear();
      std::stringstream ss(v);
      for (std::string x; std::getline(ss, x, ',');) batches.push_back(std::atoi(x.c_str()));
    }
  }
  try {
    auto model = gemma::Model::Load(argv[1]);
    const int V = model->text().vocab_size;
    auto vm = gemma::CreateVulkanModel(*model, {});
    const int most = *std::max_element(batches.begin(), batches.end());
    std::vector<std::unique_ptr<gemma::Backend>> ctxs;
    std::vector<int32_t> prompt(ctx);
    gemma::ForwardResult r;
    for (int c = 0; c < most; ++c) {
      ctxs.push_back(vm->NewContext({.capacity = ctx + 64}));
      for (int i = 0; i < ctx; ++i) prompt[i] = i == 0 ? 2 : int32_t((i * 7919 + c * 104729) % V);
      ctxs.back()->Forward({.tokens = prompt, .mode = gemma::OutputMode::kNone}, &r);
    }
    std::printf("Vulkan batched decode, %s, %d cached tokens per context, median of %d steps\n\n",
                argv[1], ctx, steps);
    std::printf(
        "| B | batched step ms | tok/s | steps one by one ms | tok/s | ratio | first step's "
        "recording ms |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
    for (int b : batches) {
      std::vector<int32_t> toks(b);
      std::vector<gemma::ForwardResult> res(b);
      std::vector<gemma::BatchStep> st(b);
      std::vector<double> batched, solo;
      double first = 0;  // the first batched step: recorded, the others replay
      for (int s = 0; s < steps + 3; ++s) {
        for (int i = 0; i < b; ++i) {
          toks[i] = int32_t((s * 31 + i * 7 + 5) % V);
          st[i] = {ctxs[i].get(), {.tokens = std::span<const int32_t>(&toks[i], 1)}, &res[i]};
        }
        double t0 = Now();
        vm->ForwardBatch(st);
        const double tb = Now() - t0;
        for (int i = 0; i < b; ++i) {
          if (st[i].error) std::rethrow_exception(st[i].error);
          ctxs[i]->Truncate(ctx);
        }
        t0 = Now();
        for (int i = 0; i < b; ++i) ctxs[i]->Forward(st[i].request, &res[i]);
        const double ts = Now() - t0;
        for (int i = 0; i < b; ++i) ctxs[i]->Truncate(ctx);
        if (s == 0) first = tb;
        if (s >= 3) {
          batched.push_back(tb);
          solo.push_back(ts);
        }
      }
      const double mb = Median(batched), ms = Median(solo);
      std::printf("| %d | %.3f | %.0f | %.3f | %.0f | %.2fx | %.1f |\n", b, mb * 1e3, b / mb,
                  ms * 1e3, b / ms, ms / mb, (first - mb) * 1e3);
    }
    // Verification steps (speculative decoding): the token and k drafts in one Forward with every
    // position's argmax, rewound after it, on the prompt path (a chunk: VERIFY_ROWS=0) and as
    // rows of a batched step (VERIFY_ROWS=2), each on a context of its own at the same position.
    std::vector<std::unique_ptr<gemma::Backend>> verify;
    for (int rows_from : {0, 2}) {
      verify.push_back(gemma::CreateVulkanSibling(
          *ctxs[0], {.capacity = ctx + 64}, gemma::KernelConfig().Set("VERIFY_ROWS", rows_from)));
      for (int i = 0; i < ctx; ++i) prompt[i] = i == 0 ? 2 : int32_t((i * 7919) % V);
      verify.back()->Forward({.tokens = prompt, .mode = gemma::OutputMode::kNone}, &r);
    }
    std::printf(
        "\n| verification step (k drafts + 1) | chunk ms | x one-token step | rows ms "
        "| x one-token step |\n|---|---|---|---|---|\n");
    double one = 0;
    std::vector<std::vector<std::pair<std::string, double>>> verify_profiles;
    for (int k : {0, 1, 2, 3, 4, 6, 8}) {
      std::vector<int32_t> toks(k + 1);
      for (int i = 0; i <= k; ++i) toks[i] = int32_t((i * 131 + 17) % V);
      double med[2] = {0, 0};
      for (int path = 0; path < (k == 0 ? 1 : 2); ++path) {
        std::vector<double> t;
        for (int s = 0; s < steps + 3; ++s) {
          const double t0 = Now();
          verify[path]->Forward({.tokens = toks, .all_positions = true}, &r);
          const double dt = Now() - t0;
          verify[path]->Truncate(ctx);
          if (s >= 3) t.push_back(dt);
        }
        med[path] = Median(t);
      }
      if (k == 0) one = med[0];
      if (k == 0) {
        std::printf("| k = 0 (a one-token step) | %.3f | 1.00x | | |\n", med[0] * 1e3);
      } else {
        std::printf("| k = %d | %.3f | %.2fx | %.3f | %.2fx |\n", k, med[0] * 1e3, med[0] / one,
                    med[1] * 1e3, med[1] / one);
      }
      if (profile && k > 0) verify_profiles.push_back(gemma::ProfileVulkanStep(*verify[0], toks));
    }
    for (size_t i = 0; i < verify_profiles.size(); ++i) {
      auto& pp = verify_profiles[i];
      std::sort(pp.begin(), pp.end(), [](auto& a, auto& c) { return a.second > c.second; });
      double tot = 0;
      for (auto& [k, ns] : pp) tot += ns;
      std::printf("\n| kernel (verification step %zu) | GPU us |\n|---|---|\n", i + 1);
      int shown = 0;
      for (auto& [k, ns] : pp)
        if (shown++ < 8) std::printf("| %s | %.1f |\n", k.c_str(), ns / 1e3);
      std::printf("| total | %.1f |\n", tot / 1e3);
    }
    if (profile) {
      for (int b : batches) {
        if (b < 2) continue;
        std::vector<int32_t> toks(b, 5);
        std::vector<gemma::Backend*> rows;
        for (int i = 0; i < b; ++i) rows.push_back(ctxs[i].get());
        auto pp = gemma::ProfileVulkanBatch(rows, toks);
        std::sort(pp.begin(), pp.end(), [](auto& a, auto& c) { return a.second > c.second; });
        double tot = 0;
        for (auto& [k, ns] : pp) tot += ns;
        std::printf(
            "\n| kernel (a batched step of %d contexts at %d) | GPU us | share |\n"
            "|---|---|---|\n",
            b, ctx);
        int shown = 0;
        for (auto& [k, ns] : pp)
          if (shown++ < 14)
            std::printf("| %s | %.1f | %.1f%% |\n", k.c_str(), ns / 1e3, 100 * ns / tot);
        std::printf("| total (timestamped) | %.1f | |\n", tot / 1e3);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
