// The repository-template comparison (template_check.h). Expected hashes come from coreutils'
// sha256sum and FIPS 180-2's test vector, not from this code.
#include "chat/template_check.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gemma/error.h"

namespace gemma::chat {
namespace {

namespace fs = std::filesystem;

// `sha256sum /work/shared/reference/gemma4_chat_template.e2b.jinja` (18,878 bytes).
constexpr char kPublishedSha256[] =
    "0a33924ab0a12ef7653f1617adbeea38f7518f81803c5fc40cc3cd7330e4e141";

class TemplateCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gemma_template_check_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const char* name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  fs::path dir_;
};

TEST_F(TemplateCheck, BuiltinSourceIsThePublishedFile) {
  EXPECT_EQ(BuiltinTemplateSource().size(), 18878u);
  EXPECT_EQ(Sha256Hex(BuiltinTemplateSource()), kPublishedSha256);
  EXPECT_EQ(Sha256Hex("abc"),  // FIPS 180-2, appendix B.1
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_F(TemplateCheck, NoRepositoryTemplate) {
  Write("tokenizer_config.json", R"({"bos_token": "<bos>"})");
  const TemplateComparison c = CompareRepositoryTemplate(dir_.string());
  EXPECT_EQ(c.status, TemplateComparison::Status::kNone);
  EXPECT_EQ(c.builtin_sha256, kPublishedSha256);
}

TEST_F(TemplateCheck, TrailingWhitespaceOnlyIsIdentical) {
  std::string t(BuiltinTemplateSource());
  // Spaces and CR at line ends, and extra newlines at the end: forgiven.
  const size_t nl = t.find('\n');
  t.insert(nl, "  \r");
  t += "\n\n";
  Write("chat_template.jinja", t);
  const TemplateComparison c = CompareRepositoryTemplate((dir_ / "model.safetensors").string());
  EXPECT_EQ(c.status, TemplateComparison::Status::kIdentical);
  EXPECT_EQ(c.repository_file, "chat_template.jinja");
  EXPECT_NE(c.repository_sha256, c.builtin_sha256);
}

TEST_F(TemplateCheck, AnyOtherChangeDiffers) {
  std::string t(BuiltinTemplateSource());
  t.insert(t.find('\n') + 1, " ");  // leading whitespace is not forgiven
  Write("chat_template.jinja", t);
  TemplateComparison c = CompareRepositoryTemplate(dir_.string());
  EXPECT_EQ(c.status, TemplateComparison::Status::kDifferent);
  EXPECT_EQ(c.repository_sha256.size(), 64u);
  EXPECT_EQ(NormalizeTemplateText("a \nb\t\r\n\n"), "a\nb");
}

TEST_F(TemplateCheck, JsonSourcesInTransformersOrder) {
  // tokenizer_config.json alone: its string, or the "default" entry of a list.
  nlohmann::json cfg = {{"chat_template", std::string(BuiltinTemplateSource())}};
  Write("tokenizer_config.json", cfg.dump());
  TemplateComparison c = CompareRepositoryTemplate(dir_.string());
  EXPECT_EQ(c.status, TemplateComparison::Status::kIdentical);
  EXPECT_EQ(c.repository_file, "tokenizer_config.json");
  cfg["chat_template"] = nlohmann::json::array(
      {{{"name", "tool_use"}, {"template", "x"}}, {{"name", "default"}, {"template", "{{ y }}"}}});
  Write("tokenizer_config.json", cfg.dump());
  c = CompareRepositoryTemplate(dir_.string());
  EXPECT_EQ(c.status, TemplateComparison::Status::kDifferent);
  EXPECT_EQ(c.repository_sha256, Sha256Hex("{{ y }}"));
  // chat_template.json before tokenizer_config.json; chat_template.jinja before both.
  Write("chat_template.json", nlohmann::json({{"chat_template", "{{ z }}"}}).dump());
  EXPECT_EQ(CompareRepositoryTemplate(dir_.string()).repository_file, "chat_template.json");
  Write("chat_template.jinja", std::string(BuiltinTemplateSource()));
  c = CompareRepositoryTemplate(dir_.string());
  EXPECT_EQ(c.repository_file, "chat_template.jinja");
  EXPECT_EQ(c.status, TemplateComparison::Status::kIdentical);
}

TEST_F(TemplateCheck, UnreadableJsonIsAConfigErrorNamingTheFile) {
  Write("tokenizer_config.json", "{\"chat_template\": ");
  try {
    CompareRepositoryTemplate(dir_.string());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kConfig);
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gemma::chat
