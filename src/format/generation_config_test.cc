#include "format/generation_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "gemma/error.h"

namespace gemma {
namespace {

// The generation_config.json published with google/gemma-4-E2B-it (model card values).
constexpr const char* kPublished = R"({
  "bos_token_id": 2,
  "do_sample": true,
  "eos_token_id": [1, 106],
  "pad_token_id": 0,
  "temperature": 1.0,
  "top_k": 64,
  "top_p": 0.95,
  "transformers_version": "5.0.0"
})";

TEST(GenerationDefaults, ReadsThePublishedFile) {
  const GenerationDefaults g = ParseGenerationDefaults(kPublished, "generation_config.json");
  EXPECT_FALSE(g.empty());
  EXPECT_EQ(g.do_sample, true);
  EXPECT_EQ(g.temperature, 1.0);
  EXPECT_EQ(g.EffectiveTemperature(), 1.0);
  EXPECT_EQ(g.top_k, 64);
  EXPECT_EQ(g.top_p, 0.95);
  EXPECT_FALSE(g.min_p.has_value());
  EXPECT_FALSE(g.repetition_penalty.has_value());
  EXPECT_EQ(g.eos_token_ids, (std::vector<int>{1, 106}));
}

TEST(GenerationDefaults, GreedyWhenDoSampleIsFalse) {
  const GenerationDefaults g = ParseGenerationDefaults(
      R"({"do_sample": false, "temperature": 0.7, "eos_token_id": 1})", "g");
  EXPECT_EQ(g.EffectiveTemperature(), 0.0);
  EXPECT_EQ(g.eos_token_ids, std::vector<int>{1});
}

TEST(GenerationDefaults, RejectsWrongTypesNamingTheKey) {
  for (const char* bad : {R"({"top_k": "64"})", R"({"temperature": -1})", R"({"top_p": 0})",
                          R"({"do_sample": 1})", R"({"eos_token_id": ["1"]})", "[1]", "{"}) {
    try {
      ParseGenerationDefaults(bad, "gen.json");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kConfig) << bad;
      EXPECT_NE(std::string(e.what()).find("gen.json"), std::string::npos) << e.what();
    }
  }
}

TEST(GenerationDefaults, MissingFileMeansNoDefaults) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("gen_defaults_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  EXPECT_TRUE(LoadGenerationDefaults(dir.string()).empty());
  std::ofstream(dir / "generation_config.json") << kPublished;
  EXPECT_EQ(LoadGenerationDefaults(dir.string()).top_k, 64);
  EXPECT_EQ(LoadGenerationDefaults((dir / "model.safetensors").string()).top_k, 64);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gemma
