#include "tokenizer/gemma4_vocab.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "gemma/error.h"
#include "tokenizer/json_scan.h"

namespace gemma {
namespace {

using tokenizer_internal::AppendJsonString;
using tokenizer_internal::JsonScanner;

[[noreturn]] void FailVariant(std::string_view origin, const std::string& what) {
  throw Error(ErrorCode::kTokenizer, std::string(origin) + ": Gemma 4 variant: " + what);
}

const SpecialTokenId* Gemma4TokenAt(int64_t id) {
  for (const auto& t : kGemma4SpecialTokens) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

std::string RewriteVocab(JsonScanner& sc, std::string_view origin) {
  sc.Expect('{', "model.vocab");
  std::vector<std::string> pieces(kGemma4VocabSize);
  std::vector<uint8_t> seen(kGemma4VocabSize, 0);
  std::unordered_set<std::string_view> new_texts;
  for (const auto& t : kGemma4SpecialTokens) new_texts.insert(t.text);
  bool first = true;
  std::string piece;
  size_t count = 0;
  while (sc.NextMember(&first, "model.vocab")) {
    sc.ReadString(&piece, "model.vocab");
    sc.Expect(':', "model.vocab");
    int64_t id = sc.ReadInt("model.vocab");
    if (id < 0 || id >= kGemma4VocabSize || seen[id]) {
      FailVariant(origin, "model.vocab id " + std::to_string(id) + " out of range or repeated");
    }
    if (new_texts.count(piece)) FailVariant(origin, "model.vocab already contains " + piece);
    seen[id] = 1;
    pieces[id] = std::move(piece);
    ++count;
  }
  if (count != static_cast<size_t>(kGemma4VocabSize)) {
    FailVariant(origin, "model.vocab has " + std::to_string(count) + " entries, expected " +
                     std::to_string(kGemma4VocabSize));
  }
  for (const auto& t : kGemma4SpecialTokens) pieces[t.id] = std::string(t.text);
  std::string out;
  out.reserve(8 << 20);
  out.push_back('{');
  for (int32_t id = 0; id < kGemma4VocabSize; ++id) {
    if (id) out.push_back(',');
    AppendJsonString(pieces[id], &out);
    out.push_back(':');
    out += std::to_string(id);
  }
  out.push_back('}');
  return out;
}

std::string RewriteAddedTokens(std::string_view text, std::string_view origin) {
  nlohmann::json arr;
  try {
    arr = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    FailVariant(origin, std::string("added_tokens: ") + e.what());
  }
  if (!arr.is_array()) FailVariant(origin, "added_tokens is not an array");
  nlohmann::json out = nlohmann::json::array();
  std::vector<bool> present(kGemma4SpecialTokens.size(), false);
  for (auto& t : arr) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer()) {
      FailVariant(origin, "added_tokens entry without an integer id");
    }
    int64_t id = t["id"].get<int64_t>();
    if (id >= kGemma4VocabSize) continue;
    if (const SpecialTokenId* g = Gemma4TokenAt(id)) {
      t["content"] = std::string(g->text);
      t["special"] = true;
      present[g - kGemma4SpecialTokens.data()] = true;
    }
    out.push_back(std::move(t));
  }
  for (size_t i = 0; i < kGemma4SpecialTokens.size(); ++i) {
    if (present[i]) continue;
    out.push_back({{"id", kGemma4SpecialTokens[i].id},
                   {"content", std::string(kGemma4SpecialTokens[i].text)},
                   {"single_word", false},
                   {"lstrip", false},
                   {"rstrip", false},
                   {"normalized", false},
                   {"special", true}});
  }
  std::stable_sort(out.begin(), out.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a["id"].get<int64_t>() < b["id"].get<int64_t>();
  });
  return out.dump();
}

}  // namespace

std::string DeriveGemma4TokenizerJson(std::string_view gemma3_json, std::string_view origin) {
  JsonScanner sc(gemma3_json, origin);
  std::string out;
  out.reserve(gemma3_json.size() + (1 << 20));
  sc.Expect('{', "tokenizer.json");
  out.push_back('{');
  bool first = true;
  bool saw_vocab = false;
  std::string key;
  while (sc.NextMember(&first, "tokenizer.json")) {
    sc.ReadString(&key, "tokenizer.json");
    sc.Expect(':', "tokenizer.json");
    if (out.size() > 1) out.push_back(',');
    AppendJsonString(key, &out);
    out.push_back(':');
    if (key == "added_tokens") {
      out += RewriteAddedTokens(sc.SkipValue("added_tokens"), origin);
    } else if (key == "model") {
      sc.Expect('{', "model");
      out.push_back('{');
      bool mfirst = true;
      std::string mkey;
      while (sc.NextMember(&mfirst, "model")) {
        sc.ReadString(&mkey, "model");
        sc.Expect(':', "model");
        if (out.back() != '{') out.push_back(',');
        AppendJsonString(mkey, &out);
        out.push_back(':');
        if (mkey == "vocab") {
          out += RewriteVocab(sc, origin);
          saw_vocab = true;
        } else {
          out += sc.SkipValue("model." + mkey);
        }
      }
      out.push_back('}');
    } else {
      out += sc.SkipValue(key);
    }
  }
  if (!sc.AtEnd()) sc.Fail("tokenizer.json", "trailing characters");
  if (!saw_vocab) FailVariant(origin, "no model.vocab");
  out.push_back('}');
  return out;
}

}  // namespace gemma
