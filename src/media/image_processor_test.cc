// Gemma4ImageProcessor against transformers 5.17 (torchvision's uint8 antialiased bicubic on an
// AVX-512 CPU): the resized pixels' SHA-256, sizes and soft-token counts for every golden case.
#include "media/image_processor.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "gemma/error.h"

namespace gemma::media {
namespace {

const std::string kGoldenDir = std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/vision/";

std::string Sha256Hex(const std::vector<uint8_t>& b) {
  unsigned char md[32];
  unsigned int n = 0;
  EVP_Digest(b.data(), b.size(), md, &n, EVP_sha256(), nullptr);
  std::string s;
  char buf[3];
  for (unsigned i = 0; i < n; ++i) {
    snprintf(buf, sizeof(buf), "%02x", md[i]);
    s += buf;
  }
  return s;
}

TEST(ImageProcessor, MatchesTransformers) {
  std::ifstream f(kGoldenDir + "goldens.json");
  const nlohmann::json g = nlohmann::json::parse(f);
  int n = 0;
  for (const auto& c : g["processor"]) {
    const std::string name = c["image"];
    const int budget = c["budget"];
    SCOPED_TRACE(name + " @" + std::to_string(budget));
    const Image img = LoadImageFile(kGoldenDir + "images/" + name);
    const PatchedImage p = PreprocessImage(img, budget);
    EXPECT_EQ(p.height, c["height"].get<int>());
    EXPECT_EQ(p.width, c["width"].get<int>());
    EXPECT_EQ(p.soft_tokens, c["soft_tokens"].get<int>());
    EXPECT_EQ(p.max_patches, c["max_patches"].get<int>());
    EXPECT_EQ(Sha256Hex(p.resized.rgb), c["sha256"].get<std::string>());
    // pixel_values are u8 * float32(1/255) (the script checked that form against transformers).
    const int pd = 16 * 16 * 3;
    for (int i : {0, p.patches() - 1}) {
      const int py = i / p.patches_w, px = i % p.patches_w;
      const uint8_t v =
          p.resized.rgb[(static_cast<size_t>(py * 16 + 15) * p.width + px * 16 + 15) * 3 + 2];
      EXPECT_EQ(p.pixels[static_cast<size_t>(i) * pd + pd - 1],
                v * static_cast<float>(1.0 / 255.0));
    }
    ++n;
  }
  EXPECT_GE(n, 20);
}

TEST(ImageProcessor, TargetSizeEdgeCases) {
  // A 1-pixel strip: one side rounds to 0 -> 48, the other capped at budget * 48.
  EXPECT_EQ(TargetSize(1, 500, 16, 630, 3).width, 3360);
  EXPECT_EQ(TargetSize(1, 500, 16, 630, 3).height, 48);
  EXPECT_EQ(TargetSize(500, 1, 16, 630, 3).height, 3360);
  EXPECT_EQ(TargetSize(1, 1, 16, 630, 3).height, 384);  // tiny images are upscaled (8 x 48)
  EXPECT_THROW(PreprocessImage(Image{1, 1, {0, 0, 0}}, 100), Error);  // not a supported budget
}

TEST(ImageProcessor, DigestFollowsPixelsGeometryAndBudget) {
  Image a{64, 48, std::vector<uint8_t>(64 * 48 * 3, 7)};
  const auto d70 = PreprocessImage(a, 70).digest;
  EXPECT_EQ(PreprocessImage(a, 70).digest, d70);
  EXPECT_NE(PreprocessImage(a, 140).digest, d70);
  a.rgb[5] = 8;
  EXPECT_NE(PreprocessImage(a, 70).digest, d70);
}

}  // namespace
}  // namespace gemma::media
