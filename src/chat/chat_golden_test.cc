// Compares the native renderer with chat-template goldens rendered by Hugging Face transformers
// (tools/fixtures/chat_goldens.py on the GPU machine). Skips while the goldens are absent.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "chat/chat_template.h"
#include "gemma/error.h"

namespace gemma::chat {
namespace {

std::string GoldenDir() { return std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/chat"; }

std::vector<Json> ReadJsonl(const std::string& path) {
  std::vector<Json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(Json::parse(line));
  }
  return out;
}

TEST(ChatGoldenTest, MatchesTransformers) {
  // GEMMA_CHAT_GOLDENS may point at a development rendering (e.g. plain jinja2) instead.
  const char* override_path = std::getenv("GEMMA_CHAT_GOLDENS");
  const std::string rendered_path =
      override_path != nullptr ? override_path : GoldenDir() + "/rendered.jsonl";
  std::ifstream probe(rendered_path);
  if (!probe) {
    GTEST_SKIP() << rendered_path
                 << " is absent: run tools/fixtures/chat_goldens.py on the GPU machine (see "
                    "tests/README.md, 'Chat template coverage')";
  }
  // GEMMA_CHAT_CASES: development runs with other case files (e.g. randomized ones).
  const char* cases_override = std::getenv("GEMMA_CHAT_CASES");
  const std::vector<Json> cases =
      ReadJsonl(cases_override != nullptr ? cases_override : GoldenDir() + "/cases.jsonl");
  if (cases_override == nullptr) ASSERT_GE(cases.size(), 150u);
  std::map<std::string, Json> rendered;
  for (const Json& r : ReadJsonl(rendered_path)) {
    if (r.contains("id")) {
      rendered[r["id"].get<std::string>()] = r;
    } else if (override_path == nullptr && r.value("backend", std::string()) != "transformers") {
      // The header line. Only transformers renderings are goldens; a plain-jinja2 pre-check is not.
      FAIL() << rendered_path << " was not rendered by transformers: " << r.dump();
    }
  }
  int compared = 0;
  for (const Json& c : cases) {
    const std::string id = c["id"].get<std::string>();
    SCOPED_TRACE(id);
    auto it = rendered.find(id);
    ASSERT_NE(it, rendered.end()) << "no golden for case " << id;
    const Json& golden = it->second;
    ChatTemplateOptions o;
    o.add_generation_prompt = c.value("add_generation_prompt", false);
    o.enable_thinking = c.value("enable_thinking", false);
    o.preserve_thinking = c.value("preserve_thinking", false);
    o.bos_token = c.value("bos_token", std::string("<bos>"));
    const Json tools = c.value("tools", Json());
    const bool engine_rejects = c.value("engine_rejects", false);
    if (golden.contains("error") || engine_rejects) {
      try {
        const std::string ours = RenderChatTemplate(c["messages"], tools, o);
        ADD_FAILURE() << "expected gemma::Error(kTemplate); template "
                      << (golden.contains("error") ? "raised " + golden["error"].dump()
                                                   : "rendered, but the engine refuses this input")
                      << "; we rendered:\n"
                      << ours;
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kTemplate) << e.what();
      }
    } else {
      std::string ours;
      try {
        ours = RenderChatTemplate(c["messages"], tools, o);
      } catch (const Error& e) {
        ADD_FAILURE() << "unexpected error: " << e.what();
        continue;
      }
      EXPECT_EQ(ours, golden["rendered"].get<std::string>());
    }
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(cases.size()));
}

}  // namespace
}  // namespace gemma::chat
