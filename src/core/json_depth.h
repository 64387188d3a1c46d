// Nesting limits for JSON. Every JSON document the engine reads (config.json, tokenizer.json,
// safetensors headers, chat messages, JSON Schemas) nests at most kMaxJsonDepth containers. The
// check runs before any recursive code sees the document (nlohmann's parser is iterative, but its
// copy, dump and comparison recurse, as do our compilers), so a hostile file is a typed error,
// never a stack overflow.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gemma {

// Containers ([ or {) open at once; [[1]] has depth 2. Far above any real config, schema or
// message list (the deepest we know of, tool schemas, nest about 10), far below what the stack
// holds.
inline constexpr int kMaxJsonDepth = 256;

// Byte offset of the first '[' or '{' in `text` that opens container number max_depth + 1 (outside
// strings), or std::string::npos when the text stays within max_depth. Linear, no recursion, no
// validation of anything else (the parser does that).
size_t JsonTextDepthExceeded(std::string_view text, int max_depth = kMaxJsonDepth);

// Whether a parsed JSON value (nlohmann::json or ordered_json) nests deeper than max_depth.
// Iterative: safe on values built by API callers to any depth.
template <class Json>
bool JsonValueDepthExceeds(const Json& root, int max_depth = kMaxJsonDepth) {
  using It = typename Json::const_iterator;
  if (!root.is_structured()) return false;
  if (max_depth < 1) return true;
  std::vector<std::pair<It, It>> stack;
  stack.emplace_back(root.cbegin(), root.cend());
  while (!stack.empty()) {
    auto& [it, end] = stack.back();
    if (it == end) {
      stack.pop_back();
      continue;
    }
    const Json& v = *it;
    ++it;
    if (v.is_structured()) {
      if (static_cast<int>(stack.size()) >= max_depth) return true;
      stack.emplace_back(v.cbegin(), v.cend());
    }
  }
  return false;
}

}  // namespace gemma
