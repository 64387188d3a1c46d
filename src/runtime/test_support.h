// Helpers shared by the runtime's tests (not part of gemma_runtime).
#pragma once

#include <string>

#include "gemma/engine.h"

namespace gemma {

// A checkpoint under tests/goldens/model/.
inline std::string Fixture(const std::string& name) {
  return std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/model/" + name;
}

// n greedy tokens, end of sequence ignored.
inline GenerateOptions Greedy(int n) {
  GenerateOptions o;
  o.max_new_tokens = n;
  o.ignore_eos = true;
  return o;
}

}  // namespace gemma
