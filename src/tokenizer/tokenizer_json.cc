// tokenizer.json loading: the vocab and merges go through the streaming JsonScanner, the small
// configuration members through nlohmann::json. Everything HF would interpret differently from
// what tokenizer.cc implements is rejected here, naming the field.
#include <algorithm>
#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/mapped_file.h"
#include "gemma/error.h"
#include "tokenizer/json_scan.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

namespace gemma {
namespace {

using nlohmann::json;
using tokenizer_internal::DecodeUtf8;
using tokenizer_internal::JsonScanner;

using tokenizer_internal::kSpaceMark;
constexpr int64_t kMaxVocab = 1 << 24;

[[noreturn]] void Fail(std::string_view origin, const std::string& what) {
  throw Error(ErrorCode::kTokenizer, std::string(origin) + ": " + what);
}

json ParseSmall(std::string_view text, std::string_view origin, const std::string& field) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    Fail(origin, field + ": " + e.what());
  }
}

bool IsNullOrEmptyString(const json& j) {
  return j.is_null() || (j.is_string() && j.get<std::string>().empty());
}

bool ValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    uint32_t cp;
    size_t len = DecodeUtf8(p + i, n - i, &cp);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string Quote(std::string_view s) {
  std::string out;
  tokenizer_internal::AppendJsonString(s, &out);
  return out;
}

// The parts of tokenizer.json as found by the top-level scan.
struct Sections {
  std::string_view added_tokens, normalizer, pre_tokenizer, decoder, truncation, padding;
  bool has_model = false;
  bool has_vocab = false;
  bool has_merges = false;
  std::string_view merges;  // raw text, parsed after the vocab
  std::vector<std::pair<std::string, std::string_view>> model_options;  // small members
};

class Loader {
 public:
  Loader(std::string_view text, std::string_view origin)
      : text_(text), origin_(origin), impl_(std::make_shared<Tokenizer::Impl>()) {}

  std::shared_ptr<Tokenizer::Impl> Load() {
    JsonScanner sc(text_, origin_);
    if (sc.Peek() != '{') sc.Fail("tokenizer.json", "top level is not a JSON object");
    sc.Expect('{', "tokenizer.json");
    bool first = true;
    std::string key;
    while (sc.NextMember(&first, "tokenizer.json")) {
      sc.ReadString(&key, "tokenizer.json");
      sc.Expect(':', "tokenizer.json");
      if (key == "model") {
        ScanModel(sc);
      } else if (key == "added_tokens") {
        s_.added_tokens = sc.SkipValue("added_tokens");
      } else if (key == "normalizer") {
        s_.normalizer = sc.SkipValue("normalizer");
      } else if (key == "pre_tokenizer") {
        s_.pre_tokenizer = sc.SkipValue("pre_tokenizer");
      } else if (key == "decoder") {
        s_.decoder = sc.SkipValue("decoder");
      } else if (key == "truncation") {
        s_.truncation = sc.SkipValue("truncation");
      } else if (key == "padding") {
        s_.padding = sc.SkipValue("padding");
      } else if (key == "version" || key == "post_processor") {
        sc.SkipValue(key);  // post_processor only adds <bos> when asked; Encode never does
      } else {
        Fail(origin_, "unsupported top-level field " + Quote(key));
      }
    }
    if (!sc.AtEnd()) sc.Fail("tokenizer.json", "trailing characters after the top-level object");
    if (!s_.has_model) Fail(origin_, "missing field \"model\"");
    if (!s_.has_vocab) Fail(origin_, "missing field \"model.vocab\"");
    if (!s_.has_merges) Fail(origin_, "missing field \"model.merges\"");

    CheckModelOptions();
    if (!merges_parsed_) {
      JsonScanner msc(s_.merges, origin_);
      ParseMerges(msc);
    }
    CheckNullable(s_.truncation, "truncation");
    CheckNullable(s_.padding, "padding");
    CheckNormalizer();
    CheckPreTokenizer();
    CheckDecoder();
    BuildModelTables();
    LoadAddedTokens();
    BuildTokenBytes();
    static std::atomic<uint64_t> next_owner{1};
    impl_->cache_owner = next_owner.fetch_add(1);
    return impl_;
  }

