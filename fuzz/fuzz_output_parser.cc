// The tool-call and reasoning output parsers. Beyond "no crash": the streaming parser fed the same
// output in input-chosen pieces must report exactly what the whole-output parser reports.
#include <fuzzer/FuzzedDataProvider.h>

#include "chat/output_parser.h"
#include "fuzz_util.h"
#include "gemma/error.h"

using gemma::chat::StreamEvent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const uint64_t cuts = in.ConsumeIntegral<uint64_t>();
  const std::string text = in.ConsumeRemainingBytesAsString();
  try {
    (void)gemma::chat::ParseToolArguments(text);
  } catch (const gemma::Error&) {
  }
  const gemma::chat::ParsedOutput whole = gemma::chat::ParseModelOutput(text);

  gemma::chat::StreamingParser p;
  std::string out_text, reasoning;
  std::vector<gemma::chat::ToolCall> calls;
  std::vector<gemma::chat::MalformedBlock> malformed;
  auto add = [&](const std::vector<StreamEvent>& events) {
    for (const StreamEvent& e : events) {
      switch (e.kind) {
        case StreamEvent::Kind::kTextDelta:
          out_text += e.text;
          break;
        case StreamEvent::Kind::kReasoningDelta:
          reasoning += e.text;
          break;
        case StreamEvent::Kind::kToolCall:
          calls.push_back(e.tool_call);
          break;
        case StreamEvent::Kind::kMalformed:
          malformed.push_back(e.malformed);
          break;
      }
    }
  };
  // Piece lengths from the 64 bits of `cuts`, 4 bits each (1..16 bytes), cycling.
  size_t pos = 0, k = 0;
  while (pos < text.size()) {
    const size_t n = 1 + ((cuts >> (4 * (k++ % 16))) & 15);
    add(p.Push(std::string_view(text).substr(pos, n)));
    pos += n;
  }
  add(p.Finish());
  GEMMA_FUZZ_CHECK(out_text == whole.text,
                   "text: streamed '" + out_text + "' whole '" + whole.text + "'");
  GEMMA_FUZZ_CHECK(reasoning == whole.reasoning, "reasoning");
  GEMMA_FUZZ_CHECK(calls.size() == whole.tool_calls.size(), "tool call count");
  for (size_t i = 0; i < calls.size(); ++i) {
    GEMMA_FUZZ_CHECK(calls[i].name == whole.tool_calls[i].name, "tool name");
    GEMMA_FUZZ_CHECK(calls[i].arguments == whole.tool_calls[i].arguments, "tool arguments");
    GEMMA_FUZZ_CHECK(calls[i].raw == whole.tool_calls[i].raw, "tool raw");
  }
  GEMMA_FUZZ_CHECK(malformed.size() == whole.malformed.size(), "malformed count");
  for (size_t i = 0; i < malformed.size(); ++i) {
    GEMMA_FUZZ_CHECK(malformed[i].raw == whole.malformed[i].raw, "malformed raw");
  }
  return 0;
}
