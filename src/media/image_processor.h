// Gemma4ImageProcessor (transformers 5.17) in C++: aspect-ratio-preserving size under a soft-token
// budget, torchvision's antialiased bicubic resize on uint8 (bit-exact: torch's integer weights),
// rescale by 1/255, 16x16 patches in row-major order with (x, y) positions.
//
// Only the real patches are kept: transformers pads to budget * pooling^2 patches with zeros and
// position (-1, -1), and the vision tower masks those keys and drops those rows, so they change
// nothing.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "media/image.h"

namespace gemma::media {

// The budgets Gemma4ImageProcessor accepts (max_soft_tokens).
inline constexpr int kVisionBudgets[] = {70, 140, 280, 560, 1120};
inline constexpr int kDefaultVisionBudget = 280;
bool IsVisionBudget(int budget);

struct ImageGeometry {
  int height = 0, width = 0;  // resized
};
// get_aspect_ratio_preserving_size; Error(kInvalidArgument) where transformers raises.
ImageGeometry TargetSize(int height, int width, int patch_size, int max_patches, int pooling);

// torchvision.transforms.v2.functional.resize(uint8, [h, w], BICUBIC, antialias=True) on the CPU:
// horizontal pass first, then vertical, each in integer arithmetic with torch's int16 weights
// and per-axis precision, a uint8 image between the passes.
Image ResizeBicubicAA(const Image& in, int out_height, int out_width);

struct PatchedImage {
  int budget = 0;  // max_soft_tokens
  int patch_size = 16;
  int pooling = 3;
  int height = 0, width = 0;  // resized image
  int patches_h = 0, patches_w = 0;
  int soft_tokens = 0;        // patches / pooling^2
  int max_patches = 0;        // budget * pooling^2 (transformers' padded length)
  Image resized;              // uint8 RGB after the resize
  std::vector<float> pixels;  // [patches, patch_size^2 * 3], [py][px][c], value u8 * f32(1/255)
  // SHA-256 over the resized pixels, their geometry, the patch/pooling sizes and the budget: the
  // media identity in prefix reuse.
  std::array<uint8_t, 32> digest{};
  int patches() const { return patches_h * patches_w; }
};

// Error(kInvalidArgument) for a budget not in kVisionBudgets.
PatchedImage PreprocessImage(const Image& image, int budget = kDefaultVisionBudget,
                             int patch_size = 16, int pooling = 3);

}  // namespace gemma::media
