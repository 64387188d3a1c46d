#include "server/request_parse.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include "chat/chat_template.h"
#include "media/audio.h"
#include "media/image.h"

namespace gemma::server {
namespace {

using nlohmann::json;

// Fields we know. An unknown field is a 400 naming it: a misspelt "temprature" silently ignored
// would give the client a different sampler than it asked for. Fields listed under kIgnored are
// OpenAI bookkeeping that changes nothing here.
const std::set<std::string> kCommon = {"model",
                                       "stream",
                                       "stream_options",
                                       "temperature",
                                       "top_p",
                                       "top_k",
                                       "min_p",
                                       "typical_p",
                                       "repetition_penalty",
                                       "frequency_penalty",
                                       "presence_penalty",
                                       "penalty_window",
                                       "penalize_prompt",
                                       "seed",
                                       "stop",
                                       "stop_token_ids",
                                       "logit_bias",
                                       "max_tokens",
                                       "n",
                                       "best_of",
                                       "ignore_eos",
                                       "cache_prompt",
                                       "response_format",
                                       "regex",
                                       "logprobs",
                                       "top_logprobs",
                                       "user",
                                       "metadata",
                                       "store",
                                       "service_tier",
                                       "speculative"};
const std::set<std::string> kChatOnly = {
    "messages",        "max_completion_tokens", "tools",
    "tool_choice",     "parallel_tool_calls",   "chat_template_kwargs",
    "reasoning_effort"};
const std::set<std::string> kCompletionOnly = {"prompt", "echo", "suffix"};

constexpr int kMaxChoices = 16;

const json* Field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

double Number(const json& body, const char* name, double def, double lo, double hi) {
  const json* v = Field(body, name);
  if (!v) return def;
  if (!v->is_number()) throw BadField(name, "must be a number, got " + std::string(v->type_name()));
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    throw BadField(name, "must be between " + json(lo).dump() + " and " + json(hi).dump() +
                             ", got " + v->dump());
  }
  return d;
}

// `shown`: the field's name in errors when it is nested (default: name).
int64_t Integer(const json& body, const char* name, int64_t def, int64_t lo, int64_t hi,
                const char* shown = nullptr) {
  const json* v = Field(body, name);
  if (!v) return def;
  name = shown ? shown : name;
  if (!v->is_number_integer()) {
    throw BadField(name,
                   "must be an integer, got " + std::string(v->type_name()) + " " + v->dump());
  }
  const int64_t i =
      v->is_number_unsigned() && v->get<uint64_t>() > INT64_MAX ? INT64_MAX : v->get<int64_t>();
  if (i < lo || i > hi) {
    throw BadField(name, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                             ", got " + v->dump());
  }
  return i;
}

bool Bool(const json& body, const char* name, bool def) {
  const json* v = Field(body, name);
  if (!v) return def;
  if (!v->is_boolean()) throw BadField(name, "must be true or false, got " + v->dump());
  return v->get<bool>();
}

void CheckKnown(const json& body, bool chat) {
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& k = it.key();
    if (kCommon.count(k) || (chat ? kChatOnly.count(k) : kCompletionOnly.count(k))) continue;
    throw ApiError(400, "unknown field '" + k + "'", k, "unknown_field");
  }
}

void CheckModel(const json& body, const ParseContext& ctx, ParsedRequest* r) {
  r->model = ctx.model_id;
  const json* m = Field(body, "model");
  if (!m) return;  // llama-server serves its one model to clients that name none
  if (!m->is_string()) throw BadField("model", "must be a string");
  const std::string name = m->get<std::string>();
  if (name != ctx.model_id) {
    throw ApiError(
        404, "the model '" + name + "' does not exist; this server has '" + ctx.model_id + "'",
        "model", "model_not_found");
  }
}

