// The gemma-engine command line as a new user meets it (issue 36): every bad input is one line
// "error: ..." and status 2, nothing crashes or hangs, chat keeps the conversation. Drives the
// built binary on a tiny synthesized model (4,096-id vocabulary, so setup takes well under a
// second).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "media/image.h"
#include "model/synth.h"

extern char** environ;

namespace gemma {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  int status = -1;  // exit status, or 128 + signal when killed
  std::string out, err;
};

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class Cli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = (fs::temp_directory_path() / ("gemma_cli_test_" + std::to_string(::getpid()))).string();
    Synthesize({.preset = "tiny", .out_dir = dir_ + "/model", .seed = 3, .vocab_size = 4096});
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string Write(const std::string& name, const std::string& text) {
    const std::string p = dir_ + "/" + name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

  // Runs gemma-engine with `args`, stdin from `input` (empty: /dev/null); waits at most 60 s.
  static Outcome Run(const std::vector<std::string>& args, const std::string& input = "",
                     int sigint_after_ms = -1) {
    const std::string in = input.empty() ? "/dev/null" : Write("stdin.txt", input);
    const std::string out = dir_ + "/stdout.txt", err = dir_ + "/stderr.txt";
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, in.c_str(), O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<std::string> all = {GEMMA_ENGINE_BIN};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    EXPECT_EQ(posix_spawn(&pid, GEMMA_ENGINE_BIN, &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    return Wait(pid, out, err, sigint_after_ms);
  }

  static Outcome Wait(pid_t pid, const std::string& out, const std::string& err,
                      int sigint_after_ms) {
    int st = 0;
    const auto t0 = std::chrono::steady_clock::now();
    bool sent = false;
    while (waitpid(pid, &st, WNOHANG) == 0) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - t0)
                          .count();
      if (sigint_after_ms >= 0 && !sent && ms >= sigint_after_ms) {
        kill(pid, SIGINT);
        sent = true;
      }
      if (ms > 60000) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        ADD_FAILURE() << "gemma-engine hung";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    Outcome o;
    o.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    o.out = Slurp(out);
    o.err = Slurp(err);
    return o;
  }

  static std::vector<std::string> Model(std::vector<std::string> more) {
    std::vector<std::string> a = {"--model", dir_ + "/model", "--threads", "1"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }
  static std::vector<std::string> RunArgs(std::vector<std::string> more) {
    std::vector<std::string> a = Model(std::move(more));
    a.insert(a.begin(), "run");
    return a;
  }

  // One line "error: <code>: ..." and status 2.
  static void ExpectUserError(const Outcome& o, const std::string& needle) {
    EXPECT_EQ(o.status, 2) << o.err;
    EXPECT_EQ(o.err.rfind("error: ", 0), 0u) << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_NE(o.err.find(needle), std::string::npos) << o.err;
  }

  static inline std::string dir_;
};

// --- the crashes and hangs ---------------------------------------------------------------------

TEST_F(Cli, DeeplyNestedSchemaIsAnErrorNotACrash) {
  const int n = 100'000;
  const std::string schema = Write("deep.json", std::string(n, '[') + std::string(n, ']'));
  ExpectUserError(Run(RunArgs({"-p", "hi", "--constrain-schema", schema})), "deeper than 256");
  std::string items;
  for (int i = 0; i < 5000; ++i) items += R"({"type":"array","items":)";
  items += "{}" + std::string(5000, '}');
  ExpectUserError(Run(RunArgs({"-p", "hi", "--constrain-schema", Write("items.json", items)})),
                  "deeper than 256");
}

TEST_F(Cli, HugeThreadCountIsAnErrorNotAnAbort) {
  ExpectUserError(Run({"run", "--model", dir_ + "/model", "--threads", "100000", "-p", "hi"}),
                  "--threads");
  ExpectUserError(Run({"run", "--model", dir_ + "/model", "--threads", "-3", "-p", "hi"}),
                  "--threads");
}

TEST_F(Cli, InvalidUtf8PromptIsRejectedWithItsOffset) {
  ExpectUserError(Run(RunArgs({"-p", "caf\xE9 au lait", "-n", "2"})),
                  "not valid UTF-8 at byte 3 (0xE9)");
}

TEST_F(Cli, ChatRefusesAnInvalidUtf8LineAndKeepsTheConversation) {
  Outcome o = Run({"chat", "--model", dir_ + "/model", "--threads", "1", "-n", "4"},
                  "hello there\ncaf\xE9\nand again\n/bye\n");
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.err.find("not valid UTF-8 at byte 3"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("history kept"), std::string::npos) << o.err;
  // Two replies; the second one's prompt reuses the first exchange from the cache.
  size_t replies = 0, at = 0;
  while ((at = o.err.find("stop: ", at)) != std::string::npos) ++replies, ++at;
  EXPECT_EQ(replies, 2u) << o.err;
  EXPECT_EQ(o.err.find("(reused 0)", o.err.rfind("stop: ")), std::string::npos) << o.err;
}

TEST_F(Cli, MessagesFileOfTheWrongShapeNamesTheExpectedShape) {
  for (const char* text : {R"("just a string")", "42", "true"}) {
    ExpectUserError(Run(RunArgs({"--messages", Write("m.json", text)})),
                    "expected an array of messages");
  }
  ExpectUserError(Run(RunArgs({"--messages", Write("m.json", R"(["hi"])")})),
                  "messages[0] must be an object");
  ExpectUserError(Run(RunArgs({"--messages", Write("m.json", R"({"messages": 3})")})),
                  "\"messages\" must be an array");
}

// --- rough edges --------------------------------------------------------------------------------

TEST_F(Cli, ParseErrorsAreOneLineAndStatus2) {
  ExpectUserError(Run({"run", "--no-such-flag"}), "error: invalid_argument:");
  ExpectUserError(Run({}), "subcommand");
  ExpectUserError(Run(RunArgs({"-p", "hi", "--context", "0"})), "--context");
  Outcome v = Run({"--version"});
  EXPECT_EQ(v.status, 0);
  EXPECT_EQ(v.out.rfind("gemma-engine ", 0), 0u) << v.out;
  Outcome h = Run({"run", "--help"});
  EXPECT_EQ(h.status, 0);
  EXPECT_NE(h.out.find("=256"), std::string::npos) << h.out;    // -n
  EXPECT_NE(h.out.find("=32768"), std::string::npos) << h.out;  // --context
}

TEST_F(Cli, SilentAcceptanceIsGone) {
  ExpectUserError(Run(RunArgs({"-p", "hi", "--constrain-regex", ""})), "regex is empty");
  ExpectUserError(Run(RunArgs({"-p", "hi", "--stop-id", "999999999"})), "outside the vocabulary");
  ExpectUserError(Run(RunArgs({"-p", "hi", "-n", "64", "--context", "32"})), "--context 32");
  const std::string image = Write(
      "img.json",
      R"([{"role":"user","content":[{"type":"image","url":"x.png"},{"type":"text","text":"?"}]}])");
  ExpectUserError(Run(RunArgs({"--messages", image})), "messages[0].content[0].url");
  const std::string gguf = Write("model.gguf", "GGUF\x03\0\0\0");
  ExpectUserError(Run({"run", "--model", gguf, "-p", "hi"}), "GGUF files are not supported");
}

TEST_F(Cli, ConstrainedOutputCutByLengthIsMarked) {
  Outcome o = Run(RunArgs({"-p", "hi", "-n", "1", "--constrain-json-object", "--json"}));
  ASSERT_EQ(o.status, 0) << o.err;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j.value("stop_reason", ""), "length");
  ASSERT_TRUE(j.contains("constraint_complete")) << o.out;
  EXPECT_EQ(j["constraint_complete"], false);
  EXPECT_NE(o.err.find("warning: the output is incomplete"), std::string::npos) << o.err;
  // Without a constraint there is nothing to report.
  Outcome free = Run(RunArgs({"-p", "hi", "-n", "1", "--json"}));
  EXPECT_FALSE(nlohmann::json::parse(free.out).contains("constraint_complete"));
}

// --draft-model: the same tokens as plain decoding, the drafting reported; a draft model whose
// tokenizer differs (the synthesized model's) is one line and status 2.
TEST_F(Cli, RunWithADraftModel) {
  const std::string trained = std::string(GEMMA_SOURCE_DIR) + "/models/tiny-trained";
  const std::vector<std::string> args = {
      "run", "--model", trained, "--threads", "1", "-p", "The package manager",
      "-n",  "24",      "--json"};
  Outcome plain = Run(args);
  ASSERT_EQ(plain.status, 0) << plain.err;
  std::vector<std::string> with = args;
  with.insert(with.end(), {"--draft-model", trained + "/qat", "--draft", "3"});
  Outcome drafted = Run(with);
  ASSERT_EQ(drafted.status, 0) << drafted.err;
  const auto p = nlohmann::json::parse(plain.out), d = nlohmann::json::parse(drafted.out);
  EXPECT_EQ(d["tokens"], p["tokens"]);
  EXPECT_EQ(d["resolved_config"]["speculative"]["mode"], "draft_model");
  EXPECT_EQ(d["resolved_config"]["speculative"]["max_draft"], 3);
  EXPECT_GT(d["telemetry"]["drafted"].get<int>(), 0);
  EXPECT_GT(d["telemetry"]["draft_ms"].get<double>(), 0);
  std::vector<std::string> bad = args;
  bad.insert(bad.end(), {"--draft-model", dir_ + "/model"});
  ExpectUserError(Run(bad), "tokenizer differs from the model's");
  std::vector<std::string> none = args;
  none.insert(none.end(), {"--speculative", "draft-model"});
  ExpectUserError(Run(none), "no draft model");
}

TEST_F(Cli, RunReadsThePromptFromAFileOrStdin) {
  const std::string p = Write("prompt.txt", "line one\nline two\n");
  Outcome f = Run(RunArgs({"-f", p, "-n", "2", "--json"}));
  ASSERT_EQ(f.status, 0) << f.err;
  Outcome in = Run(RunArgs({"-n", "2", "--json"}), "line one\nline two\n");
  ASSERT_EQ(in.status, 0) << in.err;
  Outcome inline_p = Run(RunArgs({"-p", "line one\nline two\n", "-n", "2", "--json"}));
  ASSERT_EQ(inline_p.status, 0) << inline_p.err;
  // The same prompt whichever way it came.
  const int n = nlohmann::json::parse(inline_p.out)["telemetry"]["prompt_tokens"];
  EXPECT_EQ(nlohmann::json::parse(f.out)["telemetry"]["prompt_tokens"], n);
  EXPECT_EQ(nlohmann::json::parse(in.out)["telemetry"]["prompt_tokens"], n);
}

TEST_F(Cli, ChatCommandsBlocksAndAFullContext) {
  // Each message is ~30 tokens (the synthetic tokenizer is about one token per character), the
  // context 96: the third exchange no longer fits and the oldest one is dropped.
  const std::string msg = "abcdefghijklmnopqrstuvwxyz0123";
  Outcome o = Run({"chat", "--model", dir_ + "/model", "--threads", "1", "-n", "4", "--context",
                   "96", "--system", "be brief"},
                  "/help\n\"\"\"\nfirst line\nsecond line\n\"\"\"\n" + msg + "\n" + msg + "\n" +
                      msg + "\n/nonsense\n/bye\n");
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.err.find("/bye"), std::string::npos) << o.err;  // the help text
  EXPECT_NE(o.err.find("context full: dropped"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("the system prompt stays"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("unknown command /nonsense"), std::string::npos) << o.err;
  size_t replies = 0, at = 0;
  while ((at = o.err.find("stop: ", at)) != std::string::npos) ++replies, ++at;
  EXPECT_EQ(replies, 4u) << o.err;  // the block, then the three long messages
}

TEST_F(Cli, CtrlCAtTheIdlePromptDoesNotQuit) {
  // stdin is a pipe that stays open: the chat waits at the prompt, SIGINT arrives there, and the
  // chat must go on reading (then /bye ends it with status 0).
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string out = dir_ + "/stdout.txt", err = dir_ + "/stderr.txt";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[0], 0);
  posix_spawn_file_actions_addclose(&fa, fds[1]);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> all = {GEMMA_ENGINE_BIN, "chat", "--model", dir_ + "/model",
                                  "--threads",      "1",    "-n",      "2"};
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, GEMMA_ENGINE_BIN, &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[0]);
  // Wait for the banner (the model is loaded and the prompt is up).
  for (int i = 0; i < 2000 && Slurp(err).find("> ") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(pid, SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::string rest = "hello\n/bye\n";
  // A chat that quit on the signal has closed the pipe: no SIGPIPE for the test.
  signal(SIGPIPE, SIG_IGN);
  EXPECT_EQ(write(fds[1], rest.data(), rest.size()), static_cast<ssize_t>(rest.size()))
      << "the chat quit on Ctrl-C at the prompt";
  close(fds[1]);
  Outcome o = Wait(pid, out, err, -1);
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.err.find("stop: "), std::string::npos) << o.err;  // "hello" still got a reply
}

TEST_F(Cli, DemoWithoutATerminalPrintsOneReplyAndExits) {
  // The demo model already in place (the default one takes minutes to synthesize).
  const std::string d = dir_ + "/demo";
  fs::create_directories(d);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"})
    fs::copy_file(dir_ + "/model/" + f, d + "/" + f, fs::copy_options::overwrite_existing);
  Outcome o = Run({"demo", "--dir", d, "-n", "3"});  // stdin: /dev/null
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("model: "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("3 tokens"), std::string::npos) << o.out;
  Outcome once = Run({"demo", "--dir", d, "-n", "2", "--once"}, "typed text\n");
  EXPECT_EQ(once.status, 0) << once.err;
  EXPECT_EQ(once.err.find("> "), std::string::npos) << once.err;  // no chat prompt
}

TEST_F(Cli, SynthesizedModelsTakeText) {
  // Synthesize() writes a tokenizer.json matching the vocabulary (here 4,096 ids).
  EXPECT_TRUE(fs::exists(dir_ + "/model/tokenizer.json"));
  Outcome o = Run(RunArgs({"-p", "Hello, world", "-n", "3", "--json"}));
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_EQ(nlohmann::json::parse(o.out)["tokens"].size(), 3u);
}

}  // namespace
}  // namespace gemma

