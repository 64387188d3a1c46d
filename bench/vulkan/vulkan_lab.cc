// The Vulkan backend's measurement lab (not linked by the library): read and copy bandwidth,
// dispatch cost, per-kernel profiles and kernel probes, through the recorder's DispatchObserver.
#include "bench/vulkan/vulkan_lab.h"

#include <chrono>

#include "backend/vulkan/vulkan_backend_impl.h"

namespace gemma {
namespace vk {
std::span<const uint32_t> LabSpirvModule(const char* name);  // vulkan_lab_spirv.cc (generated)
}  // namespace vk
namespace vulkan_internal {
namespace {
// The lab's modules (readbw, the kernels' probe builds) become visible to every device.
const bool kLabModules = (vk::SetExtraSpirv(&vk::LabSpirvModule), true);
}  // namespace

// The body and head of an argmax step over m tokens at the current position, recorded as a step
// records them (one token: as DecodeCommand; more: as a prompt chunk's last position).
void VulkanBackend::RecordArgmaxStep(Rec& rc, int m) {
  if (m == 1) {
    rc.fuse_head = head_norm_;  // (as DecodeCommand)
    rc.long_ctx = LongContextStep();
    RecordBody(rc, 1, splits_);
    RecordHead(rc, 0, 1, OutputMode::kArgmax);
  } else {
    RecordHead(rc, RecordPromptStep(rc, m, window_.cached(), m - 1, 1), 1, OutputMode::kArgmax);
  }
}

// readbw over each range (its 16-byte words, with that many workgroups), the dispatches back to
// back in one command buffer: bytes read per second, the median of `iters` timed passes after
// one more; 0 without timestamps.
double VulkanBackend::ReadBandwidth(const std::vector<std::pair<BufRange, uint32_t>>& reads,
                                    int iters) {
  if (!dev_->has_timestamps() || reads.empty()) return 0.0;
  double bytes = 0;
  for (const auto& [r, wgs] : reads) bytes += static_cast<double>(r.size / 16 * 16);
  VkCommandBuffer cb = head_cmd_;
  std::vector<double> secs;
  for (int it = 0; it < iters + 1; ++it) {
    Begin(cb, false);
    dev_->ResetTimestamps(cb, 2);
    dev_->WriteTimestamp(cb, 0);
    Rec rc{cb};
    for (const auto& [r, wgs] : reads) {
      std::array<BufRange, vk::kBindings> b{};
      b[0] = r;
      b[3] = counter_.r;
      const uint32_t n = static_cast<uint32_t>(std::min<size_t>(r.size / 16, 0xFFFFFFFFu));
      Dispatch(rc, "readbw", {}, b, &n, sizeof(n), std::min<uint32_t>(wgs, (n + 255) / 256), 1, 1,
               false);
    }
    dev_->WriteTimestamp(cb, 1);
    End(cb);
    dev_->Submit(cb);
    const std::vector<double> ts = dev_->ReadTimestamps(2);
    if (it > 0) secs.push_back((ts[1] - ts[0]) * 1e-9);
  }
  std::sort(secs.begin(), secs.end());
  return bytes / secs[secs.size() / 2];
}

// Bytes per second a compute shader reads from every resident weight buffer once (the decode's
// traffic), median of `iters` timed passes; 0 without timestamps.
double VulkanBackend::WeightReadBandwidth(int iters) {
  std::vector<std::pair<BufRange, uint32_t>> reads;
  for (const BufRange& r : WeightRanges()) reads.push_back({r, 2048});
  return ReadBandwidth(reads, iters);
}

// The device's streaming read bandwidth: readbw over the largest weight buffer (larger than
// the caches on the models benchmarked), passes of at least 512 MiB in all per command buffer,
// the median of `iters`. A floor that does not depend on how the weights are split into buffers
// (WeightReadBandwidth reads every buffer once, many of them small). 0 without timestamps.
double VulkanBackend::StreamReadBandwidth(int iters, size_t* range_bytes) {
  BufRange big{};
  for (const BufRange& r : WeightRanges())
    if (r.size > big.size) big = r;
  if (range_bytes) *range_bytes = big.size;
  if (big.size < 16) return 0.0;
  const int passes = static_cast<int>(std::clamp<size_t>((size_t(512) << 20) / big.size, 1, 64));
  const uint32_t cus = dev_->compute_units();
  const uint32_t wgs = cus > 0 ? std::min<uint32_t>(65535, 8 * cus) : 256;
  return ReadBandwidth(std::vector<std::pair<BufRange, uint32_t>>(passes, {big, wgs}), iters);
}

// Empty dispatches (readbw with n = 0): timestamps around `n` of them, median of 5 passes.
double VulkanBackend::MatrixPeak(int mode) {
  if (!coop_ || !dev_->has_timestamps()) return 0.0;
  const uint32_t wgs = 8 * dev_->compute_units();
  const uint32_t push[2] = {4096, 0};
  double best = 0.0;
  // (passes for at least 1 s first: the GPU's clocks rise under sustained load)
  const auto start = std::chrono::steady_clock::now();
  for (int it = 0; it < 6; ++it) {
    if (it == 1 && std::chrono::steady_clock::now() - start < std::chrono::seconds(1)) it = 0;
    VkCommandBuffer cb = head_cmd_;
    Begin(cb, false);
    dev_->ResetTimestamps(cb, 2);
    dev_->WriteTimestamp(cb, 0);
    Rec rc{cb};
    std::array<BufRange, vk::kBindings> b{};
    b[3] = counter_.r;
    Dispatch(rc, "mma_peak", {static_cast<uint32_t>(mode)}, b, push, sizeof(push), wgs, 1, 1,
             false);
    dev_->WriteTimestamp(cb, 1);
    End(cb);
    dev_->Submit(cb);
    const std::vector<double> ts = dev_->ReadTimestamps(2);
    // 8 subgroups x 8 accumulators x iters products of 2 x 16^3 FLOP per workgroup
    const double flop = double(wgs) * 8 * 8 * push[0] * 2 * 4096;
    if (it > 0) best = std::max(best, flop / ((ts[1] - ts[0]) * 1e-9));
  }
  return best;
}

VulkanDispatchCost VulkanBackend::DispatchCost(int n) {
  VulkanDispatchCost c;
  if (!dev_->has_timestamps() || n <= 0) return c;
  c.wide = std::max<uint32_t>(256, 4 * dev_->compute_units());
  auto time = [&](uint32_t wgs, bool barriers) {
    std::vector<double> us;
    for (int it = 0; it < 6; ++it) {
      VkCommandBuffer cb = head_cmd_;
      Begin(cb, false);
      dev_->ResetTimestamps(cb, 2);
      dev_->WriteTimestamp(cb, 0);
      Rec rc{cb};
      for (int i = 0; i < n; ++i) {
        std::array<BufRange, vk::kBindings> b{};
        b[0] = counter_.r;
        b[3] = counter_.r;
        const uint32_t zero = 0;
        Dispatch(rc, "readbw", {}, b, &zero, sizeof(zero), wgs, 1, 1, false);
        if (barriers) Barrier(rc);
      }
      dev_->WriteTimestamp(cb, 1);
      End(cb);
      dev_->Submit(cb);
      const std::vector<double> ts = dev_->ReadTimestamps(2);
      if (it > 0) us.push_back((ts[1] - ts[0]) * 1e-3 / n);
    }
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  };
  c.dependent_us = time(1, true);
  c.dependent_wide_us = time(c.wide, true);
  c.independent_us = time(1, false);
  return c;
}

// One step over `tokens` with the `nth` dispatch labelled `label` (linear_dp or attention) run
// as its PROBE variant: per-stage device-clock times of its workgroups, as a markdown table.
std::string VulkanBackend::ProbeKernel(std::span<const int32_t> tokens, const std::string& label,
                                       int nth) {
  const int m = static_cast<int>(tokens.size());
  if (!dev_->device_clock() || !dev_->subgroup_clock())
    return "probe: the device has no shader device clock or no subgroup clock\n";
  if (m == 0 || m > chunk_ || window_.cached() + m > capacity_) return "probe: bad step\n";
  const StepActivations activations(*this, m);
  FillInputs(tokens, OutputMode::kArgmax, nullptr);
  VkCommandBuffer cb = head_cmd_;
  Begin(cb, false);
  vkCmdFillBuffer(cb, prof_.r.buf, prof_.r.offset, prof_.r.size, 0);
  dev_->Barrier(cb);
  Rec rc{cb};
  RecordInputs(rc, m, OutputMode::kArgmax);
  // The `nth` dispatch labelled `label` (linear_dp, attention or attn_fused) runs its probe build
  // with the probe buffer bound; a label "2:..." selects the finer probe set (linear_dp_probe2:
  // inside the norm prologue; attention_probe2: the first key block's V loop, round by round).
  struct Probe : DispatchObserver {
    const std::string* want;
    int nth, seen = 0;
    uint32_t wgs = 0;
    BufRange buf;
    void Before(const char* shader, const std::string& l, uint32_t workgroups,
                std::string* probe_shader, std::array<BufRange, vk::kBindings>* b) override {
      const bool fine = want->rfind("2:", 0) == 0;
      const bool probed = std::strcmp(shader, "linear_dp") == 0 ||
                          std::strcmp(shader, "attention") == 0 ||
                          std::strcmp(shader, "attn_fused") == 0;
      if (!probed || l != want->substr(fine ? 2 : 0) || seen++ != nth) return;
      const uint32_t pb = shader[0] == 'l' ? 11 : std::strcmp(shader, "attention") == 0 ? 10 : 14;
      *probe_shader = std::string(shader) + (fine ? "_probe2" : "_probe");
      (*b)[pb] = buf;
      wgs = workgroups;
    }
  } probe;
  probe.want = &label;
  probe.nth = nth;
  probe.buf = prof_.r;
  rc.observer = &probe;
  RecordArgmaxStep(rc, m);
  dev_->Barrier(cb);
  const VkBufferCopy cp{prof_.r.offset, prof_host_.r.offset,
                        std::min<size_t>(prof_.r.size, prof_host_.r.size)};
  vkCmdCopyBuffer(cb, prof_.r.buf, prof_host_.r.buf, 1, &cp);
  End(cb);
  dev_->Submit(cb);
  if (!probe.wgs) return "probe: no dispatch labelled '" + label + "'\n";
  const uint32_t* raw = reinterpret_cast<const uint32_t*>(prof_host_.r.mapped);
  const uint32_t n = std::min<uint32_t>(probe.wgs, 4096);
  // Slot k of workgroup w: the device clock (ns); slot 8 + k: its compute unit's cycles.
  auto word = [&](uint32_t w, int slot) {
    return uint64_t(raw[(w * 16 + slot) * 2]) | (uint64_t(raw[(w * 16 + slot) * 2 + 1]) << 32);
  };
  auto at = [&](uint32_t w, int k) { return static_cast<double>(word(w, k)); };
  // Per workgroup: its first and last written points (a kernel may skip some, e.g. the
  // prologue points of a linear without a prologue).
  double t0 = 1e300, s1 = 0, e1 = 0, span_ns = 0, span_cycles = 0;
  int first = 8, last = -1;
  for (uint32_t w = 0; w < n; ++w) {
    int wf = -1, wl = -1;
    for (int k = 0; k < 8; ++k) {
      if (word(w, k) == 0) continue;
      if (wf < 0) wf = k;
      wl = k;
      first = std::min(first, k);
      last = std::max(last, k);
    }
    if (wf < 0) continue;
    t0 = std::min(t0, at(w, wf));
    s1 = std::max(s1, at(w, wf));
    e1 = std::max(e1, at(w, wl));
    span_ns += at(w, wl) - at(w, wf);
    span_cycles += static_cast<double>(word(w, 8 + wl) - word(w, 8 + wf));
  }
  if (last < 0) return "probe: '" + label + "' wrote no points\n";
  // Cycles per ns from the workgroups' spans (the device clock ticks coarsely: ~0.26 us on the
  // H200); stage durations come from the cycle counter. Spans too short to time: cycles.
  const double ghz = span_ns >= 1000.0 ? span_cycles / span_ns : 0.0;
  char buf[256];
  std::string out = "| probe: " + label + " #" + std::to_string(nth) + " | " +
                    std::to_string(probe.wgs) + " workgroups |\n|---|---|\n";
  std::snprintf(buf, sizeof(buf),
                "| first start to last end | %.2f us |\n"
                "| first start to last start | %.2f us |\n",
                (e1 - t0) * 1e-3, (s1 - t0) * 1e-3);
  out += buf;
  if (ghz > 0) {
    std::snprintf(buf, sizeof(buf), "| compute-unit clock during the probe | %.0f MHz |\n",
                  ghz * 1e3);
    out += buf;
  }
  // Stages: from each written point to the workgroup's next written point, in cycles.
  std::map<std::pair<int, int>, std::array<double, 3>> stages;  // sum, max, count
  for (uint32_t w = 0; w < n; ++w) {
    int prev = -1;
    for (int k = first; k <= last; ++k) {
      if (word(w, k) == 0) continue;
      if (prev >= 0) {
        std::array<double, 3>& st = stages[{prev, k}];
        const double d = static_cast<double>(word(w, 8 + k) - word(w, 8 + prev));
        st[0] += d;
        st[1] = std::max(st[1], d);
        st[2] += 1;
      }
      prev = k;
    }
  }
  for (const auto& [ks, st] : stages) {
    if (ghz > 0) {
      std::snprintf(buf, sizeof(buf),
                    "| probe %d -> %d: mean / max over %d workgroups | %.3f / %.3f us |\n",
                    ks.first, ks.second, static_cast<int>(st[2]), st[0] / st[2] / ghz * 1e-3,
                    st[1] / ghz * 1e-3);
    } else {
      std::snprintf(buf, sizeof(buf),
                    "| probe %d -> %d: mean / max over %d workgroups | %.0f / %.0f cycles |\n",
                    ks.first, ks.second, static_cast<int>(st[2]), st[0] / st[2], st[1]);
    }
    out += buf;
  }
  return out;
}

std::vector<std::pair<std::string, double>> VulkanBackend::Profile(
    std::span<const int32_t> tokens) {
  const int m = static_cast<int>(tokens.size());
  if (!dev_->has_timestamps() || m == 0 || m > chunk_ || window_.cached() + m > capacity_)
    return {};
  const StepActivations activations(*this, m);
  FillInputs(tokens, OutputMode::kArgmax, nullptr);
  Rec rc{head_cmd_};
  return TimedRecording(
      rc, [&] { RecordInputs(rc, m, OutputMode::kArgmax); }, [&] { RecordArgmaxStep(rc, m); });
}

std::vector<std::pair<std::string, double>> VulkanBackend::ProfileRows(
    std::span<VulkanBackend* const> ctx, std::span<const int32_t> tokens) {
  const int m = static_cast<int>(tokens.size());
  if (!dev_->has_timestamps() || m < 2 || m > batch_rows_ || ctx.size() != tokens.size()) return {};
  std::vector<VulkanBackend*> rows(ctx.begin(), ctx.end());
  FillInputs(tokens, OutputMode::kArgmax, nullptr);
  std::vector<int32_t> positions;
  for (VulkanBackend* c : rows) positions.push_back(c->cached());
  const VulkanBackend* rope = WriteRowSteps(rows, positions);
  for (int r = 0; r < m; ++r) rows[r]->window_.BeginWrite(positions[r], 1);
  Rec rc{head_cmd_};
  rc.rows = &rows;
  rc.row_splits = RowSplits(m);
  rc.rope_rows = rope;
  return TimedRecording(
      rc,
      [&] {
        const VkBufferCopy cp{row_steps_host_.r.offset, row_steps_.r.offset, m * kRowStepBytes};
        vkCmdCopyBuffer(rc.cmd, row_steps_host_.r.buf, row_steps_.r.buf, 1, &cp);
        RecordInputs(rc, m, OutputMode::kArgmax);
      },
      [&] {
        RecordBody(rc, m, rc.row_splits);
        RecordBatchHead(rc, m, 0, true);
      });
}

// Records `inputs` then `body` into rc's command buffer with a timestamp after the inputs and after
// every dispatch, submits it and sums the GPU time per label.
std::vector<std::pair<std::string, double>> VulkanBackend::TimedRecording(
    Rec& rc, const std::function<void()>& inputs, const std::function<void()>& body) {
  std::vector<std::pair<std::string, double>> out;
  std::vector<std::string> labels;
  const VkCommandBuffer cb = rc.cmd;
  Begin(cb, false);
  dev_->ResetTimestamps(cb, Device::kMaxTimestamps);
  dev_->WriteTimestamp(cb, 0);
  inputs();
  labels.push_back("step inputs (copies, fills, barrier)");
  dev_->WriteTimestamp(cb, 1);
  struct Stamps : DispatchObserver {
    Device* dev;
    std::vector<std::string>* labels;
    void After(VkCommandBuffer cmd, const std::string& l) override {
      if (labels->size() + 1 >= Device::kMaxTimestamps) return;
      labels->push_back(l);
      dev->WriteTimestamp(cmd, static_cast<uint32_t>(labels->size()));
    }
  } stamps;
  stamps.dev = dev_.get();
  stamps.labels = &labels;
  rc.observer = &stamps;
  body();
  rc.observer = nullptr;
  End(cb);
  dev_->Submit(cb);
  const std::vector<double> ts = dev_->ReadTimestamps(static_cast<uint32_t>(labels.size() + 1));
  for (size_t i = 0; i < labels.size(); ++i) {
    auto it =
        std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == labels[i]; });
    const double d = ts[i + 1] - ts[i];
    if (it == out.end())
      out.emplace_back(labels[i], d);
    else
      it->second += d;
  }
  return out;
}

