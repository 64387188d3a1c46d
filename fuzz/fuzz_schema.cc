// The JSON Schema and tool-declaration compilers (constrain::Constraint::Compile), as the engine
// calls them: schema text parsed with nlohmann (no depth pre-check: Compile must guard itself),
// compiled against a small Gemma-like vocabulary, then a short input-seeded walk through the
// constraint. A schema walk that completes must be JSON that nlohmann parses; a tool-call walk
// that completes must parse as tool calls with no malformed block (chat/output_parser).
#include <fuzzer/FuzzedDataProvider.h>

#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "chat/output_parser.h"
#include "constrain/constraint.h"
#include "constrain/test_vocab.h"
#include "fuzz_util.h"
#include "gemma/error.h"

namespace c = gemma::constrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::shared_ptr<c::Vocabulary> vocab = c::testing::SyntheticVocab();
  FuzzedDataProvider in(data, size);
  c::ConstraintOptions o;
  const bool tools = in.ConsumeBool();
  o.kind = tools ? c::ConstraintKind::kToolCalls : c::ConstraintKind::kJsonSchema;
  o.require_tool_call = in.ConsumeBool();
  o.whitespace = static_cast<c::Whitespace>(in.ConsumeIntegralInRange<int>(0, 2));
  o.max_depth = in.ConsumeIntegralInRange<int>(0, 24);
  const uint32_t seed = in.ConsumeIntegral<uint32_t>();
  const std::string text = in.ConsumeRemainingBytesAsString();
  nlohmann::ordered_json doc = nlohmann::ordered_json::parse(text, nullptr, false);
  if (doc.is_discarded()) return 0;
  (tools ? o.tools : o.schema) = std::move(doc);
  std::shared_ptr<const c::Constraint> con;
  try {
    con = c::Constraint::Compile(vocab, o);
  } catch (const gemma::Error&) {
    return 0;
  }
  // A bounded walk: uniform among the allowed tokens, a stop id with probability 1/4 where one is
  // allowed. (testing::Generate steers to completion without a step bound: too slow under ASan on
  // schemas such as {"minLength": 100000}.)
  std::mt19937_64 rng(seed);
  c::ConstraintState st(con);
  std::string out;
  bool complete = false;
  std::vector<int32_t> allowed;
  try {
    for (int step = 0; step < 64 && !complete; ++step) {
      st.AllowedIds(&allowed);
      GEMMA_FUZZ_CHECK(!allowed.empty(), "AllowedIds empty without a dead-end error");
      int32_t pick = allowed[rng() % allowed.size()];
      if (st.CanStop() && rng() % 4 == 0) {
        for (int32_t id : o.stop_ids) {
          if (st.IsAllowed(id)) pick = id;
        }
      }
      st.Accept(pick);
      complete = st.IsComplete();
      if (!complete) out += vocab->bytes(pick);
    }
  } catch (const gemma::Error&) {
    return 0;  // a dead end (an unsatisfiable schema) is reported as an error, not a crash
  }
  if (!complete) return 0;
  c::testing::Generated g;
  g.text = out;
  if (!tools) {
    GEMMA_FUZZ_CHECK(nlohmann::json::accept(g.text), "not JSON: " + g.text);
  } else if (o.require_tool_call) {
    const gemma::chat::ParsedOutput p = gemma::chat::ParseModelOutput(g.text);
    GEMMA_FUZZ_CHECK(p.malformed.empty(), "malformed tool call: " + g.text);
    GEMMA_FUZZ_CHECK(!p.tool_calls.empty(), "no tool call: " + g.text);
  }
  return 0;
}
