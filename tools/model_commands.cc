// run, inspect, synth, demo.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>

#include "backend/backend.h"
#include "commands.h"
#include "core/timer.h"
#include "gemma/error.h"
#include "model/model.h"
#include "model/synth.h"

namespace gemma::cli {
namespace {

std::vector<int32_t> ParseIds(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > INT32_MAX) {
      throw Error(ErrorCode::kInvalidArgument, "--ids: '" + item + "' is not a token id");
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) throw Error(ErrorCode::kInvalidArgument, "--ids: no token ids given");
  return ids;
}

struct GreedyRun {
  std::vector<int32_t> tokens;
  double prefill_ms = 0, decode_ms = 0;
};

GreedyRun Greedy(Backend& backend, const std::vector<int32_t>& prompt, int max_new,
                 const std::vector<int>& stop_ids) {
  GreedyRun run;
  ForwardResult r;
  Timer t;
  backend.Forward({.tokens = prompt, .mode = OutputMode::kArgmax}, &r);
  run.prefill_ms = t.Ms();
  t.Reset();
  int32_t next = r.ids.back();
  for (int i = 0; i < max_new; ++i) {
    run.tokens.push_back(next);
    bool stop = false;
    for (int s : stop_ids) stop |= next == s;
    if (stop || i + 1 == max_new) break;
    backend.Forward({.tokens = std::span<const int32_t>(&next, 1), .mode = OutputMode::kArgmax},
                    &r);
    next = r.ids.back();
  }
  run.decode_ms = t.Ms();
  return run;
}

void PrintRun(const Model& model, const std::vector<int32_t>& prompt, const GreedyRun& run,
              bool json) {
  const double decode_steps = std::max<size_t>(1, run.tokens.size()) - 1;
  const double tps = decode_steps > 0 ? decode_steps * 1000.0 / run.decode_ms : 0;
  if (json) {
    std::printf("{\"prompt_tokens\":%zu,\"tokens\":[", prompt.size());
    for (size_t i = 0; i < run.tokens.size(); ++i) std::printf("%s%d", i ? "," : "", run.tokens[i]);
    std::printf(
        "],\"load_ms\":%.1f,\"prefill_ms\":%.1f,\"decode_ms\":%.1f,\"decode_tok_s\":%.2f,"
        "\"peak_rss_bytes\":%zu}\n",
        model.load_ms(), run.prefill_ms, run.decode_ms, tps, PeakRssBytes());
    return;
  }
  std::printf("tokens:");
  for (int32_t t : run.tokens) std::printf(" %d", t);
  std::printf("\n");
  std::fprintf(
      stderr,
      "load %.1f ms | prompt %zu tokens, prefill %.1f ms | %zu new tokens, decode %.2f tok/s"
      " | peak RSS %.1f MiB\n",
      model.load_ms(), prompt.size(), run.prefill_ms, run.tokens.size(), tps,
      PeakRssBytes() / 1048576.0);
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  struct Opts {
    std::string model, ids;
    int max_new = 32;
    int capacity = 4096;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("run", "Greedy generation from token ids");
  cmd->add_option("--model", o->model, "Checkpoint directory or .safetensors file")->required();
  cmd->add_option("--ids", o->ids, "Prompt token ids, comma separated (e.g. 2,105,2364)")
      ->required();
  cmd->add_option("-n,--max-new-tokens", o->max_new, "Tokens to generate")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--capacity", o->capacity, "Context capacity in tokens")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->callback([o] {
    auto model = Model::Load(o->model);
    const std::vector<int32_t> prompt = ParseIds(o->ids);
    auto backend = CreateCpuReferenceBackend(*model, {.capacity = o->capacity});
    const GreedyRun run = Greedy(*backend, prompt, o->max_new, model->text().eos_token_ids);
    PrintRun(*model, prompt, run, o->json);
  });
}

