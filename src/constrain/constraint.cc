#include "constrain/constraint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>

#include "constrain/json_grammar.h"
#include "constrain/program.h"
#include "constrain/regex.h"
#include "core/json_depth.h"
#include "gemma/error.h"

namespace gemma::constrain {
namespace {

using Json = nlohmann::ordered_json;

constexpr size_t kMaxStates = 1 << 20;
// Per constraint: 32 MiB of masks at a 262k vocabulary; beyond, masks are computed, not kept.
constexpr size_t kMaxCachedMasks = 1024;

// Special-symbol numbering inside grammars.
enum SpecialSymbol { kQuote = 0, kToolOpen, kToolClose, kChannelOpen, kChannelClose, kNumSpecial };

struct VectorStack {
  std::vector<uint32_t>* v;
  void push(uint32_t x) { v->push_back(x); }
  uint32_t pop() {
    uint32_t x = v->back();
    v->pop_back();
    return x;
  }
  size_t size() const { return v->size(); }
};

struct ConstStack {  // copyable view for CanEnd
  const uint32_t* data;
  size_t n;
  void push(uint32_t) {}
  uint32_t pop() { return data[--n]; }
  size_t size() const { return n; }
};

// Frames of the mask walk: a persistent linked stack in an arena, so that every trie depth keeps
// its own stack without copying.
struct Frame {
  uint32_t ret;
  int32_t parent;
};
struct ArenaStack {
  std::vector<Frame>* arena;
  int32_t fp;
  uint32_t n;
  void push(uint32_t ret) {
    arena->push_back({ret, fp});
    fp = static_cast<int32_t>(arena->size() - 1);
    ++n;
  }
  uint32_t pop() {
    const Frame& f = (*arena)[fp];
    fp = f.parent;
    --n;
    return f.ret;
  }
  size_t size() const { return n; }
};

std::string ToolName(const Json& tool, Json* params) {
  const Json* fn = &tool;
  if (tool.contains("function")) fn = &tool["function"];
  if (!fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
    throw Error(ErrorCode::kConstraint, "tool-call constraint: every tool needs a string name");
  }
  *params = fn->contains("parameters") ? (*fn)["parameters"] : Json();
  return (*fn)["name"].get<std::string>();
}

Program BuildProgram(const ConstraintOptions& options, int inline_levels) {
  Nfa nfa;
  JsonGrammarConfig jc;
  jc.syntax = options.kind == ConstraintKind::kToolCalls ? Syntax::kGemma : Syntax::kJson;
  jc.whitespace = options.whitespace;
  jc.quote_symbol = kSpecialBase + kQuote;
  jc.any_rule = 1;
  jc.inline_levels = inline_levels;
  JsonGrammar g(&nfa, jc);
  Fragment body;
  int max_frames = options.max_depth;
  switch (options.kind) {
    case ConstraintKind::kRegex:
      body = CompileRegex(options.regex, &nfa);
      break;
    case ConstraintKind::kJson: {
      Fragment parts[] = {g.Ws(),
                          g.AnyValueBody(options.object_root ? JsonGrammar::Root::kObject
                                                             : JsonGrammar::Root::kAny),
                          g.Ws()};
      body = nfa.Concat(parts);
      max_frames = options.max_depth - 1;
      break;
    }
    case ConstraintKind::kJsonSchema: {
      Fragment parts[] = {g.Ws(), g.Schema(options.schema, options.schema), g.Ws()};
      body = nfa.Concat(parts);
      break;
    }
    case ConstraintKind::kToolCalls: {
      if (!options.tools.is_array() || options.tools.empty()) {
        throw Error(ErrorCode::kConstraint,
                    "tool-call constraint: tools must be a non-empty array");
      }
      std::vector<Fragment> calls;
      for (size_t i = 0; i < options.tools.size(); ++i) {
        Json params;
        std::string name = ToolName(options.tools[i], &params);
        // The characters chat/output_parser.cc does not read in a name (fuzz_schema found
        // "g,et_weather" constrained into a call nobody could parse).
        if (name.empty() || name.find_first_of("{}<>,: \t\r\n") != std::string::npos) {
          throw Error(ErrorCode::kConstraint, "tool-call constraint: bad tool name '" + name + "'");
        }
        Fragment args;
        if (params.is_null()) {
          args = nfa.Literal("{}");
        } else {
          if (!params.is_object() || (params.contains("type") && params["type"] != "object")) {
            throw Error(ErrorCode::kConstraint, "tool-call constraint: parameters of '" + name +
                                                    "' must be an object schema");
          }
          Json p = params;
          if (!p.contains("type")) p["type"] = "object";
          try {
            args = g.Schema(p, p);
          } catch (const Error& e) {
            throw Error(e.code(), "tool '" + name + "' parameters: " + e.what());
          }
        }
        Fragment parts[] = {nfa.Literal(name), args};
        calls.push_back(nfa.Concat(parts));
      }
      Fragment call_parts[] = {nfa.Symbol(kSpecialBase + kToolOpen), nfa.Literal("call:"),
                               nfa.Alt(calls), nfa.Symbol(kSpecialBase + kToolClose)};
      Fragment call = nfa.Concat(call_parts);
      if (options.require_tool_call) {
        body = nfa.Plus(call);
      } else {
        Fragment text = nfa.Star(nfa.Range(0, 255));
        body = nfa.Concat(text, nfa.Star(call));
      }
      break;
    }
  }
  if (options.thinking) {
    Fragment parts[] = {nfa.Symbol(kSpecialBase + kChannelOpen), nfa.Star(nfa.Range(0, 255)),
                        nfa.Symbol(kSpecialBase + kChannelClose)};
    body = nfa.Concat(nfa.Optional(nfa.Concat(parts)), body);
  }
  std::vector<Fragment> rules{body};
  if (g.used_any()) rules.push_back(g.AnyValueBody(JsonGrammar::Root::kContainer));
  return Program::Build(nfa, rules, std::max(0, max_frames), kMaxStates);
}

}  // namespace

struct MaskCache {
  std::mutex mu;
  std::vector<std::unique_ptr<std::vector<uint64_t>>> by_state;  // empty stack
  std::unordered_map<std::string, std::unique_ptr<std::vector<uint64_t>>> by_stack;
  size_t count = 0;
  std::vector<Frame> arena;        // walk scratch, guarded by mu
  std::vector<int8_t> text_state;  // per state: -1 unknown, else Program::TextLoop's answer
  std::vector<std::unique_ptr<std::vector<uint64_t>>> class_walk;  // per Constraint::walk_class_
  std::vector<const uint64_t*> short_rep;  // per walk_class_short_: a cached mask of the class
  std::vector<std::array<uint64_t, 2>> text_ascii;
};

Constraint::Constraint() = default;
Constraint::~Constraint() = default;

std::shared_ptr<const Constraint> Constraint::Compile(std::shared_ptr<const Vocabulary> vocab,
                                                      const ConstraintOptions& options) {
  if (!vocab) throw Error(ErrorCode::kInvalidArgument, "no vocabulary");
  // Before anything copies or walks them (json copies recurse): a 100,000-deep schema overflowed
  // the stack right here, in the copy of the options.
  if (JsonValueDepthExceeds(options.schema)) {
    throw Error(ErrorCode::kConstraint, "JSON Schema nests deeper than " +
                                            std::to_string(kMaxJsonDepth) +
                                            " arrays/objects (the limit)");
  }
  if (JsonValueDepthExceeds(options.tools)) {
    throw Error(ErrorCode::kConstraint, "tool declarations nest deeper than " +
                                            std::to_string(kMaxJsonDepth) +
                                            " arrays/objects (the limit)");
  }
  std::shared_ptr<Constraint> c(new Constraint());
  c->vocab_ = vocab;
  c->options_ = options;
  const auto& ids = options.ids;
  c->special_symbol_ids_ = {ids.quote, ids.tool_call_open, ids.tool_call_close, ids.channel_open,
                            ids.channel_close};
  for (int32_t id : c->special_symbol_ids_) {
    if (id < 0 || id >= vocab->size()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "special token id " + std::to_string(id) + " outside the vocabulary");
    }
  }
  // The grammar matches these ids as single symbols: they must be special tokens, or their text
  // would match too.
  std::vector<int32_t> used;
  if (options.kind == ConstraintKind::kToolCalls) {
    used = {ids.quote, ids.tool_call_open, ids.tool_call_close};
  }
  if (options.thinking) {
    used.push_back(ids.channel_open);
    used.push_back(ids.channel_close);
  }
  for (int32_t id : used) {
    if (!vocab->is_special(id)) {
      throw Error(ErrorCode::kInvalidArgument,
                  "token id " + std::to_string(id) +
                      " is used as a special token (ConstraintOptions::ids) but the vocabulary "
                      "marks it as text");
    }
  }
  if (options.max_depth < 1) throw Error(ErrorCode::kInvalidArgument, "max_depth < 1");

