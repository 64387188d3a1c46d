// Audio through the front end and the audio tower + embed_audio on a CPU backend (not a test):
// median of --reps runs after one warm-up; and the tower's dense linears' two kernels side by side
// (the text model's f64-accumulating DenseLinearRows, the towers' f32 DenseGemmRowsF32) on E2B's
// audio shapes over 750 tokens, in GFLOP/s.
//
//   audio_bench --synth DIR    writes a checkpoint with E2B's audio tower shapes (12 conformer
//                              layers of 1,024, bf16 random weights) on a small text model
//   audio_bench DIR [--backend cpu|cpu-ref] [--seconds 30] [--reps 3] [--threads N]
//   audio_bench --kernels [--threads N]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/fast/fast_ops.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "media/audio_features.h"
#include "model/model.h"
#include "model/synth.h"
#include "runtime/backend_factory.h"

namespace {

using namespace gemma;

// One bf16 linear of rows x cols over n tokens with each kernel, rows split in panels over the pool.
void Kernels(int threads) {
  ThreadPool pool(threads);
  const int n = 750;
  std::printf("dense bf16 linears over %d tokens, %d threads\n", n, pool.size());
  for (auto [rows, cols] : {std::pair{4096, 1024}, std::pair{1024, 4096}, std::pair{1024, 1024}}) {
    std::vector<uint16_t> w(static_cast<size_t>(rows) * cols);
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0x3c00 + static_cast<uint16_t>((i * 7919) % 512);
    Linear lin;
    lin.kind = WeightKind::kBF16;
    lin.rows = rows;
    lin.cols = cols;
    lin.data = reinterpret_cast<const uint8_t*>(w.data());
    lin.row_bytes = static_cast<size_t>(cols) * 2;
    std::vector<float> x(static_cast<size_t>(n) * cols), y(static_cast<size_t>(n) * rows);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.01f * i);
    const double gflop = 2.0 * rows * cols * n / 1e9;
    auto time = [&](auto&& run) {
      std::vector<double> ms;
      for (int r = 0; r < 4; ++r) {
        Timer t;
        run();
        if (r > 0) ms.push_back(t.Ms());
      }
      std::sort(ms.begin(), ms.end());
      return ms[ms.size() / 2];
    };
    const double f64 = time([&] {
      pool.Run((rows + 31) / 32, [&](int task, int) {
        fast::DenseLinearRows(lin, x.data(), cols, n, task * 32, std::min(rows, task * 32 + 32),
                              y.data(), rows);
      });
    });
    const int panel = fast::GemmPanelRows();
    std::vector<std::vector<float>> scratch(pool.size());
    const double f32 = time([&] {
      pool.Run((rows + panel - 1) / panel, [&](int task, int thread) {
        std::vector<float>& s = scratch[thread];
        if (s.empty()) s.resize(fast::GemmScratchFloats(cols));
        fast::DenseGemmRowsF32(lin, x.data(), cols, n, task * panel,
                               std::min(rows, task * panel + panel), y.data(), rows, s.data());
      });
    });
    std::printf("  %4d x %4d: DenseLinearRows (f64) %7.1f ms %6.1f GFLOP/s | DenseGemmRowsF32 %7.1f ms "
                "%6.1f GFLOP/s | %.2fx\n",
                rows, cols, f64, gflop * 1e3 / f64, f32, gflop * 1e3 / f32, f64 / f32);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: audio_bench DIR [--backend B] [--seconds S] [--reps N] [--threads N]\n"
                 "       audio_bench --synth DIR | --kernels [--threads N]\n");
    return 2;
  }
  std::string backend = "cpu";
  double seconds = 30;
  int reps = 3, threads = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--backend") backend = argv[i + 1];
    if (a == "--seconds") seconds = std::atof(argv[i + 1]);
    if (a == "--reps") reps = std::atoi(argv[i + 1]);
    if (a == "--threads") threads = std::atoi(argv[i + 1]);
  }
  try {
    const std::string first = argv[1];
    if (first == "--kernels") {
      if (argc >= 4) threads = std::atoi(argv[3]);
      Kernels(threads);
      return 0;
    }
    if (first == "--synth" && argc >= 3) {
      SynthShape s{};
      s.vocab = 4096, s.hidden = 128, s.inter = 256, s.layers = 2, s.heads = 2, s.kv_heads = 1;
      s.head_dim = 32, s.global_head_dim = 64, s.window = 16, s.kv_shared = 0, s.ple_dim = 16;
      s.full = {false, true};
      s.double_wide = false;
      s.qat = false;
      s.audio_hidden = 1024, s.audio_layers = 12, s.audio_heads = 8, s.audio_channels = 32;
      s.audio_out = 1536;
      Synthesize({.preset = "tiny", .out_dir = argv[2], .seed = 3, .shape = s});
      std::printf("wrote %s\n", argv[2]);
      return 0;
    }
    auto model = Model::Load(first);
    if (!model->audio()) {
      std::fprintf(stderr, "no audio tower: %s\n", model->audio_error().c_str());
      return 2;
    }
    BackendStart start =
        StartBackend({.name = backend, .threads = threads}, *model, {.capacity = 64});
    std::vector<float> x(static_cast<size_t>(seconds * 16000));
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = 0.3f * std::sin(0.07f * i) + 0.1f * std::sin(0.9f * i);
    std::vector<double> fe, tw;
    std::vector<float> soft;
    media::AudioFeatures f;
    for (int r = 0; r <= reps; ++r) {
      Timer t0;
      f = media::ExtractAudioFeatures(x);
      const double a = t0.Ms();
      Timer t1;
      start.model->EncodeAudio({f.frames, f.mel.data(), f.mask.data()}, &soft);
      if (r > 0) fe.push_back(a), tw.push_back(t1.Ms());
    }
    std::sort(fe.begin(), fe.end());
    std::sort(tw.begin(), tw.end());
    std::printf(
        "%s, %.1f s of audio: %d frames -> %d soft tokens | features median %.1f ms | "
        "tower median %.1f ms (min %.1f) | total %.1f ms\n",
        start.context->name().c_str(), seconds, f.frames, f.soft_tokens, fe[fe.size() / 2],
        tw[tw.size() / 2], tw.front(), fe[fe.size() / 2] + tw[tw.size() / 2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
