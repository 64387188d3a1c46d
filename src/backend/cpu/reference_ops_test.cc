// EmbeddingRowFast against EmbeddingRow: the same bits for every kind, scale-block layout and row.
#include "backend/cpu/reference_ops.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace gemma {
namespace {

struct TestEmbedding {
  Embedding e;
  std::vector<uint8_t> data;
  std::vector<float> scales;
};

TestEmbedding MakeEmbedding(WeightKind kind, int rows, int cols, int blocks, uint32_t seed) {
  std::mt19937 rng(seed);
  TestEmbedding t;
  Embedding& e = t.e;
  e.kind = kind;
  e.rows = rows;
  e.cols = cols;
  e.scale_blocks = blocks;
  e.embed_scale = std::uniform_real_distribution<float>(0.5f, 40.0f)(rng);
  switch (kind) {
    case WeightKind::kQ2:
      e.row_bytes = (cols + 3) / 4;
      break;
    case WeightKind::kQ4:
      e.row_bytes = (cols + 1) / 2;
      break;
    case WeightKind::kQ8:
      e.row_bytes = cols;
      break;
    case WeightKind::kBF16:
    case WeightKind::kF16:
      e.row_bytes = 2 * size_t(cols);
      break;
    default:
      e.row_bytes = 4 * size_t(cols);
      break;
  }
  t.data.resize(e.row_bytes * rows);
  for (uint8_t& b : t.data) b = static_cast<uint8_t>(rng());
  if (kind == WeightKind::kF32) {
    // (finite floats only)
    for (size_t i = 0; i < t.data.size() / 4; ++i) {
      const float v = std::normal_distribution<float>(0.0f, 3.0f)(rng);
      std::memcpy(t.data.data() + 4 * i, &v, 4);
    }
  }
  t.scales.resize(size_t(rows) * blocks);
  // scales spanning magnitudes, so products round differently per block
  for (float& s : t.scales)
    s = std::ldexp(std::uniform_real_distribution<float>(0.5f, 1.0f)(rng),
                   std::uniform_int_distribution<int>(-12, 3)(rng));
  e.data = t.data.data();
  e.scale = t.scales.data();
  return t;
}

TEST(ReferenceOps, EmbeddingRowFastMatchesEmbeddingRowBitExactly) {
  struct Case {
    WeightKind kind;
    int cols, blocks;
  };
  // Blocks of odd lengths put a byte's codes in two blocks (int4 block 3, int2 blocks 5 and 7).
  const Case cases[] = {
      {WeightKind::kQ4, 96, 1},   {WeightKind::kQ4, 96, 3},  {WeightKind::kQ4, 12, 4},
      {WeightKind::kQ4, 33, 11},  {WeightKind::kQ2, 64, 2},  {WeightKind::kQ2, 35, 7},
      {WeightKind::kQ2, 20, 4},   {WeightKind::kQ8, 48, 3},  {WeightKind::kQ8, 7, 1},
      {WeightKind::kBF16, 40, 1}, {WeightKind::kF16, 40, 1}, {WeightKind::kF32, 24, 1}};
  uint32_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE("kind " + std::to_string(static_cast<int>(c.kind)) + " cols " +
                 std::to_string(c.cols) + " blocks " + std::to_string(c.blocks));
    const TestEmbedding t = MakeEmbedding(c.kind, 9, c.cols, c.blocks, seed++);
    std::vector<float> want(c.cols), got(c.cols);
    for (int id = 0; id < t.e.rows; ++id) {
      ref::EmbeddingRow(t.e, id, want.data());
      std::fill(got.begin(), got.end(), -1.0f);
      ref::EmbeddingRowFast(t.e, id, got.data());
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * c.cols)) << "row " << id;
    }
  }
}

}  // namespace
}  // namespace gemma
