// kernel_bench: single-thread throughput of the fast CPU kernels on a checkpoint's real weights
// (QAT int2/int4/int8 matvec and matmul, dense), in thread CPU time so other load on the machine
// matters less. Usage: kernel_bench MODEL_DIR [tokens...]   (default tokens: 1 64)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "backend/cpu/fast/fast_ops.h"
#include "model/model.h"

namespace {

double ThreadCpuS() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gemma;
  if (argc < 2) {
    std::fprintf(stderr, "usage: kernel_bench MODEL_DIR [tokens...]\n");
    return 2;
  }
  auto m = Model::Load(argv[1]);
  std::vector<int> ns;
  for (int i = 2; i < argc; ++i) ns.push_back(std::atoi(argv[i]));
  if (ns.empty()) ns = {1, 64};
  const auto& lw = m->layer_weights();
  std::vector<const Linear*> lins = {&m->lm_head(), &lw.back().down, &lw.front().gate,
                                     &lw.front().ple_gate, &m->ple_model_proj()};
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
