// The audio tower resident on the device (VulkanTower::EncodeAudioResident): one command buffer
// from the mel frames to the soft tokens, ref::AudioTowerForward + ref::EmbedAudio's arithmetic
// step by step (see vulkan_tower.h for the kernels; the dot products are f32 sums).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/audio_ops.h"
#include "backend/vulkan/tower_record.h"
#include "backend/vulkan/vulkan_backend_impl.h"  // NormPush
#include "backend/vulkan/vulkan_tower.h"
#include "gemma/error.h"

namespace gemma::vulkan_internal {
namespace {

constexpr int kMel = 128;     // mel bins (ref's audio_ops.cc)
constexpr int kMaxKeys = 64;  // audio_attn.comp's keys per query
constexpr int kMaxHeadDim = 256;

// The SSCP's shape for T mel frames: after each Conv2d(3x3, stride 2, pad 1).
struct SscpShape {
  int T1, F1, T2, F2;
};
SscpShape Sscp(int T) {
  const int T1 = (T - 1) / 2 + 1, F1 = (kMel - 1) / 2 + 1;
  return {T1, F1, (T1 - 1) / 2 + 1, (F1 - 1) / 2 + 1};
}

// The linears of a tower (each once; relative_k counted with them).
std::vector<const gemma::Linear*> AudioLinears(const AudioTower& t) {
  std::vector<const gemma::Linear*> v = {&t.input_proj, &t.output_proj, &t.embed_proj};
  for (const AudioLayerWeights& l : t.layers) {
    v.push_back(&l.relative_k);
    for (const ClippedLinear* c : {&l.ff1.up, &l.ff1.down, &l.ff2.up, &l.ff2.down, &l.q, &l.k, &l.v,
                                   &l.post, &l.lconv_start, &l.lconv_end})
      v.push_back(&c->lin);
  }
  return v;
}

// What the resident path's kernels take (shapes they index by; the loader checks the rest).
bool ResidentAudioTower(const AudioTower& t) {
  const AudioConfig& c = t.config;
  const int D = c.hidden_size, nh = c.num_heads, C0 = c.sscp_channels0, C1 = c.sscp_channels1;
  if (D <= 0 || nh <= 0 || D % nh != 0 || D / nh > kMaxHeadDim) return false;
  if (c.context_left < 2 || c.context_left - 1 > kMaxKeys || c.conv_kernel_size <= 0) return false;
  if (C0 <= 0 || C1 <= 0 || t.conv0.size() != size_t(C0) * 9 ||
      t.conv1.size() != size_t(C1) * C0 * 9 || t.norm0.size() != size_t(C0) ||
      t.norm1.size() != size_t(C1))
    return false;
  const SscpShape s = Sscp(1);
  if (t.input_proj.cols != s.F2 * C1 || t.input_proj.rows != D || t.output_proj.cols != D ||
      t.output_bias.size() != size_t(t.output_proj.rows) || t.embed_proj.cols != t.output_proj.rows)
    return false;
  for (const gemma::Linear* l : AudioLinears(t))
    if (!DeviceTowerLinear(*l)) return false;
  for (const AudioLayerWeights& l : t.layers) {
    for (const std::vector<float>* w :
         {&l.ff1.pre_norm, &l.ff1.post_norm, &l.ff2.pre_norm, &l.ff2.post_norm, &l.norm_pre_attn,
          &l.norm_post_attn, &l.norm_out, &l.lconv_pre_norm, &l.lconv_conv_norm})
      if (w->size() != size_t(D)) return false;
    if (l.per_dim_scale.size() != size_t(D / nh) ||
        l.dwconv.size() != size_t(D) * c.conv_kernel_size || l.relative_k.cols != D ||
        l.relative_k.rows != D || l.lconv_start.lin.rows != 2 * D)
      return false;
    for (const ClippedLinear* cl : {&l.ff1.up, &l.ff2.up})
      if (cl->lin.cols != D) return false;
    for (const ClippedLinear* cl : {&l.ff1.down, &l.ff2.down})
      if (cl->lin.rows != D || cl->lin.cols != l.ff1.up.lin.rows) return false;
    for (const ClippedLinear* cl : {&l.q, &l.k, &l.v, &l.post, &l.lconv_end})
      if (cl->lin.rows != D || cl->lin.cols != D) return false;
    // (the reference's feed-forward hidden is 4 D wide)
    if (l.ff1.up.lin.rows != 4 * D || l.ff2.up.lin.rows != 4 * D || l.lconv_start.lin.cols != D)
      return false;
  }
  return true;
}

}  // namespace

bool VulkanTower::EncodeAudioResident(const AudioTower& t, const AudioMel& mel,
                                      std::vector<float>* soft) {
  if (!ResidentAudioTower(t)) return false;
  const AudioConfig& c = t.config;
  const int T = mel.frames, D = c.hidden_size, nh = c.num_heads, hd = D / nh;
  const int C0 = c.sscp_channels0, C1 = c.sscp_channels1, P = c.context_left;
  const int I = t.layers.empty() ? 0 : t.layers[0].ff1.up.lin.rows;
  const int O = t.output_proj.rows, E = t.embed_proj.rows;
  // The input's checks and the valid frames, as ref::AudioTowerForward.
  if (T <= 0) throw Error(ErrorCode::kInvalidArgument, "audio input: no frames");
  const SscpShape s = Sscp(T);
  int n = 0;  // valid frames past the SSCP: m2[i] = m0[4 i]
  while (n < s.T2 && mel.mask[4 * n]) ++n;
  for (int i = n; i < s.T2; ++i) {
    if (mel.mask[4 * i])
      throw Error(ErrorCode::kInvalidArgument, "audio input: the valid frames are not a prefix");
  }
  if (n == 0) {
    soft->clear();
    return true;
  }
  if (s.T2 > 65535) return false;         // (audio_attn's grid: a query per workgroup row)
  const int T1n = std::min(s.T1, 2 * n);  // the conv0 frames the valid conv1 frames read

  {
    std::vector<const std::vector<float>*> vs = {&t.norm0, &t.norm1, &t.output_bias};
    for (const AudioLayerWeights& l : t.layers) {
      vs.insert(vs.end(), {&l.ff1.pre_norm, &l.ff1.post_norm, &l.ff2.pre_norm, &l.ff2.post_norm,
                           &l.norm_pre_attn, &l.norm_post_attn, &l.norm_out, &l.lconv_pre_norm,
                           &l.lconv_conv_norm, &l.dwconv});
      auto it = audio_dim_scale_.find(l.per_dim_scale.data());
      if (it == audio_dim_scale_.end())
        it = audio_dim_scale_.emplace(l.per_dim_scale.data(), ref::AudioDimScale(l)).first;
      vs.push_back(&it->second);
    }
    UploadFloats(vs);
  }
  auto floats = [&](const std::vector<float>& v) { return floats_.at(v.data()); };

  // Activations for T frames (kept, made again to grow; whole buffers are bound, so the
  // descriptor sets of one capacity are made once).
  {
    const int N = s.T2;
    size_t cols = 0;
    for (const gemma::Linear* l : AudioLinears(t)) cols = std::max<size_t>(cols, l->cols);
    const size_t ld = (cols + 63) / 64 * 8, srows = std::max(N, P);
    const size_t ND = size_t(N) * D;
    const size_t sizes[] = {size_t(T) * kMel,
                            size_t(T),
                            size_t(s.T1) * s.F1 * C0,
                            size_t(N) * s.F2 * C1,
                            ND,
                            ND,
                            ND,
                            ND,
                            ND,
                            ND,
                            ND,
                            size_t(P) * D,
                            size_t(P) * D,
                            size_t(N) * std::max(I, 2 * D),
                            ND,
                            size_t(N) * O,
                            size_t(N) * O,
                            size_t(N) * E,
                            size_t(N) * E,
                            coop_ ? srows * ld * 4 : 1,
                            coop_ ? srows * ld * 4 : 1,
                            coop_ ? srows : 1};
    constexpr int kBufs = 22;
    static_assert(sizeof(sizes) / sizeof(sizes[0]) == kBufs);
    BufRange* r[kBufs] = {&ab_.mel,  &ab_.mask, &ab_.c0,  &ab_.c1,  &ab_.h,      &ab_.h2,
                          &ab_.a,    &ab_.q,    &ab_.k,   &ab_.v,   &ab_.att,    &ab_.pe,
                          &ab_.r,    &ab_.u,    &ab_.tmp, &ab_.out, &ab_.normed, &ab_.soft,
                          &ab_.host, &ab_.xh,   &ab_.xl,  &ab_.ts};
    bool fits = audev_ != nullptr;
    for (int i = 0; i < kBufs && fits; ++i) fits = r[i]->size >= std::max<size_t>(4, sizes[i] * 4);
    if (!fits) {
      // (each at least its old size: towers and clip lengths may alternate)
      size_t bytes[kBufs];
      for (int i = 0; i < kBufs; ++i)
        bytes[i] = std::max({size_t{4}, sizes[i] * 4, audev_ ? size_t{r[i]->size} : size_t{0}});
      audev_.reset();  // (a failed allocation leaves none)
      std::unique_ptr<vk::Device> dev = wdev_->NewContext();
      int hs[kBufs];
      for (int i = 0; i < kBufs; ++i)
        hs[i] = dev->Reserve(r[i] == &ab_.host ? vk::Pool::kHost : vk::Pool::kDevice, bytes[i]);
      dev->Commit("an audio tower's activations");
      for (int i = 0; i < kBufs; ++i) *r[i] = dev->Get(hs[i]);
      acmd_ = dev->AllocCommandBuffer();
      audev_ = std::move(dev);
    }
  }
  vk::Device& dev = *audev_;
  dev.Upload(ab_.mel, 0, mel.mel, size_t(T) * kMel * 4);
  {
    std::vector<uint32_t> m(T);
    for (int i = 0; i < T; ++i) m[i] = mel.mask[i] ? 1u : 0u;
    dev.Upload(ab_.mask, 0, m.data(), m.size() * 4);
    const std::vector<float> pe = ref::AudioRelativePositions(c);
    dev.Upload(ab_.pe, 0, pe.data(), pe.size() * 4);
  }

  const VkCommandBuffer cmd = acmd_;
  BeginOneTime(cmd);
  using Bindings = std::array<BufRange, vk::kBindings>;
  auto dispatch = [&](const char* shader, const std::vector<uint32_t>& spec, const Bindings& b,
                      const void* push, size_t push_bytes, uint32_t gx, uint32_t gy) {
    RecordDispatch(dev, cmd, shader, spec, b, push, push_bytes, gx, gy,
                   vk::Device::BarrierKind::kCompute);
  };
  const SplitBufs split{ab_.xh, ab_.xl, ab_.ts};
  auto gemm = [&](const gemma::Linear& lin, const BufRange& x, const BufRange& y, int rows) {
    RecordLinear(dev, cmd, lin, nullptr, x, y, rows, split);
  };
  auto clipped = [&](const ClippedLinear& cl, const BufRange& x, const BufRange& y) {
    RecordLinear(dev, cmd, cl.lin, &cl, x, y, n, split);
  };
  // resnorm.comp on n rows of `width`: h += [t_scale] rmsnorm(clamp(t)) * wt (t_mode 1) or h += t
  // (t_mode 2), then a = rmsnorm([clamp](h)) [* wa] [SiLU] (when a).
  constexpr uint32_t kClampT = 1, kClampH = 2, kSilu = 4, kTScale = 8;
  auto norm = [&](const BufRange& h, const BufRange* tin, uint32_t t_mode,
                  const std::vector<float>* wt, const BufRange* a, const std::vector<float>* wa,
                  uint32_t flags, int width = 0) {
    NormPush pc{};
    pc.n = static_cast<uint32_t>(width > 0 ? width : D);
    pc.has_t = tin ? t_mode : 0u;
    pc.has_a = a != nullptr;
    pc.has_wa = wa != nullptr;
    pc.scale = 1.0f;
    pc.eps = c.rms_norm_eps;
    pc.h_stride = pc.t_stride = pc.a_stride = pc.n;
    pc.flags = flags;
    pc.clip = c.gradient_clipping;
    pc.t_scale = c.residual_weight;
    Bindings b{};
    b[0] = h;
    if (tin) b[1] = *tin;
    if (wt) b[2] = floats(*wt);
    if (a) b[3] = *a;
    if (wa) b[4] = floats(*wa);
    dispatch("resnorm", {256u, 0u}, b, &pc, sizeof(pc), static_cast<uint32_t>(n), 1);
  };
  auto ew = [&](uint32_t mode, const BufRange& a, const BufRange* b_in, const BufRange* c_in,
                size_t count, int width, int k) {
    const uint32_t pc[3] = {static_cast<uint32_t>(count), static_cast<uint32_t>(width),
                            static_cast<uint32_t>(k)};
    Bindings b{};
    b[0] = a;
    if (b_in) b[1] = *b_in;
    if (c_in) b[2] = *c_in;
    const auto [gx, gy] = Grid256(count);
    dispatch("tower_ew", {0u, mode}, b, pc, sizeof(pc), gx, gy);
  };
  // An SSCP block: Conv2d(3x3, stride 2, pad 1) over the channels-last [Ti][Fi][cin] input x
  // (frames masked by m0[ti mstride]) into y [To][Fo][cout], then LayerNorm over the channels
  // and ReLU in place.
  auto conv = [&](const std::vector<float>& w, const std::vector<float>& ln, int cin, int cout,
                  const BufRange& x, int Ti, int Fi, uint32_t mstride, const BufRange& y, int To,
                  int Fo) {
    gemma::Linear lin;
    lin.kind = WeightKind::kF32;
    lin.rows = cout;
    lin.cols = cin * 9;
    lin.data = reinterpret_cast<const uint8_t*>(w.data());
    lin.row_bytes = size_t(lin.cols) * 4;
    const Weights& wt = Upload(lin);
    const int rows = To * Fo;
    GemmPush pc = MakeGemmPush(lin, wt.wstride, rows);
    pc.cT = static_cast<uint32_t>(Ti);
    pc.cF = static_cast<uint32_t>(Fi);
    pc.cin = static_cast<uint32_t>(cin);
    pc.cF2 = static_cast<uint32_t>(Fo);
    pc.mstride = mstride;
    Bindings b{};
    b[0] = x;
    b[1] = wt.w;
    b[3] = y;
    b[4] = ab_.mask;
    dispatch("tower_gemm", {0u, 0u, 1u}, b, &pc, sizeof(pc),
             static_cast<uint32_t>((cout + 63) / 64), static_cast<uint32_t>((rows + 63) / 64));
    NormPush np{};
    np.n = static_cast<uint32_t>(cout);
    np.eps = c.rms_norm_eps;
    np.h_stride = np.n;
    Bindings nb{};
    nb[0] = y;
    nb[4] = floats(ln);
    dispatch("resnorm", {64u, 1u}, nb, &np, sizeof(np), static_cast<uint32_t>(Fo),
             static_cast<uint32_t>(To));
  };

  // SSCP, then input_proj_linear on the valid frames ([n][F2][C1] is its input row by row).
  conv(t.conv0, t.norm0, 1, C0, ab_.mel, T, kMel, 1, ab_.c0, T1n, s.F1);
  conv(t.conv1, t.norm1, C0, C1, ab_.c0, T1n, s.F1, 2, ab_.c1, n, s.F2);
  gemm(t.input_proj, ab_.c1, ab_.h, n);
  BufRange h = ab_.h, h2 = ab_.h2;
  if (!t.layers.empty()) norm(h, nullptr, 0, nullptr, &ab_.a, &t.layers[0].ff1.pre_norm, kClampH);
  const float q_scale = static_cast<float>(std::pow(static_cast<double>(hd), -0.5) / std::log(2.0));
  const float k_scale = static_cast<float>(std::log(1.0 + std::exp(1.0)) / std::log(2.0));
  for (size_t li = 0; li < t.layers.size(); ++li) {
    const AudioLayerWeights& l = t.layers[li];
    // FF1 (its input norm recorded before), then the attention's input norm.
    clipped(l.ff1.up, ab_.a, ab_.u);
    ew(2, ab_.u, nullptr, nullptr, size_t(n) * I, 0, 0);
    clipped(l.ff1.down, ab_.u, ab_.tmp);
    norm(h, &ab_.tmp, 1, &l.ff1.post_norm, &ab_.a, &l.norm_pre_attn, kClampT | kTScale | kClampH);
    // Attention.
    clipped(l.q, ab_.a, ab_.q);
    clipped(l.k, ab_.a, ab_.k);
    clipped(l.v, ab_.a, ab_.v);
    gemm(l.relative_k, ab_.pe, ab_.r, P);
    {
      struct {
        uint32_t D, hd, W;
        float q_scale, k_scale, cap;
      } pc{static_cast<uint32_t>(D),
           static_cast<uint32_t>(hd),
           static_cast<uint32_t>(c.context_left - 1),
           q_scale,
           k_scale,
           c.logit_cap};
      Bindings b{};
      b[0] = ab_.q;
      b[1] = ab_.k;
      b[2] = ab_.v;
      b[3] = ab_.att;
      b[4] = ab_.r;
      b[5] = floats(audio_dim_scale_.at(l.per_dim_scale.data()));
      dispatch("audio_attn", {}, b, &pc, sizeof(pc), static_cast<uint32_t>(nh),
               static_cast<uint32_t>(n));
    }
    clipped(l.post, ab_.att, ab_.tmp);
    norm(h, &ab_.tmp, 1, &l.norm_post_attn, &ab_.a, &l.lconv_pre_norm, kClampT);
    // Light conv: GLU and the causal depthwise conv into tmp, its norm and SiLU into a.
    clipped(l.lconv_start, ab_.a, ab_.u);
    {
      const BufRange dw = floats(l.dwconv);
      ew(4, ab_.tmp, &ab_.u, &dw, size_t(n) * D, D, c.conv_kernel_size);
    }
    norm(ab_.tmp, nullptr, 0, nullptr, &ab_.a, &l.lconv_conv_norm, kClampH | kSilu);
    clipped(l.lconv_end, ab_.a, ab_.tmp);
    norm(h, &ab_.tmp, 2, nullptr, &ab_.a, &l.ff2.pre_norm, kClampH);
    // FF2, then the output norm into h2, which becomes h.
    clipped(l.ff2.up, ab_.a, ab_.u);
    ew(2, ab_.u, nullptr, nullptr, size_t(n) * I, 0, 0);
    clipped(l.ff2.down, ab_.u, ab_.tmp);
    norm(h, &ab_.tmp, 1, &l.ff2.post_norm, &h2, &l.norm_out, kClampT | kTScale | kClampH);
    std::swap(h, h2);
    if (li + 1 < t.layers.size())
      norm(h, nullptr, 0, nullptr, &ab_.a, &t.layers[li + 1].ff1.pre_norm, kClampH);
  }
  // output_proj with its bias, embed_audio (RMSNorm without weight, projection).
  gemm(t.output_proj, h, ab_.out, n);
  {
    const BufRange bias = floats(t.output_bias);
    ew(3, ab_.out, &bias, nullptr, size_t(n) * O, O, 0);
  }
  norm(ab_.out, nullptr, 0, nullptr, &ab_.normed, nullptr, 0, O);
  gemm(t.embed_proj, ab_.normed, ab_.soft, n);
  SubmitAndRead(dev, cmd, ab_.soft, ab_.host, size_t(n) * E, soft);
  return true;
}

}  // namespace gemma::vulkan_internal
