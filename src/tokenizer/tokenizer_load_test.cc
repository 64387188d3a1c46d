// Loader validation and BPE semantics on small hand-written tokenizer.json files. Expected ids come
// from the BPE definition HF implements (and HF's own unit-test cases), not from our output.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gemma/error.h"
#include "tokenizer/tokenizer.h"

namespace gemma {
namespace {

struct Parts {
  std::string vocab =
      R"({"<unk>":0,"<bos>":1,"a":2,"b":3,"c":4,"ab":5,"bc":6,"▁":7,"▁a":8,"<0x63>":9})";
  std::string merges = R"([["a","b"],["b","c"],["▁","a"]])";
  std::string model_options =
      R"("type":"BPE","dropout":null,"unk_token":"<unk>","continuing_subword_prefix":null,)"
      R"("end_of_word_suffix":null,"fuse_unk":true,"byte_fallback":true,"ignore_merges":false)";
  std::string added =
      R"([{"id":1,"content":"<bos>","single_word":false,"lstrip":false,"rstrip":false,)"
      R"("normalized":false,"special":true}])";
  std::string normalizer = R"({"type":"Replace","pattern":{"String":" "},"content":"▁"})";
  std::string pre_tokenizer =
      R"({"type":"Split","pattern":{"String":" "},"behavior":"MergedWithPrevious","invert":false})";
  std::string decoder =
      R"({"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},)"
      R"({"type":"ByteFallback"},{"type":"Fuse"}]})";
  std::string truncation = "null";

  std::string Json() const {
    return R"({"version":"1.0","truncation":)" + truncation + R"(,"padding":null,"added_tokens":)" +
           added + R"(,"normalizer":)" + normalizer + R"(,"pre_tokenizer":)" + pre_tokenizer +
           R"(,"post_processor":null,"decoder":)" + decoder + R"(,"model":{)" + model_options +
           R"(,"vocab":)" + vocab + R"(,"merges":)" + merges + "}}";
  }
};

void ExpectError(const std::string& json, const std::string& needle) {
  try {
    Tokenizer::FromJson(json, "test.json");
    ADD_FAILURE() << "no error; expected one mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTokenizer) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << needle;
    EXPECT_NE(std::string(e.what()).find("test.json"), std::string::npos) << e.what();
  }
}

TEST(TokenizerLoad, ValidBaselineLoads) {
  Tokenizer tok = Tokenizer::FromJson(Parts().Json());
  EXPECT_EQ(tok.vocab_size(), 10);
  EXPECT_TRUE(tok.IsSpecial(1));
  EXPECT_FALSE(tok.IsSpecial(2));
  EXPECT_EQ(tok.TokenId("ab"), 5);
  EXPECT_EQ(tok.TokenId("zz"), std::nullopt);
  EXPECT_EQ(tok.TokenBytes(8), " a");
  EXPECT_EQ(tok.TokenBytes(9), "c");
  EXPECT_EQ(tok.Piece(8), "▁a");
}

TEST(TokenizerLoad, MergesBeforeVocabAndStringMerges) {
  Parts p;
  std::string json = p.Json();
  // Move "merges" ahead of "vocab" and use the "a b" string form.
  json.replace(json.find(R"(,"vocab":)"), std::string::npos,
               R"(,"merges":["a b","b c","▁ a"],"vocab":)" + p.vocab + "}}");
  Tokenizer tok = Tokenizer::FromJson(json);
  EXPECT_EQ(tok.Encode("abc"), (std::vector<int32_t>{5, 4}));
  EXPECT_EQ(tok.Encode(" a"), (std::vector<int32_t>{8}));
}

TEST(TokenizerLoad, TruncatedJson) {
  std::string json = Parts().Json();
  for (size_t cut : {size_t{0}, size_t{1}, json.size() / 3, json.size() / 2, json.size() - 1}) {
    ExpectError(json.substr(0, cut), "test.json");
  }
}

TEST(TokenizerLoad, TruncatedInsideVocab) {
  std::string json = Parts().Json();
  ExpectError(json.substr(0, json.find("\"ab\"") + 2), "model.vocab");
}

TEST(TokenizerLoad, NotAnObject) { ExpectError("[1,2,3]", "not a JSON object"); }

TEST(TokenizerLoad, TrailingGarbage) { ExpectError(Parts().Json() + " x", "trailing"); }