// Every resident weight buffer (each part of every linear).
std::vector<BufRange> VulkanBackend::WeightRanges() const {
  std::vector<BufRange> parts;
  auto add = [&](const DevLinear& d) {
    for (const DevLinear::Part& p : d.parts)
      if (p.w.handle >= 0) parts.push_back(p.w.r);
  };
  for (const DevLayer& l : layers_)
    for (const DevLinear* d :
         {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down, &l.ple_gate, &l.ple_proj})
      add(*d);
  add(ple_proj_);
  add(lm_head_);
  return parts;
}

}  // namespace vulkan_internal

using vulkan_internal::VulkanBackend;

double MeasureVulkanCopyBandwidth(Backend& backend, size_t bytes) {
  auto* vb = dynamic_cast<VulkanBackend*>(&backend);
  return vb ? vb->CopyBandwidth(bytes) : 0.0;
}

double MeasureVulkanMatrixPeak(Backend& backend, int mode) {
  auto* vb = dynamic_cast<VulkanBackend*>(&backend);
  return vb ? vb->MatrixPeak(mode) : 0.0;
}

VulkanDispatchCost MeasureVulkanDispatchCost(Backend& backend, int n) {
  auto* vb = dynamic_cast<VulkanBackend*>(&backend);
  return vb ? vb->DispatchCost(n) : VulkanDispatchCost{};
}

