// Gemma's tokenizer: a Hugging Face `tokenizer.json` (BPE with merges and byte fallback) loaded
// and applied exactly as HF `tokenizers` does for the Gemma 3 / Gemma 4 configuration.
//
// Supported configuration (anything else is rejected at load time with gemma::Error(kTokenizer)
// naming the field):
//   normalizer     {"type":"Replace","pattern":{"String":" "},"content":"▁"}
//   pre_tokenizer  null, or {"type":"Split","pattern":{"String":" "},"behavior":<any>,
//                  "invert":false} (after the normalizer no ' ' is left, so it never splits)
//   model          {"type":"BPE", dropout null or 0, continuing_subword_prefix and
//                  end_of_word_suffix null or "", unk_token, fuse_unk, byte_fallback,
//                  ignore_merges, vocab {piece: id} with dense ids 0..N-1, merges as
//                  [["a","b"],...] or ["a b",...]}
//   decoder        Sequence[Replace "▁"->" ", ByteFallback, Fuse]
//   added_tokens   any count; lstrip, rstrip, single_word false; normalized false; ids as HF
//                  assigns them (the vocab id of the content, else the next id after the vocab)
//   truncation, padding null; post_processor is ignored (Encode never adds <bos>).
//
// Encoding pipeline (HF semantics):
//   1. Added tokens (special or not) are found in the raw text, leftmost-longest, and emitted as
//      their ids; they are never split or merged with neighbours.
//   2. Each text span between them is normalized (' ' -> U+2581 '▁') and is one BPE word: every
//      character is looked up in the vocab, else becomes its UTF-8 bytes as <0xNN> tokens (byte
//      fallback), else <unk>; then merges are applied lowest rank first, leftmost on ties.
//
// Invalid UTF-8 input (HF cannot receive it: Rust &str): every byte that is not part of a
// well-formed UTF-8 sequence (Unicode 15 table 3-7) is treated as a one-byte character that is
// not in the vocab, i.e. it becomes its byte-fallback token <0xNN>. So, with all 256 <0xNN>
// tokens in the vocab (as in Gemma's), Decode(Encode(s)) == s for any byte string s that contains
// no '▁' (U+2581), which decodes to ' ' as in HF.
//
// Speed (same results as plain BPE over the whole span, tested): a span is cut between two
// characters that are never adjacent inside any vocab piece (no token can straddle the cut), and
// short words are memoized in a per-thread cache (about 420 KB per encoding thread).
//
// Thread safety: a Tokenizer is immutable after loading; Encode/Decode may be called from any
// number of threads. Copies share the loaded tables (cheap to copy).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gemma {

namespace tokenizer_internal {
struct Access;  // tokenizer_impl.h: the room's own code and tests reach the loaded tables
}

class Tokenizer {
 public:
  // How text that spells a special token (added_tokens with special=true) is encoded.
  enum class SpecialText {
    kMatch,   // as the special token's id (HF default: encode_special_tokens=False)
    kAsText,  // as ordinary text (HF encode_special_tokens=True); non-special added tokens still
              // match. Use it for untrusted user content inside a chat template.
  };

  // Loads a tokenizer.json. Throws gemma::Error(kIo) when the file cannot be read and
  // gemma::Error(kTokenizer) when its content is malformed or uses an unsupported option.
  static Tokenizer FromFile(const std::string& path);
  static Tokenizer FromJson(std::string_view json, std::string_view origin = "<memory>");

  // Text -> ids. No <bos> is added. Never throws for any input bytes.
  std::vector<int32_t> Encode(std::string_view text,
                              SpecialText special = SpecialText::kMatch) const;
  // Appends to `out` instead of returning a new vector.
  void EncodeTo(std::string_view text, std::vector<int32_t>* out,
                SpecialText special = SpecialText::kMatch) const;

  // Ids -> bytes: the concatenation of TokenBytes(id). For ids whose bytes join into valid UTF-8
  // this equals HF decode(ids, skip_special_tokens=False). Where HF's ByteFallback decoder sees a
  // run of <0xNN> tokens that is not valid UTF-8 it prints one U+FFFD per byte; this returns the
  // raw bytes (use StreamDecoder for display text). Throws Error(kInvalidArgument) for an id
  // outside [0, vocab_size()).
  std::string Decode(std::span<const int32_t> ids) const;

  // Number of ids: one more than the largest id of the vocab and the added tokens.
  int32_t vocab_size() const;

  // The exact bytes token `id` contributes to a decode: <0xNN> -> that byte, '▁' -> ' ',
  // special tokens -> their text. Precondition: 0 <= id < vocab_size() (asserted).
  const std::string& TokenBytes(int32_t id) const;
  // The token's string as written in tokenizer.json (added-token content for added tokens).
  const std::string& Piece(int32_t id) const;
  // True for added tokens with "special": true (<bos>, <eos>, <start_of_turn>, ...).
  bool IsSpecial(int32_t id) const;
  // True for any entry of added_tokens (special or not); these are matched before BPE.
  bool IsAdded(int32_t id) const;
  // Id of a piece string (added tokens first, then the vocab), as HF token_to_id.
  std::optional<int32_t> TokenId(std::string_view piece) const;
  // Id of the byte-fallback token <0xNN> for byte `b`, if the vocab has it.
  std::optional<int32_t> ByteToken(uint8_t b) const;

  struct Impl;

 private:
  friend struct tokenizer_internal::Access;
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Incremental decode for streaming: emits only complete UTF-8 characters and holds a trailing
// incomplete sequence until the token that completes it arrives.
//
// Replacement policy (output is always valid UTF-8):
//  - a byte that can never start or continue a well-formed sequence (a stray continuation byte,
//    0xC0, 0xC1, 0xF5..0xFF, or a lead byte followed by a byte that cannot continue it) is
//    emitted as one U+FFFD per byte, as soon as that is certain;
//  - Flush() emits a held incomplete sequence as one U+FFFD per held byte and resets.
// For ids whose bytes form valid UTF-8, the concatenated output equals Tokenizer::Decode.
// The tokenizer must outlive the decoder.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}
  // Returns the newly completed text (may be empty). Throws like Tokenizer::Decode for bad ids.
  std::string Push(int32_t id);
  // Returns whatever is held (as U+FFFD per byte) and clears the state.
  std::string Flush();
  // Bytes currently held (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;
};

}  // namespace gemma
