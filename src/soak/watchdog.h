// The soak's step watchdog: a step that runs past its limit (a hang: a GPU wait that never ends, a
// deadlock, an endless loop) is reported with what every thread of the process was doing, instead
// of a soak that never finishes and leaves no summary (docs/reliability.md, "Hangs").
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace gemma::soak {

// Every thread of this process (Linux /proc/self/task): id, name, state, CPU seconds in user and
// kernel mode, the kernel function it waits in, and its stack (each frame as module+offset, with
// the symbol where the module exports one; `addr2line -f -C -e MODULE OFFSET` names the rest).
// A thread's stack is taken by a signal it handles; a thread that does not within 200 ms (in an
// uninterruptible kernel wait) has none. Safe to call from any thread; one call at a time.
nlohmann::json ThreadReport();

// Watches one step at a time from a thread of its own: when the step begun last has run longer
// than `timeout_s`, calls `on_hang(step, scenario, seconds)` once, from the watchdog's thread (the
// hung step cannot be stopped: on_hang ends the process or lets it run on).
class StepWatchdog {
 public:
  using OnHang = std::function<void(int64_t step, const std::string& scenario, double seconds)>;
  StepWatchdog(double timeout_s, OnHang on_hang);
  ~StepWatchdog();
  StepWatchdog(const StepWatchdog&) = delete;
  StepWatchdog& operator=(const StepWatchdog&) = delete;

  void Begin(int64_t step, const std::string& scenario);
  // The step ended; true when on_hang was already called for it.
  bool End();

 private:
  struct State;
  State* s_;
};

}  // namespace gemma::soak
