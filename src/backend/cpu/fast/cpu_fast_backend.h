// The fast CPU backend: the reference backend's algorithm with Highway SIMD kernels, integer dot
// products for QAT weights, a thread pool, and buffers reused across calls (no allocation per
// decoded token once the caches have grown).
//
// Numerics: QAT linears are bit-identical to the reference (exact integer accumulation, same
// epilogue); GELU of SRQ outputs comes from per-layer tables of the reference's GeluTanh, RoPE from
// per-position tables of the reference's formula. Dense linears, norms and attention accumulate in
// f64 in a different order than the reference, so f32 results can differ from it in rare last-bit
// cases; where such a value feeds an SRQ quantization the rounding can flip (tests/golden_util.h:
// IsSrqFlip). Tested against the reference and the transformers goldens in cpu_fast_backend_test.
//
// Memory: the backend reads its own copy of the linears, in transparent huge pages
// (weight_copy.h: 758 MiB for E2B QAT, held once by the BackendModel: shared_bytes), not the mapped
// checkpoint. The vision tower's linears are kept as f32 GEMM panels from the first image on
// (towers.h: 611 MB for E2B's tower, also counted in shared_bytes).
// Work: positions whose logits a request does not return skip the trailing layers that only read
// other layers' caches (E2B: layers 15-34); the returned logits and the caches are unchanged.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/vision_ops.h"
#include "model/model.h"

namespace gemma {

class ThreadPool;

// threads: worker threads including the caller; 0 = one per hardware thread. The model holds the
// weight copy and the pool; its contexts share both and take turns on the pool.
std::shared_ptr<BackendModel> CreateCpuFastModel(const Model& model, int threads = 0);
std::unique_ptr<Backend> CreateCpuFastBackend(const Model& model, const BackendOptions& options,
                                              int threads = 0);

// The vision and audio towers (with embed_vision / embed_audio) on `pool` with this backend's
// kernels (towers.h), for the Vulkan backend's towers; this backend's models run the same vision
// tower with its weight panels and buffers kept across images. Error kUnsupported when the model
// has no such tower.
void FastEncodeImage(const Model& model, ThreadPool& pool, const VisionPatches& image,
                     std::vector<float>* soft_tokens);
void FastEncodeAudio(const Model& model, ThreadPool& pool, const AudioMel& audio,
                     std::vector<float>* soft_tokens);
// Those towers' kernels on `pool` (f32_ops: the attention and GELU in f32, as for dense vision
// towers; else as the reference computes them).
std::unique_ptr<ref::VisionKernels> MakeFastTowerKernels(ThreadPool& pool, bool f32_ops);
// The f32_ops a vision tower takes: dense towers yes, QAT towers no (their SRQ steps turn f32
// rounding differences into int8 flips).
bool FastVisionF32Ops(const VisionTower& tower);

}  // namespace gemma
