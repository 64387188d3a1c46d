// Vulkan backend benchmark: load, prefill and decode throughput, time per token against the
// bytes-per-token floor (compute-shader read bandwidth of the resident weights, measured in the
// same run; also against the device's streaming read of its largest weight buffer, the stricter
// floor; the device copy bandwidth is printed too), dispatches per token and resident device
// memory. Prints a Markdown table and one JSON line.
//
//   vulkan_bench --synth DIR            # writes the e2b-qat synthetic checkpoint to DIR if absent
//   vulkan_bench --model DIR [--ctx 512] [--prompt 1024] [--steps 64] [--capacity 2048]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/vulkan/vulkan_backend.h"
#include "bench/vulkan/vulkan_lab.h"
#include "gemma/error.h"
#include "model/model.h"
#include "model/synth.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir, synth_dir, preset = "e2b-qat";
  int ctx = 512, prompt_len = 1024, steps = 64, capacity = 2048, copy_mb = 1024, runs = 3;
  int splits = 0;
  // Cache slack (the longest prompt chunk); GEMMA_BENCH_SLACK sets it for run_h200.sh variants.
  int slack = std::getenv("GEMMA_BENCH_SLACK") ? std::atoi(std::getenv("GEMMA_BENCH_SLACK")) : 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model")
      model_dir = v;
    else if (k == "--synth")
      synth_dir = v;
    else if (k == "--preset")
      preset = v;
    else if (k == "--ctx")
      ctx = std::stoi(v);
    else if (k == "--prompt")
      prompt_len = std::stoi(v);
    else if (k == "--steps")
      steps = std::stoi(v);
    else if (k == "--capacity")
      capacity = std::stoi(v);
    else if (k == "--copy-mb")
      copy_mb = std::stoi(v);
    else if (k == "--runs")
      runs = std::stoi(v);
    else if (k == "--splits")
      splits = std::stoi(v);
    else if (k == "--slack")
      slack = std::stoi(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  try {
    if (!synth_dir.empty()) {
      if (!std::filesystem::exists(synth_dir + "/model.safetensors")) {
        const double t0 = Now();
        gemma::Synthesize({.preset = preset, .out_dir = synth_dir, .seed = 1});
        std::printf("synth %s: %.1f s\n", preset.c_str(), Now() - t0);
      }
      if (model_dir.empty()) model_dir = synth_dir;
    }
    double t0 = Now();
    auto model = gemma::Model::Load(model_dir);
    const double model_load = Now() - t0;
    const int V = model->text().vocab_size;
    t0 = Now();
    gemma::VulkanOptions vopt{.decode_splits = splits};
    // (inspection, bench/vulkan/sass_h200.sh) each pipeline's driver binary into this folder
    if (const char* d = std::getenv("GEMMA_VULKAN_PIPE_DUMP")) vopt.pipeline_dump_dir = d;
    auto vk = gemma::CreateVulkanBackend(*model, {.capacity = capacity, .slack = slack}, vopt);
    const double backend_load = Now() - t0;
    gemma::VulkanStats st;
    gemma::GetVulkanStats(*vk, &st);
    double bw = gemma::MeasureVulkanCopyBandwidth(*vk, size_t(copy_mb) << 20);
    double rbw = gemma::MeasureVulkanWeightReadBandwidth(*vk);
    size_t stream_range = 0;
    double sbw = gemma::MeasureVulkanStreamReadBandwidth(*vk, &stream_range);
    gemma::VulkanDispatchCost dc = gemma::MeasureVulkanDispatchCost(*vk);

    std::vector<int32_t> prompt(std::max(prompt_len, ctx));
    for (size_t i = 0; i < prompt.size(); ++i)
      prompt[i] = i == 0 ? 2 : int32_t((i * 7919 + 13) % V);
    gemma::ForwardResult r;

    // Prefill: the whole prompt from an empty cache, argmax of the last position.
    std::vector<double> pre;
    for (int i = 0; i < runs + 1; ++i) {
      vk->Reset();
      const double s = Now();
      vk->Forward({.tokens = std::span<const int32_t>(prompt.data(), prompt_len)}, &r);
      if (i > 0) pre.push_back(Now() - s);
    }
    const double prefill_s = Percentile(pre, 0.5);
    std::fprintf(stderr, "prefill runs (ms):");
    for (double v : pre) std::fprintf(stderr, " %.1f", v * 1e3);
    std::fprintf(stderr, "\n");
    {
      // Per-kernel GPU time of one prefill chunk on top of the prompt.
      const int chunk = std::min(vk->capabilities().max_chunk, prompt_len);
      vk->Reset();
      auto pp = gemma::ProfileVulkanStep(*vk, std::span<const int32_t>(prompt.data(), chunk));
      std::sort(pp.begin(), pp.end(), [](auto& a, auto& b) { return a.second > b.second; });
      double tot = 0;
      for (auto& [k, ns] : pp) tot += ns;
      std::printf("\n| kernel (prefill chunk of %d at 0) | GPU us | share |\n|---|---|---|\n",
                  chunk);
      for (auto& [k, ns] : pp)
        std::printf("| %s | %.1f | %.1f%% |\n", k.c_str(), ns / 1e3, 100 * ns / tot);
      std::printf("| total (timestamped) | %.1f | |\n", tot / 1e3);
    }

    // Decode at a fixed context: ctx - 1 cached tokens, one greedy step, rewind, repeat.
    vk->Reset();
    vk->Forward({.tokens = std::span<const int32_t>(prompt.data(), ctx - 1),
                 .mode = gemma::OutputMode::kNone},
                &r);
    std::vector<double> dec;
    int32_t tok = prompt[ctx - 1];
    for (int i = 0; i < steps + 4; ++i) {
      const double s = Now();
      vk->Forward({.tokens = std::span<const int32_t>(&tok, 1)}, &r);
      if (i >= 4) dec.push_back(Now() - s);
      vk->Truncate(ctx - 1);
    }
    const double med = Percentile(dec, 0.5), p95 = Percentile(dec, 0.95);
    // Free-running greedy decode from ctx.
    vk->Forward({.tokens = std::span<const int32_t>(&tok, 1)}, &r);
    std::vector<double> run;
    for (int i = 0; i < steps; ++i) {
      tok = r.ids.back();
      const double s = Now();
      vk->Forward({.tokens = std::span<const int32_t>(&tok, 1)}, &r);
      run.push_back(Now() - s);
    }
    const double run_med = Percentile(run, 0.5);
    // Per-kernel GPU time of one decode step (timestamps after every dispatch).
    auto prof = gemma::ProfileVulkanStep(*vk, std::span<const int32_t>(&r.ids.back(), 1));
    std::sort(prof.begin(), prof.end(), [](auto& a, auto& b) { return a.second > b.second; });
    double prof_total = 0;
    for (auto& [k, ns] : prof) prof_total += ns;
    std::printf("\n| kernel (decode step at %d ctx) | GPU us | share |\n|---|---|---|\n",
                vk->cached());
    for (auto& [k, ns] : prof)
      std::printf("| %s | %.1f | %.1f%% |\n", k.c_str(), ns / 1e3, 100 * ns / prof_total);
    std::printf("| total (timestamped) | %.1f | |\n", prof_total / 1e3);
    // Kernel probes: GEMMA_BENCH_PROBES="label#nth;..." ('+' for a space in a label), e.g.
    // "linear_dp+q2+epi1+12288x1536#0;attention#3": per-stage device-clock times of that dispatch.
    if (const char* pe = std::getenv("GEMMA_BENCH_PROBES")) {
      std::string all = pe;
      std::replace(all.begin(), all.end(), '+', ' ');
      size_t a = 0;
      while (a < all.size()) {
        size_t e = all.find(';', a);
        if (e == std::string::npos) e = all.size();
        std::string item = all.substr(a, e - a);
        a = e + 1;
        int nth = 0;
        if (const size_t h = item.rfind('#'); h != std::string::npos) {
          nth = std::atoi(item.c_str() + h + 1);
          item.resize(h);
        }
        std::printf("\n%s", gemma::ProbeVulkanKernel(
                                 *vk, std::span<const int32_t>(&r.ids.back(), 1), item, nth)
                                 .c_str());
      }
    }

    // The device figures once more, after the GPU has worked for a while: right after loading it
    // may still run at an idle clock (the H200 measured half the read bandwidth and 2.5x the
    // dispatch cost there in some processes, a floor above the decode time; bench/journal/2026-11-sessions.md,
    // twenty-second session). The better of the two measurements.
    bw = std::max(bw, gemma::MeasureVulkanCopyBandwidth(*vk, size_t(copy_mb) << 20));
    rbw = std::max(rbw, gemma::MeasureVulkanWeightReadBandwidth(*vk));
    sbw = std::max(sbw, gemma::MeasureVulkanStreamReadBandwidth(*vk));
    {
      const gemma::VulkanDispatchCost again = gemma::MeasureVulkanDispatchCost(*vk);
      if (again.dependent_us > 0 && (dc.dependent_us <= 0 || again.dependent_us < dc.dependent_us))
        dc = again;
    }

    gemma::GetVulkanStats(*vk, &st);
    const double bpt = static_cast<double>(model->BytesPerToken());
    // Floor: the bytes per token over the compute-shader read bandwidth of the resident weights
    // (the copy's read+write figure when there are no timestamps).
    const double floor_s = bpt / (rbw > 0 ? rbw : bw);
    // The stricter floor: the same bytes at the device's streaming read bandwidth (one large
    // buffer read over and over), which the weights' split into many buffers does not lower.
    const double floor_stream_s = sbw > 0 ? bpt / sbw : 0.0;
    std::printf("\n| metric | value |\n|---|---|\n");
    std::printf("| device | %s |\n", st.device.c_str());
    std::printf("| kernels | %s |\n", st.kernels.c_str());
    std::printf("| model | %s |\n", model_dir.c_str());
    std::printf("| model load / backend load (upload) | %.2f s / %.2f s |\n", model_load,
                backend_load);
    std::printf("| resident device memory | %.1f MiB (weights %.1f MiB) |\n",
                st.device_bytes / 1048576.0, st.weight_bytes / 1048576.0);
    std::printf("| dispatches / barriers per decoded token | %d / %d |\n", st.dispatches_per_token,
                st.barriers_per_token);
    std::printf("| device copy bandwidth (read+write) | %.0f GB/s |\n", bw / 1e9);
    std::printf("| compute read of all weights | %.0f GB/s |\n", rbw / 1e9);
    std::printf("| streaming read of the largest weight buffer (%.0f MB) | %.0f GB/s |\n",
                stream_range / 1e6, sbw / 1e9);
    std::printf("| empty dispatches (320 in a row): 1 workgroup + barrier / %u workgroups + "
                "barrier / 1 workgroup, no barrier | %.2f / %.2f / %.2f us each |\n",
                dc.wide, dc.dependent_us, dc.dependent_wide_us, dc.independent_us);
    std::printf("| barriers per token x empty dependent dispatch | %.3f ms |\n",
                st.barriers_per_token * dc.dependent_us * 1e-3);
    std::printf("| bytes per token / floor | %.1f MB / %.3f ms |\n", bpt / 1e6, floor_s * 1e3);
    std::printf("| prefill %d tokens | %.1f ms = %.0f tok/s |\n", prompt_len, prefill_s * 1e3,
                prompt_len / prefill_s);
    std::printf("| decode at %d ctx, median / p95 | %.3f / %.3f ms = %.0f tok/s |\n", ctx,
                med * 1e3, p95 * 1e3, 1.0 / med);
    std::printf("| decode free-running from %d, median | %.3f ms = %.0f tok/s |\n", ctx,
                run_med * 1e3, 1.0 / run_med);
    std::printf("| time per token / floor | %.2fx |\n", med / floor_s);
    if (floor_stream_s > 0)
      std::printf(
          "| bytes per token at the streaming read / time per token against it | %.3f ms "
          "/ %.2fx |\n",
          floor_stream_s * 1e3, med / floor_stream_s);
    std::printf(
        "{\"device\":\"%s\",\"prefill_tok_s\":%.1f,\"decode_ms\":%.4f,\"decode_p95_ms\":%.4f,"
        "\"decode_tok_s\":%.1f,\"floor_ms\":%.4f,\"ratio\":%.3f,\"copy_gbs\":%.1f,"
        "\"read_gbs\":%.1f,"
        "\"dispatches\":%d,\"barriers\":%d,\"device_mib\":%.1f,\"weights_mib\":%.1f,"
        "\"empty_dispatch_us\":%.2f,\"empty_dispatch_wide_us\":%.2f,\"stream_gbs\":%.1f,"
        "\"floor_stream_ms\":%.4f,\"ratio_stream\":%.3f}\n",
        st.device.c_str(), prompt_len / prefill_s, med * 1e3, p95 * 1e3, 1.0 / med, floor_s * 1e3,
        med / floor_s, bw / 1e9, rbw / 1e9, st.dispatches_per_token, st.barriers_per_token,
        st.device_bytes / 1048576.0, st.weight_bytes / 1048576.0, dc.dependent_us,
        dc.dependent_wide_us, sbw / 1e9, floor_stream_s * 1e3,
        floor_stream_s > 0 ? med / floor_stream_s : 0.0);
  } catch (const gemma::Error& e) {
    std::fprintf(stderr, "vulkan_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
