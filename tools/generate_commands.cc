// run (one request, every decoding option as a flag, streamed) and chat (multi-turn REPL).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <stop_token>

#include "chat/chat_template.h"
#include "cli_util.h"
#include "commands.h"
#include "core/json_depth.h"
#include "gemma/engine.h"
#include "gemma/error.h"
#include "hub/model_path.h"
#include "runtime/result_json.h"

namespace gemma::cli {
namespace {

struct CommonOpts {
  std::string model, tokenizer, backend = "cpu";
  int context = 32768;
  int threads = 0;
  size_t device_memory_mib = 0;
  bool no_mmap = false;
  GenerateOptions gen;
  std::vector<std::string> logit_bias;
  std::string prefill = "auto";
  std::string speculative = "off";
  std::string draft_model;
  CLI::Option* speculative_opt = nullptr;
  std::vector<std::string> images, videos, audios;
  int vision_budget = 280;
  std::string regex, schema_file, whitespace = "none";
  bool json = false, json_object = false, tool_calls = false, require_tool_call = false;
  CLI::Option* regex_opt = nullptr;  // to tell --constrain-regex "" from no regex
  // The sampling flags a checkpoint's generation_config.json supplies when they are not given.
  CLI::Option *temperature_opt = nullptr, *top_k_opt = nullptr, *top_p_opt = nullptr,
              *min_p_opt = nullptr, *typical_p_opt = nullptr, *repetition_opt = nullptr;
};

void AddCommon(CLI::App* cmd, CommonOpts& o) {
  cmd->add_option("--model", o.model, "Checkpoint directory, .safetensors file or ORG/NAME[@REV]")
      ->required();
  cmd->add_option("--tokenizer", o.tokenizer, "tokenizer.json (default: beside the model)");
  cmd->add_option("--backend", o.backend, "cpu | cpu-ref | vulkan | auto");
  cmd->add_option("--context", o.context, "Context capacity in tokens")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--threads", o.threads, "CPU threads (0 = all cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--device-memory", o.device_memory_mib,
                  "Vulkan: device memory the engine may use, in MiB (0 = the device's largest "
                  "heap); past it a clear capacity error (auto: the CPU backend)");
  cmd->add_flag("--no-mmap", o.no_mmap,
                "Read the checkpoint into memory instead of mapping it (the per-layer embedding "
                "table stays in the file, read a row per token)");
  GenerateOptions& g = o.gen;
  cmd->add_option("--image", o.images,
                  "Image file (PNG, JPEG, WebP, BMP, GIF; repeatable), placed before the text");
  cmd->add_option("--vision-budget", o.vision_budget,
                  "Soft tokens per image: 70, 140, 280, 560 or 1120")
      ->check(CLI::IsMember({70, 140, 280, 560, 1120}));
  cmd->add_option("--video", o.videos,
                  "Video file (repeatable; 32 frames spread over it, 70 soft tokens each; "
                  "needs the ffmpeg command)");
  cmd->add_option(
      "--audio", o.audios,
      "Audio file (WAV, FLAC, OGG, MP3; repeatable; 16 kHz mono after decoding, one soft "
      "token per 40 ms, 30 s chunks, at most 10 minutes)");
  cmd->add_option("-n,--max-new-tokens", g.max_new_tokens, "Tokens to generate");
  // Unset, these six take the checkpoint's generation_config.json values (ApplyModelDefaults).
  o.temperature_opt = cmd->add_option("--temperature", g.temperature,
                                      "0 = greedy (default: generation_config.json, else 0)");
  o.top_k_opt = cmd->add_option("--top-k", g.top_k, "0 = off");
  o.top_p_opt = cmd->add_option("--top-p", g.top_p, "1 = off");
  o.min_p_opt = cmd->add_option("--min-p", g.min_p, "0 = off");
  o.typical_p_opt = cmd->add_option("--typical-p", g.typical_p, "1 = off");
  o.repetition_opt = cmd->add_option("--repetition-penalty", g.repetition_penalty,
                                     "transformers semantics, 1 = off");
  cmd->add_option("--frequency-penalty", g.frequency_penalty, "OpenAI semantics");
  cmd->add_option("--presence-penalty", g.presence_penalty, "OpenAI semantics");
  cmd->add_option("--penalty-window", g.penalty_window, "tokens the penalties see, -1 = all");
  cmd->add_flag("!--no-penalize-prompt", g.penalize_prompt, "penalties ignore the prompt");
  cmd->add_option("--logit-bias", o.logit_bias, "ID=BIAS (repeatable; -inf bans)");
  cmd->add_option("--seed", g.seed, "sampling seed (default: random, reported)");
  cmd->add_option("--stop", g.stop_strings, "stop string (repeatable)");
  cmd->add_option("--stop-id", g.stop_ids, "stop token id (repeatable)");
  cmd->add_flag("--ignore-eos", g.ignore_eos, "do not stop at the model's EOS ids");
  cmd->add_flag("--logprobs", g.logprobs, "report log-probs of the chosen tokens");
  cmd->add_option("--top-logprobs", g.top_logprobs, "alternatives per token (needs --logprobs)");
  cmd->add_option("--prefill", o.prefill, "auto | sequential | chunked");
  cmd->add_option("--prefill-chunk", g.prefill_chunk, "tokens per prefill chunk (chunked)");
  o.speculative_opt =
      cmd->add_option("--speculative", o.speculative,
                      "off | prompt-lookup | draft-model: drafts (from the prompt and history, or "
                      "from --draft-model) verified in one step (greedy or sampled; the same "
                      "tokens as without, seeded)")
          ->check(CLI::IsMember({"off", "prompt-lookup", "draft-model"}));
  cmd->add_option("--draft-model", o.draft_model,
                  "Draft model for speculative decoding: a smaller checkpoint with the same "
                  "vocabulary (directory, .safetensors file or ORG/NAME[@REV]); implies "
                  "--speculative draft-model unless that is given");
  cmd->add_flag("--jump-forward", g.speculative.jump_forward,
                "with a constraint, draft the text it forces (keys, punctuation, tool-call "
                "frames) and verify it in one step (same output)");
  cmd->add_option("--draft", g.speculative.max_draft, "tokens drafted per step (1..6)")
      ->check(CLI::Range(1, 6));
  auto* re = cmd->add_option("--constrain-regex", o.regex, "output must fully match this regex");
  o.regex_opt = re;
  auto* js = cmd->add_flag("--constrain-json", o.json, "output must be a JSON value");
  auto* jo =
      cmd->add_flag("--constrain-json-object", o.json_object, "output must be a JSON object");
  auto* sc = cmd->add_option("--constrain-schema", o.schema_file,
                             "output must follow this JSON Schema file");
  auto* tc = cmd->add_flag("--constrain-tools", o.tool_calls,
                           "output: Gemma tool calls for the request's tools");
  for (auto* a : {re, js, jo, sc, tc}) {
    for (auto* b : {re, js, jo, sc, tc}) {
      if (a != b) a->excludes(b);
    }
  }
  cmd->add_flag("--require-tool-call", o.require_tool_call, "with --constrain-tools: no free text");
  cmd->add_option("--constrain-whitespace", o.whitespace, "JSON whitespace: none | compact | any");
}

// The sampling options the command line left unset take the checkpoint's published defaults
// (generation_config.json, as Engine::DefaultGenerateOptions reports them).
void ApplyModelDefaults(const CommonOpts& o, const Engine& engine, GenerateOptions* g) {
  const GenerateOptions d = engine.DefaultGenerateOptions();
  auto unset = [](const CLI::Option* opt) { return opt && opt->count() == 0; };
  if (unset(o.temperature_opt)) g->temperature = d.temperature;
  if (unset(o.top_k_opt)) g->top_k = d.top_k;
  if (unset(o.top_p_opt)) g->top_p = d.top_p;
  if (unset(o.min_p_opt)) g->min_p = d.min_p;
  if (unset(o.typical_p_opt)) g->typical_p = d.typical_p;
  if (unset(o.repetition_opt)) g->repetition_penalty = d.repetition_penalty;
}

GenerateOptions Resolve(const CommonOpts& o) {
  GenerateOptions g = o.gen;
  for (const std::string& b : o.logit_bias) {
    const size_t eq = b.find('=');
    if (eq == std::string::npos)
      throw Error(ErrorCode::kInvalidArgument, "--logit-bias wants ID=BIAS, got '" + b + "'");
    try {
      g.logit_bias[std::stoi(b.substr(0, eq))] = std::stof(b.substr(eq + 1));
    } catch (const std::exception&) {
      throw Error(ErrorCode::kInvalidArgument, "--logit-bias: cannot parse '" + b + "'");
    }
  }
  OutputConstraint& c = g.constraint;
  c.whitespace = o.whitespace;
  c.require_tool_call = o.require_tool_call;
  if (o.regex_opt && o.regex_opt->count() > 0 && o.regex.empty()) {
    // "" would silently mean "no constraint"; a regex matching only "" is not useful either.
    throw Error(ErrorCode::kInvalidArgument, "--constrain-regex: the regex is empty");
  }
  if (!o.regex.empty()) {
    c.kind = OutputConstraint::Kind::kRegex;
    c.regex = o.regex;
  } else if (o.json || o.json_object) {
    c.kind = OutputConstraint::Kind::kJson;
    c.object_root = o.json_object;
  } else if (!o.schema_file.empty()) {
    c.kind = OutputConstraint::Kind::kJsonSchema;
    std::ifstream f(o.schema_file);
    if (!f) throw Error(ErrorCode::kIo, o.schema_file + ": cannot open");
    c.schema_json.assign(std::istreambuf_iterator<char>(f), {});
    if (const size_t at = JsonTextDepthExceeded(c.schema_json); at != std::string::npos) {
      throw Error(ErrorCode::kConstraint,
                  o.schema_file + ": nests deeper than " + std::to_string(kMaxJsonDepth) +
                      " arrays/objects (the limit) at byte " + std::to_string(at));
    }
  } else if (o.tool_calls) {
    c.kind = OutputConstraint::Kind::kToolCalls;
  }
  const bool draft_default = !o.draft_model.empty() && o.speculative_opt->count() == 0;
  g.speculative.mode = o.speculative == "prompt-lookup" ? SpeculativeOptions::Mode::kPromptLookup
                       : o.speculative == "draft-model" || draft_default
                           ? SpeculativeOptions::Mode::kDraftModel
                           : SpeculativeOptions::Mode::kOff;
  if (o.prefill == "auto")
    g.prefill = PrefillStrategy::kAuto;
  else if (o.prefill == "sequential")
    g.prefill = PrefillStrategy::kSequential;
  else if (o.prefill == "chunked")
    g.prefill = PrefillStrategy::kChunked;
  else
    throw Error(ErrorCode::kInvalidArgument, "--prefill: auto, sequential or chunked");
  return g;
}

std::shared_ptr<Engine> Open(const CommonOpts& o, const GenerateOptions& g) {
  if (g.max_new_tokens >= o.context) {
    // Said before loading: every request would fail the capacity check otherwise.
    throw Error(ErrorCode::kInvalidArgument,
                "-n " + std::to_string(g.max_new_tokens) +
                    " leaves no room for a prompt in --context " + std::to_string(o.context) +
                    " (the prompt and the reply share the context: raise --context or lower -n)");
  }
  // A terminal hears what the pause is for (mapping a full-size checkpoint from a cold disk
  // takes seconds); logs and pipes do not get the line.
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  if (tty) std::fprintf(stderr, "loading %s ...", o.model.c_str());
  struct ClearLine {
    bool on;
    ~ClearLine() {
      if (on) std::fprintf(stderr, "\r\033[K");
    }
  } clear{tty};
  auto engine = Engine::Load({.model_path = hub::ResolveModelPath(o.model),
                              .tokenizer_path = o.tokenizer,
                              .backend = o.backend,
                              .context_capacity = o.context,
                              .threads = o.threads,
                              .device_memory_limit = o.device_memory_mib << 20,
                              .mmap = !o.no_mmap,
                              .draft_model_path = o.draft_model.empty()
                                                      ? std::string()
                                                      : hub::ResolveModelPath(o.draft_model)});
  if (engine->backend_device_is_cpu()) {
    std::fprintf(stderr,
                 "warning: the Vulkan device '%s' is a CPU emulation (far slower than "
                 "--backend cpu)\n",
                 engine->backend_device().c_str());
  }
  // Once per load: a repository template that is not the built-in one is not what renders.
  if (const ChatTemplateInfo t = engine->chat_template_info();
      t.repository == ChatTemplateInfo::Repository::kDifferent) {
    std::fprintf(stderr, "warning: chat template: %s\n", t.Describe().c_str());
  }
  const int vocab = engine->vocab_size();
  for (int32_t id : g.stop_ids) {
    if (id < 0 || id >= vocab) {
      throw Error(ErrorCode::kInvalidArgument, "--stop-id " + std::to_string(id) +
                                                   " is outside the vocabulary (0.." +
                                                   std::to_string(vocab - 1) + ")");
    }
  }
  for (const auto& [id, bias] : g.logit_bias) {
    if (id < 0 || id >= vocab) {
      throw Error(ErrorCode::kInvalidArgument, "--logit-bias " + std::to_string(id) +
                                                   " is outside the vocabulary (0.." +
                                                   std::to_string(vocab - 1) + ")");
    }
  }
  return engine;
}

std::vector<int32_t> ParseIdList(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      throw Error(ErrorCode::kInvalidArgument, "--ids: '" + item + "' is not a token id");
    }
  }
  if (ids.empty()) throw Error(ErrorCode::kInvalidArgument, "--ids: no token ids given");
  return ids;
}

}  // namespace

