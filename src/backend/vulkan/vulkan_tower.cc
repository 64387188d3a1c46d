#include "backend/vulkan/vulkan_tower.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/audio_ops.h"
#include "backend/cpu/fast/cpu_fast_backend.h"
#include "backend/cpu/reference_ops.h"
#include "backend/cpu/vision_ops.h"
#include "backend/vulkan/tower_record.h"
#include "backend/vulkan/vulkan_backend_impl.h"  // KindCode
#include "core/dtype.h"
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

GemmPush MakeGemmPush(const gemma::Linear& lin, uint32_t wstride, int n) {
  GemmPush pc{};
  pc.n = static_cast<uint32_t>(n);
  pc.K = static_cast<uint32_t>(lin.cols);
  pc.N = static_cast<uint32_t>(lin.rows);
  pc.wstride = wstride;
  return pc;
}

void SetClamps(const ClippedLinear& cl, GemmPush* pc) {
  if (std::isfinite(cl.in_min) || std::isfinite(cl.in_max)) pc->flags |= 1;
  if (std::isfinite(cl.out_min) || std::isfinite(cl.out_max)) pc->flags |= 2;
  pc->in_min = cl.in_min;
  pc->in_max = cl.in_max;
  pc->out_min = cl.out_min;
  pc->out_max = cl.out_max;
}

void BeginOneTime(VkCommandBuffer cmd) {
  vkResetCommandBuffer(cmd, 0);
  VkCommandBufferBeginInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  if (vkBeginCommandBuffer(cmd, &bi) != VK_SUCCESS)
    throw Error(ErrorCode::kDevice, "vulkan: vkBeginCommandBuffer failed");
}

void RecordDispatch(vk::Device& dev, VkCommandBuffer cmd, const char* shader,
                    const std::vector<uint32_t>& spec, const std::array<BufRange, vk::kBindings>& b,
                    const void* push, size_t push_bytes, uint32_t gx, uint32_t gy,
                    vk::Device::BarrierKind barrier) {
  vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, dev.Pipeline(shader, spec));
  const VkDescriptorSet set = dev.Set(b);
  vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, dev.layout(), 0, 1, &set, 0,
                          nullptr);
  vkCmdPushConstants(cmd, dev.layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0,
                     static_cast<uint32_t>(push_bytes), push);
  vkCmdDispatch(cmd, gx, gy, 1);
  dev.Barrier(cmd, barrier);
}

void SubmitAndRead(vk::Device& dev, VkCommandBuffer cmd, const vk::BufRange& src,
                   const vk::BufRange& host, size_t floats, std::vector<float>* out) {
  dev.Barrier(cmd);
  const VkBufferCopy cp{src.offset, host.offset, floats * 4};
  vkCmdCopyBuffer(cmd, src.buf, host.buf, 1, &cp);
  if (vkEndCommandBuffer(cmd) != VK_SUCCESS)
    throw Error(ErrorCode::kDevice, "vulkan: vkEndCommandBuffer failed");
  dev.Submit(cmd);
  const float* f = reinterpret_cast<const float*>(host.mapped);
  out->assign(f, f + floats);
}

std::pair<uint32_t, uint32_t> Grid256(size_t count) {
  const size_t groups = std::max<size_t>(1, (count + 255) / 256);
  const size_t gx = std::min<size_t>(groups, 65535);
  return {static_cast<uint32_t>(gx), static_cast<uint32_t>((groups + gx - 1) / gx)};
}

bool DeviceTowerLinear(const gemma::Linear& lin) {
  return lin.data && lin.rows > 0 && lin.cols > 0 && lin.in_scale == 0 && lin.out_scale == 0 &&
         (!IsQuantized(lin.kind) || lin.row_scale);
}

VulkanTower::VulkanTower(const vk::Device& device, ThreadPool& pool, bool dense_cm, bool attn_cm,
                         bool audio_resident, bool quant_cm, bool cm2)
    : pool_(pool),
      wdev_(device.NewContext()),
      coop_(dense_cm && device.coop_matrix() && device.max_shared_bytes() >= kLinearCmShared),
      cm2_(cm2 && coop_ && device.coop_cm2() && !vk::SpirvModule("linear_cm2_d").empty()),
      quant_cm_(quant_cm),
      attn_cm_(attn_cm && device.coop_matrix() && device.subgroup_size() == 32 &&
               device.max_shared_bytes() >= kAttnCmShared),
      audio_resident_(audio_resident) {}

