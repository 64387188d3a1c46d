#include "tokenizer/json_scan.h"

#include <cstring>

#include "gemma/error.h"

namespace gemma::tokenizer_internal {
namespace {

constexpr int kMaxDepth = 256;

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

void JsonScanner::Fail(std::string_view context, std::string_view what) const {
  throw Error(ErrorCode::kTokenizer, std::string(origin_) + ": " + std::string(context) + ": " +
                                         std::string(what) + " at byte " +
                                         std::to_string(p_ - begin_));
}

void JsonScanner::Expect(char c, std::string_view context) {
  if (Peek() != c) {
    if (p_ >= end_) Fail(context, std::string("unexpected end of JSON, expected '") + c + "'");
    Fail(context, std::string("expected '") + c + "', found '" + *p_ + "'");
  }
  ++p_;
}

uint32_t JsonScanner::ReadHex4(std::string_view context) {
  if (end_ - p_ < 4) Fail(context, "truncated \\u escape");
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    char c = *p_++;
    v <<= 4;
    if (c >= '0' && c <= '9') {
      v |= static_cast<uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      v |= static_cast<uint32_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      v |= static_cast<uint32_t>(c - 'A' + 10);
    } else {
      Fail(context, "bad hex digit in \\u escape");
    }
  }
  return v;
}

void JsonScanner::ReadString(std::string* out, std::string_view context) {
  Expect('"', context);
  out->clear();
  while (true) {
    // Copy the run up to the next quote, backslash or control character in one go.
    const char* run = p_;
    while (p_ < end_ && *p_ != '"' && *p_ != '\\' && static_cast<unsigned char>(*p_) >= 0x20) ++p_;
    out->append(run, p_);
    if (p_ >= end_) Fail(context, "unterminated string");
    char c = *p_++;
    if (c == '"') return;
    if (c != '\\') {
      --p_;
      Fail(context, "raw control character in string");
    }
    if (p_ >= end_) Fail(context, "unterminated escape");
    char e = *p_++;
    switch (e) {
      case '"':
        out->push_back('"');
        break;
      case '\\':
        out->push_back('\\');
        break;
      case '/':
        out->push_back('/');
        break;
      case 'b':
        out->push_back('\b');
        break;
      case 'f':
        out->push_back('\f');
        break;
      case 'n':
        out->push_back('\n');
        break;
      case 'r':
        out->push_back('\r');
        break;
      case 't':
        out->push_back('\t');
        break;
      case 'u': {
        uint32_t cp = ReadHex4(context);
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          if (end_ - p_ < 6 || p_[0] != '\\' || p_[1] != 'u') Fail(context, "unpaired surrogate");
          p_ += 2;
          uint32_t lo = ReadHex4(context);
          if (lo < 0xDC00 || lo > 0xDFFF) Fail(context, "unpaired surrogate");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          Fail(context, "unpaired surrogate");
        }
        AppendUtf8(cp, out);
        break;
      }
      default:
        Fail(context, "bad escape");
    }
  }
}

std::string_view JsonScanner::ReadStringView(std::string* scratch, std::string_view context) {
  SkipWhitespace();
  if (p_ < end_ && *p_ == '"') {
    const char* start = p_ + 1;
    const char* q = start;
    while (q < end_ && *q != '"' && *q != '\\' && static_cast<unsigned char>(*q) >= 0x20) ++q;
    if (q < end_ && *q == '"') {
      p_ = q + 1;
      return std::string_view(start, static_cast<size_t>(q - start));
    }
  }
  ReadString(scratch, context);
  return *scratch;
}

bool JsonScanner::ReadBool(std::string_view context) {
  char c = Peek();
  if (c == 't') {
    SkipLiteral("true", context);
    return true;
  }
  if (c == 'f') {
    SkipLiteral("false", context);
    return false;
  }
  Fail(context, "expected true or false");
}

int64_t JsonScanner::ReadInt(std::string_view context) {
  SkipWhitespace();
  bool neg = false;
  if (p_ < end_ && *p_ == '-') {
    neg = true;
    ++p_;
  }
  if (p_ >= end_ || *p_ < '0' || *p_ > '9') Fail(context, "expected an integer");
  int64_t v = 0;
  int digits = 0;
  while (p_ < end_ && *p_ >= '0' && *p_ <= '9') {
    if (++digits > 18) Fail(context, "integer too large");
    v = v * 10 + (*p_++ - '0');
  }
  if (p_ < end_ && (*p_ == '.' || *p_ == 'e' || *p_ == 'E')) Fail(context, "expected an integer");
  return neg ? -v : v;
}

