#include "chat/chat_template.h"

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "chat/tool_format.h"
#include "core/json_depth.h"
#include "core/utf8.h"
#include "gemma/error.h"

namespace gemma::chat {

bool IsImagePart(const std::string& t) { return t == "image" || t == "image_url"; }
bool IsAudioPart(const std::string& t) {
  return t == "audio" || t == "input_audio" || t == "audio_url";
}
bool IsVideoPart(const std::string& t) { return t == "video" || t == "video_url"; }

namespace {

[[noreturn]] void Fail(const std::string& where, const std::string& what) {
  throw Error(ErrorCode::kTemplate, where + ": " + what);
}

std::string At(size_t i) { return "messages[" + std::to_string(i) + "]"; }

bool IsKnownRole(const std::string& role) {
  return role == "system" || role == "developer" || role == "user" || role == "assistant" ||
         role == "model" || role == "tool";
}

// `dict.get(key)`: None for a missing key.
const Json* Get(const Json& object, const char* key) {
  static const Json kNone;
  const Json* v = GetItem(&object, key);
  return v == nullptr ? &kNone : v;
}

void ValidateParts(const Json& parts, const std::string& where) {
  for (size_t p = 0; p < parts.size(); ++p) {
    const Json& part = parts[p];
    const std::string at = where + "[" + std::to_string(p) + "]";
    if (!part.is_object()) Fail(at, "a content part must be an object, got a " + TypeName(&part));
    const Json* type = GetItem(&part, "type");
    if (!IsString(type)) Fail(at + ".type", "a content part needs a string type");
    const auto& t = type->get_ref<const std::string&>();
    if (t == "text") {
      if (!IsString(GetItem(&part, "text"))) {
        Fail(at + ".text",
             "a text part needs a string text, got a " + TypeName(GetItem(&part, "text")));
      }
    } else if (!IsImagePart(t) && !IsAudioPart(t) && !IsVideoPart(t)) {
      Fail(at + ".type", "unknown content part type '" + t +
                             "' (expected text, image, image_url, audio, input_audio, audio_url, "
                             "video or video_url)");
    }
  }
}

void ValidateMessage(const Json& m, size_t i) {
  const std::string where = At(i);
  if (!m.is_object()) Fail(where, "a message must be an object, got a " + TypeName(&m));
  const Json* role = GetItem(&m, "role");
  if (!IsString(role)) Fail(where + ".role", "missing or non-string role");
  const auto& r = role->get_ref<const std::string&>();
  if (!IsKnownRole(r)) {
    Fail(where + ".role",
         "unknown role '" + r + "' (expected system, developer, user, assistant, model or tool)");
  }
  const Json* content = GetItem(&m, "content");
  if (content != nullptr && !content->is_null() && !content->is_string()) {
    if (content->is_array()) {
      ValidateParts(*content, where + ".content");
    } else if (r != "tool" || content->is_object()) {
      // A tool result may be a bare number or boolean (rendered as `value:42`); objects make the
      // template iterate their keys as parts and fail.
      Fail(where + ".content",
           "content must be a string, a list of content parts or null, got a " + TypeName(content));
    }
  }
  for (const char* key : {"reasoning", "reasoning_content"}) {
    const Json* v = GetItem(&m, key);
    if (v != nullptr && !v->is_null() && !v->is_string()) {
      Fail(where + "." + key, std::string("must be a string, got a ") + TypeName(v));
    }
  }
  const Json* name = GetItem(&m, "name");
  if (r == "tool" && name != nullptr && !name->is_null() && !name->is_string()) {
    Fail(where + ".name", "a tool message's name must be a string, got a " + TypeName(name));
  }
  const Json* calls = GetItem(&m, "tool_calls");
  if (calls != nullptr && !calls->is_null()) {
    if (!calls->is_array()) Fail(where + ".tool_calls", "must be a list, got a " + TypeName(calls));
    for (size_t c = 0; c < calls->size(); ++c) {
      const Json& call = (*calls)[c];
      const std::string at = where + ".tool_calls[" + std::to_string(c) + "]";
      if (!call.is_object()) Fail(at, "a tool call must be an object, got a " + TypeName(&call));
      const Json* function = GetItem(&call, "function");
      if (!IsMapping(function)) Fail(at + ".function", "a tool call needs a function object");
      const Json* fname = GetItem(function, "name");
      if (!IsString(fname) || fname->get_ref<const std::string&>().empty()) {
        Fail(at + ".function.name", "a tool call needs a non-empty string function name");
      }
      const Json* args = GetItem(function, "arguments");
      if (args == nullptr || !(args->is_object() || args->is_null())) {
        // The template's own raise_exception message.
        Fail(
            at + ".function.arguments",
            "chat_template: tool_calls[].function.arguments must be a JSON object (mapping), not a "
            "string. Deserialize arguments before passing to the template. (got a " +
                TypeName(args) + ")");
      }
    }
  }
  const Json* responses = GetItem(&m, "tool_responses");
  if (PyTruthy(responses)) {
    if (!responses->is_array()) {
      Fail(where + ".tool_responses", "must be a list, got a " + TypeName(responses));
    }
    for (size_t t = 0; t < responses->size(); ++t) {
      const Json& tr = (*responses)[t];
      const std::string at = where + ".tool_responses[" + std::to_string(t) + "]";
      if (!tr.is_object()) Fail(at, "a tool response must be an object, got a " + TypeName(&tr));
      const Json* tname = GetItem(&tr, "name");
      if (tname != nullptr && !tname->is_null() && !tname->is_string()) {
        Fail(at + ".name", "must be a string, got a " + TypeName(tname));
      }
      if (GetItem(&tr, "response") == nullptr) Fail(at + ".response", "missing response");
    }
  }
}

void ValidateTools(const Json& tools) {
  if (tools.is_null()) return;
  if (!tools.is_array()) Fail("tools", "must be a list of tool schemas, got a " + TypeName(&tools));
  for (size_t t = 0; t < tools.size(); ++t) {
    const Json& tool = tools[t];
    const std::string at = "tools[" + std::to_string(t) + "]";
    if (!tool.is_object()) Fail(at, "a tool must be an object, got a " + TypeName(&tool));
    const Json* function = GetItem(&tool, "function");
    if (!IsMapping(function)) {
      Fail(at + ".function", "a tool needs a function object ({type: function, function: {...}})");
    }
    const Json* name = GetItem(function, "name");
    if (!IsString(name) || name->get_ref<const std::string&>().empty()) {
      Fail(at + ".function.name", "a tool needs a non-empty string function name");
    }
    const Json* params = GetItem(function, "parameters");
    if (params != nullptr && !params->is_null() && !params->is_object()) {
      Fail(at + ".function.parameters", "must be an object schema, got a " + TypeName(params));
    }
  }
}

// The strip_thinking macro: drop `<|channel>...<channel|>` spans, then trim.
std::string StripThinking(const std::string& text) {
  static constexpr std::string_view kOpen = "<|channel>";
  static constexpr std::string_view kClose = "<channel|>";
  std::string result;
  size_t pos = 0;
  while (true) {
    const size_t close = text.find(kClose, pos);
    const std::string part =
        text.substr(pos, close == std::string::npos ? std::string::npos : close - pos);
    const size_t open = part.find(kOpen);
    result += open == std::string::npos ? part : part.substr(0, open);
    if (close == std::string::npos) break;
    pos = close + kClose.size();
  }
  return PyStrip(result);
}

std::string MediaPlaceholder(const std::string& type) {
  if (IsImagePart(type)) return "<|image|>";
  if (IsAudioPart(type)) return "<|audio|>";
  if (IsVideoPart(type)) return "<|video|>";
  return "";
}

std::string PartType(const Json& part) {
  const Json* t = GetItem(&part, "type");
  return IsString(t) ? t->get<std::string>() : std::string();
}

enum class PrevType { kNone, kThink, kTool, kToolCall, kToolResponse };

}  // namespace

std::string RenderChatTemplate(const Json& messages, const Json& tools,
                               const ChatTemplateOptions& options) {
  if (!messages.is_array()) Fail("messages", "must be a list, got a " + TypeName(&messages));
  for (size_t i = 0; i < messages.size(); ++i) ValidateMessage(messages[i], i);
  ValidateTools(tools);

  std::string out = options.bos_token;
  PrevType prev_type = PrevType::kNone;
  std::optional<std::string> prev_non_tool_role;
  size_t first = 0;  // index in `messages` of loop_messages[0]

  const bool has_tools = PyTruthy(tools);
  const bool first_is_system =
      !messages.empty() && (messages[0]["role"] == "system" || messages[0]["role"] == "developer");
  if (options.enable_thinking || has_tools || first_is_system) {
    out += "<|turn>system\n";
    if (options.enable_thinking) {
      out += "<|think|>\n";
      prev_type = PrevType::kThink;
    }
    if (first_is_system) {
      const Json* content = GetItem(&messages[0], "content");
      if (IsString(content)) {
        out += PyStrip(content->get_ref<const std::string&>());
      } else if (content != nullptr && content->is_array()) {
        // Every part contributes trim(text) + ' ', media parts an empty text.
        for (const Json& item : *content) out += PyStrip(PyStr(GetItem(&item, "text"))) + " ";
      }
      first = 1;
    }
    if (has_tools) {
      for (size_t t = 0; t < tools.size(); ++t) {
        out += "<|tool>" + FormatFunctionDeclaration(tools[t], "tools[" + std::to_string(t) + "]") +
               "<tool|>";
      }
      prev_type = PrevType::kTool;
    }
    out += "<turn|>\n";
  }

  const size_t n = messages.size() - first;
  auto msg = [&](size_t idx) -> const Json& { return messages[first + idx]; };
  auto role_of = [&](size_t idx) { return msg(idx)["role"].get<std::string>(); };

  // A role:tool message is rendered only by the forward scan of the nearest preceding non-tool
  // message, and only when that message has tool_calls and no tool_responses. The template drops
  // any other tool message silently; we refuse it.
  {
    std::optional<size_t> owner;
    for (size_t idx = 0; idx < n; ++idx) {
      if (role_of(idx) != "tool") {
        owner = idx;
        continue;
      }
      const bool consumed = owner.has_value() && PyTruthy(Get(msg(*owner), "tool_calls")) &&
                            !PyTruthy(Get(msg(*owner), "tool_responses"));
      if (!consumed) {
        Fail(At(first + idx),
             "tool response without a preceding assistant message with tool_calls");
      }
    }
  }

  std::optional<size_t> last_user_idx;
  for (size_t idx = 0; idx < n; ++idx) {
    if (role_of(idx) == "user") last_user_idx = idx;
  }

  for (size_t idx = 0; idx < n; ++idx) {
    const Json& message = msg(idx);
    const std::string original_role = role_of(idx);
    if (original_role == "tool") continue;
    prev_type = PrevType::kNone;
    const std::string role = original_role == "assistant" ? "model" : original_role;
    const bool continue_same_model_turn = role == "model" && prev_non_tool_role == "assistant";
    if (!continue_same_model_turn) out += "<|turn>" + role + "\n";

    const Json* tool_calls = Get(message, "tool_calls");
    const bool has_tool_calls = PyTruthy(tool_calls);

    // thinking_text = reasoning or reasoning_content (Python `or`).
    const Json* thinking = Get(message, "reasoning");
    if (!PyTruthy(thinking)) thinking = Get(message, "reasoning_content");
    const bool gate = !last_user_idx.has_value() || idx > *last_user_idx ||
                      (options.preserve_thinking && has_tool_calls);
    if (PyTruthy(thinking) && gate) {
      out += "<|channel>thought\n" + thinking->get<std::string>() + "\n<channel|>";
    }

    if (has_tool_calls) {
      for (const Json& call : *tool_calls) {
        const Json& function = call["function"];
        out += "<|tool_call>call:" + function["name"].get<std::string>() + "{";
        const Json& args = function["arguments"];
        if (args.is_object()) {
          bool first_arg = true;
          for (const auto& [key, value] : DictSort(args)) {
            if (!first_arg) out += ",";
            first_arg = false;
            out += key + ":" + FormatArgument(value, false);
          }
        }
        out += "}<tool_call|>";
      }
      prev_type = PrevType::kToolCall;
    }

    bool responded = false;  // ns_tr_out.flag
    const Json* tool_responses = Get(message, "tool_responses");
    if (PyTruthy(tool_responses)) {
      for (const Json& tr : *tool_responses) {
        const Json* name = GetItem(&tr, "name");
        const std::string tool_name = PyTruthy(name) ? name->get<std::string>() : "unknown";
        out += FormatToolResponseBlock(tool_name, GetItem(&tr, "response"));
        responded = true;
        prev_type = PrevType::kToolResponse;
      }
    } else if (has_tool_calls) {
      for (size_t k = idx + 1; k < n && role_of(k) == "tool"; ++k) {
        const Json& follow = msg(k);
        const Json* follow_name = Get(follow, "name");
        std::string tool_name = PyTruthy(follow_name) ? follow_name->get<std::string>() : "unknown";
        // Resolve tool_call_id to the function name; the last match wins, and a missing id on both
        // sides matches (None == None).
        for (const Json& tc : *tool_calls) {
          if (PyEquals(Get(tc, "id"), Get(follow, "tool_call_id"))) {
            tool_name = tc["function"]["name"].get<std::string>();
          }
        }
        const Json* body = Get(follow, "content");
        if (body->is_array()) {
          std::string text;
          for (const Json& part : *body) {
            if (PartType(part) == "text") text += part["text"].get<std::string>();
          }
          const Json text_json(text);
          out += FormatToolResponseBlock(tool_name, &text_json);
          for (const Json& part : *body) out += MediaPlaceholder(PartType(part));
        } else {
          out += FormatToolResponseBlock(tool_name, body);
        }
        responded = true;
        prev_type = PrevType::kToolResponse;
      }
    }

    std::string captured;
    const Json* content = Get(message, "content");
    if (content->is_string()) {
      const auto& s = content->get_ref<const std::string&>();
      captured = role == "model" ? StripThinking(s) : PyStrip(s);
    } else if (content->is_array()) {
      for (const Json& item : *content) {
        const std::string type = PartType(item);
        if (type == "text") {
          const auto& s = item["text"].get_ref<const std::string&>();
          captured += role == "model" ? StripThinking(s) : PyStrip(s);
        } else {
          captured += MediaPlaceholder(type);
        }
      }
    }
    out += captured;
    const bool has_content = !PyStrip(captured).empty();

    std::optional<std::string> next_non_tool_role;
    for (size_t j = idx + 1; j < n; ++j) {
      if (role_of(j) != "tool") {
        next_non_tool_role = role_of(j);
        break;
      }
    }
    const bool continues_into_next =
        role == "model" && next_non_tool_role == "assistant" && (!has_tool_calls || responded);
    if (prev_type == PrevType::kToolCall && !responded) {
      out += "<|tool_response>";
    } else if (continues_into_next) {
      // The next assistant message continues this model turn.
    } else if (!(responded && !has_content && !next_non_tool_role.has_value())) {
      out += "<turn|>\n";
    }
    prev_non_tool_role = original_role;
  }

  if (options.add_generation_prompt) {
    if (prev_type != PrevType::kToolResponse && prev_type != PrevType::kToolCall) {
      out += "<|turn>model\n";
    } else if (prev_type == PrevType::kToolResponse && options.enable_thinking) {
      out += "<|channel>thought\n";
    }
  }
  return out;
}

Json DeserializeToolCallArguments(const Json& messages) {
  Json out = messages;
  if (!out.is_array()) return out;
  for (size_t i = 0; i < out.size(); ++i) {
    Json& m = out[i];
    if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    Json& calls = m["tool_calls"];
    for (size_t c = 0; c < calls.size(); ++c) {
      Json& call = calls[c];
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
        continue;
      Json& function = call["function"];
      if (!function.contains("arguments") || !function["arguments"].is_string()) continue;
      const std::string where = At(i) + ".tool_calls[" + std::to_string(c) + "].function.arguments";
      Json parsed = Json::parse(function["arguments"].get<std::string>(), nullptr, false);
      if (parsed.is_discarded() || !parsed.is_object()) {
        Fail(where, "a string argument must hold a JSON object");
      }
      function["arguments"] = std::move(parsed);
    }
  }
  return out;
}

namespace {

// Strings (keys too) must be UTF-8; the depth was checked before this recursion.
void CheckUtf8(const nlohmann::json& v, const std::string& where) {
  auto check = [&](const std::string& s, const std::string& at) {
    const size_t bad = InvalidUtf8Offset(s);
    if (bad != std::string::npos) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(s[bad]));
      throw Error(ErrorCode::kInvalidArgument,
                  at + ": not valid UTF-8 at byte " + std::to_string(bad) + " (" + byte + ")");
    }
  };
  if (v.is_string()) {
    check(v.get_ref<const std::string&>(), where);
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) CheckUtf8(v[i], where + "[" + std::to_string(i) + "]");
  } else if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      check(it.key(), where + " key");
      CheckUtf8(it.value(), where + "." + it.key());
    }
  }
}

void CheckInput(const nlohmann::json& v, const char* name) {
  if (JsonValueDepthExceeds(v)) {
    throw Error(ErrorCode::kInvalidArgument, std::string(name) + " nest deeper than " +
                                                 std::to_string(kMaxJsonDepth) +
                                                 " arrays/objects (the limit)");
  }
  CheckUtf8(v, name);
}

}  // namespace

std::string RenderChatTemplate(const nlohmann::json& messages, const nlohmann::json& tools,
                               const ChatTemplateOptions& options) {
  // Before dump(), which recurses and throws an untyped error on invalid UTF-8.
  CheckInput(messages, "messages");
  CheckInput(tools, "tools");
  return RenderChatTemplate(Json::parse(messages.dump()), Json::parse(tools.dump()), options);
}

}  // namespace gemma::chat
