// tokenize, template: text tools that load no model.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "gemma/error.h"
#include "gemma/text.h"

namespace gemma::cli {
namespace {

std::string ReadAll(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), {});
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(ErrorCode::kIo, path + ": cannot open");
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// --tokenizer FILE, or --model DIR meaning DIR/tokenizer.json.
std::string TokenizerPath(const std::string& tokenizer, const std::string& model) {
  if (!tokenizer.empty()) return tokenizer;
  if (model.empty()) throw Error(ErrorCode::kInvalidArgument, "give --tokenizer FILE or --model DIR");
  const std::filesystem::path p = std::filesystem::path(model) / "tokenizer.json";
  if (!std::filesystem::exists(p))
    throw Error(ErrorCode::kTokenizer, model + " has no tokenizer.json (give --tokenizer FILE)");
  return p.string();
}

nlohmann::json ParseJsonFile(const std::string& path, const char* what) {
  try {
    return nlohmann::json::parse(ReadAll(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::kFormat, path + ": " + what + " is not valid JSON (" + e.what() + ")");
  }
}

}  // namespace

void AddTokenizeCommand(CLI::App& app) {
  struct Opts {
    std::string tokenizer, model, prompt, file;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Token ids of a text (no model is loaded)");
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer.json");
  cmd->add_option("--model", o->model, "Checkpoint directory holding tokenizer.json");
  cmd->add_option("-p,--prompt", o->prompt, "Text (special tokens such as <bos> are ids)");
  cmd->add_option("-f,--file", o->file, "Read the text from FILE (- for stdin)");
  cmd->add_flag("--json", o->json, "{ids, tokens, count} as JSON");
  cmd->callback([o] {
    auto text = TextProcessor::Load(TokenizerPath(o->tokenizer, o->model));
    const std::string input = o->file.empty() ? o->prompt : ReadAll(o->file);
    const std::vector<int32_t> ids = text->Tokenize(input);
    if (o->json) {
      nlohmann::json pieces = nlohmann::json::array();
      for (int32_t id : ids) pieces.push_back(text->TokenText(id));
      nlohmann::json out = {{"ids", ids}, {"tokens", pieces}, {"count", ids.size()}};
      std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      return;
    }
    for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? " " : "", ids[i]);
    std::printf("\n");
    std::fprintf(stderr, "%zu tokens\n", ids.size());
  });
}

void AddTemplateCommand(CLI::App& app) {
  struct Opts {
    std::string messages, tools, tokenizer, model;
    bool think = false, no_generation_prompt = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "template", "A conversation rendered with the canonical Gemma 4 chat template");
  cmd->add_option("--messages", o->messages,
                  "JSON file: an array of messages or {messages, tools} (- for stdin)")
      ->required();
  cmd->add_option("--tools", o->tools, "JSON file: an array of function declarations");
  cmd->add_flag("--think", o->think, "Open the reasoning channel");
  cmd->add_flag("--no-generation-prompt", o->no_generation_prompt,
                "Do not open the model's turn at the end");
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer.json: also print the token count");
  cmd->add_option("--model", o->model, "Checkpoint directory: its tokenizer.json, as --tokenizer");
  cmd->callback([o] {
    nlohmann::json in = ParseJsonFile(o->messages, "--messages");
    nlohmann::json messages = in, tools = nlohmann::json::array();
    if (in.is_object()) {
      if (!in.contains("messages"))
        throw Error(ErrorCode::kInvalidArgument, "--messages: an object needs a \"messages\" array");
      messages = in["messages"];
      if (in.contains("tools")) tools = in["tools"];
    }
    if (!messages.is_array())
      throw Error(ErrorCode::kInvalidArgument, "--messages: expected an array of messages");
    if (!o->tools.empty()) tools = ParseJsonFile(o->tools, "--tools");
    if (!tools.is_array())
      throw Error(ErrorCode::kInvalidArgument, "tools: expected an array of declarations");
    const std::string text = RenderChat(messages, tools, o->think, !o->no_generation_prompt);
    std::fwrite(text.data(), 1, text.size(), stdout);
    if (!o->tokenizer.empty() || !o->model.empty()) {
      auto tok = TextProcessor::Load(TokenizerPath(o->tokenizer, o->model));
      std::fprintf(stderr, "%zu tokens\n", tok->Tokenize(text).size());
    }
  });
}

}  // namespace gemma::cli
