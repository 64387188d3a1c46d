#include "backend/vulkan/spirv_coopmat.h"

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace gemma::vk {
namespace {

// SPIR-V opcodes and enumerants used here.
enum : uint32_t {
  kOpUndef = 1,
  kOpExtension = 10,
  kOpCapability = 17,
  kOpTypeInt = 21,
  kOpTypeFloat = 22,
  kOpTypeArray = 28,
  kOpTypeRuntimeArray = 29,
  kOpTypeStruct = 30,
  kOpTypePointer = 32,
  kOpConstantTrue = 41,
  kOpConstantFalse = 42,
  kOpConstant = 43,
  kOpSpecConstantOp = 52,
  kOpFunction = 54,
  kOpFunctionCall = 57,
  kOpLoad = 61,
  kOpStore = 62,
  kOpAccessChain = 65,
  kOpInBoundsAccessChain = 66,
  kOpCompositeConstruct = 80,
  kOpCompositeExtract = 81,
  kOpCompositeInsert = 82,
  kOpCopyObject = 83,
  kOpSelect = 169,
  kOpPhi = 245,
  kCapCoopNv = 5357,
  kOpTypeCoopNv = 5358,
  kOpLoadNv = 5359,
  kOpStoreNv = 5360,
  kOpMulAddNv = 5361,
  kOpLengthNv = 5362,
  kCapCoopKhr = 6022,
  kOpTypeCoopKhr = 4456,
  kOpLoadKhr = 4457,
  kOpStoreKhr = 4458,
  kOpMulAddKhr = 4459,
  kOpLengthKhr = 4460,
};
enum Use : uint32_t { kUseA = 0, kUseB = 1, kUseAcc = 2 };

std::vector<uint32_t> StringWords(const char* s) {
  const size_t n = std::strlen(s) + 1;  // with the terminating zero
  std::vector<uint32_t> w((n + 3) / 4, 0u);
  std::memcpy(w.data(), s, n);
  return w;
}

std::string WordsString(std::span<const uint32_t> w) {
  std::string s(reinterpret_cast<const char*>(w.data()), w.size() * 4);
  return s.substr(0, s.find('\0'));
}

struct UnionFind {
  std::map<uint32_t, uint32_t> parent;
  uint32_t Find(uint32_t x) {
    auto it = parent.find(x);
    if (it == parent.end()) return parent[x] = x;
    if (it->second == x) return x;
    return it->second = Find(it->second);
  }
  void Join(uint32_t a, uint32_t b) { parent[Find(a)] = Find(b); }
};

}  // namespace

std::vector<uint32_t> CoopMatrixNvToKhr(std::span<const uint32_t> spirv, std::string* error) {
  auto fail = [&](const std::string& why) {
    if (error) *error = why;
    return std::vector<uint32_t>{};
  };
  if (spirv.size() < 5 || spirv[0] != 0x07230203u) return fail("not a SPIR-V module");
  // Instructions as [offset, word count].
  std::vector<std::pair<size_t, uint32_t>> ins;
  for (size_t i = 5; i < spirv.size();) {
    const uint32_t wc = spirv[i] >> 16;
    if (wc == 0 || i + wc > spirv.size()) return fail("malformed instruction stream");
    ins.emplace_back(i, wc);
    i += wc;
  }
  auto op = [&](size_t k) { return spirv[ins[k].first] & 0xFFFFu; };
  auto word = [&](size_t k, uint32_t j) { return spirv[ins[k].first + j]; };

  bool nv = false;
  std::map<uint32_t, uint32_t> float_width;   // OpTypeFloat id -> width
  std::map<uint32_t, bool> f16_type;          // NV matrix type id -> f16 (else f32)
  std::map<uint32_t, bool> bool_const;        // OpConstantTrue / False
  std::map<uint32_t, uint32_t> uint_value;    // 32-bit unsigned OpConstant id -> value
  std::map<uint32_t, uint32_t> matrix_elems;  // NV matrix type id -> rows x cols
  uint32_t uint_type = 0;
  for (size_t k = 0; k < ins.size(); ++k) {
    const uint32_t o = op(k);
    if (o == kOpCapability && word(k, 1) == kCapCoopNv) nv = true;
    if (o == kOpTypeFloat) float_width[word(k, 1)] = word(k, 2);
    if (o == kOpTypeInt && word(k, 2) == 32 && word(k, 3) == 0 && !uint_type)
      uint_type = word(k, 1);
    if (o == kOpConstantTrue || o == kOpConstantFalse)
      bool_const[word(k, 2)] = o == kOpConstantTrue;
    if (o == kOpConstant && word(k, 1) == uint_type) uint_value[word(k, 2)] = word(k, 3);
    if (o == kOpTypeCoopNv) {
      if (uint_value.count(word(k, 4)) && uint_value.count(word(k, 5)))
        matrix_elems[word(k, 1)] = uint_value[word(k, 4)] * uint_value[word(k, 5)];
      const uint32_t w = float_width.count(word(k, 2)) ? float_width[word(k, 2)] : 0;
      if (w != 16 && w != 32) return fail("a cooperative matrix of neither f16 nor f32");
      f16_type[word(k, 1)] = w == 16;
    }
  }
  if (!nv) return std::vector<uint32_t>(spirv.begin(), spirv.end());
  if (!uint_type) return fail("no 32-bit unsigned integer type");

  // Types holding f16 matrices (the matrix types, arrays of them, pointers to either): each gets
  // a B copy. Ids of those types (values, variables, access chains) form classes joined through
  // the instructions that move matrices (phis, copies, selects, loads, stores, access chains,
  // composites); a class takes the use its products give it.
  std::set<uint32_t> holds;  // type ids
  for (const auto& [id, f16] : f16_type)
    if (f16) holds.insert(id);
  for (size_t k = 0; k < ins.size(); ++k) {
    const uint32_t o = op(k);
    if ((o == kOpTypeArray || o == kOpTypeRuntimeArray) && holds.count(word(k, 2)))
      holds.insert(word(k, 1));
    if (o == kOpTypePointer && holds.count(word(k, 3))) holds.insert(word(k, 1));
    if (o == kOpTypeStruct)
      for (uint32_t j = 2; j < ins[k].second; ++j)
        if (holds.count(word(k, j))) return fail("a structure holding f16 matrices");
  }
  auto value_op = [&](size_t k) {  // (not debug, annotation, mode or type instructions)
    const uint32_t o = op(k);
    return o == kOpUndef || (o >= kOpConstantTrue && (o < 71 || o > 75) && o != kOpTypeCoopNv);
  };
  UnionFind uf;
  std::set<uint32_t> tracked;  // ids of the types in `holds`
  for (size_t k = 0; k < ins.size(); ++k)
    if (value_op(k) && ins[k].second >= 3 && holds.count(word(k, 1))) tracked.insert(word(k, 2));
  for (size_t k = 0; k < ins.size(); ++k) {
    const uint32_t o = op(k), wc = ins[k].second;
    const bool moves = o == kOpPhi || o == kOpCopyObject || o == kOpSelect || o == kOpLoad ||
                       o == kOpAccessChain || o == kOpInBoundsAccessChain ||
                       o == kOpCompositeConstruct || o == kOpCompositeExtract ||
                       o == kOpCompositeInsert;
    if (moves && wc >= 3 && tracked.count(word(k, 2))) {
      for (uint32_t j = 3; j < wc; ++j)
        if (tracked.count(word(k, j))) uf.Join(word(k, 2), word(k, j));
    } else if (o == kOpStore && tracked.count(word(k, 1)) && tracked.count(word(k, 2))) {
      uf.Join(word(k, 1), word(k, 2));
    } else if (o == kOpFunctionCall) {
      for (uint32_t j = 4; j < wc; ++j)
        if (tracked.count(word(k, j))) return fail("f16 matrices passed to a function");
    }
  }
  std::map<uint32_t, uint32_t> uses;  // class root -> bit mask of uses
  for (size_t k = 0; k < ins.size(); ++k) {
    if (op(k) != kOpMulAddNv) continue;
    const uint32_t a = word(k, 3), b = word(k, 4), c = word(k, 5);
    if (!tracked.count(a) || !tracked.count(b)) return fail("a product of non-f16 operands");
    if (tracked.count(c)) return fail("an f16 accumulator");
    uses[uf.Find(a)] |= 1u << kUseA;
    uses[uf.Find(b)] |= 1u << kUseB;
  }
  for (const auto& [root, mask] : uses)
    if (mask == ((1u << kUseA) | (1u << kUseB)))
      return fail("an f16 matrix value used as both A and B");
  auto is_b = [&](uint32_t id) {
    if (!tracked.count(id)) return false;
    auto it = uses.find(uf.Find(id));
    return it != uses.end() && it->second == (1u << kUseB);
  };

  uint32_t bound = spirv[3];
  // Constants 0, 1, 2 (the matrix uses and the load / store layouts), declared before the first
  // matrix type; B copies of the types holding f16 matrices.
  const uint32_t c0 = bound++, c1 = bound++, c2 = bound++;
  std::map<uint32_t, uint32_t> b_type;
  for (uint32_t id : holds) b_type[id] = bound++;
  auto layout = [&](uint32_t col_major_id) -> int64_t {
    auto it = bool_const.find(col_major_id);
    if (it == bool_const.end()) return -1;
    return it->second ? c1 : c0;  // ColumnMajorKHR 1, RowMajorKHR 0
  };

  std::vector<uint32_t> out(spirv.begin(), spirv.begin() + 5);
  bool constants_done = false;
  for (size_t k = 0; k < ins.size(); ++k) {
    const uint32_t o = op(k), wc = ins[k].second;
    std::vector<uint32_t> w(spirv.begin() + ins[k].first, spirv.begin() + ins[k].first + wc);
    auto emit = [&](uint32_t opcode, std::vector<uint32_t> operands) {
      out.push_back(static_cast<uint32_t>(operands.size() + 1) << 16 | opcode);
      out.insert(out.end(), operands.begin(), operands.end());
    };
    if (o == kOpCapability && w[1] == kCapCoopNv) {
      emit(kOpCapability, {kCapCoopKhr});
    } else if (o == kOpExtension && WordsString(std::span<const uint32_t>(w).subspan(1)) ==
                                        "SPV_NV_cooperative_matrix") {
      emit(kOpExtension, StringWords("SPV_KHR_cooperative_matrix"));
    } else if (o == kOpTypeCoopNv) {
      if (!constants_done) {
        for (auto [id, v] : {std::pair{c0, 0u}, {c1, 1u}, {c2, 2u}})
          emit(kOpConstant, {uint_type, id, v});
        constants_done = true;
      }
      const bool f16 = f16_type[w[1]];
      emit(kOpTypeCoopKhr, {w[1], w[2], w[3], w[4], w[5], f16 ? c0 : c2});
      if (f16) emit(kOpTypeCoopKhr, {b_type[w[1]], w[2], w[3], w[4], w[5], c1});
    } else if ((o == kOpTypeArray || o == kOpTypeRuntimeArray || o == kOpTypePointer) &&
               holds.count(w[1])) {
      out.insert(out.end(), w.begin(), w.end());
      const uint32_t component = o == kOpTypePointer ? 3 : 2;
      w[1] = b_type[w[1]];
      w[component] = b_type[w[component]];
      out.insert(out.end(), w.begin(), w.end());
    } else if (o == kOpLoadNv) {
      // [type, result, pointer, stride, column-major, memory operands...]
      const int64_t l = layout(w[5]);
      if (l < 0) return fail("a load's layout is not a constant");
      uint32_t type = w[1];
      if (is_b(w[2])) type = b_type.at(type);
      std::vector<uint32_t> ops = {type, w[2], w[3], static_cast<uint32_t>(l), w[4]};
      ops.insert(ops.end(), w.begin() + 6, w.end());
      emit(kOpLoadKhr, ops);
    } else if (o == kOpStoreNv) {
      // [pointer, object, stride, column-major, memory operands...]
      const int64_t l = layout(w[4]);
      if (l < 0) return fail("a store's layout is not a constant");
      std::vector<uint32_t> ops = {w[1], w[2], static_cast<uint32_t>(l), w[3]};
      ops.insert(ops.end(), w.begin() + 5, w.end());
      emit(kOpStoreKhr, ops);
    } else if (o == kOpMulAddNv) {
      emit(kOpMulAddKhr, std::vector<uint32_t>(w.begin() + 1, w.end()));
    } else if (o == kOpLengthNv) {
      emit(kOpLengthKhr, std::vector<uint32_t>(w.begin() + 1, w.end()));
    } else if (o == kOpSpecConstantOp && wc >= 4 && w[3] == kOpLengthNv) {
      // A matrix's length as a specialization constant (GLSL's .length()): KHR does not list
      // its length instruction among those; the devices that take NV modules (NVIDIA's, 32-wide
      // subgroups) spread a matrix evenly, rows x cols / 32 elements per invocation.
      auto it = matrix_elems.find(w[4]);
      if (it == matrix_elems.end() || it->second % 32 != 0)
        return fail("the length of a matrix of unknown size");
      emit(kOpConstant, {w[1], w[2], it->second / 32});
    } else {
      // Other ids of the types holding f16 matrices (variables, access chains, phis, loads...)
      // take their class's.
      if (value_op(k) && wc >= 3 && holds.count(w[1]) && is_b(w[2])) w[1] = b_type.at(w[1]);
      if (o == kOpFunction && holds.count(w[1])) return fail("a function returning matrices");
      out.insert(out.end(), w.begin(), w.end());
    }
  }
  out[3] = bound;
  return out;
}

}  // namespace gemma::vk
