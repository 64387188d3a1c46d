#include "backend/webgpu/webgpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backend/cache_window.h"
#include "backend/cpu/fast/cpu_fast_backend.h"
#include "backend/cpu/reference_ops.h"
#include "backend/webgpu/wgsl_sources.h"
#include "core/thread_pool.h"
#include "gemma/error.h"
#include "model/model.h"

// webgpu_library.js
extern "C" {
int gw_init();
int gw_kernels();
int gw_packed_dot();
int gw_subgroups();
int gw_matvec_workgroups();
int gw_generation();
int gw_failed();
void gw_error(char* out, int len);
void gw_info(char* out, int len);
double gw_max_buffer();
int gw_buffer(size_t bytes);
void gw_release(int h);
void gw_write(int h, size_t offset, const void* src, size_t bytes);
int gw_pipeline(const char* label, const char* code);
void gw_pipeline_error(char* out, int len);
void gw_dispatch(int pipeline, const int* bufs, int nbufs, const uint32_t* params, int nparams,
                 int gx, int gy, int gz);
int gw_submit();
int gw_read(int h, size_t offset, void* dst, size_t bytes);
void gw_destroy_device();
}

namespace gemma {
namespace {

std::string& AdapterName() {
  static std::string name;
  return name;
}

std::string DeviceError() {
  char buf[512] = {0};
  gw_error(buf, sizeof buf);
  return buf[0] ? std::string(buf) : std::string("WebGPU device failure");
}

[[noreturn]] void ThrowDevice(const std::string& what) {
  throw Error(ErrorCode::kDevice, what + ": " + DeviceError());
}

// Parameters of one dispatch: u32 words, floats by their bits.
class Params {
 public:
  Params& u(uint32_t v) {
    w_[n_++] = v;
    return *this;
  }
  Params& f(float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    return u(b);
  }
  void set(int i, uint32_t v) { w_[i] = v; }
  const uint32_t* data() const { return w_; }
  int size() const { return n_; }

 private:
  uint32_t w_[64] = {};  // (a 256-byte parameter slot)
  int n_ = 0;
};

uint32_t Groups(int n, int per) { return static_cast<uint32_t>((n + per - 1) / per); }

int KindCode(WeightKind k) {
  switch (k) {
    case WeightKind::kF32: return 0;
    case WeightKind::kBF16: return 1;
    case WeightKind::kF16: return 2;
    case WeightKind::kQ2: return 3;
    case WeightKind::kQ4: return 4;
    case WeightKind::kQ8: return 5;
  }
  return 0;
}

// linear_mv_wg.wgsl's epilogue: mode 1 aux = gelu(aux) * y, 2 y = gelu(y) * aux (aux rows at
// aux_off, stride aux_stride); 0 none. (Mode 3, gate and up in one dispatch: RecordGateUp; with
// `pack`, its output also goes to aux as that linear's packed input codes.)
// A context's scratch buffers for its linears: the quantized inputs (quant.wgsl) and
// linear_tile_wg's per-split sums (part_words i32).
struct LinearScratch {
  int xq = 0;
  int part = 0;
  size_t part_words = 0;
};

struct LinearEpilogue {
  uint32_t mode = 0;
  int aux = 0;
  uint32_t aux_off = 0, aux_stride = 0;
  const Linear* pack = nullptr;
};

// A residual norm in a decode linear's prologue (linear_mv_wg.wgsl's pro): the residual rows at
// r_in of the residual stream become r = (r + norm(t) x wa) x scale (t: the previous linear's
// output rows in the stream's scratch region), and the linear's input is r (wb null) or norm(r) x
// *wb. With `write`, the dispatch also stores r at r_out (the stream's other residual region); with
// `store_input`, the input at z (the stream's fourth region: k and v read it after q).
struct ResidualNorm {
  uint32_t r_in = 0, r_out = 0, t = 0, z = 0;
  bool store_input = false;
  const std::vector<float>* wa = nullptr;
  float scale = 1.0f;
  const std::vector<float>* wb = nullptr;
  bool write = false;
  float eps = 0.0f;
};

// A weight matrix on the device: rows padded to whole u32 words, the row scales beside.
struct GpuLinear {
  const Linear* lin = nullptr;
  int w = 0, scale = 0;
  uint32_t row_words = 0;
};

enum Kernel {
  kLinear,
  kQuant,
  kRmsNorm,
  kHeadNorm,
  kAttention,
  kGeluMul,
  kPleCombine,
  kSoftcap,
  kArgmax,
  kAttentionMerge,
  kLinearTile,
  kLinearMv,
  kLinearDenseTile,
  kAttentionPrompt,
  kNumKernels
};

// SRQ linears over at least this many tokens (prompt chunks) take linear_tile_wg.wgsl (64 rows x
// 64 tokens per workgroup, dot4I8Packed) where the adapter's WGSL has
// packed_4x8_integer_dot_product; fewer tokens take linear_wg.wgsl.
constexpr int kTileMinTokens = 8;
// linear_tile_wg splits a linear over its columns when its tiles are fewer than kTileWorkgroups
// (the small projections, k, v and the per-layer gate, have 4 row tiles; the down projection's
// 96 steps of 64 columns run on 24): into as many splits as bring the workgroups to about that
// many, each of at least kTileMinSteps steps of 64 columns, then a second dispatch adds them.
constexpr uint32_t kTileWorkgroups = 256;
constexpr uint32_t kTileMinSteps = 4;

struct TileSplit {
  uint32_t splits = 1, kper = 0;
};

// The split of an n-token linear_tile_wg dispatch whose per-split sums fit part_words i32.
TileSplit PlanTileSplit(const Linear& lin, int n, size_t part_words) {
  TileSplit t;
  const uint32_t tiles = Groups(lin.rows, 64) * Groups(n, 64);
  const uint32_t steps = Groups(lin.cols, 64);
  uint32_t splits = std::min((kTileWorkgroups + tiles - 1) / tiles, steps / kTileMinSteps);
  const size_t per = static_cast<size_t>(n) * static_cast<size_t>(lin.rows);
  while (splits > 1 && splits * per > part_words) --splits;
  if (splits <= 1) return t;
  t.kper = (steps + splits - 1) / splits;
  t.splits = (steps + t.kper - 1) / t.kper;  // (no empty split)
  return t;
}
// Other linears (dense rows, quantized rows without an SRQ input: the QAT checkpoint's bf16
// per-layer model projection) over at least this many tokens take linear_dense_tile_wg.wgsl (64
// rows x 64 tokens per workgroup, f32 products in blocks of 8, float-float sums); fewer take
// linear_wg.wgsl. Its sums are as exact but not bit for bit linear_wg's, so verification steps
// (at most DraftPolicy::kMaxDraft + 1 = 9 tokens) stay below it: their outputs keep the one-token
// steps' bits.
constexpr int kDenseTileMinTokens = 16;
// SRQ linears over at most this many tokens (decode steps, short verification chunks) take
// linear_mv_wg.wgsl on the same adapters: the input quantized in each workgroup's prologue (no
// quant.wgsl dispatch), packed int8 products; its workgroup memory holds kMvInputWords packed
// input words (tokens x the row's words x 4 / 2 / 1 for int2 / int4 / int8).
constexpr int kMvMaxTokens = 4;
constexpr uint32_t kMvInputWords = 3072;
// linear_mv_wg's grid where the library's webgpu.matvecWorkgroups does not set it: each workgroup
// loops over row blocks, quantizing the input once (0: a workgroup per block). 1,024 measured on an
// H100 (2026-12-06, alternated in one process): decode 86.4 / 90.8 tok/s against 84.1 / 83.9
// uncapped, 18.1 against 18.6 us of GPU time per dispatch; 256: slower (bench/journal/
// 2026-12-06-webgpu-dispatch.md).
constexpr uint32_t kMvWorkgroupsDefault = 1024;

// An SRQ linear: integer weights and an input scale (its input quantized before the products).
bool SrqInput(const Linear& lin) { return IsQuantized(lin.kind) && lin.in_scale > 0; }

// Input words per weight word in linear_mv_wg.wgsl's packed layout.
uint32_t MvGroup(WeightKind k) { return k == WeightKind::kQ2 ? 4 : k == WeightKind::kQ4 ? 2 : 1; }

// The attention of a step with few query rows (decode, short chunks) split over the keys
// (attention_wg.wgsl's phase 1, then attention_merge_wg.wgsl), workgroup kernels only: at
// most kSplitSlots (row, split) pairs, so a step's partial sums fit one scratch buffer; splits of
// at least kSplitMinKeys keys.
constexpr int kSplitSlots = 256;
// The greedy argmax over rows longer than kArgmaxSlice (argmax_wg.wgsl's stages 0 and 1): slices
// of about kArgmaxSlice logits on at most kArgmaxParts workgroups per row, then their best.
constexpr int kArgmaxSlice = 1024;
constexpr uint32_t kArgmaxParts = 256;
constexpr int kSplitMinKeys = 8;
// A chunk of at least this many tokens submits what it has recorded before the host prepares the
// per-layer rows and the RoPE tables (RunChunk), so the GPU works meanwhile.
constexpr int kOverlapTokens = 64;
// A step of at least this many tokens whose attention runs in one pass takes attention_prompt_wg
// (up to 8 query heads of a key/value head per workgroup, each key and value row read once for
// them) where head_dim is a multiple of 8; the query rows are normalized first (head_norm_wg).
constexpr int kPromptAttentionMinTokens = 8;

struct AttentionSplit {
  int splits = 1, chunk = 0;
};

// How to split `rows` query rows (tokens x heads) over at most `keys` keys each: one split (the
// single-dispatch kernel) when the rows alone fill enough workgroups or the keys are few.
AttentionSplit PlanAttentionSplit(int rows, int keys) {
  AttentionSplit a;
  const int most =
      std::min((keys + kSplitMinKeys - 1) / kSplitMinKeys, kSplitSlots / std::max(rows, 1));
  if (most < 2) return a;
  a.chunk = (keys + most - 1) / most;
  a.splits = (keys + a.chunk - 1) / a.chunk;
  return a;
}

class WebGpuModel;

class WebGpuContext : public Backend {
 public:
  WebGpuContext(std::shared_ptr<WebGpuModel> owner, const BackendOptions& options);
  ~WebGpuContext() override { Release(); }