void JsonScanner::SkipString(std::string_view context) {
  ++p_;  // opening quote
  while (true) {
    while (p_ < end_ && *p_ != '"' && *p_ != '\\') {
      if (static_cast<unsigned char>(*p_) < 0x20) Fail(context, "raw control character in string");
      ++p_;
    }
    if (p_ >= end_) Fail(context, "unterminated string");
    if (*p_ == '"') {
      ++p_;
      return;
    }
    p_ += 2;  // escape and the escaped character; \uXXXX digits are plain characters
    if (p_ > end_) Fail(context, "unterminated escape");
  }
}

void JsonScanner::SkipNumber(std::string_view context) {
  const char* start = p_;
  if (*p_ == '-') ++p_;
  while (p_ < end_ && ((*p_ >= '0' && *p_ <= '9') || *p_ == '.' || *p_ == 'e' || *p_ == 'E' ||
                       *p_ == '+' || *p_ == '-')) {
    ++p_;
  }
  if (p_ == start || (p_ - start == 1 && *start == '-')) Fail(context, "bad number");
}

void JsonScanner::SkipLiteral(std::string_view word, std::string_view context) {
  if (static_cast<size_t>(end_ - p_) < word.size() || std::memcmp(p_, word.data(), word.size()))
    Fail(context, "bad literal");
  p_ += word.size();
}

std::string_view JsonScanner::SkipValue(std::string_view context) {
  SkipWhitespace();
  const char* start = p_;
  // Iterative skip with an explicit bracket stack keeps deep nesting from using the C++ stack.
  char stack[kMaxDepth];
  int depth = 0;
  bool expect_value = true;
  while (true) {
    SkipWhitespace();
    if (p_ >= end_) Fail(context, "unexpected end of JSON");
    char c = *p_;
    if (expect_value) {
      if (c == '{' || c == '[') {
        if (depth == kMaxDepth) Fail(context, "nesting too deep");
        stack[depth++] = c;
        ++p_;
        SkipWhitespace();
        if (p_ < end_ && *p_ == (c == '{' ? '}' : ']')) {
          ++p_;
          --depth;
          expect_value = false;
        } else if (c == '{') {
          if (p_ >= end_ || *p_ != '"') Fail(context, "expected a member name");
          SkipString(context);
          Expect(':', context);
        }
        if (depth == 0 && !expect_value) break;
        continue;
      }
      if (c == '"') {
        SkipString(context);
      } else if (c == '-' || (c >= '0' && c <= '9')) {
        SkipNumber(context);
      } else if (c == 't') {
        SkipLiteral("true", context);
      } else if (c == 'f') {
        SkipLiteral("false", context);
      } else if (c == 'n') {
        SkipLiteral("null", context);
      } else {
        Fail(context, std::string("unexpected character '") + c + "'");
      }
      expect_value = false;
      if (depth == 0) break;
      continue;
    }
    // After a value inside a container: ',' or the closing bracket.
    char open = stack[depth - 1];
    if (c == ',') {
      ++p_;
      if (open == '{') {
        SkipWhitespace();
        if (p_ >= end_ || *p_ != '"') Fail(context, "expected a member name");
        SkipString(context);
        Expect(':', context);
      }
      expect_value = true;
    } else if (c == (open == '{' ? '}' : ']')) {
      ++p_;
      --depth;
      if (depth == 0) break;
    } else {
      Fail(context, std::string("unexpected character '") + c + "'");
    }
  }
  return std::string_view(start, static_cast<size_t>(p_ - start));
}

bool JsonScanner::NextMember(bool* first, std::string_view context) {
  if (Consume('}')) return false;
  if (!*first) Expect(',', context);
  *first = false;
  if (Peek() != '"') Fail(context, "expected a member name");
  return true;
}

bool JsonScanner::NextElement(bool* first, std::string_view context) {
  if (Consume(']')) return false;
  if (!*first) Expect(',', context);
  *first = false;
  return true;
}

void AppendJsonString(std::string_view s, std::string* out) {
  static const char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      default:
        if (c < 0x20) {
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 15]);
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

}  // namespace gemma::tokenizer_internal
