#include "constrain/json_grammar.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "constrain/json_schema.h"
#include "constrain/regex.h"
#include "gemma/error.h"

namespace gemma::constrain {

JsonGrammar::JsonGrammar(Nfa* nfa, JsonGrammarConfig config)
    : nfa_(nfa), cfg_(config), inline_left_(config.inline_levels) {}

Fragment JsonGrammar::Ws() {
  if (cfg_.syntax == Syntax::kJson && cfg_.whitespace == Whitespace::kAny) {
    uint32_t s = nfa_->AddState();
    for (char c : {' ', '\t', '\n', '\r'}) nfa_->AddEdge(s, c, c, s);
    return {s, s};
  }
  return nfa_->Empty();
}

Fragment JsonGrammar::Open(char c) { return nfa_->Concat(nfa_->Literal(std::string(1, c)), Ws()); }
Fragment JsonGrammar::Close(char c) { return nfa_->Concat(Ws(), nfa_->Literal(std::string(1, c))); }

Fragment JsonGrammar::Sep(char c) {
  if (cfg_.syntax == Syntax::kJson && cfg_.whitespace == Whitespace::kCompact) {
    return nfa_->Literal(std::string(1, c) + " ");
  }
  Fragment parts[] = {Ws(), nfa_->Literal(std::string(1, c)), Ws()};
  return nfa_->Concat(parts);
}

Fragment JsonGrammar::Quote() {
  if (cfg_.syntax == Syntax::kGemma) return nfa_->Symbol(cfg_.quote_symbol);
  return nfa_->Literal("\"");
}

Fragment JsonGrammar::StringChar() {
  if (cfg_.syntax == Syntax::kGemma) return nfa_->CodePoints(0, 0x10FFFF);
  std::pair<uint32_t, uint32_t> plain[] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}};
  Fragment p = nfa_->CodePointSet(plain);
  // Escapes; \u excludes surrogates so that every parser accepts the result.
  uint32_t s = nfa_->AddState(), e = nfa_->AddState(), u = nfa_->AddState();
  uint32_t bs = nfa_->AddState();
  nfa_->AddEdge(s, '\\', '\\', bs);
  for (char c : std::string("\"\\/bfnrt")) nfa_->AddEdge(bs, c, c, e);
  nfa_->AddEdge(bs, 'u', 'u', u);
  uint32_t h1 = nfa_->AddState(), h1d = nfa_->AddState(), h2 = nfa_->AddState(),
           h3 = nfa_->AddState();
  auto hex = [&](uint32_t from, uint32_t to) {
    nfa_->AddEdge(from, '0', '9', to);
    nfa_->AddEdge(from, 'a', 'f', to);
    nfa_->AddEdge(from, 'A', 'F', to);
  };
  // First digit: not d/D -> any three; d/D -> second digit 0-7.
  nfa_->AddEdge(u, '0', '9', h1);
  nfa_->AddEdge(u, 'a', 'c', h1);
  nfa_->AddEdge(u, 'A', 'C', h1);
  nfa_->AddEdge(u, 'e', 'f', h1);
  nfa_->AddEdge(u, 'E', 'F', h1);
  nfa_->AddEdge(u, 'd', 'd', h1d);
  nfa_->AddEdge(u, 'D', 'D', h1d);
  hex(h1, h2);
  nfa_->AddEdge(h1d, '0', '7', h2);
  hex(h2, h3);
  hex(h3, e);
  Fragment esc{s, e};
  Fragment alts[] = {p, esc};
  return nfa_->Alt(alts);
}

Fragment JsonGrammar::AnyString() {
  Fragment parts[] = {Quote(), nfa_->Star(StringChar()), Quote()};
  return nfa_->Concat(parts);
}

Fragment JsonGrammar::Number() {
  // At most 18 integer digits and 2 exponent digits: every output stays a finite double.
  return CompileRegex("-?(0|[1-9][0-9]{0,17})(\\.[0-9]+)?([eE][+-]?[0-9]{1,2})?", nfa_);
}

// At most 18 digits: fits int64 (and the JSON parsers that map integers to it).
Fragment JsonGrammar::Integer() { return CompileRegex("-?(0|[1-9][0-9]{0,17})", nfa_); }

Fragment JsonGrammar::StringBytes(const std::string& s) {
  if (cfg_.syntax == Syntax::kGemma) {
    Fragment parts[] = {Quote(), nfa_->Literal(s), Quote()};
    return nfa_->Concat(parts);
  }
  return nfa_->Literal(Json(s).dump(-1, ' ', false, Json::error_handler_t::replace));
}

