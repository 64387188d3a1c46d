#include "conformance.h"

#include <cstring>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "core/mapped_file.h"
#include "decode/sampler.h"
#include "decode/sampling_recipe.h"
#include "gemma/engine.h"
#include "gemma/error.h"
#include "media/image.h"
#include "tokenizer/gemma4_vocab.h"
#include "tokenizer/tokenizer.h"

namespace gemma::web {
namespace {

using nlohmann::json;

std::string Base64(const void* data, size_t n) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const uint8_t* p = static_cast<const uint8_t*>(data);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t v = uint32_t{p[i]} << 16 | (i + 1 < n ? uint32_t{p[i + 1]} << 8 : 0) |
                       (i + 2 < n ? uint32_t{p[i + 2]} : 0);
    out += k[v >> 18];
    out += k[(v >> 12) & 63];
    out += i + 1 < n ? k[(v >> 6) & 63] : '=';
    out += i + 2 < n ? k[v & 63] : '=';
  }
  return out;
}

json Tokenize(const json& r) {
  const Tokenizer tok = Tokenizer::FromFile(r.at("tokenizer").get<std::string>());
  const auto special = r.value("special", "match") == "text" ? Tokenizer::SpecialText::kAsText
                                                              : Tokenizer::SpecialText::kMatch;
  json ids = json::array();
  for (const json& t : r.at("texts")) ids.push_back(tok.Encode(t.get<std::string>(), special));
  return {{"ids", ids}};
}

json RenderChat(const json& r) {
  json rendered = json::array();
  for (const json& line : r.at("cases")) {
    // Ordered JSON, as the golden test reads the cases: key order is what Jinja iterates.
    const chat::Json c = chat::Json::parse(line.get<std::string>());
    chat::ChatTemplateOptions o;
    o.add_generation_prompt = c.value("add_generation_prompt", false);
    o.enable_thinking = c.value("enable_thinking", false);
    o.preserve_thinking = c.value("preserve_thinking", false);
    o.bos_token = c.value("bos_token", std::string("<bos>"));
    try {
      rendered.push_back(chat::RenderChatTemplate(c.at("messages"), c.value("tools", chat::Json()), o));
    } catch (const Error& e) {
      rendered.push_back({{"error", ErrorCodeName(e.code())}});
    }
  }
  return {{"rendered", rendered}};
}

json TopJson(const decode::SampleResult& s) {
  json top = json::array();
  for (int j = 0; j < s.num_top; ++j) top.push_back({s.top[j].token, s.top[j].logprob});
  return top;
}

json Sample(const json& r) {
  json results = json::array();
  for (const json& c : r.at("cases")) {
    const std::vector<float> logits = decode::golden::RecipeLogits(c.at("logits"));
    const std::vector<int32_t> ids = c.at("input_ids").get<std::vector<int32_t>>();
    const decode::SamplingOptions options = decode::golden::OptionsFrom(c.at("options"));
    decode::Sampler sampler(options);
    sampler.SetPrompt(ids);
    const auto span = sampler.Process(logits);
    const std::vector<float> out(span.begin(), span.end());
    size_t kept = 0;
    for (float v : out) kept += v != -std::numeric_limits<float>::infinity();
    json one = {{"input_fnv", decode::golden::FloatsFnv(logits)},
                {"out_fnv", decode::golden::FloatsFnv(out)},
                {"n_kept", kept}};
    for (const auto source : {decode::LogprobSource::kRaw, decode::LogprobSource::kFinal}) {
      decode::SamplingOptions lp = options;
      lp.logprobs = true;
      lp.top_logprobs = 5;
      lp.logprob_source = source;
      decode::Sampler ls(lp);
      ls.SetPrompt(ids);
      one[source == decode::LogprobSource::kRaw ? "raw_top" : "final_top"] = TopJson(ls.Sample(logits));
    }
    results.push_back(std::move(one));
  }
  return {{"results", results}};
}

// The request's model on its backend (cpu-ref by default), one thread.
auto LoadEngine(const json& r, int context) {
  EngineOptions eo;
  eo.model_path = r.at("model").get<std::string>();
  eo.backend = r.value("backend", "cpu-ref");
  eo.context_capacity = r.value("context", context);
  eo.threads = 1;
  return Engine::Load(eo);
}

