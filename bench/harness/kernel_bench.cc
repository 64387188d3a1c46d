// kernel_bench: single-thread throughput of the fast CPU kernels on a checkpoint's real weights
// (QAT int2/int4/int8 matvec and matmul, dense; read from the backend's huge-page copy), in thread
// CPU time so other load on the machine matters less.
// Usage: kernel_bench MODEL_DIR [tokens...]   (default tokens: 1 64)
//        kernel_bench MODEL_DIR decode [reps]: every linear once in decode order (one token,
//        weights streamed from DRAM as in a decode step), time and GB/s per weight kind and width.
//        kernel_bench MODEL_DIR decode REPS SPLIT: each linear in SPLIT row ranges (one thread: one
//        after the other; then on a pool of 2 threads, wall time, and the same split streamed by
//        XorReduce on 2 threads: the two-core read ceiling).
//        kernel_bench MODEL_DIR decode REPS SPLIT TOKENS: both passes with TOKENS tokens per linear
//        (a batched decode step's linears: each weight read once for all of them); the one-thread
//        pass in thread CPU time is the comparison that other load on the machine disturbs least.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <string>
#include <vector>

#include "backend/cpu/fast/fast_ops.h"
#include "backend/cpu/fast/weight_copy.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace {

double ThreadCpuS() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// One token through every linear in model order; per-kind thread CPU time (best total of reps).
// The linears are read from the backend's huge-page copy (fast::WeightCopy), as the backend does.
int DecodeOrder(const gemma::Model& model, int reps, int split, int tokens) {
  using namespace gemma;
  const fast::WeightCopy m(model);
  std::vector<const Linear*> lins = {&m.ple_model_proj()};
  for (const fast::LayerLinears& w : m.layers()) {
    for (const Linear* l : {&w.q, &w.k, &w.v, &w.o, &w.gate, &w.up, &w.down, &w.ple_gate,
                            &w.ple_proj})
      if (l->data) lins.push_back(l);
  }
  lins.push_back(&m.lm_head());
  size_t widest = 0, tallest = 0;
  for (const Linear* l : lins) {
    widest = std::max<size_t>(widest, l->cols + 256);
    tallest = std::max<size_t>(tallest, l->rows);
  }
  // `tokens` rows of activations (copies of one), as a batched decode step's linears see them.
  std::vector<float> x(widest * tokens), y(tallest * tokens);
  for (size_t i = 0; i < widest; ++i)
    x[i] = static_cast<float>(static_cast<int>(i % 7) - 3) * 0.01f;
  for (int t = 1; t < tokens; ++t) std::copy_n(x.begin(), widest, x.begin() + t * widest);
  std::vector<int8_t> q(widest * tokens);
  std::vector<int32_t> sums(tokens);
  std::map<std::string, double> best_t, bytes;
  double best_total = 1e30;
  for (int rep = 0; rep < reps; ++rep) {
    std::map<std::string, double> t;
    double total = 0;
    for (const Linear* l : lins) {
      const double c0 = ThreadCpuS();
      if (IsQuantized(l->kind)) {
        const float s = l->in_scale > 0 ? l->in_scale : 0.01f;
        const int pc = fast::PaddedCols(l->kind, l->cols);
        for (int t = 0; t < tokens; ++t)
          sums[t] = fast::QuantizeActs(l->kind, &x[t * widest], l->cols, s, &q[t * pc]);
        // Row ranges as the backend's decode tasks (split per linear, whole 4-row tiles).
        const int tile = std::max(16, (l->rows + split - 1) / split + 3) / 4 * 4;
        for (int r0 = 0; r0 < l->rows; r0 += tile)
          fast::QuantLinearRows(*l, q.data(), pc, sums.data(), tokens, r0,
                                std::min(l->rows, r0 + tile), y.data(), l->rows);
      } else {
        fast::DenseLinearRows(*l, x.data(), widest, tokens, 0, l->rows, y.data(), l->rows);
      }
      const double dt = ThreadCpuS() - c0;
      // Per kind and width: the widths differ in how their activations fit in L1.
      const std::string k =
          l == &m.lm_head() ? "lm_head"
                            : std::string(WeightKindName(l->kind)) + "x" + std::to_string(l->cols);
      t[k] += dt;
      total += dt;
      if (rep == 0) bytes[k] += static_cast<double>(l->row_bytes) * l->rows;
    }
    if (total < best_total) {
      best_total = total;
      best_t = t;
    }
  }
  {
    // One thread's streaming read ceiling over the same bytes (the weights themselves).
    double best = 1e30;
    uint64_t sink = 0;
    for (int rep = 0; rep < reps; ++rep) {
      const double c0 = ThreadCpuS();
      for (const Linear* l : lins) sink ^= fast::XorReduce(l->data, l->row_bytes * l->rows / 64 * 64);
      best = std::min(best, ThreadCpuS() - c0);
    }
    double b = 0;
    for (const Linear* l : lins) b += static_cast<double>(l->row_bytes) * l->rows;
    std::printf("stream   %8.3f ms  %7.1f MB  %6.1f GB/s  (XorReduce of the same weights%s)\n",
                best * 1e3, b / 1e6, b / best / 1e9, sink == 1 ? " " : "");
  }
  {
    // The same linears on a pool of 2 threads, 8 row ranges per thread (as the backend's decode),
    // wall time: kernel scaling and hand-offs without the rest of a decode step.
    ThreadPool pool(2);
    // `tokens` rows of activations (copies of x), quantized per linear as a step quantizes them.
    std::vector<float> xn(widest * tokens), yn(tallest * tokens);
    for (int t = 0; t < tokens; ++t) std::copy_n(x.begin(), widest, xn.begin() + t * widest);
    std::vector<int8_t> qn(widest * tokens);
    std::vector<int32_t> sn(tokens);
    for (const bool xr : {false, true}) {
    double best = 1e30, b = 0;
    for (int rep = 0; rep < reps; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      for (const Linear* l : lins) {
        if (rep == 0) b += static_cast<double>(l->row_bytes) * l->rows;
        const bool quant = IsQuantized(l->kind);
        const float s = l->in_scale > 0 ? l->in_scale : 0.01f;
        const int pc = quant ? fast::PaddedCols(l->kind, l->cols) : 0;
        if (quant && !xr)
          for (int t = 0; t < tokens; ++t)
            sn[t] = fast::QuantizeActs(l->kind, &xn[t * widest], l->cols, s, &qn[t * pc]);
        int32_t sum = 0;
        const int tile = std::max(16, (l->rows + split - 1) / split + 3) / 4 * 4;
        pool.Run((l->rows + tile - 1) / tile, [&](int task, int) {
          const int r0 = task * tile, r1 = std::min(l->rows, r0 + tile);
          if (xr) {
            sum ^= static_cast<int>(fast::XorReduce(l->data + r0 * l->row_bytes, (r1 - r0) * l->row_bytes / 64 * 64));
          } else if (quant) {
            fast::QuantLinearRows(*l, qn.data(), pc, sn.data(), tokens, r0, r1, yn.data(), l->rows);
          } else {
            fast::DenseLinearRows(*l, xn.data(), widest, tokens, r0, r1, yn.data(), l->rows);
          }
        });
      }
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%s %8.3f ms  %7.1f MB  %6.1f GB/s  (wall, pool of 2, %d tasks per linear%s)\n",
                xr ? "stream2 " : "2thread ", best * 1e3, b / 1e6, b / best / 1e9, split,
                xr           ? ", XorReduce"
                : tokens > 1 ? (", " + std::to_string(tokens) + " tokens").c_str()
                             : "");
    }
  }
  double all_bytes = 0;
  for (const auto& [k, v] : best_t) {
    all_bytes += bytes[k];
    std::printf("decode %-11s %8.3f ms  %7.1f MB  %6.1f GB/s\n", k.c_str(), v * 1e3, bytes[k] / 1e6,
                bytes[k] / v / 1e9);
  }
  std::printf("decode total       %8.3f ms  %7.1f MB  %6.1f GB/s  (SIMD target %s)\n",
              best_total * 1e3, all_bytes / 1e6, all_bytes / best_total / 1e9, fast::TargetName());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gemma;
  if (argc < 2) {
    std::fprintf(stderr, "usage: kernel_bench MODEL_DIR [tokens...]\n");
    return 2;
  }
  auto m = Model::Load(argv[1]);
  if (argc >= 3 && std::strcmp(argv[2], "decode") == 0)
    return DecodeOrder(*m, argc >= 4 ? std::atoi(argv[3]) : 5, argc >= 5 ? std::atoi(argv[4]) : 1,
                       argc >= 6 ? std::max(1, std::atoi(argv[5])) : 1);
  std::vector<int> ns;
  for (int i = 2; i < argc; ++i) ns.push_back(std::atoi(argv[i]));
  if (ns.empty()) ns = {1, 64};
  const fast::WeightCopy copy(*m);  // as the backend reads them
  const auto& lw = copy.layers();
  std::vector<const Linear*> lins = {&copy.lm_head(), &lw.back().down, &lw.front().gate,
                                     &lw.back().gate, &lw.front().q, &lw.front().ple_gate, &copy.ple_model_proj()};
  std::printf("SIMD target %s\n", fast::TargetName());
  for (int n : ns) {
    for (const Linear* l : lins) {
      if (!l->data) continue;
      std::vector<float> x(static_cast<size_t>(n) * l->cols);
      for (size_t i = 0; i < x.size(); ++i)
        x[i] = static_cast<float>(static_cast<int>(i % 7) - 3) * 0.01f;
      std::vector<float> y(static_cast<size_t>(n) * l->rows);
      const bool quant = IsQuantized(l->kind);
      const int pc = quant ? fast::PaddedCols(l->kind, l->cols) : 0;
      std::vector<int8_t> q(static_cast<size_t>(n) * pc);
      std::vector<int32_t> sums(n);
      const float s = l->in_scale > 0 ? l->in_scale : 0.01f;
      double best = 1e30;
      for (int rep = 0; rep < 5; ++rep) {
        const double c0 = ThreadCpuS();
        if (quant) {
          for (int t = 0; t < n; ++t)
            sums[t] = fast::QuantizeActs(l->kind, &x[static_cast<size_t>(t) * l->cols], l->cols, s,
                                         &q[static_cast<size_t>(t) * pc]);
          fast::QuantLinearRows(*l, q.data(), pc, sums.data(), n, 0, l->rows, y.data(), l->rows);
        } else {
          fast::DenseLinearRows(*l, x.data(), l->cols, n, 0, l->rows, y.data(), l->rows);
        }
        best = std::min(best, ThreadCpuS() - c0);
      }
      const double bytes = static_cast<double>(l->row_bytes) * l->rows;
      std::printf("%-52s %-5s %6d x %-6d n=%-4d %8.3f ms  %6.1f GB/s  %7.1f GMAC/s\n",
                  l->name.c_str(), WeightKindName(l->kind), l->rows, l->cols, n, best * 1e3,
                  bytes / best / 1e9, static_cast<double>(l->rows) * l->cols * n / best / 1e9);
    }
  }
  return 0;
}
