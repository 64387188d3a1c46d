// The published repositories' layouts, offline: `synth --layout hub --shards N` writes the file set
// of google/gemma-4-E2B-it (sharded index, generation_config.json, vision/audio towers), the model
// loads from it, and the same files pulled from the loopback Hub load from the cache's symlinks.
#include <gtest/gtest.h>
#include <unistd.h>

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

}  // namespace
}  // namespace gemma
