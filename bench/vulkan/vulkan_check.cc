// vulkan_check: localizes a Vulkan departure from the CPU reference on one checkpoint (diagnosis on
// a device, not a test). (1) Every linear of the text model through the kernels of 1-, 3-, 16- and
// 64-token steps (VulkanLinearForTest) against ref::LinearForward: SRQ linears must be bit-exact,
// dense ones within f32 rounding. (2) Teacher-forced logits: the ids as one prompt chunk (or
// --split K: the first K as a chunk, then one-token steps), every position's relative L2 and
// argmax against the CPU reference.
// (3) --verify: speculative verification steps (the token and k right drafts, every position's
// logits) on the chunk and the rows path against the one-token steps that decoded those tokens,
// bit for bit, and all three against the fast CPU backend (teacher-forced).
// Usage: vulkan_check MODEL_DIR [--ids 1,2,3] [--split K] [--linears 0|1] [--capacity N]
//        vulkan_check --verify MODEL_DIR K N PROMPT [KERNELS]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/fast/cpu_fast_backend.h"
#include "backend/cpu/reference_ops.h"
#include "backend/vulkan/vulkan_backend.h"
#include "backend/vulkan/vulkan_test_hooks.h"
#include "model/model.h"
#include "model/synth.h"

namespace {

double RelL2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

std::vector<float> Input(int n, int cols, uint32_t seed, float scale) {
  std::vector<float> x(size_t(n) * cols);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& v : x) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    v = scale * (float(s % 20001) / 10000.0f - 1.0f);
  }
  return x;
}

void CheckLinear(gemma::Backend& vk, const gemma::Linear& lin, const std::string& what,
                 int* bad) {
  if (lin.rows == 0 || lin.data == nullptr) return;
  const bool exact = lin.in_scale > 0;
  const float scale = exact ? 200 * lin.in_scale : 1.0f;
  for (int n : {1, 3, 16, 64}) {
    const auto x = Input(n, lin.cols, 7u * n + lin.rows, scale);
    std::vector<float> want(size_t(n) * lin.rows);
    gemma::ref::LinearForward(lin, x.data(), n, want.data());
    const auto got = gemma::VulkanLinearForTest(vk, lin, nullptr, x.data(), n, 0);
    if (got.size() != want.size()) {
      std::printf("%-28s n=%-3d size %zu, want %zu\n", what.c_str(), n, got.size(), want.size());
      ++*bad;
      continue;
    }
    size_t diff = 0, first = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != want[i] && diff++ == 0) first = i;
    const double rel = RelL2(got.data(), want.data(), got.size());
    const bool ok = exact ? diff == 0 : rel < 1e-5;
    if (!ok) {
      ++*bad;
      std::printf("%-28s n=%-3d %zux%d: %zu of %zu differ (first: token %zu row %zu: %g, want %g),"
                  " rel L2 %.3g\n",
                  what.c_str(), n, size_t(lin.rows), lin.cols, diff, got.size(),
                  first / lin.rows, first % lin.rows, got[first], want[first], rel);
    }
  }
}

// `n` token ids below `vocab`, the same for every run.
std::vector<int32_t> RandomIds(int n, int vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint64_t s = 99;
  for (int32_t& t : ids) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    t = int32_t(s % uint64_t(vocab));
  }
  return ids;
}