  std::string name() const override { return "webgpu"; }
  BackendCapabilities capabilities() const override {
    return {.logits = true, .select = true, .max_chunk = chunk_, .soft_tokens = true};
  }
  int cached() const override { return window_.cached(); }
  int capacity() const override { return capacity_; }
  void Reset() override {
    window_.Reset();
    history_.clear();
    soft_rows_.clear();
  }
  bool Truncate(int n) override {
    const bool exact = window_.Truncate(n);
    history_.resize(window_.cached());
    soft_rows_.erase(soft_rows_.lower_bound(window_.cached()), soft_rows_.end());
    return exact;
  }
  size_t resident_bytes() const override { return bytes_; }
  void Forward(const ForwardRequest& req, ForwardResult* out) override;

 private:
  struct Slot {
    int width = 0, ring = 0;
    int k = 0, v = 0;
  };
  void Allocate();
  void Release();
  int Buffer(size_t bytes);
  // Brings the caches back after a device rebuild: the committed tokens evaluated again.
  void Replay();
  void RunChunks(const ForwardRequest& req, ForwardResult* out);
  void RunChunk(std::span<const int32_t> tokens, std::span<const float* const> soft, int first_out,
                const ForwardRequest& req, ForwardResult* out);
  void Emit(const float* logits, const ForwardRequest& req, ForwardResult* out) const;
  // A token's per-layer embedding as tok_ holds it: the stored row in u32 words, then (quantized
  // kinds) its scale blocks.
  size_t PleRowWords() const { return (model_.ple_embed().row_bytes + 3) / 4; }
  size_t PleStride() const {
    const Embedding& e = model_.ple_embed();
    return PleRowWords() + (IsQuantized(e.kind) ? static_cast<size_t>(e.scale_blocks) : 0);
  }

  std::shared_ptr<WebGpuModel> owner_;
  const Model& model_;
  const TextConfig& cfg_;
  int capacity_ = 0, chunk_ = 1, ring_ = 0, head_rows_ = 1;
  CacheWindow window_;
  std::vector<Slot> slots_;
  int generation_ = -1;
  size_t bytes_ = 0;
  std::vector<int> buffers_;
  // The residual stream: regions 0 and 1 the residual (double-buffered for the decode linears'
  // prologue norms, whose workgroups all read one while they write the other), region 2 the
  // scratch the o, down and per-layer projections write (the norms' t), region 3 q's normed input
  // for k and v, [chunk] rows of the hidden size each.
  int stream_ = 0;
  // The gate/up pair's output as the down projection's packed input codes (HandsOff).
  int gq_ = 0;
  // Scratch, [chunk] rows each.
  int a_ = 0, qraw_ = 0, q_ = 0, kraw_ = 0, vraw_ = 0, attn_ = 0, g_ = 0, u_ = 0, gp_ = 0, ple_ = 0,
      tok_ = 0, xq_ = 0, cs_s_ = 0, cs_f_ = 0, hn_ = 0, logits_ = 0, ids_ = 0, part_ = 0;
  LinearScratch scratch_;  // xq_ and part_
  // The split attention's per-(row, split) maxima and float-float partial sums.
  int split_max_ = 0, split_part_ = 0;
  // argmax_wg's stage 0 outputs: each (row, slice)'s best value and id.
  int amax_v_ = 0, amax_i_ = 0;
  // rmsnorm's second output when a dispatch has none (a writable binding of its own).
  int sink_ = 0;
  // What the caches hold, to evaluate again after a device loss.
  std::vector<int32_t> history_;
  std::map<int, std::vector<float>> soft_rows_;
  std::vector<float> inv_sliding_, inv_full_;
};

class WebGpuModel : public BackendModel {
 public:
  explicit WebGpuModel(const Model& model) : model_(model) { Build(); }
  ~WebGpuModel() override { ReleaseWeights(); }

  std::string name() const override { return "webgpu"; }
  std::string device() const override { return AdapterName(); }
  std::unique_ptr<Backend> NewContext(const BackendOptions& options) override {
    EnsureDevice();
    return std::make_unique<WebGpuContext>(
        std::static_pointer_cast<WebGpuModel>(shared_from_this()), options);
  }
  size_t shared_bytes() const override { return weight_bytes_; }
  size_t device_memory_bytes() const override { return weight_bytes_ + context_bytes_; }
  // Contexts report the device memory they hold (device_memory_bytes counts them too).
  void AddContextBytes(ptrdiff_t delta) { context_bytes_ += delta; }
  bool InjectDeviceFault(DeviceFault f) override {
    if (f != DeviceFault::kDeviceLoss) return false;
    gw_destroy_device();
    return true;
  }
  // The vision and audio towers run on the module's CPU with the fast backend's kernels (the same
  // soft tokens as the cpu backend's): no WGSL towers yet. Error kUnsupported without the tower.
  void EncodeImage(const VisionPatches& image, std::vector<float>* soft_tokens) override {
    FastEncodeImage(model_, tower_pool_, image, soft_tokens);
  }
  void EncodeAudio(const AudioMel& audio, std::vector<float>* soft_tokens) override {
    FastEncodeAudio(model_, tower_pool_, audio, soft_tokens);
  }

  const Model& model() const { return model_; }
  int generation() const { return generation_; }
  // A lost device is created again (with the weights) before the next request runs.
  void EnsureDevice() {
    if (gw_failed() || gw_generation() != generation_) Build();
  }
  const GpuLinear& Lin(const Linear& l) const { return linears_.at(&l); }
  int Vec(const std::vector<float>& v) const { return v.empty() ? 0 : vectors_.at(&v); }
  // The decode linears' residual norms in their prologue: linear_mv_wg takes n tokens of lin
  // (RecordLinear then takes a ResidualNorm), and of gate and up paired (RecordGateUp).
  bool TakesNorm(const Linear& lin, int n) const { return SrqInput(lin) && MvFits(lin, n, 1); }
  bool TakesNorm(const Linear& gate, const Linear& up, int n) const {
    return Pairs(gate, up, n) || (TakesNorm(gate, n) && TakesNorm(up, n));
  }
  // The gate/up pair on n tokens hands its output to `down` as packed input codes
  // (linear_mv_wg's pack): down takes n tokens in linear_mv_wg, and the pair's rows per
  // workgroup are whole words of down's input (its kind's column groups of 16, 8 or 4).
  bool HandsOff(const Linear& gate, const Linear& up, const Linear& down, int n) const {
    if (!Pairs(gate, up, n) || !TakesNorm(down, n) || down.cols != gate.rows) return false;
    const uint32_t group = down.kind == WeightKind::kQ2 ? 16 : down.kind == WeightKind::kQ4 ? 8 : 4;
    return (256 / MvLanes(Lin(gate))) % group == 0;
  }
  // linear_mv_wg's input words per token for lin (the packed codes' row length).
  uint32_t InputWords(const Linear& lin) const { return Lin(lin).row_words * MvGroup(lin.kind); }
  int pipeline(Kernel k) const { return pipelines_[k]; }
  // Whether kernel k can be recorded, compiling it first where it was left for its first use
  // (the prompt-chunk kernels: a model that only decodes, or whose chunks stay short, never
  // compiles them, and loading skips their compilation).
  bool Ready(Kernel k) const {
    if (pipelines_[k] == kNotCompiled) Compile(k, nullptr);
    return pipelines_[k] >= 0;
  }
  // The i32 words linear_tile_wg's split sums take for chunks of up to max_n tokens (the most
  // over the SRQ linears and the chunk sizes: split counts grow as token tiles go).
  size_t TilePartWords(int max_n) const {
    size_t most = 0;
    if (pipelines_[kLinearTile] == kUnavailable) return 0;
    for (int n = std::min(max_n, 64);; n = std::min(max_n, n + 64)) {
      for (const auto& [lin, g] : linears_) {
        if (!SrqInput(*lin) || n < kTileMinTokens) continue;
        const TileSplit t = PlanTileSplit(*lin, n, SIZE_MAX);
        if (t.splits > 1) most = std::max(most, static_cast<size_t>(t.splits) * n * lin->rows);
      }
      if (n == max_n) break;
    }
    return most;
  }
  // The kernel family (docs/webgpu.md, "Kernels"): a workgroup per row, head or block (GPUs), or
  // one invocation per row (CPU adapters such as SwiftShader, where barriers are expensive).
  bool workgroup() const { return workgroup_; }
  // Workgroups for `items` rows (norms, argmax), heads or the like: one each, or 64 per group.
  uint32_t Items(int items) const { return workgroup_ ? items : Groups(items, 64); }