void AddInspectCommand(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* cmd =
      app.add_subcommand("inspect", "Tensors, dtypes, quant formats, bytes per layer, validation");
  cmd->add_option("--model", *path, "Checkpoint directory or .safetensors file")->required();
  cmd->callback([path] {
    auto src = TensorSource::Open(*path);
    std::printf("checkpoint: %s (%zu file(s), %.1f MiB)\n", path->c_str(), src->files().size(),
                src->total_bytes() / 1048576.0);
    std::map<std::string, size_t> per_group;
    for (const auto& [name, t] : src->all()) {
      std::printf("  %-72s %-5s %-18s %12zu\n", name.c_str(), DTypeName(t->dtype),
                  t->ShapeString().c_str(), t->nbytes);
      std::string group = "other";
      const size_t p = name.find("layers.");
      if (p != std::string::npos) {
        group = "layer " + name.substr(p + 7, name.find('.', p + 7) - (p + 7));
      } else if (name.find("embed_tokens_per_layer") != std::string::npos) {
        group = "ple table";
      } else if (name.find("embed_tokens") != std::string::npos) {
        group = "embeddings";
      } else if (name.find("lm_head") != std::string::npos) {
        group = "lm_head";
      }
      per_group[group] += t->nbytes;
    }
    std::printf("bytes by group:\n");
    for (const auto& [g, b] : per_group) std::printf("  %-12s %14zu\n", g.c_str(), b);
    std::printf("validation: ");
    std::fflush(stdout);
    auto model = Model::Load(*path);  // throws a typed error naming file and tensor
    const TextConfig& c = model->text();
    std::printf("OK\n");
    std::printf(
        "config: %d layers, hidden %d, heads %d/%d, head dims %d/%d, window %d, kv-shared %d, "
        "PLE %d, vocab %d, %s head\n",
        c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim, c.global_head_dim,
        c.sliding_window, c.num_kv_shared_layers, c.hidden_size_per_layer_input, c.vocab_size,
        c.tie_word_embeddings ? "tied" : "separate");
    auto show = [](const Linear& l) {
      if (!l.data) return;
      std::printf("  %-56s %-5s [%d, %d]", l.name.c_str(), WeightKindName(l.kind), l.rows, l.cols);
      if (IsQuantized(l.kind)) std::printf("  srq in %.4g out %.4g", l.in_scale, l.out_scale);
      std::printf("\n");
    };
    std::printf("modules:\n");
    std::printf("  %-56s %-5s [%d, %d]\n", model->embed().name.c_str(),
                WeightKindName(model->embed().kind), model->embed().rows, model->embed().cols);
    if (model->ple_embed().rows) {
      std::printf("  %-56s %-5s [%d, %d] scale blocks %d\n", model->ple_embed().name.c_str(),
                  WeightKindName(model->ple_embed().kind), model->ple_embed().rows,
                  model->ple_embed().cols, model->ple_embed().scale_blocks);
    }
    show(model->ple_model_proj());
    for (size_t l = 0; l < model->layers().size(); ++l) {
      const LayerWeights& w = model->layer_weights()[l];
      const LayerPlan& p = model->layers()[l];
      std::printf(" layer %zu: %s, head dim %d, mlp %d, %s\n", l,
                  p.type == LayerType::kFull ? "full" : "sliding", p.head_dim, p.intermediate,
                  p.kv_shared ? ("reads layer " + std::to_string(p.kv_layer) + " K/V").c_str()
                              : "owns K/V");
      for (const Linear* lin :
           {&w.q, &w.k, &w.v, &w.o, &w.gate, &w.up, &w.down, &w.ple_gate, &w.ple_proj}) {
        show(*lin);
      }
    }
    show(model->lm_head());
    std::printf("weights read per decoded token: %.1f MiB\n", model->BytesPerToken() / 1048576.0);
  });
}

void AddSynthCommand(CLI::App& app) {
  auto o = std::make_shared<SynthOptions>();
  std::string presets;
  for (const SynthPreset& p : SynthPresets()) presets += "\n  " + p.name + ": " + p.description;
  CLI::App* cmd =
      app.add_subcommand("synth", "Write a deterministic random-weight checkpoint." + presets);
  cmd->add_option("--preset", o->preset, "e2b-bf16 | e2b-qat | tiny | tiny-qat")->required();
  cmd->add_option("--out", o->out_dir, "Output directory")->required();
  cmd->add_option("--seed", o->seed, "Seed");
  cmd->callback([o] {
    Timer t;
    Synthesize(*o);
    std::fprintf(stderr, "wrote %s (%s) in %.1f s\n", o->out_dir.c_str(), o->preset.c_str(),
                 t.Ms() / 1000);
  });
}

void AddDemoCommand(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "demo", "Offline demo: synthesize the built-in tiny model (once) and generate from it");
  cmd->add_option("--dir", *dir,
                  "Where the tiny demo model lives (default: ~/.cache/gemma-engine/demo-tiny)");
  cmd->callback([dir] {
    namespace fs = std::filesystem;
    std::string d = *dir;
    if (d.empty()) {
      const char* xdg = std::getenv("XDG_CACHE_HOME");
      const char* home = std::getenv("HOME");
      d = (xdg ? std::string(xdg) : std::string(home ? home : "/tmp") + "/.cache") +
          "/gemma-engine/demo-tiny";
    }
    if (!fs::exists(fs::path(d) / "model.safetensors")) {
      std::fprintf(stderr, "synthesizing the tiny demo model into %s ...\n", d.c_str());
      Synthesize({.preset = "tiny", .out_dir = d, .seed = 1});
    }
    auto model = Model::Load(d);
    // <bos><|turn>user\n ... a fixed prompt in token ids (random weights: the output is noise).
    const std::vector<int32_t> prompt = {2,    105, 2364, 107, 9259, 236764,
                                         1902, 106, 107,  105, 4368, 107};
    auto backend = CreateCpuReferenceBackend(*model, {.capacity = 256});
    const GreedyRun run = Greedy(*backend, prompt, 24, {});
    std::printf("demo model: %s (random weights: the tokens are noise, the pipeline is real)\n",
                d.c_str());
    PrintRun(*model, prompt, run, false);
  });
}

}  // namespace gemma::cli