void ParseSampling(const json& body, const ParseContext& ctx, ParsedRequest* r) {
  GenerateOptions& o = r->options;
  // Sampling fields the request leaves out take the checkpoint's published defaults
  // (generation_config.json; greedy without one), as `run` and `chat` do.
  const GenerateOptions d = ctx.engine->DefaultGenerateOptions();
  o.temperature = Number(body, "temperature", d.temperature, 0.0, 100.0);
  o.top_p = Number(body, "top_p", d.top_p, 0.0, 1.0);
  o.top_k = static_cast<int>(Integer(body, "top_k", d.top_k, 0, ctx.engine->vocab_size()));
  o.min_p = Number(body, "min_p", d.min_p, 0.0, 1.0);
  o.typical_p = Number(body, "typical_p", d.typical_p, 0.0, 1.0);
  o.repetition_penalty = Number(body, "repetition_penalty", d.repetition_penalty, 1e-3, 100.0);
  o.frequency_penalty = Number(body, "frequency_penalty", 0.0, -2.0, 2.0);
  o.presence_penalty = Number(body, "presence_penalty", 0.0, -2.0, 2.0);
  o.penalty_window = static_cast<int>(Integer(body, "penalty_window", -1, -1, 1 << 24));
  o.penalize_prompt = Bool(body, "penalize_prompt", false);
  if (const json* s = Field(body, "seed")) {
    if (!s->is_number_integer()) throw BadField("seed", "must be an integer");
    o.seed =
        s->is_number_unsigned() ? s->get<uint64_t>() : static_cast<uint64_t>(s->get<int64_t>());
  }
  if (const json* s = Field(body, "stop")) {
    json list = s->is_string() ? json::array({*s}) : *s;
    if (!list.is_array()) throw BadField("stop", "must be a string or an array of strings");
    if (list.size() > 16) throw BadField("stop", "at most 16 stop strings");
    for (const json& v : list) {
      if (!v.is_string() || v.get<std::string>().empty())
        throw BadField("stop", "every stop sequence must be a non-empty string");
      o.stop_strings.push_back(v.get<std::string>());
    }
  }
  if (const json* s = Field(body, "stop_token_ids")) {
    if (!s->is_array()) throw BadField("stop_token_ids", "must be an array of token ids");
    for (const json& v : *s) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
          v.get<int64_t>() >= ctx.engine->vocab_size())
        throw BadField("stop_token_ids", "ids must be integers in [0, vocab size)");
      o.stop_ids.push_back(v.get<int32_t>());
    }
  }
  if (const json* b = Field(body, "logit_bias")) {
    if (!b->is_object()) throw BadField("logit_bias", "must be an object of token id -> bias");
    for (auto it = b->begin(); it != b->end(); ++it) {
      const std::string field = "logit_bias." + it.key();
      size_t used = 0;
      long id = -1;
      try {
        id = std::stol(it.key(), &used);
      } catch (const std::exception&) {
      }
      if (used != it.key().size() || id < 0 || id >= ctx.engine->vocab_size())
        throw BadField(field, "keys must be token ids in [0, vocab size)");
      if (!it->is_number()) throw BadField(field, "bias must be a number");
      const double v = it->get<double>();
      if (!(v >= -100 && v <= 100)) throw BadField(field, "bias must be between -100 and 100");
      // OpenAI: -100 bans the token.
      o.logit_bias[static_cast<int32_t>(id)] =
          v <= -100 ? -std::numeric_limits<float>::infinity() : static_cast<float>(v);
    }
  }
  o.ignore_eos = Bool(body, "ignore_eos", false);
  o.reuse_prompt_cache = Bool(body, "cache_prompt", true);
  // Extension: {"mode": "off" | "prompt_lookup" | "draft_model", "max_draft": 1..6}; absent: the
  // server's setting (serve --speculative / --draft-model).
  o.speculative = ctx.speculative;
  if (const json* sp = Field(body, "speculative")) {
    if (!sp->is_object()) throw BadField("speculative", "must be an object");
    for (auto it = sp->begin(); it != sp->end(); ++it) {
      if (it.key() != "mode" && it.key() != "max_draft")
        throw BadField("speculative." + it.key(), "unknown field (mode, max_draft)");
    }
    if (const json* m = Field(*sp, "mode")) {
      const std::string mode = m->is_string() ? m->get<std::string>() : "";
      if (mode == "off") {
        o.speculative.mode = SpeculativeOptions::Mode::kOff;
      } else if (mode == "prompt_lookup") {
        o.speculative.mode = SpeculativeOptions::Mode::kPromptLookup;
      } else if (mode == "draft_model") {
        if (!ctx.engine->has_draft_model())
          throw BadField("speculative.mode",
                         "this server has no draft model (serve --draft-model)");
        o.speculative.mode = SpeculativeOptions::Mode::kDraftModel;
      } else {
        throw BadField("speculative.mode", "must be \"off\", \"prompt_lookup\" or \"draft_model\"");
      }
    }
    o.speculative.max_draft = static_cast<int>(
        Integer(*sp, "max_draft", o.speculative.max_draft, 1, 6, "speculative.max_draft"));
  }
  r->n = static_cast<int>(Integer(body, "n", 1, 1, kMaxChoices));
  r->best_of = static_cast<int>(Integer(body, "best_of", r->n, 1, kMaxChoices));
  if (r->best_of < r->n) throw BadField("best_of", "must be >= n");
  r->stream = Bool(body, "stream", false);
  if (const json* so = Field(body, "stream_options")) {
    if (!so->is_object()) throw BadField("stream_options", "must be an object");
    if (!r->stream) throw BadField("stream_options", "only allowed with stream: true");
    r->include_usage = Bool(*so, "include_usage", false);
  }
}

