// perplexity: held-out text perplexity on fixed windows (src/runtime/perplexity.h), in the manner
// of llama.cpp's llama-perplexity: running estimates per window, then "Final estimate: PPL = ...".
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "core/mapped_file.h"
#include "core/timer.h"
#include "gemma/error.h"
#include "model/model.h"
#include "runtime/backend_factory.h"
#include "runtime/perplexity.h"
#include "tokenizer/tokenizer.h"

namespace gemma::cli {

void AddPerplexityCommand(CLI::App& app) {
  struct Opts {
    std::string model, file, tokenizer, backend = "cpu";
    int context = 512, stride = 0, chunks = 0, threads = 0;
    bool json = false, per_token = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "perplexity", "Perplexity of a text file on fixed windows (<bos> + context-1 tokens each)");
  cmd->add_option("--model", o->model, "Checkpoint directory")->required();
  cmd->add_option("--file", o->file, "UTF-8 text file to score")->required();
  cmd->add_option("--context", o->context, "Tokens per window, <bos> included (default 512)");
  cmd->add_option("--stride", o->stride,
                  "Text tokens between window starts, 1..context-1 (default context/2; "
                  "context-1 = disjoint windows)");
  cmd->add_option("--chunks", o->chunks, "Score only the first N windows (default all)");
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer.json (default: <model>/tokenizer.json)");
  cmd->add_option("--backend", o->backend, "cpu | cpu-ref | vulkan | auto");
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all)");
  cmd->add_flag("--json", o->json, "Print one JSON report on stdout (progress goes to stderr)");
  cmd->add_flag("--per-token", o->per_token,
                "With --json: add token_nll, each scored token's NLL in text order");
  cmd->callback([o] {
    namespace fs = std::filesystem;
    Timer load;
    auto model = Model::Load(o->model);
    std::string tok_path = o->tokenizer;
    if (tok_path.empty()) {
      const fs::path dir =
          fs::is_directory(o->model) ? fs::path(o->model) : fs::path(o->model).parent_path();
      tok_path = (dir / "tokenizer.json").string();
      if (!fs::exists(tok_path)) {
        throw Error(ErrorCode::kTokenizer,
                    "no tokenizer: " + tok_path + " does not exist (use --tokenizer)");
      }
    }
    const Tokenizer tok = Tokenizer::FromFile(tok_path);
    const std::string text = ReadFileToString(o->file);
    const std::vector<int32_t> ids = tok.Encode(text);
    const TextConfig& c = model->text();
    const int capacity = std::max(o->context, 2);
    auto backend = CreateBackend(o->backend, *model, {.capacity = capacity}, o->threads);
    const double load_ms = load.Ms();
    std::FILE* progress_out = o->json ? stderr : stdout;
    std::fprintf(progress_out, "perplexity: %s, %zu bytes -> %zu tokens; backend %s\n",
                 o->file.c_str(), text.size(), ids.size(), backend->name().c_str());
    Timer run;
    const PerplexityReport r = ComputePerplexity(
        *backend, c.vocab_size, ids,
        {.context = o->context, .stride = o->stride, .chunks = o->chunks, .bos_id = c.bos_token_id},
        [&](const PerplexityReport& so_far) {
          std::fprintf(progress_out, "[%zu]%.4f,", so_far.windows.size(), so_far.ppl);
          std::fflush(progress_out);
        });
    const double run_s = run.Ms() / 1000;
    std::fprintf(progress_out, "\n");
    if (o->json) {
      nlohmann::json j = {{"model", o->model},
                          {"file", o->file},
                          {"backend", backend->name()},
                          {"context", r.context},
                          {"stride", r.stride},
                          {"chunks", o->chunks},
                          {"windows", r.windows.size()},
                          {"text_tokens", r.text_tokens},
                          {"tokens_scored", r.tokens_scored},
                          {"nll_sum", r.nll_sum},
                          {"nll_mean", r.nll_mean},
                          {"ppl", r.ppl},
                          {"ppl_stderr", r.ppl_stderr},
                          {"load_ms", load_ms},
                          {"seconds", run_s},
                          {"scored_tokens_per_s", run_s > 0 ? r.tokens_scored / run_s : 0.0}};
      nlohmann::json w = nlohmann::json::array();
      for (const PerplexityWindow& x : r.windows) {
        w.push_back({{"begin", x.begin}, {"end", x.end}, {"scored", x.scored}, {"nll", x.nll}});
      }
      j["window_nll"] = std::move(w);
      if (o->per_token) j["token_nll"] = r.token_nll;
      std::printf("%s\n", j.dump(1).c_str());
    } else {
      std::printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_stderr);
      std::printf(
          "%d tokens scored in %zu windows (context %d, stride %d) in %.2f s (%.0f tok/s)\n",
          r.tokens_scored, r.windows.size(), r.context, r.stride, run_s,
          run_s > 0 ? r.tokens_scored / run_s : 0.0);
    }
  });
}

}  // namespace gemma::cli
