// chat: the multi-turn REPL (also what `demo` runs on a terminal).
#include <cstdio>
#include <sstream>
#include <stop_token>
#include <string>

#include "cli_util.h"
#include "commands.h"
#include "gemma/error.h"

namespace gemma::cli {
namespace {

constexpr const char* kHelp =
    "commands: /help  /reset (forget the conversation)  /edit K TEXT (replace user turn K, drop "
    "what followed)  /system TEXT (empty removes it)  /think on|off  /image FILE, /video FILE, "
    "/audio FILE "
    "(attach to the next message)  /bye or /quit (Ctrl-D)\n"
    "input: a line is one message; \"\"\" on its own line starts and ends a multi-line message.\n"
    "Ctrl-C stops a reply (the conversation stays) or clears the line at the prompt.\n";

// Messages in pending[0..] with the system prompt first.
nlohmann::json WithSystem(const std::string& system, const nlohmann::json& turns) {
  nlohmann::json msgs = nlohmann::json::array();
  if (!system.empty()) msgs.push_back({{"role", "system"}, {"content", system}});
  for (const auto& m : turns) msgs.push_back(m);
  return msgs;
}

// Drops the oldest exchange (a user turn and what answered it) from `turns`, keeping the last
// user turn. Returns false when nothing is left to drop.
bool DropOldestTurn(nlohmann::json* turns) {
  if (turns->size() <= 1) return false;
  size_t end = 1;  // past the oldest user turn and the replies that follow it
  while (end < turns->size() - 1 && (*turns)[end]["role"] != "user") ++end;
  turns->erase(turns->begin(), turns->begin() + static_cast<std::ptrdiff_t>(end));
  return true;
}

}  // namespace

void RunChat(Engine& engine, ChatSettings settings, std::FILE* in) {
  auto session = engine.NewSession();
  nlohmann::json history = nlohmann::json::array();
  std::string& system = settings.system;
  bool think = settings.think;
  InstallSigint();
  std::fprintf(stderr, "gemma-engine chat (%s). /help for commands, /bye or Ctrl-D to quit\n",
               engine.backend_name().c_str());
  std::string line;
  while (true) {
    std::fprintf(stderr, "> ");
    const ReadStatus st = ReadLine(in, &line);
    if (st == ReadStatus::kEof) {
      std::fprintf(stderr, "\n");
      break;
    }
    if (st == ReadStatus::kInterrupted) {
      std::fprintf(stderr, "\n");  // the terminal dropped the typed line; the chat stays
      continue;
    }
    if (line == "\"\"\"") {
      // Block mode: everything up to a closing """ is one message (pastes, code).
      std::string block, next;
      bool closed = false;
      while (true) {
        const ReadStatus bs = ReadLine(in, &next);
        if (bs == ReadStatus::kEof) break;
        if (bs == ReadStatus::kInterrupted) {
          block.clear();
          std::fprintf(stderr, "\n(block discarded)\n");
          break;
        }
        if (next == "\"\"\"") {
          closed = true;
          break;
        }
        block += (block.empty() ? "" : "\n") + next;
      }
      if (!closed) continue;
      line = block;
      if (line.empty()) continue;
    } else {
      if (line.empty()) continue;
      if (line == "/quit" || line == "/exit" || line == "/bye") break;
      if (line == "/help" || line == "/?") {
        std::fputs(kHelp, stderr);
        continue;
      }
      if (line == "/reset") {
        history = nlohmann::json::array();
        session->Reset();
        std::fprintf(stderr, "(history cleared)\n");
        continue;
      }
      if (line.rfind("/system", 0) == 0) {
        const std::string text = line.size() > 8 ? line.substr(8) : "";
        if (const std::string bad = Utf8Problem(text); !bad.empty()) {
          std::fprintf(stderr, "(system prompt %s; unchanged)\n", bad.c_str());
          continue;
        }
        system = text;
        std::fprintf(stderr, "(system prompt %s)\n", system.empty() ? "removed" : "set");
        continue;
      }
      if (line.rfind("/image ", 0) == 0) {
        settings.images.push_back(line.substr(7));
        std::fprintf(stderr, "(image %s attached to the next message)\n", line.substr(7).c_str());
        continue;
      }
      if (line.rfind("/audio ", 0) == 0) {
        settings.audios.push_back(line.substr(7));
        std::fprintf(stderr, "(audio %s attached to the next message)\n", line.substr(7).c_str());
        continue;
      }
      if (line.rfind("/video ", 0) == 0) {
        settings.videos.push_back(line.substr(7));
        std::fprintf(stderr, "(video %s attached to the next message)\n", line.substr(7).c_str());
        continue;
      }
      if (line.rfind("/think", 0) == 0) {
        think = line.find("on") != std::string::npos;
        std::fprintf(stderr, "(thinking %s)\n", think ? "on" : "off");
        continue;
      }
    }
    nlohmann::json pending = history;
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
      pending = nlohmann::json(std::vector<nlohmann::json>(history.begin(), history.begin() + at));
      line = text;
    } else if (line[0] == '/' && line.find(' ') == std::string::npos && line.size() < 16) {
      std::fprintf(stderr, "(unknown command %s; /help lists them)\n", line.c_str());
      continue;
    }
    // Invalid UTF-8 (a Latin-1 terminal, a binary paste): this line is refused, the chat stays.
    if (const std::string bad = Utf8Problem(line); !bad.empty()) {
      std::fprintf(stderr, "(message %s; not sent, history kept)\n", bad.c_str());
      continue;
    }
    pending.push_back(
        {{"role", "user"},
         {"content", UserContent(line, settings.images, settings.videos, settings.audios)}});
    settings.images.clear();
    settings.videos.clear();
    settings.audios.clear();
    std::stop_source stop;
    SetCancelTarget(&stop);
    int dropped = 0;
    try {
      Result r;
      while (true) {
        try {
          Input in = Input::Messages(WithSystem(system, pending), nlohmann::json::array(), think);
          in.vision_budget = settings.vision_budget;
          r = session->Generate(in, settings.gen, Stream, stop.get_token());
          break;
        } catch (const Error& e) {
          // A full context: forget the oldest exchanges (the system prompt stays), as llama.cpp
          // users expect, instead of failing every later turn until /reset.
          if (e.code() != ErrorCode::kCapacity || !DropOldestTurn(&pending)) throw;
          ++dropped;
        }
      }
      SetCancelTarget(nullptr);
      std::printf("\n");
      if (dropped > 0) {
        std::fprintf(stderr, "(context full: dropped the %d oldest turn%s%s)\n", dropped,
                     dropped == 1 ? "" : "s", system.empty() ? "" : "; the system prompt stays");
      }
      pending.push_back({{"role", "assistant"}, {"content", r.text}});
      history = pending;  // committed only after a complete reply
      WarnIfIncomplete(settings.gen, r);
      PrintTelemetry(r);
    } catch (const Error& e) {
      SetCancelTarget(nullptr);
      std::printf("\n");
      std::fprintf(stderr, "(%s; history kept)\n",
                   e.code() == ErrorCode::kCancelled ? "cancelled" : e.what());
    }
  }
}

}  // namespace gemma::cli
