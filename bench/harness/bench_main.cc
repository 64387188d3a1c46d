// gemma-bench: the `bench` subcommand of gemma-engine as a standalone binary, for builds of the
// backend rooms alone (same options: `gemma-bench bench --model DIR ...`).
#include <cstdio>
#include <exception>

#include "bench_command.h"
#include "gemma/error.h"

int main(int argc, char** argv) {
  CLI::App app{"gemma-bench: gemma-engine's bench subcommand"};
  app.require_subcommand(1);
  gemma::cli::AddBenchCommand(app);
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
