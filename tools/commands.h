// gemma-engine subcommands. Each Add*Command registers one subcommand on the app; main() runs it.
#pragma once

#include <CLI/CLI.hpp>

namespace gemma::cli {

void AddRunCommand(CLI::App& app);
void AddInspectCommand(CLI::App& app);
void AddSynthCommand(CLI::App& app);
void AddDemoCommand(CLI::App& app);
void AddChatCommand(CLI::App& app);
void AddPullCommand(CLI::App& app);  // pull_command.cc
void AddTokenizeCommand(CLI::App& app);
void AddTemplateCommand(CLI::App& app);
void AddPerplexityCommand(CLI::App& app);  // perplexity_command.cc
void AddServeCommand(CLI::App& app);  // serve_command.cc
void AddSoakCommand(CLI::App& app);   // soak_command.cc (builds with src/soak)

}  // namespace gemma::cli