void SetConstraint(ParsedRequest* r, OutputConstraint c, const char* field) {
  if (r->options.constraint.kind != OutputConstraint::Kind::kNone) {
    throw BadField(field,
                   "only one output constraint per request (response_format, regex or "
                   "tool_choice)");
  }
  r->options.constraint = std::move(c);
  r->constraint_field = field;
}

void ParseResponseFormat(const json& body, ParsedRequest* r) {
  if (const json* re = Field(body, "regex")) {
    if (!re->is_string() || re->get<std::string>().empty())
      throw BadField("regex", "must be a non-empty string");
    OutputConstraint c;
    c.kind = OutputConstraint::Kind::kRegex;
    c.regex = re->get<std::string>();
    SetConstraint(r, c, "regex");
  }
  const json* rf = Field(body, "response_format");
  if (!rf) return;
  if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
    throw BadField("response_format", "must be an object with a string 'type'");
  const std::string type = (*rf)["type"];
  OutputConstraint c;
  if (type == "text") return;
  if (type == "json_object") {
    if (rf->contains("schema")) {  // llama-server's form: json_object with a schema
      c.kind = OutputConstraint::Kind::kJsonSchema;
      c.schema_json = (*rf)["schema"].dump();
    } else {
      c.kind = OutputConstraint::Kind::kJson;
      c.object_root = true;
    }
  } else if (type == "json_schema") {
    const json* js = Field(*rf, "json_schema");
    if (!js || !js->is_object())
      throw BadField("response_format.json_schema", "must be an object with a 'schema'");
    const json* schema = Field(*js, "schema");
    if (!schema || !(schema->is_object() || schema->is_boolean()))
      throw BadField("response_format.json_schema.schema", "must be a JSON Schema object");
    if (const json* strict = Field(*js, "strict"); strict && !strict->is_boolean())
      throw BadField("response_format.json_schema.strict", "must be true or false");
    // strict or not, the schema is enforced token by token.
    c.kind = OutputConstraint::Kind::kJsonSchema;
    c.schema_json = schema->dump();
  } else if (type == "regex") {
    const json* re = Field(*rf, "regex");
    if (!re || !re->is_string()) throw BadField("response_format.regex", "must be a string");
    c.kind = OutputConstraint::Kind::kRegex;
    c.regex = re->get<std::string>();
  } else {
    throw BadField("response_format.type",
                   "must be text, json_object, json_schema or regex, got '" + type + "'");
  }
  SetConstraint(r, c, "response_format");
}

