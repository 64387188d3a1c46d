// The published repositories' layouts, offline: `synth --layout hub --shards N` writes the file set
// of google/gemma-4-E2B-it (sharded index, generation_config.json, vision/audio towers), the model
// loads from it, and the same files pulled from the loopback Hub load from the cache's symlinks.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "format/generation_config.h"
#include "format/safetensors.h"
#include "hub/fake_hub.h"
#include "hub/hub_client.h"
#include "hub/model_path.h"
#include "model/model.h"
#include "model/synth.h"

extern char** environ;

namespace gemma {
namespace {

namespace fs = std::filesystem;

// ctest runs each test in its own process: every test synthesizes only the checkpoints it reads.
class HubLayoutTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("gemma_hub_layout_" + std::to_string(::getpid()));
    fs::remove_all(root_);
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }
  // "single": tiny as one file; "sharded": tiny in the hub layout, 3 shards.
  static fs::path Dir(const std::string& which) {
    const fs::path d = root_ / which;
    if (!fs::exists(d / "config.json")) {
      SynthOptions o;
      o.preset = "tiny";
      o.seed = 3;
      o.out_dir = d.string();
      if (which == "sharded") {
        o.layout = "hub";
        o.shards = 3;
      }
      Synthesize(o);
    }
    return d;
  }
  static fs::path root_;
};
fs::path HubLayoutTest::root_;

TEST_F(HubLayoutTest, SynthWritesThePublishedFileSet) {
  const fs::path d = Dir("sharded");
  for (const char* f : {"config.json", "generation_config.json", "processor_config.json",
                        "model.safetensors.index.json", "model-00001-of-00003.safetensors",
                        "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"}) {
    EXPECT_TRUE(fs::exists(d / f)) << f;
  }
  EXPECT_FALSE(fs::exists(d / "model.safetensors"));
  const auto index =
      nlohmann::json::parse(ReadFileToString((d / "model.safetensors.index.json").string()));
  uint64_t total = 0;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    // Each listed tensor really is in the shard the index names (checked by parsing the shard).
    SafetensorsFile f((d / shard.get<std::string>()).string());
    ASSERT_TRUE(f.tensors().count(name)) << name;
    total += f.tensors().at(name).nbytes;
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  const auto cfg = nlohmann::json::parse(ReadFileToString((d / "config.json").string()));
  EXPECT_EQ(cfg["architectures"][0], "Gemma4ForConditionalGeneration");
  EXPECT_TRUE(cfg.contains("vision_config") && cfg.contains("audio_config"));
  const GenerationDefaults g = LoadGenerationDefaults(d.string());
  EXPECT_EQ(g.temperature, 1.0);
  EXPECT_EQ(g.top_k, 64);
  EXPECT_EQ(g.top_p, 0.95);
}

TEST_F(HubLayoutTest, ShardedCheckpointWithTowersLoadsTheSameTextWeights) {
  auto single = TensorSource::Open(Dir("single").string());
  auto sharded = TensorSource::Open(Dir("sharded").string());
  EXPECT_EQ(sharded->files().size(), 3u);
  // "tiny" carries real vision and audio towers (the same in both): the hub layout adds no
  // stand-ins, so every tensor is in both, byte for byte.
  for (const auto& [name, t] : sharded->all()) {
    const TensorInfo* s = single->Find(name);
    ASSERT_NE(s, nullptr) << name;
    ASSERT_EQ(s->nbytes, t->nbytes) << name;
    EXPECT_EQ(std::memcmp(s->data, t->data, t->nbytes), 0) << name;
  }
  EXPECT_EQ(sharded->all().size(), single->all().size());
  // The mobile-QAT sibling (google/gemma-4-E2B-it-qat-mobile-transformers) in the same layout.
  SynthOptions q;
  q.preset = "tiny-qat";
  q.out_dir = (root_ / "qat").string();
  q.layout = "hub";
  q.shards = 2;
  Synthesize(q);
  EXPECT_TRUE(fs::exists(root_ / "qat" / "model-00002-of-00002.safetensors"));
  EXPECT_EQ(Model::Load(q.out_dir)->layers().size(), 6u);
  auto a = Model::Load((root_ / "single").string());
  auto b = Model::Load((root_ / "sharded").string());
  EXPECT_EQ(a->layers().size(), b->layers().size());
  EXPECT_EQ(a->BytesPerToken(), b->BytesPerToken());
}

