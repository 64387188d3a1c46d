#include "chat/py_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "gemma/error.h"

namespace gemma::chat {
namespace {

// Decodes one UTF-8 code point at `pos` (lenient: an invalid byte is returned as itself).
char32_t DecodeAt(std::string_view s, size_t pos, size_t* len) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  int n = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 1;
  if (pos + n > s.size()) n = 1;
  if (n == 1) {
    *len = 1;
    return b0;
  }
  char32_t cp = b0 & (0x7F >> n);
  for (int i = 1; i < n; ++i) {
    const auto b = static_cast<unsigned char>(s[pos + i]);
    if ((b & 0xC0) != 0x80) {
      *len = 1;
      return b0;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  *len = n;
  return cp;
}

// Python's str.isspace() set (Py_UNICODE_ISSPACE).
bool IsPySpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Non-ASCII code points that Python's str.isprintable() rejects (so repr() escapes them): C1
// controls, separators other than ' ', common format characters. Unassigned code points are not
// tracked.
bool IsPyNonPrintable(char32_t c) {
  return (c >= 0x80 && c <= 0xA0) || c == 0xAD || c == 0x1680 || (c >= 0x2000 && c <= 0x200F) ||
         (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x2064) ||
         (c >= 0x2066 && c <= 0x206F) || c == 0x3000 || c == 0xFEFF ||
         (c >= 0xD800 && c <= 0xF8FF) || (c >= 0xFFF9 && c <= 0xFFFB);
}

std::string PyStrRepr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (size_t pos = 0; pos < s.size();) {
    size_t len;
    const char32_t cp = DecodeAt(s, pos, &len);
    if (cp >= 0x80 && len > 1) {
      if (IsPyNonPrintable(cp)) {
        char buf[16];
        if (cp < 0x100) {
          std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
        } else if (cp < 0x10000) {
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
        } else {
          std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(cp));
        }
        out += buf;
      } else {
        out.append(s.substr(pos, len));
      }
      pos += len;
      continue;
    }
    const char ch = s[pos++];
    const auto c = static_cast<unsigned char>(ch);
    if (ch == quote || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  out += quote;
  return out;
}

std::string PyRepr(const Json& v) {
  if (v.is_string()) return PyStrRepr(v.get_ref<const std::string&>());
  if (v.is_array()) {
    std::string out = "[";
    bool first = true;
    for (const auto& item : v) {
      if (!first) out += ", ";
      first = false;
      out += PyRepr(item);
    }
    return out + "]";
  }
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [key, item] : v.items()) {
      if (!first) out += ", ";
      first = false;
      out += PyStrRepr(key) + ": " + PyRepr(item);
    }
    return out + "}";
  }
  return PyStr(&v);
}

}  // namespace

bool PyTruthy(const Json* v) {
  if (v == nullptr) return false;
  switch (v->type()) {
    case Json::value_t::null:
    case Json::value_t::discarded:
      return false;
    case Json::value_t::boolean:
      return v->get<bool>();
    case Json::value_t::number_integer:
      return v->get<std::int64_t>() != 0;
    case Json::value_t::number_unsigned:
      return v->get<std::uint64_t>() != 0;
    case Json::value_t::number_float:
      return v->get<double>() != 0.0;
    case Json::value_t::string:
      return !v->get_ref<const std::string&>().empty();
    case Json::value_t::array:
    case Json::value_t::object:
    case Json::value_t::binary:
      return !v->empty();
  }
  return false;
}

std::string PyFloatRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then Python's layout: fixed for 1e-4 <= |x| < 1e16, else exponent.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+17"
  std::string sign;
  if (!sci.empty() && sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp10 = std::atoi(sci.c_str() + e + 1);
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int decpt = exp10 + 1;  // value = 0.DIGITS x 10^decpt
  std::string out;
  if (decpt <= -4 || decpt > 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += ebuf;
  } else if (decpt <= 0) {
    out = "0." + std::string(-decpt, '0') + digits;
  } else if (static_cast<size_t>(decpt) >= digits.size()) {
    out = digits + std::string(decpt - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, decpt) + "." + digits.substr(decpt);
  }
  return sign + out;
}

std::string PyStr(const Json* v) {
  if (v == nullptr) return "";
  switch (v->type()) {
    case Json::value_t::null:
    case Json::value_t::discarded:
      return "None";
    case Json::value_t::boolean:
      return v->get<bool>() ? "True" : "False";
    case Json::value_t::number_integer:
      return std::to_string(v->get<std::int64_t>());
    case Json::value_t::number_unsigned:
      return std::to_string(v->get<std::uint64_t>());
    case Json::value_t::number_float:
      return PyFloatRepr(v->get<double>());
    case Json::value_t::string:
      return v->get<std::string>();
    case Json::value_t::array:
    case Json::value_t::object:
      return PyRepr(*v);
    case Json::value_t::binary:
      return "<binary>";
  }
  return "";
}

std::string PyStrip(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    size_t len;
    if (!IsPySpace(DecodeAt(s, begin, &len))) break;
    begin += len;
  }
  size_t end = begin;  // one past the last non-space code point
  size_t pos = begin;
  while (pos < s.size()) {
    size_t len;
    const bool space = IsPySpace(DecodeAt(s, pos, &len));
    pos += len;
    if (!space) end = pos;
  }
  return std::string(s.substr(begin, end - begin));
}

