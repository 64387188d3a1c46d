// A generation's Result as one JSON object: text, raw_text, reasoning, tool_calls, parse_errors,
// tokens, stop_reason, constraint_complete (with a constraint), logprobs (when requested),
// resolved_config and telemetry. The shape of `gemma-engine run --json` and of the WebAssembly
// library's results (web/, docs/web.md).
#pragma once

#include <nlohmann/json.hpp>

#include "gemma/engine.h"

namespace gemma {

nlohmann::json ResultJson(const Result& r, const GenerateOptions& g);

// Whether a constrained output is complete for its constraint (true without one): a generation
// cut short by max_new_tokens or a cancel is not.
bool ConstraintComplete(const GenerateOptions& g, const Result& r);

}  // namespace gemma