  // Records y[n, rows] = lin(x[n, cols]) (x rows at x_off with stride x_stride); SRQ inputs are
  // quantized into xq first. With an epilogue (linear_mv_wg.wgsl's epi 1 or 2), returns whether
  // it was applied: only the decode kernel has them, elsewhere the caller records gelu_mul.
  // With a residual norm (where TakesNorm), x is the residual stream and the input is the norm's;
  // with x_packed, x holds the packed input codes a pair handed off (HandsOff).
  bool RecordLinear(const Linear& lin, int x, uint32_t x_off, uint32_t x_stride, int y,
                    uint32_t y_off, uint32_t y_stride, int n, const LinearScratch& scratch,
                    const LinearEpilogue& epi = {}, const ResidualNorm* pro = nullptr,
                    bool x_packed = false) const {
    const GpuLinear& g = Lin(lin);
    const bool srq = SrqInput(lin);
    if (srq && MvFits(lin, n, 1)) {
      RecordMv(lin, nullptr, x, x_off, x_stride, y, y_off, y_stride, n, epi, pro, x_packed);
      return epi.mode != 0;
    }
    if (pro || x_packed) {
      throw Error(ErrorCode::kInternal, lin.name + ": a prologue on a linear without it");
    }
    // (linear_tile_wg takes the input codes packed four to a word, linear_wg one to a float)
    const bool tile = srq && n >= kTileMinTokens && Ready(kLinearTile);
    if (srq) {
      const uint32_t words = static_cast<uint32_t>((lin.cols + 3) / 4);
      Params q;
      q.u(n).u(lin.cols).u(x_off).u(x_stride).f(lin.in_scale).u(tile ? 1 : 0);
      const int qb[] = {x, scratch.xq};
      gw_dispatch(pipelines_[kQuant], qb, 2, q.data(), q.size(),
                  tile ? Groups(static_cast<int>(words), 64) : Groups(lin.cols, 64), n, 1);
      x = scratch.xq;
      x_off = 0;
      x_stride = tile ? words : static_cast<uint32_t>(lin.cols);
    }
    Params p;
    p.u(lin.rows).u(lin.cols).u(g.row_words).u(KindCode(lin.kind)).u(n).u(x_off).u(x_stride)
        .u(y_off).u(y_stride).u(srq ? 1 : 0).f(lin.in_scale).f(lin.out_scale);
    const int b[] = {g.w, g.scale, x, y, scratch.part};
    if (tile) {
      const TileSplit ts = PlanTileSplit(lin, n, scratch.part_words);
      p.u(ts.splits).u(ts.kper).u(0);
      gw_dispatch(pipelines_[kLinearTile], b, 5, p.data(), p.size(), Groups(lin.rows, 64),
                  Groups(n, 64), ts.splits);
      if (ts.splits > 1) {
        // (phase 1: each output's splits added, the epilogue)
        Params f = p;
        f.set(f.size() - 1, 1);
        gw_dispatch(pipelines_[kLinearTile], b, 5, f.data(), f.size(), Groups(lin.rows, 256), n,
                    1);
      }
    } else if (!srq && n >= kDenseTileMinTokens && Ready(kLinearDenseTile)) {
      gw_dispatch(pipelines_[kLinearDenseTile], b, 4, p.data(), p.size(), Groups(lin.rows, 64),
                  Groups(n, 64), 1);
    } else if (workgroup_) {
      const uint32_t blocks = Groups(lin.rows, 4);  // linear_wg.wgsl: 4 rows x 4 tokens each
      gw_dispatch(pipelines_[kLinear], b, 4, p.data(), p.size(), std::min(blocks, 16384u),
                  (blocks + 16383) / 16384, Groups(n, 4));
    } else {
      gw_dispatch(pipelines_[kLinear], b, 4, p.data(), p.size(), Groups(lin.rows, 64), n, 1);
    }
    return false;
  }

  // Records y[n, rows] = gelu_tanh(gate(x)) * up(x) in one linear_mv_wg dispatch (epilogue 3)
  // where both are SRQ linears of one shape and kind that it takes; false (nothing recorded)
  // otherwise: the caller records the gate, then the up projection with epilogue 1.
  // Records k and v of one input in one linear_mv_wg dispatch (epilogue 4: v's rows stacked after
  // k's) where both are SRQ linears of one shape and kind that it takes; false (nothing
  // recorded) otherwise. Outputs at y_off (k) and y2_off (v), stride rows.
  bool RecordStacked(const Linear& k, const Linear& v, int x, uint32_t x_off, uint32_t x_stride,
                     int y, uint32_t y_off, uint32_t y2_off, int n) const {
    if (!Pairs(k, v, n)) return false;
    RecordMv(k, &v, x, x_off, x_stride, y, y_off, static_cast<uint32_t>(k.rows), n,
             {.mode = 4, .aux_off = y2_off}, nullptr, false);
    return true;
  }

  // With a residual norm, x is the residual stream (as RecordLinear); with `down` (where
  // HandsOff), the output also goes to `packed` as down's input codes.
  bool RecordGateUp(const Linear& gate, const Linear& up, int x, int y, int n,
                    const ResidualNorm* pro = nullptr, const Linear* down = nullptr,
                    int packed = 0) const {
    if (!Pairs(gate, up, n)) return false;
    RecordMv(gate, &up, x, 0, gate.cols, y, 0, gate.rows, n,
             {.mode = 3, .aux = packed, .pack = down}, pro, false);
    return true;
  }

