// Pieces shared by the generating subcommands (run, chat, demo): input checks, Ctrl-C, line
// reading, streaming and the one-line telemetry.
#pragma once

#include <cstdio>
#include <stop_token>
#include <string>
#include <string_view>

#include "core/utf8.h"
#include "gemma/engine.h"
#include "runtime/result_json.h"  // ConstraintComplete

namespace gemma::cli {

using gemma::InvalidUtf8Offset;  // core/utf8.h
// "not valid UTF-8 at byte 5 (0xE9)", or "" when `s` is valid.
std::string Utf8Problem(std::string_view s);

// Ctrl-C handling: while a stop_source is set, SIGINT requests a stop (the reply ends, the
// program and the history stay); with none set it only interrupts a blocked read.
void InstallSigint();
void SetCancelTarget(std::stop_source* stop);

enum class ReadStatus { kLine, kInterrupted, kEof };
// One line from `in` without its newline. kInterrupted: Ctrl-C at the prompt (the terminal drops
// what was typed); kEof: Ctrl-D or the end of piped input.
ReadStatus ReadLine(std::FILE* in, std::string* line);

bool StdinIsTerminal();

void Stream(const TokenEvent& ev);
void PrintTelemetry(const Result& r);

// Whether the output satisfies the request's constraint: true without one; with one, only when
// generation ended where the grammar allows it (complete, EOS or a stop id, which the grammar
// permits only where the output is complete) and not at the -n limit, a stop string or Ctrl-C.
// Prints a one-line warning to stderr when a constrained output is incomplete.
void WarnIfIncomplete(const GenerateOptions& g, const Result& r);

// The interactive chat loop shared by `chat` and `demo`.
struct ChatSettings {
  std::string system;
  bool think = false;
  GenerateOptions gen;
  std::vector<std::string> images;  // attached to the first message (then /image FILE)
  std::vector<std::string> videos;  // likewise (/video FILE)
  std::vector<std::string> audios;  // likewise (/audio FILE)
  int vision_budget = 280;
};
// A user turn's content: the text alone, or image, video and audio parts (files) followed by the
// text.
nlohmann::json UserContent(const std::string& text, const std::vector<std::string>& images,
                           const std::vector<std::string>& videos = {},
                           const std::vector<std::string>& audios = {});
void RunChat(Engine& engine, ChatSettings settings, std::FILE* in);

}  // namespace gemma::cli
