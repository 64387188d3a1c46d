// Schema and regex corpora shared by tests and benchmarks (part of gemma_constrain_testutil).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gemma::constrain::testing {

// Hand-written schemas covering every supported keyword, then `random_count` random schemas over
// the supported subset (objects, arrays, anyOf, disjoint oneOf, $defs, patterns, bounds, enums).
std::vector<nlohmann::ordered_json> SchemaCorpus(int random_count, uint64_t seed);

// Regexes of the kind people constrain outputs with (dates, emails, ids, choices, free text).
std::vector<std::string> RegexCorpus();

}  // namespace gemma::constrain::testing