 private:
  // linear_mv_wg takes two linears of one input in one dispatch (epilogue 3, gate and up; 4, k
  // and v): SRQ linears of one shape and kind (one row length in words), both inputs in its
  // workgroup memory.
  bool Pairs(const Linear& a, const Linear& b, int n) const {
    return SrqInput(a) && SrqInput(b) && a.kind == b.kind && a.rows == b.rows && a.cols == b.cols &&
           MvFits(a, n, a.in_scale == b.in_scale ? 1 : 2);
  }
  // linear_mv_wg's invocations per row, 8 to 64 (256 per workgroup): about 3 16-byte weight
  // vectors each on rows of whole vectors, else about 4 words.
  static uint32_t MvLanes(const GpuLinear& g) {
    uint32_t lanes = 8;
    if (g.row_words % 4 == 0) {
      while (lanes < 64 && lanes * 6 <= g.row_words / 4) lanes *= 2;
    } else {
      lanes = g.row_words <= 32 ? 8 : g.row_words <= 64 ? 16 : g.row_words <= 128 ? 32 : 64;
    }
    return lanes;
  }
  // linear_mv_wg takes n tokens of this linear (`sets` quantized copies of the input).
  bool MvFits(const Linear& lin, int n, uint32_t sets) const {
    return n <= kMvMaxTokens && pipelines_[kLinearMv] >= 0 &&
           sets * static_cast<uint32_t>(n) * Lin(lin).row_words * MvGroup(lin.kind) <=
               kMvInputWords;
  }
  // One linear_mv_wg dispatch: lin, and with `second` (epilogue 3) the paired linear.
  void RecordMv(const Linear& lin, const Linear* second, int x, uint32_t x_off, uint32_t x_stride,
                int y, uint32_t y_off, uint32_t y_stride, int n, const LinearEpilogue& epi,
                const ResidualNorm* pro, bool x_packed) const {
    const GpuLinear& g = Lin(lin);
    const GpuLinear& g2 = second ? Lin(*second) : g;
    const uint32_t lanes = MvLanes(g);
    Params p;
    p.u(lin.rows)
        .u(lin.cols)
        .u(g.row_words)
        .u(KindCode(lin.kind))
        .u(n)
        .u(x_off)
        .u(x_stride)
        .u(y_off)
        .u(y_stride)
        .u(1)
        .f(lin.in_scale)
        .f(lin.out_scale)
        .u(lanes)
        .u(epi.mode)
        .u(epi.aux_off)
        .u(epi.aux_stride)
        .f(second ? second->in_scale : 0.0f)
        .f(second ? second->out_scale : 0.0f);
    if (pro) {
      const bool two = pro->wb != nullptr;
      const uint32_t flags = (pro->wa->empty() ? 0u : 1u) | (two && !pro->wb->empty() ? 2u : 0u) |
                             (pro->write ? 4u : 0u) | (pro->store_input ? 8u : 0u);
      p.u(two ? 2 : 1)
          .u(pro->r_in)
          .u(pro->r_out)
          .u(pro->t)
          .u(VecOffset(*pro->wa))
          .u(two ? VecOffset(*pro->wb) : 0)
          .u(flags)
          .f(pro->scale)
          .f(pro->eps);
    } else {
      p.u(0).u(0).u(0).u(0).u(0).u(0).u(0).f(0.0f).f(0.0f);
    }
    if (epi.pack) {
      p.u(KindCode(epi.pack->kind)).f(epi.pack->in_scale).u(InputWords(*epi.pack));
    } else {
      p.u(0).f(0.0f).u(0);
    }
    p.u(x_packed ? 1 : 0).u(pro ? pro->z : 0);
    // (without a second linear, bindings 6 and 7 take this one's, read-only twice)
    const int b[] = {g.w, g.scale, x, y, epi.aux, g2.w, g2.scale, vec_pool_};
    // Workgroups over the row blocks (more blocks than workgroups: each loops over several; the
    // stacked epilogue's dispatch has both linears' rows).
    uint32_t blocks =
        Groups(epi.mode == 4 ? 2 * lin.rows : lin.rows, static_cast<int>(256 / lanes));
    if (mv_workgroups_ > 0) blocks = std::min(blocks, mv_workgroups_);
    gw_dispatch(pipelines_[kLinearMv], b, 8, p.data(), p.size(), std::min(blocks, 16384u),
                (blocks + 16383) / 16384, 1);
  }
  void Build();
  bool Compile(Kernel k, const char* info) const;
  void ReleaseWeights();
  void Upload(const Linear& lin);
  void UploadVec(const std::vector<float>& v);
  uint32_t VecOffset(const std::vector<float>& v) const {
    return v.empty() ? 0 : vec_offsets_.at(&v);
  }