  // An ambiguity between a generic value and a schema alternative is resolved by expanding the
  // generic value inline one more level (at most 3).
  for (int inline_levels = 0;; ++inline_levels) {
    try {
      c->program_ = std::make_unique<Program>(BuildProgram(options, inline_levels));
      break;
    } catch (const Error& e) {
      if (inline_levels >= 3 || std::string(e.what()).find("ambiguous") == std::string::npos) throw;
    }
  }
  c->cache_ = std::make_unique<MaskCache>();
  c->cache_->by_state.resize(c->program_->num_states());
  c->cache_->text_state.assign(c->program_->num_states(), -1);
  c->walk_class_ = c->program_->WalkClasses(vocab->trie().max_depth);
  c->walk_class_short_ = c->program_->WalkClasses(Vocabulary::kShortToken);
  for (int32_t id : options.stop_ids) {
    // A stop id that is text could leak from a representative's mask: no sharing then.
    if (id >= 0 && id < vocab->size() && !vocab->is_special(id)) c->walk_class_short_.clear();
  }
  if (!c->walk_class_short_.empty()) {
    c->cache_->short_rep.resize(
        *std::max_element(c->walk_class_short_.begin(), c->walk_class_short_.end()) + 1, nullptr);
  }
  if (!c->walk_class_.empty()) {
    c->cache_->class_walk.resize(*std::max_element(c->walk_class_.begin(), c->walk_class_.end()) +
                                 1);
  }
  c->cache_->text_ascii.resize(c->program_->num_states());
  return c;
}

