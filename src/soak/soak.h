// The soak harness behind `gemma-engine soak` (docs/reliability.md): the production engine and its
// sessions driven through a seeded, randomized schedule of scenarios for a given time, every
// result checked against something the engine under test did not produce:
//
//   greedy_golden     greedy tokens equal those the reference backend (cpu-ref) produced at start
//   sampling_repeat   seeded sampling gives identical tokens on two sessions and across the run
//   regex             constrained output matches under RE2 (Debian's libre2)
//   json              constrained output parses as a JSON object (nlohmann)
//   schema, tool_call constrained output / tool-call arguments validate under AJV (node), when
//                     node and .cache/npm-assets are there; else parsed only (reported)
//   multi_turn        a second turn reusing the session's prefix equals the same turn on a fresh
//                     session
//   cancel_decode,    a request cancelled mid-decode / mid-prefill leaves the session holding a
//   cancel_prefill    prefix of what it evaluated, and the next exact request equals the golden
//   session_destroy   a session destroyed and replaced; the new one equals the golden
//   engine_reload     the engine and all sessions destroyed and loaded again
//   concurrent        sessions on several threads at once all equal their goldens, and a second
//                     concurrent Generate on one session is refused with kBusy
//   device_loss       (engines on a device) the device is lost, or hangs (a submission past the
//                     step timeout), during a turn's prefill or decode:
//                     the request fails with kDevice, nothing of it is committed, and the turn
//                     again equals the same turn on a fresh session
//   device_oom        (engines on a device) a new session whose device memory cannot be allocated
//                     is refused with kCapacity; existing and later sessions equal their goldens
//   media             (models with a vision or audio tower) requests with images and audio clips
//                     made here (BMP, WAV bytes) equal the reference's greedy goldens through any
//                     prefill path; asked again on the same session, the same tokens, and no tower
//                     runs where the whole prompt is reused
//
// Output (out_dir): events.jsonl (one line per step, appended and flushed), progress.json
// (atomically replaced after every step), summary.json (at the end, also after a failure). The
// first failure stops the run; the summary then holds the reproducer: seed, step, scenario,
// inputs, expected and actual, and the command that reruns that step alone. Every step draws its
// choices from (seed, step) only, so --only-step reruns it (on fresh sessions: a failure that
// depends on earlier steps' session state may need the whole run again with the same seed).
// RSS (and the engine's device memory) is sampled after every step; the summary reports the
// least-squares slope after warm-up.
//
// A step that runs longer than step_timeout_s is a hang (a GPU wait that never ends, a deadlock):
// the watchdog writes the reproducer with every thread's state and stack into summary.json (and
// the step into events.jsonl), then ends the process with exit status kHungExitStatus: the hung
// step cannot be stopped, so RunSoak does not return.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gemma::soak {

// The process's exit status after a hung step (StepWatchdog, SoakOptions::step_timeout_s).
inline constexpr int kHungExitStatus = 3;

struct SoakOptions {
  std::string model_path;
  std::string backend = "cpu";                // engine under test
  std::string reference_backend = "cpu-ref";  // records the goldens at start
  std::string profile = "smoke";              // smoke | full (sizes: docs/reliability.md)
  double minutes = 2;                         // steps start until this much wall time has passed
  int64_t max_steps = 0;                      // > 0: stop after this many steps (or at `minutes`)
  std::string out_dir;                        // created if missing
  uint64_t seed = 1;
  int threads = 0;         // CPU threads per engine (0 = all cores)
  // The engine under test loads this draft model (empty: the checkpoint itself, which drafts for
  // itself), and the greedy and sampling scenarios draw speculative decoding (off, prompt lookup,
  // the draft model) per request; their outputs must not change. "none": no draft model.
  std::string draft_model_path;
  int64_t only_step = -1;  // >= 0: run only this step (a reproducer)
  // A step running longer than this is reported as hung and ends the process (0: no limit).
  double step_timeout_s = 600;
  // >= 0: this step never returns (the watchdog's own test).
  int64_t inject_hang_step = -1;
  // Scenarios to draw from (names above; empty: all that apply to the backend).
  std::vector<std::string> scenarios;
  // AJV: tests/constrain/ajv_validate.js and the npm assets' node_modules (tools/setup.sh).
  std::string ajv_script;
  std::string node_modules;
  // > 0: fail when the RSS (or device-memory) slope after warm-up exceeds this many MiB per minute.
  double max_rss_slope_mib_per_min = 0;
  // The command line that reproduces a run (for the reproducer), without --only-step.
  std::string command;
  std::function<void(const std::string&)> log;  // one line per notable event (may be empty)
};

// Runs the soak and returns summary.json's content ("ok": true when no step failed). Throws
// gemma::Error only for bad options or a model that does not load; a failing step is reported in
// the summary, not thrown.
nlohmann::json RunSoak(const SoakOptions& options);

// Least-squares slope of y over x (0 with fewer than two distinct x).
double Slope(const std::vector<double>& x, const std::vector<double>& y);

// Resident set size of this process in bytes (/proc/self/statm), 0 where unavailable.
size_t ResidentBytes();

}  // namespace gemma::soak
