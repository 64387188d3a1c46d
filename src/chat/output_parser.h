// Parsing of raw Gemma 4 model output into reasoning, display text and tool calls.
//
// Syntax (gemma4-spec.md section 5):
//   reasoning   <|channel>thought\n ... <channel|>      (the "thought\n" label is optional)
//   tool call   <|tool_call>call:NAME{key:value,...}<tool_call|>
// Tool-call values: <|"|>strings<|"|> (any content except the quote token and <tool_call|>),
// numbers (ints, floats, negatives, exponents), true/false/null, nested {objects} with bare (or
// <|"|>-quoted) keys, and [arrays]. Whitespace between tokens is tolerated.
//
// Nothing is silently dropped: a block that does not parse, an unterminated block at the end of the
// output, and a stray special token (`<channel|>`, `<tool_call|>`, `<turn|>`, `<|turn>`,
// `<|tool_response>`, `<tool_response|>`, `<|think|>`) outside any block become MalformedBlock
// entries with their raw text. Display text and reasoning are passed through byte for byte (not
// trimmed).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/py_value.h"

namespace gemma::chat {

struct ToolCall {
  std::string name;
  Json arguments = Json::object();  // always an object
  std::string raw;                  // the whole block, markers included
};

struct MalformedBlock {
  std::string raw;     // the offending text, markers included
  std::string reason;  // what was wrong, with an offset where there is one
};

struct ParsedOutput {
  std::string reasoning;  // all reasoning blocks concatenated
  std::string text;       // display text
  std::vector<ToolCall> tool_calls;
  std::vector<MalformedBlock> malformed;
};

// Parses Gemma argument syntax `{key:value,...}` (the text between `call:NAME` and `<tool_call|>`)
// into a JSON object. Throws gemma::Error(ErrorCode::kFormat) saying what is wrong and at which
// offset.
Json ParseToolArguments(std::string_view text);

// Parses a complete model output.
ParsedOutput ParseModelOutput(std::string_view text);

struct StreamEvent {
  enum class Kind { kReasoningDelta, kTextDelta, kToolCall, kMalformed };
  Kind kind;
  std::string text;          // kReasoningDelta, kTextDelta
  ToolCall tool_call;        // kToolCall
  MalformedBlock malformed;  // kMalformed
};

// Incremental parser for streamed output. Text that might be the start of special syntax (for
// example a trailing "<|tool") is held back until it is resolved, so display deltas never contain
// partial markers. Tool calls are reported whole, once their closing <tool_call|> arrived.
class StreamingParser {
 public:
  // Feeds the next piece of output; returns the events it completes.
  std::vector<StreamEvent> Push(std::string_view delta);
  // Ends the stream: flushes held-back text and reports unterminated blocks as malformed.
  std::vector<StreamEvent> Finish();

 private:
  enum class Mode { kText, kReasoning, kToolCall };
  void Process(bool final, std::vector<StreamEvent>* events);

  Mode mode_ = Mode::kText;
  std::string buffer_;           // unconsumed input
  std::string block_raw_;        // raw text of the current reasoning block, for error reports
  bool header_pending_ = false;  // a reasoning block whose "thought\n" label is not yet resolved
  bool finished_ = false;
};

}  // namespace gemma::chat