// First position (of `n` random tokens, fed one token per step where the capacity makes the
// chunk 1) whose logits are off the CPU reference's by more than 1e-3 relative L2; -1: none.
int FirstBad(const gemma::Model& model, int capacity, int n, double* worst) {
  const int V = model.text().vocab_size;
  gemma::BackendOptions opt{.capacity = capacity};
  auto vk = gemma::CreateVulkanBackend(model, opt);
  auto cpu = gemma::CreateCpuReferenceBackend(model, opt);
  const std::vector<int32_t> ids = RandomIds(n, V);
  gemma::ForwardResult a, b;
  const std::span<const int32_t> all(ids);
  cpu->Forward({.tokens = all, .mode = gemma::OutputMode::kLogits, .all_positions = true}, &a);
  vk->Forward({.tokens = all, .mode = gemma::OutputMode::kLogits, .all_positions = true}, &b);
  *worst = 0;
  int bad = -1;
  for (int t = 0; t < n; ++t) {
    const double rel = RelL2(b.logits.data() + size_t(t) * V, a.logits.data() + size_t(t) * V,
                             size_t(V));
    *worst = std::max(*worst, rel);
    if (rel > 1e-3 && bad < 0) bad = t;
    if (std::getenv("CHECK_VERBOSE"))
      std::printf("  %d: token %d rel L2 %.3g\n", t, ids[size_t(t)], rel);
  }
  return bad;
}