size_t Constraint::num_states() const { return program_->num_states(); }

size_t Constraint::cached_masks() const {
  std::lock_guard<std::mutex> lock(cache_->mu);
  return cache_->count;
}

size_t Constraint::MemoryBytes() const {
  std::lock_guard<std::mutex> lock(cache_->mu);
  size_t walks = 0;
  for (const auto& w : cache_->class_walk) walks += w ? 1 : 0;
  return sizeof(*this) + program_->MemoryBytes() + walk_class_.capacity() * 4 +
         (cache_->count + walks) * (vocab_->mask_words() * 8 + 72) +
         cache_->by_state.capacity() * 8 + cache_->class_walk.capacity() * 8 +
         cache_->text_state.capacity() * 17;
}

namespace {

inline void SetBit(uint64_t* m, int32_t id) { m[id >> 6] |= uint64_t{1} << (id & 63); }

// Tokens sharing bytes with an allowed token are allowed; the padding word is cleared.
void FinishWalk(const TokenTrie& t, uint64_t* mask) {
  for (auto [first, other] : t.duplicates) {
    if ((mask[first >> 6] >> (first & 63)) & 1) SetBit(mask, other);
  }
  mask[t.none >> 6] = 0;
}

void WalkTrie(const Program& p, const TokenTrie& t, uint32_t top,
              const std::vector<uint32_t>& stack, std::vector<Frame>* arena, uint64_t* mask) {
  const size_t n = t.nodes();
  const uint8_t* bytes = t.byte.data();
  const uint16_t* depth = t.depth.data();
  const uint32_t* end = t.end.data();
  const int32_t* tok = t.token.data();
  if (!p.has_calls() && stack.empty()) {
    // Plain DFA: one table lookup per visited node.
    std::vector<uint32_t> st(t.max_depth + 1);
    st[0] = top;
    const uint32_t* next = p.next_table();
    const uint16_t* cls = p.classes();
    const int nc = p.num_classes();
    for (size_t i = 0; i < n;) {
      uint32_t s = next[st[depth[i] - 1] * nc + cls[bytes[i]]];
      if (s == Program::kDead) {
        i = end[i];
        continue;
      }
      st[depth[i]] = s;
      SetBit(mask, tok[i]);  // `none` lands in the padding word
      ++i;
    }
    FinishWalk(t, mask);
    return;
  }
  arena->clear();
  int32_t fp = -1;
  for (uint32_t r : stack) {
    arena->push_back({r, fp});
    fp = static_cast<int32_t>(arena->size() - 1);
  }
  struct Level {
    uint32_t top;
    int32_t fp;
    uint32_t n;
  };
  std::vector<Level> st(t.max_depth + 1);
  st[0] = {top, fp, static_cast<uint32_t>(stack.size())};
  for (size_t i = 0; i < n;) {
    const Level& parent = st[depth[i] - 1];
    uint32_t s = parent.top;
    uint32_t direct = p.Next(s, bytes[i]);
    if (direct != Program::kDead) {
      st[depth[i]] = {direct, parent.fp, parent.n};
    } else {
      ArenaStack as{arena, parent.fp, parent.n};
      if (!p.Step(&s, as, bytes[i])) {
        i = end[i];
        continue;
      }
      st[depth[i]] = {s, as.fp, as.n};
    }
    SetBit(mask, tok[i]);
    ++i;
  }
  FinishWalk(t, mask);
}

}  // namespace

