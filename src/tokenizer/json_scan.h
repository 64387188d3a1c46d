// A minimal, strict JSON scanner for the large parts of tokenizer.json (the 262k-entry vocab and
// the 515k merges), where a DOM parser costs most of the load time. Small configuration members
// are located here and handed to nlohmann::json. Internal to the tokenizer room.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace gemma::tokenizer_internal {

// Reads JSON text left to right. Every malformed input throws gemma::Error(kTokenizer) with the
// origin (file name), the byte offset and `context` (the field being read).
class JsonScanner {
 public:
  JsonScanner(std::string_view text, std::string_view origin)
      : begin_(text.data()), p_(text.data()), end_(text.data() + text.size()), origin_(origin) {}

  void SkipWhitespace() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  // Next non-whitespace character, or '\0' at the end of input.
  char Peek() {
    SkipWhitespace();
    return p_ < end_ ? *p_ : '\0';
  }
  // Consumes `c` (after whitespace) or throws.
  void Expect(char c, std::string_view context);
  // Consumes `c` if it is next; returns whether it did.
  bool Consume(char c) {
    if (Peek() == c) {
      ++p_;
      return true;
    }
    return false;
  }

  // Parses a JSON string into `out` (replacing its contents), decoding escapes. Rejects raw
  // control characters, bad escapes and unpaired surrogates.
  void ReadString(std::string* out, std::string_view context);
  // Like ReadString, but returns a view into the input when the string has no escapes (the
  // common case) and decodes into `*scratch` otherwise. The view lives as long as the input or
  // until `*scratch` changes.
  std::string_view ReadStringView(std::string* scratch, std::string_view context);
  // Parses true or false.
  bool ReadBool(std::string_view context);
  // Parses an integer (optional '-', digits; no fraction or exponent) that fits int64.
  int64_t ReadInt(std::string_view context);
  // Skips one JSON value of any kind and returns its text (validated structurally).
  std::string_view SkipValue(std::string_view context);

  // For iterating objects and arrays: after '{' or '[' has been consumed, call
  // NextMember/NextElement before each item; they return false at the closing bracket.
  bool NextMember(bool* first, std::string_view context);
  bool NextElement(bool* first, std::string_view context);

  size_t offset() const { return static_cast<size_t>(p_ - begin_); }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  bool AtEnd() {
    SkipWhitespace();
    return p_ >= end_;
  }
  [[noreturn]] void Fail(std::string_view context, std::string_view what) const;

 private:
  void SkipString(std::string_view context);
  void SkipNumber(std::string_view context);
  void SkipLiteral(std::string_view word, std::string_view context);
  uint32_t ReadHex4(std::string_view context);

  const char* begin_;
  const char* p_;
  const char* end_;
  std::string_view origin_;
};

// Appends `s` to `out` as a JSON string literal (with quotes), escaping as JSON requires.
void AppendJsonString(std::string_view s, std::string* out);

}  // namespace gemma::tokenizer_internal