// "%2F" -> "/" in a file URL's path; a malformed escape is the client's 400.
std::string PercentDecode(const std::string& s, const std::string& at) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    auto hex = [&](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const int hi = i + 2 < s.size() ? hex(s[i + 1]) : -1, lo = i + 2 < s.size() ? hex(s[i + 2]) : -1;
    if (hi < 0 || lo < 0) throw BadField(at, "has a malformed %-escape in its file URL");
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

// A media part (image, audio, video) either carries its bytes (a data: URL, base64) or names a
// file. A file is read only inside the server's media folder (`serve --media-dir`); the part is
// rewritten to {"type": image|audio|video, "path": CANONICAL, ...its other fields}.
void CheckMediaPart(json& part, const std::string& at, const std::filesystem::path& media_dir) {
  const std::string type = part["type"];
  const bool image = chat::IsImagePart(type);
  const bool audio = chat::IsAudioPart(type);
  const bool video = chat::IsVideoPart(type);
  if (!image && !audio && !video) return;
  const char* what = image ? "image" : audio ? "audio" : "video";
  const char* own = image ? "image_url" : audio ? "audio_url" : "video_url";
  // Where a part can name a file: "path" and the bare type key ("image": "x.png"), whatever the
  // string (the engine reads it as a path; for video also a "url" that is not a data: URL); "url"
  // and the OpenAI-style
  // {"image_url": {"url": ...}} with a file:// URL. Other URLs must be data: URLs (bytes); remote
  // URLs are never fetched.
  std::string ref, ref_key;
  for (const char* key : {"path", what, "url", own}) {
    const std::string k = key;
    if (!part.contains(k) || (type == "input_audio" && k == "audio")) continue;
    const json& v = part[k];
    const json* str = v.is_object() && v.contains("url") ? &v["url"] : &v;
    if (!str->is_string()) {
      if (k == "path") throw BadField(at + ".path", "must be a string");
      continue;
    }
    const std::string text = str->get<std::string>();
    const bool names_file =
        k == "path" || k == what || (video && k == "url" && text.rfind("data:", 0) != 0);
    if (text.rfind("file://", 0) == 0 || (names_file && text.find("://") == std::string::npos)) {
      ref = text;
      ref_key = k;
      break;
    }
    if (text.rfind("data:", 0) != 0)
      throw BadField(at,
                     std::string(what) + " URLs must be data: URLs (remote URLs are not fetched)");
  }
  if (ref.empty()) return;  // bytes: a data: URL or base64
  if (media_dir.empty()) {
    throw BadField(at, std::string("this server reads no files: send the ") + what +
                           " as a data: URL or base64 bytes (or start the server with "
                           "--media-dir DIR to allow files inside DIR)");
  }
  std::string path = ref;
  if (path.rfind("file://", 0) == 0) {
    path = path.substr(7);
    if (path.rfind("localhost/", 0) == 0) path = path.substr(9);
    if (path.empty() || path[0] != '/')
      throw BadField(at, "a file URL must be file:///ABSOLUTE/PATH (no host)");
    path = PercentDecode(path, at);
  }
  if (path.find('\0') != std::string::npos) throw BadField(at, "the file name holds a NUL byte");
  std::filesystem::path p(path);
  if (p.is_relative()) p = media_dir / p;
  std::error_code ec;
  const std::filesystem::path canon = std::filesystem::weakly_canonical(p, ec);
  const std::filesystem::path rel = ec ? std::filesystem::path() : canon.lexically_relative(media_dir);
  if (ec || rel.empty() || rel.is_absolute() || *rel.begin() == "..") {
    throw BadField(at, std::string("the ") + what + " file is outside the server's media folder");
  }
  if (!std::filesystem::is_regular_file(canon, ec))
    throw BadField(at, std::string("no ") + what + " file '" + rel.string() +
                           "' in the server's media folder");
  for (const char* key : {"path", what, "url", own}) part.erase(key);
  part["type"] = what;
  if (video) {
    // ffmpeg opens it by name later (a component swapped for a link in between would be followed:
    // docs/server.md).
    part["path"] = canon.string();
    return;
  }
  // Images and audio are read now, through the checked path without following links, and travel
  // as bytes: nothing opens the name again.
  constexpr size_t kMaxMediaFileBytes = size_t{512} << 20;
  try {
    part["bytes"] = media::EncodeBase64(ReadInsideFolder(media_dir, rel, kMaxMediaFileBytes));
  } catch (const Error& e) {
    throw BadField(at, std::string("the ") + what + " file '" + rel.string() +
                           "' cannot be read: " + e.what());
  }
}

}  // namespace

