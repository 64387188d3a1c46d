// Issue 36: config values that used to pass silently, deep JSON, and GGUF paths.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "format/config.h"
#include "format/safetensors.h"
#include "gemma/error.h"

namespace gemma {
namespace {

std::string Wrapper(const std::string& eos) {
  return R"({"model_type":"gemma4","eos_token_id":)" + eos + R"(,
    "text_config":{"hidden_size":8,"intermediate_size":8,"num_hidden_layers":5,
      "num_attention_heads":2,"num_key_value_heads":1,"global_head_dim":16,"head_dim":4}})";
}

std::string ErrorOf(const std::function<void()>& f, ErrorCode want) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), want) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

TEST(ConfigLimits, Gemma4EosTokenIdIsStrictlyTyped) {
  EXPECT_NE(ErrorOf([] { ParseModelConfig(Wrapper(R"("x")"), "c.json"); }, ErrorCode::kConfig)
                .find("eos_token_id"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { ParseModelConfig(Wrapper(R"([1,"x"])"), "c.json"); }, ErrorCode::kConfig)
                .find("non-integer"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { ParseModelConfig(Wrapper("999999999"), "c.json"); }, ErrorCode::kConfig)
                .find("outside the vocabulary"),
            std::string::npos);
  EXPECT_EQ(ParseModelConfig(Wrapper("[1, 106]"), "c.json").text.eos_token_ids,
            (std::vector<int>{1, 106}));
}

// Found by fuzz/fuzz_config.cc (its replay's mutator): a per_layer_config entry that is not an
// object escaped as nlohmann's invalid_iterator ("error: internal" on the command line), and
// std::stoi read the key "2ion_heads" as layer 2.
TEST(ConfigLimits, PerLayerConfigEntriesAreChecked) {
  auto with_plc = [](const std::string& plc) {
    return R"({"model_type":"gemma4_text","hidden_size":8,"intermediate_size":8,
      "num_hidden_layers":5,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":4,
      "per_layer_config":)" +
           plc + "}";
  };
  EXPECT_NE(ErrorOf([&] { ParseModelConfig(with_plc(R"({"2":4})"), "c.json"); }, ErrorCode::kConfig)
                .find("per_layer_config.2"),
            std::string::npos);
  EXPECT_NE(
      ErrorOf([&] { ParseModelConfig(with_plc(R"({"2ion_heads":{"head_dim":8}})"), "c.json"); },
              ErrorCode::kConfig)
          .find("not a layer index"),
      std::string::npos);
  EXPECT_NE(
      ErrorOf([&] { ParseModelConfig(with_plc(R"({"4":{"head_dim":4294967300}})"), "c.json"); },
              ErrorCode::kConfig)
          .find("head_dim"),
      std::string::npos);
}

// Found by the config fuzz target: json::value() with a typed default threw nlohmann's
// type_error (an internal error) on a value of another type; a 2^32 + 2 bit width read as 2.
TEST(ConfigLimits, WrongTypesAndOutOfRangeBitsAreConfigErrors) {
  const std::string base = R"("hidden_size":8,"intermediate_size":8,"num_hidden_layers":5,
      "num_attention_heads":2,"num_key_value_heads":1,"head_dim":4)";
  ErrorOf([&] { ParseModelConfig("{\"model_type\":7," + base + "}", "c.json"); },
          ErrorCode::kConfig);
  ErrorOf(
      [&] {
        ParseModelConfig(
            R"({"model_type":"gemma4_text",)" + base +
                R"(,"rope_parameters":{"sliding_attention":{"rope_type":1,"rope_theta":1e4},)"
                R"("full_attention":{"rope_theta":1e6}}})",
            "c.json");
      },
      ErrorCode::kConfig);
  ErrorOf(
      [&] {
        ParseModelConfig(
            R"({"model_type":"gemma4_text",)" + base +
                R"(,"quantization_config":{"quant_method":"gemma","module_quant_configs":)"
                R"({"lm_head":4294967298}}})",
            "c.json");
      },
      ErrorCode::kUnsupported);  // "bits must be 2, 4 or 8", as for any other width
}

// Found by fuzz/fuzz_config.cc under UBSan: libstdc++'s std::regex overflowed a signed long on a
// 19-digit repetition count. QAT patterns are now matched by format/module_pattern.h: counts at
// Python's limit (2^32 - 1) or above are refused as Python refuses them, smaller ones are fine.
TEST(ConfigLimits, QatPatternsAreBounded) {
  const std::string base = R"({"model_type":"gemma4_text","hidden_size":8,"intermediate_size":8,
      "num_hidden_layers":5,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":4,
      "quantization_config":{"quant_method":"gemma",)";
  ErrorOf([&] {
    ParseModelConfig(base + R"("module_quant_configs":{"a{9999999999999999999}":4}}})", "c.json");
  }, ErrorCode::kConfig);
  const ModelConfig c =
      ParseModelConfig(base + R"("modules_to_not_convert":["x{1234567890}"]}})", "c.json");
  EXPECT_EQ(c.quant.BitsFor("model.layers.0.mlp.x", false), 4);
  ErrorOf([&] {
    ParseModelConfig(base + R"("modules_to_not_convert":[")" + std::string(2000, 'a') + R"("]}})",
                     "c.json");
  }, ErrorCode::kConfig);
  // Group names meet in transformers' joined pattern (?P<g0>...)|(?P<g1>...).
  ErrorOf([&] {
    ParseModelConfig(base + R"j("module_quant_configs":{"(?P<g1>a)":4,"b":2}}})j", "c.json");
  }, ErrorCode::kConfig);
}

TEST(ConfigLimits, DeepConfigIsATypedError) {
  const int n = 100'000;
  const std::string deep =
      R"({"model_type":"gemma4_text","x":)" + std::string(n, '[') + std::string(n, ']') + "}";
  EXPECT_NE(ErrorOf([&] { ParseModelConfig(deep, "c.json"); }, ErrorCode::kConfig)
                .find("deeper than 256"),
            std::string::npos);
}

TEST(ConfigLimits, GgufSaysWhatIsSupported) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("gemma_gguf_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string by_ext = (dir / "m.gguf").string();
  const std::string by_magic = (dir / "m.bin").string();
  std::ofstream(by_ext) << "not even gguf";
  std::ofstream(by_magic, std::ios::binary) << "GGUF\x03";
  for (const std::string& p : {by_ext, by_magic}) {
    const std::string what = ErrorOf([&] { TensorSource::Open(p); }, ErrorCode::kUnsupported);
    EXPECT_NE(what.find("GGUF files are not supported"), std::string::npos) << what;
    EXPECT_NE(what.find("safetensors"), std::string::npos) << what;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gemma