TEST(TokenizerLoad, MissingModel) {
  Parts p;
  std::string json = p.Json();
  json = json.substr(0, json.find(R"(,"model":)")) + "}";
  ExpectError(json, "missing field \"model\"");
}

TEST(TokenizerLoad, MissingVocab) {
  Parts p;
  p.vocab = "{}";
  std::string json = p.Json();
  json.replace(json.find(R"(,"vocab":{})"), 11, "");
  ExpectError(json, "missing field \"model.vocab\"");
}

TEST(TokenizerLoad, UnknownModelType) {
  Parts p;
  p.model_options.replace(p.model_options.find("\"BPE\""), 5, "\"WordPiece\"");
  ExpectError(p.Json(), "model.type \"WordPiece\"");
}

TEST(TokenizerLoad, MissingModelType) {
  Parts p;
  p.model_options.replace(p.model_options.find("\"type\":\"BPE\","), 13, "");
  ExpectError(p.Json(), "model.type");
}

TEST(TokenizerLoad, MergeTokenNotInVocab) {
  Parts p;
  p.merges = R"([["a","b"],["a","zz"]])";
  ExpectError(p.Json(), "model.merges[1]: \"zz\" is not in model.vocab");
}

TEST(TokenizerLoad, MergeResultNotInVocab) {
  Parts p;
  p.merges = R"([["c","a"]])";
  ExpectError(p.Json(), "model.merges[0]: \"ca\"");
}

TEST(TokenizerLoad, MalformedMergeString) {
  Parts p;
  p.merges = R"(["a b","abc"])";
  ExpectError(p.Json(), "model.merges[1]");
}

TEST(TokenizerLoad, MergeTripleRejected) {
  Parts p;
  p.merges = R"([["a","b","c"]])";
  ExpectError(p.Json(), "model.merges[0]: expected a pair");
}

TEST(TokenizerLoad, MergeNotStringOrPair) {
  Parts p;
  p.merges = R"([12])";
  ExpectError(p.Json(), "model.merges[0]");
}

TEST(TokenizerLoad, IdOutOfRange) {
  Parts p;
  p.vocab = R"({"<unk>":0,"<bos>":1,"a":2,"b":3,"c":4,"ab":5,"bc":6,"▁":7,"▁a":8,"<0x63>":99})";
  ExpectError(p.Json(), "model.vocab: id 99 of \"<0x63>\" is out of range");
}

TEST(TokenizerLoad, HugeIdFailsWithoutAllocating) {
  Parts p;
  p.vocab = R"({"<unk>":0,"<bos>":16000000,"a":2})";
  ExpectError(p.Json(), "model.vocab: id 16000000");
}

TEST(TokenizerLoad, RandomCorruptionsGiveTypedErrors) {
  // Flip, delete or insert bytes of a valid file: loading either succeeds or throws
  // gemma::Error(kTokenizer); nothing else escapes and nothing crashes.
  const std::string base = Parts().Json();
  std::mt19937 rng(12345);
  int errors = 0;
  for (int n = 0; n < 3000; ++n) {
    std::string json = base;
    for (int k = 0, edits = 1 + rng() % 3; k < edits; ++k) {
      size_t at = rng() % json.size();
      switch (rng() % 3) {
        case 0:
          json[at] = static_cast<char>(rng() % 256);
          break;
        case 1:
          json.erase(at, 1);
          break;
        default:
          json.insert(at, 1, "{}[]\",:0a\x80"[rng() % 11]);
      }
    }
    try {
      Tokenizer tok = Tokenizer::FromJson(json, "fuzz.json");
      tok.Encode("a b <bos> c\xff");
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kTokenizer) << e.what();
      ++errors;
    }
  }
  EXPECT_GT(errors, 1000);
}

TEST(TokenizerLoad, NegativeId) {
  Parts p;
  p.vocab = R"({"<unk>":0,"<bos>":1,"a":-2})";
  ExpectError(p.Json(), "model.vocab: id -2");
}

TEST(TokenizerLoad, NonIntegerId) {
  Parts p;
  p.vocab = R"({"<unk>":0,"<bos>":1.5})";
  ExpectError(p.Json(), "model.vocab");
}

TEST(TokenizerLoad, DuplicateIds) {
  Parts p;
  p.vocab = R"({"<unk>":0,"<bos>":1,"a":2,"b":2})";
  ExpectError(p.Json(), "model.vocab: duplicate id 2");
}