double MeasureVulkanWeightReadBandwidth(Backend& backend) {
  auto* vb = dynamic_cast<VulkanBackend*>(&backend);
  return vb ? vb->WeightReadBandwidth(5) : 0.0;
}

double MeasureVulkanStreamReadBandwidth(Backend& backend, size_t* range_bytes) {
  auto* vb = dynamic_cast<VulkanBackend*>(&backend);
  return vb ? vb->StreamReadBandwidth(5, range_bytes) : 0.0;
}

std::string ProbeVulkanKernel(Backend& backend, std::span<const int32_t> tokens,
                              const std::string& label, int nth) {
  auto* vb = dynamic_cast<VulkanBackend*>(&backend);
  if (!vb) return {};
  return vb->ProbeKernel(tokens, label, nth);
}

std::vector<std::pair<std::string, double>> ProfileVulkanStep(Backend& backend,
                                                              std::span<const int32_t> tokens) {
  auto* vb = dynamic_cast<VulkanBackend*>(&backend);
  if (!vb) return {};
  return vb->Profile(tokens);
}

std::vector<std::pair<std::string, double>> ProfileVulkanBatch(std::span<Backend* const> contexts,
                                                               std::span<const int32_t> tokens) {
  std::vector<vulkan_internal::VulkanBackend*> rows;
  for (Backend* b : contexts) {
    auto* vb = dynamic_cast<vulkan_internal::VulkanBackend*>(b);
    if (!vb) return {};
    rows.push_back(vb);
  }
  if (rows.empty()) return {};
  return rows[0]->ProfileRows(rows, tokens);
}

}  // namespace gemma