ConstraintState::ConstraintState(std::shared_ptr<const Constraint> constraint)
    : c_(std::move(constraint)), top_(c_->program_->start()) {}

const uint64_t* ConstraintState::AllowedTokens() {
  if (mask_) return mask_;
  if (complete_) throw Error(ErrorCode::kConstraint, "generation already complete");
  const Program& p = *c_->program_;
  const Vocabulary& v = *c_->vocab_;
  MaskCache& cache = *c_->cache_;
  std::string key;
  std::lock_guard<std::mutex> lock(cache.mu);
  std::vector<uint64_t>* hit = nullptr;
  if (stack_.empty()) {
    hit = cache.by_state[top_].get();
  } else {
    key.resize((stack_.size() + 1) * 4);
    std::memcpy(key.data(), &top_, 4);
    std::memcpy(key.data() + 4, stack_.data(), stack_.size() * 4);
    auto it = cache.by_stack.find(key);
    if (it != cache.by_stack.end()) hit = it->second.get();
  }
  if (!hit) {
    auto m = std::make_unique<std::vector<uint64_t>>(v.mask_words() + 1, 0);
    {
      auto walk = [&](uint64_t* out) {
        int8_t& text = cache.text_state[top_];
        if (text < 0) text = static_cast<int8_t>(p.TextLoop(top_, &cache.text_ascii[top_]));
        if (text > 0) {
          // Text-like state: every complete token over the looping bytes stays here.
          const TextSplit& split = v.Text(cache.text_ascii[top_], text == 2);
          std::memcpy(out, split.inside.data(), split.inside.size() * 8);
          WalkTrie(p, split.residual, top_, stack_, &cache.arena, out);
        } else {
          WalkTrie(p, v.trie(), top_, stack_, &cache.arena, out);
        }
      };
      // States that no short token can tell apart: a cached mask of one of them, cut to the short
      // tokens (which drops its special and stop bits too), plus a walk of the long tokens.
      auto short_then_long = [&](uint64_t* out) -> bool {
        const auto& ws = c_->walk_class_short_;
        if (!stack_.empty() || ws.empty() || !cache.short_rep[ws[top_]]) return false;
        const uint64_t* rep = cache.short_rep[ws[top_]];
        const uint64_t* keep = v.short_mask().data();
        for (size_t w = 0; w < v.mask_words(); ++w) out[w] = rep[w] & keep[w];
        WalkTrie(p, v.long_trie(), top_, stack_, &cache.arena, out);
        return true;
      };
      const auto& wc = c_->walk_class_;
      if (stack_.empty() && !wc.empty()) {
        // States that no token can tell apart share one walk (counted repetitions).
        auto& w = cache.class_walk[wc[top_]];
        if (!w) {
          w = std::make_unique<std::vector<uint64_t>>(v.mask_words() + 1, 0);
          if (!short_then_long(w->data())) walk(w->data());
        }
        std::memcpy(m->data(), w->data(), v.mask_words() * 8);
      } else if (!short_then_long(m->data())) {
        walk(m->data());
      }
      for (int k = 0; k < kNumSpecial; ++k) {
        uint32_t s = top_;
        std::vector<uint32_t> stk = stack_;
        VectorStack vs{&stk};
        if (p.Step(&s, vs, kSpecialBase + k)) SetBit(m->data(), c_->special_symbol_ids_[k]);
      }
      if (CanStop()) {
        for (int32_t id : c_->options_.stop_ids) {
          if (id >= 0 && id < v.size()) SetBit(m->data(), id);
        }
      }
    }
    // Checked once, when computed: a cached mask is never empty.
    bool any = false;
    for (size_t w = 0; w < v.mask_words() && !any; ++w) any = (*m)[w] != 0;
    if (!any) {
      throw Error(ErrorCode::kConstraint,
                  "dead end, no token of the vocabulary can continue the output (state " +
                      std::to_string(top_) + ", depth " + std::to_string(stack_.size()) + ")");
    }
    hit = m.get();
    if (cache.count < kMaxCachedMasks) {
      ++cache.count;
      if (stack_.empty()) {
        if (!c_->walk_class_short_.empty() && !cache.short_rep[c_->walk_class_short_[top_]]) {
          cache.short_rep[c_->walk_class_short_[top_]] = m->data();
        }
        cache.by_state[top_] = std::move(m);
      } else {
        cache.by_stack.emplace(std::move(key), std::move(m));
      }
    } else {
      overflow_ = std::move(m);
    }
  }
  mask_ = hit->data();
  return mask_;
}

