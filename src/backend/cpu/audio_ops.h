// The Gemma 4 audio tower (USM conformer) on the CPU, written for exactness against transformers
// 5.17 (float32, sdpa attention):
//  - SSCP: two Conv2d(3x3, stride 2, pad 1, no bias) over (time, mel), each input multiplied by the
//    frame mask first, LayerNorm over channels (weight, no bias), ReLU; the mask halves with each
//    stride (mask[::2]); (time, freq, channel) flattened into input_proj_linear;
//  - conformer layers: FF1 (half-step residual), chunked local self-attention (each query sees the
//    keys 0 <= q - k < context_left - 1 that are valid, logits q.k + q.R[q - k] with R the
//    relative_k_proj of sinusoidal positions, q scaled by head_dim^-0.5 / ln 2 * softplus
//    (per_dim_scale), k by ln(1 + e) / ln 2, softcap 50), light conv (GLU, causal depthwise conv,
//    RMSNorm, SiLU), FF2, output RMSNorm; clamps at +-gradient_clipping where transformers has
//    them;
//  - output_proj (with bias) and embed_audio (RMSNorm without weight, projection).
//
// Only valid frames are computed past the SSCP: they are a prefix, and nothing after the SSCP lets
// a later frame reach an earlier one (causal attention and convolution), so the padding frames
// transformers carries change none of them. Dot products accumulate in double (reference_ops'
// contract); the element-wise steps follow transformers' f32 formulas.
#pragma once

#include <vector>

#include "backend/backend.h"
#include "backend/cpu/vision_ops.h"
#include "model/model.h"

namespace gemma::ref {

// One chunk's log-mel frames -> the tower output before embed_audio at the valid frames:
// [soft tokens, output_proj_dims]. `kernels` supplies the linears (a faster backend's).
std::vector<float> AudioTowerForward(const AudioTower& tower, const AudioMel& mel,
                                     const VisionKernels& kernels = VisionKernels());
// The attention's inputs that depend on the weights alone (the Vulkan tower computes the rest of
// the attention itself): the sinusoidal relative positions 0 .. context_left - 1 [context_left,
// hidden] (f32, as transformers' Gemma4AudioRelPositionalEncoding), which relative_k_proj turns
// into the relative keys, and softplus(per_dim_scale) (torch's: beta 1, threshold 20).
std::vector<float> AudioRelativePositions(const AudioConfig& c);
std::vector<float> AudioDimScale(const AudioLayerWeights& w);
// embed_audio on n rows: [n, text hidden].
std::vector<float> EmbedAudio(const AudioTower& tower, const std::vector<float>& x, int n,
                              const VisionKernels& kernels = VisionKernels());

}  // namespace gemma::ref
