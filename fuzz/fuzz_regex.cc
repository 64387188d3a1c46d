// The regex compiler, differentially against RE2 (Debian's libre2): for a pattern both accept,
// the minimized DFA and RE2::FullMatch must agree on every subject the input carries (valid UTF-8
// subjects only: on invalid bytes RE2's UTF-8 mode and a byte DFA legitimately differ). A
// pattern only we accept or only RE2 accepts is not a finding (the subset is documented).
#include <fuzzer/FuzzedDataProvider.h>
#include <re2/re2.h>

#include "constrain/regex.h"
#include "core/utf8.h"  // InvalidUtf8Offset
#include "fuzz_util.h"
#include "gemma/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string pattern = in.ConsumeRandomLengthString(128);
  std::vector<std::string> subjects;
  const std::string walk = in.ConsumeRandomLengthString(64);
  while (in.remaining_bytes() && subjects.size() < 8) {
    subjects.push_back(in.ConsumeRandomLengthString(64));
  }
  gemma::constrain::Dfa dfa;
  try {
    // A small state bound keeps each execution short; past it the compiler must throw cleanly.
    dfa = gemma::constrain::RegexToDfa(pattern, 4000);
  } catch (const gemma::Error&) {
    return 0;
  }
  RE2::Options opt;
  opt.set_log_errors(false);
  RE2 re(pattern, opt);
  if (!re.ok()) return 0;
  // One more subject from a walk through our DFA steered by the input: mostly strings we accept,
  // which random subjects rarely are.
  if (!dfa.Empty()) {
    std::string s;
    uint32_t state = 0;
    for (unsigned char c : walk) {
      if (dfa.accept[state] && c < 16) break;
      int b = c;
      for (int k = 0; k < 256; ++k, b = (b + 1) & 255) {
        if (dfa.Step(state, b) != gemma::constrain::Dfa::kDead) break;
      }
      const uint32_t next = dfa.Step(state, b);
      if (next == gemma::constrain::Dfa::kDead) break;
      s.push_back(static_cast<char>(b));
      state = next;
    }
    subjects.push_back(s);
  }
  for (const std::string& s : subjects) {
    if (gemma::InvalidUtf8Offset(s) != std::string::npos) continue;
    const bool ours = dfa.Matches(s);
    const bool theirs = RE2::FullMatch(s, re);
    GEMMA_FUZZ_CHECK(ours == theirs, "/" + gemma::fuzz::Escape(pattern) + "/ on \"" +
                                         gemma::fuzz::Escape(s) + "\": ours " +
                                         std::to_string(ours) + ", RE2 " + std::to_string(theirs));
  }
  return 0;
}