void ConstraintState::AllowedTokens(std::vector<uint64_t>* out) {
  const uint64_t* m = AllowedTokens();
  out->assign(m, m + c_->vocab_->mask_words());
}

void ConstraintState::AllowedIds(std::vector<int32_t>* out) {
  const uint64_t* m = AllowedTokens();
  out->clear();
  const size_t words = c_->vocab_->mask_words();
  for (size_t w = 0; w < words; ++w) {
    uint64_t x = m[w];
    while (x) {
      int b = __builtin_ctzll(x);
      out->push_back(static_cast<int32_t>(w * 64 + b));
      x &= x - 1;
    }
  }
}

bool ConstraintState::IsAllowed(int32_t token) {
  if (token < 0 || token >= c_->vocab_->size()) return false;
  const uint64_t* m = AllowedTokens();
  return (m[token >> 6] >> (token & 63)) & 1;
}

bool ConstraintState::IsDeadEnd() {
  try {
    AllowedTokens();
    return false;
  } catch (const Error&) {
    return true;
  }
}

bool ConstraintState::CanStop() const {
  if (complete_) return false;
  return c_->program_->CanEnd(top_, ConstStack{stack_.data(), stack_.size()});
}

bool ConstraintState::StepSymbol(int symbol) {
  uint32_t s = top_;
  std::vector<uint32_t> stk = stack_;
  VectorStack vs{&stk};
  if (!c_->program_->Step(&s, vs, symbol)) return false;
  top_ = s;
  stack_.swap(stk);
  return true;
}

