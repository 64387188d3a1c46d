// Renders TransferProgress for people: a redrawn bar with bytes, rate and ETA on a terminal, plain
// lines (start, every 25%, done) when stderr is a file or a pipe, so logs stay readable.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

#include "hub/hub_client.h"

namespace gemma::hub {

class ConsoleProgress {
 public:
  explicit ConsoleProgress(FILE* out);
  void operator()(const TransferProgress& p);

 private:
  FILE* out_;
  bool tty_;
  std::string file_;
  int last_quarter_ = -1;
  std::chrono::steady_clock::time_point start_;
  uint64_t start_bytes_ = 0;
};

// "1.2 GiB", "340.0 MiB", "12 B".
std::string HumanBytes(double bytes);

}  // namespace gemma::hub