 private:
  void ScanModel(JsonScanner& sc) {
    s_.has_model = true;
    if (sc.Peek() != '{') sc.Fail("model", "expected an object");
    sc.Expect('{', "model");
    bool first = true;
    std::string key;
    while (sc.NextMember(&first, "model")) {
      sc.ReadString(&key, "model");
      sc.Expect(':', "model");
      if (key == "vocab") {
        ParseVocab(sc);
      } else if (key == "merges") {
        if (s_.has_merges) Fail(origin_, "duplicate field \"model.merges\"");
        s_.has_merges = true;
        if (s_.has_vocab) {
          ParseMerges(sc);  // the usual order: parse in place, no second pass
          merges_parsed_ = true;
        } else {
          s_.merges = sc.SkipValue("model.merges");
        }
      } else {
        s_.model_options.emplace_back(key, sc.SkipValue("model." + key));
      }
    }
  }

  void ParseVocab(JsonScanner& sc) {
    constexpr std::string_view kCtx = "model.vocab";
    if (s_.has_vocab) Fail(origin_, "duplicate field \"model.vocab\"");
    s_.has_vocab = true;
    if (sc.Peek() != '{') sc.Fail(kCtx, "expected an object {piece: id}");
    sc.Expect('{', kCtx);
    auto& pieces = impl_->pieces;
    std::vector<uint8_t> seen;
    pieces.reserve(1 << 18);
    seen.reserve(1 << 18);
    bool first = true;
    std::string piece;
    int64_t count = 0;
    int64_t max_id = -1;
    while (sc.NextMember(&first, kCtx)) {
      sc.ReadString(&piece, kCtx);
      sc.Expect(':', kCtx);
      int64_t id = sc.ReadInt(kCtx);
      if (id < 0 || id >= kMaxVocab) {
        Fail(origin_, "model.vocab: id " + std::to_string(id) + " of " + Quote(piece) +
                          " is out of range [0, " + std::to_string(kMaxVocab) + ")");
      }
      // Each further entry takes at least 4 bytes ("":0,), so an id beyond what the rest of the
      // text can fill is out of range for sure; failing now keeps a bogus id from growing memory.
      if (id >= count + static_cast<int64_t>(sc.remaining() / 4) + 1) {
        Fail(origin_, "model.vocab: id " + std::to_string(id) + " of " + Quote(piece) +
                          " is out of range: the vocab cannot have that many entries");
      }
      if (static_cast<size_t>(id) >= pieces.size()) {
        pieces.resize(static_cast<size_t>(id) + 1);
        seen.resize(static_cast<size_t>(id) + 1, 0);
      }
      if (seen[id]) {
        Fail(origin_, "model.vocab: duplicate id " + std::to_string(id) + " (" + Quote(pieces[id]) +
                          " and " + Quote(piece) + ")");
      }
      seen[id] = 1;
      pieces[id] = std::move(piece);
      ++count;
      max_id = std::max(max_id, id);
    }
    if (count == 0) Fail(origin_, "model.vocab is empty");
    if (max_id + 1 != count) {
      // Dense ids are what every real tokenizer.json has; a gap means an id beyond the count.
      Fail(origin_, "model.vocab: id " + std::to_string(max_id) + " of " + Quote(pieces[max_id]) +
                        " is out of range: " + std::to_string(count) + " entries must use ids 0.." +
                        std::to_string(count - 1));
    }
    impl_->model_vocab_size = static_cast<int32_t>(count);
    impl_->vocab.Reserve(static_cast<size_t>(count));
    // Hash everything first so the inserts can prefetch their slots a few entries ahead.
    std::vector<uint64_t> hashes(static_cast<size_t>(count));
    for (int32_t id = 0; id < impl_->model_vocab_size; ++id) {
      const std::string& p = pieces[id];
      if (!ValidUtf8(p)) {
        Fail(origin_, "model.vocab: piece of id " + std::to_string(id) + " is not valid UTF-8");
      }
      hashes[id] = tokenizer_internal::HashBytes(p);
    }
    constexpr int32_t kAhead = 16;
    for (int32_t id = 0; id < impl_->model_vocab_size; ++id) {
      if (id + kAhead < impl_->model_vocab_size) impl_->vocab.Prefetch(hashes[id + kAhead]);
      int32_t prev = impl_->vocab.InsertHashed(pieces[id], hashes[id], id, pieces);
      if (prev >= 0) {
        Fail(origin_, "model.vocab: duplicate piece " + Quote(pieces[id]) + " (ids " +
                          std::to_string(prev) + " and " + std::to_string(id) + ")");
      }
    }
  }

