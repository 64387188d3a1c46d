// Speculative decoding against plain decoding (not a test): the same greedy request with and
// without drafts on one engine, alternating, medians over runs. Prompt-lookup drafts by default:
// the prompt repeats a block of ids (as an edit or a quote repeats its source), so drafts have
// something to find. With --draft-model DIR the drafts come from that model (the same vocabulary),
// and --text gives a text prompt (the model's tokenizer) instead of the ids. The acceptance is the
// models'. Prints tok/s of both, their ratio, drafted / accepted per run and the draft model's
// share of the speculative runs' decode time.
//   spec_bench MODEL_DIR [--backend B] [--tokens N] [--runs R] [--draft K] [--context C]
//              [--draft-model DIR] [--text PROMPT] [--threads T]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gemma/engine.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [--backend B] [--tokens N] [--runs R] [--draft K]\n",
                 argv[0]);
    return 2;
  }
  gemma::EngineOptions eo;
  eo.model_path = argv[1];
  eo.backend = "cpu";
  eo.context_capacity = 2048;
  int tokens = 128, runs = 5, draft = 4;
  std::string text;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--backend")
      eo.backend = v;
    else if (k == "--tokens")
      tokens = std::atoi(v.c_str());
    else if (k == "--runs")
      runs = std::atoi(v.c_str());
    else if (k == "--draft")
      draft = std::atoi(v.c_str());
    else if (k == "--context")
      eo.context_capacity = std::atoi(v.c_str());
    else if (k == "--draft-model")
      eo.draft_model_path = v;
    else if (k == "--text")
      text = v;
    else if (k == "--threads")
      eo.threads = std::atoi(v.c_str());
  }
  try {
    auto engine = gemma::Engine::Load(eo);
    std::vector<int32_t> prompt = {2};
    for (int r = 0; r < 3; ++r)
      for (int i = 0; i < 40; ++i) prompt.push_back(3 + (i * 7919) % (engine->vocab_size() - 3));
    const gemma::Input input = text.empty() ? gemma::Input::Ids(prompt) : gemma::Input::Text(text);
    auto run = [&](bool spec, gemma::Telemetry* tel) {
      gemma::GenerateOptions o;
      o.max_new_tokens = tokens;
      o.ignore_eos = true;
      o.reuse_prompt_cache = false;
      if (spec) {
        o.speculative.mode = eo.draft_model_path.empty()
                                 ? gemma::SpeculativeOptions::Mode::kPromptLookup
                                 : gemma::SpeculativeOptions::Mode::kDraftModel;
        o.speculative.max_draft = draft;
      }
      const gemma::Result r = engine->NewSession()->Generate(input, o);
      *tel = r.telemetry;
      return r.tokens;
    };
    gemma::Telemetry t;
    const auto want = run(false, &t);  // (warm-up)
    std::vector<double> plain, spec;
    int drafted = 0, accepted = 0;
    double draft_ms = 0, spec_ms = 0;
    bool same = true;
    for (int i = 0; i < runs; ++i) {
      run(false, &t);
      plain.push_back(t.decode_tok_s);
      same = same && run(true, &t) == want;
      spec.push_back(t.decode_tok_s);
      draft_ms += t.draft_ms;
      spec_ms += t.total_ms - t.prefill_ms;
      drafted += t.drafted;
      accepted += t.accepted;
    }
    std::sort(plain.begin(), plain.end());
    std::sort(spec.begin(), spec.end());
    const double p = plain[plain.size() / 2], s = spec[spec.size() / 2];
    std::printf(
        "{\"backend\": \"%s\", \"tokens\": %d, \"draft\": %d, \"plain_tok_s\": %.1f, "
        "\"speculative_tok_s\": %.1f, \"ratio\": %.3f, \"drafted_per_run\": %.1f, "
        "\"accepted_per_run\": %.1f, \"draft_model_share\": %.3f, \"identical\": %s}\n",
        engine->backend_name().c_str(), tokens, draft, p, s, s / p, double(drafted) / runs,
        double(accepted) / runs, spec_ms > 0 ? draft_ms / spec_ms : 0.0, same ? "true" : "false");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
