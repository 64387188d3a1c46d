// The soak harness's own arithmetic and a short run on the trained tiny model whose files are
// checked: events.jsonl one JSON object per line, progress.json and summary.json complete. (The
// timed CI run is the soak_smoke test: tools/CMakeLists.txt.)
#include "soak/soak.h"
#include "soak/watchdog.h"

#include "gemma/error.h"
#include "model/synth.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <string>

namespace gemma::soak {
namespace {

namespace fs = std::filesystem;

// Options for a run on models/tiny-trained, one thread per engine, writing into a fresh
// test_artifacts/<name> (returned in *out).
SoakOptions TinyTrainedOptions(const char* name, fs::path* out) {
  *out = fs::path(GEMMA_BINARY_DIR) / "test_artifacts" / name;
  fs::remove_all(*out);
  SoakOptions o;
  o.model_path = std::string(GEMMA_SOURCE_DIR) + "/models/tiny-trained";
  o.out_dir = out->string();
  o.threads = 1;
  return o;
}

TEST(SoakTest, SlopeIsLeastSquares) {
  // y = 3x + 1 exactly, then with symmetric noise that leaves the slope unchanged.
  EXPECT_DOUBLE_EQ(Slope({0, 1, 2, 3}, {1, 4, 7, 10}), 3.0);
  EXPECT_DOUBLE_EQ(Slope({0, 1, 2, 3}, {2, 3, 8, 9}), 2.6);  // sxy / sxx = 13 / 5
  EXPECT_EQ(Slope({1}, {5}), 0.0);
  EXPECT_EQ(Slope({2, 2}, {1, 5}), 0.0);
}

TEST(SoakTest, ResidentBytesIsPlausible) {
  const size_t rss = ResidentBytes();
  EXPECT_GT(rss, 1u << 20);
  EXPECT_LT(rss, size_t{1} << 40);
}

TEST(SoakTest, OneStepWritesItsFilesAndReproducesFromTheSeed) {
  fs::path out;
  SoakOptions o = TinyTrainedOptions("soak_unit", &out);
  o.seed = 7;
  o.only_step = 3;
  const nlohmann::json s1 = RunSoak(o);
  ASSERT_TRUE(s1["ok"].get<bool>()) << s1.dump(2);
  EXPECT_EQ(s1["steps"], 1);
  std::ifstream ev(out / "events.jsonl");
  std::string line;
  int lines = 0;
  nlohmann::json step;
  while (std::getline(ev, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);  // throws on a torn line
    if (j.contains("step")) step = j;
    ++lines;
  }
  EXPECT_EQ(lines, 3);  // start, the step, end
  EXPECT_TRUE(step["ok"].get<bool>());
  const nlohmann::json progress = nlohmann::json::parse(std::ifstream(out / "progress.json"));
  EXPECT_TRUE(progress["done"].get<bool>());
  EXPECT_FALSE(fs::exists(out / "progress.json.tmp"));
  const nlohmann::json summary = nlohmann::json::parse(std::ifstream(out / "summary.json"));
  EXPECT_EQ(summary, s1);
  // The same seed and step run the same scenario again.
  fs::remove_all(out);
  const nlohmann::json s2 = RunSoak(o);
  EXPECT_EQ(s2["scenarios"], s1["scenarios"]);
}

TEST(SoakTest, ThreadReportHasEveryThreadWithItsStack) {
  std::atomic<bool> stop{false};
  std::thread spinner([&] {
    while (!stop.load()) {
    }
  });
  std::thread sleeper([&] {
    while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  });
  const nlohmann::json threads = ThreadReport();
  stop = true;
  spinner.join();
  sleeper.join();
  ASSERT_GE(threads.size(), 3u) << threads.dump(2);
  int with_stack = 0;
  for (const nlohmann::json& t : threads) {
    EXPECT_TRUE(t.contains("tid") && t.contains("name") && t.contains("state")) << t.dump();
    if (t.contains("stack") && !t["stack"].empty()) ++with_stack;
  }
  EXPECT_GE(with_stack, 3) << threads.dump(2);  // this thread, the spinner and the sleeper
}

TEST(SoakTest, HungStepEndsTheRunWithItsReproducerAndStacks) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  fs::path out;
  SoakOptions o = TinyTrainedOptions("soak_hang", &out);
  o.seed = 11;
  o.max_steps = 5;
  o.inject_hang_step = 2;
  o.step_timeout_s = 0.5;
  o.command = "gemma-engine soak (test)";
  EXPECT_EXIT(RunSoak(o), testing::ExitedWithCode(kHungExitStatus), "");
  const nlohmann::json summary = nlohmann::json::parse(std::ifstream(out / "summary.json"));
  EXPECT_FALSE(summary["ok"].get<bool>());
  EXPECT_TRUE(summary["hung"].get<bool>());
  EXPECT_EQ(summary["steps"], 2);  // steps 0 and 1 ran
  const nlohmann::json& r = summary["reproducer"];
  EXPECT_EQ(r["step"], 2);
  EXPECT_EQ(r["seed"], 11);
  EXPECT_NE(r["rerun"].get<std::string>().find("--only-step 2"), std::string::npos);
  // The hung thread's stack runs through the soak's step.
  bool found = false;
  for (const nlohmann::json& t : r["threads"]) {
    for (const nlohmann::json& f : t.value("stack", nlohmann::json::array()))
      if (f.get<std::string>().find("nanosleep") != std::string::npos) found = true;
  }
  EXPECT_TRUE(found) << r["threads"].dump(2);
  // events.jsonl ends with the hung step.
  std::ifstream ev(out / "events.jsonl");
  std::string line, last;
  while (std::getline(ev, line)) last = line;
  const nlohmann::json j = nlohmann::json::parse(last);
  EXPECT_EQ(j["step"], 2);
  EXPECT_FALSE(j["ok"].get<bool>());
}

TEST(SoakTest, DeviceFaultScenariosOnVulkan) {
  fs::path out;
  SoakOptions o = TinyTrainedOptions("soak_vulkan", &out);
  o.backend = "vulkan";
  o.seed = 2;  // (its two steps: one device_loss, one device_oom)
  o.minutes = 10;
  o.max_steps = 2;
  o.scenarios = {"device_loss", "device_oom"};
  nlohmann::json s;
  try {
    s = RunSoak(o);
  } catch (const Error& e) {
    // (kUnsupported: a build without Vulkan)
    if (e.code() == ErrorCode::kDevice || e.code() == ErrorCode::kUnsupported)
      GTEST_SKIP() << "SKIPPED: no usable Vulkan device";
    throw;
  }
  ASSERT_TRUE(s["ok"].get<bool>()) << s.dump(2);
  EXPECT_EQ(s["steps"], 2);
  EXPECT_GE(s["scenarios"].value("device_loss", 0), 1) << s["scenarios"];
  EXPECT_GE(s["scenarios"].value("device_oom", 0), 1) << s["scenarios"];
  EXPECT_GT(s["device_memory"]["max_mib"].get<double>(), 0.0);
  // The CPU backends have no device to lose: asking for only device scenarios is an error.
  o.backend = "cpu";
  o.scenarios = {"device_loss"};
  EXPECT_THROW(RunSoak(o), Error);
  o.scenarios = {"no_such_scenario"};
  EXPECT_THROW(RunSoak(o), Error);
}

// The media scenario on a model with both towers (synthetic "tiny"): requests with images and
// audio against the reference's goldens, and asked again on the same session without a tower run.
// A model without towers has no media scenario to run.
TEST(SoakTest, MediaScenarioOnAModelWithTowers) {
  const fs::path dir = fs::path(GEMMA_BINARY_DIR) / "test_artifacts" / "soak_media_model";
  const fs::path out = fs::path(GEMMA_BINARY_DIR) / "test_artifacts" / "soak_media";
  fs::remove_all(out);
  Synthesize({.preset = "tiny", .out_dir = dir.string(), .seed = 5});
  SoakOptions o;
  o.model_path = dir.string();
  o.out_dir = out.string();
  o.threads = 2;
  o.seed = 4;
  o.minutes = 10;
  o.max_steps = 6;
  o.scenarios = {"media"};
  const nlohmann::json s = RunSoak(o);
  ASSERT_TRUE(s["ok"].get<bool>()) << s.dump(2);
  EXPECT_EQ(s["scenarios"].value("media", 0), 6) << s["scenarios"];
  std::ifstream ev(out / "events.jsonl");
  std::string line;
  std::set<std::string> requests;
  int again = 0;
  while (std::getline(ev, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("request")) continue;
    requests.insert(j["request"].get<std::string>());
    if (j.contains("encoded_again")) {
      EXPECT_EQ(j["encoded_again"], 0) << line;
      ++again;
    }
  }
  EXPECT_GE(requests.size(), 2u);
  EXPECT_GE(again, 1);
  fs::remove_all(dir);
  o.model_path = std::string(GEMMA_SOURCE_DIR) + "/models/tiny-trained";  // text only
  EXPECT_THROW(RunSoak(o), Error);
}

}  // namespace
}  // namespace gemma::soak