std::vector<uint8_t> ReadInsideFolder(const std::filesystem::path& dir,
                                      const std::filesystem::path& rel, size_t max_bytes) {
  std::vector<std::string> parts;
  for (const std::filesystem::path& c : rel) parts.push_back(c.string());
  if (parts.empty() || rel.is_absolute())
    throw Error(ErrorCode::kIo, "not a relative path inside the folder");
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Error(ErrorCode::kIo, "the folder cannot be opened");
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    if (parts[i].empty() || parts[i] == "." || parts[i] == "..") {
      ::close(fd);
      throw Error(ErrorCode::kIo, "'.' and '..' are not followed");
    }
    const int flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (last ? O_NONBLOCK : O_DIRECTORY);
    const int next = ::openat(fd, parts[i].c_str(), flags);
    const int err = errno;
    ::close(fd);
    if (next < 0) {
      throw Error(ErrorCode::kIo, err == ELOOP || err == ENOTDIR
                                      ? "a symbolic link or a non-folder on the way"
                                      : std::strerror(err));
    }
    fd = next;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(ErrorCode::kIo, "not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    throw Error(ErrorCode::kCapacity, "larger than " + std::to_string(max_bytes >> 20) + " MiB");
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  bytes.resize(got);  // a file that shrank meanwhile: what was there
  return bytes;
}

namespace {

// OpenAI messages -> the chat template's shape: tool-call arguments arrive as JSON text and the
// template wants objects.
json NormalizeMessagesImpl(const json& messages, const std::filesystem::path& media_dir) {
  if (!messages.is_array() || messages.empty())
    throw BadField("messages", "must be a non-empty array of messages");
  json out = messages;
  for (size_t i = 0; i < out.size(); ++i) {
    json& m = out[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw BadField(at, "must be an object");
    if (!m.contains("role") || !m["role"].is_string())
      throw BadField(at + ".role", "must be a string");
    if (m.contains("content") && !m["content"].is_null() && !m["content"].is_string() &&
        !m["content"].is_array())
      throw BadField(at + ".content", "must be a string or an array of content parts");
    if (m.contains("content") && m["content"].is_null()) m.erase("content");
    if (m.contains("content") && m["content"].is_array()) {
      for (size_t k = 0; k < m["content"].size(); ++k) {
        json& part = m["content"][k];
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) continue;
        const std::string pat = at + ".content[" + std::to_string(k) + "]";
        CheckMediaPart(part, pat, media_dir);
      }
    }
    m.erase("reasoning_content");  // earlier turns' reasoning is not replayed (Gemma 4 template)
    if (!m.contains("tool_calls")) continue;
    if (m["tool_calls"].is_null()) {
      m.erase("tool_calls");
      continue;
    }
    if (!m["tool_calls"].is_array()) throw BadField(at + ".tool_calls", "must be an array");
    for (size_t k = 0; k < m["tool_calls"].size(); ++k) {
      json& call = m["tool_calls"][k];
      const std::string cat = at + ".tool_calls[" + std::to_string(k) + "].function.arguments";
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
        throw BadField(at + ".tool_calls", "each call needs a function object");
      json& args = call["function"]["arguments"];
      if (args.is_string()) {
        try {
          args = json::parse(args.get<std::string>());
        } catch (const json::exception&) {
          throw BadField(cat, "is not valid JSON");
        }
      }
      if (args.is_null()) args = json::object();
      if (!args.is_object()) throw BadField(cat, "must be a JSON object");
    }
  }
  return out;
}

void ParseTools(const json& body, const ParseContext& ctx, ParsedRequest* r) {
  const json* tools = Field(body, "tools");
  const json* choice = Field(body, "tool_choice");
  if (!tools) {
    if (choice && !(choice->is_string() && *choice == "none"))
      throw BadField("tool_choice", "needs 'tools'");
    return;
  }
  if (!tools->is_array()) throw BadField("tools", "must be an array of tools");
  if (tools->empty()) return;
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& t = (*tools)[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || t.value("type", json()) != "function" || !t.contains("function") ||
        !t["function"].is_object() || !t["function"].contains("name") ||
        !t["function"]["name"].is_string())
      throw BadField(at, "must be {type: 'function', function: {name, description, parameters}}");
  }
  r->tools_given = true;
  r->input.tools = *tools;
  std::string mode = "auto";
  std::string named;
  if (choice) {
    if (choice->is_string()) {
      mode = choice->get<std::string>();
      if (mode != "auto" && mode != "none" && mode != "required")
        throw BadField("tool_choice", "must be auto, none, required or a named function");
    } else if (choice->is_object() && choice->value("type", "") == "function" &&
               choice->contains("function") && (*choice)["function"].is_object() &&
               (*choice)["function"].contains("name") &&
               (*choice)["function"]["name"].is_string()) {
      mode = "named";
      named = (*choice)["function"]["name"];
    } else {
      throw BadField("tool_choice",
                     "must be auto, none, required or "
                     "{type: 'function', function: {name}}");
    }
  }
  if (mode == "none") {
    // The tools stay declared (the model knows them) but a call cannot start.
    const std::vector<int32_t> ids = ctx.engine->Tokenize("<|tool_call>");
    if (ids.size() == 1) r->options.logit_bias[ids[0]] = -std::numeric_limits<float>::infinity();
    return;
  }
  OutputConstraint c;
  c.kind = OutputConstraint::Kind::kToolCalls;
  c.require_tool_call = mode != "auto";
  if (mode == "named") {
    json only = json::array();
    for (const json& t : *tools)
      if (t["function"]["name"] == named) only.push_back(t);
    if (only.empty())
      throw BadField("tool_choice.function.name", "no tool named '" + named + "' in tools");
    // The constraint follows Input::tools, so the forced function is the one declared.
    r->input.tools = only;
  }
  SetConstraint(r, c, "tool_choice");
}

void ParseReasoning(const json& body, ParsedRequest* r) {
  bool think = false;
  if (const json* e = Field(body, "reasoning_effort")) {
    if (!e->is_string()) throw BadField("reasoning_effort", "must be a string");
    const std::string v = *e;
    if (v == "low" || v == "medium" || v == "high")
      think = true;
    else if (v != "none" && v != "minimal")
      throw BadField("reasoning_effort", "must be none, minimal, low, medium or high");
  }
  if (const json* k = Field(body, "chat_template_kwargs")) {
    if (!k->is_object()) throw BadField("chat_template_kwargs", "must be an object");
    for (auto it = k->begin(); it != k->end(); ++it) {
      if (it.key() != "enable_thinking")
        throw BadField("chat_template_kwargs." + it.key(), "unknown template argument");
    }
    think = Bool(*k, "enable_thinking", think);
  }
  r->input.enable_thinking = think;
}

}  // namespace

