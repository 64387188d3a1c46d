#include "media/image_processor.h"


#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/sha256.h"
#include "gemma/error.h"

namespace gemma::media {
namespace {

// HelperInterpCubic::aa_filter (Keys, a = -0.5), in torch's operation order.
double CubicFilter(double x) {
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

struct AxisWeights {
  int ksize = 0;
  std::vector<int> start, size;
  std::vector<int16_t> w;  // [out, ksize]
  int precision = 0;
};

// _compute_indices_min_size_weights_aa + _compute_index_ranges_int16_weights (align_corners
// false, no scale factor): double weights normalized per output, then int16 with the largest
// precision that keeps the biggest weight under 2^15.
AxisWeights ComputeWeights(int in, int out) {
  AxisWeights a;
  const double scale = static_cast<double>(in) / out;
  const double support = scale >= 1.0 ? 2.0 * scale : 2.0;
  a.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  std::vector<double> wf(static_cast<size_t>(out) * a.ksize, 0.0);
  a.start.resize(out);
  a.size.resize(out);
  double wt_max = 0.0;
  for (int i = 0; i < out; ++i) {
    const double center = scale * (i + 0.5);
    const int64_t xmin = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    int64_t xsize = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in) - xmin;
    xsize = std::clamp<int64_t>(xsize, 0, a.ksize);
    double* w = &wf[static_cast<size_t>(i) * a.ksize];
    double total = 0.0;
    for (int64_t j = 0; j < xsize; ++j) {
      w[j] = CubicFilter((j + xmin - center + 0.5) * invscale);
      total += w[j];
    }
    if (total != 0.0) {
      for (int64_t j = 0; j < xsize; ++j) {
        w[j] /= total;
        wt_max = std::max(wt_max, w[j]);
      }
    }
    a.start[i] = static_cast<int>(xmin);
    a.size[i] = static_cast<int>(xsize);
  }
  int p = 0;
  for (p = 0; p < 22; ++p) {
    const int next = static_cast<int>(0.5 + wt_max * (1 << (p + 1)));
    if (next >= (1 << 15)) break;
  }
  a.precision = p;
  a.w.resize(wf.size());
  for (size_t k = 0; k < wf.size(); ++k) {
    const double v = wf[k] * (1 << p);
    a.w[k] = static_cast<int16_t>(v < 0 ? static_cast<int>(-0.5 + v) : static_cast<int>(0.5 + v));
  }
  return a;
}

uint8_t Clip255(int32_t v) { return static_cast<uint8_t>(std::clamp(v, 0, 255)); }

}  // namespace

bool IsVisionBudget(int budget) {
  return std::find(std::begin(kVisionBudgets), std::end(kVisionBudgets), budget) !=
         std::end(kVisionBudgets);
}

ImageGeometry TargetSize(int height, int width, int patch_size, int max_patches, int pooling) {
  const double total_px = static_cast<double>(height) * width;
  const double target_px = static_cast<double>(max_patches) * patch_size * patch_size;
  const double factor = std::sqrt(target_px / total_px);
  const int side = pooling * patch_size;
  int64_t th = static_cast<int64_t>(std::floor(factor * height / side)) * side;
  int64_t tw = static_cast<int64_t>(std::floor(factor * width / side)) * side;
  if (th == 0 && tw == 0) {
    throw Error(ErrorCode::kInvalidArgument, "the image would resize to 0 x 0");
  }
  const int64_t max_side = static_cast<int64_t>(max_patches / (pooling * pooling)) * side;
  if (th == 0) {
    th = side;
    tw = std::min<int64_t>(
        static_cast<int64_t>(std::floor(static_cast<double>(width) / height)) * side, max_side);
  } else if (tw == 0) {
    tw = side;
    th = std::min<int64_t>(
        static_cast<int64_t>(std::floor(static_cast<double>(height) / width)) * side, max_side);
  }
  if (static_cast<double>(th) * tw > target_px) {
    throw Error(ErrorCode::kInvalidArgument,
                "resizing " + std::to_string(height) + "x" + std::to_string(width) + " to " +
                    std::to_string(th) + "x" + std::to_string(tw) + " exceeds " +
                    std::to_string(max_patches) + " patches");
  }
  return {static_cast<int>(th), static_cast<int>(tw)};
}

Image ResizeBicubicAA(const Image& in, int oh, int ow) {
  Image cur = in;
  if (ow != cur.width) {
    const AxisWeights a = ComputeWeights(cur.width, ow);
    Image out;
    out.width = ow;
    out.height = cur.height;
    out.rgb.resize(static_cast<size_t>(ow) * cur.height * 3);
    const int32_t half = 1 << (a.precision - 1);
    for (int y = 0; y < cur.height; ++y) {
      const uint8_t* row = &cur.rgb[static_cast<size_t>(y) * cur.width * 3];
      uint8_t* orow = &out.rgb[static_cast<size_t>(y) * ow * 3];
      for (int x = 0; x < ow; ++x) {
        const int16_t* w = &a.w[static_cast<size_t>(x) * a.ksize];
        for (int c = 0; c < 3; ++c) {
          int32_t acc = half;
          for (int j = 0; j < a.size[x]; ++j) acc += w[j] * int32_t{row[(a.start[x] + j) * 3 + c]};
          orow[x * 3 + c] = Clip255(acc >> a.precision);
        }
      }
    }
    cur = std::move(out);
  }
  if (oh != cur.height) {
    const AxisWeights a = ComputeWeights(cur.height, oh);
    Image out;
    out.width = cur.width;
    out.height = oh;
    out.rgb.resize(static_cast<size_t>(cur.width) * oh * 3);
    const int32_t half = 1 << (a.precision - 1);
    const size_t stride = static_cast<size_t>(cur.width) * 3;
    for (int y = 0; y < oh; ++y) {
      const int16_t* w = &a.w[static_cast<size_t>(y) * a.ksize];
      uint8_t* orow = &out.rgb[y * stride];
      for (size_t i = 0; i < stride; ++i) {
        int32_t acc = half;
        for (int j = 0; j < a.size[y]; ++j)
          acc += w[j] * int32_t{cur.rgb[(a.start[y] + j) * stride + i]};
        orow[i] = Clip255(acc >> a.precision);
      }
    }
    cur = std::move(out);
  }
  return cur;
}

PatchedImage PreprocessImage(const Image& image, int budget, int patch_size, int pooling) {
  if (!IsVisionBudget(budget)) {
    throw Error(ErrorCode::kInvalidArgument, "vision budget " + std::to_string(budget) +
                                                 " is not one of 70, 140, 280, 560, 1120");
  }
  if (image.width <= 0 || image.height <= 0)
    throw Error(ErrorCode::kInvalidArgument, "the image has zero size");
  PatchedImage p;
  p.budget = budget;
  p.patch_size = patch_size;
  p.pooling = pooling;
  p.max_patches = budget * pooling * pooling;
  const ImageGeometry g = TargetSize(image.height, image.width, patch_size, p.max_patches, pooling);
  p.height = g.height;
  p.width = g.width;
  p.resized = (g.height == image.height && g.width == image.width)
                  ? image
                  : ResizeBicubicAA(image, g.height, g.width);
  p.patches_h = g.height / patch_size;
  p.patches_w = g.width / patch_size;
  p.soft_tokens = p.patches() / (pooling * pooling);
  const int pd = patch_size * patch_size * 3;
  p.pixels.resize(static_cast<size_t>(p.patches()) * pd);
  const float inv255 = static_cast<float>(1.0 / 255.0);
  for (int py = 0; py < p.patches_h; ++py) {
    for (int px = 0; px < p.patches_w; ++px) {
      float* dst = &p.pixels[(static_cast<size_t>(py) * p.patches_w + px) * pd];
      for (int y = 0; y < patch_size; ++y) {
        const uint8_t* src =
            &p.resized
                 .rgb[((static_cast<size_t>(py) * patch_size + y) * p.width + px * patch_size) * 3];
        for (int i = 0; i < patch_size * 3; ++i) dst[y * patch_size * 3 + i] = src[i] * inv255;
      }
    }
  }
  const int32_t geo[6] = {p.height, p.width, patch_size, pooling, budget, 3};
  Sha256 sha;
  sha.Update(geo, sizeof(geo));
  sha.Update(p.resized.rgb.data(), p.resized.rgb.size());
  p.digest = sha.Final();
  return p;
}

}  // namespace gemma::media
