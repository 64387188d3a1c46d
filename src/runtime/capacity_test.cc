// Huge contexts on the CPU backends: a context that could not grow to its capacity in this
// machine's memory is refused at load with Error(kCapacity) naming the bytes, before anything is
// allocated (the process stays small), instead of an out-of-memory kill in the middle of a
// prefill. The bytes are the K/V cache formula, checked here against a context's own accounting.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/cache_window.h"
#include "core/memory.h"
#include "gemma/engine.h"
#include "model/model.h"
#include "model/synth.h"

namespace gemma {
namespace {

namespace fs = std::filesystem;

size_t Rss() {
  std::ifstream f("/proc/self/statm");
  size_t total = 0, resident = 0;
  f >> total >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

class Capacity : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("gemma_capacity_" + std::to_string(::getpid()))).string();
    Synthesize({.preset = "tiny", .out_dir = dir_, .seed = 3, .vocab_size = 1024});
    // A model that claims a billion positions: its full-context caches exceed any machine.
    nlohmann::json c = nlohmann::json::parse(std::ifstream(dir_ + "/config.json"));
    nlohmann::json& text = c.contains("text_config") ? c["text_config"] : c;
    text["max_position_embeddings"] = 1 << 30;
    std::ofstream(dir_ + "/config.json") << c.dump(2);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(Capacity, HugeContextIsACapacityErrorNamingTheBytesBeforeAllocating) {
  ASSERT_GT(AvailableMemoryBytes(), 0u) << "/proc/meminfo unreadable";
  for (const char* backend : {"cpu", "cpu-ref"}) {
    const size_t before = Rss();
    try {
      Engine::Load(
          {.model_path = dir_, .backend = backend, .context_capacity = 1 << 30, .threads = 2});
      ADD_FAILURE() << backend << ": a 2^30-token context loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kCapacity) << e.what();
      const std::string m = e.what();
      EXPECT_NE(m.find("a session of 1073741824 tokens needs "), std::string::npos) << m;
      EXPECT_NE(m.find(" bytes"), std::string::npos) << m;
      EXPECT_NE(m.find("lower the context capacity to at most"), std::string::npos) << m;
    }
    EXPECT_LT(Rss(), before + (64u << 20)) << backend << ": allocated before refusing";
  }
  // A context that fits still loads and answers.
  auto engine =
      Engine::Load({.model_path = dir_, .backend = "cpu", .context_capacity = 4096, .threads = 2});
  auto session = engine->NewSession();
  GenerateOptions g;
  g.max_new_tokens = 4;
  EXPECT_EQ(session->Generate(Input::Ids({2, 100, 200}), g).tokens.size(), 4u);
}

// EngineOptions::device_memory_limit reaches the Vulkan backend: below the weights, loading is
// Error(kCapacity) naming the device memory; with room, the engine loads and answers.
TEST_F(Capacity, DeviceMemoryLimitIsACapacityErrorOnVulkan) {
  try {
    Engine::Load({.model_path = dir_,
                  .backend = "vulkan",
                  .context_capacity = 256,
                  .threads = 2,
                  .device_memory_limit = 4096});
    ADD_FAILURE() << "loaded within 4 KiB of device memory";
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kDevice || e.code() == ErrorCode::kUnsupported)
      GTEST_SKIP() << "SKIPPED: no Vulkan backend or device here: " << e.what();
    EXPECT_EQ(e.code(), ErrorCode::kCapacity) << e.what();
    EXPECT_NE(std::string(e.what()).find("of device memory"), std::string::npos) << e.what();
  }
  auto engine = Engine::Load({.model_path = dir_,
                              .backend = "vulkan",
                              .context_capacity = 256,
                              .threads = 2,
                              .device_memory_limit = size_t(1) << 30});
  GenerateOptions g;
  g.max_new_tokens = 3;
  EXPECT_EQ(engine->NewSession()->Generate(Input::Ids({2, 100, 200}), g).tokens.size(), 3u);
}

TEST_F(Capacity, ContextBytesMatchWhatAContextHolds) {
  // The formula against the reference context's own accounting once its caches are full: every
  // owned K/V cache, float32, sliding caches capped at their ring.
  auto model = Model::Load(dir_);
  const BackendOptions opt{.capacity = 300};
  auto backend = CreateCpuReferenceBackend(*model, opt);
  std::vector<int32_t> ids(300, 7);
  ForwardResult fr;
  backend->Forward({.tokens = ids, .mode = OutputMode::kNone}, &fr);
  const CpuContextBytes b = PlanCpuContextBytes(*model, opt, 300, 1);
  EXPECT_EQ(backend->resident_bytes(), b.kv);
  // Growth stops at the capacity.
  EXPECT_EQ(PlanCpuContextBytes(*model, opt, 100000, 1).kv, b.kv);
  EXPECT_LT(PlanCpuContextBytes(*model, opt, 10, 1).kv, b.kv);
}

// With a draft model, a session holds a draft context beside its own: a capacity whose context
// fits alone but not twice (the model drafting for itself) is refused at load, before anything is
// allocated, the message naming the draft context's bytes.
TEST_F(Capacity, ADraftModelsContextCountsInTheHostMemoryCheck) {
  const size_t available = AvailableMemoryBytes();
  ASSERT_GT(available, 0u) << "/proc/meminfo unreadable";
  auto model = Model::Load(dir_);
  auto need = [&](int c) {
    const CpuContextBytes b = PlanCpuContextBytes(*model, {.capacity = c}, c, 2);
    return b.kv + b.scratch;
  };
  // The capacity whose context takes ~60% of the available memory: one fits, two do not.
  int lo = 1, hi = 1 << 30;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (need(mid) <= available / 10 * 6)
      lo = mid;
    else
      hi = mid - 1;
  }
  EXPECT_LE(need(lo), available);  // (ContextBytesMatchWhatAContextHolds checks the formula)
  const size_t before = Rss();
  try {
    Engine::Load({.model_path = dir_,
                  .backend = "cpu",
                  .context_capacity = lo,
                  .threads = 2,
                  .draft_model_path = dir_});
    ADD_FAILURE() << "a model and its draft context of " << lo << " tokens each loaded in "
                  << available << " bytes";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCapacity) << e.what();
    EXPECT_NE(std::string(e.what()).find("the draft model's context"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(Rss(), before + (64u << 20)) << "allocated before refusing";
}

}  // namespace
}  // namespace gemma
