// Constrained jump-forward against token-by-token constrained decoding (not a test): a JSON-Schema
// extraction whose keys are long and fixed, greedy, on one engine, alternating with and without
// jump-forward; medians over runs. Prints tok/s of both, their ratio, forced steps, tokens drafted
// and accepted, and whether the outputs were identical.
//   jump_bench MODEL_DIR [--backend B] [--runs R] [--draft K]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gemma/engine.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [--backend B] [--runs R] [--draft K]\n", argv[0]);
    return 2;
  }
  gemma::EngineOptions eo;
  eo.model_path = argv[1];
  eo.context_capacity = 2048;
  int runs = 7, draft = 6;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--backend") eo.backend = v;
    if (k == "--runs") runs = std::atoi(v.c_str());
    if (k == "--draft") draft = std::atoi(v.c_str());
  }
  // Eight required properties with long fixed names, two fixed by an enum.
  const std::string schema = R"({"type":"object","properties":{
    "package_manager_name":{"type":"string","maxLength":16},
    "package_manager_kind":{"enum":["system-wide package manager"]},
    "number_of_installed_packages":{"type":"integer"},
    "supports_dependency_resolution":{"type":"boolean"},
    "configuration_file_location":{"type":"string","maxLength":24},
    "license_of_the_distribution":{"enum":["free software license"]},
    "maintainer_contact_address":{"type":"string","maxLength":24},
    "last_updated_release_number":{"type":"integer"}},
    "required":["package_manager_name","package_manager_kind","number_of_installed_packages",
      "supports_dependency_resolution","configuration_file_location",
      "license_of_the_distribution","maintainer_contact_address","last_updated_release_number"],
    "additionalProperties":false})";
  try {
    auto engine = gemma::Engine::Load(eo);
    const gemma::Input input = gemma::Input::Messages(nlohmann::json::array(
        {{{"role", "user"}, {"content", "Describe the package manager of the system as JSON."}}}));
    auto run = [&](bool jump, gemma::Telemetry* tel) {
      gemma::GenerateOptions o;
      o.max_new_tokens = 400;
      o.reuse_prompt_cache = false;
      o.constraint.kind = gemma::OutputConstraint::Kind::kJsonSchema;
      o.constraint.schema_json = schema;
      o.speculative.jump_forward = jump;
      o.speculative.max_draft = draft;
      const gemma::Result r = engine->NewSession()->Generate(input, o);
      *tel = r.telemetry;
      return r.tokens;
    };
    gemma::Telemetry t;
    const auto want = run(false, &t);  // (warm-up, and the reference output)
    std::vector<double> plain, jump;
    bool same = true;
    int steps = 0, drafted = 0, accepted = 0;
    for (int r = 0; r < runs; ++r) {
      gemma::Telemetry tp, tj;
      same = same && run(false, &tp) == want;
      same = same && run(true, &tj) == want;
      plain.push_back(want.size() / (tp.total_ms - tp.prefill_ms) * 1e3);
      jump.push_back(want.size() / (tj.total_ms - tj.prefill_ms) * 1e3);
      steps = tj.jump_forward_steps;
      drafted = tj.drafted;
      accepted = tj.accepted;
    }
    std::sort(plain.begin(), plain.end());
    std::sort(jump.begin(), jump.end());
    const double p = plain[plain.size() / 2], j = jump[jump.size() / 2];
    std::printf("backend %s, %zu tokens: token by token %.1f tok/s, jump-forward %.1f tok/s (%.2fx); "
                "%d forced steps, %d drafted, %d accepted; outputs %s\n",
                engine->backend_name().c_str(), want.size(), p, j, j / p, steps, drafted, accepted,
                same ? "identical" : "DIFFERENT");
    return same ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