VulkanTower::~VulkanTower() = default;

void VulkanTower::EncodeImage(const Model& model, const VisionPatches& image,
                              std::vector<float>* soft) {
  const VisionTower* t = model.vision();
  if (!t) throw Error(ErrorCode::kUnsupported, model.vision_error());
  if (HasSrq(*t)) {
    FastEncodeImage(model, pool_, image, soft);
    return;
  }
  if (EncodeImageResident(*t, image, soft)) return;
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
  if (audio_resident_ && EncodeAudioResident(*t, audio, soft)) return;
  const std::unique_ptr<ref::VisionKernels> host = MakeFastTowerKernels(pool_, /*f32_ops=*/false);
  const DeviceKernels kernels(*this, *host);
  const std::vector<float> out = ref::AudioTowerForward(*t, audio, kernels);
  *soft =
      ref::EmbedAudio(*t, out, static_cast<int>(out.size() / t->config.output_proj_dims), kernels);
}

const VulkanTower::Weights& VulkanTower::Upload(const gemma::Linear& lin, bool as_f16) {
  as_f16 = as_f16 && lin.kind == WeightKind::kBF16;
  const WeightKey key{lin.data,      lin.row_scale, lin.rows, lin.cols, lin.row_bytes,
                      as_f16 ? WeightKind::kF16 : lin.kind};
  auto it = weights_.find(key);
  if (it != weights_.end()) return it->second;
  Weights wt;
  const size_t src_b = as_f16 ? size_t(lin.cols) * 2 : lin.row_bytes;
  wt.wstride = static_cast<uint32_t>((src_b + 3) / 4);
  const size_t row_b = size_t{wt.wstride} * 4;
  const int hw = wdev_->Reserve(Pool::kDevice, row_b * lin.rows);
  const int hs = IsQuantized(lin.kind) ? wdev_->Reserve(Pool::kDevice, 4u * lin.rows) : -1;
  wdev_->Commit("a tower's weights");
  wt.w = wdev_->Get(hw);
  std::vector<uint8_t> buf(row_b * lin.rows, 0);
  for (int r = 0; r < lin.rows; ++r) {
    const uint8_t* src = lin.data + size_t(r) * lin.row_bytes;
    if (!as_f16) {
      std::memcpy(&buf[row_b * r], src, lin.row_bytes);
      continue;
    }
    // bf16 -> f16 once here, as linear_cm.comp would convert each tile (exact in f16's normal
    // range; round to nearest even below it).
    for (int c = 0; c < lin.cols; ++c) {
      uint16_t h;
      std::memcpy(&h, src + 2 * size_t(c), 2);
      const uint16_t f = F32ToF16(Bf16ToF32(h));
      std::memcpy(&buf[row_b * r + 2 * size_t(c)], &f, 2);
    }
  }
  wdev_->Upload(wt.w, 0, buf.data(), buf.size());
  if (hs >= 0) {
    wt.s = wdev_->Get(hs);
    wdev_->Upload(wt.s, 0, lin.row_scale, 4u * lin.rows);
  }
  return weights_.emplace(key, wt).first->second;
}

void VulkanTower::UploadFloats(const std::vector<const std::vector<float>*>& vs) {
  std::vector<std::pair<const std::vector<float>*, int>> todo;
  for (const std::vector<float>* v : vs) {
    if (v->empty() || floats_.count(v->data())) continue;
    todo.emplace_back(v, wdev_->Reserve(Pool::kDevice, v->size() * 4));
  }
  if (todo.empty()) return;
  wdev_->Commit("a tower's norm weights");  // (one allocation for all of them)
  for (const auto& [v, h] : todo) {
    const BufRange r = wdev_->Get(h);
    wdev_->Upload(r, 0, v->data(), v->size() * 4);
    floats_.emplace(v->data(), r);
  }
}

