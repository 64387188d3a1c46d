#include "chat/output_parser.h"

#include <array>
#include <charconv>
#include <cstdint>

#include "chat/tool_format.h"
#include "gemma/error.h"

namespace gemma::chat {
namespace {

constexpr std::string_view kChannelOpen = "<|channel>";
constexpr std::string_view kChannelClose = "<channel|>";
constexpr std::string_view kCallOpen = "<|tool_call>";
constexpr std::string_view kCallClose = "<tool_call|>";
constexpr std::string_view kThoughtLabel = "thought\n";
// Special tokens that must never reach display text.
constexpr std::array<std::string_view, 9> kTextMarkers = {
    kChannelOpen, kCallOpen,          kChannelClose,      kCallClose, "<turn|>",
    "<|turn>",    "<|tool_response>", "<tool_response|>", "<|think|>"};
constexpr int kMaxDepth = 64;

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

class ArgumentParser {
 public:
  explicit ArgumentParser(std::string_view s) : s_(s) {}

  Json ParseAll() {
    SkipSpace();
    if (pos_ >= s_.size() || s_[pos_] != '{') Fail("expected '{'");
    Json out = Value(0);
    SkipSpace();
    if (pos_ != s_.size()) Fail("unexpected text after the arguments");
    return out;
  }

 private:
  [[noreturn]] void Fail(const std::string& what) const {
    throw Error(ErrorCode::kFormat,
                "tool-call arguments: " + what + " at offset " + std::to_string(pos_));
  }
  void SkipSpace() {
    while (pos_ < s_.size() && IsSpace(s_[pos_])) ++pos_;
  }
  bool StartsWith(std::string_view p) const { return s_.substr(pos_, p.size()) == p; }

  std::string QuotedString() {
    pos_ += kQuote.size();
    const size_t end = s_.find(kQuote, pos_);
    if (end == std::string_view::npos) Fail("unterminated <|\"|> string");
    std::string out(s_.substr(pos_, end - pos_));
    pos_ = end + kQuote.size();
    return out;
  }

  std::string Key() {
    if (StartsWith(kQuote)) return QuotedString();
    const size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] != ':') {
      const char c = s_[pos_];
      if (c == '{' || c == '}' || c == '[' || c == ']' || c == ',')
        Fail("expected ':' after a key");
      ++pos_;
    }
    std::string_view key = s_.substr(start, pos_ - start);
    while (!key.empty() && IsSpace(key.back())) key.remove_suffix(1);
    if (key.empty()) Fail("empty key");
    return std::string(key);
  }

  Json Value(int depth) {
    if (depth > kMaxDepth) Fail("nesting deeper than 64");
    SkipSpace();
    if (pos_ >= s_.size()) Fail("expected a value");
    if (StartsWith(kQuote)) return Json(QuotedString());
    const char c = s_[pos_];
    if (c == '{') {
      ++pos_;
      Json obj = Json::object();
      SkipSpace();
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        return obj;
      }
      while (true) {
        SkipSpace();
        std::string key = Key();
        SkipSpace();
        if (pos_ >= s_.size() || s_[pos_] != ':') Fail("expected ':' after a key");
        ++pos_;
        obj[key] = Value(depth + 1);
        SkipSpace();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < s_.size() && s_[pos_] == '}') {
          ++pos_;
          return obj;
        }
        Fail("expected ',' or '}' in an object");
      }
    }
    if (c == '[') {
      ++pos_;
      Json arr = Json::array();
      SkipSpace();
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        return arr;
      }
      while (true) {
        arr.push_back(Value(depth + 1));
        SkipSpace();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < s_.size() && s_[pos_] == ']') {
          ++pos_;
          return arr;
        }
        Fail("expected ',' or ']' in an array");
      }
    }
    for (auto [word, value] : {std::pair<std::string_view, Json>{"true", Json(true)},
                               std::pair<std::string_view, Json>{"false", Json(false)},
                               std::pair<std::string_view, Json>{"null", Json(nullptr)}}) {
      if (StartsWith(word)) {
        pos_ += word.size();
        ExpectDelimiter();
        return value;
      }
    }
    if (c == '-' || (c >= '0' && c <= '9')) return Number();
    Fail("expected a value (a <|\"|>string<|\"|>, number, true, false, null, object or array)");
  }

  void ExpectDelimiter() {
    if (pos_ < s_.size() && !IsSpace(s_[pos_]) && s_[pos_] != ',' && s_[pos_] != '}' &&
        s_[pos_] != ']') {
      Fail("unexpected character after a value");
    }
  }

  Json Number() {
    const size_t start = pos_;
    auto digits = [&] {
      const size_t d = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ > d;
    };
    if (s_[pos_] == '-') ++pos_;
    if (!digits()) Fail("malformed number");
    bool is_float = false;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      is_float = true;
      if (!digits()) Fail("malformed number");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      is_float = true;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digits()) Fail("malformed number");
    }
    ExpectDelimiter();
    const char* first = s_.data() + start;
    const char* last = s_.data() + pos_;
    if (!is_float) {
      std::int64_t i;
      if (std::from_chars(first, last, i).ec == std::errc()) return Json(i);
      std::uint64_t u;
      if (std::from_chars(first, last, u).ec == std::errc()) return Json(u);
    }
    double d;
    const auto res = std::from_chars(first, last, d);
    if (res.ec != std::errc() || res.ptr != last) Fail("number out of range");
    return Json(d);
  }

  std::string_view s_;
  size_t pos_ = 0;
};