json NormalizeMessages(const json& messages, const ParseContext& ctx) {
  return NormalizeMessagesImpl(messages, ctx.media_dir);
}

ParsedRequest ParseChatRequest(const json& body, const ParseContext& ctx) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  CheckKnown(body, true);
  ParsedRequest r;
  r.chat = true;
  CheckModel(body, ctx, &r);
  const json* messages = Field(body, "messages");
  if (!messages) throw BadField("messages", "is required");
  r.input = Input::Messages(NormalizeMessagesImpl(*messages, ctx.media_dir));
  ParseSampling(body, ctx, &r);
  ParseReasoning(body, &r);
  ParseResponseFormat(body, &r);
  ParseTools(body, ctx, &r);
  const int64_t cap = ctx.engine->context_capacity();
  const int64_t a = Integer(body, "max_tokens", 0, 1, INT64_MAX);
  const int64_t b = Integer(body, "max_completion_tokens", 0, 1, INT64_MAX);
  const int64_t max = b ? b : a;  // 0: fill the context (set once the prompt is known)
  if (max > cap) {
    throw ApiError(400,
                   "max_tokens " + std::to_string(max) + " exceeds the context of " +
                       std::to_string(cap) + " tokens",
                   b ? "max_completion_tokens" : "max_tokens", "context_length_exceeded");
  }
  r.options.max_new_tokens = static_cast<int>(max);
  r.logprobs = Bool(body, "logprobs", false);
  r.options.top_logprobs = static_cast<int>(Integer(body, "top_logprobs", 0, 0, 20));
  if (r.options.top_logprobs > 0 && !r.logprobs)
    throw BadField("top_logprobs", "needs logprobs: true");
  r.options.logprobs = r.logprobs || r.best_of > r.n;
  return r;
}

namespace {

// A few ISO-639-1 codes by name, for the instruction; other codes are named as given.
std::string LanguageName(const std::string& code) {
  static const std::map<std::string, std::string> kNames = {
      {"ar", "Arabic"},   {"de", "German"},   {"en", "English"},    {"es", "Spanish"},
      {"fr", "French"},   {"hi", "Hindi"},    {"id", "Indonesian"}, {"it", "Italian"},
      {"ja", "Japanese"}, {"ko", "Korean"},   {"nl", "Dutch"},      {"pl", "Polish"},
      {"pt", "Portuguese"}, {"ru", "Russian"}, {"sv", "Swedish"},   {"th", "Thai"},
      {"tr", "Turkish"},  {"uk", "Ukrainian"}, {"vi", "Vietnamese"}, {"zh", "Chinese"}};
  auto it = kNames.find(code);
  return it == kNames.end() ? "the language '" + code + "'" : it->second;
}

}  // namespace