// The e2b-qat-mini structure with one feature changed at a time: which feature the departure
// needs.
void Variants(int capacity, int n, const std::string& only) {
  struct V {
    const char* name;
    std::function<void(gemma::SynthShape&)> edit;
  };
  const std::vector<V> all = {
      {"mini", [](gemma::SynthShape&) {}},
      {"mini unconditioned", [](gemma::SynthShape& s) { s.conditioned = false; }},
      {"vocab8k", [](gemma::SynthShape& s) { s.vocab = 8192; }},
      {"vocab8k kv_shared0", [](gemma::SynthShape& s) { s.vocab = 8192, s.kv_shared = 0; }},
      {"vocab8k ghd256", [](gemma::SynthShape& s) { s.vocab = 8192, s.global_head_dim = 256; }},
      {"vocab8k hd128 ghd256",
       [](gemma::SynthShape& s) { s.vocab = 8192, s.head_dim = 128, s.global_head_dim = 256; }},
      {"vocab8k heads2", [](gemma::SynthShape& s) { s.vocab = 8192, s.heads = 2; }},
      {"vocab8k hidden512",
       [](gemma::SynthShape& s) { s.vocab = 8192, s.hidden = 512, s.inter = 2048; }},
      {"vocab8k all sliding but last",
       [](gemma::SynthShape& s) {
         s.vocab = 8192;
         for (size_t l = 0; l + 1 < s.full.size(); ++l) s.full[l] = false;
       }},
      {"vocab8k window16", [](gemma::SynthShape& s) { s.vocab = 8192, s.window = 16; }},
      {"vocab8k dense", [](gemma::SynthShape& s) { s.vocab = 8192, s.qat = false; }},
      {"vocab8k layers5",
       [](gemma::SynthShape& s) {
         s.vocab = 8192, s.layers = 5, s.kv_shared = 1;
         s.full.resize(5);
       }},
  };
  for (const V& v : all) {
    if (!only.empty() && only != v.name) continue;
    gemma::SynthShape shape{};  // e2b-qat-mini (src/model/synth.cc)
    shape.vocab = 32768, shape.hidden = 1536, shape.inter = 6144, shape.layers = 10;
    shape.heads = 8, shape.kv_heads = 1, shape.head_dim = 256, shape.global_head_dim = 512;
    shape.window = 512, shape.kv_shared = 3, shape.ple_dim = 256, shape.double_wide = true;
    shape.qat = true, shape.conditioned = true;
    for (int l = 0; l < 10; ++l) shape.full.push_back(l % 5 == 4);
    v.edit(shape);
    const std::string dir = "/tmp/vulkan_check_variant";
    std::filesystem::remove_all(dir);
    try {
      gemma::Synthesize({.out_dir = dir, .seed = 1, .shape = shape});
      auto model = gemma::Model::Load(dir);
      double worst = 0;
      const int bad = FirstBad(*model, capacity, n, &worst);
      std::printf("%-32s capacity %5d: first bad position %3d, worst rel L2 %.3g\n", v.name,
                  capacity, bad, worst);
    } catch (const std::exception& e) {
      std::printf("%-32s: %s\n", v.name, e.what());
    }
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: vulkan_check MODEL_DIR [--ids 1,2,3] [--split K] [--linears 0|1] "
                 "[--capacity N]\n       vulkan_check --variants N [NAME] [CAPACITY]\n"
                 "       vulkan_check --pair DIR_A DIR_B N\n");
    return 2;
  }
  std::vector<int32_t> ids;
  int split = -1, linears = 1, capacity = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--ids") {
      std::stringstream ss(v);
      std::string t;
      while (std::getline(ss, t, ',')) ids.push_back(std::atoi(t.c_str()));
    } else if (k == "--split") {
      split = std::atoi(v.c_str());
    } else if (k == "--capacity") {
      capacity = std::atoi(v.c_str());
    } else if (k == "--linears") {
      linears = std::atoi(v.c_str());
    }
  }
  if (std::string(argv[1]) == "--pair" && argc > 4) {
    // The CPU reference on two checkpoints (a perturbed copy): how far a tiny change travels.
    auto a = gemma::Model::Load(argv[2]);
    auto b = gemma::Model::Load(argv[3]);
    const int n = std::atoi(argv[4]), V = a->text().vocab_size;
    const std::vector<int32_t> ids = RandomIds(n, V);
    gemma::BackendOptions opt{.capacity = n + 1};
    gemma::ForwardResult ra, rb;
    const std::span<const int32_t> all(ids);
    gemma::CreateCpuReferenceBackend(*a, opt)->Forward(
        {.tokens = all, .mode = gemma::OutputMode::kLogits, .all_positions = true}, &ra);
    gemma::CreateCpuReferenceBackend(*b, opt)->Forward(
        {.tokens = all, .mode = gemma::OutputMode::kLogits, .all_positions = true}, &rb);
    const float q = a->lm_head().out_scale;
    const float cap = a->text().final_logit_softcapping.value_or(0.0f);
    for (int t = 0; t < n; ++t) {
      const float* x = ra.logits.data() + size_t(t) * V;
      const float* y = rb.logits.data() + size_t(t) * V;
      double most = 0;
      int moved = 0;
      for (int v = 0; v < V; ++v) {
        moved += x[v] != y[v];
        most = std::max(
            most, std::fabs(gemma::UncappedLogit(y[v], cap) - gemma::UncappedLogit(x[v], cap)));
      }
      const int am = int(std::max_element(x, x + V) - x), bm = int(std::max_element(y, y + V) - y);
      std::printf("  %d: rel L2 %.3g, %d moved, most %.3g (%.2f head quanta), argmax %s\n", t,
                  RelL2(y, x, size_t(V)), moved, most, q > 0 ? most / q : 0.0,
                  am == bm ? "same" : "differs");
    }
    return 0;
  }
  if (std::string(argv[1]) == "--verify" && argc > 5) {
    auto model = gemma::Model::Load(argv[2]);
    const int k = std::atoi(argv[3]), n = std::atoi(argv[4]), np = std::atoi(argv[5]);
    const int V = model->text().vocab_size;
    const gemma::KernelConfig extra = gemma::KernelConfig::Parse(argc > 6 ? argv[6] : "");
    gemma::BackendOptions opt{.capacity = np + n + k + 8, .slack = 16};
    auto one = gemma::CreateVulkanBackend(*model, opt);
    gemma::KernelConfig chunk_kc = extra, rows_kc = extra;
    chunk_kc.Set("VERIFY_ROWS", 0);
    rows_kc.Set("VERIFY_ROWS", 2);
    auto one_kc = gemma::CreateVulkanSibling(*one, opt, extra);
    auto chunk = gemma::CreateVulkanSibling(*one, opt, chunk_kc);
    auto rows = gemma::CreateVulkanSibling(*one, opt, rows_kc);
    const std::vector<int32_t> prompt = RandomIds(np, V);
    gemma::ForwardResult r;
    for (gemma::Backend* b : {one_kc.get(), chunk.get(), rows.get()})
      b->Forward({.tokens = prompt, .mode = gemma::OutputMode::kNone}, &r);
    // One-token steps, greedy by argmax (the plain decoding's own steps), logits kept from a
    // logits step at the same position on a second context advanced in step.
    auto one_l = gemma::CreateVulkanSibling(*one, opt, extra);
    one_l->Forward({.tokens = prompt, .mode = gemma::OutputMode::kNone}, &r);
    std::vector<int32_t> seq = prompt;
    std::vector<float> plain;  // [n][V]
    int tok = prompt.back();
    std::vector<int32_t> gen;
    {
      gemma::ForwardResult last;
      one_kc->Truncate(np - 1);
      one_l->Truncate(np - 1);
      for (int i = 0; i < n + k; ++i) {
        const int32_t t[1] = {tok};
        one_kc->Forward({.tokens = t, .mode = gemma::OutputMode::kArgmax}, &r);
        one_l->Forward({.tokens = t, .mode = gemma::OutputMode::kLogits}, &last);
        const float* l = last.logits.data();
        const int am = int(std::max_element(l, l + V) - l);
        if (am != r.ids[0])
          std::printf("step %d: argmax step %d, logits step's argmax %d\n", i, r.ids[0], am);
        plain.insert(plain.end(), l, l + V);
        tok = r.ids[0];
        gen.push_back(tok);
      }
    }
    auto cmp = [&](const char* what, const float* got, const float* want, int pos) {
      size_t diff = 0;
      for (int v = 0; v < V; ++v) diff += got[v] != want[v];
      const int ag = int(std::max_element(got, got + V) - got);
      const int aw = int(std::max_element(want, want + V) - want);
      if (diff > 0 || ag != aw)
        std::printf("  %-6s position %d: %zu logits differ, rel L2 %.3g, argmax %d vs %d%s\n", what,
                    pos, diff, RelL2(got, want, size_t(V)), ag, aw, ag != aw ? "  <-- argmax" : "");
      return diff;
    };
    // Verification steps: [the previous token, k drafts], all positions.
    for (auto [name, b] : {std::pair{"chunk", chunk.get()}, std::pair{"rows", rows.get()}}) {
      b->Truncate(np - 1);
      size_t total = 0;
      int steps = 0;
      for (int i = 0; i + k < n + k && i < n; i += k + 1) {
        std::vector<int32_t> t = {i == 0 ? prompt.back() : gen[size_t(i) - 1]};
        for (int d = 0; d < k; ++d) t.push_back(gen[size_t(i + d)]);
        b->Forward({.tokens = t, .mode = gemma::OutputMode::kLogits, .all_positions = true}, &r);
        for (int d = 0; d <= k; ++d)
          total += cmp(name, r.logits.data() + size_t(d) * V, plain.data() + size_t(i + d) * V,
                       np - 1 + i + d);
        ++steps;
      }
      std::printf(
          "%s: %d verification steps of %d tokens, %zu logits differ from the one-token "
          "steps'\n",
          name, steps, k + 1, total);
    }
    // The fast CPU backend, teacher-forced on the same tokens.
    {
      auto cpu = gemma::CreateCpuFastBackend(*model, opt);
      std::vector<int32_t> all = prompt;
      all.insert(all.end(), gen.begin(), gen.begin() + n);
      cpu->Forward({.tokens = all, .mode = gemma::OutputMode::kLogits, .all_positions = true}, &r);
      size_t total = 0;
      int moved = 0;
      double worst = 0;
      for (int i = 0; i < n; ++i) {
        const float* c = r.logits.data() + size_t(np - 1 + i) * V;
        const float* g = plain.data() + size_t(i) * V;
        size_t d = 0;
        for (int v = 0; v < V; ++v) d += c[v] != g[v];
        total += d;
        worst = std::max(worst, RelL2(g, c, size_t(V)));
        const int ac = int(std::max_element(c, c + V) - c);
        if (ac != gen[size_t(i)]) {
          ++moved;
          std::printf("  cpu-fast position %d: argmax %d, one-token %d\n", np - 1 + i, ac,
                      gen[size_t(i)]);
        }
      }
      std::printf(
          "cpu-fast vs one-token steps: %zu logits differ, worst rel L2 %.3g, %d argmaxes "
          "differ\n",
          total, worst, moved);
    }
    return 0;
  }
  if (std::string(argv[1]) == "--variants") {
    const std::string only = argc > 3 ? argv[3] : "";
    const int cap = argc > 4 ? std::atoi(argv[4]) : 0;
    for (int c : {64, 4096})
      if (cap == 0 || cap == c) Variants(c, argc > 2 ? std::atoi(argv[2]) : 20, only);
    return 0;
  }
  auto model = gemma::Model::Load(argv[1]);
  const int V = model->text().vocab_size;
  gemma::BackendOptions opt{.capacity = capacity > 0 ? capacity
                                                    : std::max<int>(64, int(ids.size()) + 8)};
  auto vk = gemma::CreateVulkanBackend(*model, opt);
  int bad = 0;
  if (linears) {
    int li = 0;
    for (const gemma::LayerWeights& w : model->layer_weights()) {
      const std::pair<const gemma::Linear*, const char*> all[] = {
          {&w.q, "q"},       {&w.k, "k"},   {&w.v, "v"},
          {&w.o, "o"},       {&w.gate, "gate"}, {&w.up, "up"},
          {&w.down, "down"}, {&w.ple_gate, "ple_gate"}, {&w.ple_proj, "ple_proj"}};
      for (const auto& [lin, name] : all)
        CheckLinear(*vk, *lin, "layer " + std::to_string(li) + " " + name, &bad);
      ++li;
    }
    CheckLinear(*vk, model->ple_model_proj(), "ple_model_proj", &bad);
    CheckLinear(*vk, model->lm_head(), "lm_head", &bad);
    std::printf("linears: %d checks off\n", bad);
  }
  if (ids.size() < 2) return bad ? 1 : 0;
  auto cpu = gemma::CreateCpuReferenceBackend(*model, opt);
  const int first = split > 0 ? std::min<int>(split, int(ids.size())) : int(ids.size());
  auto argmax = [&](const float* l) { return int(std::max_element(l, l + V) - l); };
  auto report = [&](const gemma::ForwardResult& a, const gemma::ForwardResult& b, int pos0,
                    int n) {
    for (int t = 0; t < n; ++t) {
      const float* x = a.logits.data() + size_t(t) * V;
      const float* y = b.logits.data() + size_t(t) * V;
      const double rel = RelL2(y, x, size_t(V));
      const int am = argmax(x), bm = argmax(y);
      std::printf("position %3d (token %6d): rel L2 %.3g argmax cpu %d vulkan %d%s\n", pos0 + t,
                  ids[size_t(pos0 + t)], rel, am, bm, rel > 1e-3 || am != bm ? "  <--" : "");
    }
  };
  gemma::ForwardResult a, b;
  const std::span<const int32_t> all(ids);
  cpu->Forward({.tokens = all.first(first), .mode = gemma::OutputMode::kLogits,
                .all_positions = true},
               &a);
  vk->Forward({.tokens = all.first(first), .mode = gemma::OutputMode::kLogits,
               .all_positions = true},
              &b);
  report(a, b, 0, first);
  for (int t = first; t < int(ids.size()); ++t) {
    cpu->Forward({.tokens = all.subspan(t, 1), .mode = gemma::OutputMode::kLogits}, &a);
    vk->Forward({.tokens = all.subspan(t, 1), .mode = gemma::OutputMode::kLogits}, &b);
    report(a, b, t, 1);
  }
  return bad ? 1 : 0;
}