namespace {

std::string ReadAll(std::istream& in) {
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string TypeName(const nlohmann::json& j) {
  return j.is_string()    ? "a string"
         : j.is_number()  ? "a number"
         : j.is_boolean() ? "a boolean"
         : j.is_null()    ? "null"
         : j.is_array()   ? "an array"
                          : "an object";
}

// --messages FILE: [messages] or {"messages": [...], "tools": [...]}.
Input MessagesFromFile(const std::string& path, bool think) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(ErrorCode::kIo, path + ": cannot open");
  const std::string text = ReadAll(f);
  if (const size_t at = JsonTextDepthExceeded(text); at != std::string::npos) {
    throw Error(ErrorCode::kInvalidArgument,
                path + ": nests deeper than " + std::to_string(kMaxJsonDepth) +
                    " arrays/objects (the limit) at byte " + std::to_string(at));
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::kInvalidArgument, path + ": not JSON: " + e.what());
  }
  const char* kShape =
      "expected an array of messages or an object {\"messages\": [...], "
      "\"tools\": [...]}";
  nlohmann::json msgs, tools = nlohmann::json::array();
  if (j.is_array()) {
    msgs = std::move(j);
  } else if (j.is_object()) {
    if (!j.contains("messages") || !j["messages"].is_array()) {
      throw Error(ErrorCode::kInvalidArgument,
                  path + ": \"messages\" must be an array of messages (" + kShape + ")");
    }
    msgs = j["messages"];
    if (j.contains("tools") && !j["tools"].is_null()) {
      if (!j["tools"].is_array())
        throw Error(ErrorCode::kInvalidArgument, path + ": \"tools\" must be an array");
      tools = j["tools"];
    }
  } else {
    throw Error(ErrorCode::kInvalidArgument, path + ": " + kShape + ", got " + TypeName(j));
  }
  if (msgs.empty()) throw Error(ErrorCode::kInvalidArgument, path + ": no messages");
  for (size_t k = 0; k < msgs.size(); ++k) {
    if (!msgs[k].is_object()) {
      throw Error(ErrorCode::kInvalidArgument, path + ": messages[" + std::to_string(k) +
                                                   "] must be an object {\"role\", \"content\"}, "
                                                   "got " +
                                                   TypeName(msgs[k]));
    }
  }
  // Media parts ({"type": "image" | "video" | "audio", "path" | "bytes" | "url"}) go to the
  // engine with the messages; relative paths are relative to the working directory, as --image's.
  return Input::Messages(std::move(msgs), std::move(tools), think);
}