void VulkanTower::RecordLinear(vk::Device& dev, VkCommandBuffer cmd, const gemma::Linear& lin,
                               const ClippedLinear* clamps, const BufRange& x, const BufRange& y,
                               int rows, const SplitBufs& split) {
  using Bindings = std::array<BufRange, vk::kBindings>;
  auto dispatch = [&](const char* shader, const std::vector<uint32_t>& spec, const Bindings& b,
                      const void* push, size_t push_bytes, uint32_t gx, uint32_t gy) {
    RecordDispatch(dev, cmd, shader, spec, b, push, push_bytes, gx, gy,
                   vk::Device::BarrierKind::kCompute);
  };
  const bool dense = lin.kind == WeightKind::kBF16 || lin.kind == WeightKind::kF16;
  const bool quant = quant_cm_ && IsQuantized(lin.kind) && lin.row_scale;
  const bool cm = coop_ && (dense || quant) && lin.cols % 8 == 0;
  // bf16 weights go to the matrix units as f16 converted at upload (the tiles' staging then only
  // moves them; measured on the H200: journal 2026-12-04-towers-qdense.md).
  const Weights& wt = Upload(lin, /*as_f16=*/cm);
  const WeightKind kind = cm && lin.kind == WeightKind::kBF16 ? WeightKind::kF16 : lin.kind;
  GemmPush pc = MakeGemmPush(lin, wt.wstride, rows);
  if (clamps) SetClamps(*clamps, &pc);
  if (cm && wt.w.offset % 16 == 0) {
    // Dense weights on matrix units: the inputs (clamped) as hi + lo f16 terms scaled per
    // token (split_f16.comp), then linear_cm.comp (f32 sums of each 64-column tile's products).
    // Quantized weights (int2 / int4 / int8 codes, a scale per row) the same way, their codes
    // decoded to f16 in the tiles and the row's scale applied to each sum (QDENSE).
    const uint32_t ld = static_cast<uint32_t>((lin.cols + 63) / 64 * 8);
    SplitQPush sp{pc.K, pc.K, 0, ld, 0, 0, 0};
    sp.lo = pc.in_min;
    sp.hi = pc.in_max;
    Bindings qb{};
    qb[2] = x;
    qb[3] = split.xh;
    qb[4] = split.xl;
    qb[9] = split.ts;
    dispatch("split_f16", {0u, 0u, pc.flags & 1u}, qb, &sp, sizeof(sp), 1,
             static_cast<uint32_t>(rows));
    LinPush cp{};
    cp.rows = pc.N;
    cp.cols = pc.K;
    cp.wstride = wt.wstride;
    cp.x_stride = pc.K;
    cp.y_stride = pc.N;
    cp.ntok = static_cast<uint32_t>(rows);
    cp.xq_ld = ld;
    cp.cm_out_lo = pc.out_min;
    cp.cm_out_hi = pc.out_max;
    Bindings b{};
    b[0] = wt.w;
    if (quant) b[1] = wt.s;
    b[3] = y;
    b[7] = split.xh;
    b[8] = split.xl;
    b[9] = split.ts;
    // (workgroup-scope matrices where the device has them: linear_cm2_d, 64 x 128 tiles as
    // linear_cm's)
    dispatch(cm2_ ? "linear_cm2_d" : "linear_cm",
             {0u, KindCode(kind), 0u, (pc.flags >> 1) & 1u, quant ? 1u : 0u}, b, &cp, sizeof(cp),
             static_cast<uint32_t>((rows + 127) / 128), static_cast<uint32_t>((lin.rows + 63) / 64));
    return;
  }
  Bindings b{};
  b[0] = x;
  b[1] = wt.w;
  b[2] = wt.s;
  b[3] = y;
  dispatch("tower_gemm", {0u, KindCode(kind)}, b, &pc, sizeof(pc),
           static_cast<uint32_t>((lin.rows + 63) / 64), static_cast<uint32_t>((rows + 63) / 64));
}

