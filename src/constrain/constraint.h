// Constrained decoding: compile a regex / JSON / JSON Schema / Gemma 4 tool-call constraint once
// per request configuration, then walk it token by token.
//
// How the engine uses it (once per tokenizer, then per request, then per generated token):
//
//   // bytes[id] = tokenizer.TokenBytes(id); special[id] = tokenizer.IsSpecial(id)
//   auto vocab = std::make_shared<constrain::Vocabulary>(bytes, special);
//
//   constrain::ConstraintOptions opt;
//   opt.kind = constrain::ConstraintKind::kJsonSchema;
//   opt.schema = nlohmann::ordered_json::parse(request_schema);
//   auto c = constrain::Constraint::Compile(vocab, opt);  // Error(kConstraint / kUnsupported)
//
//   constrain::ConstraintState st(c);  // one per generation
//   for (;;) {
//     const uint64_t* mask = st.AllowedTokens();  // Error(kConstraint) at a dead end
//     constrain::MaskLogits(mask, logits);         // first, before top-k / top-p / min-p
//     int32_t id = sample(logits);                 // or backend select(allowed ids): AllowedIds()
//     st.Accept(id);                               // Error(kConstraint) if id was not allowed
//     if (st.IsComplete()) break;                  // a stop id was accepted
//   }
//
// Masks: bit i of word i / 64, vocab().mask_words() words. Stop ids (options.stop_ids) are allowed
// only where the output can end (CanStop()); the special tokens named in options.ids only where
// the grammar places them; every other special token never. Masks are cached in the Constraint per
// automaton state (plus pushdown stack), so a Constraint reused across requests gets faster; the
// Constraint is thread-safe (its cache is locked), a ConstraintState is not.
// Regex syntax: regex.h. JSON Schema subset and generation choices: json_grammar.h.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "constrain/vocabulary.h"

namespace gemma::constrain {

enum class ConstraintKind {
  kRegex,       // options.regex, full match
  kJson,        // any JSON value (or object root)
  kJsonSchema,  // options.schema
  kToolCalls,   // options.tools in Gemma 4's native tool-call syntax
};

enum class Whitespace {
  kNone,     // {"a":1,"b":[1,2]}
  kCompact,  // {"a": 1, "b": [1, 2]}   (one space after ':' and ',')
  kAny,      // any JSON whitespace between tokens, and around the root value
};

// Gemma 4 special-token ids used by the tool-call grammar and the thinking prefix (never their
// text).
struct SpecialIds {
  int32_t tool_call_open = 48;   // <|tool_call>
  int32_t tool_call_close = 49;  // <tool_call|>
  int32_t quote = 52;            // <|"|>
  int32_t channel_open = 100;    // <|channel>
  int32_t channel_close = 101;   // <channel|>
};

struct ConstraintOptions {
  ConstraintKind kind = ConstraintKind::kJson;
  std::string regex;
  nlohmann::ordered_json
      schema;  // kJsonSchema (ordered: JSON output keeps the declared property order)
  // kToolCalls: [{"type":"function","function":{"name":..,"parameters":{..}}}] or [{"name":..,
  // "parameters":..}]. Arguments follow each tool's parameters schema (same subset as kJsonSchema)
  // in Gemma syntax: bare keys in sorted order, strings as <|"|>text<|"|>, no whitespace.
  nlohmann::ordered_json tools;
  // kToolCalls: true = the answer is one or more tool calls; false = free text, optionally followed
  // by tool calls.
  bool require_tool_call = false;
  // Allow (not force) a leading reasoning channel <|channel>...<channel|>; its content is
  // unconstrained and the grammar starts right after <channel|>.
  bool thinking = false;
  bool object_root = false;  // kJson: the root must be an object
  Whitespace whitespace = Whitespace::kNone;
  // Maximum nesting of unconstrained JSON containers: kJson: of the document ([[1]] has depth 2);
  // kJsonSchema / kToolCalls: of containers inside values the schema leaves unconstrained.
  int max_depth = 20;
  SpecialIds ids;
  std::vector<int32_t> stop_ids = {1, 106, 50};  // <eos>, <turn|>, <|tool_response>
};

class Program;
struct MaskCache;

class Constraint {
 public:
  // Compiles at configuration time; unsupported regex/schema constructs throw Error(kConstraint)
  // (or kUnsupported for valid JSON Schema outside the subset) naming the keyword and JSON pointer.
  static std::shared_ptr<const Constraint> Compile(std::shared_ptr<const Vocabulary> vocab,
                                                   const ConstraintOptions& options);
  ~Constraint();