void CheckUtf8(const std::string& text, const char* what) {
  if (const std::string bad = Utf8Problem(text); !bad.empty())
    throw Error(ErrorCode::kInvalidArgument, std::string(what) + " is " + bad);
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  struct Opts : CommonOpts {
    std::string prompt, file, ids, messages_file, system;
    bool think = false, json = false, raw = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Generate from a prompt, a prompt file, token ids or chat messages. With none of them and "
      "piped input, the prompt is read from stdin.");
  AddCommon(cmd, *o);
  auto* p =
      cmd->add_option("-p,--prompt", o->prompt, "User message (rendered with the chat template)");
  auto* fo = cmd->add_option("-f,--file", o->file, "Read the user message from FILE (- = stdin)");
  auto* i = cmd->add_option("--ids", o->ids, "Prompt token ids, comma separated (no template)");
  auto* m =
      cmd->add_option("--messages", o->messages_file, "JSON file: {messages, tools} or [messages]");
  for (auto* a : {p, fo, i, m}) {
    for (auto* b : {p, fo, i, m}) {
      if (a != b) a->excludes(b);
    }
  }
  cmd->add_flag("--raw", o->raw, "--prompt / --file is raw text (<bos> + text), not a chat turn");
  cmd->add_option("--system", o->system, "System prompt (with --prompt / --file)");
  cmd->add_flag("--think", o->think, "Enable the reasoning channel");
  cmd->add_flag("--json", o->json, "Print one JSON object with the result and telemetry");
  cmd->callback([o, p, fo] {
    GenerateOptions g = Resolve(*o);
    Input in;
    std::string prompt = o->prompt;
    bool have_prompt = p->count() > 0;
    if (fo->count() > 0) {
      if (o->file == "-") {
        prompt = ReadAll(std::cin);
      } else {
        std::ifstream f(o->file, std::ios::binary);
        if (!f) throw Error(ErrorCode::kIo, o->file + ": cannot open");
        prompt = ReadAll(f);
      }
      have_prompt = true;
    } else if (!have_prompt && o->ids.empty() && o->messages_file.empty() && !StdinIsTerminal()) {
      prompt = ReadAll(std::cin);
      have_prompt = !prompt.empty();
    }
    auto images = [&] {
      std::vector<ImageInput> v;
      for (const std::string& f : o->images) v.push_back(ImageInput::File(f));
      return v;
    };
    auto videos = [&] {
      std::vector<VideoInput> v;
      for (const std::string& f : o->videos) v.push_back(VideoInput::File(f));
      return v;
    };
    auto audios = [&] {
      std::vector<AudioInput> v;
      for (const std::string& f : o->audios) v.push_back(AudioInput::File(f));
      return v;
    };
    if (!o->ids.empty()) {
      in = Input::Ids(ParseIdList(o->ids));
      in.images = images();
      in.videos = videos();
      in.audios = audios();
    } else if (!o->messages_file.empty()) {
      if (!o->images.empty() || !o->videos.empty() || !o->audios.empty()) {
        throw Error(
            ErrorCode::kInvalidArgument,
            "--image/--video/--audio with --messages: put them in the messages' content parts");
      }
      in = MessagesFromFile(o->messages_file, o->think);
    } else if (have_prompt) {
      if (prompt.empty()) throw Error(ErrorCode::kInvalidArgument, "the prompt is empty");
      CheckUtf8(prompt, "the prompt");
      CheckUtf8(o->system, "--system");
      if (o->raw) {
        in =
            Input::Text(prompt);  // the text carries one <|image|> / <|video|> / <|audio|> per file
        in.images = images();
        in.videos = videos();
        in.audios = audios();
      } else {
        nlohmann::json msgs = nlohmann::json::array();
        if (!o->system.empty()) msgs.push_back({{"role", "system"}, {"content", o->system}});
        msgs.push_back(
            {{"role", "user"}, {"content", UserContent(prompt, o->images, o->videos, o->audios)}});
        in = Input::Messages(msgs, nlohmann::json::array(), o->think);
      }
    } else {
      throw Error(ErrorCode::kInvalidArgument, "give --prompt, --file, --ids or --messages");
    }
    in.vision_budget = o->vision_budget;
    auto engine = Open(*o, g);
    ApplyModelDefaults(*o, *engine, &g);
    std::stop_source stop;
    SetCancelTarget(&stop);
    InstallSigint();
    const bool stream = !o->json && engine->has_tokenizer();
    // A long prompt is silent until its first token: say so on a terminal.
    bool note = false;
    if (::isatty(STDERR_FILENO) == 1) {
      const size_t n = engine->PromptTokens(in).size();
      if (n >= 1024) {
        std::fprintf(stderr, "prefilling %zu prompt tokens (Ctrl-C cancels) ...", n);
        note = true;
      }
    }
    auto clear_note = [&note] {
      if (note) std::fprintf(stderr, "\r\033[K");
      note = false;
    };
    TokenCallback cb;
    if (stream || note) {
      cb = [&, stream](const TokenEvent& ev) {
        clear_note();
        if (stream) Stream(ev);
      };
    }
    Result r = engine->NewSession()->Generate(in, g, cb, stop.get_token());
    clear_note();
    SetCancelTarget(nullptr);
    if (o->json) {
      std::printf(
          "%s\n",
          ResultJson(r, g).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      WarnIfIncomplete(g, r);
      return;
    }
    if (!stream) {
      std::printf("tokens:");
      for (int32_t t : r.tokens) std::printf(" %d", t);
    }
    std::printf("\n");
    if (!r.tool_calls.empty()) {
      for (const ToolCall& t : r.tool_calls)
        std::printf("tool call: %s %s\n", t.name.c_str(), t.arguments.dump().c_str());
    }
    WarnIfIncomplete(g, r);
    PrintTelemetry(r);
  });
}

void AddChatCommand(CLI::App& app) {
  struct Opts : CommonOpts {
    std::string system;
    bool think = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "chat",
      "Multi-turn chat. Commands: /help, /reset, /edit K TEXT, /system TEXT, /think on|off, "
      "/bye. \"\"\" starts and ends a multi-line message. Ctrl-C stops a reply or clears the line; "
      "Ctrl-D quits. When the context fills, the oldest turns are dropped (the system prompt "
      "stays).");
  AddCommon(cmd, *o);
  cmd->add_option("--system", o->system, "System prompt");
  cmd->add_flag("--think", o->think, "Start with the reasoning channel on");
  cmd->callback([o] {
    GenerateOptions g = Resolve(*o);
    if (const std::string bad = Utf8Problem(o->system); !bad.empty())
      throw Error(ErrorCode::kInvalidArgument, "--system is " + bad);
    auto engine = Open(*o, g);
    ApplyModelDefaults(*o, *engine, &g);
    if (!engine->has_tokenizer()) throw Error(ErrorCode::kTokenizer, "chat needs a tokenizer.json");
    RunChat(*engine,
            {.system = o->system,
             .think = o->think,
             .gen = g,
             .images = o->images,
             .videos = o->videos,
             .audios = o->audios,
             .vision_budget = o->vision_budget},
            stdin);
  });
}

}  // namespace gemma::cli