std::string AudioInstruction(bool translate, const std::string& language,
                             const std::string& prompt) {
  // Our wording; the model card's ASR / AST prompts ask for the same things.
  std::string s;
  if (translate) {
    s = "Translate the speech in this audio into English text. Output only the translation, "
        "with no other text.";
  } else {
    s = "Transcribe the speech in this audio" +
        (language.empty() ? std::string() : " (" + LanguageName(language) + ")") +
        " exactly as spoken. Output only the transcription, with no other text.";
  }
  if (!prompt.empty()) s += "\nContext and spellings to follow: " + prompt;
  return s;
}

AudioRequest ParseAudioRequest(const std::multimap<std::string, std::string>& fields,
                               const std::string* file, bool translate, const ParseContext& ctx) {
  static const std::set<std::string> kKnown = {"model",           "language", "prompt",
                                               "response_format", "temperature", "stream",
                                               "timestamp_granularities[]", "timestamp_granularities",
                                               "max_tokens"};
  for (const auto& [name, value] : fields) {
    if (!kKnown.count(name)) throw ApiError(400, "unknown field '" + name + "'", name, "unknown_field");
    if (fields.count(name) > 1 && name.find("timestamp_granularities") == std::string::npos)
      throw BadField(name, "is given more than once");
  }
  auto get = [&](const char* name) -> const std::string* {
    auto it = fields.find(name);
    return it == fields.end() ? nullptr : &it->second;
  };
  if (!file) throw BadField("file", "is required (the audio file, as a multipart file field)");
  AudioRequest ar;
  ar.translate = translate;
  if (const std::string* f = get("response_format")) ar.response_format = *f;
  static const std::set<std::string> kFormats = {"json", "text", "verbose_json", "srt", "vtt"};
  if (!kFormats.count(ar.response_format))
    throw BadField("response_format",
                   "must be json, text, verbose_json, srt or vtt, got '" + ar.response_format + "'");
  if (const std::string* s = get("stream"); s && *s != "false")
    throw BadField("stream", "streamed transcriptions are not supported; leave it out");
  for (auto [it, end] = fields.equal_range("timestamp_granularities[]"); it != end; ++it) {
    if (it->second != "segment")
      throw BadField("timestamp_granularities[]",
                     "only 'segment' (the whole clip as one segment) is supported; the model "
                     "gives no word timings");
  }
  if (const std::string* l = get("language")) {
    ar.language = *l;
    if (ar.language.empty() || ar.language.size() > 16 ||
        ar.language.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-") !=
            std::string::npos)
      throw BadField("language", "must be a language code such as 'en' (ISO-639-1)");
  }
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(file->data()),
                                       file->size());
  try {
    ar.seconds = media::DecodeAudio(bytes, "file").seconds();
  } catch (const Error& e) {
    throw ApiError(e.code() == ErrorCode::kCapacity ? 413 : 400, e.what(), "file",
                   e.code() == ErrorCode::kUnsupported ? "unsupported_audio" : "invalid_audio");
  }
  const std::string* prompt = get("prompt");
  const std::string instruction =
      AudioInstruction(translate, ar.language, prompt ? *prompt : std::string());
  json body = {{"messages",
                json::array({{{"role", "user"},
                              {"content", json::array({{{"type", "audio"},
                                                         {"bytes", media::EncodeBase64(bytes)}},
                                                        {{"type", "text"}, {"text", instruction}}})}}})}};
  if (const std::string* m = get("model")) body["model"] = *m;
  double temperature = 0.0;  // OpenAI's default for these endpoints
  if (const std::string* t = get("temperature")) {
    char* end = nullptr;
    temperature = std::strtod(t->c_str(), &end);
    if (t->empty() || *end != '\0' || !std::isfinite(temperature) || temperature < 0 ||
        temperature > 2)
      throw BadField("temperature", "must be a number in [0, 2]");
  }
  body["temperature"] = temperature;
  // OpenAI's form has no length limit; a model that never ends must not fill the context: 64
  // tokens and 16 a second of audio (speech runs at 2-5 tokens a second), or `max_tokens`.
  int64_t max_tokens = 64 + static_cast<int64_t>(std::ceil(16 * ar.seconds));
  if (const std::string* m = get("max_tokens")) {
    char* end = nullptr;
    max_tokens = std::strtoll(m->c_str(), &end, 10);
    if (m->empty() || *end != '\0' || max_tokens < 1)
      throw BadField("max_tokens", "must be a positive integer");
  }
  body["max_tokens"] = std::min<int64_t>(
      max_tokens, std::max<int64_t>(1, ctx.engine->context_capacity() - 1));
  ar.chat = ParseChatRequest(body, ctx);
  return ar;
}

