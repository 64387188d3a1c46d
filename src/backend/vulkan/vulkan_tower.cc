#include "backend/vulkan/vulkan_tower.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/audio_ops.h"
#include "backend/cpu/fast/cpu_fast_backend.h"
#include "backend/cpu/vision_ops.h"
#include "backend/vulkan/vulkan_backend_impl.h"  // KindCode
#include "core/thread_pool.h"
#include "gemma/error.h"

namespace gemma::vulkan_internal {
namespace {

using vk::BufRange;
using vk::Pool;

// The device's linears and attention; the host's (the fast CPU backend's kernels) for the rest.
class DeviceKernels : public ref::VisionKernels {
 public:
  DeviceKernels(VulkanTower& t, const ref::VisionKernels& host) : t_(t), host_(host) {}
  void Linear(const gemma::Linear& lin, const float* x, int n, float* y) const override {
    if (DeviceTowerLinear(lin)) {
      t_.Linear(lin, x, n, y);
    } else {
      host_.Linear(lin, x, n, y);
    }
  }
  void Attention(const float* q, const float* k, const float* v, int n, int nh, int nkv, int hd,
                 float* out) const override {
    if (hd <= 128 && nkv > 0 && nh % nkv == 0) {
      t_.Attention(q, k, v, n, nh, nkv, hd, out);
    } else {
      host_.Attention(q, k, v, n, nh, nkv, hd, out);
    }
  }
  void GeluMul(float* g, const float* u, size_t n) const override { host_.GeluMul(g, u, n); }
  void ForTokens(int n, const std::function<void(int, int)>& fn) const override {
    host_.ForTokens(n, fn);
  }

 private:
  VulkanTower& t_;
  const ref::VisionKernels& host_;
};

bool Srq(const gemma::Linear& l) { return l.in_scale > 0 || l.out_scale > 0; }

bool HasSrq(const VisionTower& t) {
  bool srq = Srq(t.input_proj) || Srq(t.embed_proj);
  for (const VisionLayerWeights& l : t.layers)
    for (const ClippedLinear* c : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
      srq = srq || Srq(c->lin);
  return srq;
}

bool HasSrq(const AudioTower& t) {
  bool srq = Srq(t.input_proj) || Srq(t.output_proj) || Srq(t.embed_proj);
  for (const AudioLayerWeights& l : t.layers) {
    srq = srq || Srq(l.relative_k);
    for (const ClippedLinear* c : {&l.ff1.up, &l.ff1.down, &l.ff2.up, &l.ff2.down, &l.q, &l.k, &l.v,
                                   &l.post, &l.lconv_start, &l.lconv_end})
      srq = srq || Srq(c->lin);
  }
  return srq;
}

constexpr size_t kAlign = 256;  // binding offsets (minStorageBufferOffsetAlignment <= 256)
size_t TowerAligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
// Floats per operand a pass of tower_gemm takes (larger inputs run in passes of fewer tokens).
constexpr size_t kPassFloats = size_t{16} << 20;

}  // namespace

bool DeviceTowerLinear(const gemma::Linear& lin) {
  return lin.data && lin.rows > 0 && lin.cols > 0 && lin.in_scale == 0 && lin.out_scale == 0 &&
         (!IsQuantized(lin.kind) || lin.row_scale);
}

VulkanTower::VulkanTower(const vk::Device& device, ThreadPool& pool)
    : pool_(pool), wdev_(device.NewContext()) {}

VulkanTower::~VulkanTower() = default;

void VulkanTower::EncodeImage(const Model& model, const VisionPatches& image,
                              std::vector<float>* soft) {
  const VisionTower* t = model.vision();
  if (!t) throw Error(ErrorCode::kUnsupported, model.vision_error());
  if (HasSrq(*t)) {
    FastEncodeImage(model, pool_, image, soft);
    return;
  }
  const std::unique_ptr<ref::VisionKernels> host =
      MakeFastTowerKernels(pool_, FastVisionF32Ops(*t));
  const DeviceKernels kernels(*this, *host);
  const std::vector<float> pooled = ref::VisionTowerForward(*t, image, kernels);
  const int k = t->config.pooling_kernel_size;
  *soft = ref::EmbedVision(*t, pooled, image.patches_h * image.patches_w / (k * k), kernels);
}

void VulkanTower::EncodeAudio(const Model& model, const AudioMel& audio, std::vector<float>* soft) {
  const AudioTower* t = model.audio();
  if (!t) throw Error(ErrorCode::kUnsupported, model.audio_error());
  if (HasSrq(*t)) {
    FastEncodeAudio(model, pool_, audio, soft);
    return;
  }
  const std::unique_ptr<ref::VisionKernels> host = MakeFastTowerKernels(pool_, /*f32_ops=*/false);
  const DeviceKernels kernels(*this, *host);
  const std::vector<float> out = ref::AudioTowerForward(*t, audio, kernels);
  *soft =
      ref::EmbedAudio(*t, out, static_cast<int>(out.size() / t->config.output_proj_dims), kernels);
}

const VulkanTower::Weights& VulkanTower::Upload(const gemma::Linear& lin) {
  const WeightKey key{lin.data, lin.row_scale, lin.rows, lin.cols, lin.row_bytes, lin.kind};
  auto it = weights_.find(key);
  if (it != weights_.end()) return it->second;
  Weights wt;
  wt.wstride = static_cast<uint32_t>((lin.row_bytes + 3) / 4);
  const size_t row_b = size_t{wt.wstride} * 4;
  const int hw = wdev_->Reserve(Pool::kDevice, row_b * lin.rows);
  const int hs = IsQuantized(lin.kind) ? wdev_->Reserve(Pool::kDevice, 4u * lin.rows) : -1;
  wdev_->Commit("a tower's weights");
  wt.w = wdev_->Get(hw);
  std::vector<uint8_t> buf(row_b * lin.rows, 0);
  for (int r = 0; r < lin.rows; ++r)
    std::memcpy(&buf[row_b * r], lin.data + size_t(r) * lin.row_bytes, lin.row_bytes);
  wdev_->Upload(wt.w, 0, buf.data(), buf.size());
  if (hs >= 0) {
    wt.s = wdev_->Get(hs);
    wdev_->Upload(wt.s, 0, lin.row_scale, 4u * lin.rows);
  }
  return weights_.emplace(key, wt).first->second;
}

void VulkanTower::Reserve(size_t in, size_t out) {
  if (adev_ && in <= in_cap_ && out <= out_cap_) return;
  const size_t in_cap = std::max(in, in_cap_), out_cap = std::max(out, out_cap_);
  adev_.reset();  // (a failed allocation leaves none, and the old sizes)
  std::unique_ptr<vk::Device> dev = wdev_->NewContext();
  const int hi = dev->Reserve(Pool::kDevice, in_cap * 4);
  const int ho = dev->Reserve(Pool::kDevice, out_cap * 4);
  const int hh = dev->Reserve(Pool::kHost, out_cap * 4);
  dev->Commit("a tower's activations");
  in_ = dev->Get(hi);
  out_ = dev->Get(ho);
  host_ = dev->Get(hh);
  cmd_ = dev->AllocCommandBuffer();
  adev_ = std::move(dev);
  in_cap_ = in_cap;
  out_cap_ = out_cap;
}

void VulkanTower::Run(const char* shader, const std::vector<uint32_t>& spec,
                      const std::array<BufRange, vk::kBindings>& b, const void* push,
                      size_t push_bytes, uint32_t gx, uint32_t gy, size_t out_bytes) {
  vkResetCommandBuffer(cmd_, 0);
  VkCommandBufferBeginInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  if (vkBeginCommandBuffer(cmd_, &bi) != VK_SUCCESS)
    throw Error(ErrorCode::kDevice, "vulkan: vkBeginCommandBuffer failed");
  vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, adev_->Pipeline(shader, spec));
  const VkDescriptorSet set = adev_->Set(b);
  vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, adev_->layout(), 0, 1, &set, 0,
                          nullptr);
  vkCmdPushConstants(cmd_, adev_->layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0,
                     static_cast<uint32_t>(push_bytes), push);
  vkCmdDispatch(cmd_, gx, gy, 1);
  adev_->Barrier(cmd_);
  const VkBufferCopy cp{out_.offset, host_.offset, out_bytes};
  vkCmdCopyBuffer(cmd_, out_.buf, host_.buf, 1, &cp);
  if (vkEndCommandBuffer(cmd_) != VK_SUCCESS)
    throw Error(ErrorCode::kDevice, "vulkan: vkEndCommandBuffer failed");
  adev_->Submit(cmd_);
}