TEST(TokenizerLoad, DuplicatePieces) {
  Parts p;
  p.vocab = R"({"<unk>":0,"<bos>":1,"a":2,"a":3})";
  ExpectError(p.Json(), "model.vocab: duplicate piece \"a\"");
}

TEST(TokenizerLoad, UnkTokenNotInVocab) {
  Parts p;
  p.model_options.replace(p.model_options.find("\"<unk>\""), 7, "\"<nope>\"");
  ExpectError(p.Json(), "model.unk_token");
}

TEST(TokenizerLoad, DropoutRejected) {
  Parts p;
  p.model_options.replace(p.model_options.find("\"dropout\":null"), 14, "\"dropout\":0.1");
  ExpectError(p.Json(), "model.dropout");
}

TEST(TokenizerLoad, SubwordPrefixRejected) {
  Parts p;
  p.model_options.replace(p.model_options.find("\"continuing_subword_prefix\":null"), 32,
                          "\"continuing_subword_prefix\":\"##\"");
  ExpectError(p.Json(), "model.continuing_subword_prefix");
}

TEST(TokenizerLoad, UnknownModelFieldRejected) {
  Parts p;
  p.model_options += R"(,"vocab_extra":1)";
  ExpectError(p.Json(), "model.vocab_extra");
}

TEST(TokenizerLoad, UnsupportedNormalizer) {
  Parts p;
  p.normalizer = R"({"type":"NFKC"})";
  ExpectError(p.Json(), "normalizer");
}

TEST(TokenizerLoad, UnsupportedPreTokenizer) {
  Parts p;
  p.pre_tokenizer = R"({"type":"ByteLevel","add_prefix_space":false})";
  ExpectError(p.Json(), "pre_tokenizer");
}

// Found by the tokenizer fuzz target: a non-string "type" or non-bool "invert" threw nlohmann's
// type_error from json::value() instead of a kTokenizer error.
TEST(TokenizerLoad, PreTokenizerFieldsOfTheWrongTypeAreRejected) {
  Parts p;
  p.pre_tokenizer =
      R"({"type":5,"pattern":{"String":" "},"behavior":"MergedWithPrevious","invert":false})";
  ExpectError(p.Json(), "pre_tokenizer");
  p.pre_tokenizer =
      R"({"type":"Split","pattern":{"String":" "},"behavior":"MergedWithPrevious","invert":0})";
  ExpectError(p.Json(), "pre_tokenizer");
}

TEST(TokenizerLoad, UnsupportedDecoder) {
  Parts p;
  p.decoder = R"({"type":"ByteLevel"})";
  ExpectError(p.Json(), "decoder");
}

TEST(TokenizerLoad, TruncationRejected) {
  Parts p;
  p.truncation = R"({"max_length":5})";
  ExpectError(p.Json(), "truncation");
}

TEST(TokenizerLoad, AddedTokenIdMismatch) {
  Parts p;
  p.added = R"([{"id":3,"content":"<bos>","special":true,"normalized":false}])";
  ExpectError(p.Json(), "added_tokens[0] \"<bos>\": id 3 differs from the id 1");
}

TEST(TokenizerLoad, AddedTokenLstripRejected) {
  Parts p;
  p.added = R"([{"id":1,"content":"<bos>","special":true,"normalized":false,"lstrip":true}])";
  ExpectError(p.Json(), "added_tokens[0] \"<bos>\".lstrip");
}

TEST(TokenizerLoad, AddedTokenNormalizedRejected) {
  Parts p;
  p.added = R"([{"id":1,"content":"<bos>","special":false,"normalized":true}])";
  ExpectError(p.Json(), "normalized");
}

TEST(TokenizerLoad, AddedTokenBeyondVocabGetsNextId) {
  Parts p;
  p.added = R"([{"id":10,"content":"<x>","special":true,"normalized":false},)"
            R"({"id":11,"content":"<y>","special":false,"normalized":false}])";
  Tokenizer tok = Tokenizer::FromJson(p.Json());
  EXPECT_EQ(tok.vocab_size(), 12);
  EXPECT_EQ(tok.Piece(11), "<y>");
  EXPECT_TRUE(tok.IsSpecial(10));
  EXPECT_FALSE(tok.IsSpecial(11));
  EXPECT_TRUE(tok.IsAdded(11));
  EXPECT_EQ(tok.Encode("a<y>b<x>"), (std::vector<int32_t>{2, 11, 3, 10}));
}

