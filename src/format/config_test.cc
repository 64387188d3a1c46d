#include "format/config.h"

#include <gtest/gtest.h>

#include "core/mapped_file.h"
#include "gemma/error.h"

namespace gemma {
namespace {

ErrorCode CodeOf(const std::string& text) {
  try {
    ParseModelConfig(text, "config.json");
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "accepted: " << text;
  return ErrorCode::kInternal;
}

TEST(Config, ParsesTransformersSavedTinyConfig) {
  const std::string dir = std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/model/tiny_qat";
  ModelConfig c = LoadModelConfig(dir);
  EXPECT_FALSE(c.multimodal_wrapper);
  EXPECT_EQ(c.text.num_layers, 6);
  EXPECT_EQ(c.text.head_dim, 32);
  EXPECT_EQ(c.text.global_head_dim, 64);  // from per_layer_config
  EXPECT_EQ(c.text.layer_head_dim[2], 64);
  EXPECT_EQ(c.text.layer_head_dim[3], 32);
  EXPECT_EQ(c.text.layer_types[5], LayerType::kFull);
  EXPECT_EQ(c.text.rope_full.type, RopeParams::Type::kProportional);
  EXPECT_DOUBLE_EQ(c.text.rope_full.partial_rotary_factor, 0.25);
  EXPECT_FALSE(c.text.tie_word_embeddings);
  ASSERT_TRUE(c.quant.enabled);
  EXPECT_EQ(c.quant.rules.size(), 8u);
}

TEST(Config, QuantRulesFollowTransformersSemantics) {
  ModelConfig c = LoadModelConfig(std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/model/tiny_qat");
  const QuantConfig& q = c.quant;
  EXPECT_EQ(q.BitsFor("lm_head", false), 2);
  EXPECT_EQ(q.BitsFor("model.embed_tokens", true), 2);
  EXPECT_EQ(q.BitsFor("model.embed_tokens_per_layer", true), 4);
  EXPECT_EQ(q.BitsFor("model.layers.3.mlp.up_proj", false), 4);   // first matching rule
  EXPECT_EQ(q.BitsFor("model.layers.4.mlp.up_proj", false), 2);   // second rule
  EXPECT_EQ(q.BitsFor("model.layers.13.mlp.up_proj", false), 2);  // [0-3] must not match "1"
  EXPECT_EQ(q.BitsFor("model.layers.0.per_layer_input_gate", false), 8);
  EXPECT_EQ(q.BitsFor("model.layers.0.self_attn.q_proj", false), 4);
  EXPECT_EQ(q.BitsFor("model.per_layer_model_projection", false), std::nullopt);  // suffix skip
}

TEST(Config, LeftmostRuleWinsOverDeclarationOrder) {
  ModelConfig c = ParseModelConfig(R"({"model_type":"gemma4_text","hidden_size":8,
    "intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":1,"num_key_value_heads":1,
    "quantization_config":{"quant_method":"gemma","num_bits":4,
      "module_quant_configs":{"mlp":{"num_bits":2},"^model":8},
      "modules_to_not_convert":["model.vision"]}})",
                                   "c.json");
  EXPECT_EQ(c.quant.BitsFor("model.layers.0.mlp.up", false), 8);  // "^model" matches at 0
  EXPECT_EQ(c.quant.BitsFor("x.mlp.up", false), 2);
  EXPECT_EQ(c.quant.BitsFor("model.vision_tower.x", false), std::nullopt);  // prefix regex
  EXPECT_EQ(c.quant.BitsFor("model.embed_tokens", true), std::nullopt);     // embeddings off
}

TEST(Config, TopLevelGemma4ConfigWrapsText) {
  ModelConfig c = ParseModelConfig(R"({"model_type":"gemma4","tie_word_embeddings":false,
    "eos_token_id":[1,106],
    "text_config":{"hidden_size":8,"intermediate_size":8,"num_hidden_layers":5,
      "num_attention_heads":2,"num_key_value_heads":1,"global_head_dim":16,"head_dim":4}})",
                                   "c.json");
  EXPECT_TRUE(c.multimodal_wrapper);
  EXPECT_FALSE(c.text.tie_word_embeddings);
  EXPECT_EQ(c.text.eos_token_ids, (std::vector<int>{1, 106}));
  EXPECT_EQ(c.text.layer_head_dim[4], 16);  // last layer forced full
  EXPECT_EQ(c.placeholder_token_ids, (std::vector<int>{258880, 258881, 258884}));
}

TEST(Config, BadValuesAreTypedErrors) {
  const std::string base = R"("hidden_size":8,"intermediate_size":8,"num_hidden_layers":2,
      "num_attention_heads":2,"num_key_value_heads":1)";
  EXPECT_EQ(CodeOf("{not json"), ErrorCode::kConfig);
  EXPECT_EQ(CodeOf(R"({"model_type":"llama"})"), ErrorCode::kUnsupported);
  EXPECT_EQ(CodeOf(R"({"model_type":"gemma4_text","hidden_size":8})"), ErrorCode::kConfig);
  EXPECT_EQ(
      CodeOf(R"({"model_type":"gemma4_text",)" + base + R"(,"hidden_size_per_layer_input":"x"})"),
      ErrorCode::kConfig);
  EXPECT_EQ(CodeOf(R"({"model_type":"gemma4_text",)" + base + R"(,"enable_moe_block":true})"),
            ErrorCode::kUnsupported);
  EXPECT_EQ(CodeOf(R"({"model_type":"gemma4_text",)" + base +
                   R"(,"quantization_config":{"quant_method":"awq"}})"),
            ErrorCode::kUnsupported);
  EXPECT_EQ(CodeOf(R"({"model_type":"gemma4_text",)" + base +
                   R"(,"quantization_config":{"quant_method":"gemma","num_bits":3}})"),
            ErrorCode::kUnsupported);
  EXPECT_EQ(
      CodeOf(R"({"model_type":"gemma4_text",)" + base + R"(,"layer_types":["sliding_attention"]})"),
      ErrorCode::kConfig);
  EXPECT_EQ(CodeOf(R"({"model_type":"gemma4_text","hidden_size":8,"intermediate_size":8,
      "num_hidden_layers":2,"num_attention_heads":3,"num_key_value_heads":2})"),
            ErrorCode::kConfig);
  EXPECT_EQ(CodeOf(R"({"model_type":"gemma4_text",)" + base +
                   R"(,"rope_parameters":{"full_attention":{"rope_type":"yarn","rope_theta":1}}})"),
            ErrorCode::kUnsupported);
  try {
    ParseModelConfig(R"({"model_type":"gemma4_text",)" + base + R"(,"num_kv_shared_layers":5})",
                     "dir/config.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dir/config.json: num_kv_shared_layers"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace gemma
