// run (one request, every decoding option as a flag, streamed) and chat (multi-turn REPL).
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stop_token>

#include "commands.h"
#include "gemma/engine.h"
#include "gemma/error.h"
#include "hub/model_path.h"

namespace gemma::cli {
namespace {

struct CommonOpts {
  std::string model, tokenizer, backend = "cpu";
  int context = 32768;
  int threads = 0;
  GenerateOptions gen;
  std::vector<std::string> logit_bias;
  std::string prefill = "auto";
  std::string regex, schema_file, whitespace = "none";
  bool json = false, json_object = false, tool_calls = false, require_tool_call = false;
};

void AddCommon(CLI::App* cmd, CommonOpts& o) {
  cmd->add_option("--model", o.model, "Checkpoint directory, .safetensors file or ORG/NAME[@REV]")
      ->required();
  cmd->add_option("--tokenizer", o.tokenizer, "tokenizer.json (default: beside the model)");
  cmd->add_option("--backend", o.backend, "cpu | cpu-ref | vulkan | auto");
  cmd->add_option("--context", o.context, "Context capacity in tokens")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--threads", o.threads, "CPU threads (0 = all)");
  GenerateOptions& g = o.gen;
  cmd->add_option("-n,--max-new-tokens", g.max_new_tokens, "Tokens to generate");
  cmd->add_option("--temperature", g.temperature, "0 = greedy");
  cmd->add_option("--top-k", g.top_k, "0 = off");
  cmd->add_option("--top-p", g.top_p, "1 = off");
  cmd->add_option("--min-p", g.min_p, "0 = off");
  cmd->add_option("--typical-p", g.typical_p, "1 = off");
  cmd->add_option("--repetition-penalty", g.repetition_penalty, "transformers semantics, 1 = off");
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
  auto* re = cmd->add_option("--constrain-regex", o.regex, "output must fully match this regex");
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
  } else if (o.tool_calls) {
    c.kind = OutputConstraint::Kind::kToolCalls;
  }
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

std::shared_ptr<Engine> Open(const CommonOpts& o) {
  return Engine::Load({.model_path = hub::ResolveModelPath(o.model),
                       .tokenizer_path = o.tokenizer,
                       .backend = o.backend,
                       .context_capacity = o.context,
                       .threads = o.threads});
}

nlohmann::json ResultJson(const Result& r) {
  nlohmann::json j;
  j["text"] = r.text;
  j["raw_text"] = r.raw_text;
  j["reasoning"] = r.reasoning;
  j["tool_calls"] = nlohmann::json::array();
  for (const ToolCall& t : r.tool_calls)
    j["tool_calls"].push_back({{"name", t.name}, {"arguments", t.arguments}});
  j["parse_errors"] = r.parse_errors;
  j["tokens"] = r.tokens;
  j["stop_reason"] = StopReasonName(r.stop_reason);
  if (!r.logprobs.empty()) {
    j["logprobs"] = nlohmann::json::array();
    for (const TokenLogprob& lp : r.logprobs) {
      nlohmann::json top = nlohmann::json::array();
      for (const auto& [id, p] : lp.top) top.push_back({{"id", id}, {"logprob", p}});
      j["logprobs"].push_back({{"id", lp.id}, {"logprob", lp.logprob}, {"top", top}});
    }
  }
  j["resolved_config"] = r.resolved_config;
  const Telemetry& t = r.telemetry;
  j["telemetry"] = {{"backend", t.backend},
                    {"load_ms", t.load_ms},
                    {"prompt_tokens", t.prompt_tokens},
                    {"reused_tokens", t.reused_tokens},
                    {"ttft_ms", t.ttft_ms},
                    {"prefill_ms", t.prefill_ms},
                    {"token_ms", t.token_ms},
                    {"itl_median_ms", t.itl_median_ms},
                    {"itl_p95_ms", t.itl_p95_ms},
                    {"tpot_ms", t.tpot_ms},
                    {"total_ms", t.total_ms},
                    {"decode_tok_s", t.decode_tok_s},
                    {"overall_tok_s", t.overall_tok_s},
                    {"resident_bytes", t.resident_bytes}};
  return j;
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

// Ctrl-C: cancels the generation in flight (the program and the history stay).
std::stop_source* g_stop = nullptr;
void OnSigint(int) {
  if (g_stop) g_stop->request_stop();
}
void InstallSigint() {
  struct sigaction sa {};
  sa.sa_handler = OnSigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocked read returns, so the prompt can be redrawn
  sigaction(SIGINT, &sa, nullptr);
}

void Stream(const TokenEvent& ev) {
  std::fwrite(ev.delta.data(), 1, ev.delta.size(), stdout);
  std::fflush(stdout);
}

void PrintTelemetry(const Result& r) {
  const Telemetry& t = r.telemetry;
  std::fprintf(
      stderr,
      "[%s] stop: %s | prompt %d (reused %d) | TTFT %.1f ms | prefill %.1f ms | %zu tokens, "
      "decode %.2f tok/s, ITL p50 %.1f / p95 %.1f ms | RSS %.0f MiB\n",
      t.backend.c_str(), StopReasonName(r.stop_reason), t.prompt_tokens, t.reused_tokens, t.ttft_ms,
      t.prefill_ms, r.tokens.size(), t.decode_tok_s, t.itl_median_ms, t.itl_p95_ms,
      t.resident_bytes / 1048576.0);
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  struct Opts : CommonOpts {
    std::string prompt, ids, messages_file, system;
    bool think = false, json = false, raw = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("run", "Generate from a prompt, token ids or chat messages");
  AddCommon(cmd, *o);
  auto* p =
      cmd->add_option("-p,--prompt", o->prompt, "User message (rendered with the chat template)");
  auto* i = cmd->add_option("--ids", o->ids, "Prompt token ids, comma separated (no template)");
  auto* m =
      cmd->add_option("--messages", o->messages_file, "JSON file: {messages, tools} or [messages]");
  p->excludes(i)->excludes(m);
  i->excludes(m);
  cmd->add_flag("--raw", o->raw, "--prompt is raw text (<bos> + text), not a chat turn");
  cmd->add_option("--system", o->system, "System prompt (with --prompt)");
  cmd->add_flag("--think", o->think, "Enable the reasoning channel");
  cmd->add_flag("--json", o->json, "Print one JSON object with the result and telemetry");
  cmd->callback([o] {
    const GenerateOptions g = Resolve(*o);
    Input in;
    if (!o->ids.empty()) {
      in = Input::Ids(ParseIdList(o->ids));
    } else if (!o->messages_file.empty()) {
      std::ifstream f(o->messages_file);
      if (!f) throw Error(ErrorCode::kIo, o->messages_file + ": cannot open");
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(f);
      } catch (const nlohmann::json::exception& e) {
        throw Error(ErrorCode::kInvalidArgument, o->messages_file + ": not JSON: " + e.what());
      }
      if (j.is_array())
        in = Input::Messages(j, nlohmann::json::array(), o->think);
      else
        in = Input::Messages(j.value("messages", nlohmann::json::array()),
                             j.value("tools", nlohmann::json::array()), o->think);
    } else if (!o->prompt.empty()) {
      if (o->raw) {
        in = Input::Text(o->prompt);
      } else {
        nlohmann::json msgs = nlohmann::json::array();
        if (!o->system.empty()) msgs.push_back({{"role", "system"}, {"content", o->system}});
        msgs.push_back({{"role", "user"}, {"content", o->prompt}});
        in = Input::Messages(msgs, nlohmann::json::array(), o->think);
      }
    } else {
      throw Error(ErrorCode::kInvalidArgument, "give --prompt, --ids or --messages");
    }
    auto engine = Open(*o);
    std::stop_source stop;
    g_stop = &stop;
    InstallSigint();
    const bool stream = !o->json && engine->has_tokenizer();
    Result r = engine->NewSession()->Generate(
        in, g, stream ? TokenCallback(Stream) : TokenCallback(), stop.get_token());
    g_stop = nullptr;
    if (o->json) {
      std::printf("%s\n", ResultJson(r).dump().c_str());
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
      "Multi-turn chat. Commands: /reset, /edit K TEXT, /system TEXT, /think on|off, /quit. "
      "Ctrl-C cancels a reply.");
  AddCommon(cmd, *o);
  cmd->add_option("--system", o->system, "System prompt");
  cmd->add_flag("--think", o->think, "Start with the reasoning channel on");
  cmd->callback([o] {
    const GenerateOptions g = Resolve(*o);
    auto engine = Open(*o);
    if (!engine->has_tokenizer()) throw Error(ErrorCode::kTokenizer, "chat needs a tokenizer.json");
    auto session = engine->NewSession();
    nlohmann::json history = nlohmann::json::array();
    std::string system = o->system;
    bool think = o->think;
    InstallSigint();
    std::fprintf(stderr,
                 "gemma-engine chat (%s). /reset /edit K TEXT /system TEXT /think on|off /quit\n",
                 engine->backend_name().c_str());
    std::string line;
    while (true) {
      std::fprintf(stderr, "> ");
      if (!std::getline(std::cin, line)) {
        if (std::cin.eof()) break;
        std::cin.clear();  // interrupted by Ctrl-C at the prompt
        std::fprintf(stderr, "\n");
        continue;
      }
      if (line.empty()) continue;
      nlohmann::json pending = history;
      if (line == "/quit" || line == "/exit") break;
      if (line == "/reset") {
        history = nlohmann::json::array();
        session->Reset();
        std::fprintf(stderr, "(history cleared)\n");
        continue;
      }
      if (line.rfind("/system", 0) == 0) {
        system = line.size() > 8 ? line.substr(8) : "";
        std::fprintf(stderr, "(system prompt %s)\n", system.empty() ? "removed" : "set");
        continue;
      }
      if (line.rfind("/think", 0) == 0) {
        think = line.find("on") != std::string::npos;
        std::fprintf(stderr, "(thinking %s)\n", think ? "on" : "off");
        continue;
      }
      if (line.rfind("/edit ", 0) == 0) {
        // /edit K TEXT: replace user turn K (1-based), dropping everything after it.
        std::istringstream ss(line.substr(6));
        size_t k = 0;
        ss >> k;
        std::string text;
        std::getline(ss, text);
        if (!text.empty() && text[0] == ' ') text.erase(0, 1);
        size_t seen = 0, at = history.size();
        for (size_t i = 0; i < history.size(); ++i) {
          if (history[i]["role"] == "user" && ++seen == k) at = i;
        }
        if (k == 0 || at == history.size() || text.empty()) {
          std::fprintf(stderr, "(no user turn %zu, or no text; there are %zu)\n", k, seen);
          continue;
        }
        pending =
            nlohmann::json(std::vector<nlohmann::json>(history.begin(), history.begin() + at));
        line = text;
      }
      pending.push_back({{"role", "user"}, {"content", line}});
      nlohmann::json msgs = nlohmann::json::array();
      if (!system.empty()) msgs.push_back({{"role", "system"}, {"content", system}});
      for (const auto& m : pending) msgs.push_back(m);
      std::stop_source stop;
      g_stop = &stop;
      try {
        Result r = session->Generate(Input::Messages(msgs, nlohmann::json::array(), think), g,
                                     Stream, stop.get_token());
        g_stop = nullptr;
        std::printf("\n");
        pending.push_back({{"role", "assistant"}, {"content", r.text}});
        history = pending;  // committed only after a complete reply
        PrintTelemetry(r);
      } catch (const Error& e) {
        g_stop = nullptr;
        std::printf("\n");
        std::fprintf(stderr, "(%s; history kept)\n",
                     e.code() == ErrorCode::kCancelled ? "cancelled" : e.what());
      }
    }
  });
}

}  // namespace gemma::cli