TEST_F(HubLayoutTest, PulledFromTheHubLoadsThroughTheCacheSymlinks) {
  hub::testing::FakeHub server;
  hub::testing::FakeRepo repo;
  repo.id = "google/gemma-4-E2B-it";
  repo.commit = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678";
  for (const auto& e : fs::directory_iterator(Dir("sharded"))) {
    hub::testing::FakeFile f;
    f.path = e.path().filename().string();
    f.content = ReadFileToString(e.path().string());
    f.lfs = e.path().extension() == ".safetensors";
    repo.files.push_back(std::move(f));
  }
  server.AddRepo(std::move(repo));
  hub::HubOptions o;
  o.endpoint = server.endpoint();
  o.cache_root = (root_ / "cache").string();
  const std::string dir = hub::ResolveModelPath("google/gemma-4-E2B-it", o);
  EXPECT_TRUE(fs::is_symlink(fs::path(dir) / "model-00002-of-00003.safetensors"));
  EXPECT_FALSE(fs::exists(fs::path(dir) / "processor_config.json"));  // text-only subset
  auto m = Model::Load(dir);
  EXPECT_EQ(m->layers().size(), 6u);
  EXPECT_EQ(LoadGenerationDefaults(dir).top_k, 64);
}

// `sha256sum FILE`'s digest (coreutils: the independent reference for the hashes printed).
std::string CoreutilsSha256(const fs::path& file) {
  std::FILE* p = ::popen(("sha256sum '" + file.string() + "'").c_str(), "r");
  char buf[65] = {};
  if (!p || std::fread(buf, 1, 64, p) != 64) buf[0] = 0;
  if (p) ::pclose(p);
  return buf;
}

// `gemma-engine ARGS` with the environment's HF_* variables replaced by `env`; stdout and stderr.
struct Ran {
  int status = -1;
  std::string out, err;
};
Ran RunEngine(const std::string& args, const std::string& env = "") {
  static int n = 0;
  const std::string base = (fs::temp_directory_path() / ("gemma_hub_cli_" + std::to_string(::getpid()) +
                                                         "_" + std::to_string(n++)))
                               .string();
  const std::string cmd = "env -u HF_HOME -u HF_HUB_CACHE -u HF_ENDPOINT -u HF_TOKEN -u "
                          "HF_HUB_OFFLINE " +
                          env + " " GEMMA_ENGINE_BIN " " + args + " > " + base + ".out 2> " +
                          base + ".err";
  Ran r;
  r.status = std::system(cmd.c_str());
  r.out = ReadFileToString(base + ".out");
  r.err = ReadFileToString(base + ".err");
  fs::remove(base + ".out");
  fs::remove(base + ".err");
  return r;
}

// A hub-layout checkpoint with a 4,096-id vocabulary (fast to write and load); `edit` changes its
// chat_template.jinja.
fs::path SmallHubCheckpoint(const fs::path& d, bool edit) {
  SynthOptions o;
  o.preset = "tiny";
  o.seed = 3;
  o.vocab_size = 4096;
  o.out_dir = d.string();
  o.layout = "hub";
  Synthesize(o);
  if (edit) std::ofstream(d / "chat_template.jinja", std::ios::app) << "{#- a local change #}\n";
  return d;
}

// The published repositories ship the canonical template as chat_template.jinja; `synth --layout
// hub` writes it. inspect says when the repository's template is the built-in one, and when it is
// not says that the built-in one is used instead, with both hashes (checked against sha256sum of
// the repository's file and of the published template, /work/shared/reference); run warns once.
TEST_F(HubLayoutTest, RepositoryChatTemplateIdenticalOrDifferent) {
  const fs::path same = SmallHubCheckpoint(root_ / "tmpl_same", false);
  const fs::path edited = SmallHubCheckpoint(root_ / "tmpl_edited", true);
  // `sha256sum /work/shared/reference/gemma4_chat_template.e2b.jinja`
  const std::string published = "0a33924ab0a12ef7653f1617adbeea38f7518f81803c5fc40cc3cd7330e4e141";
  EXPECT_EQ(CoreutilsSha256(same / "chat_template.jinja"), published);

  Ran r = RunEngine("inspect --model " + same.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("chat template: repository template, identical to the built-in "
                       "(chat_template.jinja)"),
            std::string::npos)
      << r.out;
  r = RunEngine("run --model " + same.string() + " --ids 2,105 -n 1");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err.find("chat template"), std::string::npos) << r.err;

  const std::string edited_sha = CoreutilsSha256(edited / "chat_template.jinja");
  ASSERT_EQ(edited_sha.size(), 64u);
  const std::string expected =
      "the built-in Gemma 4 template is used instead of the repository's chat_template.jinja, "
      "which differs (repository sha256 " +
      edited_sha + ", built-in sha256 " + published + "; Jinja templates are not rendered)";
  r = RunEngine("inspect --model " + edited.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("chat template: " + expected), std::string::npos) << r.out;
  r = RunEngine("run --model " + edited.string() + " --ids 2,105 -n 1");
  EXPECT_EQ(r.status, 0) << r.err;
  const size_t at = r.err.find("warning: chat template: " + expected + "\n");
  EXPECT_NE(at, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("chat template", at + 30), std::string::npos) << "one warning: " << r.err;
}