namespace gemma {
namespace {

// A checkpoint's generation_config.json supplies the sampling options the command line leaves
// unset (issue 40); flags given win.
TEST(CliDefaults, GenerationConfigFillsUnsetSamplingFlags) {
  const fs::path dir = fs::temp_directory_path() / ("gemma_cli_gencfg_" + std::to_string(::getpid()));
  Synthesize({.preset = "tiny", .out_dir = dir.string(), .seed = 4, .vocab_size = 4096});
  std::ofstream(dir / "generation_config.json")
      << R"({"do_sample": true, "temperature": 1.0, "top_k": 64, "top_p": 0.95})";
  auto run = [&](std::vector<std::string> extra) {
    const std::string out = (dir / "out.json").string();
    std::string cmd = std::string(GEMMA_ENGINE_BIN) + " run --model " + dir.string() +
                      " --ids 2,105,2364,107 -n 2 --seed 1 --json";
    for (const std::string& e : extra) cmd += " " + e;
    EXPECT_EQ(std::system((cmd + " > " + out + " 2>/dev/null").c_str()), 0) << cmd;
    return nlohmann::json::parse(Slurp(out))["resolved_config"];
  };
  const nlohmann::json d = run({});
  EXPECT_EQ(d["temperature"], 1.0);
  EXPECT_EQ(d["top_k"], 64);
  EXPECT_EQ(d["top_p"], 0.95);
  const nlohmann::json given = run({"--temperature", "0", "--top-k", "5"});
  EXPECT_EQ(given["temperature"], 0.0);
  EXPECT_EQ(given["top_k"], 5);
  EXPECT_EQ(given["top_p"], 0.95);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gemma

namespace gemma {
namespace {

// --image on the tiny preset with its real 262,144-id vocabulary (the image ids exist) and its
// 2-layer vision tower: an answer, and one-line errors for bad images and budgets.
class CliImage : public Cli {};

TEST_F(CliImage, RunWithImagesAndBadImages) {
  const std::string model = dir_ + "/vision_model";
  Synthesize({.preset = "tiny", .out_dir = model, .seed = 5});
  const std::string img = std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/vision/images/";
  Outcome o = Run({"run", "--model", model, "--image", img + "photo_300x200.png", "--image",
                   img + "exif8_64x40.jpg", "-p", "Describe the image.", "-n", "3",
                   "--vision-budget", "70"});
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.err.find("[vision] 2 images, 2 through the tower"), std::string::npos) << o.err;
  o = Run({"run", "--model", model, "--image", dir_ + "/missing.png", "-p", "x", "-n", "1"});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err.rfind("error: io: ", 0), 0u) << o.err;
  const std::string bad = Write("bad.png", Slurp(img + "photo_300x200.png").substr(0, 200));
  o = Run({"run", "--model", model, "--image", bad, "-p", "x", "-n", "1"});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err.rfind("error: format: ", 0), 0u) << o.err;
  o = Run({"run", "--model", model, "--image", Write("t.txt", "hello"), "-p", "x", "-n", "1"});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err.rfind("error: unsupported: ", 0), 0u) << o.err;
  o = Run({"run", "--model", model, "--image", img + "photo_300x200.png", "--vision-budget", "100",
           "-p", "x", "-n", "1"});
  EXPECT_EQ(o.status, 2);
  // A model without image token ids in its vocabulary says so.
  o = Run({"run", "--model", dir_ + "/model", "--image", img + "photo_300x200.png", "-p", "x",
           "-n", "1"});
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("image"), std::string::npos) << o.err;
}