// Parses the body between <|tool_call> and <tool_call|>: `call:NAME{...}`.
ToolCall ParseCallBody(std::string_view body) {
  size_t pos = 0;
  while (pos < body.size() && IsSpace(body[pos])) ++pos;
  if (body.substr(pos, 5) != "call:") {
    throw Error(ErrorCode::kFormat, "tool call does not start with 'call:'");
  }
  pos += 5;
  const size_t brace = body.find('{', pos);
  if (brace == std::string_view::npos) throw Error(ErrorCode::kFormat, "tool call has no '{'");
  std::string_view name = body.substr(pos, brace - pos);
  if (name.empty()) throw Error(ErrorCode::kFormat, "tool call has an empty name");
  for (char c : name) {
    if (IsSpace(c) || c == '<' || c == '>' || c == '}' || c == ',' || c == ':') {
      throw Error(ErrorCode::kFormat, "tool call name '" + std::string(name) + "' is not a name");
    }
  }
  ToolCall call;
  call.name = std::string(name);
  call.arguments = ParseToolArguments(body.substr(brace));
  return call;
}

// Length of the longest suffix of `buf` that is a proper prefix of one of `markers`.
size_t HeldBackLength(std::string_view buf, const std::string_view* markers, size_t count) {
  size_t best = 0;
  for (size_t m = 0; m < count; ++m) {
    const std::string_view marker = markers[m];
    for (size_t len = std::min(buf.size(), marker.size() - 1); len > best; --len) {
      if (buf.substr(buf.size() - len) == marker.substr(0, len)) {
        best = len;
        break;
      }
    }
  }
  return best;
}

StreamEvent TextEvent(StreamEvent::Kind kind, std::string text) {
  StreamEvent e{kind, std::move(text), {}, {}};
  return e;
}

StreamEvent MalformedEvent(std::string raw, std::string reason) {
  StreamEvent e{StreamEvent::Kind::kMalformed, {}, {}, {std::move(raw), std::move(reason)}};
  return e;
}

}  // namespace

Json ParseToolArguments(std::string_view text) { return ArgumentParser(text).ParseAll(); }

std::vector<StreamEvent> StreamingParser::Push(std::string_view delta) {
  std::vector<StreamEvent> events;
  if (finished_) throw Error(ErrorCode::kInternal, "StreamingParser::Push after Finish");
  buffer_.append(delta);
  Process(false, &events);
  return events;
}

std::vector<StreamEvent> StreamingParser::Finish() {
  std::vector<StreamEvent> events;
  if (finished_) return events;
  Process(true, &events);
  finished_ = true;
  return events;
}