ConstraintState::Forced ConstraintState::ForcedContinuation(int max_bytes) const {
  Forced f;
  if (complete_) return f;
  const Program& p = *c_->program_;
  uint32_t s = top_;
  std::vector<uint32_t> stk = stack_;
  const int specials = static_cast<int>(c_->special_symbol_ids_.size());
  while (static_cast<int>(f.bytes.size()) < max_bytes &&
         !p.CanEnd(s, ConstStack{stk.data(), stk.size()})) {
    int only = -1;
    uint32_t only_s = 0;
    std::vector<uint32_t> only_stk;
    for (int sym = 0; sym < kSpecialBase + specials; ++sym) {
      uint32_t t = s;
      std::vector<uint32_t> ts = stk;
      VectorStack vs{&ts};
      if (!p.Step(&t, vs, sym)) continue;
      if (only >= 0) return Trim(std::move(f));  // two or more may follow
      only = sym;
      only_s = t;
      only_stk = std::move(ts);
    }
    if (only < 0) break;
    if (only >= kSpecialBase) {
      f.special = c_->special_symbol_ids_[only - kSpecialBase];
      break;
    }
    f.bytes.push_back(static_cast<char>(only));
    s = only_s;
    stk = std::move(only_stk);
  }
  return Trim(std::move(f));
}

ConstraintState::Forced ConstraintState::Trim(Forced f) {
  // Drop a trailing partial UTF-8 character (and the special token that would follow it).
  size_t n = f.bytes.size(), i = n;
  while (i > 0 && (static_cast<unsigned char>(f.bytes[i - 1]) & 0xC0) == 0x80) --i;
  if (i > 0) {
    const unsigned char lead = static_cast<unsigned char>(f.bytes[i - 1]);
    const size_t len = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (n - (i - 1) < len) {
      f.bytes.resize(i - 1);
      f.special = -1;
    }
  }
  return f;
}

void ConstraintState::Accept(int32_t token) {
  const Vocabulary& v = *c_->vocab_;
  auto fail = [&](const std::string& why) {
    throw Error(ErrorCode::kConstraint, "token " + std::to_string(token) + " " + why);
  };
  if (complete_) fail("after the end of the constrained output");
  if (token < 0 || token >= v.size()) fail("outside the vocabulary");
  mask_ = nullptr;
  if (v.is_special(token)) {
    for (int k = 0; k < kNumSpecial; ++k) {
      if (c_->special_symbol_ids_[k] == token && StepSymbol(kSpecialBase + k)) return;
    }
    for (int32_t id : c_->options_.stop_ids) {
      if (id == token) {
        if (!CanStop()) fail("(a stop token) is not allowed before the output is complete");
        complete_ = true;
        return;
      }
    }
    fail("(a special token) is not allowed here");
  }
  const std::string& b = v.bytes(token);
  if (b.empty()) fail("has no bytes");
  uint32_t s = top_;
  std::vector<uint32_t> stk = stack_;
  VectorStack vs{&stk};
  for (unsigned char ch : b) {
    if (!c_->program_->Step(&s, vs, ch)) fail("is not allowed here");
  }
  top_ = s;
  stack_.swap(stk);
}

void ConstraintState::AcceptBytes(std::string_view bytes) {
  if (complete_) throw Error(ErrorCode::kConstraint, "bytes after the end");
  mask_ = nullptr;
  uint32_t s = top_;
  std::vector<uint32_t> stk = stack_;
  VectorStack vs{&stk};
  for (unsigned char ch : bytes) {
    if (!c_->program_->Step(&s, vs, ch)) {
      throw Error(ErrorCode::kConstraint, "bytes not allowed here");
    }
  }
  top_ = s;
  stack_.swap(stk);
}

size_t ConstraintState::MinRemainingSymbols() const {
  if (CanStop()) return 0;
  std::call_once(c_->distances_once_, [&] { c_->distances_ = c_->program_->Distances(); });
  size_t total = c_->distances_[top_];
  for (uint32_t r : stack_) total += c_->distances_[r];
  return total;
}

void MaskLogits(const uint64_t* mask, std::span<float> logits) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!((mask[i >> 6] >> (i & 63)) & 1)) logits[i] = ninf;
  }
}

}  // namespace gemma::constrain