TEST(TokenizerLoad, UnknownTopLevelField) {
  std::string json = Parts().Json();
  json.insert(1, R"("extra":{},)");
  ExpectError(json, "\"extra\"");
}

TEST(TokenizerLoad, BadStringEscape) {
  Parts p;
  p.vocab = R"({"<unk>":0,"<bos>":1,"a\q":2})";
  ExpectError(p.Json(), "bad escape");
}

TEST(TokenizerLoad, MissingFileIsIoError) {
  try {
    Tokenizer::FromFile("/nonexistent/dir/tokenizer.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/tokenizer.json"), std::string::npos);
  }
}

// --- BPE semantics on tiny vocabularies ---

Tokenizer Build(const std::string& vocab, const std::string& merges, bool fuse_unk = true,
                bool byte_fallback = false) {
  Parts p;
  p.vocab = vocab;
  p.merges = merges;
  p.added = "[]";
  p.model_options = R"("type":"BPE","unk_token":"<unk>","fuse_unk":)" +
                    std::string(fuse_unk ? "true" : "false") + R"(,"byte_fallback":)" +
                    (byte_fallback ? "true" : "false");
  return Tokenizer::FromJson(p.Json());
}

// HF tokenizers' test_tokenize_with_and_without_dropout case.
TEST(TokenizerBpe, HfUnrelatedExample) {
  Tokenizer tok =
      Build(R"({"<unk>":16,"u":0,"n":1,"r":2,"e":3,"l":4,"a":5,"t":6,"d":7,"re":8,"at":9,"ed":10,)"
            R"("un":11,"ated":12,"rel":13,"related":14,"unrelated":15})",
            R"([["r","e"],["a","t"],["e","d"],["u","n"],["at","ed"],["re","l"],["rel","ated"],)"
            R"(["un","related"]])");
  EXPECT_EQ(tok.Encode("unrelated"), (std::vector<int32_t>{15}));
  EXPECT_EQ(tok.Encode("unrelat"), (std::vector<int32_t>{11, 13, 9}));
}