// --messages with image parts: a path and a data URL, the same tower counts as --image gives, and
// --image beside --messages refused.
TEST_F(CliImage, MessagesCarryImageParts) {
  const std::string model = dir_ + "/vision_model_m";
  Synthesize({.preset = "tiny", .out_dir = model, .seed = 5});
  const std::string png =
      std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/vision/images/small_64x48.png";
  const std::string bytes = Slurp(png);
  const std::string b64 =
      media::EncodeBase64(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  const nlohmann::json msgs = {
      {{"role", "user"},
       {"content",
        {{{"type", "image"}, {"path", png}, {"budget", 70}},
         {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64," + b64}}}},
         {{"type", "text"}, {"text", "Compare the images."}}}}}};
  const std::string file = Write("img_msgs.json", msgs.dump());
  Outcome o = Run({"run", "--model", model, "--messages", file, "-n", "2", "--json"});
  ASSERT_EQ(o.status, 0) << o.err;
  const nlohmann::json j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["telemetry"]["images"], 2) << o.out;
  EXPECT_EQ(j["telemetry"]["images_encoded"], 2) << o.out;
  // The request's clock starts before the images are decoded: their time is inside TTFT and the
  // total.
  const nlohmann::json& t = j["telemetry"];
  EXPECT_GT(t["vision_ms"].get<double>(), 0.0) << t.dump();  // the tower
  EXPECT_GT(t["media_ms"].get<double>(), 0.0) << t.dump();   // decoding and preprocessing
  EXPECT_LE(t["vision_ms"].get<double>() + t["media_ms"].get<double>(), t["ttft_ms"].get<double>())
      << t.dump();
  EXPECT_LE(t["ttft_ms"].get<double>(), t["total_ms"].get<double>()) << t.dump();
  o = Run({"run", "--model", model, "--messages", file, "--image", png, "-n", "1"});
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("content parts"), std::string::npos) << o.err;
  // A bad part is the engine's typed error, naming the part.
  const std::string bad =
      Write("bad_msgs.json", R"([{"role":"user","content":[{"type":"image","bytes":"@@"}]}])");
  o = Run({"run", "--model", model, "--messages", bad, "-n", "1"});
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("messages[0].content[0].bytes"), std::string::npos) << o.err;
  // A budget past int's range is refused, not wrapped (2^32 + 70 read as 70 ran the image).
  const std::string wraps =
      Write("wrap_msgs.json", R"([{"role":"user","content":[{"type":"image","path":")" + png +
                                  R"(","budget":4294967366},{"type":"text","text":"x"}]}])");
  o = Run({"run", "--model", model, "--messages", wraps, "-n", "1"});
  EXPECT_EQ(o.status, 2) << o.err;
  EXPECT_NE(o.err.find("messages[0].content[0].budget"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace gemma

namespace gemma {
namespace {

// --video: ffmpeg frames with mm:ss timestamps in the prompt (when ffmpeg is installed).
TEST_F(CliImage, RunWithVideo) {
  if (std::system("ffmpeg -version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no ffmpeg";
  const std::string model = dir_ + "/vision_model_v";
  Synthesize({.preset = "tiny", .out_dir = model, .seed = 5});
  const std::string png = std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/vision/images/small_64x48.png";
  const std::string clip = dir_ + "/clip.mkv";
  ASSERT_EQ(std::system(("ffmpeg -nostdin -v error -y -loop 1 -framerate 2 -t 3 -i " + png +
                         " -c:v ffv1 " + clip).c_str()),
            0);
  Outcome o = Run({"run", "--model", model, "--video", clip, "-p", "What happens?", "-n", "2"});
  EXPECT_EQ(o.status, 0) << o.err;
  // 6 frames: a clip shorter than 32 frames gives every frame (Gemma4VideoProcessor's sampling).
  EXPECT_NE(o.err.find("[vision] 6 images"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace gemma

namespace gemma {
namespace {

// --audio on the tiny preset (its 2-layer audio tower): an answer, and one-line errors for
// missing, unsupported and truncated files.
TEST_F(CliImage, RunWithAudioAndBadAudio) {
  const std::string model = dir_ + "/audio_model";
  Synthesize({.preset = "tiny", .out_dir = model, .seed = 5});
  const std::string clips = std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/audio/clips/";
  Outcome o = Run({"run", "--model", model, "--audio", clips + "speech.mp3", "-p",
                   "Transcribe this.", "-n", "2"});
  EXPECT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.err.find("[audio] 1 clip, 1 through the tower"), std::string::npos) << o.err;
  o = Run({"run", "--model", model, "--audio", dir_ + "/missing.wav", "-p", "x", "-n", "1"});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err.rfind("error: io: ", 0), 0u) << o.err;
  o = Run({"run", "--model", model, "--audio", Write("t.txt", "hello"), "-p", "x", "-n", "1"});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err.rfind("error: unsupported: ", 0), 0u) << o.err;
  const std::string cut = Write("cut.wav", Slurp(clips + "speech.wav").substr(0, 20000));
  o = Run({"run", "--model", model, "--audio", cut, "-p", "x", "-n", "1"});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err.rfind("error: format: ", 0), 0u) << o.err;
}

}  // namespace
}  // namespace gemma
