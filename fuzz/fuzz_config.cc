// config.json (Gemma4Config / Gemma4TextConfig with mobile-QAT quantization_config rules) and
// generation_config.json. A parsed config must be self-consistent enough for the model to index
// it: one layer type and head dim per layer, and a QAT bit width for every module name asked.
#include <fuzzer/FuzzedDataProvider.h>

#include "format/config.h"
#include "format/generation_config.h"
#include "fuzz_util.h"
#include "gemma/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const int mode = in.ConsumeIntegralInRange<int>(0, 3);
  const std::string module = in.ConsumeRandomLengthString(64);
  const std::string text = in.ConsumeRemainingBytesAsString();
  try {
    if (mode == 3) {
      gemma::GenerationDefaults g = gemma::ParseGenerationDefaults(text, "fuzz");
      (void)g.EffectiveTemperature();
      return 0;
    }
    gemma::ModelConfig c = gemma::ParseModelConfig(text, "fuzz");
    const gemma::TextConfig& t = c.text;
    GEMMA_FUZZ_CHECK(t.num_layers > 0, "layers");
    GEMMA_FUZZ_CHECK(t.layer_types.size() == static_cast<size_t>(t.num_layers), "layer_types");
    GEMMA_FUZZ_CHECK(t.layer_head_dim.size() == static_cast<size_t>(t.num_layers), "head dims");
    static const char* kModules[] = {"model.language_model.layers.0.self_attn.q_proj",
                                     "model.layers.3.mlp.up_proj",
                                     "model.language_model.embed_tokens",
                                     "lm_head",
                                     "model.vision_tower.x",
                                     "model.language_model.layers.1.per_layer_input_gate"};
    for (const char* m : kModules) {
      (void)c.quant.BitsFor(m, false);
      (void)c.quant.BitsFor(m, true);
    }
    (void)c.quant.BitsFor(module, mode == 1);
  } catch (const gemma::Error&) {
  }
  return 0;
}