// HF tokenizers' test_unk_get_fused / test_unk_not_fused cases.
TEST(TokenizerBpe, HfUnkFusion) {
  const std::string vocab = R"({"<unk>":0,"a":1,"b":2})";
  Tokenizer fused = Build(vocab, "[]", /*fuse_unk=*/true);
  EXPECT_EQ(fused.Encode("c"), (std::vector<int32_t>{0}));
  EXPECT_EQ(fused.Encode("cc"), (std::vector<int32_t>{0}));
  EXPECT_EQ(fused.Encode("accb"), (std::vector<int32_t>{1, 0, 2}));
  Tokenizer unfused = Build(vocab, "[]", /*fuse_unk=*/false);
  EXPECT_EQ(unfused.Encode("cc"), (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(unfused.Encode("accb"), (std::vector<int32_t>{1, 0, 0, 2}));
}

TEST(TokenizerBpe, LowestRankMergesFirst) {
  // (b,c) has rank 0, so "abc" -> a + bc, although (a,b) is leftmost.
  Tokenizer tok =
      Build(R"({"<unk>":0,"a":1,"b":2,"c":3,"ab":4,"bc":5})", R"([["b","c"],["a","b"]])");
  EXPECT_EQ(tok.Encode("abc"), (std::vector<int32_t>{1, 5}));
  EXPECT_EQ(tok.Encode("abab"), (std::vector<int32_t>{4, 4}));
}

TEST(TokenizerBpe, EqualRanksMergeLeftmostFirst) {
  Tokenizer tok = Build(R"({"<unk>":0,"a":1,"aa":2})", R"([["a","a"]])");
  EXPECT_EQ(tok.Encode("aaa"), (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(tok.Encode("aaaaa"), (std::vector<int32_t>{2, 2, 1}));
}

TEST(TokenizerBpe, DuplicateMergeLastRankWins) {
  // HF collects merges into a HashMap, so a repeated pair keeps its last rank: (a,b) ranks 2,
  // after (b,c) at 1, so "abc" -> a + bc.
  Tokenizer tok =
      Build(R"({"<unk>":0,"a":1,"b":2,"c":3,"ab":4,"bc":5})", R"([["a","b"],["b","c"],["a","b"]])");
  EXPECT_EQ(tok.Encode("abc"), (std::vector<int32_t>{1, 5}));
}

TEST(TokenizerBpe, SpacesBecomeMarkers) {
  Tokenizer tok = Build(R"({"<unk>":0,"a":1,"▁":2,"▁a":3})", R"([["▁","a"]])");
  EXPECT_EQ(tok.Encode(" a a"), (std::vector<int32_t>{3, 3}));
  EXPECT_EQ(tok.Encode("a  "), (std::vector<int32_t>{1, 2, 2}));
  EXPECT_EQ(tok.Decode(tok.Encode(" a a")), " a a");
}

TEST(TokenizerBpe, ByteFallbackWithPendingUnkFollowsHfOrder) {
  // HF merge_word: 'é' (no vocab entry, no byte tokens) leaves a pending <unk>; 'c' then falls
  // back to <0x63> without flushing it; the pending <unk> is emitted before the next vocab char.
  Tokenizer tok = Build(R"({"<unk>":0,"a":1,"<0x63>":2})", "[]", true, /*byte_fallback=*/true);
  EXPECT_EQ(tok.Encode("\xC3\xA9"
                       "ca"),
            (std::vector<int32_t>{2, 0, 1}));
  EXPECT_EQ(tok.Encode("c"), (std::vector<int32_t>{2}));
}

TEST(TokenizerBpe, NoUnkTokenDropsUnknownCharacters) {
  Parts p;
  p.vocab = R"({"a":0})";
  p.merges = "[]";
  p.added = "[]";
  p.model_options = R"("type":"BPE","unk_token":null)";
  Tokenizer tok = Tokenizer::FromJson(p.Json());
  EXPECT_EQ(tok.Encode("xax"), (std::vector<int32_t>{0}));
}

TEST(TokenizerBpe, IgnoreMergesTakesWholeWord) {
  // With ignore_merges a word that is itself in the vocab is one token even if merges would not
  // build it (no merge produces "abc" here).
  Parts p;
  p.vocab = R"({"<unk>":0,"a":1,"b":2,"c":3,"abc":4,"ab":5})";
  p.merges = R"([["a","b"]])";
  p.added = "[]";
  p.model_options = R"("type":"BPE","unk_token":"<unk>","ignore_merges":true)";
  Tokenizer tok = Tokenizer::FromJson(p.Json());
  EXPECT_EQ(tok.Encode("abc"), (std::vector<int32_t>{4}));
  EXPECT_EQ(tok.Encode("abca"), (std::vector<int32_t>{5, 3, 1}));
}

TEST(TokenizerBpe, AddedTokensLeftmostLongest) {
  Parts p;
  p.vocab = R"({"<unk>":0,"a":1,"<x>":2,"<x><y>":3,"<y>":4})";
  p.merges = "[]";
  p.added = R"([{"id":2,"content":"<x>","special":true,"normalized":false},)"
            R"({"id":3,"content":"<x><y>","special":false,"normalized":false},)"
            R"({"id":4,"content":"<y>","special":false,"normalized":false}])";
  Tokenizer tok = Tokenizer::FromJson(p.Json());
  EXPECT_EQ(tok.Encode("a<x><y>a<x>a"), (std::vector<int32_t>{1, 3, 1, 2, 1}));
  // As text, the special <x> is skipped but the longest match at that position was <x><y>,
  // which is not special, so it still matches.
  EXPECT_EQ(tok.Encode("<x><y>", Tokenizer::SpecialText::kAsText), (std::vector<int32_t>{3}));
  // A lone special <x> as text goes through BPE: '<', 'x', '>' are unknown -> one fused <unk>.
  EXPECT_EQ(tok.Encode("<x>a", Tokenizer::SpecialText::kAsText), (std::vector<int32_t>{0, 1}));
}

TEST(TokenizerBpe, DecodeRejectsOutOfRangeIds) {
  Tokenizer tok = Tokenizer::FromJson(Parts().Json());
  std::vector<int32_t> bad = {2, 10};
  EXPECT_THROW(tok.Decode(bad), Error);
  std::vector<int32_t> neg = {-1};
  EXPECT_THROW(tok.Decode(neg), Error);
}

}  // namespace
}  // namespace gemma
