// serve: the OpenAI-compatible HTTP server and the web console (src/server).
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <thread>

#include "commands.h"
#include "gemma/engine.h"
#include "gemma/error.h"
#include "hub/model_path.h"
#include "server/server.h"

namespace gemma::cli {

void AddServeCommand(CLI::App& app) {
  struct Opts {
    std::string model, tokenizer, backend = "cpu", alias;
    int context = 8192, threads = 0, max_batch = 16;
    std::string speculative, draft_model;  // (speculative empty: by --draft-model)
    size_t device_memory_mib = 0;
    bool no_mmap = false;
    server::ServerOptions server;
  };
  auto o = std::make_shared<Opts>();
  // Four slots by default: requests generating at once share decode steps (batched decode).
  o->server.slots = 4;
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "OpenAI-compatible HTTP server (/v1/chat/completions, ...) and the web console at /");
  cmd->add_option("--model", o->model,
                  "Checkpoint directory, .safetensors file or ORG/NAME[@REV] (the Hugging Face "
                  "cache, pulled when missing)")
      ->required();
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer.json (default: beside the model)");
  cmd->add_option("--backend", o->backend, "cpu | cpu-ref | vulkan | auto");
  cmd->add_option("--context", o->context, "Context capacity per slot in tokens")
      ->check(CLI::Range(16, 1 << 20));
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all)");
  cmd->add_option("--device-memory", o->device_memory_mib,
                  "Vulkan: device memory the engine may use, in MiB (0 = the device's largest "
                  "heap); past it a clear capacity error (auto: the CPU backend)");
  cmd->add_flag("--no-mmap", o->no_mmap,
                "Read the checkpoint into memory instead of mapping it (the per-layer embedding "
                "table stays in the file, read a row per token)");
  cmd->add_option("--alias", o->alias,
                  "Model id clients use (default: ORG/NAME for a Hub model, else the model "
                  "directory name)");
  cmd->add_option("--host", o->server.host,
                  "Address to bind (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", o->server.port, "Port (0 = any free port)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--slots", o->server.slots, "Requests generating at once (one session each)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--max-batch", o->max_batch,
                  "Decode steps of concurrent slots evaluated together (1 = off; backends that "
                  "gain from it: cpu)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--queue", o->server.max_queue, "Requests waiting for a slot before 429")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--api-key", o->server.api_key, "Require 'Authorization: Bearer KEY' on the API");
  cmd->add_option("--cors", o->server.cors_origin,
                  "Allow cross-origin requests from this origin ('*' for any); off by default");
  cmd->add_option("--body-limit", o->server.body_limit, "Largest request body in bytes")
      ->check(CLI::Range(1024, 1 << 30));
  cmd->add_option("--media-dir", o->server.media_dir,
                  "Let image, audio and video parts name files inside DIR (a path relative to it "
                  "or a file:// URL); off by default: media come as data URLs or base64")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--speculative", o->speculative,
                  "Speculative decoding for requests that do not set \"speculative\": off | "
                  "prompt-lookup | draft-model (default: draft-model with --draft-model, else off)")
      ->check(CLI::IsMember({"off", "prompt-lookup", "draft-model"}));
  cmd->add_option("--draft-model", o->draft_model,
                  "Draft model for speculative decoding: a smaller checkpoint with the same "
                  "vocabulary (directory, .safetensors file or ORG/NAME[@REV])");
  cmd->add_option("--draft", o->server.speculative.max_draft, "Tokens drafted per step (1..6)")
      ->check(CLI::Range(1, 6));
  cmd->callback([o] {
    // ORG/NAME[@REV]: the Hub cache (offline when a loadable snapshot is there), else a pull with
    // progress on stderr; Ctrl-C during it ends the program and keeps the partial file. Done
    // before signals are redirected to the watcher below.
    const std::string spec = o->model;
    const std::string model_path = hub::ResolveModelPath(spec);
    const bool from_hub = model_path != spec;
    // Signals go to one watcher thread (blocked everywhere else, inherited by every thread made
    // from here on), which stops the server from an ordinary context.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a death

    auto engine = Engine::Load({.model_path = model_path,
                                .tokenizer_path = o->tokenizer,
                                .backend = o->backend,
                                .context_capacity = o->context,
                                .threads = o->threads,
                                .max_batch = o->max_batch,
                                .device_memory_limit = o->device_memory_mib << 20,
                                .mmap = !o->no_mmap,
                                .draft_model_path = o->draft_model.empty()
                                                        ? std::string()
                                                        : hub::ResolveModelPath(o->draft_model)});
    server::ServerOptions so = o->server;
    const std::string speculative =
        o->speculative.empty() ? (o->draft_model.empty() ? "off" : "draft-model") : o->speculative;
    so.speculative.mode = speculative == "prompt-lookup" ? SpeculativeOptions::Mode::kPromptLookup
                          : speculative == "draft-model" ? SpeculativeOptions::Mode::kDraftModel
                                                         : SpeculativeOptions::Mode::kOff;
    so.model_id = o->alias;
    if (so.model_id.empty() && from_hub) {
      so.model_id = hub::ParseRepoSpec(spec).repo;  // as vLLM names a Hub model: ORG/NAME
    } else if (so.model_id.empty()) {
      std::filesystem::path p = std::filesystem::path(model_path).lexically_normal();
      if (p.filename().empty()) p = p.parent_path();
      so.model_id = std::filesystem::is_directory(p) ? p.filename().string() : p.stem().string();
    }
    server::Server srv(engine, so);
    const int port = srv.Bind();
    std::thread watcher([&srv, set] {
      int sig = 0;
      sigwait(&set, &sig);
      std::fprintf(stderr, "gemma-engine serve: %s, stopping (generations in flight cancelled)\n",
                   sig == SIGINT ? "SIGINT" : "SIGTERM");
      srv.Stop();
    });
    const std::string host = so.host.find(':') != std::string::npos ? "[" + so.host + "]" : so.host;
    std::fprintf(stderr,
                 "gemma-engine serve: model '%s' on %s, %d slot(s) of %d tokens; listening on "
                 "http://%s:%d/ (API at /v1)%s\n",
                 so.model_id.c_str(), engine->backend_name().c_str(), so.slots,
                 engine->context_capacity(), host.c_str(), port,
                 so.api_key.empty() ? "" : ", API key required");
    // The template in use, always; a warning when the repository ships a different one.
    const ChatTemplateInfo t = engine->chat_template_info();
    std::fprintf(stderr, "gemma-engine serve: %schat template: %s\n",
                 t.repository == ChatTemplateInfo::Repository::kDifferent ? "warning: " : "",
                 t.Describe().c_str());
    if (so.speculative.mode != SpeculativeOptions::Mode::kOff || engine->has_draft_model()) {
      std::fprintf(stderr, "gemma-engine serve: speculative decoding: %s, %d drafts per step%s%s\n",
                   speculative.c_str(), so.speculative.max_draft,
                   engine->has_draft_model() ? "; draft model " : "",
                   engine->has_draft_model() ? o->draft_model.c_str() : "");
    }
    std::fflush(stderr);
    srv.Run();
    // Run() also returns when listening fails; wake the watcher so the program can end.
    pthread_kill(watcher.native_handle(), SIGTERM);
    watcher.join();
    std::fprintf(stderr, "gemma-engine serve: stopped\n");
  });
}

}  // namespace gemma::cli