  void ParseMerges(JsonScanner& sc) {
    constexpr std::string_view kCtx = "model.merges";
    if (sc.Peek() != '[') sc.Fail(kCtx, "expected an array");
    sc.Expect('[', kCtx);
    // Real files have about two merges per vocab entry; the table grows if there are more.
    impl_->merges.Reserve(static_cast<size_t>(impl_->model_vocab_size) * 2);
    // Merges are read in batches so that the three vocab probes of each (a, b, a+b) and the merge
    // table insert can be prefetched together: the tables are far bigger than the caches.
    constexpr size_t kBatch = 64;
    struct Item {
      uint32_t a, a_len, b_len;  // offsets into `arena`: a, then b right after it (= a+b)
      uint64_t ha, hb, hj;
      int32_t ia, ib, ij;
    };
    Item items[kBatch];
    std::string arena;
    std::string scratch;
    bool first = true;
    uint32_t rank = 0;
    bool more = true;
    while (more) {
      size_t count = 0;
      arena.clear();
      while (count < kBatch && (more = sc.NextElement(&first, kCtx))) {
        Item& it = items[count++];
        it.a = static_cast<uint32_t>(arena.size());
        char c = sc.Peek();
        if (c == '[') {
          sc.Expect('[', kCtx);
          std::string_view a = sc.ReadStringView(&scratch, kCtx);
          arena.append(a);
          sc.Expect(',', kCtx);
          std::string_view b = sc.ReadStringView(&scratch, kCtx);
          arena.append(b);
          it.a_len = static_cast<uint32_t>(a.size());
          it.b_len = static_cast<uint32_t>(b.size());
          if (sc.Peek() != ']') {
            Fail(origin_,
                 "model.merges[" + std::to_string(rank + count - 1) + "]: expected a pair [a, b]");
          }
          sc.Expect(']', kCtx);
        } else if (c == '"') {
          std::string_view joined = sc.ReadStringView(&scratch, kCtx);
          size_t sp = joined.find(' ');
          if (sp == std::string::npos || joined.find(' ', sp + 1) != std::string::npos) {
            Fail(origin_, "model.merges[" + std::to_string(rank + count - 1) +
                              "]: " + Quote(joined) + " is not two pieces separated by one space");
          }
          arena.append(joined.substr(0, sp));
          arena.append(joined.substr(sp + 1));
          it.a_len = static_cast<uint32_t>(sp);
          it.b_len = static_cast<uint32_t>(joined.size() - sp - 1);
        } else {
          Fail(origin_, "model.merges[" + std::to_string(rank + count - 1) +
                            "]: expected [\"a\", \"b\"] or \"a b\"");
        }
      }
      const auto& vocab = impl_->vocab;
      const auto& pieces = impl_->pieces;
      std::string_view ar(arena);
      for (size_t i = 0; i < count; ++i) {
        Item& it = items[i];
        it.ha = tokenizer_internal::HashBytes(ar.substr(it.a, it.a_len));
        it.hb = tokenizer_internal::HashBytes(ar.substr(it.a + it.a_len, it.b_len));
        it.hj = tokenizer_internal::HashBytes(ar.substr(it.a, it.a_len + it.b_len));
        vocab.Prefetch(it.ha);
        vocab.Prefetch(it.hb);
        vocab.Prefetch(it.hj);
      }
      for (size_t i = 0; i < count; ++i) {
        vocab.PrefetchKey(items[i].ha, pieces);
        vocab.PrefetchKey(items[i].hb, pieces);
        vocab.PrefetchKey(items[i].hj, pieces);
      }
      for (size_t i = 0; i < count; ++i) {
        Item& it = items[i];
        it.ia = vocab.FindHashed(ar.substr(it.a, it.a_len), it.ha, pieces);
        it.ib = vocab.FindHashed(ar.substr(it.a + it.a_len, it.b_len), it.hb, pieces);
        it.ij = vocab.FindHashed(ar.substr(it.a, it.a_len + it.b_len), it.hj, pieces);
        if (it.ia < 0 || it.ib < 0 || it.ij < 0) {
          std::string_view missing = it.ia < 0   ? ar.substr(it.a, it.a_len)
                                     : it.ib < 0 ? ar.substr(it.a + it.a_len, it.b_len)
                                                 : ar.substr(it.a, it.a_len + it.b_len);
          Fail(origin_, "model.merges[" + std::to_string(rank + i) + "]: " + Quote(missing) +
                            " is not in model.vocab");
        }
        impl_->merges.Prefetch(it.ia, it.ib);
      }
      for (size_t i = 0; i < count; ++i) {
        if (rank == UINT32_MAX) Fail(origin_, "model.merges: too many merges");
        impl_->merges.Insert(items[i].ia, items[i].ib, {rank++, items[i].ij});
      }
    }
  }

