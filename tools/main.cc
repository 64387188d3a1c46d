// gemma-engine: the command-line front end. Errors a user can cause print one line "error: ..." and
// exit with status 2; usage errors exit via CLI11 (status 106-109).
#include <cstdio>
#include <exception>

#include "bench_command.h"
#include "commands.h"
#include "gemma/error.h"

int main(int argc, char** argv) {
  CLI::App app{"gemma-engine: Gemma 4 E2B inference engine"};
  app.require_subcommand(1);
  gemma::cli::AddRunCommand(app);
  gemma::cli::AddChatCommand(app);
  gemma::cli::AddInspectCommand(app);
  gemma::cli::AddSynthCommand(app);
  gemma::cli::AddDemoCommand(app);
  gemma::cli::AddBenchCommand(app);
  gemma::cli::AddPullCommand(app);
  gemma::cli::AddTokenizeCommand(app);
  gemma::cli::AddTemplateCommand(app);
  gemma::cli::AddPerplexityCommand(app);
  gemma::cli::AddServeCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const gemma::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: internal: %s\n", e.what());
    return 3;
  }
  return 0;
}
