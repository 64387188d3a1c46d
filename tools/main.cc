// gemma-engine: the command-line front end. Every error prints one line "error: <code>: ..." and
// exits with status 2 (bad input, bad usage) or 3 (a bug); --help and --version exit 0.
#include <cstdio>
#include <exception>
#include <string>

#include "bench_command.h"
#include "commands.h"
#include "gemma/error.h"

#ifndef GEMMA_VERSION
#define GEMMA_VERSION "unknown"
#endif

int main(int argc, char** argv) {
  CLI::App app{"gemma-engine: Gemma 4 E2B inference engine"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "gemma-engine " GEMMA_VERSION);
  // --help shows every option's default (subcommands inherit this).
  app.option_defaults()->always_capture_default();
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
#if GEMMA_HAVE_SOAK
  gemma::cli::AddSoakCommand(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    // CLI11 would print two lines and exit 104-109; the README promises one line and status 2.
    std::string what = e.what();
    if (what.empty()) what = e.get_name();
    std::fprintf(stderr, "error: %s: %s (see --help)\n",
                 std::string(gemma::ErrorCodeName(gemma::ErrorCode::kInvalidArgument)).c_str(),
                 what.c_str());
    return 2;
  } catch (const gemma::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: internal: %s\n", e.what());
    return 3;
  }
  return 0;
}
