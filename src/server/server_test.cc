// The server over loopback on the tiny synthetic model: the official openai npm client
// (tests/server/openai_client.mjs), bad requests, the queue's 429, client disconnects, shutdown in
// the middle of a stream, and a bounded load run.
#include "server/server.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "gemma/engine.h"
#include "media/image.h"
#include "model/synth.h"
#include "server/request_parse.h"
#include "tokenizer/test_support.h"

namespace gemma::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The tiny preset with the derived Gemma 4 tokenizer beside it, made once per build tree. Written
// under a temporary name and renamed, so parallel test processes never see half a model.
std::string TinyModelDir() {
  static const std::string dir = [] {
    const fs::path d = fs::path(GEMMA_BINARY_DIR) / "test_assets" / "server_tiny";
    if (fs::exists(d / "tokenizer.json")) return d.string();
    const fs::path tmp = d.string() + ".tmp." + std::to_string(::getpid());
    Synthesize({.preset = "tiny", .out_dir = tmp.string(), .seed = 1});
    fs::copy_file(testing::Gemma4TestTokenizerPath(), tmp / "tokenizer.json",
                  fs::copy_options::overwrite_existing);
    std::error_code ec;
    fs::rename(tmp, d, ec);
    if (ec) fs::remove_all(tmp);  // another process won the race
    return d.string();
  }();
  return dir;
}

std::shared_ptr<Engine> TinyEngine() {
  static std::shared_ptr<Engine> e = Engine::Load(
      {.model_path = TinyModelDir(), .backend = "cpu", .context_capacity = 1024, .threads = 1});
  return e;
}