void StreamingParser::Process(bool final, std::vector<StreamEvent>* events) {
  while (true) {
    if (mode_ == Mode::kText) {
      size_t best = std::string::npos;
      std::string_view marker;
      for (auto m : kTextMarkers) {
        const size_t p = buffer_.find(m);
        if (p < best) {
          best = p;
          marker = m;
        }
      }
      if (best == std::string::npos) {
        const size_t hold =
            final ? 0 : HeldBackLength(buffer_, kTextMarkers.data(), kTextMarkers.size());
        if (buffer_.size() > hold) {
          events->push_back(
              TextEvent(StreamEvent::Kind::kTextDelta, buffer_.substr(0, buffer_.size() - hold)));
          buffer_.erase(0, buffer_.size() - hold);
        }
        return;
      }
      if (best > 0)
        events->push_back(TextEvent(StreamEvent::Kind::kTextDelta, buffer_.substr(0, best)));
      buffer_.erase(0, best + marker.size());
      if (marker == kChannelOpen) {
        mode_ = Mode::kReasoning;
        header_pending_ = true;
        block_raw_ = std::string(kChannelOpen);
      } else if (marker == kCallOpen) {
        mode_ = Mode::kToolCall;
      } else {
        events->push_back(
            MalformedEvent(std::string(marker),
                           "stray special token " + std::string(marker) + " outside any block"));
      }
      continue;
    }

    if (mode_ == Mode::kReasoning) {
      if (header_pending_) {
        if (buffer_.compare(0, kThoughtLabel.size(), kThoughtLabel) == 0) {
          buffer_.erase(0, kThoughtLabel.size());
          block_raw_ += kThoughtLabel;
          header_pending_ = false;
        } else if (!final && kThoughtLabel.substr(0, buffer_.size()) == buffer_) {
          return;  // could still become "thought\n"
        } else {
          header_pending_ = false;
        }
      }
      const size_t close = buffer_.find(kChannelClose);
      if (close != std::string::npos) {
        if (close > 0) {
          events->push_back(
              TextEvent(StreamEvent::Kind::kReasoningDelta, buffer_.substr(0, close)));
        }
        buffer_.erase(0, close + kChannelClose.size());
        block_raw_.clear();
        mode_ = Mode::kText;
        continue;
      }
      const size_t hold = final ? 0 : HeldBackLength(buffer_, &kChannelClose, 1);
      if (buffer_.size() > hold) {
        std::string delta = buffer_.substr(0, buffer_.size() - hold);
        block_raw_ += delta;
        events->push_back(TextEvent(StreamEvent::Kind::kReasoningDelta, std::move(delta)));
        buffer_.erase(0, buffer_.size() - hold);
      }
      if (final) {
        events->push_back(
            MalformedEvent(block_raw_, "unterminated reasoning block (no <channel|>)"));
        block_raw_.clear();
        mode_ = Mode::kText;
      }
      return;
    }

    // Mode::kToolCall: the block ends at the first <tool_call|>, as in the published parse regex.
    const size_t close = buffer_.find(kCallClose);
    if (close == std::string::npos) {
      if (final) {
        events->push_back(MalformedEvent(std::string(kCallOpen) + buffer_,
                                         "unterminated tool call (no <tool_call|>)"));
        buffer_.clear();
        mode_ = Mode::kText;
      }
      return;
    }
    const std::string body = buffer_.substr(0, close);
    std::string raw = std::string(kCallOpen) + body + std::string(kCallClose);
    buffer_.erase(0, close + kCallClose.size());
    mode_ = Mode::kText;
    try {
      ToolCall call = ParseCallBody(body);
      call.raw = std::move(raw);
      StreamEvent e{StreamEvent::Kind::kToolCall, {}, std::move(call), {}};
      events->push_back(std::move(e));
    } catch (const Error& error) {
      events->push_back(MalformedEvent(std::move(raw), error.what()));
    }
  }
}

ParsedOutput ParseModelOutput(std::string_view text) {
  StreamingParser parser;
  std::vector<StreamEvent> events = parser.Push(text);
  for (auto& e : parser.Finish()) events.push_back(std::move(e));
  ParsedOutput out;
  for (auto& e : events) {
    switch (e.kind) {
      case StreamEvent::Kind::kReasoningDelta:
        out.reasoning += e.text;
        break;
      case StreamEvent::Kind::kTextDelta:
        out.text += e.text;
        break;
      case StreamEvent::Kind::kToolCall:
        out.tool_calls.push_back(std::move(e.tool_call));
        break;
      case StreamEvent::Kind::kMalformed:
        out.malformed.push_back(std::move(e.malformed));
        break;
    }
  }
  return out;
}

}  // namespace gemma::chat
