#include "chat/tool_format.h"

#include <array>
#include <string>

#include "gemma/error.h"

namespace gemma::chat {
namespace {


std::string Quoted(std::string_view s) {
  std::string out(kQuote);
  out += s;
  out += kQuote;
  return out;
}

// `[<|"|>a<|"|>,<|"|>b<|"|>]`-style list of str(item) (required lists, type lists).
std::string QuotedList(const Json* list, bool upper, const std::string& where) {
  std::string out = "[";
  bool first = true;
  for (const Json& item : PyIterate(list, where)) {
    if (!first) out += ",";
    first = false;
    out += Quoted(upper ? PyUpper(PyStr(item)) : PyStr(item));
  }
  return out + "]";
}

const Json& RequireMapping(const Json* value, const std::string& where) {
  if (!IsMapping(value)) {
    throw Error(ErrorCode::kTemplate,
                where + ": expected an object of properties, got a " + TypeName(value));
  }
  return *value;
}

// The template's `format_parameters(properties, required, filter_keys)`; `required` is unused
// there.
std::string FormatParameters(const Json& properties, bool filter_keys, const std::string& where) {
  static constexpr std::array<std::string_view, 5> kStandardKeys = {
      "description", "type", "properties", "required", "nullable"};
  std::string out;
  bool found_first = false;
  for (const auto& [key, value] : DictSort(properties)) {
    if (filter_keys) {
      bool standard = false;
      for (auto k : kStandardKeys) standard = standard || key == k;
      if (standard) continue;
    }
    const std::string at = where + "." + key;
    if (found_first) out += ",";
    found_first = true;
    out += key + ":{";
    bool add_comma = false;
    auto comma = [&] {
      if (add_comma) {
        out += ",";
      } else {
        add_comma = true;
      }
    };
    const Json* description = GetItem(value, "description");
    if (PyTruthy(description)) {
      out += "description:" + Quoted(PyStr(description));
      add_comma = true;
    }
    const Json* type = GetItem(value, "type");
    const std::string upper_type = PyUpper(PyStr(type));
    if (upper_type == "STRING") {
      const Json* enumeration = GetItem(value, "enum");
      if (PyTruthy(enumeration)) {
        comma();
        out += "enum:" + FormatArgument(enumeration, true);
      }
    } else if (upper_type == "ARRAY") {
      const Json* items = GetItem(value, "items");
      if (IsMapping(items) && PyTruthy(items)) {
        comma();
        out += "items:{";
        bool items_first = false;
        for (const auto& [item_key, item_value] : DictSort(*items)) {
          if (item_value->is_null()) continue;
          if (items_first) out += ",";
          items_first = true;
          const std::string item_at = at + ".items." + item_key;
          if (item_key == "properties") {
            out += "properties:{";
            if (IsMapping(item_value)) out += FormatParameters(*item_value, false, item_at);
            out += "}";
          } else if (item_key == "required") {
            out += "required:" + QuotedList(item_value, false, item_at);
          } else if (item_key == "type") {
            if (item_value->is_string()) {
              const Json upper(PyUpper(item_value->get_ref<const std::string&>()));
              out += "type:" + FormatArgument(&upper, true);
            } else {
              Json upper = Json::array();
              for (const Json& t : PyIterate(item_value, item_at))
                upper.push_back(PyUpper(PyStr(t)));
              out += "type:" + FormatArgument(&upper, true);
            }
          } else {
            out += item_key + ":" + FormatArgument(item_value, true);
          }
        }
        out += "}";
      }
    }
    if (PyTruthy(GetItem(value, "nullable"))) {
      comma();
      out += "nullable:true";
    }
    if (upper_type == "OBJECT") {
      const Json* nested = GetItem(value, "properties");
      if (IsMapping(nested)) {
        comma();
        out += "properties:{" + FormatParameters(*nested, false, at + ".properties") + "}";
      } else if (IsMapping(value)) {
        comma();
        out += "properties:{" + FormatParameters(*value, true, at) + "}";
      }
      const Json* required = GetItem(value, "required");
      if (PyTruthy(required)) {
        comma();
        out += "required:" + QuotedList(required, false, at + ".required");
      }
    }
    comma();
    if (IsString(type)) {
      out += "type:" + Quoted(upper_type) + "}";
    } else {
      out += "type:" + QuotedList(type, true, at + ".type") + "}";
    }
  }
  return out;
}

}  // namespace

std::string FormatArgument(const Json* argument, bool escape_keys) {
  // Jinja's Undefined passes the `is sequence` test and iterates as empty.
  if (argument == nullptr) return "[]";
  const Json& a = *argument;
  if (a.is_null()) return "null";
  if (a.is_string()) return Quoted(a.get_ref<const std::string&>());
  if (a.is_boolean()) return a.get<bool>() ? "true" : "false";
  if (a.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [key, value] : DictSort(a)) {
      if (!first) out += ",";
      first = false;
      out += escape_keys ? Quoted(key) : key;
      out += ":" + FormatArgument(value, escape_keys);
    }
    return out + "}";
  }
  if (a.is_array()) {
    std::string out = "[";
    bool first = true;
    for (const auto& item : a) {
      if (!first) out += ",";
      first = false;
      out += FormatArgument(&item, escape_keys);
    }
    return out + "]";
  }
  return PyStr(argument);
}

std::string FormatFunctionDeclaration(const Json& tool, std::string_view where_view) {
  const std::string where(where_view);
  const Json* function = GetItem(&tool, "function");
  std::string out = "declaration:" + PyStr(GetItem(function, "name")) +
                    "{description:" + Quoted(PyStr(GetItem(function, "description")));
  const Json* params = GetItem(function, "parameters");
  if (PyTruthy(params)) {
    out += ",parameters:{";
    const Json* properties = GetItem(params, "properties");
    if (PyTruthy(properties)) {
      const std::string at = where + ".function.parameters.properties";
      out += "properties:{" + FormatParameters(RequireMapping(properties, at), false, at) + "},";
    }
    const Json* required = GetItem(params, "required");
    if (PyTruthy(required)) {
      out +=
          "required:" + QuotedList(required, false, where + ".function.parameters.required") + ",";
    }
    const Json* type = GetItem(params, "type");
    // The template closes `parameters:{` only when a type is present; we reproduce that.
    if (PyTruthy(type)) out += "type:" + Quoted(PyUpper(PyStr(type))) + "}";
  }
  if (IsMapping(function) && function->contains("response")) {
    const Json* response = GetItem(function, "response");
    out += ",response:{";
    const Json* description = GetItem(response, "description");
    if (PyTruthy(description)) out += "description:" + Quoted(PyStr(description)) + ",";
    const std::string type = PyUpper(PyStr(GetItem(response, "type")));
    if (type == "OBJECT") out += "type:" + Quoted(type) + "}";
  }
  out += "}";
  return PyStrip(out);
}

std::string FormatToolResponseBlock(std::string_view tool_name, const Json* response) {
  std::string out = "<|tool_response>response:";
  out += tool_name;
  out += "{";
  if (IsMapping(response)) {
    bool first = true;
    for (const auto& [key, value] : DictSort(*response)) {
      if (!first) out += ",";
      first = false;
      out += key + ":" + FormatArgument(value, false);
    }
  } else {
    out += "value:" + FormatArgument(response, false);
  }
  return out + "}<tool_response|>";
}

}  // namespace gemma::chat
