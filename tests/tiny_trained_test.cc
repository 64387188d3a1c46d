// The shipped trained model (models/tiny-trained, made by tools/train/train_small.py) against its
// transformers float32 goldens (goldens.json, taken on the GPU machine from the reloaded
// checkpoints), and behaviour checks that need a model that writes English.
//
// QAT and SRQ: the QAT variant rounds activations to int8 at every quantized linear, so a value
// within rounding error of a step boundary rounds one way or the other depending on the
// arithmetic, and each such flip perturbs later layers enough to flip more. transformers itself
// moves by up to 0.36% on the held-out sample between float32 and float64 and between CPU and CUDA
// (goldens_numerics.json, from tools/train/qat_numerics.py; given the same inputs, float32 and
// float64 round only 8 of 3.2M SRQ outputs of a 256-token window differently). So QAT perplexity
// is checked against the reference's own spread, and the QAT weight path exactly, with SRQ off.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "backend/backend.h"
#include "core/mapped_file.h"
#include "gemma/engine.h"
#include "model/model.h"
#include "runtime/backend_factory.h"
#include "runtime/perplexity.h"
#include "tokenizer/tokenizer.h"

namespace gemma {
namespace {

const std::string kDir = std::string(GEMMA_SOURCE_DIR) + "/models/tiny-trained";

std::string VariantDir(const std::string& variant) {
  return variant == "bf16" ? kDir : kDir + "/qat";
}

const nlohmann::json& Goldens() {
  static const nlohmann::json j = nlohmann::json::parse(ReadFileToString(kDir + "/goldens.json"));
  return j;
}

// Transformers' perplexity of the sample in float32 and float64, on CPU and CUDA, and the SRQ-off
// QAT checkpoint's per-window NLLs (tools/train/qat_numerics.py).
const nlohmann::json& NumericsGoldens() {
  static const nlohmann::json j =
      nlohmann::json::parse(ReadFileToString(kDir + "/goldens_numerics.json"));
  return j;
}

// Relative spread (max / min - 1) of transformers' own perplexities of `variant` for a setting
// over its four numerics (float32/float64 x CPU/CUDA).
double ReferenceSpread(const std::string& variant, int context, int stride) {
  const std::string suffix = "/c" + std::to_string(context) + "s" + std::to_string(stride);
  double lo = 1e300, hi = 0;
  int n = 0;
  for (const auto& [key, ppl] : NumericsGoldens()["ppl"].items()) {
    if (!key.starts_with(variant + "/") || !key.ends_with(suffix)) continue;
    lo = std::min(lo, ppl.get<double>());
    hi = std::max(hi, ppl.get<double>());
    ++n;
  }
  EXPECT_EQ(n, 4) << variant << suffix;
  return n ? hi / lo - 1 : 0;
}

std::vector<int32_t> SampleIds() {
  const Tokenizer tok = Tokenizer::FromFile(kDir + "/tokenizer.json");
  return tok.Encode(ReadFileToString(kDir + "/heldout_sample.txt"));
}

struct PplCase {
  std::string variant, backend;
  int context, stride, chunks;  // chunks 0 = the golden's null (all windows)
};

std::string Name(const ::testing::TestParamInfo<PplCase>& p) {
  std::string b = p.param.backend == "cpu-ref" ? "ref" : "fast";
  return p.param.variant + "_" + b + "_c" + std::to_string(p.param.context) + "_s" +
         std::to_string(p.param.stride) + "_k" + std::to_string(p.param.chunks);
}

class TinyTrainedPerplexity : public ::testing::TestWithParam<PplCase> {};

// Our perplexity equals transformers' on the same text and windows within 0.1% relative.
TEST_P(TinyTrainedPerplexity, MatchesTransformers) {
  const PplCase& c = GetParam();
  const std::vector<int32_t> ids = SampleIds();
  ASSERT_EQ(static_cast<int>(ids.size()), Goldens()["heldout_sample_tokens"].get<int>())
      << "the tokenizer no longer encodes the held-out sample as transformers did";
  const nlohmann::json* want = nullptr;
  for (const auto& s : Goldens()[c.variant]["perplexity"]) {
    const int chunks = s["chunks"].is_null() ? 0 : s["chunks"].get<int>();
    if (s["context"] == c.context && s["stride"] == c.stride && chunks == c.chunks) want = &s;
  }
  ASSERT_NE(want, nullptr) << "no golden for this setting";
  auto model = Model::Load(VariantDir(c.variant));
  auto backend = CreateBackend(c.backend, *model, {.capacity = c.context}, 0);
  const PerplexityReport r =
      ComputePerplexity(*backend, model->text().vocab_size, ids,
                        {.context = c.context, .stride = c.stride, .chunks = c.chunks});
  EXPECT_EQ(r.tokens_scored, (*want)["tokens_scored"].get<int>());
  EXPECT_EQ(r.windows.size(), (*want)["window_nll"].size());
  const double ref = (*want)["ppl"].get<double>();
  // bf16: the issue's 0.1%. QAT: the spread of transformers' own results under float32/float64
  // and CPU/CUDA (0.36% at context 256, 0.16% at 128), which is larger than 0.1%.
  const double tol = c.variant == "bf16" ? 1e-3 : ReferenceSpread("qat", c.context, c.stride);
  EXPECT_NEAR(r.ppl / ref - 1, 0.0, tol) << "ours " << r.ppl << " transformers " << ref;
  RecordProperty("ppl", std::to_string(r.ppl));
  RecordProperty("transformers_ppl", std::to_string(ref));
  if (c.variant == "bf16") {
    // Without SRQ the arithmetic differs only in summation order: each window agrees closely.
    for (size_t w = 0; w < r.windows.size(); ++w) {
      EXPECT_NEAR(r.windows[w].nll, (*want)["window_nll"][w].get<double>(), 1e-2) << "window " << w;
    }
  }
}

// The reference backend is slow (~100 tokens/s here): bf16 on the first 4 windows, QAT on the
// whole sample (fewer tokens are below SRQ's noise floor).
INSTANTIATE_TEST_SUITE_P(Fast, TinyTrainedPerplexity,
                         ::testing::Values(PplCase{"bf16", "cpu", 128, 64, 0},
                                           PplCase{"bf16", "cpu", 256, 255, 0},
                                           PplCase{"qat", "cpu", 128, 64, 0},
                                           PplCase{"qat", "cpu", 256, 255, 0}),
                         Name);
INSTANTIATE_TEST_SUITE_P(Reference, TinyTrainedPerplexity,
                         ::testing::Values(PplCase{"bf16", "cpu-ref", 128, 64, 4},
                                           PplCase{"qat", "cpu-ref", 256, 255, 0}),
                         Name);

// A copy of the QAT checkpoint with every SRQ activation scale 0 (the format's uncalibrated case:
// no activation rounding), in a directory removed on destruction.
class NoSrqCheckpoint {
 public:
  NoSrqCheckpoint()
      : dir_(std::filesystem::temp_directory_path() /
             ("gemma_tiny_trained_nosrq_" + std::to_string(getpid()))) {
    namespace fs = std::filesystem;
    fs::create_directories(dir_);
    fs::copy_file(kDir + "/qat/config.json", dir_ / "config.json",
                  fs::copy_options::overwrite_existing);
    std::string bytes = ReadFileToString(kDir + "/qat/model.safetensors");
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
    for (const auto& [name, t] : header.items()) {
      if (!name.ends_with("_activation_scale")) continue;
      const size_t b = t["data_offsets"][0], e = t["data_offsets"][1];
      std::fill(bytes.begin() + 8 + n + b, bytes.begin() + 8 + n + e, '\0');
      ++zeroed_;
    }
    std::ofstream(dir_ / "model.safetensors", std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  ~NoSrqCheckpoint() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir() const { return dir_.string(); }
  int zeroed() const { return zeroed_; }

 private:
  std::filesystem::path dir_;
  int zeroed_ = 0;
};

// Without SRQ the QAT checkpoint's int2/int4/int8 weights, per-(row, layer) PLE scales and untied
// int2 head must give transformers' numbers exactly, as bf16 does (transformers agrees with itself
// to 1e-7 here in float32 and float64, CPU and CUDA): this separates the weight path from SRQ.
TEST(TinyTrainedQatWithoutSrq, MatchesTransformersPerWindow) {
  const NoSrqCheckpoint ckpt;
  ASSERT_EQ(ckpt.zeroed(), NumericsGoldens()["zeroed_scales"].get<int>());
  const std::vector<int32_t> ids = SampleIds();
  const auto& want = NumericsGoldens()["qat_nosrq_window_nll"]["c128s64"];
  auto model = Model::Load(ckpt.dir());
  for (const std::string backend_name : {"cpu", "cpu-ref"}) {
    const int chunks = backend_name == "cpu" ? 2 : 1;  // 191 and 127 tokens: CI time
    auto backend = CreateBackend(backend_name, *model, {.capacity = 128}, 0);
    const PerplexityReport r = ComputePerplexity(*backend, model->text().vocab_size, ids,
                                                 {.context = 128, .stride = 64, .chunks = chunks});
    ASSERT_EQ(r.windows.size(), static_cast<size_t>(chunks));
    double want_sum = 0;
    for (int w = 0; w < chunks; ++w) {
      EXPECT_NEAR(r.windows[w].nll, want[w].get<double>(), 1e-3)
          << backend_name << " window " << w;
      want_sum += want[w].get<double>();
    }
    EXPECT_NEAR(r.nll_sum / want_sum - 1, 0.0, 1e-6) << backend_name;
  }
}

TEST(TinyTrainedPerplexityOptions, BadOptionsAreTypedErrors) {
  auto model = Model::Load(kDir);
  auto backend = CreateBackend("cpu", *model, {.capacity = 64}, 0);
  const int V = model->text().vocab_size;
  const std::vector<int32_t> ids = {300, 301, 302, 303, 304};
  // The error code, or nothing when no gemma::Error was thrown.
  auto code = [&](std::vector<int32_t> t, PerplexityOptions o) -> std::optional<ErrorCode> {
    try {
      ComputePerplexity(*backend, V, t, o);
    } catch (const Error& e) {
      return e.code();
    }
    return std::nullopt;
  };
  EXPECT_EQ(code({}, {.context = 32}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code(ids, {.context = 1}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code(ids, {.context = 32, .stride = 32}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code(ids, {.context = 128}), ErrorCode::kInvalidArgument);  // over the capacity
  EXPECT_EQ(code({1, 2, V}, {.context = 32}), ErrorCode::kInvalidArgument);
  // A window that holds the whole text scores every token once.
  const PerplexityReport r = ComputePerplexity(*backend, V, ids, {.context = 32});
  EXPECT_EQ(r.tokens_scored, 5);
  EXPECT_EQ(r.windows.size(), 1u);
  ASSERT_EQ(r.token_nll.size(), 5u);  // per-token NLLs, in text order, summing to the total
  double sum = 0;
  for (double x : r.token_nll) sum += x;
  EXPECT_NEAR(sum, r.nll_sum, 1e-9);
}

Input PromptInput(const nlohmann::json& p) {
  if (p["kind"] == "text") return Input::Text(p["content"].get<std::string>());
  return Input::Messages(
      nlohmann::json::array({{{"role", "user"}, {"content", p["content"].get<std::string>()}}}));
}

struct GreedyCase {
  std::string variant, backend;
};

class TinyTrainedGreedy : public ::testing::TestWithParam<GreedyCase> {};

// Prompts (5 raw text, 5 chat turns rendered by our template) tokenize to transformers' ids, and
// 32 greedy tokens equal transformers' continuation.
TEST_P(TinyTrainedGreedy, MatchesTransformers) {
  const GreedyCase& c = GetParam();
  auto engine = Engine::Load({.model_path = VariantDir(c.variant),
                              .tokenizer_path = {},
                              .backend = c.backend,
                              .context_capacity = 256});
  const nlohmann::json& g = Goldens();
  const int n_new = g["greedy_new_tokens"].get<int>();
  int identical = 0;
  for (size_t i = 0; i < g["prompts"].size(); ++i) {
    const nlohmann::json& p = g["prompts"][i];
    const Input in = PromptInput(p);
    ASSERT_EQ(engine->PromptTokens(in), p["ids"].get<std::vector<int32_t>>()) << p["content"];
    GenerateOptions o;
    o.max_new_tokens = n_new;
    o.ignore_eos = true;
    const Result r = engine->NewSession()->Generate(in, o);
    const auto want = g[c.variant]["greedy"][i]["ids"].get<std::vector<int32_t>>();
    if (r.tokens == want) {
      ++identical;
    } else if (c.variant == "bf16") {
      ADD_FAILURE() << "prompt " << i << " " << p["content"] << ": got '" << r.raw_text
                    << "' want '" << g[c.variant]["greedy"][i]["text"].get<std::string>() << "'";
    } else {
      RecordProperty("qat_diverged_prompt", static_cast<int>(i));
    }
  }
  RecordProperty("identical", identical);
  // QAT: SRQ rounding flips (header comment) may send one continuation elsewhere.
  EXPECT_GE(identical, c.variant == "bf16" ? 10 : 9);
}

INSTANTIATE_TEST_SUITE_P(All, TinyTrainedGreedy,
                         ::testing::Values(GreedyCase{"bf16", "cpu"}, GreedyCase{"bf16", "cpu-ref"},
                                           GreedyCase{"qat", "cpu"}, GreedyCase{"qat", "cpu-ref"}),
                         [](const auto& p) {
                           return p.param.variant + "_" +
                                  (p.param.backend == "cpu-ref" ? "ref" : "fast");
                         });

// ---- behaviour on real language (bf16, fast CPU backend) -------------------------------------

std::shared_ptr<Engine> Bf16() {
  static std::shared_ptr<Engine> e = Engine::Load(
      {.model_path = kDir, .tokenizer_path = {}, .backend = "cpu", .context_capacity = 512});
  return e;
}

Input Chat(const std::string& text) {
  return Input::Messages(nlohmann::json::array({{{"role", "user"}, {"content", text}}}));
}

TEST(TinyTrainedBehaviour, RegexConstrainedDate) {
  GenerateOptions o;
  o.max_new_tokens = 16;
  o.constraint.kind = OutputConstraint::Kind::kRegex;
  o.constraint.regex = "(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])";
  const Result r = Bf16()->NewSession()->Generate(Chat("When was Debian 12 released?"), o);
  EXPECT_TRUE(std::regex_match(r.text, std::regex(o.constraint.regex))) << r.text;
  EXPECT_EQ(r.stop_reason, StopReason::kConstraintComplete) << StopReasonName(r.stop_reason);
}

TEST(TinyTrainedBehaviour, JsonSchemaAnswerParsesAndSaysSomething) {
  GenerateOptions o;
  o.max_new_tokens = 160;
  o.constraint.kind = OutputConstraint::Kind::kJsonSchema;
  o.constraint.schema_json = R"({"type": "object", "properties": {
      "name": {"type": "string", "minLength": 2, "maxLength": 40},
      "summary": {"type": "string", "minLength": 10, "maxLength": 300}},
    "required": ["name", "summary"]})";
  o.constraint.whitespace = "compact";
  const Result r = Bf16()->NewSession()->Generate(
      Chat("Describe the kernel as JSON with a name and a summary."), o);
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.text)) << r.text;
  ASSERT_TRUE(j.is_object()) << r.text;
  const std::string summary = j.value("summary", std::string());
  // Non-trivial: several words, mostly letters.
  int words = 0, letters = 0;
  bool in_word = false;
  for (char ch : summary) {
    const bool a = std::isalpha(static_cast<unsigned char>(ch));
    letters += a;
    if (a && !in_word) ++words;
    in_word = a;
  }
  EXPECT_GE(words, 3) << r.text;
  EXPECT_GT(letters, static_cast<int>(summary.size()) / 2) << r.text;
  EXPECT_FALSE(j.value("name", std::string()).empty()) << r.text;
}

// The stop string cuts the text exactly where transformers' greedy continuation has it.
TEST(TinyTrainedBehaviour, StopStringTriggers) {
  const nlohmann::json& g = Goldens();
  const std::string hf_text = g["bf16"]["greedy"][5]["text"];  // "Hello! Who are you?"
  ASSERT_EQ(g["prompts"][5]["content"], "Hello! Who are you?");
  const std::string stop = "Debian";
  const size_t at = hf_text.find(stop);
  ASSERT_NE(at, std::string::npos) << hf_text;
  GenerateOptions o;
  o.max_new_tokens = 32;
  o.stop_strings = {stop};
  const Result r = Bf16()->NewSession()->Generate(Chat("Hello! Who are you?"), o);
  EXPECT_EQ(r.stop_reason, StopReason::kStopString);
  EXPECT_EQ(r.text, hf_text.substr(0, at));
}

// The tool-call grammar runs on this vocabulary (its <|tool_call>, <|"|> ... ids are Gemma 4's)
// and the engine parses what it forced; the model never saw tools, so only the shape is checked.
TEST(TinyTrainedBehaviour, ForcedToolCallParses) {
  Input in = Chat("What is the weather in Paris?");
  in.tools = nlohmann::json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Current weather for a city", "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}}}])");
  GenerateOptions o;
  o.max_new_tokens = 48;
  o.constraint.kind = OutputConstraint::Kind::kToolCalls;
  o.constraint.require_tool_call = true;
  const Result r = Bf16()->NewSession()->Generate(in, o);
  ASSERT_EQ(r.tool_calls.size(), 1u) << r.raw_text;
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_TRUE(r.tool_calls[0].arguments["city"].is_string()) << r.raw_text;
  EXPECT_TRUE(r.parse_errors.empty()) << r.raw_text;
}