ParsedRequest ParseCompletionRequest(const json& body, const ParseContext& ctx) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  CheckKnown(body, false);
  ParsedRequest r;
  r.chat = false;
  CheckModel(body, ctx, &r);
  const json* p = Field(body, "prompt");
  if (!p) throw BadField("prompt", "is required");
  json prompt = *p;
  if (prompt.is_array() && prompt.size() == 1 && (prompt[0].is_string() || prompt[0].is_array()))
    prompt = prompt[0];
  if (prompt.is_string()) {
    r.input = Input::Text(prompt.get<std::string>());
  } else if (prompt.is_array() && !prompt.empty()) {
    std::vector<int32_t> ids;
    for (const json& v : prompt) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
          v.get<int64_t>() >= ctx.engine->vocab_size())
        throw BadField("prompt", "must be a string or an array of token ids in [0, vocab size)");
      ids.push_back(v.get<int32_t>());
    }
    r.input = Input::Ids(std::move(ids));
  } else {
    throw BadField("prompt", "must be a string or an array of token ids (one prompt per request)");
  }
  if (Bool(body, "echo", false)) throw BadField("echo", "is not supported");
  if (const json* s = Field(body, "suffix");
      s && !(s->is_string() && s->get<std::string>().empty()))
    throw BadField("suffix", "is not supported (Gemma has no fill-in-the-middle)");
  ParseSampling(body, ctx, &r);
  ParseResponseFormat(body, &r);
  const int64_t cap = ctx.engine->context_capacity();
  const int64_t max = Integer(body, "max_tokens", 16, 1, INT64_MAX);  // OpenAI's default
  if (max > cap) {
    throw ApiError(400,
                   "max_tokens " + std::to_string(max) + " exceeds the context of " +
                       std::to_string(cap) + " tokens",
                   "max_tokens", "context_length_exceeded");
  }
  r.options.max_new_tokens = static_cast<int>(max);
  r.options.top_logprobs = static_cast<int>(Integer(body, "logprobs", 0, 0, 20));
  r.logprobs = Field(body, "logprobs") != nullptr;
  if (Field(body, "top_logprobs")) throw BadField("top_logprobs", "use 'logprobs': N here");
  r.options.logprobs = r.logprobs || r.best_of > r.n;
  return r;
}

nlohmann::json SamplingDefaultsJson(const Engine& engine) {
  const GenerateOptions d = engine.DefaultGenerateOptions();
  return {{"temperature", d.temperature}, {"top_k", d.top_k},
          {"top_p", d.top_p},             {"min_p", d.min_p},
          {"typical_p", d.typical_p},     {"repetition_penalty", d.repetition_penalty}};
}

ApiError FromEngineError(const Error& e) {
  const std::string msg = e.what();
  switch (e.code()) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kUnsupported:
    case ErrorCode::kTokenizer:
      return ApiError(400, msg, "", "invalid_value");
    case ErrorCode::kTemplate:
      return ApiError(400, msg, "messages", "invalid_messages");
    case ErrorCode::kFormat:  // (a request's media bytes that do not decode: the model loaded at
                              // start)
      return ApiError(400, msg, "messages", "invalid_media");
    case ErrorCode::kConstraint:
      return ApiError(400, msg, "response_format", "invalid_constraint");
    case ErrorCode::kCapacity:
      return ApiError(400, msg, "messages", "context_length_exceeded");
    case ErrorCode::kCancelled:
      return ApiError(503, msg, "", "cancelled");
    case ErrorCode::kBusy:  // a slot's session is never shared, so this is a server bug
      return ApiError(503, msg, "", "busy");
    default:
      return ApiError(500, msg, "", "engine_error");
  }
}

ApiError FromEngineError(const Error& e, const ParsedRequest& r) {
  if ((e.code() == ErrorCode::kConstraint || e.code() == ErrorCode::kUnsupported) &&
      !r.constraint_field.empty()) {
    return ApiError(400, e.what(), r.constraint_field, "invalid_constraint");
  }
  return FromEngineError(e);
}

}  // namespace gemma::server
