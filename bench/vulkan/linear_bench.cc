// The prompt linears' kernels alone (issue 46): GPU time and TFLOP/s of one linear over n tokens
// at E2B's shapes (text prefill, bf16 and QAT kinds, and the vision tower's), under kernel
// variants on one device (siblings with their own kernel choices); in parentheses the main
// kernel's part (the input's split / quantization excluded). Each variant's output is
// compared with the first variant's: equal bit for bit where the sums are integers (SRQ kinds),
// relative L2 for dense kinds. Prints a Markdown table.
//
//   vulkan_linear_bench [--model DIR] [--tokens 1024] [--tower-tokens 2520] [--reps 20]
//                       [--variants "default|CM_DENSE=0|probe=probe1|..."] [--only bf16|qat|tower]
//   (GEMMA_VULKAN_PIPE_DUMP=DIR: the pipelines' driver binaries into DIR, as vulkan_bench)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/vulkan/vulkan_backend.h"
#include "backend/vulkan/vulkan_test_hooks.h"
#include "bench/vulkan/vulkan_lab.h"
#include "gemma/error.h"
#include "model/model.h"

namespace {

using gemma::Linear;
using gemma::SynthLinear;
using gemma::WeightKind;

uint32_t Next(uint32_t& r) {
  r = r * 1664525u + 1013904223u;
  return r;
}

struct Shape {
  const char* group;  // bf16, qat, tower
  const char* name;
  WeightKind kind;
  int rows, cols;
  bool pair;  // gate / up as one dual linear (epilogue gelu(gate) * up)
};

float Bf16(const uint8_t* p) {
  const uint32_t u = uint32_t(p[0]) << 16 | uint32_t(p[1]) << 24;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

double GeluTanh(double v) {
  return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
}

// Dense kinds: the relative L2 error of y against double sums over every 61st row (all tokens).
double DenseError(const SynthLinear& w, const SynthLinear* w2, const std::vector<float>& x, int n,
                  const std::vector<float>& y) {
  const Linear& l = w.lin;
  if (y.size() != size_t(n) * l.rows) return -1.0;
  double num = 0, den = 0;
  for (int row = 0; row < l.rows; row += 61) {
    for (int t = 0; t < n; ++t) {
      const float* xt = &x[size_t(t) * l.cols];
      double a = 0, b = 0;
      for (int c = 0; c < l.cols; ++c) {
        a += double(Bf16(&w.bytes[size_t(row) * l.row_bytes + 2 * c])) * xt[c];
        if (w2) b += double(Bf16(&w2->bytes[size_t(row) * l.row_bytes + 2 * c])) * xt[c];
      }
      const double want = w2 ? GeluTanh(a) * b : a;
      const double d = y[size_t(t) * l.rows + row] - want;
      num += d * d;
      den += want * want;
    }
  }
  return std::sqrt(num / den);
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t e; (e = s.find(sep, b)) != std::string::npos; b = e + 1)
    out.push_back(s.substr(b, e - b));
  out.push_back(s.substr(b));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir = std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/model/tiny_qat";
  std::string variants = "default", only;
  int tokens = 1024, tower_tokens = 2520, reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model")
      model_dir = v;
    else if (k == "--tokens")
      tokens = std::stoi(v);
    else if (k == "--tower-tokens")
      tower_tokens = std::stoi(v);
    else if (k == "--reps")
      reps = std::stoi(v);
    else if (k == "--variants")
      variants = v;
    else if (k == "--only")
      only = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // (lines survive a crash in a driver)
  try {
    auto model = gemma::Model::Load(model_dir);
    gemma::BackendOptions bo;
    gemma::VulkanOptions vopt;
    // Each pipeline's driver binary into this folder (bench/vulkan/sass_h200.py reads them).
    if (const char* d = std::getenv("GEMMA_VULKAN_PIPE_DUMP")) vopt.pipeline_dump_dir = d;
    auto base = gemma::CreateVulkanBackend(*model, bo, vopt);
    gemma::VulkanStats st;
    gemma::GetVulkanStats(*base, &st);
    std::printf("device: %s\nkernels: %s\n", st.device.c_str(), st.kernels.c_str());
    // A variant is a kernel config, "default", or "probe=NAME" (the lab's probe builds of the
    // large-tile matrix-unit kernels, linear_cm_NAME).
    const std::vector<std::string> names = Split(variants, '|');
    std::vector<std::unique_ptr<gemma::Backend>> sibs;
    std::vector<std::string> probes;
    // ("probe=NAME" may follow a config: "CM2=1 probe=noepi")
    for (const std::string& v : names) {
      const size_t at = v.find("probe=");
      const std::string probe = at == std::string::npos ? "" : v.substr(at + 6);
      const std::string config = at == std::string::npos ? v : v.substr(0, at);
      probes.push_back(probe);
      sibs.push_back(gemma::CreateVulkanSibling(
          *base, bo, gemma::KernelConfig::Parse(config == "default" ? "" : config)));
    }
    // The matrix units' rate (mma_peak.comp; the device's module form: CM_KHR).
    std::printf("matrix units, f16 products into f32 from registers %.1f TFLOP/s",
                gemma::MeasureVulkanMatrixPeak(*base) / 1e12);
    std::printf(
        " (B loaded from shared memory each round: column-major %.1f, row-major %.1f;"
        " A: %.1f)\n\n",
        gemma::MeasureVulkanMatrixPeak(*base, 1) / 1e12,
        gemma::MeasureVulkanMatrixPeak(*base, 2) / 1e12,
        gemma::MeasureVulkanMatrixPeak(*base, 3) / 1e12);

    const std::vector<Shape> shapes = {
        {"tower", "q/k/v/o 768x768", WeightKind::kBF16, 768, 768, false},
        {"tower", "gate, up 3072x768", WeightKind::kBF16, 3072, 768, false},
        {"tower", "down 768x3072", WeightKind::kBF16, 768, 3072, false},
        {"bf16", "q 2048x1536", WeightKind::kBF16, 2048, 1536, false},
        {"bf16", "k 256x1536", WeightKind::kBF16, 256, 1536, false},
        {"bf16", "o 1536x2048", WeightKind::kBF16, 1536, 2048, false},
        {"bf16", "gate+up 2x6144x1536", WeightKind::kBF16, 6144, 1536, true},
        {"bf16", "down 1536x6144", WeightKind::kBF16, 1536, 6144, false},
        {"qat", "q int4 2048x1536", WeightKind::kQ4, 2048, 1536, false},
        {"qat", "o int4 1536x2048", WeightKind::kQ4, 1536, 2048, false},
        {"qat", "gate+up int2 2x6144x1536", WeightKind::kQ2, 6144, 1536, true},
        {"qat", "down int2 1536x6144", WeightKind::kQ2, 1536, 6144, false},
        {"qat", "ple gate int8 256x1536", WeightKind::kQ8, 256, 1536, false},
    };
    std::printf("| shape | tokens |");
    for (const std::string& v : names) std::printf(" %s us | TFLOP/s |", v.c_str());
    std::printf(" vs reference (dense), vs first |\n|---|---|");
    for (size_t i = 0; i < names.size(); ++i) std::printf("---|---|");
    std::printf("---|\n");
    uint32_t seed = 1;
    for (const Shape& s : shapes) {
      if (!only.empty() && only != s.group) continue;
      const int n = std::string(s.group) == "tower" ? tower_tokens : tokens;
      SynthLinear w = gemma::MakeSynthLinear(s.kind, s.rows, s.cols, seed++);
      SynthLinear w2 = s.pair ? gemma::MakeSynthLinear(s.kind, s.rows, s.cols, seed++) : SynthLinear{};
      std::vector<float> x(size_t(n) * s.cols);
      uint32_t r = seed++;
      for (float& v : x) v = (static_cast<float>(Next(r) >> 8) / 16777216.0f - 0.5f) * 4.0f;
      const double flop = 2.0 * s.rows * s.cols * n * (s.pair ? 2 : 1);
      std::printf("| %s %s | %d |", s.group, s.name, n);
      std::vector<float> first;
      std::string cmp;
      for (size_t vi = 0; vi < sibs.size(); ++vi) {
        std::vector<float> y;
        double main_ns = 0;
        const double ns = gemma::VulkanTimeLinearForBench(
            *sibs[vi], w.lin, s.pair ? &w2.lin : nullptr, x.data(), n, s.pair ? 1 : 0, reps, &y,
            &main_ns, probes[vi].empty() ? nullptr : probes[vi].c_str());
        std::printf(" %.1f (%.1f) | %.1f (%.1f) |", ns / 1e3, main_ns / 1e3,
                    ns > 0 ? flop / ns / 1e3 : 0.0, main_ns > 0 ? flop / main_ns / 1e3 : 0.0);
        if (s.kind == WeightKind::kBF16) {
          char buf[64];
          std::snprintf(buf, sizeof(buf), "%sref %.2g", cmp.empty() ? "" : "; ",
                        DenseError(w, s.pair ? &w2 : nullptr, x, n, y));
          cmp += buf;
        }
        if (vi == 0) {
          first = y;
          continue;
        }
        double num = 0, den = 0;
        size_t diff = 0;
        for (size_t i = 0; i < y.size() && i < first.size(); ++i) {
          const double d = double(y[i]) - first[i];
          num += d * d;
          den += double(first[i]) * first[i];
          diff += y[i] != first[i];
        }
        char buf[96];
        std::snprintf(buf, sizeof(buf), "%s%zu differ, rel %.2g", cmp.empty() ? "" : "; ", diff,
                      den > 0 ? std::sqrt(num / den) : 0.0);
        cmp += buf;
      }
      std::printf(" %s |\n", cmp.empty() ? "-" : cmp.c_str());
      std::fflush(stdout);
    }
  } catch (const gemma::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
