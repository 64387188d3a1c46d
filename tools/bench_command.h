// `gemma-engine bench`: CPU backend benchmarks with a same-run memory-bandwidth floor and a check
// of every row against the CPU reference backend (bench/harness).
#pragma once

#include <CLI/CLI.hpp>

namespace gemma::cli {

void AddBenchCommand(CLI::App& app);

}  // namespace gemma::cli
