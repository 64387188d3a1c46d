// The NV -> KHR cooperative-matrix rewrite of the shipped modules (no device needed).
#include "backend/vulkan/spirv_coopmat.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "backend/vulkan/vk_device.h"

namespace gemma::vk {
namespace {

struct Instr {
  uint32_t op;
  std::vector<uint32_t> w;  // the whole instruction
};

std::vector<Instr> Parse(std::span<const uint32_t> m) {
  std::vector<Instr> out;
  for (size_t i = 5; i < m.size();) {
    const uint32_t wc = m[i] >> 16;
    EXPECT_GT(wc, 0u);
    if (wc == 0) break;
    out.push_back({m[i] & 0xFFFFu, std::vector<uint32_t>(m.begin() + i, m.begin() + i + wc)});
    i += wc;
  }
  return out;
}

// Every NV instruction is gone; every product takes an A-use f16 matrix, a B-use f16 matrix and an
// accumulator of the result's type; every load of a B operand is typed B.
void CheckRewrite(const char* name) {
  SCOPED_TRACE(name);
  const std::span<const uint32_t> nv = SpirvModule(name);
  ASSERT_FALSE(nv.empty());
  std::string why;
  const std::vector<uint32_t> khr = CoopMatrixNvToKhr(nv, &why);
  ASSERT_FALSE(khr.empty()) << why;
  EXPECT_EQ(khr[0], 0x07230203u);
  const std::vector<Instr> ins = Parse(khr);
  std::map<uint32_t, uint32_t> consts, use_of_type, type_of;
  std::set<uint32_t> ids;
  int products = 0, loads = 0;
  for (const Instr& i : ins) {
    EXPECT_FALSE(i.op >= 5357 && i.op <= 5362) << "NV opcode " << i.op;
    if (i.op == 43) consts[i.w[2]] = i.w[3];
    if (i.op == 4456) use_of_type[i.w[1]] = consts.at(i.w[6]);
    if (i.w.size() >= 3 && use_of_type.count(i.w[1])) type_of[i.w[2]] = i.w[1];
    if (i.op == 4457) {
      ++loads;
      EXPECT_LE(consts.at(i.w[4]), 1u);  // RowMajor / ColumnMajor
    }
    if (i.op == 4459) {
      ++products;
      ASSERT_TRUE(type_of.count(i.w[3]) && type_of.count(i.w[4]) && type_of.count(i.w[5]))
          << i.w[3] << " " << i.w[4] << " " << i.w[5];
      EXPECT_EQ(use_of_type.at(type_of.at(i.w[3])), 0u);
      EXPECT_EQ(use_of_type.at(type_of.at(i.w[4])), 1u);
      EXPECT_EQ(use_of_type.at(i.w[1]), 2u);
      EXPECT_EQ(type_of.at(i.w[5]), i.w[1]);
    }
    if (i.op == 17) EXPECT_NE(i.w[1], 5357u);
  }
  EXPECT_GT(products, 0);
  EXPECT_GT(loads, 0);
  EXPECT_LT(khr[3], 0x400000u);  // bound
}

TEST(SpirvCoopMatrix, RewritesTheShippedMatrixUnitModules) {
  for (const char* m : {"linear_cm", "linear_cmd", "linear_cm_small", "linear_cmd_small",
                        "attention_cm1", "attention_cm4", "attention_cm8"})
    CheckRewrite(m);
}

TEST(SpirvCoopMatrix, LeavesOtherModulesAlone) {
  const std::span<const uint32_t> m = SpirvModule("resnorm");
  ASSERT_FALSE(m.empty());
  std::string why;
  const std::vector<uint32_t> out = CoopMatrixNvToKhr(m, &why);
  EXPECT_EQ(out, std::vector<uint32_t>(m.begin(), m.end()));
}

TEST(SpirvCoopMatrix, RefusesAValueUsedAsBothOperands) {
  const std::span<const uint32_t> nv = SpirvModule("linear_cm");
  std::vector<uint32_t> m(nv.begin(), nv.end());
  // The first product's B operand replaced by its A operand.
  for (size_t i = 5; i < m.size(); i += m[i] >> 16) {
    if ((m[i] & 0xFFFFu) == 5361) {
      m[i + 4] = m[i + 3];
      break;
    }
  }
  std::string why;
  EXPECT_TRUE(CoopMatrixNvToKhr(m, &why).empty());
  EXPECT_NE(why.find("both A and B"), std::string::npos) << why;
  EXPECT_TRUE(CoopMatrixNvToKhr(std::vector<uint32_t>{1, 2, 3}, &why).empty());
}

}  // namespace
}  // namespace gemma::vk