  json Option(const std::string& name) const {
    for (const auto& [k, v] : s_.model_options) {
      if (k == name) return ParseSmall(v, origin_, "model." + name);
    }
    return nullptr;
  }

  void CheckModelOptions() {
    static const char* kKnown[] = {"type",
                                   "dropout",
                                   "unk_token",
                                   "continuing_subword_prefix",
                                   "end_of_word_suffix",
                                   "fuse_unk",
                                   "byte_fallback",
                                   "ignore_merges"};
    for (const auto& [k, v] : s_.model_options) {
      if (std::find(std::begin(kKnown), std::end(kKnown), k) == std::end(kKnown)) {
        Fail(origin_, "unsupported field " + Quote("model." + k));
      }
    }
    json type = Option("type");
    if (type.is_null()) Fail(origin_, "missing field \"model.type\"");
    if (type != "BPE") {
      Fail(origin_, "model.type " + type.dump() + " is not supported (only \"BPE\")");
    }
    json dropout = Option("dropout");
    if (!dropout.is_null() && !(dropout.is_number() && dropout.get<double>() == 0.0)) {
      Fail(origin_, "model.dropout " + dropout.dump() + " is not supported (only null or 0)");
    }
    for (const char* f : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      json v = Option(f);
      if (!IsNullOrEmptyString(v)) {
        Fail(origin_, std::string("model.") + f + " " + v.dump() + " is not supported");
      }
    }
    auto flag = [&](const char* f) {
      json v = Option(f);
      if (v.is_null()) return false;
      if (!v.is_boolean()) Fail(origin_, std::string("model.") + f + " must be a boolean");
      return v.get<bool>();
    };
    impl_->fuse_unk = flag("fuse_unk");
    impl_->byte_fallback = flag("byte_fallback");
    impl_->ignore_merges = flag("ignore_merges");
    json unk = Option("unk_token");
    if (!unk.is_null()) {
      if (!unk.is_string()) Fail(origin_, "model.unk_token must be a string or null");
      impl_->unk_id = impl_->vocab.Find(unk.get<std::string>(), impl_->pieces);
      if (impl_->unk_id < 0) {
        Fail(origin_, "model.unk_token " + unk.dump() + " is not in model.vocab");
      }
    }
  }

  void CheckNullable(std::string_view text, const std::string& field) {
    if (text.empty()) return;
    json j = ParseSmall(text, origin_, field);
    if (!j.is_null()) Fail(origin_, field + " " + j.dump() + " is not supported (only null)");
  }

  void CheckNormalizer() {
    if (s_.normalizer.empty()) Fail(origin_, "missing field \"normalizer\"");
    json j = ParseSmall(s_.normalizer, origin_, "normalizer");
    json want = {
        {"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", std::string(kSpaceMark)}};
    if (j != want) {
      Fail(origin_, "normalizer " + j.dump() + " is not supported (only " + want.dump() + ")");
    }
  }

  void CheckPreTokenizer() {
    if (s_.pre_tokenizer.empty()) return;
    json j = ParseSmall(s_.pre_tokenizer, origin_, "pre_tokenizer");
    if (j.is_null()) return;
    // The normalizer leaves no ' ' behind, so a Split on " " never splits, whatever its behavior.
    // Comparisons, not j.value(): a typed default throws on a value of another type.
    bool ok = j.is_object() && j.contains("type") && j["type"] == "Split" &&
              j.contains("pattern") && j["pattern"] == json{{"String", " "}} &&
              j.contains("invert") && j["invert"] == false && j.contains("behavior") &&
              j.size() == 4;
    if (!ok) {
      Fail(origin_, "pre_tokenizer " + j.dump() +
                        " is not supported (only null or Split on the string \" \")");
    }
  }

