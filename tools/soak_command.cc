// `gemma-engine soak`: the soak harness (src/soak/soak.h, docs/reliability.md). Exit status 0
// when every step passed, 1 when one failed (the reproducer is in summary.json and on stderr).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "commands.h"
#include "gemma/error.h"
#include "hub/model_path.h"
#include "soak/soak.h"

namespace gemma::cli {

void AddSoakCommand(CLI::App& app) {
  struct Opts {
    soak::SoakOptions s;
    std::string model;
  };
  auto o = std::make_shared<Opts>();
  o->s.out_dir = "soak-out";
  CLI::App* cmd = app.add_subcommand(
      "soak", "Runs engine and sessions through a seeded random schedule of checked scenarios");
  cmd->add_option("--model", o->model, "Checkpoint directory (or ORG/NAME[@REV])")->required();
  cmd->add_option("--minutes", o->s.minutes, "Wall time to keep starting steps");
  cmd->add_option("--steps", o->s.max_steps, "Stop after this many steps (0 = at --minutes)");
  cmd->add_option("--profile", o->s.profile, "smoke | full (sizes: docs/reliability.md)");
  cmd->add_option("--out", o->s.out_dir, "Directory for events.jsonl, progress.json, summary.json");
  cmd->add_option("--seed", o->s.seed, "Schedule seed");
  cmd->add_option("--backend", o->s.backend, "Backend under test: cpu | cpu-ref | vulkan | auto");
  cmd->add_option("--reference-backend", o->s.reference_backend,
                  "Backend that records the greedy goldens at start");
  cmd->add_option("--threads", o->s.threads, "CPU threads per engine (0 = all cores)");
  cmd->add_option("--draft-model", o->s.draft_model_path,
                  "Draft model of the engine under test (default: the checkpoint drafts for "
                  "itself; none: no draft model)");
  cmd->add_option("--only-step", o->s.only_step,
                  "Run only this step (the reproducer of a failure)");
  cmd->add_option("--scenarios", o->s.scenarios,
                  "Only these scenarios, comma-separated (default: all that apply)")
      ->delimiter(',');
  cmd->add_option("--step-timeout", o->s.step_timeout_s,
                  "A step running longer than this many seconds is a hang: every thread's stack "
                  "goes into summary.json and the process exits with status 3 (0 = no limit)");
  cmd->add_option("--max-rss-slope", o->s.max_rss_slope_mib_per_min,
                  "Fail when RSS (or device memory) grows faster than this many MiB/min after "
                  "warm-up (0 = report only)");
  cmd->callback([o, cmd] {
    soak::SoakOptions s = o->s;
    s.model_path = hub::ResolveModelPath(o->model);
    s.ajv_script = std::string(GEMMA_SOURCE_DIR) + "/tests/constrain/ajv_validate.js";
    s.node_modules = std::string(GEMMA_SOURCE_DIR) + "/.cache/npm-assets/node_modules";
    s.command = "gemma-engine soak --model " + o->model + " --profile " + s.profile + " --seed " +
                std::to_string(s.seed) + " --backend " + s.backend + " --out " + s.out_dir;
    if (!s.scenarios.empty()) {
      std::string list;
      for (const std::string& x : s.scenarios) list += (list.empty() ? "" : ",") + x;
      s.command += " --scenarios " + list;
    }
    s.log = [](const std::string& line) { std::fprintf(stderr, "soak: %s\n", line.c_str()); };
    const nlohmann::json summary = soak::RunSoak(s);
    std::fprintf(
        stderr,
        "soak: %s: %lld steps in %.0f s, scenarios %s, RSS slope %.3f MiB/min; %s/summary.json\n",
        summary["ok"].get<bool>() ? "passed" : "FAILED",
        static_cast<long long>(summary["steps"].get<int64_t>()), summary["elapsed_s"].get<double>(),
        summary["scenarios"].dump().c_str(), summary["rss"]["slope_mib_per_min"].get<double>(),
        s.out_dir.c_str());
    if (summary["rss"].contains("after_reload_slope_mib_per_min")) {
      std::fprintf(stderr, "soak: RSS after engine reloads %.0f to %.0f MiB, slope %.3f MiB/min\n",
                   summary["rss"]["after_reload_first_mib"].get<double>(),
                   summary["rss"]["after_reload_last_mib"].get<double>(),
                   summary["rss"]["after_reload_slope_mib_per_min"].get<double>());
    }
    if (summary.contains("device_memory")) {
      std::fprintf(stderr, "soak: device memory %.0f to %.0f MiB, slope %.3f MiB/min after warm-up\n",
                   summary["device_memory"]["first_mib"].get<double>(),
                   summary["device_memory"]["last_mib"].get<double>(),
                   summary["device_memory"]["slope_mib_per_min"].get<double>());
    }
    if (!summary["ok"].get<bool>()) {
      std::fprintf(stderr, "soak: reproducer: %s\n", summary["reproducer"].dump(2).c_str());
      std::exit(1);
    }
  });
}

}  // namespace gemma::cli