namespace {

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Simple (one-to-one) case mappings of Python's str.lower() for Basic Latin, Latin-1, Latin
// Extended-A, Greek and Cyrillic. Other scripts are left unchanged.
char32_t LowerCp(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 0x20;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 0x20;
  if ((c >= 0x100 && c <= 0x137 && c != 0x130) || (c >= 0x14A && c <= 0x177)) {
    return (c % 2 == 0) ? c + 1 : c;
  }
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 1) ? c + 1 : c;
  if (c == 0x178) return 0xFF;
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 0x20;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 0x25;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 0x3F;
  if (c >= 0x410 && c <= 0x42F) return c + 0x20;
  if (c >= 0x400 && c <= 0x40F) return c + 0x50;
  return c;
}

// The inverse of LowerCp, plus the one-to-one uppercase-only mappings (final sigma, micro, y with
// diaeresis). Returns 0 for "ß", which upper-cases to two letters.
char32_t UpperCp(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 0x20;
  if (c < 0x80) return c;
  if (c == 0xDF) return 0;
  if (c == 0xB5) return 0x39C;
  if (c == 0xFF) return 0x178;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 0x20;
  if ((c >= 0x101 && c <= 0x137 && c != 0x131) || (c >= 0x14B && c <= 0x177)) {
    return (c % 2 == 1) ? c - 1 : c;
  }
  if (c == 0x131) return 'I';
  if ((c >= 0x13A && c <= 0x148) || (c >= 0x17A && c <= 0x17E)) return (c % 2 == 0) ? c - 1 : c;
  if (c == 0x17F) return 'S';
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x3B1 && c <= 0x3CB) return c - 0x20;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 0x25;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 0x3F;
  if (c >= 0x430 && c <= 0x44F) return c - 0x20;
  if (c >= 0x450 && c <= 0x45F) return c - 0x50;
  return c;
}

template <typename Map>
std::string MapCase(std::string_view text, Map map) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t len;
    const char32_t cp = DecodeAt(text, pos, &len);
    if (len == 1 && cp >= 0x80) {
      out += text[pos];  // invalid UTF-8 byte: keep
    } else {
      map(cp, &out);
    }
    pos += len;
  }
  return out;
}

}  // namespace

std::string PyUpper(std::string_view text) {
  return MapCase(text, [](char32_t cp, std::string* out) {
    const char32_t up = UpperCp(cp);
    if (up == 0) {
      *out += "SS";
    } else {
      AppendUtf8(up, out);
    }
  });
}

std::string PyLower(std::string_view text) {
  return MapCase(text, [](char32_t cp, std::string* out) {
    if (cp == 0x130) {
      *out += "i\xcc\x87";  // "İ".lower() is "i" + combining dot above
    } else {
      AppendUtf8(LowerCp(cp), out);
    }
  });
}

std::vector<std::pair<std::string, const Json*>> DictSort(const Json& object) {
  std::vector<std::pair<std::string, const Json*>> items;
  for (const auto& [key, value] : object.items()) items.emplace_back(key, &value);
  // Byte order of UTF-8 equals Python's code-point order.
  std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
    return PyLower(a.first) < PyLower(b.first);
  });
  return items;
}

std::vector<Json> PyIterate(const Json* v, std::string_view where) {
  std::vector<Json> out;
  if (v == nullptr) return out;
  if (v->is_array()) {
    for (const auto& item : *v) out.push_back(item);
  } else if (v->is_object()) {
    for (const auto& [key, item] : v->items()) out.emplace_back(key);
  } else if (v->is_string()) {
    const auto& s = v->get_ref<const std::string&>();
    for (size_t pos = 0; pos < s.size();) {
      size_t len;
      DecodeAt(s, pos, &len);
      out.emplace_back(s.substr(pos, len));
      pos += len;
    }
  } else {
    throw Error(ErrorCode::kTemplate, std::string(where) + ": a " + TypeName(v) +
                                          " is not iterable (the template loops over it)");
  }
  return out;
}

const Json* GetItem(const Json* v, std::string_view key) {
  if (v == nullptr || !v->is_object()) return nullptr;
  auto it = v->find(std::string(key));
  return it == v->end() ? nullptr : &*it;
}

namespace {
// Numeric view for Python equality (bools are ints in Python).
bool AsNumber(const Json& v, double* out) {
  if (v.is_boolean()) {
    *out = v.get<bool>() ? 1.0 : 0.0;
    return true;
  }
  if (v.is_number()) {
    *out = v.get<double>();
    return true;
  }
  return false;
}
}  // namespace

bool PyEquals(const Json* a, const Json* b) {
  if (a == nullptr || b == nullptr) return a == b;
  double x, y;
  if (AsNumber(*a, &x) && AsNumber(*b, &y)) {
    if (a->is_number_float() || b->is_number_float()) return x == y;
    if (a->is_boolean() || b->is_boolean()) return x == y;
    return *a == *b;  // exact for big integers
  }
  if (a->type() != b->type()) return false;
  if (a->is_array()) {
    if (a->size() != b->size()) return false;
    for (size_t i = 0; i < a->size(); ++i) {
      if (!PyEquals(&(*a)[i], &(*b)[i])) return false;
    }
    return true;
  }
  if (a->is_object()) {
    if (a->size() != b->size()) return false;
    for (const auto& [key, value] : a->items()) {
      const Json* other = GetItem(b, key);
      if (other == nullptr || !PyEquals(&value, other)) return false;
    }
    return true;
  }
  return *a == *b;
}

std::string TypeName(const Json* v) {
  if (v == nullptr) return "missing value";
  switch (v->type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return "number";
    case Json::value_t::string:
      return "string";
    case Json::value_t::array:
      return "array";
    case Json::value_t::object:
      return "object";
    default:
      return "value";
  }
}

}  // namespace gemma::chat