std::vector<int32_t> Sample(uint64_t seed, double top_p = 0.95, double min_p = 0.0) {
  GenerateOptions o;
  o.max_new_tokens = 40;
  o.temperature = 0.9;
  o.top_p = top_p;
  o.min_p = min_p;
  o.seed = seed;
  o.ignore_eos = true;
  return Bf16()->NewSession()->Generate(Input::Text("The Debian project"), o).tokens;
}

TEST(TinyTrainedBehaviour, SeededSamplingIsReproducible) {
  const auto a = Sample(7), b = Sample(7), c = Sample(8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

int RepeatedTrigrams(const std::vector<int32_t>& t) {
  std::set<std::vector<int32_t>> seen;
  int repeats = 0;
  for (size_t i = 0; i + 3 <= t.size(); ++i) {
    if (!seen.insert({t[i], t[i + 1], t[i + 2]}).second) ++repeats;
  }
  return repeats;
}

// Greedy text from this model loops ("a package manager that is not a package ..."); the
// transformers-style repetition penalty must reduce repeated token trigrams.
TEST(TinyTrainedBehaviour, RepetitionPenaltyReducesRepeatedTrigrams) {
  GenerateOptions o;
  o.max_new_tokens = 64;
  o.ignore_eos = true;
  o.penalize_prompt = false;
  const Result plain = Bf16()->NewSession()->Generate(Input::Text("A package is"), o);
  o.repetition_penalty = 1.3;
  const Result penalized = Bf16()->NewSession()->Generate(Input::Text("A package is"), o);
  const int a = RepeatedTrigrams(plain.tokens), b = RepeatedTrigrams(penalized.tokens);
  RecordProperty("repeated_trigrams_plain", a);
  RecordProperty("repeated_trigrams_penalized", b);
  EXPECT_GT(a, 5) << plain.text;
  EXPECT_LT(b, a / 2) << penalized.text;
}

// min-p: a token is kept only if p >= min_p * p_max. With min_p near 1 only the argmax survives,
// so sampling at any seed reproduces greedy; with min_p = 0 the seeds disagree.
TEST(TinyTrainedBehaviour, MinPNearOneIsGreedy) {
  GenerateOptions o;
  o.max_new_tokens = 40;
  o.ignore_eos = true;
  const auto greedy = Bf16()->NewSession()->Generate(Input::Text("The Debian project"), o).tokens;
  EXPECT_EQ(Sample(1, 1.0, 0.999), greedy);
  EXPECT_EQ(Sample(2, 1.0, 0.999), greedy);
  EXPECT_NE(Sample(1, 1.0, 0.0), Sample(2, 1.0, 0.0));
}

// Top-p: a tiny nucleus keeps only the most likely token, so it also reproduces greedy.
TEST(TinyTrainedBehaviour, TinyTopPIsGreedy) {
  GenerateOptions o;
  o.max_new_tokens = 40;
  o.ignore_eos = true;
  const auto greedy = Bf16()->NewSession()->Generate(Input::Text("The Debian project"), o).tokens;
  EXPECT_EQ(Sample(3, 1e-6), greedy);
}

}  // namespace
}  // namespace gemma