  const Model& model_;
  int generation_ = -1;
  size_t weight_bytes_ = 0;
  size_t context_bytes_ = 0;
  std::map<const Linear*, GpuLinear> linears_;
  std::map<const std::vector<float>*, int> vectors_;
  // Every norm weight vector again in one buffer (the prologue norms' weights, one binding), at
  // these float offsets.
  int vec_pool_ = 0;
  std::vector<float> vec_pool_host_;
  std::map<const std::vector<float>*, uint32_t> vec_offsets_;
  // Pipeline handles by kernel; kUnavailable where the family or the adapter lacks the kernel,
  // kNotCompiled for a prompt-chunk kernel no chunk has taken yet (Ready compiles it).
  static constexpr int kUnavailable = -1, kNotCompiled = -3;
  mutable int pipelines_[kNumKernels] = {};
  bool workgroup_ = false;
  // The workgroup kernels reduce with subgroup operations (prelude_subgroups.wgsl) rather than
  // trees in workgroup memory (prelude_workgroup.wgsl): where the device has `subgroups` and the
  // library's webgpu.subgroups is not false (webgpu_library.js).
  mutable bool subgroups_ = false;
  // linear_mv_wg's grid cap (0: a workgroup per row block).
  uint32_t mv_workgroups_ = kMvWorkgroupsDefault;
  ThreadPool tower_pool_{1};  // the towers' (the module's one thread)
};

void WebGpuModel::ReleaseWeights() {
  if (gw_generation() == generation_) {
    for (auto& [l, g] : linears_) {
      gw_release(g.w);
      if (g.scale) gw_release(g.scale);
    }
    for (auto& [v, h] : vectors_) gw_release(h);
    if (vec_pool_ > 0) gw_release(vec_pool_);
  }
  linears_.clear();
  vectors_.clear();
  vec_pool_ = 0;
  vec_pool_host_.clear();
  vec_offsets_.clear();
  weight_bytes_ = 0;
}

void WebGpuModel::Upload(const Linear& lin) {
  if (linears_.count(&lin) || lin.rows == 0) return;
  GpuLinear g;
  g.lin = &lin;
  const size_t used = IsQuantized(lin.kind)
                          ? (static_cast<size_t>(lin.cols) * WeightKindBits(lin.kind) + 7) / 8
                          : static_cast<size_t>(lin.cols) * WeightKindBits(lin.kind) / 8;
  g.row_words = static_cast<uint32_t>((used + 3) / 4);
  const size_t bytes = static_cast<size_t>(lin.rows) * g.row_words * 4;
  // (the buffer padded to 16 bytes: linear_mv_wg.wgsl binds the words as vec4<u32>)
  const size_t padded = (bytes + 15) / 16 * 16;
  if (static_cast<double>(padded) > gw_max_buffer()) {
    throw Error(ErrorCode::kCapacity, lin.name + ": " + std::to_string(padded) +
                                          " bytes exceed the device's largest storage buffer (" +
                                          std::to_string(static_cast<size_t>(gw_max_buffer())) +
                                          ")");
  }
  g.w = gw_buffer(padded);
  if (g.w < 0) ThrowDevice(lin.name);
  if (lin.row_bytes == g.row_words * 4u) {
    gw_write(g.w, 0, lin.data, bytes);
  } else {
    // Rows padded to whole words, written in slices of about 16 MiB.
    const int per = std::max(1, static_cast<int>((16u << 20) / (g.row_words * 4u)));
    std::vector<uint8_t> buf;
    for (int r0 = 0; r0 < lin.rows; r0 += per) {
      const int n = std::min(per, lin.rows - r0);
      buf.assign(static_cast<size_t>(n) * g.row_words * 4, 0);
      for (int r = 0; r < n; ++r) {
        std::memcpy(&buf[static_cast<size_t>(r) * g.row_words * 4],
                    lin.data + static_cast<size_t>(r0 + r) * lin.row_bytes, used);
      }
      gw_write(g.w, static_cast<size_t>(r0) * g.row_words * 4, buf.data(), buf.size());
    }
  }
  weight_bytes_ += padded;
  if (IsQuantized(lin.kind)) {
    g.scale = gw_buffer(static_cast<size_t>(lin.rows) * 4);
    if (g.scale < 0) ThrowDevice(lin.name);
    gw_write(g.scale, 0, lin.row_scale, static_cast<size_t>(lin.rows) * 4);
    weight_bytes_ += static_cast<size_t>(lin.rows) * 4;
  }
  linears_[&lin] = g;
}

void WebGpuModel::UploadVec(const std::vector<float>& v) {
  if (v.empty() || vectors_.count(&v)) return;
  const int h = gw_buffer(v.size() * 4);
  if (h < 0) ThrowDevice("norm weights");
  gw_write(h, 0, v.data(), v.size() * 4);
  vectors_[&v] = h;
  weight_bytes_ += v.size() * 4;
  vec_offsets_[&v] = static_cast<uint32_t>(vec_pool_host_.size());
  vec_pool_host_.insert(vec_pool_host_.end(), v.begin(), v.end());
}

// Compiles kernel k with the family's reductions (the first, for its `enable` directive), the
// prelude and the kernel. At load (info: the adapter), false where the adapter's compiler
// refuses the subgroup shaders: the family is then the workgroup reductions (the same results),
// the adapter's description says why, and the caller compiles every kernel again. At a prompt
// chunk's first use (no info), a refused kernel is left unavailable: the chunks take the general
// kernels.
bool WebGpuModel::Compile(Kernel k, const char* info) const {
  static const char* const kNames[kNumKernels] = {
      "linear",      "quant",   "rmsnorm", "head_norm",          "attention",      "gelu_mul",
      "ple_combine", "softcap", "argmax",  "attention_merge_wg", "linear_tile_wg", "linear_mv_wg",
      "linear_dense_tile_wg", "attention_prompt_wg"};
  std::string name = kNames[k];
  if (workgroup_ &&
      (k == kLinear || k == kRmsNorm || k == kHeadNorm || k == kAttention || k == kArgmax)) {
    name += "_wg";
  }
  const std::string code =
      std::string(WgslSource(subgroups_ ? "prelude_subgroups" : "prelude_workgroup")) +
      kWgslPrelude + WgslSource(name.c_str());
  // The label (bench/web/dawn_profile.mjs's tables) marks the subgroup reductions.
  const std::string label = name + (subgroups_ ? "+sg" : "");
  pipelines_[k] = gw_pipeline(label.c_str(), code.c_str());
  if (pipelines_[k] == -2 && subgroups_ && info) {
    char why[512] = {0};
    gw_pipeline_error(why, sizeof why);
    subgroups_ = false;
    AdapterName() = std::string(info) + ", workgroup kernels (subgroups refused: " + why + ")";
    return false;
  }
  if (pipelines_[k] == -2 && !info) {
    pipelines_[k] = kUnavailable;
    return true;
  }
  if (pipelines_[k] == -2) {
    char why[512] = {0};
    gw_pipeline_error(why, sizeof why);
    throw Error(ErrorCode::kDevice, "WGSL " + label + ": " + why);
  }
  if (pipelines_[k] < 0) ThrowDevice("WGSL " + label);
  return true;
}

void WebGpuModel::Build() {
  ReleaseWeights();
  if (gw_init() != 0) {
    const std::string e = DeviceError();
    throw Error(e.find("not available") != std::string::npos ? ErrorCode::kUnsupported
                                                            : ErrorCode::kDevice,
                e);
  }
  for (const LayerPlan& p : model_.layers()) {
    if (p.head_dim > 512) {
      throw Error(ErrorCode::kUnsupported, "the WebGPU backend's attention takes head_dim <= 512 (layer has " +
                                               std::to_string(p.head_dim) + ")");
    }
  }
  char info[256] = {0};
  gw_info(info, sizeof info);
  workgroup_ = gw_kernels() == 1;
  subgroups_ = workgroup_ && gw_subgroups() == 1;
  const int mv = gw_matvec_workgroups();
  mv_workgroups_ = mv >= 0 ? static_cast<uint32_t>(mv) : kMvWorkgroupsDefault;
  AdapterName() = std::string(info) + (!workgroup_  ? ", row kernels"
                                       : subgroups_ ? ", workgroup kernels with subgroups"
                                                    : ", workgroup kernels");
  // Every module: the family's reductions (the first, for its `enable` directive), the prelude,
  // the kernel. The prompt-chunk kernels are compiled where a chunk first takes them (Ready).
  for (int k = 0; k < kNumKernels; ++k) {
    if ((!workgroup_ &&
         (k == kAttentionMerge || k == kLinearTile || k == kLinearMv || k == kLinearDenseTile ||
          k == kAttentionPrompt)) ||
        ((k == kLinearTile || k == kLinearMv) && !gw_packed_dot())) {
      pipelines_[k] = kUnavailable;
    } else if (k == kLinearTile || k == kLinearDenseTile || k == kAttentionPrompt) {
      pipelines_[k] = kNotCompiled;
    } else if (!Compile(static_cast<Kernel>(k), info)) {
      k = -1;  // subgroups refused: every kernel again with the workgroup reductions
    }
  }
  for (size_t l = 0; l < model_.layer_weights().size(); ++l) {
    const LayerWeights& w = model_.layer_weights()[l];
    const LayerPlan& p = model_.layers()[l];
    for (const Linear* lin : {&w.q, &w.o, &w.gate, &w.up, &w.down}) Upload(*lin);
    if (!p.kv_shared) {
      Upload(w.k);
      Upload(w.v);
    }
    if (model_.text().hidden_size_per_layer_input > 0) {
      Upload(w.ple_gate);
      Upload(w.ple_proj);
    }
    for (const std::vector<float>* v : {&w.input_norm, &w.post_attn_norm, &w.pre_ffn_norm,
                                        &w.post_ffn_norm, &w.q_norm, &w.k_norm, &w.post_ple_norm}) {
      UploadVec(*v);
    }
  }
  if (model_.text().hidden_size_per_layer_input > 0) {
    Upload(model_.ple_model_proj());
    UploadVec(model_.ple_proj_norm());
  }
  UploadVec(model_.final_norm());
  vec_pool_ = gw_buffer(std::max<size_t>(vec_pool_host_.size() * 4, 16));
  if (vec_pool_ < 0) ThrowDevice("norm weights");
  if (!vec_pool_host_.empty())
    gw_write(vec_pool_, 0, vec_pool_host_.data(), vec_pool_host_.size() * 4);
  weight_bytes_ += vec_pool_host_.size() * 4;
  vec_pool_host_ = {};
  Upload(model_.lm_head());
  if (gw_failed()) ThrowDevice("uploading the weights");
  generation_ = gw_generation();
}

WebGpuContext::WebGpuContext(std::shared_ptr<WebGpuModel> owner, const BackendOptions& options)
    : owner_(std::move(owner)), model_(owner_->model()), cfg_(model_.text()) {
  const CacheGeometry geo = PlanCacheGeometry(cfg_, options);
  capacity_ = geo.capacity;
  chunk_ = std::max(1, geo.slack);
  ring_ = geo.ring;
  window_ = CacheWindow(cfg_.sliding_window, ring_);
  for (const CacheSlotShape& shape : PlanCacheSlots(model_, geo)) {
    slots_.push_back({.width = shape.width, .ring = shape.ring});
  }
  inv_sliding_ = ref::RopeInvFreq(cfg_.rope_sliding, cfg_.head_dim);
  inv_full_ = ref::RopeInvFreq(cfg_.rope_full, cfg_.global_head_dim);
  Allocate();
}

int WebGpuContext::Buffer(size_t bytes) {
  const int h = gw_buffer(std::max<size_t>(bytes, 16));
  if (h < 0) ThrowDevice("allocating a context");
  buffers_.push_back(h);
  bytes_ += bytes;
  owner_->AddContextBytes(static_cast<ptrdiff_t>(bytes));
  return h;
}

void WebGpuContext::Release() {
  if (generation_ == gw_generation()) {
    for (int h : buffers_) gw_release(h);
  }
  buffers_.clear();
  owner_->AddContextBytes(-static_cast<ptrdiff_t>(bytes_));
  bytes_ = 0;
}

void WebGpuContext::Allocate() {
  Release();
  const size_t m = static_cast<size_t>(chunk_);
  const int H = cfg_.hidden_size, L = cfg_.num_layers, P = cfg_.hidden_size_per_layer_input;
  int qw = 0, kw = 0, inter = 0, cols = 0;
  for (const LayerPlan& p : model_.layers()) {
    qw = std::max(qw, p.num_heads * p.head_dim);
    kw = std::max(kw, p.num_kv_heads * p.head_dim);
    inter = std::max(inter, p.intermediate);
  }
  cols = std::max({H, qw, inter, P});
  for (Slot& s : slots_) {
    s.k = Buffer(static_cast<size_t>(s.ring) * s.width * 4);
    s.v = Buffer(static_cast<size_t>(s.ring) * s.width * 4);
  }
  stream_ = Buffer(4 * m * H * 4);
  a_ = Buffer(m * H * 4);
  hn_ = Buffer(m * H * 4);
  qraw_ = Buffer(m * (qw + 2 * kw) * 4);  // the workgroup kernels put k and v after q
  q_ = Buffer(m * qw * 4);
  attn_ = Buffer(m * qw * 4);
  kraw_ = Buffer(m * kw * 4);
  vraw_ = Buffer(m * kw * 4);
  g_ = Buffer(m * inter * 4);
  gq_ = Buffer(m * (inter / 4 + 4) * 4);  // (input words per token <= cols / 4 + 4)
  u_ = Buffer(m * inter * 4);
  xq_ = Buffer(m * cols * 4);
  const size_t part_words = owner_->TilePartWords(chunk_);
  part_ = Buffer(part_words * 4);
  scratch_ = {.xq = xq_, .part = part_, .part_words = part_words};
  if (P > 0) {
    gp_ = Buffer(m * P * 4);
    ple_ = Buffer(m * L * P * 4);
    tok_ = Buffer(m * PleStride() * 4);
  }
  if (owner_->workgroup()) {
    int hd = 0;
    for (const LayerPlan& p : model_.layers()) hd = std::max(hd, p.head_dim);
    split_max_ = Buffer(kSplitSlots * 4);
    split_part_ = Buffer(kSplitSlots * (2 + 2 * static_cast<size_t>(hd)) * 4);
  }
  sink_ = Buffer(16);
  cs_s_ = Buffer(m * cfg_.head_dim * 4);
  cs_f_ = Buffer(m * std::max(cfg_.global_head_dim, 1) * 4);
  // Logits for at most head_rows_ positions at once: 64 MiB at most (E2B: 64 rows of 262,144).
  head_rows_ = static_cast<int>(std::clamp<size_t>((64u << 20) / (cfg_.vocab_size * 4u), 1, m));
  logits_ = Buffer(static_cast<size_t>(head_rows_) * cfg_.vocab_size * 4);
  ids_ = Buffer(m * 4);
  amax_v_ = Buffer(static_cast<size_t>(head_rows_) * kArgmaxParts * 4);
  amax_i_ = Buffer(static_cast<size_t>(head_rows_) * kArgmaxParts * 4);
  generation_ = gw_generation();
}

void WebGpuContext::Replay() {
  owner_->EnsureDevice();
  Allocate();
  std::vector<int32_t> tokens;
  tokens.swap(history_);
  std::map<int, std::vector<float>> rows;
  rows.swap(soft_rows_);
  const int n = static_cast<int>(tokens.size());
  window_.Reset();
  std::vector<const float*> soft(n, nullptr);
  for (auto& [pos, r] : rows) soft[pos] = r.data();
  ForwardRequest req;
  req.tokens = tokens;
  if (!rows.empty()) req.soft = soft;
  req.mode = OutputMode::kNone;
  ForwardResult ignored;
  Forward(req, &ignored);
}

void WebGpuContext::Forward(const ForwardRequest& req, ForwardResult* out) {
  if (gw_failed() || generation_ != owner_->generation() || generation_ != gw_generation()) {
    if (gw_failed()) {
      // The request in flight when the device went fails; the next one rebuilds and replays.
      if (generation_ == gw_generation() && generation_ == owner_->generation()) {
        generation_ = -1;
        ThrowDevice("webgpu");
      }
    }
    Replay();
  }
  ValidateForward(req, window_.cached(), capacity_, cfg_.vocab_size);
  *out = ForwardResult();
  try {
    RunChunks(req, out);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kDevice) generation_ = -1;  // rebuilt and replayed next time
    throw;
  }
}

void WebGpuContext::RunChunks(const ForwardRequest& req, ForwardResult* out) {
  const int n = static_cast<int>(req.tokens.size());
  for (int begin = 0; begin < n; begin += chunk_) {
    const int m = std::min(chunk_, n - begin);
    const bool last = begin + m == n;
    const int first_out = req.mode == OutputMode::kNone ? m
                          : req.all_positions          ? 0
                          : last                       ? m - 1
                                                       : m;
    RunChunk(req.tokens.subspan(begin, m), req.soft.empty() ? req.soft : req.soft.subspan(begin, m),
             first_out, req, out);
  }
}

void WebGpuContext::RunChunk(std::span<const int32_t> tokens, std::span<const float* const> soft,
                             int first_out, const ForwardRequest& req, ForwardResult* out) {
  const WebGpuModel& M = *owner_;
  const int m = static_cast<int>(tokens.size());
  const int H = cfg_.hidden_size, P = cfg_.hidden_size_per_layer_input, L = cfg_.num_layers;
  const int pos0 = window_.cached();
  const float eps = cfg_.rms_norm_eps;
  window_.BeginWrite(pos0, m);

  // Inputs from the host: embedding rows (or soft tokens), per-layer token rows, RoPE tables.
  std::vector<float> rows(static_cast<size_t>(m) * H);
  for (int t = 0; t < m; ++t) {
    if (!soft.empty() && soft[t]) {
      std::copy_n(soft[t], H, &rows[static_cast<size_t>(t) * H]);
    } else {
      ref::EmbeddingRowFast(model_.embed(), model_.EmbedId(tokens[t]), &rows[static_cast<size_t>(t) * H]);
    }
  }
  // The stream's regions (floats): the residual in region `cur` (0 or 1), the scratch t.
  const uint32_t region = static_cast<uint32_t>(chunk_) * H;
  const uint32_t t_off = 2 * region, z_off = 3 * region;
  int cur = 0;
  gw_write(stream_, 0, rows.data(), rows.size() * 4);
  // The per-layer rows and the RoPE tables are prepared where the first dispatch that reads them
  // is recorded; in a long chunk the dispatches recorded before go to the GPU first, so that it
  // works while the host prepares them (~10 ms of a 511-token chunk in the module).
  const bool overlap = m >= kOverlapTokens;
  // The per-layer inputs (ple_combine: the model projection's rows, normed, plus the token rows),
  // recorded before the first layer's per-layer gate reads them.
  bool ple_ready = false;
  auto ple_inputs = [&] {
    if (ple_ready) return;
    ple_ready = true;
    if (overlap && gw_submit() != 0) ThrowDevice("webgpu");
    // Each token's per-layer embedding row as stored (codes or values), then its row's scales:
    // ple_combine.wgsl decodes them (EmbeddingRow's f32 operations, so the same bits), and the host
    // copies ~4.5 KB a token (QAT int4) instead of decoding 8,960 floats.
    const Embedding& e = model_.ple_embed();
    const size_t words = PleRowWords(), stride = PleStride();
    std::vector<uint32_t> tok(static_cast<size_t>(m) * stride, 0u);
    for (int t = 0; t < m; ++t) {
      const int32_t id = model_.EmbedId(tokens[t]);
      uint32_t* dst = &tok[static_cast<size_t>(t) * stride];
      std::memcpy(dst, EmbeddingRowBytes(e, id), e.row_bytes);
      if (IsQuantized(e.kind)) {
        std::memcpy(dst + words, e.scale + static_cast<size_t>(id) * e.scale_blocks,
                    static_cast<size_t>(e.scale_blocks) * 4);
      }
    }
    gw_write(tok_, 0, tok.data(), tok.size() * 4);
    Params p;
    p.u(m).u(L).u(P).f(model_.ple_model_proj_scale()).f(model_.ple_input_scale()).f(eps);
    p.u(KindCode(e.kind))
        .u(static_cast<uint32_t>(stride))
        .u(static_cast<uint32_t>(words))
        .u(static_cast<uint32_t>(IsQuantized(e.kind) ? e.cols / e.scale_blocks : 0))
        .f(e.embed_scale);
    const int b[] = {tok_, M.Vec(model_.ple_proj_norm()), ple_};
    gw_dispatch(M.pipeline(kPleCombine), b, 3, p.data(), p.size(), Groups(L, 64), m, 1);
  };
  bool rope_ready = false;
  auto rope_tables = [&] {
    if (rope_ready) return;
    rope_ready = true;
    if (overlap && gw_submit() != 0) ThrowDevice("webgpu");
    for (int type = 0; type < 2; ++type) {
      const std::vector<float>& inv = type == 0 ? inv_sliding_ : inv_full_;
      const int hd = type == 0 ? cfg_.head_dim : cfg_.global_head_dim;
      if (hd <= 0) continue;
      const int half = hd / 2;
      std::vector<float> cs(static_cast<size_t>(m) * hd);
      for (int t = 0; t < m; ++t) {
        for (int i = 0; i < half; ++i) {
          const float f = static_cast<float>(pos0 + t) * inv[i];
          cs[static_cast<size_t>(t) * hd + i] = std::cos(f);
          cs[static_cast<size_t>(t) * hd + half + i] = std::sin(f);
        }
      }
      gw_write(type == 0 ? cs_s_ : cs_f_, 0, cs.data(), cs.size() * 4);
    }
  };

  if (P > 0) M.RecordLinear(model_.ple_model_proj(), stream_, 0, H, ple_, 0, L * P, m, scratch_);

  // rmsnorm.wgsl: mode 0 y = norm(x); mode 1 y = (y + norm(x)) * scale; with `next`, mode 2: mode
  // 1, then a_ = the next norm of the new y (weights *next), one dispatch instead of two.
  // x == y: x's rows in y's buffer (the stream's scratch and residual).
  auto norm = [&](int x, uint32_t x_off, int w, int y, uint32_t y_off, int rows_n, int width,
                  int mode, float scale, const std::vector<float>& wv,
                  const std::vector<float>* next = nullptr) {
    if (next) mode = 2;
    const bool x_in_y = x == y;
    Params p;
    p.u(rows_n)
        .u(width)
        .u(x_off)
        .u(width)
        .u(y_off)
        .u(width)
        .u(wv.empty() ? 0 : 1)
        .u(mode)
        .f(eps)
        .f(scale)
        .u(next && !next->empty() ? 1 : 0)
        .u(x_in_y ? 1 : 0);
    // (x_in_y: x's binding takes the weights, read-only twice)
    const int b[] = {x_in_y ? w : x, w, y, next ? M.Vec(*next) : w, next ? a_ : sink_};
    gw_dispatch(M.pipeline(kRmsNorm), b, 5, p.data(), p.size(), M.Items(rows_n), 1, 1);
  };
  // Rows r0.. of the chunk (r0 > 0 in the shared tail, below).
  auto head_norm = [&](int src, const std::vector<float>& w, int n, int r0, int heads, int hd,
                       bool rope, int cs, int dst, bool to_cache, int ring) {
    Params p;
    p.u(n)
        .u(heads)
        .u(hd)
        .u(w.empty() ? 0 : 1)
        .u(rope ? 1 : 0)
        .u(to_cache ? 1 : 0)
        .u(pos0 + r0)
        .u(ring)
        .u(0)
        .u(static_cast<uint32_t>(r0) * hd)
        .f(eps);
    // head_norm_wg: no key and value heads; its unused writable bindings take buffers of their
    // own (WebGPU refuses one buffer bound writable twice), kraw_ and vraw_ (unused there).
    p.u(0).u(0).u(0).u(0);
    const int b[] = {src, M.Vec(w), cs, dst, 0, kraw_, vraw_};
    gw_dispatch(M.pipeline(kHeadNorm), b, M.workgroup() ? 7 : 4, p.data(), p.size(), M.Items(heads),
                n, 1);
  };

  // The trailing KV-shared layers (Model::shared_tail) write no cache, so there only the rows
  // whose logits are asked for run: rows first_out.. of the chunk, in place in the residual
  // stream (from row r0), compacted in the scratch buffers; none when the chunk outputs nothing
  // (a prompt's earlier chunks). Every kernel treats its rows independently, so the rows that run
  // compute the same bits as with the whole chunk.
  const int tail = model_.shared_tail();
  auto first_row = [&](int l) { return l >= tail ? first_out : 0; };
  // Each residual norm (residual += norm(t) x wa, times a scale) waits for the linears that read
  // its result: where linear_mv_wg takes them, each computes it in its prologue (and the first
  // writes the new residual to the stream's other region), else one rmsnorm dispatch
  // (`settle`) updates the residual in place and writes the next norm to a_.
  struct Pending {
    bool on = false;
    int r0 = 0, n = 0;
    const std::vector<float>* wa = nullptr;
    float scale = 1.0f;
  } pending;
  auto settle = [&](const std::vector<float>* next) {
    norm(stream_, t_off, M.Vec(*pending.wa), stream_, cur * region + pending.r0 * H, pending.n, H,
         1, pending.scale, *pending.wa, next);
    pending.on = false;
  };
  // The prologue norm for the pending one (input: the residual, or its norm x *wb), for the
  // first linear that reads it (write) or the others.
  auto prologue = [&](const std::vector<float>* wb, bool write) {
    const uint32_t ro = static_cast<uint32_t>(pending.r0) * H;
    return ResidualNorm{.r_in = cur * region + ro,
                        .r_out = (1 - cur) * region + ro,
                        .t = t_off,
                        .wa = pending.wa,
                        .scale = pending.scale,
                        .wb = wb,
                        .write = write,
                        .eps = eps};
  };
  // After the prologues: the residual is in the other region.
  auto swapped = [&] {
    pending.on = false;
    cur = 1 - cur;
  };
  for (int l = 0; l < L; ++l) {
    const int r0 = first_row(l);
    const int n = m - r0;
    if (n <= 0) break;
    const uint32_t xo = static_cast<uint32_t>(r0) * H;
    const LayerPlan& p = model_.layers()[l];
    const LayerWeights& w = model_.layer_weights()[l];
    const int hd = p.head_dim, nh = p.num_heads, nkv = p.num_kv_heads;
    const int cs = p.type == LayerType::kSliding ? cs_s_ : cs_f_;
    const bool kv = M.workgroup() && !p.kv_shared;  // k and v beside q (below)
    const int last = pos0 + m;                       // keys of the chunk's last row
    const int keys = p.window > 0 ? std::min(last, p.window) : last;
    const AttentionSplit split = M.workgroup() ? PlanAttentionSplit(n * nh, keys) : AttentionSplit{};
    // attention_prompt_wg: the query rows normalized into q_ first.
    const bool prompt_attn = M.workgroup() && split.splits == 1 && n >= kPromptAttentionMinTokens &&
                             hd % 8 == 0 && M.Ready(kAttentionPrompt);
    // The input norm: in q's (k's, v's) prologue, or a_ from the pending norm's dispatch, or
    // its own.
    // (with the norm in q's prologue, q also stores its input for k and v)
    const bool pro = pending.on && pending.r0 == r0 && M.TakesNorm(w.q, n);
    ResidualNorm in_first = pro ? prologue(&w.input_norm, true) : ResidualNorm{};
    in_first.z = z_off;
    in_first.store_input = kv;
    const int in = pro ? stream_ : a_;
    const uint32_t in_off = pro ? z_off : 0;
    if (!pro) {
      // (the pending norm's dispatch writes a_ too where it runs this layer's rows)
      const bool with_next = pending.on && pending.r0 == r0;
      if (pending.on) settle(with_next ? &w.input_norm : nullptr);
      if (!with_next) {
        norm(stream_, cur * region + xo, M.Vec(w.input_norm), a_, 0, n, H, 0, 1.0f, w.input_norm);
      }
    }
    M.RecordLinear(w.q, in, 0, H, qraw_, 0, nh * hd, n, scratch_, {}, pro ? &in_first : nullptr);
    const Slot& slot = slots_[model_.layers()[p.kv_layer].cache_slot];
    if (kv) {
      // k and v after q in qraw_, the three head norms in one dispatch (head_norm_wg.wgsl).
      const uint32_t k_off = static_cast<uint32_t>(n * nh * hd);
      const uint32_t v_off = k_off + static_cast<uint32_t>(n * nkv * hd);
      if (!M.RecordStacked(w.k, w.v, in, in_off, H, qraw_, k_off, v_off, n)) {
        M.RecordLinear(w.k, in, in_off, H, qraw_, k_off, nkv * hd, n, scratch_);
        M.RecordLinear(w.v, in, in_off, H, qraw_, v_off, nkv * hd, n, scratch_);
      }
      rope_tables();
      // (the key and value heads only where attention_wg normalizes the query heads itself,
      // q_norm; with them where attention_prompt_wg reads them from q_)
      const int qh = prompt_attn ? nh : 0;
      Params hp;
      hp.u(n)
          .u(qh)
          .u(hd)
          .u(prompt_attn && !w.q_norm.empty() ? 1 : 0)
          .u(1)
          .u(0)
          .u(pos0 + r0)
          .u(slot.ring)
          .u(0)
          .u(static_cast<uint32_t>(r0) * hd)
          .f(eps)
          .u(nkv)
          .u(k_off)
          .u(v_off)
          .u(w.k_norm.empty() ? 0 : 1);
      const int b[] = {qraw_, M.Vec(w.q_norm), cs, q_, M.Vec(w.k_norm), slot.k, slot.v};
      gw_dispatch(M.pipeline(kHeadNorm), b, 7, hp.data(), hp.size(), qh + 2 * nkv, n, 1);
    } else if (!M.workgroup() || prompt_attn) {
      rope_tables();
      head_norm(qraw_, w.q_norm, n, r0, nh, hd, true, cs, q_, false, 1);
    }
    if (pro) swapped();
    if (!p.kv_shared && !M.workgroup()) {
      rope_tables();
      M.RecordLinear(w.k, a_, 0, H, kraw_, 0, nkv * hd, n, scratch_);
      M.RecordLinear(w.v, a_, 0, H, vraw_, 0, nkv * hd, n, scratch_);
      head_norm(kraw_, w.k_norm, n, r0, nkv, hd, true, cs, slot.k, true, slot.ring);
      head_norm(vraw_, {}, n, r0, nkv, hd, false, cs, slot.v, true, slot.ring);
    }
    rope_tables();  // (attention_wg's q_norm reads them)
    {
      Params a;
      a.u(n).u(nh).u(hd).u(nh / nkv).u(nkv * hd).u(pos0 + r0).u(p.window).u(slot.ring);
      // attention_wg's query head norm and RoPE (q_norm) on the raw rows in qraw_.
      auto q_norm = [&](Params& ap) {
        ap.u(1).u(w.q_norm.empty() ? 0 : 1).u(static_cast<uint32_t>(r0) * hd).f(eps);
      };
      if (!M.workgroup()) {
        const int b[] = {q_, slot.k, slot.v, attn_};
        gw_dispatch(M.pipeline(kAttention), b, 4, a.data(), a.size(), Groups(nh, 32), n, 1);
      } else if (prompt_attn) {
        const int b[] = {q_, slot.k, slot.v, attn_};
        gw_dispatch(M.pipeline(kAttentionPrompt), b, 4, a.data(), a.size(),
                    static_cast<uint32_t>(nkv * Groups(nh / nkv, 8)), n, 1);
      } else if (split.splits == 1) {
        a.u(1).u(0).u(2);  // phase 2: one pass
        q_norm(a);
        const int b[] = {qraw_, slot.k, slot.v, attn_, sink_, M.Vec(w.q_norm), cs};
        gw_dispatch(M.pipeline(kAttention), b, 7, a.data(), a.size(), nh, n, 1);
      } else {
        const int b[] = {qraw_, slot.k, slot.v, split_max_, split_part_, M.Vec(w.q_norm), cs};
        a.u(split.splits).u(split.chunk).u(1);  // phase 1: each split's keys
        q_norm(a);
        gw_dispatch(M.pipeline(kAttention), b, 7, a.data(), a.size(), split.splits, nh, n);
        Params mp;
        mp.u(n).u(nh).u(hd).u(split.splits);
        const int mb[] = {split_part_, attn_, split_max_};
        gw_dispatch(M.pipeline(kAttentionMerge), mb, 3, mp.data(), mp.size(), nh, n,
                    Groups(hd, 64));
      }
    }
    M.RecordLinear(w.o, attn_, 0, nh * hd, stream_, t_off, H, n, scratch_);
    pending = {.on = true, .r0 = r0, .n = n, .wa = &w.post_attn_norm, .scale = 1.0f};
    const int I = p.intermediate;
    // gelu(gate) x up into g_: one dispatch (the pair), or the gate then up with the product in
    // its epilogue, or gelu_mul after them; the pre-FFN norm in their prologues, or a_.
    // (the pair's output also goes to the down projection as its packed input codes, gq_)
    const bool hand = M.HandsOff(w.gate, w.up, w.down, n);
    const Linear* down = hand ? &w.down : nullptr;
    if (M.TakesNorm(w.gate, w.up, n)) {
      const ResidualNorm first = prologue(&w.pre_ffn_norm, true);
      const ResidualNorm more = prologue(&w.pre_ffn_norm, false);
      if (!M.RecordGateUp(w.gate, w.up, stream_, g_, n, &first, down, gq_)) {
        M.RecordLinear(w.gate, stream_, 0, H, g_, 0, I, n, scratch_, {}, &first);
        M.RecordLinear(w.up, stream_, 0, H, u_, 0, I, n, scratch_, {1, g_, 0, static_cast<uint32_t>(I)},
                       &more);
      }
      swapped();
    } else {
      settle(&w.pre_ffn_norm);
      if (!M.RecordGateUp(w.gate, w.up, a_, g_, n, nullptr, down, gq_)) {
        M.RecordLinear(w.gate, a_, 0, H, g_, 0, I, n, scratch_);
        if (!M.RecordLinear(w.up, a_, 0, H, u_, 0, I, n, scratch_,
                            {1, g_, 0, static_cast<uint32_t>(I)})) {
          Params gm;
          gm.u(n).u(I).u(0).u(I);
          const int b[] = {u_, g_};
          gw_dispatch(M.pipeline(kGeluMul), b, 2, gm.data(), gm.size(), Groups(I, 64), n, 1);
        }
      }
    }
    if (hand) {
      M.RecordLinear(w.down, gq_, 0, M.InputWords(w.down), stream_, t_off, H, n, scratch_, {}, nullptr,
                     true);
    } else {
      M.RecordLinear(w.down, g_, 0, I, stream_, t_off, H, n, scratch_);
    }
    const bool ple = P > 0;
    pending = {
        .on = true, .r0 = r0, .n = n, .wa = &w.post_ffn_norm, .scale = ple ? 1.0f : w.layer_scalar};
    if (ple) {
      ple_inputs();
      // The per-layer input gate reads the residual itself (its norm in the gate's prologue).
      const uint32_t ple_off = static_cast<uint32_t>(l * P + r0 * L * P);
      const LinearEpilogue ge{2, ple_, ple_off, static_cast<uint32_t>(L * P)};
      bool fused;
      if (M.TakesNorm(w.ple_gate, n)) {
        const ResidualNorm first = prologue(nullptr, true);
        fused = M.RecordLinear(w.ple_gate, stream_, 0, H, gp_, 0, P, n, scratch_, ge, &first);
        swapped();
      } else {
        settle(nullptr);
        fused = M.RecordLinear(w.ple_gate, stream_, cur * region + xo, H, gp_, 0, P, n, scratch_, ge);
      }
      if (!fused) {
        Params gm;
        gm.u(n).u(P).u(ple_off).u(L * P);
        const int b[] = {ple_, gp_};
        gw_dispatch(M.pipeline(kGeluMul), b, 2, gm.data(), gm.size(), Groups(P, 64), n, 1);
      }
      M.RecordLinear(w.ple_proj, gp_, 0, P, stream_, t_off, H, n, scratch_);
      pending = {.on = true, .r0 = r0, .n = n, .wa = &w.post_ple_norm, .scale = w.layer_scalar};
    }
  }
  if (pending.on) settle(nullptr);

  if (first_out >= m && gw_submit() != 0) ThrowDevice("webgpu");
  // The head, head_rows_ output positions at a time (the logits buffer holds that many rows).
  const int V = cfg_.vocab_size;
  for (int r0 = first_out; r0 < m; r0 += head_rows_) {
    const int rows_n = std::min(head_rows_, m - r0);
    norm(stream_, cur * region + static_cast<uint32_t>(r0) * H, M.Vec(model_.final_norm()), hn_, 0,
         rows_n, H, 0, 1.0f, model_.final_norm());
    M.RecordLinear(model_.lm_head(), hn_, 0, H, logits_, 0, V, rows_n, scratch_);
    if (cfg_.final_logit_softcapping) {
      Params sc;
      const uint32_t count = static_cast<uint32_t>(rows_n) * V;
      sc.u(count).f(*cfg_.final_logit_softcapping);
      const int b[] = {logits_};
      const uint32_t groups = Groups(static_cast<int>(count), 64);
      gw_dispatch(M.pipeline(kSoftcap), b, 1, sc.data(), sc.size(), std::min(groups, 65535u),
                  (groups + 65534) / 65535, 1);
    }
    if (req.mode == OutputMode::kArgmax) {
      if (M.workgroup() && V > kArgmaxSlice) {
        // argmax_wg.wgsl's stages 0 and 1: slices of the rows on many workgroups, then their
        // best ones.
        const uint32_t parts = std::min<uint32_t>(Groups(V, kArgmaxSlice), kArgmaxParts);
        const int b[] = {logits_, ids_, amax_v_, amax_i_};
        for (uint32_t stage = 0; stage < 2; ++stage) {
          Params am;
          am.u(rows_n).u(V).u(parts).u(stage);
          gw_dispatch(M.pipeline(kArgmax), b, 4, am.data(), am.size(), stage == 0 ? parts : rows_n,
                      stage == 0 ? rows_n : 1, 1);
        }
      } else {
        Params am;
        am.u(rows_n).u(V).u(1).u(2);  // (the workgroup kernel's stage 2: each row whole)
        const int b[] = {logits_, ids_, amax_v_, amax_i_};
        gw_dispatch(M.pipeline(kArgmax), b, M.workgroup() ? 4 : 2, am.data(), am.size(),
                    M.Items(rows_n), 1, 1);
      }
      std::vector<int32_t> ids(rows_n);
      if (gw_read(ids_, 0, ids.data(), ids.size() * 4) != 0) ThrowDevice("webgpu");
      out->ids.insert(out->ids.end(), ids.begin(), ids.end());
    } else {
      std::vector<float> logits(static_cast<size_t>(rows_n) * V);
      if (gw_read(logits_, 0, logits.data(), logits.size() * 4) != 0) ThrowDevice("webgpu");
      for (int t = 0; t < rows_n; ++t) Emit(&logits[static_cast<size_t>(t) * V], req, out);
    }
  }
  window_.Commit(pos0 + m);
  history_.insert(history_.end(), tokens.begin(), tokens.end());
  for (int t = 0; t < m; ++t) {
    if (!soft.empty() && soft[t]) soft_rows_[pos0 + t].assign(soft[t], soft[t] + H);
  }
}

void WebGpuContext::Emit(const float* logits, const ForwardRequest& req, ForwardResult* out) const {
  const int V = cfg_.vocab_size;
  if (req.mode == OutputMode::kLogits) {
    out->logits.insert(out->logits.end(), logits, logits + V);
    return;
  }
  SelectFromLogits(logits, V, *req.allowed, out);
}

}  // namespace

std::shared_ptr<BackendModel> CreateWebGpuModel(const Model& model) {
  return std::make_shared<WebGpuModel>(model);
}

std::string WebGpuAdapter() { return AdapterName(); }

void WebGpuLoseDevice() { gw_destroy_device(); }

}  // namespace gemma