// `serve --model ORG/NAME`: pulled from the loopback Hub into an empty cache, then served again
// offline from the cache alone; the model id clients use is ORG/NAME; the startup log and
// /v1/models say which chat template is used (the repository's differs here).
TEST_F(HubLayoutTest, ServeResolvesAHubModelThroughTheCache) {
  const fs::path src = SmallHubCheckpoint(root_ / "serve_src", true);
  hub::testing::FakeHub server;
  hub::testing::FakeRepo repo;
  repo.id = "google/gemma-4-E2B-it";
  repo.commit = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678";
  for (const auto& e : fs::directory_iterator(src)) {
    hub::testing::FakeFile f;
    f.path = e.path().filename().string();
    f.content = ReadFileToString(e.path().string());
    f.lfs = e.path().extension() == ".safetensors";
    repo.files.push_back(std::move(f));
  }
  server.AddRepo(std::move(repo));
  const std::string cache = (root_ / "serve_cache").string();

  // Starts `serve`, reads its log up to the listening line, asks /v1/models, stops it.
  auto serve = [&](const std::vector<std::string>& env, std::string* log) {
    std::vector<std::string> vars;
    for (char** e = environ; *e; ++e) {
      if (std::strncmp(*e, "HF_", 3) != 0) vars.push_back(*e);
    }
    vars.insert(vars.end(), env.begin(), env.end());
    std::vector<char*> envp;
    for (std::string& v : vars) envp.push_back(v.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = {GEMMA_ENGINE_BIN, "serve",     "--model", "google/gemma-4-E2B-it",
                                     "--port",         "0",         "--context", "256",
                                     "--threads",      "1"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    std::FILE* err = ::fdopen(fds[0], "r");
    nlohmann::json models;
    if (rc == 0) {
      char line[4096];
      int port = 0;
      while (std::fgets(line, sizeof line, err)) {
        *log += line;
        const char* at = std::strstr(line, "listening on http://127.0.0.1:");
        if (at) {
          port = std::atoi(at + std::strlen("listening on http://127.0.0.1:"));
          break;
        }
      }
      // The template line follows the listening line.
      if (std::fgets(line, sizeof line, err)) *log += line;
      if (port > 0) {
        httplib::Client c("127.0.0.1", port);
        if (auto r = c.Get("/v1/models")) models = nlohmann::json::parse(r->body, nullptr, false);
      }
      ::kill(pid, SIGTERM);
      while (std::fgets(line, sizeof line, err)) *log += line;
      int status = 0;
      ::waitpid(pid, &status, 0);
    }
    std::fclose(err);
    return models;
  };

  std::string log;
  nlohmann::json m = serve({"HF_ENDPOINT=" + server.endpoint(), "HF_HUB_CACHE=" + cache}, &log);
  ASSERT_TRUE(m.contains("data")) << log;
  EXPECT_EQ(m["data"][0]["id"], "google/gemma-4-E2B-it") << log;
  EXPECT_EQ(m["data"][0]["meta"]["chat_template"]["repository"], "different");
  EXPECT_NE(log.find("warning: chat template: the built-in Gemma 4 template is used instead of "
                     "the repository's chat_template.jinja"),
            std::string::npos)
      << log;
  EXPECT_GT(server.downloads("model.safetensors"), 0);
  const int api_calls = server.api_calls();

  // Offline (and a Hub that is not there): the cached snapshot, no request made.
  log.clear();
  m = serve({"HF_ENDPOINT=http://127.0.0.1:9", "HF_HUB_CACHE=" + cache, "HF_HUB_OFFLINE=1"}, &log);
  ASSERT_TRUE(m.contains("data")) << log;
  EXPECT_EQ(m["data"][0]["id"], "google/gemma-4-E2B-it");
  EXPECT_NE(log.find("listening on"), std::string::npos) << log;
  EXPECT_EQ(server.api_calls(), api_calls);
}

}  // namespace
}  // namespace gemma