void VulkanTower::Linear(const gemma::Linear& lin, const float* x, int n, float* y) {
  const Weights& wt = Upload(lin);
  const int K = lin.cols, N = lin.rows;
  const int per =
      static_cast<int>(std::max<size_t>(64, kPassFloats / static_cast<size_t>(std::max(K, N))));
  for (int t0 = 0; t0 < n; t0 += per) {
    const int m = std::min(per, n - t0);
    const size_t in_b = size_t(m) * K * 4, out_b = size_t(m) * N * 4;
    Reserve(size_t(std::min(per, n)) * K, size_t(std::min(per, n)) * N);
    adev_->Upload(in_, 0, x + size_t(t0) * K, in_b);
    std::array<BufRange, vk::kBindings> b{};
    b[0] = {in_.buf, in_.offset, in_b};
    b[1] = wt.w;
    b[2] = wt.s;
    b[3] = {out_.buf, out_.offset, out_b};
    const uint32_t pc[4] = {static_cast<uint32_t>(m), static_cast<uint32_t>(K),
                            static_cast<uint32_t>(N), wt.wstride};
    Run("tower_gemm", {0u, KindCode(lin.kind)}, b, pc, sizeof(pc),
        static_cast<uint32_t>((N + 63) / 64), static_cast<uint32_t>((m + 63) / 64), out_b);
    std::memcpy(y + size_t(t0) * N, host_.mapped, out_b);
  }
}

void VulkanTower::Attention(const float* q, const float* k, const float* v, int n, int nh, int nkv,
                            int hd, float* out) {
  const size_t qb = size_t(n) * nh * hd * 4, kvb = size_t(n) * nkv * hd * 4;
  const size_t koff = TowerAligned(qb), voff = koff + TowerAligned(kvb);
  Reserve((voff + kvb) / 4 + 1, qb / 4);
  adev_->Upload(in_, 0, q, qb);
  adev_->Upload(in_, koff, k, kvb);
  adev_->Upload(in_, voff, v, kvb);
  std::array<BufRange, vk::kBindings> b{};
  b[0] = {in_.buf, in_.offset, qb};
  b[1] = {in_.buf, in_.offset + koff, kvb};
  b[2] = {in_.buf, in_.offset + voff, kvb};
  b[3] = {out_.buf, out_.offset, qb};
  const uint32_t pc[3] = {static_cast<uint32_t>(n), 0u, static_cast<uint32_t>(n)};
  Run("tower_attn",
      {0u, static_cast<uint32_t>(hd), static_cast<uint32_t>(nh), static_cast<uint32_t>(nkv)}, b, pc,
      sizeof(pc), static_cast<uint32_t>((n + 63) / 64), static_cast<uint32_t>(nh), qb);
  std::memcpy(out, host_.mapped, qb);
}

}  // namespace gemma::vulkan_internal
