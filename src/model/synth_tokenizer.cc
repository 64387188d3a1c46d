// A tokenizer.json for synthesized checkpoints of any vocabulary size, so that text in and text out
// work on every preset (e2b-qat-mini's 32,768 ids match no published tokenizer).
//
// Layout (deterministic): <pad> <eos> <bos> <unk> at 0-3 as in Gemma; the Gemma 4 special tokens at
// their Gemma 4 ids where they fit (the chat template and the tool-call grammar need exactly
// those); the 256 byte-fallback tokens <0x00>..<0xFF>; every printable ASCII character, alone and
// after the space mark; then pronounceable syllable strings until the vocabulary is full. Merges
// join the space mark to a following letter only, so encoding is mostly per character: the model
// is noise anyway, and Decode(Encode(s)) == s holds for any UTF-8 text through byte fallback.
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_set>
#include <vector>

#include "gemma/error.h"
#include "model/synth.h"
#include "tokenizer/gemma4_vocab.h"

namespace gemma {

std::string SyntheticTokenizerJson(int vocab_size) {
  if (vocab_size < 1024) {
    throw Error(ErrorCode::kInvalidArgument, "synthetic tokenizer: vocabulary of " +
                                                 std::to_string(vocab_size) + " is below 1024");
  }
  const std::string kSpace = "\xE2\x96\x81";  // U+2581, the space mark
  std::vector<std::string> piece(static_cast<size_t>(vocab_size));
  std::vector<bool> special(static_cast<size_t>(vocab_size), false);
  std::unordered_set<std::string> used;
  auto put = [&](int id, const std::string& p, bool is_special) {
    piece[id] = p;
    special[id] = is_special;
    used.insert(p);
  };
  put(0, "<pad>", true);
  put(1, "<eos>", true);
  put(2, "<bos>", true);
  put(3, "<unk>", true);
  for (const SpecialTokenId& t : kGemma4SpecialTokens) {
    if (t.id < vocab_size) put(t.id, std::string(t.text), true);
  }
  int next = 4;
  auto append = [&](const std::string& p) {
    while (next < vocab_size && !piece[next].empty()) ++next;
    if (next >= vocab_size || used.count(p)) return;
    put(next, p, false);
  };
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    append(buf);
  }
  append(kSpace);
  append("\n");
  for (char c = 0x21; c < 0x7F; ++c) append(std::string(1, c));
  std::vector<std::pair<std::string, std::string>> merges;
  for (char c = 0x21; c < 0x7F; ++c) {
    append(kSpace + c);
    merges.push_back({kSpace, std::string(1, c)});
  }
  // Syllable strings: index i written in base 75 with consonant-vowel digits (unique per i).
  static const char* kCons[] = {"b", "d", "f", "g", "k", "l", "m", "n",
                                "p", "r", "s", "t", "v", "z", "ch"};
  static const char* kVow[] = {"a", "e", "i", "o", "u"};
  for (uint64_t i = 0; next < vocab_size; ++i) {
    std::string w;
    uint64_t v = i / 2;
    do {
      w += std::string(kCons[(v % 75) / 5]) + kVow[v % 5];
      v /= 75;
    } while (v > 0);
    append(i % 2 == 0 ? kSpace + w : w);
    while (next < vocab_size && !piece[next].empty()) ++next;
  }
  // Ids no rule filled (only when specials sit above the fill): unused markers, special.
  for (int id = 0; id < vocab_size; ++id) {
    if (piece[id].empty()) put(id, "<unused" + std::to_string(id) + ">", true);
  }

  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  // The pieces are distinct by construction: append without ordered_map's linear key lookup (a
  // 262,144-id vocabulary would take tens of seconds through operator[]).
  auto& entries = vocab.get_ref<nlohmann::ordered_json::object_t&>();
  entries.reserve(static_cast<size_t>(vocab_size));
  for (int id = 0; id < vocab_size; ++id) {
    entries.emplace_back(piece[id], id);
    if (special[id]) {
      added.push_back({{"id", id},
                       {"content", piece[id]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", true}});
    }
  }
  nlohmann::ordered_json merge_list = nlohmann::ordered_json::array();
  for (const auto& [a, b] : merges) merge_list.push_back({a, b});
  nlohmann::ordered_json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}}},
      {"pre_tokenizer", nullptr},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}}}}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merge_list}}}};
  return j.dump();
}

}  // namespace gemma
