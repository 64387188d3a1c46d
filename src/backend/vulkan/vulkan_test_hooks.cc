// Test-only hooks of the Vulkan backend (the gemma_vulkan_testing target; not in the library).
#include "backend/vulkan/vulkan_test_hooks.h"

#include "backend/vulkan/vulkan_backend_impl.h"

namespace gemma {
namespace vulkan_internal {

// Runs one linear (epilogue 0 store, 1 gelu(lin) * second, 2 softcap) over n tokens on this
// backend's device, through the kernel a step of n tokens would use. Buffers are added per call.
std::vector<float> VulkanBackend::RunLinear(const Linear& lin, const Linear* second, const float* x,
                                            int n, uint32_t epi) {
  DevLinear d = PlanLinear(lin), d2;
  if (second) d2 = PlanLinear(*second);
  Buf xb = Reserve(Pool::kDevice, size_t(n) * lin.cols * 4);
  Buf yb = Reserve(Pool::kDevice, size_t(n) * lin.rows * 4);
  Buf host = Reserve(Pool::kHost, size_t(n) * lin.rows * 4);
  // linear_cm's quantized-input slots are sized for a chunk; a test may pass more tokens.
  const size_t part_bytes = (size_t(n) * lin.rows * 4 + 255) / 256 * 256;
  Buf slots = coop_ ? Reserve(Pool::kDevice, size_t(n) * coop_ld_max_ * 16 * kCoopSlots) : Buf{};
  Buf parts = coop_ ? Reserve(Pool::kDevice, part_bytes * kCoopSlots) : Buf{};
  dev_->Commit();
  std::optional<CoopSlotsSwap> swap;
  if (coop_) {
    Resolve(slots);
    Resolve(parts);
    swap.emplace(*this, slots, size_t(n) * coop_ld_max_ * 16, parts, part_bytes);
  }
  UploadLinear(d);
  if (second) UploadLinear(d2);
  Resolve(xb);
  Resolve(yb);
  Resolve(host);
  dev_->Upload(xb.r, 0, x, size_t(n) * lin.cols * 4);
  VkCommandBuffer cb = head_cmd_;
  Begin(cb, false);
  Rec rc{cb};
  LinearOp(rc, d, xb.r, lin.cols, yb.r, lin.rows, 0, n, epi, second ? &d2 : nullptr);
  Barrier(rc);
  VkBufferCopy cp{yb.r.offset, host.r.offset, size_t(n) * lin.rows * 4};
  vkCmdCopyBuffer(cb, yb.r.buf, host.r.buf, 1, &cp);
  End(cb);
  dev_->Submit(cb);
  const float* f = reinterpret_cast<const float*>(host.r.mapped);
  return std::vector<float>(f, f + size_t(n) * lin.rows);
}

// Kernel test hook: AttnCmOp over uploaded q and K / V rings at position pos0 (empty where the
// device or the shape does not take the matrix-unit path).
std::vector<float> VulkanBackend::RunAttnCm(const float* q, const float* k, const float* v, int nh,
                                            int nkv, int hd, int ring, int window, int pos0,
                                            int m) {
  if (!attn_cm_ || nh % nkv != 0) return {};
  const size_t qn = size_t(m) * nh * hd, kvn = size_t(ring) * nkv * hd;
  const size_t slot_bytes = (size_t(m) * nh + 32) * AttnCmChunks(hd) * 8 * 16;
  const size_t part_bytes = ((size_t(m) * nh + 32) * 4 + 255) / 256 * 256;
  Buf qb = Reserve(Pool::kDevice, qn * 4), kb = Reserve(Pool::kDevice, kvn * 4),
      vb = Reserve(Pool::kDevice, kvn * 4), ob = Reserve(Pool::kDevice, qn * 4),
      host = Reserve(Pool::kHost, qn * 4), slots = Reserve(Pool::kDevice, slot_bytes * kCoopSlots),
      parts = Reserve(Pool::kDevice, part_bytes * kCoopSlots);
  dev_->Commit();
  for (Buf* b : {&qb, &kb, &vb, &ob, &host, &slots, &parts}) Resolve(*b);
  const CoopSlotsSwap swap(*this, slots, slot_bytes, parts, part_bytes);
  const bool shape = AttnCmShape(hd, nh, nkv, m);
  std::vector<float> r;
  if (shape) {
    dev_->Upload(qb.r, 0, q, qn * 4);
    dev_->Upload(kb.r, 0, k, kvn * 4);
    dev_->Upload(vb.r, 0, v, kvn * 4);
    VkCommandBuffer cb = head_cmd_;
    Begin(cb, false);
    Rec rc{cb};
    const uint32_t st[4] = {static_cast<uint32_t>(pos0), static_cast<uint32_t>(m), 0u, 0u};
    vkCmdUpdateBuffer(cb, step_.r.buf, step_.r.offset, sizeof(st), st);
    Barrier(rc);
    AttnCmOp(rc, qb.r, kb.r, vb.r, ob.r, nh, nkv, hd, ring, window, m);
    VkBufferCopy cp{ob.r.offset, host.r.offset, qn * 4};
    vkCmdCopyBuffer(cb, ob.r.buf, host.r.buf, 1, &cp);
    End(cb);
    dev_->Submit(cb);
    const float* f = reinterpret_cast<const float*>(host.r.mapped);
    r.assign(f, f + qn);
  }
  return r;
}

}  // namespace vulkan_internal

using vulkan_internal::VulkanBackend;

std::vector<float> VulkanLinearForTest(Backend& backend, const Linear& lin, const Linear* second,
                                       const float* x, int n, int epilogue) {
  auto* vb = dynamic_cast<VulkanBackend*>(&backend);
  if (!vb) return {};
  return vb->RunLinear(lin, second, x, n, static_cast<uint32_t>(epilogue));
}

std::vector<float> VulkanPrefillAttentionForTest(Backend& backend, const float* q, const float* k,
                                                 const float* v, int nh, int nkv, int hd, int ring,
                                                 int window, int pos0, int m) {
  auto* vb = dynamic_cast<VulkanBackend*>(&backend);
  if (!vb) return {};
  return vb->RunAttnCm(q, k, v, nh, nkv, hd, ring, window, pos0, m);
}

bool SimulateVulkanDeviceLoss(Backend& backend) {
  auto* vb = dynamic_cast<VulkanBackend*>(&backend);
  if (!vb) return false;
  vb->FailNextSubmit();
  return true;
}

}  // namespace gemma
