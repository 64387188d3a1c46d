// pull: fetch a Hub repository into the Hugging Face cache (hub/hub_client.h). Ctrl-C stops the
// transfer cleanly and keeps the partial file, so the next pull resumes where this one stopped.
#include <csignal>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "core/timer.h"
#include "hub/hub_client.h"
#include "hub/progress.h"

namespace gemma::cli {
namespace {

std::atomic<bool> g_cancel{false};
void OnSigint(int) { g_cancel = true; }

}  // namespace

void AddPullCommand(CLI::App& app) {
  struct Opts {
    std::string spec;
    bool text_only = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "pull",
      "Download a model from the Hugging Face Hub into its cache ($HF_HUB_CACHE, $HF_HOME/hub or "
      "~/.cache/huggingface/hub), shared with transformers; honours HF_ENDPOINT, HF_TOKEN, "
      "HF_HUB_OFFLINE");
  cmd->add_option("model", o->spec, "ORG/NAME[@REVISION], e.g. google/gemma-4-E2B-it")->required();
  cmd->add_flag("--text-only", o->text_only,
                "Only what text generation needs: configs, tokenizer, chat template, weights");
  cmd->callback([o] {
    hub::HubOptions h = hub::HubOptions::FromEnvironment();
    auto progress = std::make_shared<hub::ConsoleProgress>(stderr);
    h.progress = [progress](const hub::TransferProgress& p) { (*progress)(p); };
    h.log = [](const std::string& s) { std::fprintf(stderr, "pull: %s\n", s.c_str()); };
    h.cancel = &g_cancel;
    auto previous = std::signal(SIGINT, OnSigint);
    Timer t;
    hub::PullResult r;
    try {
      r = hub::HubClient(h).Pull(hub::ParseRepoSpec(o->spec), {.text_only = o->text_only});
    } catch (...) {
      std::signal(SIGINT, previous);
      throw;
    }
    std::signal(SIGINT, previous);
    const double s = t.Ms() / 1000;
    std::printf("%s\n", r.snapshot_dir.c_str());
    std::fprintf(stderr,
                 "pull: %s at %s: %d file(s) downloaded (%s in %.1f s, %s/s), %d reused%s\n",
                 o->spec.c_str(), r.commit.c_str(), r.files_downloaded,
                 hub::HumanBytes(r.bytes_downloaded).c_str(), s,
                 hub::HumanBytes(s > 0 ? r.bytes_downloaded / s : 0).c_str(), r.files_reused,
                 r.from_cache_only ? " (offline: from the cache)" : "");
  });
}

}  // namespace gemma::cli
