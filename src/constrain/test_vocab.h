// Vocabularies and a constrained sampler for tests and benchmarks (gemma_constrain_testutil, not
// part of gemma_constrain).
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "constrain/constraint.h"
#include "constrain/vocabulary.h"

namespace gemma::constrain::testing {

// A small synthetic vocabulary laid out like Gemma 4's specials: 0 <pad>, 1 <eos>, 2 <bos>,
// 48/49 tool call open/close, 50/51 tool response, 52 <|"|>, 100/101 channel, 105/106 turn; ids
// 300..555 are the 256 single bytes; then multi-byte tokens, including UTF-8 characters and pieces
// of them, JSON punctuation runs, words and digits.
std::shared_ptr<Vocabulary> SyntheticVocab();

// A JSON Schema constraint over SyntheticVocab(). By value: a caller's temporary moves in (copying
// a 100,000-deep document would recurse that deep).
std::shared_ptr<const Constraint> CompileSchema(nlohmann::ordered_json schema,
                                                Whitespace ws = Whitespace::kNone);

// Bit `id` of a token mask.
inline bool Bit(const uint64_t* mask, int32_t id) { return (mask[id >> 6] >> (id & 63)) & 1; }

// The real Gemma 3 vocabulary from tokenizer.json (262,144 BPE pieces plus added tokens; pieces
// with U+2581 -> ' ', <0xHH> byte fallback -> the byte, added tokens -> their content; special =
// the file's special added tokens plus the Gemma 4 control ids 46..52, 98, 100, 101, 105, 106,
// which stand in for Gemma 4's single-token specials). Returns nullptr if the file is missing.
std::shared_ptr<Vocabulary> LoadGemmaVocab(const std::string& tokenizer_json_path);

// LoadGemmaVocab once per process (tests in several files share it).
std::shared_ptr<Vocabulary> CachedGemmaVocab(const std::string& tokenizer_json_path);

// GEMMA_SOURCE_DIR-relative default path of the npm test asset.
std::string DefaultGemmaTokenizerPath(const std::string& source_dir);

struct Generated {
  std::string text;  // bytes of the accepted tokens (specials as their vocabulary text), no stop id
  std::vector<int32_t> tokens;
  bool complete = false;
};

// Samples a constrained output: uniform among allowed tokens for `budget` tokens (stopping with
// probability stop_p whenever a stop id is allowed), then steers to the shortest completion with
// single-byte and special tokens. mask_us, if given, receives the wall time of every
// AllowedTokens(); mask_cpu_us its thread CPU time (minus the clock's own cost).
Generated Generate(const std::shared_ptr<const Constraint>& c, std::mt19937_64* rng, int budget,
                   double stop_p = 0.2, std::vector<double>* mask_us = nullptr,
                   std::vector<double>* mask_cpu_us = nullptr);

}  // namespace gemma::constrain::testing