  void CheckDecoder() {
    if (s_.decoder.empty()) Fail(origin_, "missing field \"decoder\"");
    json j = ParseSmall(s_.decoder, origin_, "decoder");
    json want = {{"type", "Sequence"},
                 {"decoders",
                  {{{"type", "Replace"},
                    {"pattern", {{"String", std::string(kSpaceMark)}}},
                    {"content", " "}},
                   {{"type", "ByteFallback"}},
                   {{"type", "Fuse"}}}}};
    if (j != want) {
      Fail(origin_, "decoder " + j.dump() + " is not supported (only " + want.dump() + ")");
    }
  }

  void BuildModelTables() {
    auto& im = *impl_;
    im.char_ids.assign(0x110000, -1);
    im.byte_ids.fill(-1);
    static const char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      char name[7] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>', 0};
      im.byte_ids[b] = im.vocab.Find(std::string_view(name, 6), im.pieces);
    }
    for (int32_t id = 0; id < im.model_vocab_size; ++id) {
      const std::string& p = im.pieces[id];
      const auto* s = reinterpret_cast<const unsigned char*>(p.data());
      const size_t n = p.size();
      uint32_t prev = 0;
      size_t chars = 0;
      for (size_t i = 0; i < n;) {
        uint32_t cp = s[i];
        size_t len = cp < 0x80 ? 1 : DecodeUtf8(s + i, n - i, &cp);
        if (len == 0) len = 1;  // not reached: pieces were checked to be valid UTF-8
        if (chars > 0) {
          if ((prev | cp) < 128) {
            im.ascii_pairs[(prev * 128 + cp) >> 6] |= uint64_t{1} << ((prev * 128 + cp) & 63);
          } else {
            im.pairs.Insert(prev, cp);
          }
        }
        prev = cp;
        ++chars;
        i += len;
      }
      if (chars == 1) im.char_ids[prev] = id;
    }
  }

  void LoadAddedTokens() {
    auto& im = *impl_;
    im.trie.assign(1, {});
    if (s_.added_tokens.empty()) return;
    // Hand-parsed: a DOM parse of the ~6,400 entries costs more than the rest of this function.
    JsonScanner sc(s_.added_tokens, origin_);
    if (sc.Peek() != '[') Fail(origin_, "added_tokens must be an array");
    sc.Expect('[', "added_tokens");
    int64_t max_added = -1;
    std::vector<std::pair<int32_t, bool>> entries;  // id, special
    std::string key, content;
    bool first = true;
    for (size_t i = 0; sc.NextElement(&first, "added_tokens"); ++i) {
      std::string where = "added_tokens[" + std::to_string(i) + "]";
      if (sc.Peek() != '{') Fail(origin_, where + " must be an object");
      sc.Expect('{', where);
      bool has_id = false, has_content = false;
      int64_t id = -1;
      // single_word, lstrip, rstrip, normalized, special; normalized defaults to !special (HF).
      static const char* kFlags[] = {"single_word", "lstrip", "rstrip", "normalized", "special"};
      bool flag[5] = {false, false, false, false, false};
      bool has_normalized = false;
      bool mfirst = true;
      while (sc.NextMember(&mfirst, where)) {
        sc.ReadString(&key, where);
        sc.Expect(':', where);
        if (key == "id") {
          if (sc.Peek() == '"') Fail(origin_, where + ".id missing or not an integer");
          id = sc.ReadInt(where + ".id");
          has_id = true;
        } else if (key == "content") {
          if (sc.Peek() != '"') Fail(origin_, where + ".content missing or not a string");
          sc.ReadString(&content, where + ".content");
          has_content = true;
        } else {
          size_t f = std::find(std::begin(kFlags), std::end(kFlags), key) - std::begin(kFlags);
          if (f == std::size(kFlags)) Fail(origin_, where + ": unsupported field " + Quote(key));
          if (sc.Peek() != 't' && sc.Peek() != 'f') {
            Fail(origin_, where + "." + key + " must be a boolean");
          }
          flag[f] = sc.ReadBool(where);
          if (f == 3) has_normalized = true;
        }
      }
      if (!has_id) Fail(origin_, where + ".id missing or not an integer");
      if (!has_content) Fail(origin_, where + ".content missing or not a string");
      where += " " + Quote(content);
      bool special = flag[4];
      for (size_t f = 0; f < 3; ++f) {
        if (flag[f]) Fail(origin_, where + "." + kFlags[f] + "=true is not supported");
      }
      if (has_normalized ? flag[3] : !special) {
        Fail(origin_, where + ".normalized=true is not supported");
      }
      if (content.empty()) Fail(origin_, where + ": empty content");
      if (!ValidUtf8(content)) Fail(origin_, where + ": content is not valid UTF-8");
      if (im.added_ids.count(content)) Fail(origin_, where + ": duplicate content");
      // The id HF assigns: the vocab id of the content, else the next id after the vocab and
      // the previous added tokens (AddedVocabulary::add_tokens).
      int64_t expected = im.vocab.Find(content, im.pieces);
      if (expected < 0) {
        expected = (max_added < 0 || max_added < im.model_vocab_size) ? im.model_vocab_size
                                                                      : max_added + 1;
      }
      if (id != expected) {
        Fail(origin_, where + ": id " + std::to_string(id) + " differs from the id " +
                          std::to_string(expected) + " that HF assigns");
      }
      max_added = std::max(max_added, id);
      if (id >= im.model_vocab_size) {
        if (static_cast<size_t>(id) >= im.pieces.size()) im.pieces.resize(id + 1);
        im.pieces[id] = content;
      }
      im.added_ids.emplace(content, static_cast<int32_t>(id));
      entries.emplace_back(static_cast<int32_t>(id), special);
      AddToTrie(content, static_cast<int32_t>(id));
    }
    im.flags.assign(im.pieces.size(), 0);
    for (auto [id, special] : entries) {
      im.flags[id] |= Tokenizer::Impl::kFlagAdded;
      if (special) im.flags[id] |= Tokenizer::Impl::kFlagSpecial;
    }
  }

  void AddToTrie(std::string_view content, int32_t id) {
    auto& trie = impl_->trie;
    int32_t node = 0;
    for (char ch : content) {
      uint8_t b = static_cast<uint8_t>(ch);
      auto& kids = trie[node].kids;
      auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t{-1}));
      if (it != kids.end() && it->first == b) {
        node = it->second;
      } else {
        int32_t next = static_cast<int32_t>(trie.size());
        kids.insert(it, {b, next});
        trie.emplace_back();  // invalidates `kids`; not used after this
        node = next;
      }
    }
    trie[node].token = id;
    impl_->trie_first[static_cast<uint8_t>(content[0])] = true;
  }

  void BuildTokenBytes() {
    auto& im = *impl_;
    if (im.flags.size() != im.pieces.size()) im.flags.resize(im.pieces.size(), 0);
    im.bytes_index.assign(im.pieces.size(), -1);
    std::string out;
    for (size_t id = 0; id < im.pieces.size(); ++id) {
      const std::string& p = im.pieces[id];
      auto keep = [&](std::string bytes) {
        im.bytes_index[id] = static_cast<int32_t>(im.changed_bytes.size());
        im.changed_bytes.push_back(std::move(bytes));
      };
      // HF ByteFallback decoder: a 6-byte token "<0x" + XX + ">" where XX parses as a u8 in base
      // 16 (Rust from_str_radix, which also takes "+X") is that byte.
      if (p.size() == 6 && p.compare(0, 3, "<0x") == 0 && p[5] == '>') {
        auto hex = [](char c) {
          return (c >= '0' && c <= '9')   ? c - '0'
                 : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                 : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                          : -1;
        };
        int hi = p[3] == '+' ? 0 : hex(p[3]);
        int lo = hex(p[4]);
        if (hi >= 0 && lo >= 0) {
          keep(std::string(1, static_cast<char>(hi * 16 + lo)));
          continue;
        }
      }
      // Replace decoder: every '▁' becomes ' '.
      size_t pos = p.find(kSpaceMark);
      if (pos == std::string::npos) continue;
      out.clear();
      size_t from = 0;
      for (; pos != std::string::npos; pos = p.find(kSpaceMark, from)) {
        out.append(p, from, pos - from);
        out.push_back(' ');
        from = pos + kSpaceMark.size();
      }
      out.append(p, from);
      keep(out);
    }
  }

  std::string_view text_;
  std::string_view origin_;
  std::shared_ptr<Tokenizer::Impl> impl_;
  Sections s_;
  bool merges_parsed_ = false;
};

}  // namespace

Tokenizer Tokenizer::FromJson(std::string_view json_text, std::string_view origin) {
  Loader loader(json_text, origin);
  return Tokenizer(loader.Load());
}

Tokenizer Tokenizer::FromFile(const std::string& path) {
  MappedFile file(path);
  return FromJson(std::string_view(reinterpret_cast<const char*>(file.data()), file.size()), path);
}

}  // namespace gemma