class Running {
 public:
  explicit Running(ServerOptions o, std::shared_ptr<Engine> engine = TinyEngine())
      : server_(std::move(engine), WithDefaults(std::move(o))) {
    port_ = server_.Bind();
    thread_ = std::thread([this] { server_.Run(); });
    httplib::Client c("127.0.0.1", port_);
    for (int i = 0; i < 200; ++i) {
      if (auto r = c.Get("/health"); r && r->status == 200) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "server did not come up";
  }
  ~Running() {
    server_.Stop();
    thread_.join();
  }
  int port() const { return port_; }
  Server& server() { return server_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  static ServerOptions WithDefaults(ServerOptions o) {
    o.port = 0;
    if (o.model_id.empty()) o.model_id = "tiny";
    return o;
  }
  Server server_;
  int port_ = 0;
  std::thread thread_;
};

json Chat(std::string content, int max_tokens) {
  return {{"model", "tiny"},
          {"messages", json::array({{{"role", "user"}, {"content", std::move(content)}}})},
          {"max_tokens", max_tokens},
          {"temperature", 0}};
}

struct Reply {
  int status = -1;
  json body;
  std::string retry_after;
};

Reply Post(int port, const std::string& path, const std::string& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60);
  Reply out;
  if (auto r = c.Post(path.c_str(), body, "application/json")) {
    out.status = r->status;
    out.body = json::parse(r->body, nullptr, false);
    out.retry_after = r->get_header_value("Retry-After");
  }
  return out;
}

double Metric(int port, const std::string& name) {
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get("/metrics");
  if (!r) return -1;
  const std::string key = "\n" + name + " ";
  const size_t at = r->body.find(key);
  return at == std::string::npos ? -1 : std::stod(r->body.substr(at + key.size()));
}

// A streamed chat request that hangs up after `keep` chunks (0: reads to the end). Returns the
// bytes received, or sets *status.
std::string Stream(int port, json body, int keep, int* status = nullptr,
                   std::atomic<bool>* first = nullptr) {
  body["stream"] = true;
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string got;
  int chunks = 0;
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    got.append(d, n);
    if (first) *first = true;
    return keep == 0 || ++chunks < keep;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  c.send(req, res, err);
  if (status) *status = res.status;
  if (err != httplib::Error::Success && err != httplib::Error::Canceled)  // why no status (-1)
    std::fprintf(stderr, "stream request: transport error %d\n", static_cast<int>(err));
  return got;
}

// `gemma-engine serve` as its own process: what a user runs, measured alone (RSS), stopped by
// SIGTERM.
class ServeProcess {
 public:
  explicit ServeProcess(std::vector<std::string> extra) {
    std::vector<std::string> args = {GEMMA_BINARY_DIR "/tools/gemma-engine",
                                     "serve",
                                     "--model",
                                     TinyModelDir(),
                                     "--alias",
                                     "tiny",
                                     "--port",
                                     "0",
                                     "--context",
                                     "1024",
                                     "--threads",
                                     "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    const int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    err_ = ::fdopen(fds[0], "r");
    if (rc != 0) throw std::runtime_error("cannot start " + args[0]);
    char line[1024];
    while (std::fgets(line, sizeof line, err_)) {
      log_ += line;
      const char* at = std::strstr(line, "listening on http://127.0.0.1:");
      if (at) {
        port_ = std::atoi(at + std::strlen("listening on http://127.0.0.1:"));
        break;
      }
    }
  }
  ~ServeProcess() {
    if (pid_ > 0) Stop();
  }
  int port() const { return port_; }
  const std::string& log() const { return log_; }
  size_t Rss() const {
    std::FILE* f = std::fopen(("/proc/" + std::to_string(pid_) + "/statm").c_str(), "r");
    unsigned long size = 0, rss = 0;
    if (f) {
      if (std::fscanf(f, "%lu %lu", &size, &rss) != 2) rss = 0;
      std::fclose(f);
    }
    return rss * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  }
  // SIGTERM; returns the exit status.
  int Stop() {
    ::kill(pid_, SIGTERM);
    char line[1024];
    while (std::fgets(line, sizeof line, err_)) log_ += line;
    std::fclose(err_);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::FILE* err_ = nullptr;
  std::string log_;
};

std::string RunCommand(const std::string& cmd, int* status) {
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return "cannot run " + cmd;
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  *status = ::pclose(p);
  return out;
}

// The sampling fields a request leaves out take the checkpoint's generation_config.json values,
// as `run` does (CliDefaults.GenerationConfigFillsUnsetSamplingFlags); fields given win. The
// response's resolved_config (and the final stream chunk's) says what was used; /props and
// /v1/models report the defaults and which chat template renders (the repository's own differs
// here: its hash is checked against coreutils' sha256sum).
TEST(Server, GenerationConfigFillsUnsetSamplingFields) {
  const fs::path dir =
      fs::temp_directory_path() / ("gemma_server_gencfg_" + std::to_string(::getpid()));
  Synthesize({.preset = "tiny", .out_dir = dir.string(), .seed = 4, .vocab_size = 4096});
  std::ofstream(dir / "generation_config.json")
      << R"({"do_sample": true, "temperature": 1.0, "top_k": 64, "top_p": 0.95})";
  std::ofstream(dir / "chat_template.jinja") << "{{ messages[0]['content'] }}\n";
  Running s({}, Engine::Load({.model_path = dir.string(),
                              .backend = "cpu",
                              .context_capacity = 256,
                              .threads = 1}));
  auto complete = [&](json extra) {
    json body = {{"model", "tiny"}, {"prompt", "Hello"}, {"max_tokens", 2}, {"seed", 1}};
    body.update(extra);
    const Reply r = Post(s.port(), "/v1/completions", body.dump());
    EXPECT_EQ(r.status, 200) << r.body.dump();
    return r.body["resolved_config"];
  };
  const json d = complete(json::object());
  EXPECT_EQ(d["temperature"], 1.0);
  EXPECT_EQ(d["top_k"], 64);
  EXPECT_EQ(d["top_p"], 0.95);
  const json given = complete({{"temperature", 0}, {"top_k", 5}});
  EXPECT_EQ(given["temperature"], 0.0);
  EXPECT_EQ(given["top_k"], 5);
  EXPECT_EQ(given["top_p"], 0.95);
  // Streamed: the final chunk carries it beside the timings.
  httplib::Client c("127.0.0.1", s.port());
  auto st = c.Post("/v1/completions",
                   json({{"prompt", "Hello"}, {"max_tokens", 2}, {"stream", true}}).dump(),
                   "application/json");
  ASSERT_TRUE(st);
  const size_t at = st->body.find("\"resolved_config\"");
  ASSERT_NE(at, std::string::npos) << st->body;
  EXPECT_NE(st->body.find("\"top_k\":64", at), std::string::npos) << st->body;

  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  const json meta = json::parse(models->body)["data"][0]["meta"];
  EXPECT_EQ(meta["generation_defaults"]["top_k"], 64);
  EXPECT_EQ(meta["generation_defaults"]["temperature"], 1.0);
  const json t = meta["chat_template"];
  EXPECT_EQ(t["repository"], "different");
  EXPECT_EQ(t["used"], "built-in");
  int status = -1;
  const std::string sum = RunCommand("sha256sum " + (dir / "chat_template.jinja").string(), &status);
  EXPECT_EQ(t["repository_sha256"], sum.substr(0, 64));
  EXPECT_NE(t["description"].get<std::string>().find(
                "the built-in Gemma 4 template is used instead of the repository's"),
            std::string::npos);
  fs::remove_all(dir);
}

// Speculative decoding in the server: `serve --draft-model` (ServerOptions::speculative) applies to
// every request, a request's "speculative" field overrides it; the text is the same either way.
TEST(Server, SpeculativeDecodingWithADraftModel) {
  const std::string trained = std::string(GEMMA_SOURCE_DIR) + "/models/tiny-trained";
  auto engine = Engine::Load({.model_path = trained,
                              .backend = "cpu",
                              .context_capacity = 512,
                              .threads = 1,
                              .draft_model_path = trained + "/qat"});
  ServerOptions o;
  o.speculative.mode = SpeculativeOptions::Mode::kDraftModel;
  Running s(o, engine);
  auto complete = [&](json extra) {
    json body = {{"prompt", "The package manager"}, {"max_tokens", 32}, {"temperature", 0}};
    body.update(extra);
    return Post(s.port(), "/v1/completions", body.dump());
  };
  const Reply drafted = complete(json::object());
  ASSERT_EQ(drafted.status, 200) << drafted.body.dump();
  EXPECT_EQ(drafted.body["resolved_config"]["speculative"]["mode"], "draft_model");
  EXPECT_TRUE(drafted.body["resolved_config"]["speculative"]["applied"].get<bool>());
  EXPECT_GT(drafted.body["timings"]["draft_n"].get<int>(), 0);
  const Reply plain = complete({{"speculative", {{"mode", "off"}}}});
  ASSERT_EQ(plain.status, 200) << plain.body.dump();
  EXPECT_EQ(plain.body["resolved_config"]["speculative"]["mode"], "off");
  EXPECT_FALSE(plain.body["timings"].contains("draft_n"));
  EXPECT_EQ(drafted.body["choices"][0]["text"], plain.body["choices"][0]["text"]);
  const Reply lookup = complete({{"speculative", {{"mode", "prompt_lookup"}, {"max_draft", 2}}}});
  ASSERT_EQ(lookup.status, 200) << lookup.body.dump();
  EXPECT_EQ(lookup.body["resolved_config"]["speculative"]["max_draft"], 2);
  EXPECT_EQ(lookup.body["choices"][0]["text"], plain.body["choices"][0]["text"]);
  for (const auto& [bad, param] :
       {std::pair{json{{"speculative", 3}}, "speculative"},
        std::pair{json{{"speculative", {{"mode", "fast"}}}}, "speculative.mode"},
        std::pair{json{{"speculative", {{"max_draft", 9}}}}, "speculative.max_draft"},
        std::pair{json{{"speculative", {{"draft", 2}}}}, "speculative.draft"}}) {
    const Reply r = complete(bad);
    EXPECT_EQ(r.status, 400) << bad.dump();
    EXPECT_EQ(r.body["error"]["param"], param) << r.body.dump();
  }
  // A server without a draft model refuses the mode, per request and as its default.
  Running t({});
  const Reply r = Post(
      t.port(), "/v1/completions",
      json({{"prompt", "Hello"}, {"max_tokens", 2}, {"speculative", {{"mode", "draft_model"}}}})
          .dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "speculative.mode") << r.body.dump();
  EXPECT_THROW(Server(TinyEngine(), o), Error);
}

// POST /v1/audio/transcriptions and /translations (OpenAI's multipart shape): the answer is the
// greedy chat answer to the clip with the endpoint's instruction (the same tokens as a session
// given the file), in every response_format; duration is the clip's length as transformers'
// goldens' script decodes it (tests/goldens/audio/goldens.json); bad forms get a 400 naming the field.
TEST(Server, AudioTranscriptionsAndTranslations) {
  const std::string audio_dir = std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/audio/";
  const std::string clip = audio_dir + "clips/speech.wav";
  std::ifstream in(clip, std::ios::binary);
  const std::string wav((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(wav.empty());
  double seconds = 0;  // the samples the goldens' script decoded (tools/fixtures/audio_goldens.py)
  {
    std::ifstream g(audio_dir + "goldens.json");
    const json goldens = json::parse(g);
    for (const json& f : goldens["features"])
      if (f["clip"] == "speech") seconds = f["samples"].get<double>() / 16000;
  }
  ASSERT_GT(seconds, 1.0);
  Running srv({.slots = 1});
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(120);
  auto post = [&](const char* path, httplib::MultipartFormDataItems items) {
    auto r = c.Post(path, items);
    return r ? std::make_pair(r->status, r->body) : std::make_pair(-1, std::string());
  };
  const httplib::MultipartFormData file{"file", wav, "speech.wav", "audio/wav"};
  // What a session answers for the file on disk with the same instruction, greedily.
  auto expected = [&](bool translate, const std::string& language, const std::string& prompt,
                      int max_tokens) {
    json parts = json::array({{{"type", "audio"}, {"path", clip}},
                              {{"type", "text"},
                               {"text", AudioInstruction(translate, language, prompt)}}});
    GenerateOptions o;
    o.temperature = 0;
    o.max_new_tokens = max_tokens;
    Result r = TinyEngine()->NewSession()->Generate(
        Input::Messages({{{"role", "user"}, {"content", parts}}}), o);
    std::string t = r.text;
    t.erase(0, t.find_first_not_of(" \t\r\n"));
    t.erase(t.find_last_not_of(" \t\r\n") + 1);
    return t;
  };
  const auto out_tokens = [](const json& j) { return j["usage"]["output_tokens"].get<int>(); };
  std::string plain;
  {
    auto [status, body] = post("/v1/audio/transcriptions", {file, {"model", "tiny", "", ""}});
    ASSERT_EQ(status, 200) << body;
    const json j = json::parse(body);
    // The tiny model's random weights never say end-of-turn: the default limit (64 tokens and
    // 16 a second) ends it.
    EXPECT_EQ(out_tokens(j), 64 + static_cast<int>(std::ceil(16 * seconds)));
    plain = expected(false, "", "", out_tokens(j));
    EXPECT_EQ(j["text"], plain);
    EXPECT_EQ(j["usage"]["type"], "tokens");
    EXPECT_GT(j["usage"]["input_tokens"].get<int>(), 41);  // the clip's 41 soft tokens and more
  }
  {
    auto [status, body] = post("/v1/audio/transcriptions",
                               {file, {"response_format", "verbose_json", "", ""},
                                {"language", "de", "", ""}, {"prompt", "Names: Zoe", "", ""},
                                {"max_tokens", "7", "", ""}});
    ASSERT_EQ(status, 200) << body;
    const json j = json::parse(body);
    EXPECT_EQ(out_tokens(j), 7);
    EXPECT_EQ(j["text"], expected(false, "de", "Names: Zoe", 7));
    EXPECT_EQ(j["task"], "transcribe");
    EXPECT_EQ(j["language"], "de");
    EXPECT_NEAR(j["duration"].get<double>(), seconds, 1e-3);
    ASSERT_EQ(j["segments"].size(), 1u);
    EXPECT_NEAR(j["segments"][0]["end"].get<double>(), seconds, 1e-3);
  }
  {
    auto [status, body] = post("/v1/audio/transcriptions", {file, {"response_format", "text", "", ""}});
    ASSERT_EQ(status, 200);
    EXPECT_EQ(body, plain + "\n");
    auto [s2, srt] = post("/v1/audio/transcriptions",
                          {file, {"response_format", "srt", "", ""}, {"max_tokens", "3", "", ""}});
    ASSERT_EQ(s2, 200);
    EXPECT_EQ(srt.rfind("1\n00:00:00,000 --> 00:00:0", 0), 0u) << srt;
    auto [s3, vtt] = post("/v1/audio/transcriptions",
                          {file, {"response_format", "vtt", "", ""}, {"max_tokens", "3", "", ""}});
    ASSERT_EQ(s3, 200);
    EXPECT_EQ(vtt.rfind("WEBVTT\n\n00:00:00.000 --> 00:00:0", 0), 0u) << vtt;
  }
  {
    auto [status, body] = post("/v1/audio/translations",
                               {file, {"response_format", "verbose_json", "", ""},
                                {"max_tokens", "5", "", ""}});
    ASSERT_EQ(status, 200) << body;
    const json j = json::parse(body);
    EXPECT_EQ(j["text"], expected(true, "", "", 5));
    EXPECT_EQ(j["task"], "translate");
  }
  // Bad forms: 400 naming the field, and the server keeps serving.
  auto param = [&](httplib::MultipartFormDataItems items) {
    auto [status, body] = post("/v1/audio/transcriptions", std::move(items));
    const json j = json::parse(body, nullptr, false);
    EXPECT_TRUE(status >= 400 && status < 500) << status << " " << body;
    return j.is_object() && j.contains("error") && j["error"]["param"].is_string()
               ? j["error"]["param"].get<std::string>()
               : std::string("?");
  };
  EXPECT_EQ(param({{"model", "tiny", "", ""}}), "file");
  EXPECT_EQ(param({{"file", "not audio at all", "x.wav", "audio/wav"}}), "file");
  EXPECT_EQ(param({{"file", wav.substr(0, 30), "x.wav", "audio/wav"}}), "file");
  EXPECT_EQ(param({file, {"response_format", "mp4", "", ""}}), "response_format");
  EXPECT_EQ(param({file, {"temperature", "hot", "", ""}}), "temperature");
  EXPECT_EQ(param({file, {"timestamp_granularities[]", "word", "", ""}}),
            "timestamp_granularities[]");
  EXPECT_EQ(param({file, {"stream", "true", "", ""}}), "stream");
  EXPECT_EQ(param({file, {"languag", "en", "", ""}}), "languag");
  EXPECT_EQ(param({file, {"model", "other", "", ""}}), "model");
  EXPECT_EQ(Post(srv.port(), "/v1/audio/transcriptions", "{}").status, 400);
  EXPECT_EQ(param({file, {"max_tokens", "0", "", ""}}), "max_tokens");
  auto [status, body] = post("/v1/audio/transcriptions", {file, {"max_tokens", "2", "", ""}});
  EXPECT_EQ(status, 200) << body;
}

TEST(Server, OfficialOpenAIClient) {
  const fs::path openai = fs::path(GEMMA_SOURCE_DIR) / ".cache/npm-assets/node_modules/openai";
  if (!fs::exists(openai)) GTEST_SKIP() << "npm asset 'openai' missing; run `bash tools/setup.sh`";
  if (std::system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "node not found";
  Running open({.slots = 2});
  Running keyed({.slots = 1, .api_key = "s3cret"});
  const std::string cmd = "node " GEMMA_SOURCE_DIR "/tests/server/openai_client.mjs " + open.url() +
                          "/v1 tiny " + keyed.url() + "/v1 s3cret 2>&1";
  int status = -1;
  const std::string out = RunCommand(cmd, &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find(" passed, 0 failed"), std::string::npos) << out;
  std::printf("%s", out.c_str());
}

// Screenshots are kept in BUILD/test_artifacts/console (CI keeps them as artifacts).
TEST(Server, ConsoleInHeadlessChromium) {
  if (std::system("command -v chromium > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "chromium not installed; run `bash tools/setup.sh`";
  if (!fs::exists(fs::path(GEMMA_SOURCE_DIR) / ".cache/npm-assets/node_modules/ajv"))
    GTEST_SKIP() << "npm assets missing; run `bash tools/setup.sh`";
  Running s({.slots = 2});
  int status = -1;
  const std::string out =
      RunCommand("node --no-warnings --experimental-websocket " GEMMA_SOURCE_DIR
                 "/tests/server/console_browser.mjs " +
                     s.url() + "/ " GEMMA_BINARY_DIR "/test_artifacts/console 2>&1",
                 &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find(" passed, 0 failed"), std::string::npos) << out;
  std::printf("%s", out.c_str());
}

TEST(Server, BadRequestsGetAClear4xxAndTheServerKeepsServing) {
  Running s({.slots = 1, .body_limit = 64 * 1024});
  struct Case {
    std::string name, body;
    int status;
    std::string param;  // expected error.param ("" = not checked)
  };
  auto with = [](json j, const std::string& k, json v) {
    j[k] = std::move(v);
    return j.dump();
  };
  const json ok = Chat("hi", 2);
  // A user message whose content is one (media) part.
  auto with_part = [&](json part) {
    return with(ok, "messages",
                json::array({{{"role", "user"}, {"content", json::array({std::move(part)})}}}));
  };
  const std::vector<Case> cases = {
      {"malformed JSON", "{\"messages\": [", 400, ""},
      // Found by fuzz/fuzz_server.cc: nlohmann's number overflow was a 500.
      {"number beyond double", "{\"messages\": [], \"temperature\": 5e555555}", 400, ""},
      {"not an object", "[1, 2]", 400, ""},
      {"empty body", "", 400, ""},
      {"non-UTF-8 bytes", "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", 400, ""},
      {"messages wrong type", with(ok, "messages", "hello"), 400, "messages"},
      {"temperature wrong type", with(ok, "temperature", "hot"), 400, "temperature"},
      {"top_k negative", with(ok, "top_k", -1), 400, "top_k"},
      {"n zero", with(ok, "n", 0), 400, "n"},
      {"unknown field", with(ok, "temprature", 0.5), 400, "temprature"},
      {"huge max_tokens", with(ok, "max_tokens", 1000000000000LL), 400, "max_tokens"},
      {"logit_bias key", with(ok, "logit_bias", {{"abc", 1}}), 400, "logit_bias.abc"},
      {"top_logprobs without logprobs", with(ok, "top_logprobs", 2), 400, "top_logprobs"},
      {"invalid regex", with(ok, "regex", "a(b"), 400, "regex"},
      {"invalid regex, streamed", with(json::parse(with(ok, "stream", true)), "regex", "a(b"), 400,
       "regex"},
      {"invalid schema",
       with(ok, "response_format",
            {{"type", "json_schema"},
             {"json_schema", {{"name", "x"}, {"schema", {{"type", "strnig"}}}}}}),
       400, "response_format"},
      {"bad tool_choice", with(ok, "tool_choice", "always"), 400, "tool_choice"},
      {"unknown model", with(ok, "model", "gpt-4o"), 404, "model"},
      {"over-long prompt", Chat(std::string(6000, 'a') + " " + std::string(6000, 'b'), 4).dump(),
       400, "messages"},
      {"bad role", with(ok, "messages", json::array({{{"role", "robot"}, {"content", "x"}}})), 400,
       "messages"},
      {"image from a server path", with_part({{"type", "image"}, {"path", "/etc/passwd"}}), 400,
       "messages[0].content[0]"},
      {"image from a file URL",
       with_part({{"type", "image_url"}, {"image_url", {{"url", "file:///etc/passwd"}}}}), 400,
       "messages[0].content[0]"},
      {"audio from a server path", with_part({{"type", "audio"}, {"path", "/etc/passwd"}}), 400,
       "messages[0].content[0]"},
      {"video from a server path (no media folder)",
       with_part({{"type", "video"}, {"path", "/etc/passwd"}}), 400, "messages[0].content[0]"},
      {"audio from a file URL",
       with_part({{"type", "audio_url"}, {"audio_url", {{"url", "file:///etc/passwd"}}}}), 400,
       "messages[0].content[0]"},
      {"image from a remote URL",
       with_part({{"type", "image_url"}, {"image_url", {{"url", "http://example.com/a.png"}}}}),
       400, "messages[0].content[0]"},
      {"body over the limit", with(ok, "pad", std::string(80 * 1024, 'x')), 413, ""},
      // Media bytes that do not decode were a 500.
      {"a truncated PNG",
       with_part({{"type", "image_url"},
                  {"image_url", {{"url", "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAA"}}}}),
       400, "messages"},
      {"audio that is not audio", with_part({{"type", "audio"}, {"bytes", "AAAAAAAAAAAAAAAA"}}),
       400, ""},
      {"image_url's url not a string",
       with_part({{"type", "image_url"}, {"image_url", {{"url", 5}}}}), 400, ""},
  };
  for (const Case& c : cases) {
    const Reply r = Post(s.port(), "/v1/chat/completions", c.body);
    EXPECT_EQ(r.status, c.status) << c.name << ": " << r.body.dump();
    ASSERT_TRUE(r.body.is_object() && r.body.contains("error")) << c.name;
    const json& e = r.body["error"];
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << c.name;
    EXPECT_TRUE(e["type"].is_string()) << c.name;
    if (!c.param.empty()) {
      EXPECT_EQ(e["param"], c.param) << c.name << ": " << e.dump();
    }
  }
  EXPECT_EQ(Post(s.port(), "/v1/completions", json{{"prompt", "x"}, {"echo", true}}.dump()).status,
            400);
  EXPECT_EQ(Post(s.port(), "/detokenize", json{{"tokens", {1, -5}}}.dump()).status, 400);
  EXPECT_EQ(Post(s.port(), "/tokenize", json{{"content", 5}}.dump()).status, 400);
  // A flag of the wrong type was nlohmann's type_error, answered 500 (found while fuzzing).
  EXPECT_EQ(
      Post(s.port(), "/tokenize", json{{"content", "x"}, {"add_special", "yes"}}.dump()).status,
      400);
  EXPECT_EQ(Post(s.port(), "/v1/nothing", "{}").status, 404);
  // A nested field's error names its whole path.
  {
    const Reply r = Post(s.port(), "/v1/chat/completions",
                         with_part({{"type", "image_url"}, {"image_url", {{"url", 5}}}}));
    EXPECT_NE(r.body.dump().find("content[0].image_url.url"), std::string::npos) << r.body.dump();
  }
  // Still serving, and the tokenizer round trip works.
  EXPECT_EQ(Post(s.port(), "/v1/chat/completions", ok.dump()).status, 200);
  const Reply t = Post(s.port(), "/tokenize", json{{"content", "Hello world"}}.dump());
  ASSERT_EQ(t.status, 200);
  const Reply d = Post(s.port(), "/detokenize", json{{"tokens", t.body["tokens"]}}.dump());
  EXPECT_EQ(d.body["content"], "Hello world");
}

// `serve --media-dir DIR`: media parts may name files inside DIR (relative paths, absolute paths
// inside it, file:// URLs) and answer exactly as the same bytes sent as a data URL; paths out of
// it (.., absolute, a symlink pointing out) and missing files are the client's 400, and the
// server keeps serving.
TEST(Server, MediaFolderServesItsFilesAndNothingElse) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("media-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "sub dir");
  const fs::path image = fs::path(GEMMA_SOURCE_DIR) / "tests/goldens/vision/images/gray_40x30.jpg";
  fs::copy_file(image, dir / "cat.jpg");
  fs::copy_file(image, dir / "sub dir" / "cat.jpg");
  fs::create_symlink(fs::path(GEMMA_SOURCE_DIR) / "tests/goldens/vision/images/alpha_120x80.png",
                     dir / "escape.png");
  std::ifstream in(image, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string data_url =
      "data:image/jpeg;base64," +
      media::EncodeBase64(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));

  Running srv({.media_dir = dir.string()});
  auto ask = [&](json part) {
    json body = Chat("", 6);
    body["messages"][0]["content"] =
        json::array({part, {{"type", "text"}, {"text", "What is in the picture?"}}});
    return Post(srv.port(), "/v1/chat/completions", body.dump());
  };
  const Reply by_bytes = ask({{"type", "image_url"}, {"image_url", {{"url", data_url}}}});
  ASSERT_EQ(by_bytes.status, 200) << by_bytes.body.dump();
  const json expected = by_bytes.body["choices"][0]["message"]["content"];
  const json by_path[] = {
      {{"type", "image"}, {"path", "cat.jpg"}},
      {{"type", "image"}, {"path", (dir / "sub dir" / "cat.jpg").string()}},
      {{"type", "image_url"}, {"image_url", {{"url", "file://" + dir.string() + "/sub%20dir/cat.jpg"}}}},
      {{"type", "image"}, {"path", "sub dir/../cat.jpg"}},
  };
  for (const json& part : by_path) {
    const Reply r = ask(part);
    ASSERT_EQ(r.status, 200) << part.dump() << ": " << r.body.dump();
    EXPECT_EQ(r.body["choices"][0]["message"]["content"], expected) << part.dump();
    EXPECT_EQ(r.body["usage"]["prompt_tokens"], by_bytes.body["usage"]["prompt_tokens"]);
  }
  const json refused[] = {
      {{"type", "image"}, {"path", "../" + dir.filename().string() + "-outside.png"}},
      {{"type", "image"}, {"path", image.string()}},
      {{"type", "image"}, {"path", "escape.png"}},
      {{"type", "image"}, {"path", "missing.png"}},
      {{"type", "image"}, {"path", "sub dir"}},
      {{"type", "image"}, {"path", data_url}},
      {{"type", "image_url"}, {"image_url", {{"url", "file://host/cat.jpg"}}}},
      {{"type", "image_url"}, {"image_url", {{"url", "file://" + dir.string() + "/%zz.jpg"}}}},
      {{"type", "video"}, {"path", "/etc/passwd"}},
      {{"type", "audio"}, {"path", "../../etc/passwd"}},
  };
  for (const json& part : refused) {
    const Reply r = ask(part);
    EXPECT_EQ(r.status, 400) << part.dump() << ": " << r.body.dump();
    EXPECT_EQ(r.body["error"]["param"], "messages[0].content[0]") << part.dump();
    EXPECT_EQ(r.body.dump().find(dir.string()), std::string::npos)
        << "an error names the server's folder: " << r.body.dump();
  }
  const Reply again = ask({{"type", "image"}, {"path", "cat.jpg"}});
  EXPECT_EQ(again.status, 200);
  EXPECT_THROW(Server(TinyEngine(), {.media_dir = (dir / "cat.jpg").string()}), Error);
  fs::remove_all(dir);
}

// A video sent as bytes (a data: URL in a "video_url" part, base64 "bytes") needs no media folder
// and gives the answer and prompt the same file gives by path from the folder.
TEST(Server, VideoUploadsNeedNoMediaFolder) {
  if (std::system("ffmpeg -version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no ffmpeg";
  const fs::path video =
      fs::path(GEMMA_SOURCE_DIR) / "tests/goldens/video/videos/d_testsrc_64x48_8fps_2s.mp4";
  std::ifstream in(video, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string b64 =
      media::EncodeBase64(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  auto ask = [](int port, json part) {
    part["max_frames"] = 4;  // (the tiny engine's context holds 1,024 tokens)
    json body = Chat("", 4);
    body["temperature"] = 0;
    body["messages"][0]["content"] =
        json::array({part, {{"type", "text"}, {"text", "What happens?"}}});
    return Post(port, "/v1/chat/completions", body.dump());
  };
  Running plain({});
  const Reply by_url =
      ask(plain.port(),
          {{"type", "video_url"}, {"video_url", {{"url", "data:video/mp4;base64," + b64}}}});
  ASSERT_EQ(by_url.status, 200) << by_url.body.dump();
  const Reply by_bytes = ask(plain.port(), {{"type", "video"}, {"bytes", b64}});
  ASSERT_EQ(by_bytes.status, 200) << by_bytes.body.dump();
  const Reply junk =
      ask(plain.port(),
          {{"type", "video"}, {"bytes", media::EncodeBase64(std::vector<uint8_t>(64, 7))}});
  EXPECT_EQ(junk.status, 400) << junk.body.dump();
  // The same video with a sampling field of the wrong type: a 400 naming the field (they were
  // ignored).
  for (const auto& [key, value] : std::vector<std::pair<std::string, json>>{
           {"fps", "fast"}, {"budget", 70.5}, {"max_frames", -3}, {"video_url", 5}}) {
    json part = {{"type", key == "video_url" ? "video_url" : "video"}, {"bytes", b64}};
    part[key] = value;
    Reply r = ask(plain.port(), part);
    if (key == "max_frames") {  // (ask sets max_frames: send this one without it)
      json body = Chat("", 4);
      body["messages"][0]["content"] = json::array({part});
      r = Post(plain.port(), "/v1/chat/completions", body.dump());
    }
    EXPECT_EQ(r.status, 400) << key << ": " << r.body.dump();
    EXPECT_NE(r.body.dump().find(key), std::string::npos) << r.body.dump();
  }
  const fs::path dir = fs::path(::testing::TempDir()) / ("videos-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(video, dir / "clip.mp4");
  Running folder({.media_dir = dir.string()});
  const Reply by_path = ask(folder.port(), {{"type", "video"}, {"path", "clip.mp4"}});
  ASSERT_EQ(by_path.status, 200) << by_path.body.dump();
  for (const Reply* r : {&by_url, &by_bytes}) {
    EXPECT_EQ(r->body["choices"][0]["message"]["content"],
              by_path.body["choices"][0]["message"]["content"]);
    EXPECT_EQ(r->body["usage"]["prompt_tokens"], by_path.body["usage"]["prompt_tokens"]);
  }
  EXPECT_GT(by_path.body["usage"]["prompt_tokens"].get<int>(), 100);
  fs::remove_all(dir);
}

// The media folder's reader: the state a request's file would be in if a path component were
// swapped for a link after the check (a directory link, a file link), a FIFO (must not block),
// "..", and the size cap are refused with a reason; a plain file inside comes back whole.
TEST(Server, MediaFolderReaderFollowsNoLinks) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("reader-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "a");
  std::ofstream(dir / "a" / "b.bin", std::ios::binary) << "four";
  fs::create_directory_symlink(dir / "a", dir / "link");
  fs::create_symlink(dir / "a" / "b.bin", dir / "a" / "l.bin");
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  const std::vector<uint8_t> got = ReadInsideFolder(dir, "a/b.bin", 1 << 20);
  EXPECT_EQ(std::string(got.begin(), got.end()), "four");
  for (const char* rel : {"link/b.bin", "a/l.bin", "fifo", "a/../a/b.bin", "a", "missing"}) {
    try {
      ReadInsideFolder(dir, rel, 1 << 20);
      ADD_FAILURE() << rel << " was read";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kIo) << rel << ": " << e.what();
    }
  }
  try {
    ReadInsideFolder(dir, "a/b.bin", 3);
    ADD_FAILURE() << "over the cap";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCapacity) << e.what();
  }
  fs::remove_all(dir);
}

TEST(Server, FullQueueIs429WithRetryAfterAndStopEndsTheStream) {
  Running s({.slots = 1, .max_queue = 0});
  json longer = Chat("Write at length", 300);
  longer["ignore_eos"] = true;
  std::atomic<bool> first{false};
  std::thread a([&] { Stream(s.port(), longer, 0, nullptr, &first); });
  for (int i = 0; i < 500 && !first; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(first);
  const Reply busy = Post(s.port(), "/v1/chat/completions", Chat("hi", 2).dump());
  EXPECT_EQ(busy.status, 429);
  EXPECT_EQ(busy.retry_after, "1");
  EXPECT_EQ(busy.body["error"]["type"], "rate_limit_error");
  // Stop() refuses new work and cancels the stream in flight, which ends cleanly.
  const auto t0 = std::chrono::steady_clock::now();
  s.server().Stop();
  a.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(Server, ClientThatHangsUpCancelsItsGeneration) {
  Running s({.slots = 1, .max_queue = 0});
  json longer = Chat("Write at length", 400);
  longer["ignore_eos"] = true;
  const std::string got = Stream(s.port(), longer, 3);
  EXPECT_NE(got.find("data: "), std::string::npos);
  double cancelled = 0;
  for (int i = 0; i < 500 && cancelled < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    cancelled = Metric(s.port(), "gemma_cancelled_total");
  }
  EXPECT_EQ(cancelled, 1);
  // The slot is usable again at once.
  const Reply r = Post(s.port(), "/v1/chat/completions", Chat("hi", 3).dump());
  EXPECT_EQ(r.status, 200) << r.body.dump();
}

TEST(Server, NonStreamingClientThatHangsUpCancelsItsGeneration) {
  Running s({.slots = 1, .max_queue = 0});
  json longer = Chat("Write at length", 960);
  longer["ignore_eos"] = true;
  {
    // Gives up after 100 ms and closes the connection; the generation would take far longer.
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(0, 100000);
    EXPECT_FALSE(c.Post("/v1/chat/completions", longer.dump(), "application/json"));
  }
  const auto t0 = std::chrono::steady_clock::now();
  double cancelled = 0;
  for (int i = 0; i < 500 && cancelled < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    cancelled = Metric(s.port(), "gemma_cancelled_total");
  }
  EXPECT_EQ(cancelled, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  // The slot is usable again, and an answer that is waited for (past several of the server's
  // looks at the connection) is not cancelled.
  json slow = Chat("Write at length", 24);
  slow["ignore_eos"] = true;
  const Reply full = Post(s.port(), "/v1/chat/completions", slow.dump());
  EXPECT_EQ(full.status, 200) << full.body.dump();
  EXPECT_EQ(full.body["usage"]["completion_tokens"], 24);
  EXPECT_EQ(Metric(s.port(), "gemma_cancelled_total"), 1);
}

TEST(Server, StreamInFlightAtShutdownEndsWithAnErrorEventAndDone) {
  auto s = std::make_unique<Running>(ServerOptions{.slots = 1});
  json longer = Chat("Write at length", 400);
  longer["ignore_eos"] = true;
  std::atomic<bool> first{false};
  std::string got;
  std::thread a([&] { got = Stream(s->port(), longer, 0, nullptr, &first); });
  for (int i = 0; i < 500 && !first; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  s.reset();  // Stop() + Run() returns
  a.join();
  EXPECT_NE(got.find("\"cancelled\""), std::string::npos) << got.substr(0, 400);
  EXPECT_NE(got.find("data: [DONE]"), std::string::npos);
}

TEST(Server, BoundedLoadEveryRequestAnsweredOr429NoLeak) {
  ServeProcess s({"--slots", "2", "--queue", "6"});
  ASSERT_GT(s.port(), 0) << s.log();
  constexpr int kClients = 16, kRequests = 200;
  auto one = [&](int i, int* status) {
    switch (i % 4) {
      case 0:
        *status =
            Post(s.port(), "/v1/chat/completions", Chat("Question " + std::to_string(i), 4).dump())
                .status;
        break;
      case 1:
        Stream(s.port(), Chat("Stream " + std::to_string(i % 7), 5), 0, status);
        break;
      case 2: {  // hangs up early
        json j = Chat("Leave " + std::to_string(i), 64);
        j["ignore_eos"] = true;
        Stream(s.port(), j, 2, status);
        break;
      }
      default:
        *status = Post(s.port(), "/v1/completions",
                       json{{"prompt", "Once " + std::to_string(i)}, {"max_tokens", 4}}.dump())
                      .status;
    }
  };
  auto run = [&](int total, std::vector<int>* statuses) {
    std::atomic<int> next{0};
    std::vector<std::thread> ts;
    for (int c = 0; c < kClients; ++c) {
      ts.emplace_back([&] {
        for (int i; (i = next++) < total;) {
          one(i, &(*statuses)[i]);
          // A client that honours Retry-After, scaled down: the tiny model answers in ms.
          if ((*statuses)[i] == 429) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      });
    }
    for (auto& t : ts) t.join();
  };
  // Threads, allocator arenas and the slots' caches reach their steady state first.
  std::vector<int> warm(kRequests, -1);
  run(static_cast<int>(warm.size()), &warm);
  run(static_cast<int>(warm.size()), &warm);
  const size_t before = s.Rss();
  std::vector<int> statuses(kRequests, -1);
  const auto t0 = std::chrono::steady_clock::now();
  run(kRequests, &statuses);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int ok = 0, busy = 0;
  for (int i = 0; i < kRequests; ++i) {
    if (statuses[i] == 200) ++ok;
    if (statuses[i] == 429) ++busy;
    EXPECT_TRUE(statuses[i] == 200 || statuses[i] == 429) << "request " << i << ": " << statuses[i];
  }
  // Every slot comes back once the hung-up generations have seen their cancellation.
  httplib::Client c("127.0.0.1", s.port());
  json h;
  for (int i = 0; i < 500; ++i) {
    h = json::parse(c.Get("/health")->body);
    if (h["slots_idle"] == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(h["slots_idle"], 2);
  EXPECT_EQ(h["queue"], 0);
  // The two slots' decode steps met in batches (batched decode is on by default).
  const std::string metrics = c.Get("/metrics")->body;
  const std::string key = "\ngemma_batched_decode_steps_total ";
  const size_t at = metrics.find(key);
  ASSERT_NE(at, std::string::npos) << metrics;
  EXPECT_GT(std::stoll(metrics.substr(at + key.size())), 0);
  const size_t after = s.Rss();
  std::printf("load: %d requests in %.1f s: %d ok, %d x 429; RSS %.1f -> %.1f MiB\n", kRequests,
              secs, ok, busy, before / 1048576.0, after / 1048576.0);
  // (some answered: on a loaded 2-core machine most of a burst gets 429 while two slots work)
#ifndef GEMMA_SANITIZED
  EXPECT_GT(ok, kRequests / 20);
  EXPECT_LE(static_cast<double>(after), before * 1.05);
#else
  // (a sanitizer's slowdown leaves fewer answered, and its quarantine and shadow memory count in
  // RSS; its leak checker covers what the RSS bound stands for)
  EXPECT_GT(ok, 0);
#endif
  // SIGTERM: a clean stop with status 0.
  const int status = s.Stop();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << s.log();
  EXPECT_NE(s.log().find("stopped"), std::string::npos) << s.log();
}

}  // namespace
}  // namespace gemma::server