json Model(const json& r) {
  const auto engine = LoadEngine(r, 512);
  const std::vector<int32_t> prompt = r.at("prompt").get<std::vector<int32_t>>();
  GenerateOptions g;
  g.max_new_tokens = r.at("steps").get<int>();
  g.ignore_eos = true;
  g.seed = 0;
  const Result res = engine->NewSession()->Generate(Input::Ids(prompt), g);
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), res.tokens.begin(), res.tokens.end() - (res.tokens.empty() ? 0 : 1));
  const ScoreResult s = engine->NewSession()->Score(all, /*return_logits=*/true);
  return {{"tokens", res.tokens},
          {"vocab", engine->vocab_size()},
          {"positions", all.size()},
          {"logits", Base64(s.logits.data(), s.logits.size() * sizeof(float))}};
}

// Greedy tokens and every position's logits of a prompt with images spliced (tests/goldens/vision's
// prompts: ids with the image placeholders, images as files at their token budgets).
json Vision(const json& r) {
  const auto engine = LoadEngine(r, 1024);
  const std::vector<int32_t> ids = r.at("ids").get<std::vector<int32_t>>();
  Input in = Input::Ids(ids);
  const json& images = r.at("images");
  for (size_t i = 0; i < images.size(); ++i)
    in.images.push_back(
        ImageInput::File(images[i].get<std::string>(), r.at("budgets")[i].get<int>()));
  GenerateOptions g;
  g.max_new_tokens = r.at("steps").get<int>();
  g.ignore_eos = true;
  auto session = engine->NewSession();
  const Result res = session->Generate(in, g);
  std::vector<int32_t> full = ids;
  full.insert(full.end(), res.tokens.begin(), res.tokens.end() - (res.tokens.empty() ? 0 : 1));
  Input all = in;
  all.token_ids = full;
  const ScoreResult s = session->ScoreInput(all, /*return_logits=*/true);
  return {{"tokens", res.tokens},
          {"vocab", engine->vocab_size()},
          {"positions", full.size()},
          {"logits", Base64(s.logits.data(), s.logits.size() * sizeof(float))}};
}

// An image file decoded as the engine decodes it (EXIF orientation applied, alpha on white).
json DecodeImageFile(const json& r) {
  const media::Image img = media::LoadImageFile(r.at("path").get<std::string>());
  return {{"width", img.width},
          {"height", img.height},
          {"rgb", Base64(img.rgb.data(), img.rgb.size())}};
}

json DeriveGemma4(const json& r) {
  const std::string in = r.at("gemma3").get<std::string>();
  const std::string out = DeriveGemma4TokenizerJson(ReadFileToString(in), in);
  const std::string path = r.at("out").get<std::string>();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(out.data(), 1, out.size(), f) != out.size()) {
    if (f) std::fclose(f);
    throw Error(ErrorCode::kIo, "cannot write " + path);
  }
  std::fclose(f);
  return {{"bytes", out.size()}};
}

}  // namespace

std::string Conformance(const std::string& request_json) {
  std::string_view code;
  std::string message;
  try {
    const json request = json::parse(request_json);
    return json{{"ok", RunConformance(request)}}.dump(-1, ' ', false, json::error_handler_t::replace);
  } catch (const Error& e) {
    code = ErrorCodeName(e.code());
    message = e.what();
  } catch (const std::exception& e) {
    code = "invalid_argument";
    message = e.what();
  }
  return json{{"error", {{"code", code}, {"message", message}}}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

json RunConformance(const json& request) {
  const std::string op = request.at("op").get<std::string>();
  if (op == "tokenize") return Tokenize(request);
  if (op == "render_chat") return RenderChat(request);
  if (op == "sample") return Sample(request);
  if (op == "model") return Model(request);
  if (op == "derive_gemma4_tokenizer") return DeriveGemma4(request);
  if (op == "vision") return Vision(request);
  if (op == "decode_image") return DecodeImageFile(request);
  throw Error(ErrorCode::kInvalidArgument, "unknown conformance op '" + op + "'");
}

}  // namespace gemma::web