Fragment JsonGrammar::Key(const std::string& name) {
  if (cfg_.syntax == Syntax::kGemma) {
    // A bare key runs to the ':' and may not hold a structural character or edge whitespace
    // (chat/output_parser.cc); any other name is written <|"|>-quoted, which the parser also
    // reads. (fuzz/fuzz_schema.cc found "locat]ion" written bare: a tool call nobody could parse.)
    if (name.find("<|\"|>") != std::string::npos) {
      throw Error(ErrorCode::kConstraint, "property name '" + name +
                                              "' holds <|\"|> and cannot be written as a Gemma "
                                              "tool-call key");
    }
    const bool bare = !name.empty() && name.find_first_of("{}[],:") == std::string::npos &&
                      !std::isspace(static_cast<unsigned char>(name.front())) &&
                      !std::isspace(static_cast<unsigned char>(name.back()));
    return bare ? nfa_->Literal(name) : StringBytes(name);
  }
  return StringBytes(name);
}

Fragment JsonGrammar::AnyKey() {
  if (cfg_.syntax == Syntax::kGemma) return CompileRegex("[A-Za-z_][A-Za-z0-9_]*", nfa_);
  return AnyString();
}

Fragment JsonGrammar::Value(const Json& v) {
  switch (v.type()) {
    case Json::value_t::string:
      return StringBytes(v.get<std::string>());
    case Json::value_t::array: {
      std::vector<Fragment> parts{Open('[')};
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) parts.push_back(Sep(','));
        parts.push_back(Value(v[i]));
      }
      parts.push_back(Close(']'));
      return nfa_->Concat(parts);
    }
    case Json::value_t::object: {
      std::vector<std::string> keys;
      for (auto it = v.begin(); it != v.end(); ++it) keys.push_back(it.key());
      if (cfg_.syntax == Syntax::kGemma) std::sort(keys.begin(), keys.end());
      std::vector<Fragment> parts{Open('{')};
      for (size_t i = 0; i < keys.size(); ++i) {
        if (i) parts.push_back(Sep(','));
        parts.push_back(Key(keys[i]));
        parts.push_back(Sep(':'));
        parts.push_back(Value(v[keys[i]]));
      }
      parts.push_back(Close('}'));
      return nfa_->Concat(parts);
    }
    default:
      return nfa_->Literal(v.dump());
  }
}

Fragment JsonGrammar::Scalar() {
  Fragment alts[] = {AnyString(), Number(), nfa_->Literal("true"), nfa_->Literal("false"),
                     nfa_->Literal("null")};
  return nfa_->Alt(alts);
}

Fragment JsonGrammar::AnyValueCall() {
  if (inline_left_ > 0) {
    --inline_left_;
    Fragment alts[] = {Scalar(), AnyValueBody(Root::kContainer)};
    Fragment f = nfa_->Alt(alts);
    ++inline_left_;
    return f;
  }
  used_any_ = true;
  Fragment alts[] = {Scalar(), nfa_->Symbol(kCallBase + cfg_.any_rule)};
  return nfa_->Alt(alts);
}

Fragment List(JsonGrammar* g, Nfa* nfa, const std::function<Fragment(char)>& open,
              const std::function<Fragment(char)>& close, const std::function<Fragment(char)>& sep,
              char o, char c, int min, int max, int loop_from,
              const std::function<Fragment(int)>& make) {
  Fragment op = open(o);
  uint32_t close_state = nfa->AddState();
  std::optional<uint32_t> e = op.end, f;
  for (int i = 0;; ++i) {
    if (i >= min) {
      if (e) nfa->AddEpsilon(*e, close_state);
      if (f) nfa->AddEpsilon(*f, close_state);
    }
    if (max >= 0 && i >= max) break;
    uint32_t p = nfa->AddState();
    if (e) nfa->AddEpsilon(*e, p);
    if (f) {
      Fragment s = sep(',');
      nfa->AddEpsilon(*f, s.start);
      nfa->AddEpsilon(s.end, p);
    }
    Fragment item = make(i);
    nfa->AddEpsilon(p, item.start);
    e.reset();
    if (max < 0 && i >= loop_from && i >= min) {
      Fragment s = sep(',');
      nfa->AddEpsilon(item.end, s.start);
      nfa->AddEpsilon(s.end, p);
      nfa->AddEpsilon(item.end, close_state);
      break;
    }
    f = item.end;
  }
  Fragment cl = close(c);
  nfa->AddEpsilon(close_state, cl.start);
  return {op.start, cl.end};
}

Fragment JsonGrammar::AnyValueBody(Root root) {
  auto open = [this](char c) { return Open(c); };
  auto close = [this](char c) { return Close(c); };
  auto sep = [this](char c) { return Sep(c); };
  std::vector<Fragment> alts;
  alts.push_back(List(this, nfa_, open, close, sep, '{', '}', 0, -1, 0, [this](int) {
    Fragment parts[] = {AnyKey(), Sep(':'), AnyValueCall()};
    return nfa_->Concat(parts);
  }));
  if (root == Root::kObject) return alts[0];
  alts.push_back(List(this, nfa_, open, close, sep, '[', ']', 0, -1, 0,
                      [this](int) { return AnyValueCall(); }));
  if (root == Root::kAny) alts.push_back(Scalar());
  return nfa_->Alt(alts);
}

}  // namespace gemma::constrain