  const Vocabulary& vocab() const { return *vocab_; }
  const Program& program() const { return *program_; }
  const ConstraintOptions& options() const { return options_; }
  // Automaton states (all rules).
  size_t num_states() const;
  // Bytes held: automaton tables plus cached masks so far.
  size_t MemoryBytes() const;
  size_t cached_masks() const;

 private:
  friend class ConstraintState;
  Constraint();
  std::shared_ptr<const Vocabulary> vocab_;
  std::unique_ptr<Program> program_;
  std::unique_ptr<MaskCache> cache_;
  ConstraintOptions options_;
  std::vector<int32_t> special_symbol_ids_;  // symbol k -> token id
  std::vector<uint32_t> walk_class_;         // Program::WalkClasses(longest token), may be empty
  std::vector<uint32_t> walk_class_short_;   // Program::WalkClasses(Vocabulary::kShortToken)
  mutable std::once_flag distances_once_;
  mutable std::vector<uint32_t> distances_;
};

class ConstraintState {
 public:
  explicit ConstraintState(std::shared_ptr<const Constraint> constraint);

  // The allowed-token bitmask for the next position (vocab_size bits). Valid until the next
  // Accept(). Throws Error(kConstraint) at a dead end (no token, not even a stop id, is allowed).
  const uint64_t* AllowedTokens();
  // Same, copied into `out` (resized to the mask's words).
  void AllowedTokens(std::vector<uint64_t>* out);
  // The allowed ids, ascending (for a backend's select(allowed ids)).
  void AllowedIds(std::vector<int32_t>* out);
  bool IsAllowed(int32_t token);

  // Advances by one token. Throws Error(kConstraint) if the token is not allowed here.
  void Accept(int32_t token);
  // Advances by raw bytes (prompt prefill of a partial answer, tests). Throws if illegal.
  void AcceptBytes(std::string_view bytes);
  // A stop id would be legal now.
  bool CanStop() const;
  // A stop id has been accepted; nothing more may follow.
  bool IsComplete() const { return complete_; }
  // No token at all is allowed (AllowedTokens() would throw).
  bool IsDeadEnd();
  // Lower bound on the symbols still needed to be able to stop (0 when CanStop()); lets test and
  // benchmark generators steer to completion.
  size_t MinRemainingSymbols() const;
  // What the constraint forces from here (jump-forward): while the output cannot end and exactly
  // one symbol may follow, that symbol, up to max_bytes bytes. `bytes` is cut at the last whole
  // UTF-8 character; a forced grammar special token (a tool-call quote, frame) ends the walk and
  // is `special` (its token id; -1 when none).
  struct Forced {
    std::string bytes;
    int32_t special = -1;
  };
  Forced ForcedContinuation(int max_bytes) const;

 private:
  bool StepSymbol(int symbol);
  static Forced Trim(Forced f);
  std::shared_ptr<const Constraint> c_;
  uint32_t top_;
  std::vector<uint32_t> stack_;  // return states, outermost first
  bool complete_ = false;
  const uint64_t* mask_ = nullptr;
  std::shared_ptr<std::vector<uint64_t>> overflow_;  // a mask the full cache could not keep
};

// Sets logits of disallowed tokens to -infinity.
void MaskLogits(const uint64_t* mask, std::span<float> logits);

}  // namespace gemma::constrain