bool VulkanTower::EncodeImageResident(const VisionTower& t, const VisionPatches& img,
                                      std::vector<float>* soft) {
  const VisionConfig& c = t.config;
  const int D = c.hidden_size, hd = c.head_dim, nh = c.num_heads, nkv = c.num_kv_heads;
  const int I = c.intermediate_size, k = c.pooling_kernel_size, T = t.embed_proj.rows;
  const int p2 = 3 * c.patch_size * c.patch_size;
  // What the kernels take: every linear on the device, heads that tower_qkv and tower_attn hold,
  // the sandwich norms with their weights.
  if (hd % 4 != 0 || hd > 128 || nh <= 0 || nkv <= 0 || nh % nkv != 0) return false;
  if (!DeviceTowerLinear(t.input_proj) || !DeviceTowerLinear(t.embed_proj)) return false;
  if (c.standardize && (t.std_bias.size() != size_t(D) || t.std_scale.size() != size_t(D)))
    return false;
  if (t.input_proj.cols != p2 || t.input_proj.rows != D || t.embed_proj.cols != D) return false;
  for (const VisionLayerWeights& l : t.layers) {
    for (const ClippedLinear* cl : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
      if (!DeviceTowerLinear(cl->lin)) return false;
    for (const std::vector<float>* w :
         {&l.input_norm, &l.post_attn_norm, &l.pre_ffn_norm, &l.post_ffn_norm})
      if (w->size() != static_cast<size_t>(D)) return false;
    for (const std::vector<float>* w : {&l.q_norm, &l.k_norm})
      if (!w->empty() && w->size() != static_cast<size_t>(hd)) return false;
  }
  ref::CheckVisionInput(c, img);
  {
    std::vector<const std::vector<float>*> vs;
    for (const VisionLayerWeights& l : t.layers)
      vs.insert(vs.end(), {&l.input_norm, &l.post_attn_norm, &l.pre_ffn_norm, &l.post_ffn_norm,
                           &l.q_norm, &l.k_norm});
    if (c.standardize) vs.insert(vs.end(), {&t.std_bias, &t.std_scale});
    UploadFloats(vs);
  }
  auto floats = [&](const std::vector<float>& v) { return floats_.at(v.data()); };
  const int n = img.patches_h * img.patches_w, pw = img.patches_w, ph = img.patches_h;
  const int m = n / (k * k);
  const int slots = nh + 2 * nkv;

  // The host's part: the patches' values 2 (p - 0.5), the image's position rows (pw column rows,
  // then ph row rows) and the RoPE angles' cos / sin by position, as ref::VisionTowerForward
  // computes them.
  std::vector<float> pix(size_t(n) * p2);
  for (size_t i = 0; i < pix.size(); ++i) pix[i] = 2.0f * (img.pixels[i] - 0.5f);
  std::vector<float> pos(size_t(pw + ph) * D);
  for (int x = 0; x < pw; ++x) ref::EmbeddingRow(t.position_table, x, &pos[size_t(x) * D]);
  for (int y = 0; y < ph; ++y)
    ref::EmbeddingRow(t.position_table, c.position_embedding_size + y, &pos[size_t(pw + y) * D]);
  RopeParams rp;
  rp.theta = c.rope.theta;
  const std::vector<float> inv = ref::RopeInvFreq(rp, hd / 2);
  const int q4 = hd / 4, sides = std::max(pw, ph);
  std::vector<float> cs(size_t(sides) * q4 * 2);
  for (int p = 0; p < sides; ++p) {
    for (int i = 0; i < q4; ++i) {
      const float f = static_cast<float>(p) * inv[i];
      cs[(size_t(p) * q4 + i) * 2] = std::cos(f);
      cs[(size_t(p) * q4 + i) * 2 + 1] = std::sin(f);
    }
  }

  // Activations for n patches (kept, made again to grow; whole buffers are bound, so the
  // descriptor sets of one capacity are made once).
  if (!idev_ || n > img_cap_) {
    idev_.reset();
    std::unique_ptr<vk::Device> dev = wdev_->NewContext();
    const size_t N = n, Dn = N * D, M = N / (k * k);  // (M: pooled rows)
    const size_t sizes[] = {N * p2,      (N + 1) * D,  N * q4 * 2,   Dn,          Dn,
                            N * nh * hd, N * nkv * hd, N * nkv * hd, N * nh * hd, Dn,
                            N * I,       N * I,        M * D,        M * D,       M * T};
    int hs[20];
    for (int i = 0; i < 15; ++i)
      hs[i] = dev->Reserve(Pool::kDevice, std::max<size_t>(4, sizes[i] * 4));
    hs[15] = dev->Reserve(Pool::kHost, std::max<size_t>(4, M * T * 4));
    // The split inputs (8 f16 values per 16 bytes): the linears' rows padded to 64 columns, or
    // q's rows for attention_cm (a row per token and head, 32 padding rows); their scales.
    const size_t cols = std::max({p2, D, I}), ld = (cols + 63) / 64 * 8;
    const size_t qrows = std::min<size_t>(N, 65535 / nh / 64 * 64) * nh + 32;
    const size_t split_b = std::max(N * ld, qrows * AttnCmChunks(hd) * 8) * 16;
    const bool split = coop_ || attn_cm_;
    hs[16] = dev->Reserve(Pool::kDevice, split ? split_b : 4);
    hs[17] = dev->Reserve(Pool::kDevice, split ? split_b : 4);
    hs[18] = dev->Reserve(Pool::kDevice, split ? std::max(N, qrows) * 4 : 4);
    hs[19] = dev->Reserve(Pool::kDevice, 16);
    dev->Commit("a tower's activations");
    BufRange* r[20] = {&ib_.pix, &ib_.pos,  &ib_.cs,  &ib_.h,  &ib_.a,  &ib_.q,      &ib_.k,
                       &ib_.v,   &ib_.att,  &ib_.tmp, &ib_.g,  &ib_.u,  &ib_.pooled, &ib_.normed,
                       &ib_.out, &ib_.host, &ib_.xh,  &ib_.xl, &ib_.ts, &ib_.step};
    for (int i = 0; i < 20; ++i) *r[i] = dev->Get(hs[i]);
    icmd_ = dev->AllocCommandBuffer();
    idev_ = std::move(dev);
    img_cap_ = n;
  }
  vk::Device& dev = *idev_;
  dev.Upload(ib_.pix, 0, pix.data(), pix.size() * 4);
  dev.Upload(ib_.pos, 0, pos.data(), pos.size() * 4);
  dev.Upload(ib_.cs, 0, cs.data(), cs.size() * 4);
  const uint32_t step[4] = {0u, static_cast<uint32_t>(n), 0u, 0u};
  dev.Upload(ib_.step, 0, step, sizeof(step));
  // Attention on matrix units (attention_cm.comp, BIDIR): q split into hi + lo f16 rows scaled
  // per row, K and V split unscaled as they are staged (KNormFitsF16, the text model's rule);
  // at most 1,023 heads, so that a chunk holds 64 tokens within split_f16's grid.
  const int group = nh / nkv;
  bool attn_cm = attn_cm_ && group <= 32 && 32 % group == 0 && hd <= 512 && nh <= 1023;
  for (const VisionLayerWeights& l : t.layers)
    if (!KNormFitsF16(l.k_norm)) attn_cm = false;

  const VkCommandBuffer cmd = icmd_;
  BeginOneTime(cmd);
  using Bindings = std::array<BufRange, vk::kBindings>;
  auto dispatch = [&](const char* shader, const std::vector<uint32_t>& spec, const Bindings& b,
                      const void* push, size_t push_bytes, uint32_t gx, uint32_t gy) {
    RecordDispatch(dev, cmd, shader, spec, b, push, push_bytes, gx, gy,
                   vk::Device::BarrierKind::kCompute);
  };
  const SplitBufs split{ib_.xh, ib_.xl, ib_.ts};
  auto gemm = [&](const gemma::Linear& lin, const ClippedLinear* clamps, const BufRange& x,
                  const BufRange& y,
                  int rows) { RecordLinear(dev, cmd, lin, clamps, x, y, rows, split); };
  auto clipped = [&](const ClippedLinear& cl, const BufRange& x, const BufRange& y) {
    gemm(cl.lin, &cl, x, y, n);
  };
  // resnorm.comp: h += rmsnorm(tin) * wt (when tin), then a = rmsnorm(h) (* wa) (when a).
  auto norm = [&](const BufRange& h, const BufRange* tin, const std::vector<float>* wt,
                  const BufRange* a, const std::vector<float>* wa, int rows) {
    NormPush pc{};
    pc.n = static_cast<uint32_t>(D);
    pc.has_t = tin != nullptr;
    pc.has_a = a != nullptr;
    pc.has_wa = wa != nullptr;
    pc.scale = 1.0f;
    pc.eps = c.rms_norm_eps;
    pc.h_stride = pc.t_stride = pc.a_stride = static_cast<uint32_t>(D);
    Bindings b{};
    b[0] = h;
    if (tin) b[1] = *tin;
    if (wt) b[2] = floats(*wt);
    if (a) b[3] = *a;
    if (wa) b[4] = floats(*wa);
    dispatch("resnorm", {256u}, b, &pc, sizeof(pc), static_cast<uint32_t>(rows), 1);
  };
  auto ew = [&](uint32_t mode, const BufRange& a, const BufRange& b_in, size_t count) {
    const uint32_t pc[3] = {static_cast<uint32_t>(count), static_cast<uint32_t>(D),
                            static_cast<uint32_t>(pw)};
    Bindings b{};
    b[0] = a;
    b[1] = b_in;
    const auto [gx, gy] = Grid256(count);
    dispatch("tower_ew", {0u, mode}, b, pc, sizeof(pc), gx, gy);
  };

  gemm(t.input_proj, nullptr, ib_.pix, ib_.h, n);
  ew(0, ib_.h, ib_.pos, size_t(n) * D);
  for (const VisionLayerWeights& l : t.layers) {
    norm(ib_.h, nullptr, nullptr, &ib_.a, &l.input_norm, n);
    clipped(l.q, ib_.a, ib_.q);
    clipped(l.k, ib_.a, ib_.k);
    clipped(l.v, ib_.a, ib_.v);
    {
      struct {
        uint32_t n, nh, nkv, pw;
        float eps;
        uint32_t has_qn, has_kn;
      } pc{static_cast<uint32_t>(n),
           static_cast<uint32_t>(nh),
           static_cast<uint32_t>(nkv),
           static_cast<uint32_t>(pw),
           c.rms_norm_eps,
           !l.q_norm.empty(),
           !l.k_norm.empty()};
      Bindings b{};
      b[0] = ib_.q;
      b[1] = ib_.k;
      b[2] = ib_.v;
      if (!l.q_norm.empty()) b[3] = floats(l.q_norm);
      if (!l.k_norm.empty()) b[4] = floats(l.k_norm);
      b[5] = ib_.cs;
      // A workgroup of head rows, HD invocations each (up to 256 invocations, at least a row).
      const uint32_t rows = std::max(1, 256 / hd),
                     groups = static_cast<uint32_t>((size_t(n) * slots + rows - 1) / rows);
      const uint32_t gx = std::min<uint32_t>(groups, 65535);
      dispatch("tower_qkv", {static_cast<uint32_t>(hd) * rows, static_cast<uint32_t>(hd), rows}, b,
               &pc, sizeof(pc), gx, (groups + gx - 1) / gx);
    }
    if (attn_cm) {
      // Chunks of queries (every key each): split_f16 takes one workgroup per q row, at most
      // 65,535 rows a dispatch; chunks start at multiples of 64 tokens (aligned bindings).
      const uint32_t qld = AttnCmChunks(hd) * 8;
      const int most = 65535 / nh / 64 * 64;  // (the q slots are sized for this many tokens)
      const int chunk = attn_chunk_ > 0 ? std::min(most, (attn_chunk_ + 63) / 64 * 64) : most;
      const size_t row_b = size_t(nh) * hd * 4;  // one token's q (and output) row
      for (int c0 = 0; c0 < n; c0 += chunk) {
        const int cm = std::min(chunk, n - c0);
        const BufRange qc{ib_.q.buf, ib_.q.offset + c0 * row_b, cm * row_b};
        const BufRange oc{ib_.att.buf, ib_.att.offset + c0 * row_b, cm * row_b};
        const SplitQPush qp{static_cast<uint32_t>(hd),
                            static_cast<uint32_t>(nh * hd),
                            0u,
                            qld,
                            static_cast<uint32_t>(nh),
                            static_cast<uint32_t>(group),
                            static_cast<uint32_t>(cm)};
        Bindings qb{};
        qb[2] = qc;
        qb[3] = ib_.xh;
        qb[4] = ib_.xl;
        qb[9] = ib_.ts;
        dispatch("split_f16", {0u, 1u}, qb, &qp, sizeof(qp), 1, static_cast<uint32_t>(cm * nh));
        AttnCmPush ap{static_cast<uint32_t>(nh),
                      static_cast<uint32_t>(nkv),
                      static_cast<uint32_t>(hd),
                      static_cast<uint32_t>(n),
                      0u,
                      static_cast<uint32_t>(nh * hd),
                      qld};
        ap.m = static_cast<uint32_t>(cm);
        Bindings b{};
        b[0] = ib_.xh;
        b[1] = ib_.k;
        b[2] = ib_.v;
        b[3] = ib_.xl;
        b[4] = ib_.ts;
        b[5] = oc;
        b[11] = ib_.step;
        const uint32_t tpw = 32 / static_cast<uint32_t>(group);
        dispatch(AttnCmModule(hd), {0u, 1u, 1u, 1u}, b, &ap, sizeof(ap),
                 (static_cast<uint32_t>(cm) + tpw - 1) / tpw, static_cast<uint32_t>(nkv));
      }
    } else {
      const uint32_t pc[3] = {static_cast<uint32_t>(n), 0u, static_cast<uint32_t>(n)};
      Bindings b{};
      b[0] = ib_.q;
      b[1] = ib_.k;
      b[2] = ib_.v;
      b[3] = ib_.att;
      dispatch(
          "tower_attn",
          {0u, static_cast<uint32_t>(hd), static_cast<uint32_t>(nh), static_cast<uint32_t>(nkv)}, b,
          pc, sizeof(pc), static_cast<uint32_t>((n + 63) / 64), static_cast<uint32_t>(nh));
    }
    clipped(l.o, ib_.att, ib_.tmp);
    norm(ib_.h, &ib_.tmp, &l.post_attn_norm, &ib_.a, &l.pre_ffn_norm, n);
    clipped(l.gate, ib_.a, ib_.g);
    clipped(l.up, ib_.a, ib_.u);
    ew(1, ib_.g, ib_.u, size_t(n) * I);
    clipped(l.down, ib_.g, ib_.tmp);
    norm(ib_.h, &ib_.tmp, &l.post_ffn_norm, nullptr, nullptr, n);
  }
  {
    const float root = static_cast<float>(std::sqrt(static_cast<double>(D)));
    struct {
      uint32_t D, pw, k, m, standardize;
      float wk, root;
    } pc{static_cast<uint32_t>(D),
         static_cast<uint32_t>(pw),
         static_cast<uint32_t>(k),
         static_cast<uint32_t>(m),
         c.standardize ? 1u : 0u,
         1.0f / static_cast<float>(k * k),
         root};
    Bindings b{};
    b[0] = ib_.h;
    b[1] = ib_.pooled;
    if (c.standardize) {
      b[2] = floats(t.std_bias);
      b[3] = floats(t.std_scale);
    }
    const auto [gx, gy] = Grid256(size_t(m) * D);
    dispatch("tower_pool", {0u}, b, &pc, sizeof(pc), gx, gy);
  }
  norm(ib_.pooled, nullptr, nullptr, &ib_.normed, nullptr, m);  // embed_vision's norm
  gemm(t.embed_proj, nullptr, ib_.normed, ib_.out, m);
  SubmitAndRead(dev, cmd, ib_.out, ib_.host, size_t(m) * T, soft);
  return true;
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
  BeginOneTime(cmd_);
  RecordDispatch(*adev_, cmd_, shader, spec, b, push, push_bytes, gx, gy,
                 vk::Device::BarrierKind::kFull);
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
    const GemmPush pc = MakeGemmPush(lin, wt.wstride, m);
    Run("tower_gemm", {0u, KindCode(lin.kind)}, b, &pc, sizeof(pc),
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
